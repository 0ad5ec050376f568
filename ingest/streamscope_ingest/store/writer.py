"""Write decoded blocks to ClickHouse: one Arrow insert per table, chunks before streams, idempotently.

Knows ClickHouse and nothing of OTLP. Every insert carries a deduplication token named by the caller (the
spool segment it comes from) and the table, and the tables keep a window of recent tokens (migration 0016):
writing the same segment again, after a crash between the insert and the spool's confirmation, stores
nothing twice. Spans a client sent again in a later request are dropped first (``streamscope_ingest.store.dedup``).
The content gaps of the chunks it inserts are counted into ``gap_histograms``, the per-stream figures of the
streams into ``stream_histograms`` and their sums into ``stream_totals``, in the same insert, each under a token
of its own.

At start it checks that the tables' columns are the ones ingest builds (the blocks' Arrow schemas), so a
store that was not migrated fails loudly instead of mid-write.

It inserts through one client and reads (the schema check, the repeated-span lookup) through another, so the
inserting account may be one that can do nothing else (schema/clickhouse/users.d: ``streamscope_writer``).
"""

from __future__ import annotations

import uuid

from clickhouse_connect.driver.client import Client

from streamscope.errors import SchemaMismatch
from streamscope_ingest import store
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import CHUNK_ARRAYS, DecodedBatch, concat
from streamscope_ingest.rollups.gap_histograms import gap_histograms
from streamscope_ingest.rollups.stream_histograms import stream_histograms, stream_totals
from streamscope_ingest.store.arrow_insert import insert_arrow
from streamscope_ingest.store.dedup import drop_repeated_spans

GAP_HISTOGRAMS = "gap_histograms"
STREAM_HISTOGRAMS = "stream_histograms"
STREAM_TOTALS = "stream_totals"


def table_columns(client: Client, table: str) -> list[str]:
    """The columns of ``table`` that a writer must supply (those without a DEFAULT), in order."""
    rows = client.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {table:String} "
        "AND default_kind = '' ORDER BY position",
        parameters={"table": table},
    ).result_rows
    return [name for (name,) in rows]


class ClickHouseWriter:
    """Synchronous writer; ``write`` returns once the store has the rows."""

    def __init__(self, client: Client, lookups: Client | None = None) -> None:
        """``client`` inserts; ``lookups`` (default: ``client``) reads, on its own connection."""
        self._client = client
        self._lookups = lookups or client
        with store.translated_errors():
            for table, schema in columns.TABLES.items():
                found = table_columns(self._lookups, table)
                if found != schema.names:
                    raise SchemaMismatch(
                        f"table {table} has columns {found or 'none'}, expected {schema.names}: "
                        "run `streamscope migrate` with this version of streamscope"
                    )

    def write(
        self,
        batches: list[DecodedBatch],
        token: str | None = None,
        *,
        skip: frozenset[str] = frozenset(),
        written: set[str] | None = None,
    ) -> int:
        """Insert the batches' rows, one table at a time in ``columns.TABLES`` order, as one insert per table
        deduplicated by ``token`` (None: a one-off insert, never taken for a repeat); returns how many repeated
        spans were left out. Raises WriteError or RetryableWriteError.

        Chunks go before streams (a stream row is the marker that its chunks are complete) and the request log
        goes last (a logged request's rows are all in), whatever order merged batches listed them in. Tables in
        ``skip`` are left out (an insert of the same rows under another token stored them); each table stored is
        added to ``written`` as it goes in, so a caller whose insert failed part way knows which are in.
        """
        with store.translated_errors(writing=True):
            batches, repeated = drop_repeated_spans(self._lookups, batches)
        self.insert(concat(batches), token, skip=skip, written=written)
        return repeated

    def insert(
        self,
        batch: DecodedBatch,
        token: str | None = None,
        *,
        skip: frozenset[str] = frozenset(),
        written: set[str] | None = None,
    ) -> None:
        """Insert ``batch``'s rows as they are (no lookup), through the inserting client only."""
        token = token or uuid.uuid4().hex
        blocks = dict(batch.blocks)
        arrays = blocks.get(CHUNK_ARRAYS)
        if arrays is not None and arrays.num_rows and GAP_HISTOGRAMS not in skip:
            blocks[GAP_HISTOGRAMS] = gap_histograms(arrays)
        streams = blocks.get("streams")
        if streams is not None and streams.num_rows:
            if STREAM_HISTOGRAMS not in skip:
                blocks[STREAM_HISTOGRAMS] = stream_histograms(streams)
            if STREAM_TOTALS not in skip:
                blocks[STREAM_TOTALS] = stream_totals(streams)
        with store.translated_errors(writing=True):
            for table in columns.TABLES:
                block = blocks.get(table)
                if table not in skip and block is not None and block.num_rows:
                    if table == CHUNK_ARRAYS:
                        block = columns.without_zero_defaults(block)
                    settings = {"insert_deduplication_token": f"{token}-{table}"}
                    insert_arrow(self._client, table, block, settings)
                if written is not None:
                    written.add(table)
