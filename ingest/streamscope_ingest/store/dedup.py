"""A stream span is stored once, however often it arrives.

An exporter that lost its answer (a timeout, a collector killed after it spooled the request) sends the same
spans again, in a new request. Before a segment is inserted, each span whose stream row the store already
has, or that an earlier batch of the same segment carries (a repeat within one request is refused by
the decoder), is dropped with every row keyed by it. The writer
inserts a segment's chunks before its streams and finishes one segment before the next, so a stored stream
row means its chunks are stored too. Replays of one segment are the store's job (insert deduplication
tokens, ``streamscope_ingest.store.writer``).

The lookup reads only the batch's time window of ``streams`` (a span's start time travels with it), so its
cost follows the load, not the table's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.client import Client

from streamscope_ingest.blocks.batch import HEX_KEY, DecodedBatch, span_keys, with_spans

STREAMS = "streams"
_LOOKED_UP = [*HEX_KEY, "start_time"]
"""What the lookup reads of each batch's streams: columns every version decodes, so batches an earlier version
left in the spool go in one lookup with those decoded now."""

_STORED_KEYS = """
SELECT concat(tenant, '/', trace_id, span_id) FROM streams
WHERE tenant IN {tenants:Array(String)}
  AND start_time BETWEEN fromUnixTimestamp64Micro({first:Int64}) AND fromUnixTimestamp64Micro({last:Int64})
  AND has({span_ids:Array(UInt64)}, reinterpretAsUInt64(reverse(unhex(span_id))))
"""
"""Candidates by span id alone, bound as the numbers their hex spells (the client formats a number in C, and
escapes a string character by character in Python; a span id is about a third of a whole key's digits). A stored span
that shares only its span id with one of the batch's, or is another tenant's, is a candidate that matches no key of the
batch (keys are the tenant's: ``streamscope_ingest.blocks.batch.span_keys``)."""


def drop_repeated_spans(client: Client, batches: Sequence[DecodedBatch]) -> tuple[list[DecodedBatch], int]:
    """``batches`` without spans stored before or repeated within them; returns them and how many spans went."""
    streams = [b.blocks[STREAMS].select(_LOOKED_UP) for b in batches if b.rows(STREAMS)]
    if not streams:
        return list(batches), 0
    seen = _stored_keys(client, pa.concat_tables(streams))
    kept, dropped = [], 0
    for batch in batches:
        block = batch.blocks.get(STREAMS)
        if block is None or not block.num_rows:
            kept.append(batch)
            continue
        keys = span_keys(block).to_pylist()
        repeated = {key for key in keys if key in seen}
        seen.update(keys)
        if repeated:
            dropped += len(repeated)
            batch = with_spans(batch, sorted(repeated), keep=False)
        kept.append(batch)
    return kept, dropped


def _stored_keys(client: Client, streams: pa.Table) -> set[str]:
    micros = pc.cast(streams.column("start_time"), pa.int64())
    parameters = {
        "tenants": pc.unique(streams.column("tenant")).to_pylist(),
        "first": pc.min(micros).as_py(),
        "last": pc.max(micros).as_py(),
        "span_ids": [int(span_id, 16) for span_id in streams.column("span_id").to_pylist()],
    }
    return {key for (key,) in client.query(_STORED_KEYS, parameters=parameters).result_rows}
