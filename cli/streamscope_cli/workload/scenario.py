"""Scenarios: load, engine nodes, an optional impairment proxy, and injected causes, read from YAML.

A scenario is data; ``plan`` turns it, with its seed, into the exact list of requests to send (arrival
time, route, prompt and output sizes, shared prefix, speculative-collapse window, where the client cancels),
so the same scenario sends the same requests every time. Which causes then really occur is decided by the
simulator and the proxy, and recorded by them as ground truth.

``inject`` takes, besides the engine causes, ``host_load``: load on the host the clients run on, one mapping
or a list of them (workload/host_load.py runs them and records what they did):

- ``{target: client, period_s: P, busy_ms: B}``, optionally ``start_s`` (when the first block begins; drawn
  from the seed within the first period when absent) and ``jitter`` (0 to 1: each block moves by up to that
  share of the period's idle time, drawn from the seed): the clients' event loop is blocked by B ms of
  CPU-bound work every P s, as an application doing synchronous work on its loop would; B < P * 1000.
- ``{target: machine, processes: N, period_s: P, busy_ms: B}``: N child processes spin on the CPU B ms in
  every P s for the whole run (B = P * 1000 keeps them always on), each at its own phase drawn from the seed.
- ``{target: server, node: NODE, period_s: P, busy_ms: B}`` (``start_s`` and ``jitter`` as for a client): the
  event loop serving that engine node is blocked the same way, as an API server busy tokenising would be; each
  block is a ``server_host`` record of the node.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from streamscope.errors import ConfigError
from streamscope_cli.engine.app import NodeConfig, OutputConfig
from streamscope_cli.engine.gpu import SimulatedGpu
from streamscope_cli.engine.scheduler import SchedulerConfig, SpecDecodeConfig


class ScenarioError(ConfigError, ValueError):
    """The scenario file is wrong; the message says where."""


@dataclass(frozen=True)
class Distribution:
    """Token counts: ``{fixed: n}``, ``{uniform: [lo, hi]}`` or ``{lognormal: {median, sigma, max}}``."""

    kind: str
    low: float
    high: float
    sigma: float = 0.0

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.low)
        if self.kind == "uniform":
            return rng.randint(int(self.low), int(self.high))
        return max(1, min(int(self.high), round(rng.lognormvariate(math.log(self.low), self.sigma))))

    @classmethod
    def parse(cls, value: Any, where: str) -> Distribution:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return cls("fixed", value, value)
        if isinstance(value, dict) and len(value) == 1:
            ((kind, spec),) = value.items()
            if kind == "fixed" and _positive_int(spec):
                return cls("fixed", spec, spec)
            uniform = isinstance(spec, list) and len(spec) == 2 and all(map(_positive_int, spec))
            if kind == "uniform" and uniform and spec[0] <= spec[1]:
                return cls("uniform", spec[0], spec[1])
            lognormal = (
                isinstance(spec, dict)
                and set(spec) == {"median", "sigma", "max"}
                and _positive_int(spec["median"])
                and _positive_int(spec["max"])
                and _number(spec["sigma"])
            )
            if kind == "lognormal" and lognormal:
                return cls("lognormal", spec["median"], spec["max"], float(spec["sigma"]))
        raise ScenarioError(
            f"{where}: expected a positive integer, {{uniform: [lo, hi]}} or {{lognormal: {{median, sigma, max}}}}"
        )


@dataclass(frozen=True)
class LoadSpec:
    streams: int = 100
    arrival_rate: float = 8.0
    """New streams per second (Poisson arrivals)."""
    concurrency: int = 24
    prompt_tokens: Distribution = field(default_factory=lambda: Distribution("uniform", 100, 600))
    output_tokens: Distribution = field(default_factory=lambda: Distribution("uniform", 60, 200))
    shared_prefix_fraction: float = 0.3
    prefix_tokens: int = 256
    cancel_rate: float = 0.0
    """Share of streams the client cancels part way."""
    proxy_share: float = 0.5
    """Share of streams sent through the proxy, when the scenario has one."""
    json_share: float = 0.0
    """Share of streams that ask for a JSON answer (``response_format``), spread evenly over the streams."""


@dataclass(frozen=True)
class PrefillStorm:
    node: str
    every_s: float
    prompt_tokens: int = 12_000
    output_tokens: int = 4


@dataclass(frozen=True)
class SpecCollapse:
    fraction: float
    window: tuple[int, int] = (20, 80)


@dataclass(frozen=True)
class ChunkingRegression:
    node: str
    at_s: float
    tokens_per_chunk: int = 1


@dataclass(frozen=True)
class GpuEpisode:
    """Something the node's GPU goes through for ``for_s`` seconds, every ``every_s`` from ``start_s``."""

    node: str
    every_s: float
    for_s: float
    start_s: float = 1.0

    def begin(self, gpu: SimulatedGpu) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class GpuThrottle(GpuEpisode):
    """The GPU slows every step ``factor`` times."""

    factor: float = 8.0

    def begin(self, gpu: SimulatedGpu) -> None:
        gpu.throttle(self.for_s, self.factor)


