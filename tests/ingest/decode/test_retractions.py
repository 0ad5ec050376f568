"""Text a stream showed and took back: kinds, totals and how long the withdrawn text was on screen, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from streamscope import semconv as sc
from streamscope_ingest.decode.retractions import over_withdrawn, shown_before_withdrawal
from streamscope_ingest.decode.traces import decode_traces
from tests.support import event_span, store_spans, stream_span, trace_request


def withdrawing(trace: int, offsets_ms, content, retracted, tokens=None, retracted_tokens=None):
    tokens = tokens or [1 if c else 0 for c in content]
    return stream_span(
        trace,
        1,
        side="client",
        offsets_ms=offsets_ms,
        tokens=tokens,
        content_bytes=content,
        attributes={
            sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES: retracted,
            sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS: retracted_tokens or [(r + 3) // 4 for r in retracted],
        },
    )


def test_withdrawn_text_is_counted_with_how_long_it_was_shown(store_client):
    store_spans(
        store_client,
        [
            # 28 bytes shown by 160 ms; at 300 ms 9 go: chunk 3's 6 (shown at 160) and 3 of chunk 2's (at 140)
            withdrawing(1, [100, 120, 140, 160, 300, 320], [10, 6, 6, 6, 0, 5], [0, 0, 0, 0, 9, 0]),
            # a chunk that replaces 12 bytes (chunk 1's 8 and 4 of chunk 0's, shown at 50) with 4 of its own
            withdrawing(2, [50, 70, 90], [8, 8, 4], [0, 0, 12], retracted_tokens=[0, 0, 3]),
            stream_span(3, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1]),  # nothing taken back
        ],
    )
    rows = store_client.query(
        "SELECT retractions, retracted_bytes, retracted_tokens, retraction_shown_us, content_bytes "
        "FROM streams ORDER BY trace_id"
    ).result_rows
    assert rows == [(1, 9, 3, [160_000], 33), (1, 12, 3, [40_000], 20), (0, 0, 0, [], 8)]
    kinds = store_client.query(
        "SELECT trace_id, groupArray(kind), groupArray(gap_us), groupArray(retracted_bytes), groupArray(offset_us) "
        "FROM (SELECT * FROM chunk_timeline ORDER BY seq) GROUP BY trace_id ORDER BY trace_id"
    ).result_rows
    assert kinds[0][1:] == (
        ["first", "content", "content", "content", "retract", "content"],
        [100_000, 20_000, 20_000, 20_000, 140_000, 160_000],  # the retraction is no progress: 160 ms to chunk 5
        [0, 0, 0, 0, 9, 0],
        [100_000, 120_000, 140_000, 160_000, 300_000, 320_000],
    )
    assert kinds[1][1] == ["first", "content", "content"]  # a replacement carries content of its own


def test_the_events_encoding_carries_retractions_too(store_client):
    def sizes(content: int, retracted: int = 0) -> dict[str, AnyValue]:
        values = {sc.STREAMSCOPE_CHUNK_TOKENS: 1, sc.STREAMSCOPE_CHUNK_CONTENT_BYTES: content}
        if retracted:
            values |= {sc.STREAMSCOPE_CHUNK_RETRACTED_BYTES: retracted, sc.STREAMSCOPE_CHUNK_RETRACTED_TOKENS: 2}
        return {key: AnyValue(int_value=v) for key, v in values.items()}

    events = [
        (10_000, sc.CHUNK_EVENT, sizes(5)),
        (30_000, sc.CHUNK_EVENT, sizes(5)),
        (90_000, sc.CHUNK_EVENT, sizes(0, 7)),
    ]
    store_spans(store_client, [event_span(4, events)])
    assert store_client.query(
        "SELECT retractions, retracted_bytes, retracted_tokens, retraction_shown_us FROM streams"
    ).result_rows == [(1, 7, 2, [80_000])]


def test_a_chunk_that_withdraws_more_than_was_shown_rejects_its_span_only():
    good = withdrawing(5, [10, 20], [4, 4], [0, 3])
    bad = withdrawing(6, [10, 20], [4, 0], [0, 5])
    decoded = decode_traces(trace_request([good, bad]), tenant="t")
    assert [r.reason for r in decoded.rejected] == [
        f"a chunk withdraws more content than was shown before it ({sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES})"
    ]
    assert decoded.blocks["streams"]["retracted_bytes"].to_pylist() == [3]


@pytest.mark.parametrize(
    ("lengths", "content", "retracted", "bad"),
    [
        ([2, 2], [4, 0, 4, 0], [0, 4, 0, 4], [False, False]),
        ([2, 2], [4, 0, 4, 0], [0, 4, 0, 5], [False, True]),
        ([1, 2], [9, 0, 0], [0, 0, 1], [False, True]),  # one stream's content does not cover another's
        ([0, 2], [5, 0], [5, 0], [False, True]),  # no content before it: nothing to withdraw
    ],
)
def test_over_withdrawal_is_found_per_stream(lengths, content, retracted, bad):
    found = over_withdrawn(np.array(lengths), np.array(content), np.array(retracted))
    assert found.tolist() == bad


def test_a_replacement_after_a_retraction_is_timed_from_its_own_writer():
    # 6 bytes at 0 ms, 4 of them withdrawn at 10 ms, 5 written at 20 ms, then 7 withdrawn at 50 ms: the 5 written
    # at 20 ms and 2 of the first chunk's, shown since 0 ms
    shown = shown_before_withdrawal(np.array([0, 10, 20, 50]), np.array([6, 0, 5, 0]), np.array([0, 4, 0, 7]))
    assert shown == [10, 50]
