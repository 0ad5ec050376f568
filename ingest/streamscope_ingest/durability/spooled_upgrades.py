"""Blocks a collector of an earlier version spooled, made what this version writes, so that a collector upgraded
with segments still pending stores them rather than setting them aside.

Three upgrades, each for frames written before a migration changed what decode builds: chunk ids as bytes
(migration 0017), streams' content chunks counted by tokens (0019), one row a stream of chunk arrays (0020). They
are kept through the 0.1 releases; 0.2 may drop them, its upgrade notes asking to drain the spool first (stop
sending, wait until ``streamscope_collector_spool_segments`` reads 0).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import CHUNK_ARRAYS, CHUNKS, DecodedBatch
from streamscope_ingest.decode.timeline import content_chunks_by_tokens

_COUNTS = "content_chunks_by_tokens"
"""The streams column added by migration 0019: blocks spooled before it lack it."""


def block_as_now(table: str, block: pa.Table) -> tuple[str, pa.Table]:
    """A spooled block of ``table`` as this version decodes it, and the table it now goes to."""
    if table == CHUNKS:  # spooled before migration 0020, one row a chunk
        return CHUNK_ARRAYS, _chunk_rows_as_arrays(block)
    return table, block


def batch_as_now(batch: DecodedBatch) -> DecodedBatch:
    """A spooled batch with what its blocks lack made from the others (its streams' counts from its chunks)."""
    streams = batch.blocks.get("streams")
    if streams is not None and _COUNTS not in streams.column_names:
        batch.blocks["streams"] = _streams_with_chunks_by_tokens(streams, batch.blocks.get(CHUNK_ARRAYS))
    return batch


def _streams_with_chunks_by_tokens(streams: pa.Table, chunks: pa.Table | None) -> pa.Table:
    """A streams block spooled before migration 0019, with each stream's content chunks counted by token count
    from the chunks decode wrote beside it (a batch holds its streams' chunks, matched here by id)."""
    chunks = chunks if chunks is not None else columns.CHUNKS.empty_table()
    owner = pc.index_in(
        columns.span_keys(chunks["tenant"], chunks["trace_id_bytes"], chunks["span_id_bytes"], pa.binary()),
        value_set=columns.span_keys(
            streams["tenant"],
            columns.ids_as_bytes(streams["trace_id"], "trace_id_bytes"),
            columns.ids_as_bytes(streams["span_id"], "span_id_bytes"),
            pa.binary(),
        ),
    )
    kinds, tokens = chunks["kind"].combine_chunks(), chunks["tokens"].combine_chunks()
    chunk_owner = owner.take(pc.list_parent_indices(kinds))  # each chunk's stream in ``streams``
    known = chunk_owner.is_valid()
    histograms = content_chunks_by_tokens(
        pc.filter(chunk_owner, known).to_numpy(),
        pc.filter(pc.list_flatten(kinds), known).to_numpy(),
        pc.filter(pc.list_flatten(tokens), known).to_numpy(),
        streams.num_rows,
    )
    return streams.add_column(columns.STREAMS.get_field_index(_COUNTS), _COUNTS, histograms.map_array())


def _chunk_rows_as_arrays(block: pa.Table) -> pa.Table:
    """A chunks block spooled before migration 0020 (one row a chunk, in stream order) as a block of
    chunk_arrays: a collector upgraded with segments still pending writes them, rather than setting them aside."""
    if "trace_id" in block.column_names:
        block = _chunk_ids_as_bytes(block)
    firsts = pa.array(np.flatnonzero(block["seq"].to_numpy() == 0))
    offsets = pa.array(np.append(firsts, block.num_rows).astype(np.int32))
    values = {}
    kept = [f for f in columns.CHUNKS_DECODED if f.name in columns.CHUNKS.names or f.name in block.column_names]
    for field in kept:
        column = block[field.name].combine_chunks()
        if pa.types.is_list(field.type):
            values[field.name] = pa.ListArray.from_arrays(offsets, column.cast(field.type.value_type))
        else:
            values[field.name] = column.take(firsts).cast(field.type)
    return pa.Table.from_pydict(values, schema=pa.schema(kept))


def _chunk_ids_as_bytes(block: pa.Table) -> pa.Table:
    """A chunks block spooled before migration 0017, with hex trace and span ids: their bytes instead."""
    for name in ("trace_id", "span_id"):
        as_bytes = columns.ids_as_bytes(block.column(name), f"{name}_bytes")
        block = block.set_column(block.column_names.index(name), f"{name}_bytes", as_bytes)
    return block
