"""The analytics views (stream_metrics, cancellations) on hand-built streams with answers worked by hand."""

from __future__ import annotations

import random

import pytest

from streamscope import semconv as sc
from streamscope_dashboards.panels.common import median_of
from tests.support import T0, store_spans, stream_span

MS = 1_000_000  # ns


def every(start_ms: float, step_ms: float, count: int) -> list[float]:
    return [start_ms + i * step_ms for i in range(count)]


def test_stream_metrics_by_hand(store_client):
    spans = [
        # a burst at the head, then a 1 s stall: 11 chunks of 4 tokens at 100..300 ms (44 tokens in the head),
        # then 11 chunks of 1 token at 1300..2300 ms: 220 tokens/s in the head against 11 tokens in the 2.0 s
        # after it less the 1 s stall, 11/s
        stream_span(
            1,
            1,
            side="client",
            offsets_ms=every(100, 20, 11) + every(1300, 100, 11),
            tokens=[4] * 11 + [1] * 11,
        ),
        # an even pace: 1 token every 50 ms from 100 to 2100 ms, after a 50 ms role chunk with no content
        stream_span(
            2,
            2,
            side="client",
            offsets_ms=[50, *every(100, 50, 41)],
            tokens=[0] + [1] * 41,
            attributes={sc.STREAMSCOPE_REPETITION_SCORE: 0.1},
        ),
        # a stuck loop
        stream_span(
            3,
            3,
            side="client",
            offsets_ms=every(100, 50, 5),
            tokens=[1] * 5,
            attributes={sc.STREAMSCOPE_REPETITION_SCORE: 0.8},
        ),
        # steady, 1 token every 40 ms from 100 ms, but for one 2.5 s stall after the 20th: no burst at its head
        stream_span(4, 4, side="client", offsets_ms=every(100, 40, 20) + every(3360, 40, 10), tokens=[1] * 30),
    ]
    store_spans(store_client, spans)
    rows = store_client.query(
        "SELECT head_share, head_burst_ratio, frontloaded_then_stalled, stuck_loop, first_byte_lead_us, "
        "tokens_per_s, chunks_per_s FROM stream_metrics ORDER BY trace_id"
    ).result_rows
    burst, even, loop, steady = rows
    assert burst[0] == pytest.approx(44 / 55)
    assert burst[1] == pytest.approx((44 / 0.2) / (11 / 1.0))  # 20
    assert burst[2:4] == (True, False)
    assert burst[5] == pytest.approx(55 / 2.2)
    # head: content at 100..300 ms is 5 tokens (25/s); the rest 36 tokens over 1.8 s (20/s)
    assert even[0] == pytest.approx(5 / 41)
    assert even[1] == pytest.approx((5 / 0.2) / (36 / 1.8))
    assert even[2:5] == (False, False, 50_000)
    assert (even[5], even[6]) == (pytest.approx(41 / 2.0), pytest.approx(41 / 2.0))
    assert loop[3] is True
    assert loop[1] is None  # the stream ends inside its head: no pace after it to compare with
    # head: content at 100..300 ms is 6 tokens (30/s); the rest 24 tokens over 3.42 s less the 2.5 s stall
    assert steady[1] == pytest.approx((6 / 0.2) / (24 / 0.92))  # 1.15, where the stall's time made it 4.27
    assert steady[2] is False


def test_cancellation_propagation_is_aligned_through_content(store_client):
    """The server emits 4 bytes every 100 ms; the client got 12 bytes and cancelled 20 ms after the last of
    them; the server noticed at 560 ms. It emitted byte 12 at 300 ms, so the cancel reached it
    560 - 300 - 20 = 240 ms after it was made (round trip plus reaction), whatever the hosts' clocks say."""
    server = stream_span(
        10,
        2,
        side="server",
        offsets_ms=every(100, 100, 5),
        tokens=[1] * 5,
        start_ns=T0 + 7_777 * MS,  # another host's clock: offsets are all that is compared
        attributes={
            sc.STREAMSCOPE_OUTCOME: "disconnected",
            sc.STREAMSCOPE_CANCEL_OFFSET_US: 560_000,
            sc.STREAMSCOPE_TOKENS_AFTER_CANCEL: 7,
            sc.STREAMSCOPE_NODE_NAME: "node-1",
        },
    )
    client = stream_span(
        10,
        1,
        side="client",
        offsets_ms=[130, 230, 330],
        tokens=[1] * 3,
        attributes={sc.STREAMSCOPE_OUTCOME: "cancelled", sc.STREAMSCOPE_CANCEL_OFFSET_US: 350_000},
    )
    lone = stream_span(
        11,
        1,
        side="client",
        offsets_ms=[100, 200],
        tokens=[1, 1],
        attributes={sc.STREAMSCOPE_OUTCOME: "cancelled", sc.STREAMSCOPE_CANCEL_OFFSET_US: 250_000},
    )
    completed = stream_span(12, 1, side="client", offsets_ms=[100], tokens=[1])
    store_spans(store_client, [server, client, lone, completed])
    rows = store_client.query(
        "SELECT trace_id, node_name, received_bytes, emitted_bytes, tokens_after_cancel, aligned_us, propagation_us "
        "FROM cancellations ORDER BY trace_id"
    ).result_rows
    assert [r[0][-2:] for r in rows] == ["0a", "0b"]
    assert rows[0][1:] == ("node-1", 12, 20, 7, 300_000, 240_000)
    assert rows[1][4] is None and rows[1][6] is None  # no server span: nothing to align with


def test_the_median_of_summed_token_counts_is_quantile_exacts(store_client):
    """median_of on summed per-stream maps against quantileExact(0.5) over the values themselves, for sets of
    values of either parity, with ties across the middle."""
    rng = random.Random(7)
    sets = [[rng.choice((1, 1, 2, 3, 5, 40)) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    sets += [[1, 1, 2, 2], [1, 2], [4]]  # the middle on a boundary between two values
    rows = ", ".join(f"({i}, {v})" for i, values in enumerate(sets) for v in values)
    pairs = store_client.query(
        f"""SELECT id, quantileExact(0.5)(v), {median_of("sumMap(counts)", "count()")}
        FROM (SELECT id, v, map(v, toUInt32(1)) AS counts FROM values('id UInt32, v UInt16', {rows}))
        GROUP BY id ORDER BY id"""
    ).result_rows
    assert len(pairs) == len(sets)
    assert [ours for _, _, ours in pairs] == [exact for _, exact, _ in pairs]
    assert pairs[-3][1:] == (2, 2)
