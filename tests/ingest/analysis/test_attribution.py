"""Attribution on minimal synthetic streams, one per cause."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamscope_ingest.analysis.attribution import (
    Arrivals,
    NodeEvent,
    SharedHost,
    Stall,
    StallRules,
    Timeline,
    attribute,
    find_stalls,
)

RULES = StallRules()
MS = 1000
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "streams"


def timeline(gaps_ms: list[float], start_us: int = 1_000_000_000, chunk_bytes: int = 4) -> Timeline:
    """Content chunks spaced by ``gaps_ms`` (the first one after a 100 ms TTFT)."""
    offsets = np.cumsum([100 * MS] + [int(g * MS) for g in gaps_ms]).astype(np.int64)
    return Timeline(start_us, offsets, np.full(offsets.size, chunk_bytes, dtype=np.int64))


STEADY = [20.0] * 30


def with_gap(at: int, gap_ms: float, base: list[float] = STEADY) -> list[float]:
    gaps = list(base)
    gaps[at] = gap_ms
    return gaps


def gateway(server: Timeline, flush_ms: float, hiccup_after: int | None = None, hiccup_ms: float = 0) -> Timeline:
    """What a client sees of ``server`` behind a gateway that holds chunks and releases all it holds ``flush_ms``
    after the first one; with ``hiccup_after``, the connection stalls ``hiccup_ms`` right after writing that chunk
    (the rest of its release waits, and what arrives meanwhile is held from when the connection resumes)."""
    sent = server.offsets_us + 2 * MS  # the gateway is 2 ms from the server
    received = np.empty_like(sent)
    resume, i = 0, 0
    while i < sent.size:
        flush = max(int(sent[i]), resume) + int(flush_ms * MS)
        j = i
        while j < sent.size and max(int(sent[j]), resume) <= flush:
            j += 1
        received[i:j] = flush
        if hiccup_after is not None and i <= hiccup_after < j - 1:
            resume = flush + int(hiccup_ms * MS)
            received[hiccup_after + 1 : j] = resume
        i = j
    return Timeline(server.start_us - 5 * MS, received + 8 * MS, server.content_bytes)


def held(server: Timeline, *holds: tuple[int, float]) -> Timeline:
    """The client's view of ``server`` when the path held chunk ``at`` for ``ms`` and released it with everything
    sent meanwhile, for each ``(at, ms)``."""
    offsets = server.offsets_us.copy()
    for at, ms in holds:
        offsets[at:] = np.maximum(offsets[at:], offsets[at] + int(ms * MS))
    return Timeline(server.start_us - 3 * MS, offsets + 3 * MS, server.content_bytes)


def only(stalls):
    assert len(stalls) == 1, stalls
    return stalls[0]


def event(kind: str, around: Timeline, chunk: int) -> NodeEvent:
    t = around.start_us + int(around.offsets_us[chunk])
    return NodeEvent(kind, t - 200 * MS, t)


def test_stalls_are_absolute_or_relative_to_the_stream_median():
    assert [s.seq for s in find_stalls(timeline(with_gap(10, 450)), RULES)] == [11]
    assert [s.seq for s in find_stalls(timeline(with_gap(10, 200, [40.0] * 30)), RULES)] == [11]  # 5x a 40 ms median
    assert [s.seq for s in find_stalls(timeline(with_gap(10, 160)), RULES)] == [11]  # 8x a 20 ms median
    assert find_stalls(timeline(with_gap(10, 140)), RULES) == []  # under the 150 ms floor
    assert find_stalls(timeline(with_gap(10, 300, [120.0] * 30)), RULES) == []  # 2.5x a slow stream's median


def test_server_late_with_a_preemption_on_the_node_is_kv_pressure():
    server = timeline(with_gap(10, 600))
    client = timeline(with_gap(10, 600), start_us=server.start_us + 3 * MS)
    stall = only(attribute(client, server, [event("preemption", server, 11)], spec_active=False, rules=RULES))
    assert (stall.cause, stall.seq, stall.server_seq) == ("kv_pressure", 11, 11)
    assert stall.server_gap_us == 600 * MS and "preemption" in stall.evidence["node_events"]
    # an event is over by the sample that saw it: one counted before the gap began did not make it
    earlier = only(attribute(client, server, [event("preemption", server, 9)], spec_active=False, rules=RULES))
    assert earlier.cause == "unknown"


def test_a_prefill_burst_outranks_other_engine_events():
    server = timeline(with_gap(5, 480))
    events = [event("prefill_burst", server, 6), event("kv_high_water", server, 6)]
    stall = only(attribute(timeline(with_gap(5, 480)), server, events, spec_active=True, rules=RULES))
    assert stall.cause == "prefill_interference"


def test_a_gpu_throttling_its_clocks_slows_every_step_and_is_the_cause_when_nothing_hit_the_request():
    server = timeline(with_gap(5, 480))
    throttled = [event("throttle", server, 6), event("kv_high_water", server, 6)]
    assert only(attribute(timeline(with_gap(5, 480)), server, throttled, spec_active=False, rules=RULES)).cause == (
        "gpu_throttle"
    )
    # a preemption of this request is evidence about it; the node's heat is not
    preempted = [*throttled, event("preemption", server, 6)]
    stall = only(attribute(timeline(with_gap(5, 480)), server, preempted, spec_active=False, rules=RULES))
    assert stall.cause == "kv_pressure"


@pytest.mark.parametrize("fault", ["xid", "gpu_lost", "gpu_unavailable"])
def test_a_gpu_that_stopped_running_work_is_a_gpu_fault_before_its_throttle(fault: str):
    server = timeline(with_gap(5, 900))
    events = [event("throttle", server, 6), event(fault, server, 6)]
    stall = only(attribute(timeline(with_gap(5, 900)), server, events, spec_active=False, rules=RULES))
    assert (stall.cause, stall.evidence["node_events"]) == ("gpu_fault", ",".join(sorted([fault, "throttle"])))


def test_a_gpu_fault_reported_just_before_the_gap_began_explains_it():
    """The step in flight when the GPU failed still finishes: the gap begins after the agent saw the XID."""
    server = timeline(with_gap(5, 900))
    began = server.start_us + int(server.offsets_us[5])
    reported = [NodeEvent("xid", began - 40 * MS, began - 40 * MS)]
    assert only(attribute(timeline(with_gap(5, 900)), server, reported, spec_active=False, rules=RULES)).cause == (
        "gpu_fault"
    )
    long_before = [NodeEvent("xid", began - 2000 * MS, began - 2000 * MS)]
    assert only(attribute(timeline(with_gap(5, 900)), server, long_before, spec_active=False, rules=RULES)).cause == (
        "unknown"
    )


SPEC_STEADY = [45.0] * 30
"""A large model with speculative decoding: a chunk every 45 ms."""
COLLAPSED = [*SPEC_STEADY[:8], *[170.0] * 5, *SPEC_STEADY[13:]]
"""Draft acceptance collapses for five chunks: each takes nearly four steps instead of one."""


def spec_stalls(gaps: list[float], drop: tuple[int, int] | None = None, **kwargs) -> list[Stall]:
    """Attribute the stalls of a stream served as ``gaps``, with an acceptance drop seen from chunk ``drop[0]``
    to chunk ``drop[1]``."""
    server = timeline(gaps)
    at = [] if drop is None else [server.start_us + int(server.offsets_us[chunk]) for chunk in drop]
    events = [NodeEvent("spec_acceptance_drop", *at)] if at else []
    return attribute(timeline(gaps), server, events, rules=RULES, **kwargs)


def test_spec_decode_from_an_acceptance_drop_or_by_elimination():
    by_event = spec_stalls(COLLAPSED, drop=(9, 13), spec_active=True)
    assert [(s.seq, s.cause, s.confidence) for s in by_event] == [(seq, "spec_decode", 0.85) for seq in range(9, 14)]
    by_elimination = spec_stalls(COLLAPSED, spec_active=True)
    assert {(s.cause, s.confidence) for s in by_elimination} == {("spec_decode", 0.6)}
    assert {s.cause for s in spec_stalls(COLLAPSED, spec_active=False)} == {"unknown"}


def test_a_lone_slow_chunk_is_not_a_draft_collapse():
    """Drafts rejected a few steps running at normal acceptance delay one chunk; a collapse slows a stretch."""
    for drop in (None, (8, 9)):
        stall = only(spec_stalls(with_gap(7, 170, SPEC_STEADY), drop=drop, spec_active=True))
        assert stall.cause == "unknown"
        assert "1.0x the usual gap apart" in stall.evidence["spec_decode_ruled_out"]


def test_a_draft_collapse_cannot_explain_a_freeze_longer_than_the_acceptance_length_allows():
    """Chunks every 45 ms: at 2 tokens per step a collapse stretches a gap to 2 x 2 x 45 = 180 ms at most."""
    frozen = [*SPEC_STEADY[:8], 170.0, 170.0, 400.0, 170.0, 170.0, *SPEC_STEADY[13:]]
    stalls = spec_stalls(frozen, drop=(9, 13), spec_active=True, spec_accept_length=2.0)
    assert [s.cause for s in stalls] == ["spec_decode", "spec_decode", "unknown", "spec_decode", "spec_decode"]
    assert "to 180.0 ms" in stalls[2].evidence["spec_decode_ruled_out"]


def test_server_on_time_client_late_is_the_network_once_a_hiccup_repeatedly_a_gateway():
    server = timeline(STEADY)
    hiccup = only(attribute(timeline(with_gap(12, 900)), server, [], spec_active=False, rules=RULES))
    assert (hiccup.cause, hiccup.server_gap_us) == ("connection", 20 * MS)
    buffered = gateway(timeline([20.0] * 90), 600)
    stalls = attribute(buffered, timeline([20.0] * 90), [], spec_active=True, rules=RULES)
    assert len(stalls) == 2 and {s.cause for s in stalls} == {"network_buffering"}


def test_a_gap_two_causes_share_goes_to_the_one_that_held_it_longest_and_names_the_other():
    # the server is preempted for 480 ms, then the gateway holds what it emits next for 600 ms more
    server = timeline(with_gap(30, 480, [20.0] * 60))
    preemption = [event("preemption", server, 31)]
    stalls = attribute(gateway(server, 600), server, preemption, spec_active=False, rules=RULES)
    late = next(s for s in stalls if s.server_gap_us >= 480 * MS)
    assert late.cause == "network_buffering" and late.evidence["secondary_cause"] == "kv_pressure"
    assert int(float(late.evidence["server_part_ms"])) < late.path_delay_us / 1000
    # the same preemption with a 200 ms hiccup on the path after it: the server's part is the larger one
    stall = only(attribute(held(server, (31, 200)), server, preemption, spec_active=False, rules=RULES))
    assert (stall.cause, stall.evidence["secondary_cause"]) == ("kv_pressure", "network")
    assert stall.evidence["server_part_ms"] == "480.0"


def test_alignment_survives_re_chunking_by_content():
    server = timeline(with_gap(9, 700), chunk_bytes=2)  # 31 small chunks
    # the client received the same bytes merged two by two, and the server's gap shows up in it
    merged_offsets = server.offsets_us[1::2]
    client = Timeline(server.start_us, merged_offsets, np.full(merged_offsets.size, 4, dtype=np.int64))
    stall = only(attribute(client, server, [event("preemption", server, 10)], spec_active=False, rules=RULES))
    assert stall.cause == "kv_pressure" and stall.server_gap_us >= 700 * MS


def test_without_a_server_span_the_cause_is_unknown_and_says_why():
    stall = only(attribute(timeline(with_gap(3, 800)), None, [], spec_active=False, rules=RULES))
    assert stall.cause == "unknown" and "no server span" in stall.evidence["server"]


def test_a_single_gap_after_a_held_first_chunk_is_still_a_buffering_gateway():
    server = timeline([20.0] * 60)
    # the first chunk held 300 ms (released with the 15 after it), then one gap: a flush of what came after
    client = held(server, (0, 300), (16, 500))
    stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
    assert stall.cause == "network_buffering"
    assert stall.evidence["first_chunk_path_delay_ms"] == "300.0"
    on_time = only(attribute(held(server, (10, 500)), server, [], spec_active=False, rules=RULES))
    assert on_time.cause == "connection"
    # a slow way to the server (the request, before any chunk) is no held first chunk
    slow_start = held(server, (10, 500))
    slow_start = Timeline(slow_start.start_us - 300 * MS, slow_start.offsets_us + 300 * MS, server.content_bytes)
    assert only(attribute(slow_start, server, [], spec_active=False, rules=RULES)).cause == "connection"


def test_a_hiccup_on_top_of_a_buffering_gateway_stands_out_from_the_flushes():
    server = timeline([20.0] * 120)
    client = gateway(server, 600)
    third_release = int(np.flatnonzero(np.diff(client.offsets_us))[1]) + 1
    offsets = client.offsets_us.copy()
    offsets[third_release:] += 800 * MS  # the connection stalled between two releases
    client = Timeline(client.start_us, offsets, client.content_bytes)
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    assert [(s.seq == third_release, s.cause) for s in stalls] == [
        (False, "network_buffering"),
        (True, "connection"),
        (False, "network_buffering"),
    ]


def test_a_hiccup_that_splits_a_gateways_release_is_a_connection_and_the_flush_after_it_is_not():
    server = timeline([20.0] * 90)
    # the gateway releases chunks 31-60 together; the connection stalls 800 ms after writing chunk 40
    client = gateway(server, 600, hiccup_after=40, hiccup_ms=800)
    stalls = {s.seq: s for s in attribute(client, server, [], spec_active=False, rules=RULES)}
    assert stalls[41].cause == "connection" and float(stalls[41].evidence["sent_before_previous_arrived_ms"]) > 150
    assert {s.cause for seq, s in stalls.items() if seq != 41} == {"network_buffering"}
    assert len(stalls) >= 3  # the flushes before the hiccup, and the one after it


def test_streams_a_gateway_held_together_are_the_paths_when_held_as_long_as_a_stalled_connection():
    """A gateway in front of the engines (the endpoint the streams were read from) that paused holds every stream
    it relays at once: the path held them, ``connection``, however many; a shorter hold is jitter, ``unknown``."""
    server = timeline([20.0] * 40)

    def attributed(hold_ms: float) -> Stall:
        late = held(server, (21, hold_ms))
        peers = [Arrivals.of(late, server)] * 3
        hosts = [SharedHost("endpoint", "gw:443", peers), SharedHost("node", "n1", peers)]
        return only(attribute(late, server, [], spec_active=False, rules=RULES, shared_hosts=lambda: hosts))

    paused = attributed(300)
    assert paused.cause == "connection"
    assert paused.evidence["held_together_with"] == "3 of 3 streams in flight on endpoint gw:443"
    jitter = attributed(180)
    assert jitter.cause == "unknown" and jitter.evidence["held_together_with"].endswith("endpoint gw:443")


def test_a_connection_stall_is_judged_by_how_long_the_path_held_the_chunk_not_by_the_gap_it_left():
    """When the content before a held chunk came late too, only part of the chunk's hold falls in the gap it
    ends: the path held it 300 ms, as a stalled connection does, though the client waited 170 ms for it."""
    server = timeline([20.0] * 40)
    offsets = server.offsets_us.copy()
    offsets[20] += 150 * MS  # late on the path, but less than a retransmission timeout
    offsets[21:] = np.maximum(offsets[21:], offsets[21] + 300 * MS)  # held 300 ms, with all sent meanwhile
    client = Timeline(server.start_us, offsets, server.content_bytes)
    stalls = {stall.seq: stall for stall in attribute(client, server, [], spec_active=False, rules=RULES)}
    assert set(stalls) == {20, 21} and stalls[21].gap_us == 170 * MS
    assert stalls[21].cause == "connection" and stalls[21].evidence["path_delay_ms"] == "300.0"
    assert stalls[20].cause == "unknown" and "retransmission" in stalls[20].evidence["network"]


def test_a_late_arrival_other_streams_of_the_host_shared_is_a_pause_not_the_network():
    server = timeline([20.0] * 40)
    late = held(server, (21, 300))
    held_too = Arrivals.of(late, server)  # a stream on the same host, released at the same instant
    on_time = Arrivals.of(server, server)

    def attributed(*peers: Arrivals) -> Stall:
        return only(
            attribute(
                late, server, [], spec_active=False, rules=RULES, shared_hosts=lambda: [SharedHost("node", "n1", peers)]
            )
        )

    paused = attributed(held_too, on_time, held_too)  # two held with it, one not
    assert paused.cause == "unknown" and paused.evidence["held_together_with"] == "2 of 3 streams in flight on node n1"
    assert attributed(held_too, on_time, on_time).cause == "connection"  # most got theirs on time
    assert attributed(held_too).cause == "connection"  # one witness: as likely a coincidence
    assert attributed(Arrivals.of(gateway(server, 600), server)).cause == "connection"  # a flush is no witness
    assert attributed().cause == "connection"

    # two pauses in one stream do not make it a buffering gateway: the path let everything else through promptly
    twice = held(server, (11, 300), (31, 300))
    stalls = attribute(
        twice,
        server,
        [],
        spec_active=False,
        rules=RULES,
        shared_hosts=lambda: [SharedHost("client process", "a", [Arrivals.of(twice, server)] * 2)],
    )
    assert [s.cause for s in stalls] == ["unknown", "unknown"]
    assert [s.cause for s in attribute(twice, server, [], spec_active=False, rules=RULES)] == ["connection"] * 2


def test_a_preemption_or_a_draft_collapse_does_not_silence_the_whole_node():
    server = timeline(with_gap(20, 400, [20.0] * 40))
    preemption = [event("preemption", server, 21)]
    others_served = Arrivals.of(timeline([20.0] * 40), timeline([20.0] * 40))  # kept emitting meanwhile
    others_silent = Arrivals.of(server, server)  # the same 400 ms silence on the same node

    def attributed(*peers: Arrivals) -> Stall:
        hosts = [SharedHost("client process", "a", peers), SharedHost("node", "n1", peers)]
        return only(attribute(server, server, preemption, spec_active=True, rules=RULES, shared_hosts=lambda: hosts))

    assert attributed(others_served, others_silent).cause == "kv_pressure"
    slow = attributed(others_silent, others_silent, others_served)
    assert (slow.cause, slow.evidence["not_blamed"]) == ("unknown", "kv_pressure")
    assert slow.evidence["silent_together_with"] == "2 of 3 streams served on node n1"
    # a prefill in the batch does silence every stream decoding with it
    prefill = [event("prefill_burst", server, 21)]
    everyone = [SharedHost("node", "n1", [others_silent, others_silent])]
    stall = only(attribute(server, server, prefill, spec_active=False, rules=RULES, shared_hosts=lambda: everyone))
    assert stall.cause == "prefill_interference"


def painted(client: Timeline, delays_ms: dict[int, float], frame_ms: float = 8.0) -> Timeline:
    """``client`` as a browser saw it: each chunk painted a frame after it arrived, ``delays_ms`` later for some."""
    paint = np.full(client.offsets_us.size, int(frame_ms * MS), dtype=np.int64)
    for at, ms in delays_ms.items():
        paint[at] = int(ms * MS)
    return Timeline(client.start_us, client.offsets_us, client.content_bytes, paint)


def test_a_chunk_that_arrived_on_time_and_was_painted_late_is_client_render():
    server = timeline(STEADY)
    browser = painted(timeline(STEADY, start_us=server.start_us + 3 * MS), {12: 650})
    stall = only(attribute(browser, server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.seq) == ("client_render", 12)
    assert stall.gap_us == (20 + 650 - 8) * MS  # from the frame that showed chunk 11 to the one that showed 12
    assert stall.evidence["screen_part_ms"] == "650.0"
    # no server span is needed to see the page was slow
    assert only(attribute(browser, None, [], spec_active=False, rules=RULES)).cause == "client_render"


def test_a_browser_stall_still_names_the_server_or_the_path_when_they_held_it_longest():
    server = timeline(with_gap(10, 600))
    preemption = [event("preemption", server, 11)]
    # the chunk came 600 ms late and then took 200 ms to paint: the server's part is the larger
    browser = painted(timeline(with_gap(10, 600), start_us=server.start_us + 3 * MS), {11: 200})
    stall = only(attribute(browser, server, preemption, spec_active=False, rules=RULES))
    assert (stall.cause, stall.evidence["secondary_cause"]) == ("kv_pressure", "client_render")
    # from the frame that showed chunk 10: 592 ms waiting for chunk 11, then 200 ms until it was painted
    assert (stall.gap_us, stall.screen_us, stall.wait_us) == (792 * MS, 200 * MS, 592 * MS)
    # painted a frame after arrival, a late arrival on the path reads as it does on any client
    hiccup = painted(timeline(with_gap(12, 900), start_us=server.start_us), {})
    assert only(attribute(hiccup, timeline(STEADY), [], spec_active=False, rules=RULES)).cause == "connection"


def test_chunks_painted_in_one_frame_after_a_slow_render_make_one_stall():
    # chunks 12-15 arrive on time while the page is busy, and all show in the frame 700 ms after chunk 12 arrived
    base = timeline(STEADY)
    busy = {12: 700, 13: 680, 14: 660, 15: 640}
    stall = only(find_stalls(painted(base, busy), RULES))
    # shown 8 ms after chunk 11 arrived, then nothing until chunk 12's frame, 20 + 700 ms after chunk 11 arrived
    assert (stall.seq, stall.gap_us, stall.screen_us) == (12, (20 + 700 - 8) * MS, 700 * MS)


def behind(server: Timeline, *stalls: tuple[int, float]) -> Timeline:
    """The client's view of ``server`` through a connection that stalls ``ms`` before chunk ``at`` for each
    ``(at, ms)`` and then carries on at the server's pace, that much behind (it never catches up)."""
    offsets = server.offsets_us.copy()
    for at, ms in stalls:
        offsets[at:] += int(ms * MS)
    return Timeline(server.start_us - 3 * MS, offsets + 3 * MS, server.content_bytes)


