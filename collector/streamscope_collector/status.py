"""What the collector answers a request that raised: one table for HTTP and gRPC, so the transports agree.

An error takes the rule of its nearest class in ``RULES`` (its own, else its parent's), so a new subclass answers
as its parent until it is given a rule of its own. What is not the sender's doing (a setting, the schema, a bug)
is logged and answered 500 / INTERNAL without its text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc

from streamscope.errors import (
    ConfigError,
    DecodeError,
    GrafanaError,
    LimitExceeded,
    MissingDependency,
    Overloaded,
    RetryableWriteError,
    SchemaMismatch,
    SpoolFull,
    SpoolUnavailable,
    StreamscopeError,
    WriteError,
)
from streamscope_collector.auth import Forbidden, Unauthorized

RETRY_AFTER_S = "5"
INTERNAL_MESSAGE = "internal error in the collector; the request was not stored"
log = logging.getLogger(__name__)


class UnsupportedMediaType(DecodeError):
    """A request body in a content type or encoding the route does not read (HTTP 415)."""


@dataclass(frozen=True)
class Rule:
    """How a class of errors is answered."""

    http: int
    grpc: grpc.StatusCode
    headers: Mapping[str, str] = field(default_factory=dict)
    retry: bool = False
    """The same request may succeed later: the message says so and HTTP answers carry Retry-After."""
    hidden: bool = False
    """Not the sender's doing: logged, and answered without the error's text."""
    http_body_code: grpc.StatusCode | None = None
    """The code in an HTTP answer's google.rpc.Status body where it is not ``grpc``."""


@dataclass(frozen=True)
class Answer:
    """The answer to one request that raised, in the terms of either transport."""

    http: int
    grpc: grpc.StatusCode
    rpc_code: int
    """google.rpc.Code of an HTTP error body (OTLP leaves it unused; it is filled for humans)."""
    message: str
    headers: dict[str, str]


_INTERNAL = Rule(500, grpc.StatusCode.INTERNAL, hidden=True)
_UNAVAILABLE = Rule(503, grpc.StatusCode.UNAVAILABLE, retry=True)

RULES: Mapping[type[Exception], Rule] = {
    StreamscopeError: _INTERNAL,
    ConfigError: _INTERNAL,
    SchemaMismatch: _INTERNAL,
    GrafanaError: _INTERNAL,
    MissingDependency: _INTERNAL,  # an install without a package the code needs: the operator's to fix
    DecodeError: Rule(400, grpc.StatusCode.INVALID_ARGUMENT),
    LimitExceeded: Rule(413, grpc.StatusCode.RESOURCE_EXHAUSTED),
    UnsupportedMediaType: Rule(415, grpc.StatusCode.INVALID_ARGUMENT),
    Unauthorized: Rule(401, grpc.StatusCode.UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"}),
    Forbidden: Rule(403, grpc.StatusCode.PERMISSION_DENIED),
    WriteError: Rule(500, grpc.StatusCode.INTERNAL),
    RetryableWriteError: _UNAVAILABLE,
    SpoolFull: _UNAVAILABLE,
    SpoolUnavailable: _UNAVAILABLE,  # a full or read-only spool: 503, which senders retry; its path is in the log only
    # 429 over HTTP; over gRPC UNAVAILABLE, the status OTLP exporters retry without RetryInfo
    Overloaded: Rule(429, grpc.StatusCode.UNAVAILABLE, retry=True, http_body_code=grpc.StatusCode.RESOURCE_EXHAUSTED),
}


def rule_for(error_type: type[BaseException]) -> Rule:
    """The rule of ``error_type``'s nearest class that has one; errors outside the tree are internal."""
    return next((RULES[cls] for cls in error_type.__mro__ if cls in RULES), _INTERNAL)


def answer(exc: BaseException, handling: str) -> Answer:
    """The answer to a request that raised ``exc`` while the collector was handling it (``handling`` names the
    request in the log); the process keeps serving."""
    rule = rule_for(type(exc))
    headers = dict(rule.headers)
    if rule.hidden:
        log.error("unexpected error handling %s", handling, exc_info=exc)
        message = INTERNAL_MESSAGE
    elif rule.retry:
        message = f"{exc}; retry later"
        headers["Retry-After"] = RETRY_AFTER_S
    else:
        message = str(exc)
    body_code = rule.http_body_code or rule.grpc
    return Answer(rule.http, rule.grpc, body_code.value[0], message, headers)
