"""``gap_histograms`` (migration 0030): every content gap stored in ``chunk_arrays`` is counted, at each step, in
the heatmap row and the log bucket the migration documents, checked against a Python reading of the raw chunks;
the migration's copy of chunks stored before it counts what the writer counts; a replayed insert is not counted
twice."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter

import pyarrow as pa
import pytest

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import CHUNK_ARRAYS
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.rollups import gap_histograms
from streamscope_ingest.store import migrations
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import T0, store_spans, stream_span, trace_request

S = 1_000_000_000  # ns
STEPS_S = (5, 60, 300, 3600)
ITL_BOUNDS_MS = (10, 25, 50, 100, 200, 400, 800, 1600, 3200)
ROWS_MS = (*ITL_BOUNDS_MS, 65535)
RATIO = 1.01
KEY = "step, side, toUnixTimestamp(interval_start), model, itl_upper_ms, gap_bucket"


def spans():
    """Gaps on and around the heatmap's bounds, two chunks at once (a gap of 0), one over every bound, on two
    sides and two models, streams starting in different 5 s, minute and hour intervals."""
    offsets = [0, 10, 20, 20, 45, 95, 95.001, 295, 4295, 4305.5, 4306]  # gaps 10, 10, 0, 25, 50, 0.001, 200, 4000 ms
    made = []
    for n, start_s in enumerate((0, 3, 7, 61, 3599, 3601)):
        for side, model in (("client", "m-1"), ("server", "m-2")):
            made.append(
                stream_span(
                    n + 1,
                    1 if side == "client" else 2,
                    side=side,
                    offsets_ms=[o * (1 + n / 7) for o in offsets],
                    tokens=[1] * len(offsets),
                    start_ns=T0 + start_s * S,
                    attributes={sc.GEN_AI_REQUEST_MODEL: model},
                )
            )
    return made


def expected(client) -> Counter:
    """The rows the migration documents, computed here from the raw chunks."""
    rows = client.query(
        "SELECT toUnixTimestamp(start_time), side, model, gap_us FROM chunks WHERE kind = 'content'"
    ).result_rows
    counted: Counter = Counter()
    for start_s, side, model, gap in rows:
        upper = 0 if gap == 0 else ROWS_MS[bisect_left(ITL_BOUNDS_MS, gap / 1000)]
        bucket = 0 if gap == 0 else math.floor(math.log(gap) / math.log(RATIO)) + 1
        for step in STEPS_S:
            counted[(step, side, start_s // step * step, model, upper, bucket)] += 1
    return counted


def _spied(count, calls: list):
    def spy(*args, **kwargs):
        calls.append(args)
        return count(*args, **kwargs)

    return spy


def stored(client) -> tuple[Counter, dict]:
    rows = client.query(f"SELECT {KEY}, sum(gaps), max(gap_max_us) FROM gap_histograms GROUP BY {KEY}").result_rows
    return Counter({tuple(row[:6]): row[6] for row in rows}), {tuple(row[:6]): row[7] for row in rows}


@pytest.mark.parametrize(
    ("slice_chunks", "slices_counted"), [(gap_histograms.SLICE_CHUNKS, 1), (1, 12), (7, 12), (30, 5)]
)
def test_every_content_gap_is_counted_at_every_step_in_its_row_and_bucket(
    store_client, monkeypatch, slice_chunks, slices_counted
):
    """Counted a slice of streams at a time (12 streams of 11 chunks): all in one, a stream a slice, whatever
    part of a stream the slice size is (a stream is never cut), or two or three streams a slice: the same rows."""
    monkeypatch.setattr(gap_histograms, "SLICE_CHUNKS", slice_chunks)
    slices = []
    monkeypatch.setattr(gap_histograms, "_counted_slice", _spied(gap_histograms._counted_slice, slices))
    store_spans(store_client, spans())
    assert len(slices) == slices_counted
    counts, longest = stored(store_client)
    assert counts == expected(store_client)
    exact_bounds = store_client.query("SELECT countIf(gap_us IN (10000, 25000)) FROM chunks").result_rows[0][0]
    assert exact_bounds > 0 and {0, 10, 25, 65535} <= {key[4] for key in counts}  # a gap on a bound: that row
    raw_longest = store_client.query("SELECT max(gap_us) FROM chunks WHERE kind = 'content'").result_rows[0][0]
    assert max(longest.values()) == raw_longest


def test_a_block_without_streams_or_without_content_counts_nothing():
    decoded = decode_traces(trace_request(spans()[:2]), tenant="t").blocks[CHUNK_ARRAYS]
    kind = decoded.schema.field("kind")
    leads_only = pa.array([[columns.KIND_LEAD] * 11] * 2, kind.type)
    no_content = decoded.set_column(decoded.schema.get_field_index("kind"), kind, leads_only)
    for block in (decoded.slice(0, 0), no_content):
        assert gap_histograms.gap_histograms(block).equals(columns.GAP_HISTOGRAMS.empty_table())
    assert gap_histograms.gap_histograms(decoded).num_rows > 0


def test_the_migrations_copy_counts_what_the_writer_counts(store_client):
    store_spans(store_client, spans())
    by_writer = stored(store_client)
    [migration] = [m for m in migrations.available() if m.name == "gap_histograms"]
    _, truncate, copy = migration.statements()
    store_client.command(truncate)
    assert stored(store_client)[0] == Counter()
    store_client.command(copy)
    assert stored(store_client) == by_writer


def test_an_insert_replayed_under_its_token_is_counted_once(store_client):
    batch = decode_traces(trace_request(spans()[:4]), tenant="t")
    writer = ClickHouseWriter(store_client)
    writer.insert(batch, token="segment-1")
    once = stored(store_client)
    writer.insert(batch, token="segment-1")  # a crash before the spool's confirmation: the segment again
    assert stored(store_client) == once and sum(once[0].values()) > 0