SHORT_STALLS = ((12, 320), (30, 380), (52, 440), (75, 460))


def test_repeated_short_connection_stalls_of_one_length_are_no_gateway():
    """A gateway holds everything, then hands it all over; these stalls leave the stream behind, or let everything
    between them through on time: connections, however alike their lengths."""
    server = timeline([10.0] * 100)
    for client in (behind(server, *SHORT_STALLS), held(server, *SHORT_STALLS)):
        stalls = attribute(client, server, [], spec_active=False, rules=RULES)
        assert [s.seq for s in stalls] == [12, 30, 52, 75]
        assert {s.cause for s in stalls} == {"connection"}, [s.evidence for s in stalls]


def test_short_stalls_on_a_busy_host_are_connections_though_every_chunk_was_late():
    """A busy host makes most chunks tens of ms late on the path, as a gateway holds them; but between the stalls
    the chunks arrived one by one, and a gateway hands nothing over on its own."""
    server = timeline([20.0] * 100)
    late = np.array([0] + [(40 + 6 * (k % 2)) * MS for k in range(1, 101)])
    client = held(Timeline(server.start_us, server.offsets_us + late, server.content_bytes), *SHORT_STALLS)
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    assert [s.seq for s in stalls] == [12, 30, 52, 75]
    assert {s.cause for s in stalls} == {"connection"}, [s.evidence for s in stalls]


