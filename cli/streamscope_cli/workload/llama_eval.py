"""Score attribution on a real engine: llama.cpp's ``llama-server`` behind ``streamscope gateway``, read by a GPU
agent, streamed by instrumented clients in a process of their own, through the impairment proxy for some.

Laid out as a deployment is: the engine, the gateway, the proxy and the clients each run in their own process, so
nothing ties the engine's pace to the clients' host but the machine they share (as on any one machine). Every
ground-truth record comes from a part that did it: the injector in the clients' process (a long prompt sent and
answered, ``llama_clients``), the proxy (bytes it held), the clients' watchdog (their loop not running); none from
the engine's own telemetry, which attribution reads.

A scenario file says ``engine: llama-server``:

    name: llama-mixed
    engine: llama-server
    seed: 201
    load: {streams: 24, arrival_rate: 2, concurrency: 6, output_tokens: {uniform: [600, 900]}, proxy_share: 0.5}
    engine_options: {parallel: 8, step_tokens: 8192}    # slots (-np); tokens a step takes (-b, -ub)
    inject:
      long_prompts: {every_s: 4, prompt_tokens: 5000}   # prefilled in one step with the streams' decoding
      fill_slots: {every_s: 6, tokens: 1000}             # every slot taken: streams sent meanwhile queue
      host_load: {target: client, period_s: 2, busy_ms: 450}
    proxy: {impairments: [{kind: stall, after_event: 300, duration_ms: 900, probability: 0.3}]}
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamscope.errors import StreamscopeError
from streamscope_cli.child import CommandProcess
from streamscope_cli.llama.build import ensure_server
from streamscope_cli.llama.models import TINY, ensure_model
from streamscope_cli.llama.server import LlamaServer, ServerOptions
from streamscope_cli.proxy.process import ProxyProcess
from streamscope_cli.workload.llama_clients import CLIENT_SERVICE, ClientPlan, LongPrompt, PlannedRequest, SlotFill
from streamscope_cli.workload.load import attribute_settled, wait_until_stored
from streamscope_cli.workload.scenario import (
    HostLoad,
    LoadSpec,
    ScenarioError,
    known_keys,
    name_and_seed,
    parse_dataclass,
    parse_host_loads,
    parse_load,
)
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.analysis.evaluation import Score, score

ENGINE = "llama-server"
NODE = "llama-0"
"""The engine's node, as the gateway (``--node``) and its agent name it."""
GATEWAY_SERVICE = "llama-gateway"
CONTEXT = 32768
PROMPT_WORDS = ("the", "river", "slow", "light", "morning", "over", "and", "stone", "green", "far")


@dataclass(frozen=True)
class LongPrompts:
    every_s: float
    prompt_tokens: int = 5000
    start_s: float = 2.0


@dataclass(frozen=True)
class FillSlots:
    every_s: float
    tokens: int = 1000
    """Each filling request's generation: it holds its slot while it decodes this many tokens."""
    start_s: float = 1.0


@dataclass(frozen=True)
class LlamaScenario:
    name: str
    seed: int
    description: str
    load: LoadSpec
    parallel: int = 8
    step_tokens: int | None = None
    """The most tokens one engine step takes (llama.cpp's default when None): a prompt up to this long is prefilled
    in one step, as an engine without chunked prefill does, and every stream decoding beside it waits for it all."""
    long_prompts: LongPrompts | None = None
    fill_slots: FillSlots | None = None
    """As many long generations as the engine has slots, sent together every so often: streams sent meanwhile
    wait for a slot (``queue``)."""
    host_load: tuple[HostLoad, ...] = ()
    impairments: tuple[dict[str, Any], ...] = ()
    timeout_s: float = 600.0


def is_real_engine(document: Any) -> bool:
    return isinstance(document, dict) and document.get("engine") == ENGINE


def parse(document: dict[str, Any], where: str) -> LlamaScenario:
    known_keys(document, {"name", "seed", "description", "engine", "load", "engine_options", "inject", "proxy"}, where)
    name, seed = name_and_seed(document, where)
    load = parse_load(document.get("load") or {}, f"{where}: load")
    options = document.get("engine_options") or {}
    known_keys(options, {"parallel", "step_tokens"}, f"{where}: engine_options")
    parallel, step_tokens = options.get("parallel", load.concurrency + 2), options.get("step_tokens")
    if not isinstance(parallel, int) or parallel < 1:
        raise ScenarioError(f"{where}: engine_options.parallel must be a positive integer")
    if step_tokens is not None and (not isinstance(step_tokens, int) or not 64 <= step_tokens <= CONTEXT):
        raise ScenarioError(f"{where}: engine_options.step_tokens must be an integer from 64 to {CONTEXT}")
    inject = document.get("inject") or {}
    known_keys(inject, {"long_prompts", "fill_slots", "host_load"}, f"{where}: inject")
    fill_slots = parse_dataclass(FillSlots, inject.get("fill_slots"), f"{where}: inject.fill_slots")
    if fill_slots is not None and (fill_slots.every_s <= 0 or not 1 <= fill_slots.tokens < CONTEXT):
        raise ScenarioError(f"{where}: inject.fill_slots needs every_s > 0 and tokens from 1 to {CONTEXT - 1}")
    long_prompts = parse_dataclass(LongPrompts, inject.get("long_prompts"), f"{where}: inject.long_prompts")
    if long_prompts is not None and (long_prompts.every_s <= 0 or not 0 < long_prompts.prompt_tokens < CONTEXT - 64):
        raise ScenarioError(f"{where}: inject.long_prompts needs every_s > 0 and prompt_tokens below {CONTEXT}")
    proxy = document.get("proxy") or {}
    known_keys(proxy, {"impairments"}, f"{where}: proxy")
    impairments = proxy.get("impairments", [])
    if not isinstance(impairments, list):
        raise ScenarioError(f"{where}: proxy.impairments must be a list")
    host_load = parse_host_loads(inject.get("host_load"), f"{where}: inject.host_load")
    if any(busy.target == "server" for busy in host_load):
        raise ScenarioError(f"{where}: inject.host_load target server blocks a simulated node's serving loop only")
    return LlamaScenario(
        name,
        seed,
        str(document.get("description", "")),
        load,
        parallel,
        step_tokens,
        long_prompts,
        fill_slots,
        host_load,
        tuple(impairments),
    )


