"""Slow starts on minimal synthetic streams: the client's wait for its first token split by the points that saw it."""

from __future__ import annotations

import numpy as np
import pytest

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_ingest.analysis.attribution import UNKNOWN, NodeEvent, Timeline
from streamscope_ingest.analysis.first_token import WAITING, attribute_start

MS = 1000
SERVER_START = 5_000_000_000
"""The upstream's clock: its request arrives here; the client sent it 3 ms earlier on its own clock."""


def side(first_ms: float, start_us: int, chunks: int = 20, gap_ms: float = 20, host_ms: float = 0) -> Timeline:
    """A side whose first content came ``first_ms`` after its start, then ``chunks - 1`` more every ``gap_ms``;
    ``host_ms`` is how long its host did not run it before the first (None: host not watched)."""
    offsets = np.array([round((first_ms + i * gap_ms) * MS) for i in range(chunks)], dtype=np.int64)
    host = np.zeros(chunks, dtype=np.int64)
    host[0] = round(host_ms * MS)
    return Timeline(start_us, offsets, np.full(chunks, 4, dtype=np.int64), host_delay_us=host)


def client_of(upstream: Timeline, path_ms: float = 6, first_late_ms: float = 0, host_ms: float = 0) -> Timeline:
    """What a client 3 ms away (each way) saw of ``upstream``: its first chunk later by ``first_late_ms`` on the path
    and ``host_ms`` in its own host."""
    offsets = upstream.offsets_us + round(path_ms * MS)
    offsets[0] += round((first_late_ms + host_ms) * MS)
    host = np.zeros(offsets.size, dtype=np.int64)
    host[0] = round(host_ms * MS)
    return Timeline(1_000_000, offsets, upstream.content_bytes, host_delay_us=host)


def test_a_first_token_in_time_is_no_slow_start() -> None:
    upstream = side(900, SERVER_START)
    assert attribute_start(client_of(upstream), upstream, []) is None


def test_a_request_waiting_while_the_node_had_requests_waiting_is_queued() -> None:
    upstream = side(2_400, SERVER_START)
    waiting = NodeEvent(WAITING, SERVER_START + 200 * MS, SERVER_START + 2_300 * MS, 3.0)
    start = attribute_start(client_of(upstream), upstream, [waiting])
    assert start is not None
    assert (start.cause, start.ttft_us, start.upstream_us) == (Cause.QUEUE, 2_406 * MS, 2_400 * MS)
    assert start.end_us == start.start_us + start.ttft_us
    assert start.evidence["node_events"] == WAITING


@pytest.mark.parametrize(
    ("queued_ms", "events", "expected"),
    [
        (1_900, [], Cause.QUEUE),  # the engine said so, though no sample saw requests waiting
        (1_900, [(WAITING, 200, 2_300), ("preemption", 300, 400)], Cause.QUEUE),
        (20, [(WAITING, 200, 2_300), ("preemption", 300, 400)], Cause.KV_PRESSURE),  # admitted, then preempted
        (20, [(WAITING, 200, 2_300)], UNKNOWN),  # admitted at once: others waited, not this one
    ],
)
def test_the_engines_own_time_in_queue_tells_a_wait_for_a_slot_from_what_held_it_after(
    queued_ms: float, events: list[tuple[str, float, float]], expected: str
) -> None:
    upstream = side(2_400, SERVER_START)
    seen = [NodeEvent(kind, SERVER_START + round(a * MS), SERVER_START + round(b * MS), 1.0) for kind, a, b in events]
    start = attribute_start(client_of(upstream), upstream, seen, queued_us=round(queued_ms * MS))
    assert start is not None and start.cause == expected
    assert start.evidence["time_in_queue_ms"] == f"{queued_ms:.1f}"


def test_a_gpu_that_stopped_is_the_cause_of_the_queue_it_made() -> None:
    upstream = side(2_400, SERVER_START)
    events = [
        NodeEvent("xid", SERVER_START + 100 * MS, SERVER_START + 100 * MS),
        NodeEvent(WAITING, SERVER_START + 200 * MS, SERVER_START + 2_300 * MS, 6.0),
    ]
    start = attribute_start(client_of(upstream), upstream, events)
    assert start is not None and start.cause == Cause.GPU_FAULT


