"""Attribution on minimal synthetic streams, one per cause."""

from __future__ import annotations

import numpy as np

from ingest.attribution import NodeEvent, StallRules, Timeline, attribute, find_stalls

RULES = StallRules()
MS = 1000


def timeline(gaps_ms: list[float], start_us: int = 1_000_000_000, chunk_bytes: int = 4) -> Timeline:
    """Content chunks spaced by ``gaps_ms`` (the first one after a 100 ms TTFT)."""
    offsets = np.cumsum([100 * MS] + [int(g * MS) for g in gaps_ms]).astype(np.int64)
    return Timeline(start_us, offsets, np.full(offsets.size, chunk_bytes, dtype=np.int64))


STEADY = [20.0] * 30


def with_gap(at: int, gap_ms: float, base: list[float] = STEADY) -> list[float]:
    gaps = list(base)
    gaps[at] = gap_ms
    return gaps


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


def test_a_prefill_burst_outranks_other_engine_events():
    server = timeline(with_gap(5, 480))
    events = [event("prefill_burst", server, 6), event("kv_high_water", server, 6)]
    stall = only(attribute(timeline(with_gap(5, 480)), server, events, spec_active=True, rules=RULES))
    assert stall.cause == "prefill_interference"


def test_spec_decode_from_an_acceptance_drop_or_by_elimination():
    server = timeline(with_gap(7, 180))
    by_event = only(
        attribute(
            timeline(with_gap(7, 180)),
            server,
            [event("spec_acceptance_drop", server, 8)],
            spec_active=True,
            rules=RULES,
        )
    )
    assert (by_event.cause, by_event.confidence) == ("spec_decode", 0.85)
    by_elimination = only(attribute(timeline(with_gap(7, 180)), server, [], spec_active=True, rules=RULES))
    assert (by_elimination.cause, by_elimination.confidence) == ("spec_decode", 0.6)
    unexplained = only(attribute(timeline(with_gap(7, 180)), server, [], spec_active=False, rules=RULES))
    assert unexplained.cause == "unknown"


def test_server_on_time_client_late_is_the_network_once_a_hiccup_repeatedly_a_gateway():
    server = timeline(STEADY)
    hiccup = only(attribute(timeline(with_gap(12, 900)), server, [], spec_active=False, rules=RULES))
    assert (hiccup.cause, hiccup.server_gap_us) == ("connection", 20 * MS)
    buffered = timeline(with_gap(20, 600, with_gap(8, 600)))
    stalls = attribute(buffered, server, [event("preemption", server, 9)], spec_active=True, rules=RULES)
    assert [s.cause for s in stalls] == ["network_buffering", "network_buffering"]


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
    server = timeline(STEADY)
    held = timeline(with_gap(9, 500), start_us=server.start_us - 2 * MS)
    held = Timeline(held.start_us, held.offsets_us + 300 * MS, held.content_bytes)  # the first chunk came 300 ms late
    stall = only(attribute(held, server, [], spec_active=False, rules=RULES))
    assert stall.cause == "network_buffering"
    assert stall.evidence["first_chunk_lag_ms"] == "300.0"
    on_time = only(attribute(timeline(with_gap(9, 500)), server, [], spec_active=False, rules=RULES))
    assert on_time.cause == "connection"


def test_a_hiccup_on_top_of_a_buffering_gateway_stands_out_from_the_flushes():
    server = timeline(STEADY)
    gaps = with_gap(22, 1400, with_gap(14, 600, with_gap(6, 600)))  # two flushes and one long hiccup
    client = timeline(gaps)
    client = Timeline(client.start_us, client.offsets_us + 300 * MS, client.content_bytes)  # first chunk held
    assert [s.cause for s in attribute(client, server, [], spec_active=False, rules=RULES)] == [
        "network_buffering",
        "network_buffering",
        "connection",
    ]
