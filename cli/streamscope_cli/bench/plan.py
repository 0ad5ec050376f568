"""What ``streamscope bench`` sends: the endpoint's API, the arrival pattern, and each request's prompt and length.

Everything random comes from one seeded generator, so two runs with the same options send the same requests in the
same order: what differs between them is the endpoint, not the load.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from streamscope.errors import ConfigError

APIS = ("chat", "completions", "anthropic", "ollama")
"""The streaming APIs a run can drive: OpenAI Chat Completions, OpenAI (legacy) Completions, Anthropic Messages,
and Ollama's chat (a JSON document a line; its base URL has no version: ``http://host:11434``)."""
_PATHS = {"chat": "/chat/completions", "completions": "/completions", "anthropic": "/messages", "ollama": "/api/chat"}
FORMATS = {"chat": "openai-chat", "completions": "openai-chat", "anthropic": "anthropic", "ollama": "ollama"}
"""The SDK's stream format for each API."""
_WORDS = (
    "stream token latency answer model engine gateway prefill decode batch cache queue request reply chunk "
    "second first rhythm pause wait user screen server client network buffer flush schedule slot prompt text"
).split()
"""Prompt words: about a token each for the BPE vocabularies of common models."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")


@dataclass(frozen=True)
class Lengths:
    """A length drawn per request: ``low`` alone, or uniformly from ``low`` to ``high`` (both included)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str, option: str) -> Lengths:
        """``"256"`` or ``"64-512"``; a ConfigError naming ``option`` otherwise."""
        found = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
        if not found:
            raise ConfigError(f"{option} takes N or LOW-HIGH (tokens), got {text!r}")
        low = int(found.group(1))
        high = int(found.group(2) or low)
        if not 1 <= low <= high:
            raise ConfigError(f"{option}: lengths must be at least 1 and LOW at most HIGH, got {text!r}")
        return cls(low, high)

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class BenchPlan:
    """One run's load. Exactly one of ``concurrency`` (a closed loop: each client sends its next request when its
    last one ends) and ``rate`` (an open loop: Poisson arrivals, requests per second); a run ends after
    ``requests`` requests or ``duration_s`` seconds of sending, whichever is given (in-flight streams finish)."""

    url: str
    """The API's base URL, up to its version (``http://host:8000/v1``); the API's path is appended."""
    model: str
    api: str = "chat"
    concurrency: int | None = 8
    rate: float | None = None
    duration_s: float | None = None
    requests: int | None = None
    prompt_tokens: Lengths = Lengths(128, 128)
    output_tokens: Lengths = Lengths(128, 128)
    prompts: Sequence[str] = ()
    """Prompts to draw from (a prompt file's lines) instead of generated text of ``prompt_tokens`` words."""
    warmup: int = 0
    """Requests sent first and not recorded (connections, caches and compiled kernels warm up)."""
    seed: int = 0
    api_key: str | None = None
    label: str = ""
    run_id: str = ""

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--url must be an http:// or https:// URL with a host, got {self.url!r}")
        if self.api not in APIS:
            raise ConfigError(f"--api must be one of {', '.join(APIS)}, got {self.api!r}")
        if (self.concurrency is None) == (self.rate is None):
            raise ConfigError("give one of --concurrency (a closed loop) and --rate (Poisson arrivals per second)")
        if (self.duration_s is None) == (self.requests is None):
            raise ConfigError("give one of --duration (seconds of sending) and --requests (how many)")
        for name, value in (("--label", self.label), ("--run-id", self.run_id)):
            if value and not _NAME.match(value):
                raise ConfigError(
                    f"{name} takes letters, digits and . _ : - (up to 100), starting with one of the first two"
                )

    @property
    def endpoint(self) -> str:
        """The URL each request is posted to."""
        return self.url.rstrip("/") + _PATHS[self.api]

    def describe(self) -> str:
        """The load in words, for the run's first line."""
        arrivals = f"{self.concurrency} at a time" if self.concurrency else f"Poisson, {self.rate:g} a second"
        extent = f"{self.requests} requests" if self.requests else f"{self.duration_s:g} s"
        prompts = (
            f"{len(self.prompts)} prompts from a file" if self.prompts else f"prompts of {self.prompt_tokens} words"
        )
        return (
            f"{self.api} at {self.endpoint}, model {self.model}: {arrivals}, {extent}, {prompts}, "
            f"up to {self.output_tokens} tokens out, seed {self.seed}"
            + (f", {self.warmup} warm-up requests" if self.warmup else "")
        )


@dataclass(frozen=True)
class BenchRequest:
    """One request: its body (a prompt and a length drawn from the plan), and where it goes."""

    body: dict[str, Any]
    headers: dict[str, str]


def requests(plan: BenchPlan) -> Iterator[BenchRequest]:
    """The run's requests in order, without end (the driver stops taking them); the same for the same plan."""
    rng = random.Random(plan.seed)
    headers = _headers(plan)
    while True:
        if plan.prompts:
            prompt = rng.choice(plan.prompts)
        else:
            prompt = " ".join(rng.choice(_WORDS) for _ in range(plan.prompt_tokens.draw(rng)))
        yield BenchRequest(_body(plan, prompt, plan.output_tokens.draw(rng)), headers)


def arrival_gaps(plan: BenchPlan) -> Iterator[float]:
    """Seconds between arrivals of an open-loop run (exponential: Poisson arrivals at ``plan.rate``)."""
    assert plan.rate is not None
    rng = random.Random(plan.seed + 1)
    while True:
        yield rng.expovariate(plan.rate)


def _body(plan: BenchPlan, prompt: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": plan.model, "max_tokens": max_tokens, "stream": True}
    if plan.api == "completions":
        body |= {"prompt": prompt, "stream_options": {"include_usage": True}}
    elif plan.api == "chat":
        body |= {"messages": [{"role": "user", "content": prompt}], "stream_options": {"include_usage": True}}
    elif plan.api == "ollama":
        body = {"model": plan.model, "messages": [{"role": "user", "content": prompt}], "stream": True}
        body["options"] = {"num_predict": max_tokens}
    else:
        body |= {"messages": [{"role": "user", "content": prompt}]}
    return body


def _headers(plan: BenchPlan) -> dict[str, str]:
    if plan.api == "anthropic":
        return {"anthropic-version": "2023-06-01"} | ({"x-api-key": plan.api_key} if plan.api_key else {})
    return {"authorization": f"Bearer {plan.api_key}"} if plan.api_key else {}
