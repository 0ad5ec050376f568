"""Stall attribution accuracy over many scenarios, on a quiet host or beside CPU burners, in one run.

Each scenario runs through `streamscope eval` (its clients and an embedded collector in one child process, each
engine node and the proxy in processes of their own, on a fresh store) and is scored against its ground truth.
The table gives per scenario and cause the precision, recall and support, then every cause pooled over the
scenarios, the stalls that no injected cause explains but attribution blamed on the network or an engine (and the
strict count: truth none or the client's own host), and the load average the host ran at. ``--burners N`` runs N
processes that spin on the CPU for the whole run (a busy host, load ≥ N).

Three sets on the simulated engines: ``shipped`` (the scenarios that ship with streamscope), ``tuning`` and
``holdout`` (benchmarks/attribution/): the rules are tuned on the first two, the holdout set is only ever measured.
``llama``: the shipped scenarios on llama.cpp's real server (``streamscope_cli.workload.llama_eval``).

    python -m benchmarks.attribution_accuracy [--quick] [--set holdout] [--burners 3] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from streamscope_cli.workload.host_load import spawn_burner, stop_burners
from streamscope_ingest.analysis.evaluation import Score

HERE = Path(__file__).resolve().parent / "attribution"
QUICK = ("steady", str(HERE / "tuning" / "short-stalls.yaml"))


def scenario_set(name: str) -> list[str]:
    if name in ("shipped", "llama"):
        from streamscope_cli.workload.scenario import REAL_ENGINE_DIRECTORY, shipped

        return shipped(REAL_ENGINE_DIRECTORY if name == "llama" else "")
    return sorted(str(path) for path in (HERE / name).glob("*.yaml"))


def _score_one(scenario: str, storage_dsn: str, streams: int | None) -> dict[str, Any]:
    """Runs in the child: one scenario, scored; the confusion and the undetected as JSON-able lists."""
    from streamscope_cli.workload.evaluate import evaluate_named

    result = evaluate_named(scenario, storage_dsn, streams)
    return {
        "confusion": [[t, p, n] for (t, p), n in result.confusion.items()],
        "undetected": dict(result.undetected),
        "own_pauses": dict(result.own_pauses),
    }


class ScenarioFailed(Exception):
    """One scenario's run ended in an error: reported, and the others still run."""


def run_one(scenario: str, streams: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="streamscope-accuracy-") as directory:
        code = (
            "import json, sys; from benchmarks.attribution_accuracy import _score_one; "
            "print(json.dumps(_score_one(sys.argv[1], sys.argv[2], int(sys.argv[3]) or None)))"
        )
        before = os.getloadavg()[0]
        started = time.monotonic()
        child = subprocess.run(
            [sys.executable, "-c", code, scenario, f"chdb://{directory}/store", str(streams or 0)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        if child.returncode != 0:
            raise ScenarioFailed(f"{scenario} failed:\n{child.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    result["seconds"] = time.monotonic() - started
    result["load"] = (before, os.getloadavg()[0])
    return result


def pooled(*results: dict[str, Any]) -> Score:
    """Scenarios' results as one score (their confusions and undetected records added up)."""
    score = Score()
    for result in results:
        for truth, predicted, n in result["confusion"]:
            score.confusion[(truth, predicted)] += n
        score.undetected.update(result["undetected"])
        score.own_pauses.update(result.get("own_pauses", {}))
    return score


def _causes(score: Score) -> list[str]:
    seen = {t for t, _ in score.confusion} | {p for _, p in score.confusion} | set(score.undetected)
    return sorted(seen - {"none", "unknown"})


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(results: dict[str, dict[str, Any]], burners: int) -> str:
    lines = [
        f"attribution accuracy, {burners} CPU burner(s) beside the run",
        f"{'scenario':24} {'cause':22} {'precision':>9} {'recall':>7} {'support':>8}",
    ]
    for scenario, result in results.items():
        score = pooled(result)
        name = Path(scenario).stem
        for cause in _causes(score):
            lines.append(
                f"{name:24} {cause:22} {_fmt(score.precision(cause)):>9} {_fmt(score.recall(cause)):>7} "
                f"{score.support(cause):>8}"
            )
        other = Counter({p: n for (t, p), n in score.confusion.items() if t == "none"})
        verdicts = ", ".join(f"{c} {n}" for c, n in sorted(other.items()))
        lines.append(
            f"{name:24} {'(nothing injected)':22} blamed on network/engine {score.blamed_on_injected()} "
            f"(strict {score.falsely_blamed()}); verdicts {verdicts or 'none'}; "
            f"proxy's own pauses {score.own_pauses.total()} (not scored); "
            f"load {result['load'][0]:.1f}->{result['load'][1]:.1f}, {result['seconds']:.0f} s"
        )
    everything = pooled(*results.values())
    lines += ["", f"{'pooled':24} {'cause':22} {'precision':>9} {'recall':>7} {'support':>8}"]
    for cause in _causes(everything):
        lines.append(
            f"{'all':24} {cause:22} {_fmt(everything.precision(cause)):>9} {_fmt(everything.recall(cause)):>7} "
            f"{everything.support(cause):>8}"
        )
    lines.append(
        f"stalls blamed on the network or an engine with nothing injected: {everything.blamed_on_injected()}; "
        f"strict (truth none or the client's host): {everything.falsely_blamed()}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="scenario names or files (default: the --set)")
    parser.add_argument("--set", dest="sets", action="append", choices=("shipped", "tuning", "holdout", "llama"))
    parser.add_argument("--burners", type=int, default=0, help="CPU-spinning processes beside the run")
    parser.add_argument("--streams", type=int, default=None, help="override each scenario's stream count")
    parser.add_argument("--quick", action="store_true", help="two short scenarios (a smoke test)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    if args.quick:
        scenarios, streams = list(QUICK), 24
    else:
        scenarios = list(args.scenarios) or [s for name in args.sets or ["holdout"] for s in scenario_set(name)]
        streams = args.streams
    burners = [spawn_burner(1.0, 1.0) for _ in range(args.burners)]  # always on
    results: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    try:
        for scenario in scenarios:
            try:
                results[scenario] = run_one(scenario, streams)
            except ScenarioFailed as failure:  # a long run keeps what the other scenarios measured
                print(failure, file=sys.stderr)
                failed.append(scenario)
    finally:
        stop_burners(burners)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(render(results, args.burners))
    if failed:
        raise SystemExit(f"failed, not in the table: {', '.join(failed)}")


if __name__ == "__main__":
    main()
