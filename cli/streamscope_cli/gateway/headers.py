"""Which headers cross the gateway: end-to-end ones only (RFC 9110 §7.6.1), plus where the request came from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Header = tuple[bytes, bytes]

HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-connection proxy-authenticate proxy-authorization te trailer transfer-encoding "
    b"upgrade".split()
)
"""Headers about one connection, never forwarded; so are those a ``Connection`` header names."""
SET_BY_THE_NEXT_HOP = frozenset({b"host", b"expect"})
"""Request headers the upstream connection writes itself (the upstream's host; 100-continue is the gateway's)."""


def end_to_end(headers: Iterable[Header], also_drop: frozenset[bytes] = frozenset()) -> list[Header]:
    """``headers`` (names lower-cased, as ASGI has them) without the hop-by-hop ones and ``also_drop``."""
    headers = [(name.lower(), value) for name, value in headers]
    listed = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    return [(name, value) for name, value in headers if not (name in HOP_BY_HOP or name in listed or name in also_drop)]


def upstream_request_headers(scope: Mapping[str, Any]) -> list[Header]:
    """The request's headers as the upstream gets them, with the client added to ``X-Forwarded-For``."""
    headers = end_to_end(scope.get("headers", ()), SET_BY_THE_NEXT_HOP)
    client = scope.get("client")
    if client:
        earlier = [value for name, value in headers if name == b"x-forwarded-for"]
        headers = [(name, value) for name, value in headers if name != b"x-forwarded-for"]
        headers.append((b"x-forwarded-for", b", ".join([*earlier, str(client[0]).encode()])))
    if not any(name == b"x-forwarded-proto" for name, _ in headers):
        headers.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()))
    return headers


def replaced(headers: list[Header], new: Mapping[str, str]) -> list[Header]:
    """``headers`` with each of ``new`` replacing any of the same name."""
    names = {name.lower().encode() for name in new}
    kept = [(name, value) for name, value in headers if name not in names]
    return kept + [(name.lower().encode(), value.encode("latin-1")) for name, value in new.items()]