def test_back_to_back_connection_stalls_read_in_bursts_after_a_live_start_are_connections():
    """Stalls that follow one another leave no content flowing between them, and a busy reader reads what comes
    in twos: every chunk late or in a release, as a flushing gateway's. But the stream began live, its first
    chunks each on time and on its own, and a gateway holds a stream from its first byte."""
    server = timeline([20.0] * 100)
    client = held(server, (13, 320), (29, 380), (49, 440), (71, 460))
    offsets = client.offsets_us.copy()
    for k in range(3, offsets.size - 1, 2):  # from the third chunk on, the reader's host reads two at a time
        offsets[k] = max(offsets[k], offsets[k + 1])
    client = Timeline(client.start_us, offsets, client.content_bytes)
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    assert [s.seq for s in stalls] == [13, 29, 49, 71]
    assert {s.cause for s in stalls} == {"connection"}, [s.evidence for s in stalls]
    assert {s.evidence["held_all_along"] for s in stalls} == {"false"}


def test_one_connection_stall_that_held_most_of_a_short_stream_after_a_start_on_time_is_a_connection():
    """An engine that emits chunks two at a time, and one stall of the connection that held most of what was left
    and then handed it over at once: most chunks held and none on their own, as a flushing gateway's. But the
    chunks before the stall came on time, and a gateway holds a stream from its first byte."""
    server = timeline([0.0, 20.0] * 35)
    client = held(server, (21, 800))
    stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
    assert (stall.seq, stall.cause, stall.evidence["held_all_along"]) == (21, "connection", "false"), stall.evidence