@dataclass(frozen=True)
class GpuFault(GpuEpisode):
    """The GPU raises XID ``xid`` and runs nothing."""

    xid: int = 79
    start_s: float = 2.0

    def begin(self, gpu: SimulatedGpu) -> None:
        gpu.fault(self.for_s, self.xid)


@dataclass(frozen=True)
class HostLoad:
    """Load on a host (``inject.host_load``; the module docstring says what each target does)."""

    target: str
    """``client`` (block the clients' event loop), ``server`` (block a node's serving loop) or ``machine`` (busy
    child processes)."""
    period_s: float
    busy_ms: float
    start_s: float | None = None
    jitter: float = 0.0
    processes: int = 0
    """Spinning processes (target machine only)."""
    node: str | None = None
    """The node whose serving loop is blocked (target server only)."""


HOST_LOAD_KEYS = {
    "client": {"target", "period_s", "busy_ms", "start_s", "jitter"},
    "server": {"target", "node", "period_s", "busy_ms", "start_s", "jitter"},
    "machine": {"target", "processes", "period_s", "busy_ms"},
}


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    description: str
    load: LoadSpec
    nodes: tuple[NodeConfig, ...]
    proxy: dict[str, Any] | None = None
    """The proxy's impairments and the node it fronts (``fronts``); None for no proxy."""
    prefill_storm: PrefillStorm | None = None
    spec_collapse: SpecCollapse | None = None
    chunking_regression: ChunkingRegression | None = None
    host_load: tuple[HostLoad, ...] = ()
    gpu_throttle: GpuThrottle | None = None
    gpu_fault: GpuFault | None = None

    @property
    def gpu_episodes(self) -> tuple[GpuEpisode, ...]:
        return tuple(episode for episode in (self.gpu_throttle, self.gpu_fault) if episode is not None)

    @property
    def proxied_node(self) -> str | None:
        return self.proxy["fronts"] if self.proxy else None


@dataclass(frozen=True)
class PlannedStream:
    index: int
    at_s: float
    node: str
    via_proxy: bool
    prompt_tokens: int
    output_tokens: int
    prefix: str | None
    prefix_tokens: int
    spec_collapse: tuple[int, int] | None
    cancel_after_chunks: int | None
    storm: bool = False
    json_answer: bool = False

    def body(self) -> dict[str, Any]:
        sim: dict[str, Any] = {"prompt_tokens": self.prompt_tokens}
        if self.prefix:
            sim["prefix"], sim["prefix_tokens"] = self.prefix, self.prefix_tokens
        if self.spec_collapse:
            sim["spec_collapse"] = list(self.spec_collapse)
        body = {
            "model": "sim-llm",
            "messages": [{"role": "user", "content": f"request {self.index}"}],
            "max_tokens": self.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "sim": sim,
        }
        if self.json_answer:
            body["response_format"] = {"type": "json_object"}
        return body


