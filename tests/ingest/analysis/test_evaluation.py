"""Scoring attribution against ground truth (analysis.evaluation.score) on stalls, ground truth and client streams
written into the embedded store: host-level records, undetected host stalls, blame, secondary causes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streamscope import semconv as sc
from streamscope_ingest.analysis.evaluation import Score, score
from tests.support import T0, store_spans, stream_span

BASE = datetime.fromtimestamp(T0 / 1e9, UTC)
SINCE = BASE - timedelta(seconds=1)
STALL_COLUMNS = ["tenant", "start_time", "end_time", "trace_id", "span_id", "service", "side", "seq", "gap_us"]
STALL_COLUMNS += ["cause", "confidence", "evidence", "server_seq"]
TRUTH_COLUMNS = ["tenant", "start_time", "end_time", "cause", "node_name", "scenario", "trace_id", "magnitude"]
TRUTH_COLUMNS += ["attributes", "chunk_indices"]


def at(ms: float) -> datetime:
    return BASE + timedelta(milliseconds=ms)


def stall(
    trace: str,
    start_ms: float,
    end_ms: float,
    cause: str,
    secondary: str = "",
    side: str = "client",
    server_seq: int | None = None,
) -> list:
    evidence = {"secondary_cause": secondary} if secondary else {}
    gap_us = round((end_ms - start_ms) * 1000)
    row = ["t", at(start_ms), at(end_ms), trace, "00" * 8, "sim-client", side, 3, gap_us, cause, 0.9, evidence]
    return [*row, server_seq]


def truth(cause: str, start_ms: float, end_ms: float, trace: str = "", held: list[int] = ()) -> list:
    """A ground-truth record; ``held``, the server chunks it held."""
    source = {"streamscope.truth.detail.source": "injected"} if not trace else {}
    node = "sim-client" if not trace else "gw"
    return ["t", at(start_ms), at(end_ms), cause, node, "s", trace, (end_ms - start_ms) / 1000, source, list(held)]


def scored(store_client, stalls: list[list], truths: list[list], streams_ms: list[list[float]] = ()) -> Score:
    if stalls:
        store_client.insert("stalls", stalls, column_names=STALL_COLUMNS)
    if truths:
        store_client.insert("ground_truth", truths, column_names=TRUTH_COLUMNS)
    spans = [
        stream_span(100 + i, 1, side="client", offsets_ms=offsets, tokens=[1] * len(offsets))
        for i, offsets in enumerate(streams_ms)
    ]
    if spans:
        store_spans(store_client, spans, service="sim-client")
    return score(store_client, SINCE)


def test_a_host_record_labels_any_client_stall_it_covers_by_time(store_client):
    result = scored(
        store_client,
        [
            stall("aa" * 16, 1000, 1500, "unknown"),
            stall("bb" * 16, 1010, 1490, "client_host", side="browser"),
            stall("cc" * 16, 1400, 2600, "unknown"),  # the record covers under a third of it
        ],
        [truth("client_host", 1020, 1480)],
    )
    assert result.confusion == {
        ("client_host", "unknown"): 1,
        ("client_host", "client_host"): 1,
        ("none", "unknown"): 1,
    }
    assert result.recall("client_host") == 0.5 and result.precision("client_host") == 1.0


def test_a_host_record_of_another_cause_or_a_trace_record_elsewhere_labels_nothing(store_client):
    result = scored(
        store_client,
        [stall("aa" * 16, 1000, 1500, "unknown"), stall("bb" * 16, 3000, 3500, "unknown")],
        [truth("network_buffering", 1000, 1500), truth("connection", 3000, 3500, trace="cc" * 16)],
    )
    assert result.confusion == {("none", "unknown"): 2}


def test_the_tighter_window_wins_between_a_trace_record_and_a_host_record(store_client):
    trace = "dd" * 16
    result = scored(
        store_client,
        [stall(trace, 8000, 8600, "network_buffering"), stall("ee" * 16, 9000, 9500, "unknown")],
        [
            truth("network_buffering", 8000, 8600, trace=trace),
            truth("client_host", 8100, 8400),
            truth("client_host", 8950, 9500),
            truth("connection", 9000, 9900, trace="ee" * 16),
        ],
    )
    assert result.confusion == {("network_buffering", "network_buffering"): 1, ("client_host", "unknown"): 1}


def test_a_host_pause_holds_content_only_from_when_the_path_let_it_through(store_client):
    buffered, direct = "d1" * 16, "d2" * 16
    result = scored(
        store_client,
        [stall(buffered, 1000, 1650, "network_buffering"), stall(direct, 1000, 1650, "client_host")],
        [
            # a gateway held the content until 1400; the client's host did not run the reader from 1150 to 1640
            truth("network_buffering", 980, 1400, trace=buffered),
            truth("client_host", 1150, 1640),
        ],
    )
    # the pause held the buffered stream's content for 240 ms of the stall, the gateway for 400 (though the
    # pause is the longer window); on the stream with nothing on its path, the pause held the content for 490
    assert result.confusion == {("network_buffering", "network_buffering"): 1, ("client_host", "client_host"): 1}


def test_a_host_pause_holds_content_only_from_when_the_engine_emitted_it(store_client):
    """A long prompt's prefill held the engine from 600 to 1610 (the stream's content came out at its end); the
    client's host did not run the reader from 1180 to 1640, a window that fits the stall better, but it held the
    content only for the 30 ms after the engine emitted it."""
    prefilled = "f1" * 16
    result = scored(
        store_client,
        [stall(prefilled, 1000, 1650, "prefill_interference")],
        [truth("prefill_interference", 600, 1610, trace=prefilled), truth("client_host", 1180, 1640)],
    )
    assert result.confusion == {("prefill_interference", "prefill_interference"): 1}


def test_a_host_pause_inside_a_slowdown_holds_content_from_its_start(store_client):
    """A throttled GPU slows every step but the stream's content still comes: a host pause inside the throttle held
    what arrived meanwhile, from the pause's start (only a record that held content altogether moves it)."""
    throttled = "f2" * 16
    result = scored(
        store_client,
        [stall(throttled, 1000, 1650, "client_host")],
        [truth("gpu_throttle", 600, 1700, trace=throttled), truth("client_host", 1020, 1640)],
    )
    assert result.confusion == {("client_host", "client_host"): 1}


