"""``streamscope bench`` and ``streamscope compare``: the load they send, the verdicts they give, and the whole path
against the simulated engine in a process of its own (bench in another, as a CI job runs them)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from streamscope.errors import ConfigError
from streamscope_cli.bench.compare import (
    DEFAULT_GATES,
    KINDS_DIFFER,
    NOT_GATED,
    PASS,
    REGRESSION,
    UNKNOWN,
    Gate,
    compare,
    exit_code,
    parse_gates,
)
from streamscope_cli.bench.figures import FIGURES, RunStreams, read_run
from streamscope_cli.bench.plan import BenchPlan, Lengths, requests
from streamscope_cli.bench.run import parse_impairment
from streamscope_cli.bench.tables import out_of_gap_figures
from streamscope_cli.child import CommandProcess
from tests.support import free_port

SLO_MS = 400.0


def test_one_seed_sends_the_same_requests_in_the_same_order():
    plan = BenchPlan(
        url="http://h:1/v1", model="m", requests=5, prompt_tokens=Lengths(3, 9), output_tokens=Lengths(8, 64)
    )
    first, again = (
        [r.body for r, _ in zip(requests(plan), range(50), strict=False)] for _ in range(2)
    )  # fmt: skip
    other = [r.body for r, _ in zip(requests(BenchPlan(**{**plan.__dict__, "seed": 1})), range(50), strict=False)]
    assert first == again and first != other
    assert {len(b["messages"][0]["content"].split()) for b in first} <= set(range(3, 10))
    assert {b["max_tokens"] for b in first} <= set(range(8, 65)) and len({b["max_tokens"] for b in first}) > 5
    assert all(b["stream"] and b["model"] == "m" for b in first)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": None}, "give one of --concurrency"),
        ({"rate": 2.0}, "give one of --concurrency"),
        ({"requests": None}, "give one of --duration"),
        ({"url": "127.0.0.1:8000/v1"}, "--url must be an http"),
        ({"api": "grpc"}, "--api must be one of"),
        ({"label": "a b"}, "--label takes"),
    ],
)
def test_a_plan_that_cannot_run_says_which_option(options, message):
    with pytest.raises(ConfigError, match=message):
        BenchPlan(**{"url": "http://h:1/v1", "model": "m", "requests": 5, **options})
    with pytest.raises(ConfigError, match="--prompt-tokens"):
        Lengths.parse("9-3", "--prompt-tokens")


def test_gates_and_impairments_are_read_from_their_options():
    gates = parse_gates(["p99_of_p99=5%", "itl_goodput=0.05", "ttft_p95=off", "jitter_p50=20%"])
    assert gates["p99_of_p99"] == Gate(0.05, relative=True) and gates["itl_goodput"] == Gate(0.05, relative=False)
    assert "ttft_p95" not in gates and gates["jitter_p50"] == Gate(0.2, relative=True)
    assert gates["error_rate"] == DEFAULT_GATES["error_rate"]
    for bad in ("p99=5%", "p99_of_p99", "p99_of_p99=five"):
        with pytest.raises(ConfigError, match="--max-regression"):
            parse_gates([bad])
    assert parse_impairment("stall:duration_ms=300,probability=0.05,after_event=10") == {
        "kind": "stall", "duration_ms": 300, "probability": 0.05, "after_event": 10}  # fmt: skip
    with pytest.raises(ConfigError, match="is not key=value"):
        parse_impairment("stall:300")


def run_of(
    p99_ms: np.ndarray, *, longest_ms: np.ndarray | None = None, started_s: np.ndarray | None = None, name: str = "r"
) -> RunStreams:
    """A run whose streams have these per-stream p99 gaps (their longest gap too, unless given), 40 at a time, each
    1 s long."""
    n = p99_ms.size
    rng = np.random.default_rng(n)
    return RunStreams(
        name,
        "",
        ttft_ms=rng.normal(200, 20, n),
        gap_p99_ms=p99_ms,
        gap_max_ms=p99_ms if longest_ms is None else longest_ms,
        jitter=p99_ms / 20,
        tokens_per_s=rng.normal(50, 5, n),
        tokens=np.full(n, 100.0),
        stalls=(p99_ms > SLO_MS).astype(float),
        error=np.zeros(n),
        cancelled=np.zeros(n),
        host_held=np.zeros(n),
        started_s=np.arange(n) // 40 * 1.0 if started_s is None else started_s,
        duration_s=np.ones(n),
        span_s=n / 40 + 1,
        estimated_tokens=False,
    )


def steady(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).gamma(20, 1.5, n)  # p99 gaps around 30 ms


def verdicts(baseline: RunStreams, candidate: RunStreams) -> dict[str, str]:
    results = compare(baseline, candidate, slo_ms=SLO_MS, gates=DEFAULT_GATES, resamples=400)
    return {r.figure.name: r.verdict for r in results if r.verdict != "not gated"} | {"exit": str(exit_code(results))}


def test_two_runs_of_the_same_load_pass():
    assert set(verdicts(run_of(steady(400, 1)), run_of(steady(400, 2))).values()) == {PASS, "0"}


def test_a_300_ms_stall_in_5_percent_of_streams_is_a_regression_of_the_p99_of_p99():
    stalled = steady(400, 2)
    stalled[::20] += 300  # one stream in twenty
    found = verdicts(run_of(steady(400, 1)), run_of(stalled))
    assert found["p99_of_p99"] == found["p99_of_max"] == REGRESSION and found["exit"] == "1"
    assert found["ttft_p95"] == found["tokens_per_s_p50"] == PASS  # nothing else moved


def test_a_pace_counted_in_one_run_and_estimated_in_the_other_is_not_compared():
    """Tokens estimated from bytes read other numbers than the provider's counts (about 4 bytes a token against
    the tokenizer's): a candidate whose endpoint stopped sending counts would read as a change of pace. The pace
    figures of such a pair are unknown, said in the verdict, and the run cannot pass on them."""
    baseline, candidate = run_of(steady(400, 1)), run_of(steady(400, 2))
    estimated = replace(candidate, tokens_per_s=candidate.tokens_per_s * 1.5, estimated_tokens=True)
    results = {
        r.figure.name: r for r in compare(baseline, estimated, slo_ms=SLO_MS, gates=DEFAULT_GATES, resamples=200)
    }
    for name in ("tokens_per_s_p50", "fleet_tokens_per_s"):
        assert math.isnan(results[name].change), name
    assert results["tokens_per_s_p50"].verdict == KINDS_DIFFER
    assert results["fleet_tokens_per_s"].verdict == NOT_GATED
    assert results["p99_of_p99"].verdict == PASS  # the rest compared as ever
    assert exit_code(list(results.values())) == 2


def test_one_freeze_in_a_long_stream_is_seen_by_its_longest_gap_not_its_p99():
    """A stream of 100 gaps or more has its p99 below its longest gap: one 300 ms freeze in 5 % of 128-token
    streams leaves every stream's p99 as it was, and moves the p99 across streams of each one's longest gap."""
    p99 = steady(400, 2)
    longest = p99 * 1.3
    longest[::20] = 300.0
    before = steady(400, 1)
    found = verdicts(run_of(before, longest_ms=before * 1.3), run_of(p99, longest_ms=longest))
    assert (found["p99_of_p99"], found["p99_of_max"], found["exit"]) == (PASS, REGRESSION, "1")


def test_one_hiccup_shared_by_the_streams_open_at_that_moment_is_not_a_sure_shift():
    """A pause of the engine or the host slows every stream open then: 12 of the 40 streams that ran together get
    a 90 ms gap. Resampled stream by stream it looks like a sure +200 % on the p99 of p99; in blocks of streams that
    ran together, a run without that moment is as likely, and the gate does not fail on it."""
    hiccup = steady(400, 1)  # the baseline's streams, but for the hiccup
    hiccup[200:212] = 90.0
    found = verdicts(run_of(steady(400, 1)), run_of(hiccup))
    assert found["p99_of_p99"] == PASS and found["exit"] == "0"


def test_streams_that_all_ran_together_cannot_tell_noise_from_a_shift():
    """64 requests at a concurrency of 64 start together: one block, every resample the same, an interval of zero
    width; two draws of one distribution would read as a sure regression. Not enough to tell, instead."""
    together_at_once = np.zeros(64)
    found = verdicts(
        run_of(steady(64, 1), started_s=together_at_once), run_of(steady(64, 12), started_s=together_at_once)
    )
    assert found["p99_of_p99"] == UNKNOWN and found["exit"] == "2"


def test_too_few_streams_to_tell_is_exit_2():
    found = verdicts(run_of(steady(400, 1)), run_of(steady(12, 2)))
    assert found["p99_of_p99"] == UNKNOWN and found["exit"] == "2"


@pytest.fixture(scope="module")
def engine_url():
    port = free_port()
    with CommandProcess("engine", "--port", str(port)) as engine:
        yield engine.listening_url


def streamscope(*arguments: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "streamscope_cli.main", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )


def test_bench_and_compare_gate_a_release_end_to_end(engine_url, tmp_path: Path):
    """Two runs of one load against the engine pass; a run whose path stalls a tenth of its streams for 300 ms
    fails, naming the p99 of per-stream p99; each run prints its table and is found again by its label. (A twentieth
    of 120 streams is six: a bootstrap draws runs with one or none of them, and cannot call the shift sure.)"""
    storage = f"chdb://{tmp_path / 'store'}"
    load = ["--url", f"{engine_url}/v1", "--model", "sim-llm", "--requests", "120", "--concurrency", "6"]
    load += ["--output-tokens", "24", "--prompt-tokens", "16", "--warmup", "6", "--storage", storage]
    stalls = ["--impair", "stall:duration_ms=300,probability=0.1,after_event=8"]
    for label, extra in (("before", []), ("after", []), ("stalled", stalls)):
        bench = streamscope("bench", *load, "--label", label, *extra)
        assert bench.returncode == 0, bench.stderr[-3000:]
        assert "p99 across streams of per-stream p99 gap" in bench.stdout and "120 completed" in bench.stdout
    # the simulated engine shares this machine, whose load may change between two runs under the test suite: the
    # limits are those of a noisy bench, still far under what the stalls do (the p99 of p99 from ~50 to ~750 ms)
    gates = ["--max-regression", "p99_of_p99=100%", "--max-regression", "p99_of_max=100%"]
    gates += ["--max-regression", "ttft_p95=100%"]
    gates += ["--max-regression", "tokens_per_s_p50=50%", "--storage", storage]
    same = streamscope("compare", "before", "after", *gates)
    assert (same.returncode, same.stdout.splitlines()[-1]) == (0, "pass"), same.stdout
    worse = streamscope("compare", "before", "stalled", *gates)
    assert worse.returncode == 1 and "p99_of_p99" in worse.stdout.splitlines()[-1], worse.stdout


def test_a_stream_the_bench_hosts_own_loop_held_is_out_of_the_gap_figures():
    """The load generator's own host held one stream for 900 ms (a ``client_host`` stall): that says nothing of the
    endpoint, so the gap figures leave the stream out and count it, while its TTFT and pace still count."""

    class Result:
        def __init__(self, rows: list[tuple]) -> None:
            self.rows = rows

    def query(sql: str) -> Result:
        if "GROUP BY run" in sql:
            return Result([("run-1", "label-1")])
        # ttft, p99, longest, jitter, pace, tokens, stalls, failed, left, held, started_us, duration_us, estimated
        steady = [(50.0, 30.0, 35.0, 1.5, 40.0, 100, 0, 0, 0, 0, 1_000_000 * i, 2_000_000, 1) for i in range(40)]
        return Result([*steady, (900.0, 900.0, 900.0, 30.0, 20.0, 100, 1, 0, 0, 1, 5_000_000, 3_000_000, 1)])

    streams = read_run(query, "label-1")
    assert (streams.run, streams.count, int(streams.host_held.sum())) == ("run-1", 41, 1)
    figures = {f.name: f.of(streams, SLO_MS) for f in FIGURES}
    assert figures["p99_of_p99"] == 30.0 and figures["itl_goodput"] == 1.0 and figures["stalls_per_stream"] == 0.0
    assert figures["ttft_p99"] == 900.0  # the wait for the first token is not a gap between chunks
    assert "1 held by this machine's own host" in out_of_gap_figures(streams)


def test_through_the_recording_gateway_a_paths_stall_is_put_on_the_path(engine_url, tmp_path: Path):
    """With --gateway each stream's gateway side is recorded beside its client side: a 500 ms stall the path
    (the impairment proxy between the clients and the gateway) makes in every stream is the path's
    (``connection``), not the engine's, and every stream has both sides in the store."""
    storage = f"chdb://{tmp_path / 'store'}"
    bench = streamscope(
        "bench", "--url", f"{engine_url}/v1", "--model", "sim-llm", "--requests", "24", "--concurrency", "8",
        "--output-tokens", "24", "--prompt-tokens", "16", "--gateway", "--label", "path",
        "--impair", "stall:duration_ms=500,probability=1,after_event=8", "--storage", storage,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    (stalls,) = [line for line in bench.stdout.splitlines() if "stalls by cause" in line]
    causes = dict(re.findall(r"(\w+) (\d+)", stalls.split("│")[2]))
    assert max(causes, key=lambda cause: int(causes[cause])) == "connection", stalls
    sides = streamscope("sql", "--storage", storage, "SELECT side, count() FROM streams GROUP BY side ORDER BY side")
    assert sides.stdout.split() == ["side", "count()", "client", "24", "gateway", "24"], sides.stdout


def test_an_instrumented_endpoint_exports_its_side_into_the_run(tmp_path: Path):
    """An endpoint recording its own server side (``streamscope engine`` serves through ServerStream) exports to
    the port the run's collector listens on: each stream is stored with its server side, found through the
    caller's trace, and the run says how many it has."""
    otlp_port = free_port()
    engine_port = free_port()
    with CommandProcess("engine", "--port", str(engine_port), "--collector", f"http://127.0.0.1:{otlp_port}") as engine:
        storage = f"chdb://{tmp_path / 'store'}"
        bench = streamscope(
            "bench", "--url", f"{engine.listening_url}/v1", "--model", "sim-llm", "--requests", "12",
            "--concurrency", "4", "--output-tokens", "16", "--otlp-port", str(otlp_port), "--storage", storage,
        )  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert "the endpoint's own side: 12 of 12 streams" in bench.stdout, bench.stdout
    query = (
        "SELECT s.side, count() FROM streams AS s WHERE s.trace_id IN "
        "(SELECT trace_id FROM streams WHERE side = 'client') GROUP BY s.side ORDER BY s.side"
    )
    sides = streamscope("sql", "--storage", storage, "--format", "tsv", query)
    assert sides.stdout.split()[2:] == ["client", "12", "server", "12"], sides.stdout


@pytest.mark.parametrize(
    ("api", "base", "transport"),
    [("completions", "/v1", "sse"), ("anthropic", "/v1", "sse"), ("ollama", "", "chunked")],
)
def test_bench_drives_each_api_it_names(engine_url, tmp_path: Path, api, base, transport):
    """Besides chat: the legacy completions API, Anthropic's Messages (named events) and Ollama's /api/chat, a JSON
    document a line."""
    storage = f"chdb://{tmp_path / 'store'}"
    bench = streamscope(
        "bench", "--url", f"{engine_url}{base}", "--api", api, "--model", "sim-llm", "--requests", "12",
        "--concurrency", "4", "--output-tokens", "16", "--storage", storage,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr[-3000:]
    assert "12 completed" in bench.stdout
    query = "SELECT transport, operation, count(), min(content_chunks) FROM streams GROUP BY ALL"
    rows = streamscope("sql", "--storage", storage, "--format", "tsv", query).stdout.split()
    operation = "text_completion" if api == "completions" else "chat"
    assert rows[-4:] == [transport, operation, "12", "16"], rows


def test_compare_that_cannot_compare_exits_3_apart_from_its_verdicts(tmp_path: Path):
    """A CI job reads 1 as a regression and 2 as too few streams: a mistyped option, a run not found or a store out
    of reach is neither, and says why in one line."""
    from click.testing import CliRunner

    from streamscope_cli.main import cli

    mistyped = CliRunner().invoke(cli, ["compare", "a", "b", "--max-regresion", "p99_of_p99=5%"])
    assert mistyped.exit_code == 3 and "No such option" in mistyped.output
    unknown_gate = CliRunner().invoke(cli, ["compare", "a", "b", "--max-regression", "p99=5%"])
    assert unknown_gate.exit_code == 3 and "--max-regression takes NAME=LIMIT" in unknown_gate.output
    nowhere = CliRunner().invoke(cli, ["compare", "a", "b", "--storage", f"chdb://{tmp_path / 'none'}"])
    assert nowhere.exit_code == 3 and "no store at" in nowhere.output and "Traceback" not in nowhere.output