def plan(scenario: Scenario) -> list[PlannedStream]:
    """The scenario's requests in arrival order (storm requests included), the same for the same seed."""
    rng = random.Random(scenario.seed)
    load = scenario.load
    names = [node.node for node in scenario.nodes]
    streams: list[PlannedStream] = []
    at = 0.0
    for index in range(load.streams):
        at += rng.expovariate(load.arrival_rate)
        node = names[index % len(names)]
        via_proxy = node == scenario.proxied_node and rng.random() < load.proxy_share
        output = load.output_tokens.sample(rng)
        prompt = load.prompt_tokens.sample(rng)
        shared = rng.random() < load.shared_prefix_fraction and prompt > load.prefix_tokens
        collapse = None
        if scenario.spec_collapse and rng.random() < scenario.spec_collapse.fraction:
            collapse = scenario.spec_collapse.window
        cancel = rng.randint(2, max(2, output // 2)) if rng.random() < load.cancel_rate else None
        streams.append(
            PlannedStream(
                index,
                at,
                node,
                via_proxy,
                prompt,
                output,
                "shared-system-prompt" if shared else None,
                load.prefix_tokens if shared else 0,
                collapse,
                cancel,
                json_answer=int(index * load.json_share) != int((index + 1) * load.json_share),
            )
        )
    storm = scenario.prefill_storm
    if storm:
        count = int(at // storm.every_s)
        for k in range(1, count + 1):
            streams.append(
                PlannedStream(
                    load.streams + k,
                    k * storm.every_s,
                    storm.node,
                    False,
                    storm.prompt_tokens,
                    storm.output_tokens,
                    None,
                    0,
                    None,
                    None,
                    storm=True,
                )
            )
    return sorted(streams, key=lambda s: s.at_s)


# --- reading scenario files ---------------------------------------------------------------------------------


REAL_ENGINE_DIRECTORY = "llama"
"""Where the shipped scenarios on a real engine (``llama_eval``) are, beside the simulated ones."""


def shipped(directory: str = "") -> list[str]:
    """Names of the scenarios that ship with streamscope: on the simulated engines, or in ``directory``."""
    return sorted(
        p.name[: -len(".yaml")]
        for p in resources.files(__package__).joinpath("scenarios", directory).iterdir()
        if p.name.endswith(".yaml")
    )


def load_scenario(name_or_path: str) -> Scenario:
    """A shipped scenario by name, or a scenario file by path."""
    return parse(*scenario_document(name_or_path))


def scenario_document(name_or_path: str) -> tuple[Any, str]:
    """The YAML document of a shipped scenario (by name) or a scenario file (by path), and where it came from."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = path.read_text()
        except OSError as exc:
            raise ScenarioError(f"cannot read scenario file {path}: {exc.strerror}") from None
    else:
        scenarios = resources.files(__package__).joinpath("scenarios")
        resource = scenarios.joinpath(f"{name_or_path}.yaml")
        if not resource.is_file():
            resource = scenarios.joinpath(REAL_ENGINE_DIRECTORY, f"{name_or_path}.yaml")
        if not resource.is_file():
            names = shipped() + shipped(REAL_ENGINE_DIRECTORY)
            raise ScenarioError(f"no scenario named {name_or_path!r}; shipped: {', '.join(names)}")
        text = resource.read_text()
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario {name_or_path} is not valid YAML: {exc}") from None
    return document, str(name_or_path)


def parse(document: Any, where: str) -> Scenario:
    if not isinstance(document, dict):
        raise ScenarioError(f"{where}: a scenario is a mapping")
    if "engine" in document:
        raise ScenarioError(
            f"{where}: a scenario on a real engine (engine: {document['engine']}) runs with streamscope eval"
        )
    known_keys(document, {"name", "seed", "description", "load", "nodes", "proxy", "inject"}, where)
    name, seed = name_and_seed(document, where)
    load = parse_load(document.get("load") or {}, f"{where}: load")
    nodes = _nodes(document.get("nodes"), seed, f"{where}: nodes")
    names = {node.node for node in nodes}
    proxy = document.get("proxy")
    if proxy is not None:
        if not isinstance(proxy, dict) or proxy.get("fronts") not in names:
            raise ScenarioError(f"{where}: proxy.fronts must name one of the nodes ({', '.join(sorted(names))})")
        if not isinstance(proxy.get("impairments", []), list):
            raise ScenarioError(f"{where}: proxy.impairments must be a list")
    inject = document.get("inject") or {}
    if not isinstance(inject, dict):
        raise ScenarioError(f"{where}: inject must be a mapping")
    known_keys(
        inject,
        {"prefill_storm", "spec_collapse", "chunking_regression", "host_load", "gpu_throttle", "gpu_fault"},
        f"{where}: inject",
    )
    storm = parse_dataclass(PrefillStorm, inject.get("prefill_storm"), f"{where}: inject.prefill_storm")
    collapse = parse_dataclass(SpecCollapse, inject.get("spec_collapse"), f"{where}: inject.spec_collapse")
    regression = parse_dataclass(
        ChunkingRegression, inject.get("chunking_regression"), f"{where}: inject.chunking_regression"
    )
    throttle = parse_dataclass(GpuThrottle, inject.get("gpu_throttle"), f"{where}: inject.gpu_throttle")
    if throttle is not None and not (0 < throttle.for_s < throttle.every_s and throttle.factor > 1):
        raise ScenarioError(f"{where}: inject.gpu_throttle needs 0 < for_s < every_s and a factor above 1")
    fault = parse_dataclass(GpuFault, inject.get("gpu_fault"), f"{where}: inject.gpu_fault")
    if fault is not None and not (0 < fault.for_s < fault.every_s and fault.xid > 0):
        raise ScenarioError(f"{where}: inject.gpu_fault needs 0 < for_s < every_s and an XID above 0")
    for injected in (storm, regression, throttle, fault):
        if injected is not None and injected.node not in names:
            raise ScenarioError(f"{where}: inject names node {injected.node!r}, which the scenario does not have")
    if collapse is not None:
        if not all(node.scheduler.spec_decode for node in nodes):
            raise ScenarioError(f"{where}: inject.spec_collapse needs spec_decode on every node")
        collapse = SpecCollapse(collapse.fraction, tuple(collapse.window))
    host_load = parse_host_loads(inject.get("host_load"), f"{where}: inject.host_load")
    for busy in host_load:
        if busy.target == "server" and busy.node not in names:
            raise ScenarioError(f"{where}: inject.host_load names node {busy.node!r}, which the scenario does not have")
    description = str(document.get("description", ""))
    return Scenario(
        name, seed, description, load, nodes, proxy, storm, collapse, regression, host_load, throttle, fault
    )


def name_and_seed(document: dict[str, Any], where: str) -> tuple[str, int]:
    """A scenario's name and seed, which every scenario file must give."""
    name, seed = document.get("name"), document.get("seed")
    if not isinstance(name, str) or not name or not isinstance(seed, int) or isinstance(seed, bool):
        raise ScenarioError(f"{where}: name (text) and seed (integer) are required")
    return name, seed


def parse_host_loads(raw: Any, where: str) -> tuple[HostLoad, ...]:
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    return tuple(_host_load(item, f"{where}[{i}]" if isinstance(raw, list) else where) for i, item in enumerate(items))


def _host_load(raw: Any, where: str) -> HostLoad:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where} must be a mapping (or a list of them)")
    target = raw.get("target")
    if target not in HOST_LOAD_KEYS:
        raise ScenarioError(f"{where}.target must be client, server or machine")
    known_keys(raw, HOST_LOAD_KEYS[target], where)
    if not all(_number(raw.get(key)) and raw[key] > 0 for key in ("period_s", "busy_ms")):
        raise ScenarioError(f"{where}: period_s and busy_ms are required and must be positive numbers")
    period, busy = float(raw["period_s"]), float(raw["busy_ms"])
    if target in ("client", "server"):
        if busy >= period * 1000:
            raise ScenarioError(f"{where}: busy_ms must be shorter than the period (period_s * 1000)")
        start, jitter = raw.get("start_s"), raw.get("jitter", 0.0)
        if start is not None and not _number(start):
            raise ScenarioError(f"{where}.start_s must be a number of seconds, 0 or more")
        if not (_number(jitter) and float(jitter) <= 1):
            raise ScenarioError(f"{where}.jitter must be between 0 and 1")
        node = raw.get("node")
        if target == "server" and not (isinstance(node, str) and node):
            raise ScenarioError(f"{where}.node must name the node whose serving loop is blocked")
        return HostLoad(target, period, busy, None if start is None else float(start), float(jitter), node=node)
    if busy > period * 1000:
        raise ScenarioError(f"{where}: busy_ms must not exceed the period (busy_ms = period_s * 1000 is always on)")
    if not _positive_int(raw.get("processes")):
        raise ScenarioError(f"{where}.processes must be a positive integer")
    return HostLoad("machine", period, busy, processes=int(raw["processes"]))


def parse_load(raw: Any, where: str) -> LoadSpec:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where} must be a mapping")
    values = dict(raw)
    for key in ("prompt_tokens", "output_tokens"):
        if key in values:
            values[key] = Distribution.parse(values[key], f"{where}.{key}")
    spec = parse_dataclass(LoadSpec, values, where)
    assert spec is not None
    if spec.streams < 1 or spec.concurrency < 1 or spec.arrival_rate <= 0:
        raise ScenarioError(f"{where}: streams, concurrency and arrival_rate must be positive")
    for share in ("shared_prefix_fraction", "cancel_rate", "proxy_share", "json_share"):
        if not 0 <= getattr(spec, share) <= 1:
            raise ScenarioError(f"{where}: {share} must be between 0 and 1")
    return spec


def _nodes(raw: Any, seed: int, where: str) -> tuple[NodeConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{where} must be a non-empty list")
    nodes = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ScenarioError(f"{at}: each node needs a name")
        known_keys(
            item,
            {"name", "flavor", "scheduler", "spec_decode", "output", "ignore_disconnect", "interference_threshold_ms"},
            at,
        )
        spec = parse_dataclass(SpecDecodeConfig, item.get("spec_decode"), f"{at}.spec_decode")
        scheduler = parse_dataclass(
            SchedulerConfig, {**(item.get("scheduler") or {}), "spec_decode": spec}, f"{at}.scheduler"
        )
        output = parse_dataclass(OutputConfig, item.get("output") or {}, f"{at}.output")
        flavor = item.get("flavor", "vllm")
        if flavor not in ("vllm", "sglang"):
            raise ScenarioError(f"{at}.flavor must be vllm or sglang")
        nodes.append(
            NodeConfig(
                node=item["name"],
                flavor=flavor,
                scheduler=scheduler,
                output=output,
                ignore_disconnect=bool(item.get("ignore_disconnect", False)),
                interference_threshold_s=float(item.get("interference_threshold_ms", 50)) / 1000,
                seed=seed + i,
            )
        )
    if len({n.node for n in nodes}) != len(nodes):
        raise ScenarioError(f"{where}: node names must be distinct")
    return tuple(nodes)


def parse_dataclass(cls: type, raw: Any, where: str) -> Any:
    """A mapping of a scenario file as ``cls`` (None when absent); a key ``cls`` lacks is an error naming ``where``."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where} must be a mapping")
    allowed = {f.name for f in fields(cls)}
    known_keys(raw, allowed, where)
    try:
        return cls(**raw)
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def known_keys(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    """Refuse a mapping with a key outside ``allowed``: a misspelt option is an error, never ignored."""
    unknown = set(raw) - allowed
    if unknown:
        raise ScenarioError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}"
        )


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