def client_plan(scenario: LlamaScenario, gateway_url: str, proxy_url: str | None, collector_url: str) -> ClientPlan:
    """The streams (Poisson arrivals, output lengths, route), the long prompts and the slot fills, from the
    scenario's seed."""
    rng = random.Random(scenario.seed)
    load = scenario.load
    at, requests = 0.0, []
    for _ in range(load.streams):
        at += rng.expovariate(load.arrival_rate)
        via_proxy = proxy_url is not None and rng.random() < load.proxy_share
        base = proxy_url if via_proxy and proxy_url else gateway_url
        words = " ".join(rng.choice(PROMPT_WORDS) for _ in range(load.prompt_tokens.sample(rng) // 2))
        requests.append(
            PlannedRequest(round(at, 3), f"{base}/v1/chat/completions", load.output_tokens.sample(rng), words)
        )
    chat_url = f"{gateway_url}/v1/chat/completions"
    prompts = []
    if (injected := scenario.long_prompts) is not None:
        for index, sent_s in enumerate(_every(injected.start_s, injected.every_s, at)):
            prompt = f"{index} {rng.random():.6f} " + "ab " * (injected.prompt_tokens // 2)  # no cached prefix
            prompts.append(LongPrompt(sent_s, chat_url, prompt))
    fills = []
    if (filling := scenario.fill_slots) is not None:
        times = _every(filling.start_s, filling.every_s, at)
        fills = [SlotFill(sent_s, chat_url, scenario.parallel, filling.tokens) for sent_s in times]
    return ClientPlan(
        scenario.name,
        scenario.seed,
        collector_url,
        NODE,
        requests,
        prompts,
        list(scenario.host_load),
        load.concurrency,
        fills,
        scenario.parallel,
    )


def _every(start_s: float, every_s: float, until_s: float) -> list[float]:
    """From ``start_s`` every ``every_s`` up to ``until_s`` (the last stream's arrival), and at least once."""
    return [start_s + index * every_s for index in range(math.floor(max(until_s - start_s, 0.0) / every_s) + 1)]


def evaluate(scenario: LlamaScenario, storage_dsn: str) -> Score:
    """Run ``scenario`` on llama-server (built or taken from the cache) and score attribution on it."""
    binary, model = ensure_server(), ensure_model(TINY)
    collector = Collector(
        CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None)
    ).start()
    try:
        since = datetime.now(UTC)
        options = ServerOptions(
            model, parallel=scenario.parallel, context=CONTEXT, batch=scenario.step_tokens, unified_kv=True
        )
        with (
            LlamaServer(binary, options) as engine,
            gateway_process(engine.url, collector.http_url) as gateway,
            agent_process(engine.url, collector.http_url),
        ):
            gateway_url = gateway.listening_url
            proxy = None
            if scenario.impairments:
                config = {"upstream": gateway_url, "node": "edge", "seed": scenario.seed}
                config["impairments"] = list(scenario.impairments)
                proxy = ProxyProcess(config, collector_url=collector.http_url, scenario=scenario.name).start()
            try:
                plan = client_plan(scenario, gateway_url, proxy.url if proxy else None, collector.http_url)
                _run_clients(plan, scenario.timeout_s)
            finally:
                if proxy is not None:
                    proxy.stop()
        wait_until_stored(collector.query_client, len(plan.streams), since, 60.0, service=CLIENT_SERVICE)
        attribute_settled(collector.query_client)
        return score(collector.query_client, since)
    finally:
        collector.stop()


def _run_clients(plan: ClientPlan, timeout_s: float) -> dict[str, int]:
    run = subprocess.run(
        [sys.executable, "-m", "streamscope_cli.workload.llama_clients"],
        input=plan.to_json(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if run.returncode != 0:
        raise StreamscopeError(f"the clients' process failed:\n{run.stderr[-3000:]}")
    outcomes: dict[str, int] = json.loads(run.stdout)
    return outcomes


def gateway_process(upstream: str, collector_url: str) -> CommandProcess:
    """``streamscope gateway`` in front of the engine, naming its node; it announces ``gateway on URL -> ...``."""
    arguments = ["gateway", "--upstream", upstream, "--port", "0", "--collector", collector_url]
    return CommandProcess(*arguments, "--node", NODE, "--service-name", GATEWAY_SERVICE)


def agent_process(engine_url: str, collector_url: str) -> CommandProcess:
    """``streamscope gpu-agent`` reading the engine's /metrics, with its default thresholds (no GPU here)."""
    arguments = ["gpu-agent", "--node", NODE, "--engine-url", f"{engine_url}/metrics", "--collector", collector_url]
    return CommandProcess(*arguments, "--no-gpu")
