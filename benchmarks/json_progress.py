"""Following a streamed JSON document: the SDK's incremental tracker against re-parsing the prefix with
``json.loads`` on every chunk, side by side in one run.

Each document (a tool call's arguments, structured answers of growing size) is cut into token-sized pieces of 1 to
8 characters, as a model streams it. The tracker reads each piece once; the baseline re-parses everything so far
on every chunk (and fails until the document closes), which is what a UI does that only has a whole-document
parser. Both must find the document valid at the same chunk, or the run stops. Times are the median of
``--repeats`` runs per document, in µs per chunk and in ms for the whole document.

    python -m benchmarks.json_progress [--quick] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from streamscope._internal.json_progress import JsonProgress


def document(fields: int, rng: random.Random) -> dict[str, Any]:
    """A structured answer: strings, numbers, flags and small nested lists and objects."""
    words = "stream token reader pause answer field value model chunk rhythm latency buffer".split()
    answer: dict[str, Any] = {}
    for i in range(fields):
        kind = i % 4
        if kind == 0:
            answer[f"text_{i}"] = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        elif kind == 1:
            answer[f"score_{i}"] = round(rng.uniform(-1000, 1000), rng.randint(0, 4))
        elif kind == 2:
            answer[f"tags_{i}"] = [rng.choice(words) for _ in range(rng.randint(1, 6))]
        else:
            answer[f"item_{i}"] = {"id": rng.randint(0, 10**6), "ok": rng.random() < 0.5, "note": rng.choice(words)}
    return answer


def pieces(text: str, rng: random.Random) -> list[str]:
    cut, out = 0, []
    while cut < len(text):
        size = rng.randint(1, 8)
        out.append(text[cut : cut + size])
        cut += size
    return out


def tracker_valid_at(chunks: list[str]) -> int | None:
    tracker = JsonProgress()
    for index, chunk in enumerate(chunks):
        tracker.feed(chunk, index)
    return tracker.valid_ns


def reparse_valid_at(chunks: list[str]) -> int | None:
    prefix = ""
    valid = None
    for index, chunk in enumerate(chunks):
        prefix += chunk
        try:
            json.loads(prefix)
        except ValueError:
            continue
        if valid is None:
            valid = index
    return valid


def timed(contender: Callable[[list[str]], int | None], chunks: list[str], repeats: int) -> tuple[float, int | None]:
    runs = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = contender(chunks)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller documents and fewer repeats")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(36)
    sizes = {"tool call": 4, "answer": 40, "long answer": 320, "report": 1280}
    if args.quick:
        sizes = {"tool call": 4, "answer": 40}
    repeats = 3 if args.quick else args.repeats
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(
        f"{'document':<12} {'bytes':>8} {'chunks':>7} {'tracker µs/chunk':>17} {'re-parse µs/chunk':>18} "
        f"{'tracker ms':>11} {'re-parse ms':>12} {'ratio':>7}"
    )
    for name, fields in sizes.items():
        text = json.dumps(document(fields, rng), ensure_ascii=False)
        chunks = pieces(text, rng)
        tracker_s, tracker_at = timed(tracker_valid_at, chunks, repeats)
        reparse_s, reparse_at = timed(reparse_valid_at, chunks, repeats)
        if tracker_at != reparse_at or tracker_at != len(chunks) - 1:
            raise SystemExit(f"{name}: the tracker says valid at {tracker_at}, json.loads at {reparse_at}")
        n = len(chunks)
        print(
            f"{name:<12} {len(text.encode()):>8} {n:>7} {tracker_s / n * 1e6:>17.2f} {reparse_s / n * 1e6:>18.2f} "
            f"{tracker_s * 1e3:>11.2f} {reparse_s * 1e3:>12.2f} {reparse_s / tracker_s:>6.1f}x"
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
