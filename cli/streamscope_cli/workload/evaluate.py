"""`streamscope eval SCENARIO`: run a scenario, attribute its stalls, and score them against ground truth."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from streamscope import env
from streamscope_cli.workload import llama_eval
from streamscope_cli.workload.load import run_load, wait_until_stored
from streamscope_cli.workload.scenario import Scenario, parse, plan, scenario_document
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.analysis.evaluation import STALL_CAUSES, Score, score


def evaluate(
    scenario: Scenario,
    storage_dsn: str,
    settle_s: float = 2.0,
    timeout_s: float = 60.0,
    *,
    step: Callable[[str], None] = lambda doing: None,
    on_stream_done: Callable[[str], None] = lambda outcome: None,
) -> Score:
    """Run ``scenario`` against an embedded collector and score its attribution; ``step`` hears what it is doing
    between the streams (each of which ``on_stream_done`` hears end)."""
    # attribution runs once, below, over everything: the periodic job would race it for the watermark
    step(f"starting the collector on {storage_dsn}")
    collector = Collector(
        CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None)
    ).start()
    try:
        since = datetime.now(UTC)
        step("starting the engines and the proxy")
        run_load(
            scenario, collector.http_url, on_start=lambda workload: step("streaming"), on_stream_done=on_stream_done
        )
        step(f"storing the {len(plan(scenario))} streams")
        wait_until_stored(collector.query_client, len(plan(scenario)), since, timeout_s)
        time.sleep(settle_s)  # the last agent events and ground truth
        step("attributing their stalls")
        AttributionJob(collector.query_client, settle_s=0).run_once(until=datetime.now(UTC))
        step("scoring the stalls against the ground truth")
        return score(collector.query_client, since)
    finally:
        collector.stop()


def evaluate_named(
    name: str,
    storage_dsn: str | None = None,
    streams: int | None = None,
    *,
    step: Callable[[str], None] = lambda doing: None,
    on_stream_done: Callable[[str], None] = lambda outcome: None,
) -> Score:
    """A shipped scenario, or a scenario file, scored: on the simulated engines, or on llama-server when it says
    ``engine: llama-server`` (``llama_eval``)."""
    document, where = scenario_document(name)
    dsn = storage_dsn or env.default_storage_dsn()
    if llama_eval.is_real_engine(document):
        on_llama = llama_eval.parse(document, where)
        if streams:
            on_llama = replace(on_llama, load=replace(on_llama.load, streams=streams))
        step("building or finding llama-server, then running its streams (clients in a process of their own)")
        return llama_eval.evaluate(on_llama, dsn)
    scenario = parse(document, where)
    if streams:
        scenario = replace(scenario, load=replace(scenario.load, streams=streams))
    return evaluate(scenario, dsn, step=step, on_stream_done=on_stream_done)


def planned_streams(name: str, streams: int | None = None) -> int | None:
    """How many streams the simulated scenario ``name`` sends (None on llama-server, whose clients count apart)."""
    document, where = scenario_document(name)
    if llama_eval.is_real_engine(document):
        return None
    scenario = parse(document, where)
    return len(plan(replace(scenario, load=replace(scenario.load, streams=streams)) if streams else scenario))


BUSY_SHARE = 0.1
"""The share of a run's stalls that, made by the machine's own pauses, earns a word at the top of its output."""


def busy_machine(result: Score) -> str | None:
    """A line for the top of a run's output when the machine's own pauses made many of its stalls, so a busy
    machine is not read as a broken product; None otherwise."""
    own, total = result.machine_own_stalls(), sum(result.confusion.values())
    if not own or own < BUSY_SHARE * total:
        return None
    return (
        f"this machine was busy: {own} of {total} stalls were its own (its host held the clients or an engine's "
        "serving loop), not an injected cause"
    )


def cause_label(result: Score, cause: str) -> str:
    """A cause as a user reads it: a host cause only the machine made is named as such, not as an injection."""
    return f"{cause} (this machine)" if result.machine_own(cause) else cause


def render(name: str, result: Score) -> str:
    """The scenario's score as a user reads it: per cause precision, recall, F1, how many stalls were injected with
    it (support) and how many attribution gave it; the confusion matrix with whole labels; the footnotes spelled
    out."""
    lines = [f"scenario {name}", *filter(None, [busy_machine(result)])]
    width = max(22, *(len(cause_label(result, cause)) + 1 for cause in STALL_CAUSES))
    lines.append(f"{'cause':{width}} {'precision':>9} {'recall':>7} {'F1':>6} {'support':>8} {'attributed':>10}")

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for cause in STALL_CAUSES:
        attributed = sum(n for (_, p), n in result.confusion.items() if p == cause)
        if result.support(cause) or attributed:
            scores = f"{fmt(result.precision(cause)):>9} {fmt(result.recall(cause)):>7} {fmt(result.f1(cause)):>6}"
            lines.append(f"{cause_label(result, cause):{width}} {scores} {result.support(cause):>8} {attributed:>10}")
    labels = sorted({t for t, _ in result.confusion} | {p for _, p in result.confusion})
    column = max((len(label) for label in labels), default=4) + 2
    lines.append("")
    if result.slow_starts:
        waits = result.confusion.total()
        lines.append(f"scored: {waits - result.slow_starts} stalls and {result.slow_starts} slow starts")
    lines.append("confusion (rows: the cause injected, or none; columns: the cause attributed)")
    lines.append(" " * width + "".join(f"{label:>{column}}" for label in labels))
    for truth in labels:
        lines.append(
            f"{cause_label(result, truth):{width}}"
            + "".join(f"{result.confusion[(truth, p)]:>{column}}" for p in labels)
        )
    if result.undetected:
        lines.append(
            "injected, no stall or slow start found: "
            + ", ".join(f"{c} {n}" for c, n in sorted(result.undetected.items()))
        )
    lines.append(f"stalls no ground truth explains, blamed on the network or an engine: {result.blamed_on_injected()}")
    lines.append(
        f"stalls whose truth is none or the client's host, blamed on the network or an engine: "
        f"{result.falsely_blamed()}"
    )
    if result.own_pauses:
        lines.append(
            f"stalls the proxy's own pauses made (not injected, not scored): {result.own_pauses.total()}, attributed "
            + ", ".join(f"{cause} {n}" for cause, n in sorted(result.own_pauses.items()))
        )
    lines.append(
        f"a second cause named in the evidence: {result.secondary_named} stalls; another injected record of that "
        f"cause overlapped {result.secondary_right} of them"
    )
    return "\n".join(lines)