def test_a_record_that_held_only_content_sent_after_the_stall_ended_does_not_label_it(store_client):
    """A connection stalled right after delivering server chunk 12: the stall that chunk ended (the client's
    host read it late) was not the connection's, the next one was; with no server chunk known, time decides."""
    trace, unmatched = "e1" * 16, "e2" * 16
    held = list(range(13, 21))
    result = scored(
        store_client,
        [
            stall(trace, 1000, 1350, "client_host", server_seq=12),
            stall(trace, 1350, 1420, "connection", server_seq=13),
            stall(unmatched, 1000, 1350, "connection"),
        ],
        [
            truth("client_host", 900, 1400),
            truth("connection", 1050, 1400, trace=trace, held=held),
            truth("connection", 1050, 1400, trace=unmatched, held=held),
        ],
    )
    assert result.confusion == {("client_host", "client_host"): 1, ("connection", "connection"): 2}
    assert result.made_a_stall == {"client_host": 1, "connection": 2}


def test_a_record_told_from_the_clients_arrivals_yields_to_the_paths_own_record_of_what_it_held(store_client):
    """A long prompt's prefill (its chunks told from what the client received meanwhile) and a proxy's stall (the
    chunks it held) both cover a stall; the prefill's window fits it a little better, but the proxy held the chunk
    that ended it. Without the proxy's record, or with a prefill record the engine's own numbering names, the
    better fit labels it; so it does when the proxy held only the end of the stall (a prefill of 1.7 s, then the
    proxy's flush 700 ms later): the prefill held the larger part."""
    seen, engine, alone, both = "f1" * 16, "f2" * 16, "f3" * 16, "f4" * 16
    prefill = {"streamscope.truth.detail.kind": "long_prompt", "streamscope.truth.detail.indices": "arrivals"}
    told = truth("prefill_interference", 1027, 1869, trace=seen, held=[251, 252])
    told[8] = prefill
    result = scored(
        store_client,
        [
            stall(seen, 1000, 1841, "connection", server_seq=251),
            stall(engine, 1000, 1841, "connection", server_seq=251),
            stall(alone, 1000, 1841, "connection", server_seq=251),
            stall(both, 1000, 3079, "network_buffering", server_seq=440),
        ],
        [
            told,
            truth("connection", 940, 1840, trace=seen, held=[251, 252]),
            truth("prefill_interference", 1027, 1869, trace=engine, held=[251, 252]),
            truth("connection", 940, 1840, trace=engine, held=[251, 252]),
            [*told[:6], alone, *told[7:]],
            [*truth("prefill_interference", 746, 2707, trace=both)[:8], prefill, []],
            truth("network_buffering", 2378, 3079, trace=both, held=[440, 441]),
        ],
    )
    assert result.confusion == {
        ("connection", "connection"): 1,
        ("prefill_interference", "connection"): 2,
        ("prefill_interference", "network_buffering"): 1,
    }


