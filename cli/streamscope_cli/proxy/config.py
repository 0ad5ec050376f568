"""What the impairment proxy does: the upstream it fronts and the impairment rules it applies to event streams.

Frozen dataclasses, validated when built, so a bad value fails at start-up rather than mid-run.
``ProxyConfig.from_dict`` builds one from the plain mapping a scenario YAML file gives and says exactly which
key is wrong (``impairments[1] (stall): duration_ms must be a number, got 'slow'``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar
from urllib.parse import urlsplit


@dataclass(frozen=True, kw_only=True)
class ImpairmentRule:
    """What every rule has: how likely it is to hit a stream, and which request paths it may hit."""

    kind: ClassVar[str] = ""
    probability: float = 1.0
    """Chance (0..1) that the rule applies to a given event stream, drawn once per stream from a seeded RNG."""
    path_prefix: str = ""
    """Only streams whose request path starts with this ("" = every path)."""

    def __post_init__(self) -> None:
        _require(
            _is_number(self.probability) and 0.0 <= self.probability <= 1.0,
            f"probability must be a number from 0 to 1, got {self.probability!r}",
        )
        _require(
            isinstance(self.path_prefix, str) and (not self.path_prefix or self.path_prefix.startswith("/")),
            f"path_prefix must be empty or start with '/', got {self.path_prefix!r}",
        )


@dataclass(frozen=True, kw_only=True)
class BufferCoalesce(ImpairmentRule):
    """Hold whole events and flush them together, like a gateway whose response buffering was left on."""

    kind: ClassVar[str] = "buffer_coalesce"
    flush_bytes: int | None = None
    """Flush once this many bytes are held."""
    flush_ms: float | None = None
    """Flush this long after the oldest held event came in, whichever threshold comes first."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.flush_bytes is not None or self.flush_ms is not None, "set flush_bytes, flush_ms or both")
        _require(
            self.flush_bytes is None or (_is_int(self.flush_bytes) and self.flush_bytes > 0),
            f"flush_bytes must be a positive integer, got {self.flush_bytes!r}",
        )
        _require(
            self.flush_ms is None or (_is_number(self.flush_ms) and self.flush_ms > 0),
            f"flush_ms must be a positive number of milliseconds, got {self.flush_ms!r}",
        )


@dataclass(frozen=True, kw_only=True)
class Stall(ImpairmentRule):
    """Stop forwarding for a while once event ``after_event`` has been written: a connection hiccup."""

    kind: ClassVar[str] = "stall"
    after_event: int = 0
    """Index of the upstream event (from 0) after which the stall starts."""
    duration_ms: float

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            _is_int(self.after_event) and self.after_event >= 0,
            f"after_event must be an integer >= 0, got {self.after_event!r}",
        )
        _require(
            _is_number(self.duration_ms) and self.duration_ms > 0,
            f"duration_ms must be a positive number of milliseconds, got {self.duration_ms!r}",
        )


