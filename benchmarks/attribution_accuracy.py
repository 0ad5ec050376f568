"""Stall attribution accuracy over many scenarios, on a quiet host or beside CPU burners, in one run.

Each scenario runs through `streamscope eval` (its engines, proxy, clients and an embedded collector in one
child process, on a fresh store) and is scored against its ground truth. The table gives per scenario and
cause the precision, recall and support, then every cause pooled over the scenarios, the stalls that no
injected cause explains but attribution blamed on the network or an engine, and the load average the host
ran at. ``--burners N`` runs N processes that spin on the CPU for the whole run (a busy host, load ≥ N).

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
from streamscope_ingest.analysis.evaluation import DELAY_CAUSES

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


class Tally:
    def __init__(self) -> None:
        self.confusion: Counter[tuple[str, str]] = Counter()
        self.undetected: Counter[str] = Counter()

    def add(self, result: dict[str, Any]) -> None:
        for truth, predicted, n in result["confusion"]:
            self.confusion[(truth, predicted)] += n
        self.undetected.update(result["undetected"])

    def causes(self) -> list[str]:
        seen = {t for t, _ in self.confusion} | {p for _, p in self.confusion} | set(self.undetected)
        return sorted(seen - {"none", "unknown"})

    def precision(self, cause: str) -> tuple[float | None, int]:
        predicted = sum(n for (_, p), n in self.confusion.items() if p == cause)
        return (self.confusion[(cause, cause)] / predicted if predicted else None), predicted

    def recall(self, cause: str) -> tuple[float | None, int]:
        actual = sum(n for (t, _), n in self.confusion.items() if t == cause) + self.undetected[cause]
        return (self.confusion[(cause, cause)] / actual if actual else None), actual

    def blamed_without_cause(self) -> int:
        return sum(n for (t, p), n in self.confusion.items() if t == "none" and p in DELAY_CAUSES)

    def unexplained(self) -> Counter[str]:
        return Counter({p: n for (t, p), n in self.confusion.items() if t == "none"})


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(results: dict[str, dict[str, Any]], burners: int) -> str:
    lines = [
        f"attribution accuracy, {burners} CPU burner(s) beside the run",
        f"{'scenario':24} {'cause':22} {'precision':>9} {'recall':>7} {'support':>8}",
    ]
    pooled = Tally()
    for scenario, result in results.items():
        tally = Tally()
        tally.add(result)
        pooled.add(result)
        name = Path(scenario).stem
        for cause in tally.causes():
            (p, _), (r, support) = tally.precision(cause), tally.recall(cause)
            lines.append(f"{name:24} {cause:22} {_fmt(p):>9} {_fmt(r):>7} {support:>8}")
        other = ", ".join(f"{c} {n}" for c, n in sorted(tally.unexplained().items()))
        lines.append(
            f"{name:24} {'(nothing injected)':22} blamed on network/engine {tally.blamed_without_cause()}; "
            f"verdicts {other or 'none'}; load {result['load'][0]:.1f}->{result['load'][1]:.1f}, "
            f"{result['seconds']:.0f} s"
        )
    lines += ["", f"{'pooled':24} {'cause':22} {'precision':>9} {'recall':>7} {'support':>8}"]
    for cause in pooled.causes():
        (p, _), (r, support) = pooled.precision(cause), pooled.recall(cause)
        lines.append(f"{'all':24} {cause:22} {_fmt(p):>9} {_fmt(r):>7} {support:>8}")
    lines.append(f"stalls blamed on the network or an engine with nothing injected: {pooled.blamed_without_cause()}")
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