def test_an_undetected_host_record_is_one_that_held_a_stream_mid_answer_and_met_no_stall(store_client):
    result = scored(
        store_client,
        [stall("aa" * 16, 1000, 1500, "unknown")],
        [
            truth("client_host", 1020, 1480),  # labelled a stall: found
            truth("client_host", 20000, 20500),  # a stream was mid-answer through it: undetected
            truth("client_host", 30000, 30500),  # no stream was answering
            truth("client_host", 40000, 40300),  # under the absolute threshold
            truth("client_host", 19000, 19600),  # a stream received content after it, but none before
        ],
        streams_ms=[[500, 1800], [19800, 20700], [39000, 40500]],
    )
    assert result.undetected == {"client_host": 1}
    assert (result.injected, result.made_a_stall) == ({"client_host": 5}, {"client_host": 1})
    assert result.support("client_host") == 2 and result.recall("client_host") == 0.0


def test_blamed_on_injected_counts_only_network_or_engine_blame_without_a_cause(store_client):
    stalls = [
        stall("a1" * 16, 1000, 1500, "network_buffering"),
        stall("a2" * 16, 2000, 2500, "kv_pressure"),
        stall("a3" * 16, 3000, 3500, "client_host"),
        stall("a4" * 16, 4000, 4500, "client_render"),
        stall("a5" * 16, 5000, 5500, "unknown"),
        stall("a6" * 16, 6000, 6500, "connection"),  # explained by the host: a wrong cause, not blame
    ]
    result = scored(store_client, stalls, [truth("client_host", 6000, 6500)])
    assert result.blamed_on_injected() == 2
    assert result.falsely_blamed() == 3, "the strict count adds a network cause put on the host's stall"


def test_secondary_causes_are_right_when_another_record_of_that_cause_overlaps(store_client):
    net, kv, lone = "f1" * 16, "f2" * 16, "f3" * 16
    stalls = [
        stall(net, 1000, 1600, "client_host", secondary="network"),  # a connection record touches it
        stall(kv, 3000, 3600, "kv_pressure", secondary="client_host"),  # the host record touches it
        stall(lone, 5000, 5600, "client_host", secondary="client_host"),  # only the labelling record
        stall("f4" * 16, 7000, 7600, "unknown", secondary="spec_decode"),  # a record that ended before it
        stall("f5" * 16, 9000, 9600, "unknown"),
    ]
    truths = [
        truth("client_host", 1000, 1600),
        truth("connection", 1500, 1700, trace=net),
        truth("kv_pressure", 3000, 3600, trace=kv),
        truth("client_host", 3500, 3700),
        truth("client_host", 5000, 5600),
        truth("spec_decode", 6800, 6990, trace="f4" * 16),
    ]
    result = scored(store_client, stalls, truths)
    assert (result.secondary_named, result.secondary_right) == (4, 2)
    assert result.confusion[("client_host", "client_host")] == 2  # the primary score is unchanged by secondaries


def test_the_proxys_own_pauses_are_counted_apart_not_scored(store_client):
    paused, injected = "d1" * 16, "d2" * 16
    own = truth("connection", 1000, 1500, trace=paused)
    own[8] = {"streamscope.truth.detail.kind": "paused", "streamscope.truth.detail.source": "watchdog"}
    result = scored(
        store_client,
        [stall(paused, 1000, 1500, "client_host"), stall(injected, 3000, 3500, "connection")],
        [own, truth("connection", 3000, 3500, trace=injected)],
    )
    assert result.confusion == {("connection", "connection"): 1}
    assert result.own_pauses == {"client_host": 1}
    assert result.recall("connection") == result.precision("connection") == 1.0
    assert result.injected == {"connection": 1}