@dataclass(frozen=True, kw_only=True)
class Rechunk(ImpairmentRule):
    """Move write boundaries without changing a byte: cut writes into small pieces and/or merge events."""

    kind: ClassVar[str] = "rechunk"
    split_bytes: int | None = None
    """Cut every write into pieces of at most this many bytes (events get split across writes)."""
    merge_events: int | None = None
    """Send this many whole events per write (earlier ones wait for the last: a hold, recorded as such)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.split_bytes is not None or self.merge_events is not None, "set split_bytes, merge_events or both")
        _require(
            self.split_bytes is None or (_is_int(self.split_bytes) and self.split_bytes > 0),
            f"split_bytes must be a positive integer, got {self.split_bytes!r}",
        )
        _require(
            self.merge_events is None or (_is_int(self.merge_events) and self.merge_events >= 2),
            f"merge_events must be an integer >= 2, got {self.merge_events!r}",
        )


@dataclass(frozen=True, kw_only=True)
class Drop(ImpairmentRule):
    """Close the client connection right after event ``after_event``: the client gets a truncated body."""

    kind: ClassVar[str] = "drop"
    after_event: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(
            _is_int(self.after_event) and self.after_event >= 0,
            f"after_event must be an integer >= 0, got {self.after_event!r}",
        )


RULE_TYPES: dict[str, type[ImpairmentRule]] = {rule.kind: rule for rule in (BufferCoalesce, Stall, Rechunk, Drop)}


@dataclass(frozen=True)
class ProxyConfig:
    upstream: str
    """Base URL of the engine, e.g. ``http://127.0.0.1:8000``; the request path is appended to it."""
    node: str = "proxy"
    """Name written as ``node`` on every ground-truth record."""
    impairments: tuple[ImpairmentRule, ...] = ()
    seed: int | None = None
    """Seeds each rule's RNG, so the same sequence of streams gets the same decisions; None = fresh entropy."""
    connect_timeout_s: float = 10.0
    read_timeout_s: float | None = 300.0
    """Longest silence from the upstream before the proxy gives up on it (None = wait forever)."""

    def __post_init__(self) -> None:
        _require(isinstance(self.upstream, str), f"upstream must be a URL string, got {self.upstream!r}")
        parts = urlsplit(self.upstream)
        _require(
            parts.scheme in ("http", "https") and bool(parts.hostname),
            f"upstream must be an http:// or https:// URL with a host, got {self.upstream!r}",
        )
        _require(not parts.query and not parts.fragment, f"upstream must not have a query or fragment: {self.upstream}")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        _require(isinstance(self.node, str) and bool(self.node), f"node must be a non-empty string, got {self.node!r}")
        _require(
            isinstance(self.impairments, Sequence) and not isinstance(self.impairments, str),
            f"impairments must be a list of rules, got {self.impairments!r}",
        )
        object.__setattr__(self, "impairments", tuple(self.impairments))
        for rule in self.impairments:
            _require(isinstance(rule, ImpairmentRule), f"not an impairment rule: {rule!r}")
        _require(self.seed is None or _is_int(self.seed), f"seed must be an integer, got {self.seed!r}")
        _require(
            _is_number(self.connect_timeout_s) and self.connect_timeout_s > 0,
            f"connect_timeout_s must be a positive number, got {self.connect_timeout_s!r}",
        )
        _require(
            self.read_timeout_s is None or (_is_number(self.read_timeout_s) and self.read_timeout_s > 0),
            f"read_timeout_s must be a positive number or null, got {self.read_timeout_s!r}",
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProxyConfig:
        """Build from a plain mapping (a scenario file's ``proxy:`` section); ValueError says what is wrong.

        Example::

            {"upstream": "http://127.0.0.1:8000", "node": "gateway-1", "seed": 7, "impairments": [
                {"kind": "buffer_coalesce", "flush_ms": 200, "flush_bytes": 4096, "probability": 0.3},
                {"kind": "stall", "after_event": 10, "duration_ms": 800, "path_prefix": "/v1/chat"},
                {"kind": "rechunk", "merge_events": 3},
                {"kind": "drop", "after_event": 25, "probability": 0.02}]}
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"proxy config must be a mapping, got {type(data).__name__}")
        values = _typed_values(cls, data, "proxy config", skip={"impairments"})
        raw_rules = data.get("impairments", [])
        if not isinstance(raw_rules, Sequence) or isinstance(raw_rules, str | bytes):
            raise ValueError(f"proxy config: impairments must be a list, got {type(raw_rules).__name__}")
        values["impairments"] = tuple(_rule_from_dict(item, f"impairments[{i}]") for i, item in enumerate(raw_rules))
        if "upstream" not in values:
            raise ValueError("proxy config: upstream is required (the engine's base URL, e.g. http://127.0.0.1:8000)")
        try:
            return cls(**values)
        except ValueError as exc:
            raise ValueError(f"proxy config: {exc}") from None


def _rule_from_dict(item: Any, where: str) -> ImpairmentRule:
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: each impairment must be a mapping with a 'kind', got {item!r}")
    kind = item.get("kind")
    rule_type = RULE_TYPES.get(kind) if isinstance(kind, str) else None
    if rule_type is None:
        raise ValueError(f"{where}: kind must be one of {', '.join(RULE_TYPES)}, got {kind!r}")
    where = f"{where} ({kind})"
    values = _typed_values(rule_type, {k: v for k, v in item.items() if k != "kind"}, where)
    try:
        return rule_type(**values)
    except TypeError as exc:  # a required field is missing
        required = [f.name for f in fields(rule_type) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in values]
        raise ValueError(f"{where}: missing {', '.join(missing) or 'a required key'}") from exc
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _typed_values(target: type, data: Mapping[str, Any], where: str, skip: frozenset[str] | set[str] = frozenset()):
    """Check keys and value types against the dataclass's field annotations; ints are accepted as floats."""
    known = {f.name: f.type for f in fields(target) if f.init}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in skip:
            continue
        if key not in known:
            raise ValueError(f"{where}: unknown key {key!r}; expected one of {', '.join(sorted(known))}")
        annotation = str(known[key])
        if value is None:
            if "None" not in annotation:
                raise ValueError(f"{where}: {key} must not be null")
        elif annotation.startswith("float"):
            if not _is_number(value):
                raise ValueError(f"{where}: {key} must be a number, got {value!r}")
            value = float(value)
        elif annotation.startswith("int") and not _is_int(value):
            raise ValueError(f"{where}: {key} must be an integer, got {value!r}")
        elif annotation.startswith("str") and not isinstance(value, str):
            raise ValueError(f"{where}: {key} must be a string, got {value!r}")
        values[key] = value
    return values


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) and math.isfinite(value)