def cut(client: Timeline, after: int, ms: float) -> Timeline:
    """``client`` when the connection stalled ``ms`` right after chunk ``after`` reached it, mid-release, and then
    handed over at once what the gateway held meanwhile (the rest of the release, and what came since)."""
    offsets = client.offsets_us.copy()
    offsets[after + 1 :] = np.maximum(offsets[after + 1 :], offsets[after] + int(ms * MS))
    return Timeline(client.start_us, offsets, client.content_bytes)


def test_a_connection_stall_that_cut_a_release_short_is_a_connection_though_it_is_the_streams_one_stall():
    """A fast engine (2 ms a chunk) behind a gateway flushing on bytes (every 128 ms, no stall of its own): the
    connection stalls 900 ms in the middle of a release. What it left behind was sent well before the last
    chunk the client got, which no flush does; the stall is the stream's only one, so it is compared with how long
    the gateway held the first chunk, not with itself."""
    server = timeline([2.0] * 600)
    releases = np.unique(gateway(server, 128).offsets_us)
    for after in (200, 230, 260):  # early, middle and late in their releases
        client = cut(gateway(server, 128), after, 900)
        stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
        assert (stall.seq, stall.cause) == (after + 1, "connection"), stall.evidence
        assert stall.evidence["hiccup"] == "left content behind", stall.evidence
    # 900 ms between two releases, the second with everything held meanwhile, is a flush that came late
    base = gateway(server, 128)
    offsets = np.where(
        (base.offsets_us >= releases[5]) & (base.offsets_us < releases[5] + 900 * MS),
        releases[5] + 900 * MS,
        base.offsets_us,
    )
    client = Timeline(base.start_us, offsets, base.content_bytes)
    assert only(attribute(client, server, [], spec_active=False, rules=RULES)).cause == "network_buffering"