def test_a_serving_nodes_own_host_labels_the_stalls_of_the_streams_it_served(store_client):
    on_n1, on_n2 = f"{7:032x}", f"{8:032x}"
    node = sc.STREAMSCOPE_NODE_NAME
    servers = [
        stream_span(trace, 2, side="server", offsets_ms=[100, 200], tokens=[1, 1], attributes={node: name})
        for trace, name in ((7, "n1"), (8, "n2"))
    ]
    store_spans(store_client, servers, service="sim-engine")
    record = truth("server_host", 1000, 1500)
    record[4] = "n1"  # the node whose serving loop ran late
    result = scored(
        store_client,
        [stall(on_n1, 1000, 1500, "server_host"), stall(on_n2, 1000, 1500, "server_host")],
        [record],
    )
    assert result.confusion == {("server_host", "server_host"): 1, ("none", "server_host"): 1}
    # the record is counted as injected, and it made a stall: none of it slowed content without one
    assert result.injected["server_host"] == result.made_a_stall["server_host"] == 1


def test_host_records_are_told_apart_by_who_made_them(store_client):
    """A scenario's host load (``source: injected``) against the machine's own pauses its watchdog saw: the
    machine's alone, a cause is what the machine did, not an injection."""
    watchdog = truth("client_host", 1000, 1500)
    watchdog[8] = {"streamscope.truth.detail.source": "watchdog"}
    result = scored(store_client, [stall("aa" * 16, 1000, 1500, "client_host")], [watchdog])
    assert result.host_records == {("client_host", False): 1}
    assert result.machine_own("client_host") and result.machine_own_stalls() == 1

    store_client.insert("ground_truth", [truth("client_host", 3000, 3200)], column_names=TRUTH_COLUMNS)
    both = score(store_client, SINCE)
    assert both.host_records == {("client_host", False): 1, ("client_host", True): 1}
    assert not both.machine_own("client_host") and both.machine_own_stalls() == 0


SLOW_START_COLUMNS = ["tenant", "start_time", "end_time", "trace_id", "span_id", "service", "side", "ttft_us"]
SLOW_START_COLUMNS += ["host_us", "cause", "confidence", "evidence"]


def slow_start(trace: str, start_ms: float, end_ms: float, cause: str) -> list:
    ttft_us = round((end_ms - start_ms) * 1000)
    return ["t", at(start_ms), at(end_ms), trace, "00" * 8, "sim-client", "client", ttft_us, 0, cause, 0.85, {}]


def first_token(cause: str, start_ms: float, end_ms: float, trace: str) -> list:
    """A first token's wait, as the real-engine clients record one (the stream's first event held)."""
    row = truth(cause, start_ms, end_ms, trace, held=[1])
    row[8] = {"streamscope.truth.detail.kind": "first_token"}
    return row


def test_slow_starts_are_scored_by_the_first_token_truth_of_their_trace(store_client):
    store_client.insert(
        "slow_starts",
        [
            slow_start("aa" * 16, 0, 2500, "queue"),
            slow_start("bb" * 16, 0, 1800, "queue"),  # truth says a prefill held it
            slow_start("cc" * 16, 0, 1200, "prefill_interference"),  # nothing injected
        ],
        column_names=SLOW_START_COLUMNS,
    )
    result = scored(
        store_client,
        [stall("aa" * 16, 4000, 4600, "connection")],
        [
            first_token("queue", 0, 2500, "aa" * 16),
            first_token("prefill_interference", 300, 1800, "bb" * 16),
            truth("connection", 4000, 4600, "aa" * 16, held=[40]),
            first_token("queue", 0, 3000, "dd" * 16),  # a queued stream attribution missed
            first_token("queue", 0, 400, "ee" * 16),  # queued briefly: no slow start to find
        ],
    )
    assert result.confusion == {
        ("queue", "queue"): 1,
        ("prefill_interference", "queue"): 1,
        ("none", "prefill_interference"): 1,
        ("connection", "connection"): 1,
    }
    assert result.slow_starts == 3
    assert result.undetected == {"queue": 1}
    assert result.recall("queue") == 0.5 and result.precision("queue") == 0.5
