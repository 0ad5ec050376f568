"""Machine instructions the collector's parse and decode take a packed chunk, counted by valgrind's callgrind.

The time of the same code swings with whatever else the machine runs, so a change to the decoder worth a tenth can
be lost in it; an instruction count does not move with the load (docs/benchmarks.md). The packed workload of
``benchmarks.ingest`` (the requests its collector runs receive) is written to a file, then a child process under
``valgrind --tool=callgrind`` parses and decodes it once to warm up and once counted: it switches the count on
itself (``callgrind_control``) and leaves without the interpreter's shutdown, so only the loop is counted.
``--against REV`` counts the same requests, beside it, with the decoder of a git revision (a work tree of it): the
baseline in the same run. Instructions are not time (a cache miss costs hundreds of them), so a change is
confirmed by ``benchmarks.ingest`` too.

    python -m benchmarks.decode_cost [--quick] [--streams 300] [--against REV]

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (".", "ingest", "collector", "gpu_agent", "dashboards", "cli")
"""The directories of a checkout that hold its importable packages."""


def counted_decode(bodies_file: str) -> NoReturn:
    """Under callgrind: decode every request in ``bodies_file`` once, then again counted, and leave."""
    from streamscope_collector.pipeline import TRACES
    from streamscope_ingest.decode.traces import decode_traces

    bodies = pickle.loads(Path(bodies_file).read_bytes())

    def decode_all() -> None:
        for body in bodies:
            decode_traces(TRACES.parse(body, protobuf=True), tenant="default")

    decode_all()  # imports, caches and the allocator's pools warm
    # callgrind_control reaches this process through valgrind's gdbserver (ptrace): bounded, where that is refused
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True, timeout=120)
    decode_all()
    sys.stdout.flush()
    os._exit(0)  # the interpreter's shutdown (a full garbage collection) is not the decoder's


def instructions(tree: Path, bodies_file: Path, out_dir: Path) -> int:
    """Instructions the counted loop of ``counted_decode`` took with the decoder of the checkout at ``tree``."""
    path = os.pathsep.join(str(tree / package) for package in PACKAGES)
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out_dir / 'callgrind.out'}",
            sys.executable,
            __file__,
            "--counted",
            str(bodies_file),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"the counted decode failed in {tree}:\n{run.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one request of 100 streams")
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--against", metavar="REV", help="a git revision to count beside this checkout")
    parser.add_argument("--counted", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.counted:
        counted_decode(args.counted)
    if shutil.which("valgrind") is None:
        raise SystemExit("benchmarks.decode_cost needs valgrind: apt-get install valgrind")

    from benchmarks.ingest import workload

    load = workload("packed", 40 if args.quick else args.streams, 250, 100)
    with tempfile.TemporaryDirectory() as tmp:
        bodies_file = Path(tmp) / "bodies.pickle"
        bodies_file.write_bytes(pickle.dumps([request.SerializeToString() for request in load.requests]))
        trees = {"this checkout": ROOT}
        if args.against:
            baseline = Path(tmp) / "against"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(baseline), args.against],
                check=True,
            )
            trees[args.against] = baseline
        try:
            counts = {name: instructions(tree, bodies_file, Path(tmp)) for name, tree in trees.items()}
        finally:
            if args.against:  # an error here must not hide the count's own
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=False)
                subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)
    print(f"{load.streams:,} streams, {load.chunks:,} chunks, 100 per request, packed")
    print(f"{'decoder':40} {'instructions':>15} {'per chunk':>10}")
    for name, count in counts.items():
        print(f"{name:40} {count:15,} {count / load.chunks:10,.0f}")


if __name__ == "__main__":
    main()