def test_a_late_flush_a_connection_stall_then_cut_short_is_still_the_gateways():
    """The flush that ends one stall is cut short by a connection stall right after it: its release did not catch
    the client up, and neither did the connection's. Neither says whether the gateway held the stream all along;
    its flushes do, so the first stall is the gateway's and the second the connection's."""
    server = timeline([2.0] * 600)
    base = gateway(server, 128)
    releases = np.unique(base.offsets_us)
    offsets = base.offsets_us.copy()
    late = (base.offsets_us == releases[3]) | (base.offsets_us == releases[4])
    offsets[late] = releases[4] + 100 * MS  # one flush 230 ms late, with the next one's content
    client = cut(Timeline(base.start_us, offsets, base.content_bytes), int(np.flatnonzero(late)[-20]), 900)
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    assert [s.cause for s in stalls] == ["network_buffering", "connection"], [s.evidence for s in stalls]


def test_a_gateway_that_flushes_on_bytes_holds_the_first_chunk_briefly_and_is_still_a_gateway():
    server = timeline([10.0] * 150)
    client = gateway(server, 200)  # the first chunk is held 200 ms, under the held-first-chunk mark
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    assert len(stalls) >= 5 and {s.cause for s in stalls} == {"network_buffering"}
    assert {s.evidence["held_all_along"] for s in stalls} == {"true"}


def test_one_stall_in_a_stream_a_gateway_handed_over_in_flushes_is_the_gateways():
    """A gateway that flushes on bytes holds the first chunk briefly and makes a stall only now and then, when a
    flush comes a little later than the others: one stall, but every chunk came out of a flush, none on its own,
    and the release caught the client up, so the gateway held it (not a connection too short to be believed)."""
    server = timeline([10.0] * 60)
    client = gateway(server, 130)  # a release every 140 ms, under the 150 ms floor of a stall
    releases = np.unique(client.offsets_us)
    later = client.offsets_us == releases[2]  # a flush 15 ms late: the one gap over it
    client = Timeline(client.start_us, client.offsets_us + later * 15 * MS, client.content_bytes)
    stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
    assert stall.cause == "network_buffering", stall.evidence
    assert stall.evidence["held_all_along"] == "true" and stall.evidence["network_stalls_in_stream"] == "1"