def test_waiting_seen_only_after_the_first_token_is_no_queue() -> None:
    upstream = side(2_400, SERVER_START)
    later = NodeEvent(WAITING, SERVER_START + 3_000 * MS, SERVER_START + 4_000 * MS, 2.0)
    start = attribute_start(client_of(upstream), upstream, [later])
    assert start is not None and start.cause == UNKNOWN


@pytest.mark.parametrize(
    ("own_prompt", "expected"), [(None, Cause.PREFILL_INTERFERENCE), (40, Cause.PREFILL_INTERFERENCE), (5_000, UNKNOWN)]
)
def test_another_requests_prefill_delays_a_first_token_but_the_streams_own_does_not(
    own_prompt: int | None, expected: str
) -> None:
    upstream = side(1_500, SERVER_START)
    burst = NodeEvent("prefill_burst", SERVER_START + 250 * MS, SERVER_START + 500 * MS, 5_200.0)
    start = attribute_start(client_of(upstream), upstream, [burst], prompt_tokens=own_prompt)
    assert start is not None and start.cause == expected
    if expected == UNKNOWN:
        assert start.evidence["own_prompt_tokens"] == "5000"


def test_the_serving_processes_own_host_holding_it() -> None:
    upstream = side(1_500, SERVER_START, host_ms=1_100)
    start = attribute_start(client_of(upstream), upstream, [])
    assert start is not None and start.cause == Cause.SERVER_HOST
    assert start.evidence["server_host_delay_ms"] == "1100.0"


def test_the_clients_own_host_holding_the_reader() -> None:
    upstream = side(300, SERVER_START)
    start = attribute_start(client_of(upstream, host_ms=1_200), upstream, [])
    assert start is not None
    assert (start.cause, start.host_us, start.path_us) == (Cause.CLIENT_HOST, 1_200 * MS, 6 * MS)


def test_a_path_that_held_the_first_chunk_is_the_connection() -> None:
    upstream = side(300, SERVER_START)
    start = attribute_start(client_of(upstream, first_late_ms=900), upstream, [])
    assert start is not None
    assert (start.cause, start.path_us) == (Cause.CONNECTION, 906 * MS)
    assert start.evidence["path_late_ms"] == "900.0"


@pytest.mark.parametrize(("buffered", "expected"), [(True, Cause.NETWORK_BUFFERING), (False, Cause.CONNECTION)])
def test_a_first_chunk_held_on_a_buffering_path_waited_for_the_gateways_flush(buffered: bool, expected: str) -> None:
    """A stream whose path held it all along (its stalls a buffering gateway's flushes) had its first chunk held
    by the same gateway, not by a stalled connection."""
    upstream = side(500, SERVER_START)
    start = attribute_start(client_of(upstream, first_late_ms=600), upstream, [], path_buffered=buffered)
    assert start is not None and start.cause == expected


@pytest.mark.parametrize("buffered", [True, False])
def test_a_first_chunk_held_for_a_small_part_of_a_long_way_there_names_no_path_cause(buffered: bool) -> None:
    """A request that took a second to reach the server (a starved proxy forwarding it) and a first chunk held
    400 ms on its way back: the hold is not what made the wait, and the way there is nothing the path's causes
    name."""
    upstream = side(100, SERVER_START)
    start = attribute_start(client_of(upstream, path_ms=1_000, first_late_ms=400), upstream, [], path_buffered=buffered)
    assert start is not None and start.cause == UNKNOWN
    assert start.evidence["path_late_ms"] == "400.0"


def test_a_path_slow_for_every_chunk_is_no_stalled_connection() -> None:
    """A path 700 ms long for every chunk (a far region) delays the first token by no hold of its own."""
    upstream = side(400, SERVER_START)
    start = attribute_start(client_of(upstream, path_ms=700), upstream, [])
    assert start is not None and start.cause == UNKNOWN


def test_without_an_upstream_side_only_the_host_tells() -> None:
    alone = side(1_300, 1_000_000, host_ms=1_000)
    start = attribute_start(alone, None, [NodeEvent(WAITING, 0, 2**62, 4.0)])
    assert start is not None
    assert (start.cause, start.upstream_us, start.path_us) == (Cause.CLIENT_HOST, None, None)
    quiet = side(1_300, 1_000_000)
    assert attribute_start(quiet, None, []).cause == UNKNOWN  # type: ignore[union-attr]