def test_a_flush_read_in_two_goes_a_few_milliseconds_apart_still_caught_the_client_up():
    """A fast engine (2 ms a chunk) behind a gateway flushing on bytes (every 130 ms, under a stall's floor): one
    flush comes 60 ms late, the stream's one stall, and a busy reader takes it in two reads 7 ms apart, the second
    still of content the gateway held. The release caught the client up: the gateway's, not a connection that
    stayed behind."""
    server = timeline([2.0] * 400)
    client = gateway(server, 128)
    releases = np.unique(client.offsets_us)
    offsets = client.offsets_us + (client.offsets_us >= releases[3]) * 60 * MS
    flush = np.flatnonzero(client.offsets_us == releases[3])
    offsets[flush[len(flush) // 3 :]] += 7 * MS
    client = Timeline(client.start_us, offsets, client.content_bytes)
    stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
    assert stall.cause == "network_buffering", stall.evidence


def test_a_short_hold_on_a_prompt_path_is_no_stalled_connection():
    stall = only(attribute(held(timeline(STEADY), (12, 180)), timeline(STEADY), [], spec_active=False, rules=RULES))
    assert stall.cause == "unknown" and "retransmission" in stall.evidence["network"]


def test_kv_high_water_on_the_node_does_not_outrank_this_requests_draft_collapse():
    server = timeline(COLLAPSED)
    kv_full = NodeEvent("kv_high_water", server.start_us, server.start_us + int(server.offsets_us[-1]))
    stalls = attribute(timeline(COLLAPSED), server, [kv_full], spec_active=True, rules=RULES)
    assert {s.cause for s in stalls} == {"spec_decode"}
    # a preemption elsewhere on the node neither: the collapse is this request's own rhythm
    preempted = [kv_full, event("preemption", server, 10)]
    assert {s.cause for s in attribute(timeline(COLLAPSED), server, preempted, spec_active=True, rules=RULES)} == {
        "spec_decode"
    }
    # a freeze no collapse explains, with a preemption: the request was preempted
    frozen = timeline(with_gap(10, 600, SPEC_STEADY))
    stall = only(attribute(frozen, frozen, [kv_full, event("preemption", frozen, 11)], spec_active=True, rules=RULES))
    assert (stall.cause, stall.confidence) == ("kv_pressure", 0.85)
    # the high-water mark alone is the remaining explanation, no more
    stall = only(attribute(frozen, frozen, [kv_full], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("kv_pressure", 0.5)


def watched(
    client: Timeline,
    delays_ms: dict[int, float],
    holds_ms: dict[int, float] | None = None,
    totals_ms: dict[int, float] | None = None,
) -> Timeline:
    """``client`` with its own host watched: ``delays_ms`` of the wait before chunk ``at`` the reader did not run
    just before it read, ``holds_ms`` the longest hold anywhere in that wait (where longer), and ``totals_ms``
    every hold in it summed (where more)."""

    def per_chunk(values_ms: dict[int, float]) -> np.ndarray:
        values = np.zeros(client.offsets_us.size, dtype=np.int64)
        for at, ms in values_ms.items():
            values[at] = int(ms * MS)
        return values

    return Timeline(
        client.start_us,
        client.offsets_us,
        client.content_bytes,
        host_delay_us=per_chunk(delays_ms),
        host_held_us=per_chunk(holds_ms or {}),
        host_held_total_us=per_chunk(totals_ms or {}),
    )


def test_a_late_read_while_the_clients_own_host_did_not_run_it_is_client_host():
    server = timeline(STEADY)
    late = held(server, (12, 450))
    stall = only(attribute(watched(late, {12: 440}), server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.evidence["host_delay_ms"]) == ("client_host", "440.0")
    # the host ran late for a part of it only: the network held it longest, the host is named second
    stall = only(attribute(watched(late, {12: 150}), server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.evidence["secondary_cause"]) == ("connection", "client_host")
    # without a server span the host's own evidence still tells
    assert only(attribute(watched(late, {12: 440}), None, [], spec_active=False, rules=RULES)).cause == "client_host"


def test_a_host_pause_through_a_gateways_flush_leaves_the_stall_to_the_gateway():
    server = timeline([20.0] * 200)
    client = gateway(server, 600)
    flushes = np.flatnonzero(np.diff(client.offsets_us)) + 1
    first, after = int(flushes[2]), int(flushes[3])
    offsets = client.offsets_us.copy()
    offsets[first:after] += 250 * MS  # the client's host stopped for 500 ms and read the flush 250 ms late
    paused = watched(Timeline(client.start_us, offsets, client.content_bytes), {first: 500})
    stalls = {s.seq: s for s in attribute(paused, server, [], spec_active=False, rules=RULES)}
    stall = stalls[first]
    # the gateway held the content until its flush, the host only from then: what came after it was not released
    assert (stall.cause, stall.evidence["secondary_cause"]) == ("network_buffering", "client_host")
    assert (stall.evidence["host_part_ms"], stall.evidence["gateway_part_ms"]) == ("250.0", "600.0")
    # on a stream nothing held on the path, the same late read is the host's
    direct = watched(held(server, (first, 450)), {first: 420})
    assert only(attribute(direct, server, [], spec_active=False, rules=RULES)).cause == "client_host"
    # a host that held the reader for nearly all the wait held it through the flush: which held it longer is not
    # known (the flush is dated by what the busy reader read), so neither is named
    through = watched(Timeline(client.start_us, offsets, client.content_bytes), {first: 800})
    stall = {s.seq: s for s in attribute(through, server, [], spec_active=False, rules=RULES)}[first]
    assert stall.wait_us < 800 / RULES.host_through_flush_share * MS
    assert (stall.cause, stall.evidence["network"]) == ("unknown", "the reader's host held it through the flush")


def test_a_flush_the_readers_host_read_late_leaves_nothing_behind_for_the_flush_after_it():
    """A gateway flushes every 900 ms; the reader's host read one flush 200 ms late and the next 350 ms late.
    Content the server sent just after the first of those flushes went out before the reader read it, so it
    looks left behind by the connection; the gateway held it for its next flush, which came on time."""
    server = timeline([20.0] * 400)
    flushes = 300 * MS + 900 * MS * np.arange(12)
    batch = np.searchsorted(flushes, server.offsets_us + 2 * MS)  # the flush that releases each chunk
    read_late = np.zeros(flushes.size, dtype=np.int64)
    read_late[2], read_late[3] = 200 * MS, 350 * MS
    arrived = Timeline(server.start_us - 5 * MS, flushes[batch] + read_late[batch] + 8 * MS, server.content_bytes)
    second, third = (int(i) + 1 for i in np.flatnonzero(np.diff(batch))[1:3])
    watched_reader = watched(arrived, {second: 200, third: 100})  # the watch saw part of the second lag
    stalls = {s.seq: s for s in attribute(watched_reader, server, [], spec_active=False, rules=RULES)}
    assert stalls[third].cause == "network_buffering"
    assert stalls[third].evidence["previous_read_late_ms"] == "200.0"
    assert {s.cause for s in stalls.values()} == {"network_buffering"}
    # unwatched, nothing says the read before was late: content sent that long before it was left behind
    stalls = {s.seq: s for s in attribute(arrived, server, [], spec_active=False, rules=RULES)}
    assert (stalls[third].cause, stalls[third].evidence["hiccup"]) == ("connection", "left content behind")


def test_a_flush_the_readers_host_read_late_does_not_stand_out_as_a_hiccup():
    """The reader's host held one of a 900 ms gateway's flushes 600 ms longer (the watch saw 450 ms of it): the
    wait stands out from the flushes by the host's doing, not the connection's."""
    server = timeline([20.0] * 400)
    flushes = 300 * MS + 900 * MS * np.arange(12)
    batch = np.searchsorted(flushes, server.offsets_us + 2 * MS)
    read_late = np.zeros(flushes.size, dtype=np.int64)
    read_late[3] = 600 * MS
    arrived = Timeline(server.start_us - 5 * MS, flushes[batch] + read_late[batch] + 8 * MS, server.content_bytes)
    third = int(np.flatnonzero(np.diff(batch))[2]) + 1
    stalls = {s.seq: s for s in attribute(watched(arrived, {third: 450}), server, [], spec_active=False, rules=RULES)}
    assert (stalls[third].cause, stalls[third].evidence["secondary_cause"]) == ("network_buffering", "client_host")
    stalls = {s.seq: s for s in attribute(arrived, server, [], spec_active=False, rules=RULES)}
    assert (stalls[third].cause, stalls[third].evidence["hiccup"]) == ("connection", "stands out from the flushes")


def test_a_watched_client_is_judged_by_its_own_evidence_not_by_its_peers():
    server = timeline([20.0] * 40)
    late = held(server, (21, 300))
    peers = [Arrivals.of(late, server)] * 3  # every other stream of the process held until the same instant
    hosts = [SharedHost("client process", "a", peers)]
    unwatched = only(attribute(late, server, [], spec_active=False, rules=RULES, shared_hosts=lambda: hosts))
    assert unwatched.cause == "unknown" and "held_together_with" in unwatched.evidence
    quiet_host = watched(late, {21: 2})
    stall = only(attribute(quiet_host, server, [], spec_active=False, rules=RULES, shared_hosts=lambda: hosts))
    assert stall.cause == "connection"  # the process ran: its peers were held by something else too
    busy_host = watched(late, {21: 290})
    stall = only(attribute(busy_host, server, [], spec_active=False, rules=RULES, shared_hosts=lambda: hosts))
    assert stall.cause == "client_host"


def test_a_first_chunk_the_clients_own_host_read_late_is_no_gateway():
    server = timeline([20.0] * 60)
    client = held(server, (0, 400), (30, 500))  # the first chunk read 400 ms late, a stall later
    assert only(attribute(client, server, [], spec_active=False, rules=RULES)).cause == "network_buffering"
    stall = only(attribute(watched(client, {0: 395}), server, [], spec_active=False, rules=RULES))
    assert stall.cause == "connection" and stall.evidence["first_chunk_path_delay_ms"] == "5.0"


def test_connection_stalls_of_a_reader_its_host_held_in_fits_are_no_gateway():
    """A busy reader's host held it every few chunks, and it then read what had waited in its socket at once:
    most chunks late, in releases, as a flushing gateway's (a recorded stream, tests/fixtures/streams). But the
    reader's host says which releases it held: the others came one by one or on time, and the stalls the proxy
    made are the connection's."""
    recorded = json.loads((FIXTURES / "busy-reader-short-stalls.json").read_text())
    client, server = (
        Timeline(**{name: np.array(v) if isinstance(v, list) else v for name, v in recorded[side].items()})
        for side in ("client", "server")
    )
    stalls = attribute(client, server, [], spec_active=False, rules=RULES)
    path = [(s.seq, s.cause, s.evidence["held_all_along"]) for s in stalls if "held_all_along" in s.evidence]
    assert path == [(seq, "connection", "false") for seq in recorded["connection_stalls"]], path


def test_one_silent_stream_beside_a_preemption_is_no_slow_node():
    server = timeline(with_gap(20, 400, [20.0] * 40))
    silent = Arrivals.of(server, server)
    hosts = [SharedHost("node", "n1", [silent])]
    stall = only(
        attribute(
            server,
            server,
            [event("preemption", server, 21)],
            spec_active=False,
            rules=RULES,
            shared_hosts=lambda: hosts,
        )
    )
    assert stall.cause == "kv_pressure"


def test_an_unexplained_late_server_while_the_client_could_not_read_anyway_is_client_host():
    server = timeline(with_gap(11, 280))
    client = watched(timeline(with_gap(11, 280), start_us=server.start_us + 3 * MS), {12: 200})
    stall = only(attribute(client, server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence, stall.evidence["server_part_ms"]) == ("client_host", 0.6, "280.0")
    assert "secondary_cause" not in stall.evidence  # an unexplained part names no cause
    # an engine event that explains the server's part keeps it
    stall = only(attribute(client, server, [event("prefill_burst", server, 12)], spec_active=False, rules=RULES))
    assert stall.cause == "prefill_interference" and stall.evidence["server_part_ms"] == "280.0"
    # a host that ran late for a little of the wait does not
    barely = watched(timeline(with_gap(11, 280), start_us=server.start_us + 3 * MS), {12: 60})
    assert only(attribute(barely, server, [], spec_active=False, rules=RULES)).cause == "unknown"


def test_a_client_that_could_not_read_outranks_a_kv_cache_merely_over_its_high_water_mark():
    server = timeline(with_gap(11, 170))
    client = watched(timeline(with_gap(11, 170), start_us=server.start_us + 3 * MS), {12: 138})
    high_water = [event("kv_high_water", server, 12)]
    stall = only(attribute(client, server, high_water, spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("client_host", 0.6)
    assert stall.evidence["node_events"] == "kv_high_water"  # the node's condition stays in the evidence
    # a preemption of the request is evidence about this stream: it keeps the stall
    preempted = [event("preemption", server, 12), *high_water]
    assert only(attribute(client, server, preempted, spec_active=False, rules=RULES)).cause == "kv_pressure"
    # with the host running the reader, the high-water mark is still the remaining explanation
    unwatched = timeline(with_gap(11, 170), start_us=server.start_us + 3 * MS)
    stall = only(attribute(unwatched, server, high_water, spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("kv_pressure", 0.5)


def test_a_server_silent_after_its_readers_host_froze_earlier_in_the_wait_is_client_host():
    """The reader's host froze for most of the wait and let go 100 ms before the read; the engine beside it on
    that host sent late because of it, so the read waited on the server. Nothing on the node explains it."""
    server = timeline(with_gap(20, 400, [20.0] * 40))
    frozen = watched(timeline(with_gap(20, 400, [20.0] * 40), start_us=server.start_us + 3 * MS), {}, {21: 300})
    stall = only(attribute(frozen, server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("client_host", 0.5)
    assert stall.evidence["host_held_ms"] == "300.0"
    # a shorter hold does not explain the server's silence
    briefly = watched(timeline(with_gap(20, 400, [20.0] * 40), start_us=server.start_us + 3 * MS), {}, {21: 60})
    assert only(attribute(briefly, server, [], spec_active=False, rules=RULES)).cause == "unknown"
    # nor does the hold outrank what hit this very request
    preemption = [event("preemption", server, 21)]
    stall = only(attribute(frozen, server, preemption, spec_active=False, rules=RULES))
    assert stall.cause == "kv_pressure"


def test_a_host_that_held_its_reader_in_fits_is_credited_with_every_hold():
    """Four holds in one 400 ms wait (110 + 60 + 40 + 30 ms), none a third of it alone: the host held the reader,
    and the engine beside it, for 240 ms, and nothing on the node explains the server's silence."""
    server = timeline(with_gap(20, 400, [20.0] * 40))
    client = timeline(with_gap(20, 400, [20.0] * 40), start_us=server.start_us + 3 * MS)
    in_fits = watched(client, {}, {21: 110}, {21: 240})
    stall = only(attribute(in_fits, server, [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("client_host", 0.5)
    assert (stall.evidence["host_held_ms"], stall.evidence["host_held_total_ms"]) == ("110.0", "240.0")
    # the longest of them alone does not explain it
    assert only(attribute(watched(client, {}, {21: 110}), server, [], spec_active=False, rules=RULES)).cause == (
        "unknown"
    )


def test_a_preempted_request_on_a_node_silent_for_everyone_while_the_reader_was_frozen_is_client_host():
    """The node went silent for all its streams (no preemption does that) and the reader's own host did not run
    for most of the same wait: a host both share (a load generator beside the engine) froze, not the node."""
    server = timeline(with_gap(20, 400, [20.0] * 40))
    client = watched(timeline(with_gap(20, 400, [20.0] * 40), start_us=server.start_us + 3 * MS), {21: 350})
    preemption = [event("preemption", server, 21)]
    silent = Arrivals.of(server, server)
    hosts = [SharedHost("node", "n1", [silent, silent])]
    stall = only(attribute(client, server, preemption, spec_active=False, rules=RULES, shared_hosts=lambda: hosts))
    assert (stall.cause, stall.confidence) == ("client_host", 0.6)
    assert (stall.evidence["not_blamed"], stall.evidence["silent_together_with"]) == (
        "kv_pressure",
        "2 of 2 streams served on node n1",
    )
    # a reader that ran throughout leaves the node's silence unexplained
    unwatched = timeline(with_gap(20, 400, [20.0] * 40), start_us=server.start_us + 3 * MS)
    stall = only(attribute(unwatched, server, preemption, spec_active=False, rules=RULES, shared_hosts=lambda: hosts))
    assert stall.cause == "unknown"


def test_with_a_gateway_between_them_the_paths_part_is_split_where_the_content_was_held():
    """The server emits steadily; a connection stall holds chunk 12 for 900 ms either between the server and the
    gateway (the gateway relays it late) or after the gateway (it relays it on time)."""
    server = timeline(STEADY)
    late_at_gateway = held(server, (12, 900))
    at_gateway = only(
        attribute(held(late_at_gateway, (0, 0)), server, [], spec_active=False, rules=RULES, relay=late_at_gateway)
    )
    assert at_gateway.cause == "connection" and at_gateway.evidence["held_at"] == "gateway"
    assert float(at_gateway.evidence["held_at_gateway_ms"]) == pytest.approx(900, abs=1)
    on_time = held(server)
    after = only(attribute(held(server, (12, 900)), server, [], spec_active=False, rules=RULES, relay=on_time))
    assert after.cause == "connection" and after.evidence["held_at"] == "after the gateway"
    assert float(after.evidence["after_gateway_ms"]) == pytest.approx(900, abs=1)
    without = only(attribute(held(server, (12, 900)), server, [], spec_active=False, rules=RULES))
    assert "held_at" not in without.evidence


def test_a_serving_process_that_did_not_run_is_server_host_not_its_engine():
    """The server's gap is the serving process's own: its host watch saw it not running for most of the gap (an API
    server busy tokenising, its interpreter shared with other requests), with nothing on the node to explain it."""
    late = with_gap(11, 400)
    client = timeline(late, start_us=1_000_000_000 + 3 * MS)
    stall = only(attribute(client, watched(timeline(late), {12: 370}), [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence, stall.evidence["server_host_delay_ms"]) == ("server_host", 0.85, "370.0")
    # a prefill on the node in the window does not take a gap the serving process itself held the longer part of;
    # it is named second
    prefill = [event("prefill_burst", timeline(late), 12)]
    stall = only(attribute(client, watched(timeline(late), {12: 250}), prefill, spec_active=False, rules=RULES))
    assert stall.cause == "server_host" and stall.evidence["secondary_cause"] == "prefill_interference"
    # a server that held only a little of it leaves the gap to the node's explanation
    stall = only(attribute(client, watched(timeline(late), {12: 60}), prefill, spec_active=False, rules=RULES))
    assert stall.cause == "prefill_interference"
    # with nothing on the node, a serving process that did not run for a third of the wait is the cause anyway
    stall = only(attribute(client, watched(timeline(late), {12: 150}), [], spec_active=False, rules=RULES))
    assert (stall.cause, stall.confidence) == ("server_host", 0.6)
