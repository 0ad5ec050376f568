"""Who is sending: bearer tokens mapped to tenants, so the stored tenant comes from credentials, never a payload.

With no tokens configured, authentication is off and every request belongs to the collector's one tenant.
With tokens, every OTLP request (HTTP ``Authorization: Bearer``, gRPC ``authorization`` metadata) needs a secret
token, and the browser route needs one of the public browser tokens (``?token=`` or bearer): a request without a
valid one is answered 401 (gRPC UNAUTHENTICATED).

The alert webhook writes the operator's alert history, which no tenant may: it takes only the webhook token
(``--alert-webhook-token``), which Grafana's contact point sends, and answers a tenant's token 403. Its rows
carry the tenant ``WEBHOOK_TENANT``, a name no token can map to. Without a webhook token it is open while
authentication is off, and closed while it is on.

The tokens file (``streamscope collector --auth-file``) is YAML::

    tokens:            # secret: services, gpu agents
      9f2c…e1: team-a
      5b7d…04: team-b
    browser_tokens:    # public, shipped in web pages: can only add browser spans
      pub-a: team-a

Tokens are compared by their SHA-256, so a lookup takes the same time whichever token is close.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from streamscope.errors import ConfigError, StreamscopeError

TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
WEBHOOK_TENANT = "_grafana"
"""The tenant of what the alert webhook writes: not a tenant name (those start alphanumeric), so no token's."""


class Unauthorized(StreamscopeError):
    """The request carries no valid token for the route (HTTP 401, gRPC UNAUTHENTICATED)."""


class Forbidden(StreamscopeError):
    """The request's token is valid, but not for this route (HTTP 403, gRPC PERMISSION_DENIED)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Credentials:
    def __init__(
        self,
        default_tenant: str = "default",
        tokens: Mapping[str, str] | None = None,
        browser_tokens: Mapping[str, str] | None = None,
        webhook_token: str | None = None,
    ) -> None:
        """``tokens``: secret token → tenant (none: authentication off); ``browser_tokens``: public token → tenant;
        ``webhook_token``: the alert webhook's own token."""
        self.default_tenant = check_tenant(default_tenant)
        self._secret = {_digest(t): check_tenant(tenant) for t, tenant in (tokens or {}).items()}
        self._public = {_digest(t): check_tenant(tenant) for t, tenant in (browser_tokens or {}).items()}
        self._webhook = _digest(webhook_token) if webhook_token else None
        if self._webhook in self._secret or self._webhook in self._public:
            raise ConfigError("the alert webhook token is also a tenant's token: give the webhook a token of its own")

    @property
    def enabled(self) -> bool:
        return bool(self._secret)

    def tenant(self, authorization: str | None) -> str:
        """The tenant of a request to an OTLP route; raises Unauthorized."""
        if not self.enabled:
            return self.default_tenant
        offered = bearer(authorization)
        if offered is None:
            raise Unauthorized("missing credentials: send Authorization: Bearer <token>")
        tenant = self._secret.get(_digest(offered))
        if tenant is None:
            raise Unauthorized("unknown token")
        return tenant

    def browser_tenant(self, query_token: str | None, authorization: str | None) -> str:
        """The tenant of a request to the browser route: open only when no token of either kind is configured."""
        if not self._public and not self.enabled:
            return self.default_tenant
        offered = query_token or bearer(authorization)
        tenant = self._public.get(_digest(offered)) if offered else None
        if tenant is None:
            raise Unauthorized("missing or wrong browser ingest token (?token= or Authorization: Bearer)")
        return tenant

    def webhook_tenant(self, authorization: str | None) -> str:
        """``WEBHOOK_TENANT``, for a request to the alert webhook bearing its token; raises Unauthorized, or
        Forbidden for a tenant's token."""
        offered = bearer(authorization)
        digest = _digest(offered) if offered else None
        if self._webhook is None and not self.enabled:
            return WEBHOOK_TENANT
        if digest is not None and digest == self._webhook:
            return WEBHOOK_TENANT
        if digest is not None and (digest in self._secret or digest in self._public):
            raise Forbidden("the alert webhook writes the operator's alert history and takes only its own token")
        raise Unauthorized("the alert webhook takes the token set by --alert-webhook-token")

    def knows(self, token: str) -> bool:
        """Whether ``token`` is one of the secret tokens."""
        return _digest(token) in self._secret


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if that is what it holds."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def check_tenant(name: str) -> str:
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise ConfigError(f"tenant name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")
    return name


def load_tokens(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The secret and the browser tokens of a tokens file; raises ConfigError saying what is wrong."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the tokens file {path}: {exc}") from None
    if not isinstance(document, dict) or set(document) - {"tokens", "browser_tokens"}:
        raise ConfigError(f"{path}: expected a mapping with 'tokens' and optionally 'browser_tokens'")
    found = []
    for key in ("tokens", "browser_tokens"):
        section = document.get(key) or {}
        if not isinstance(section, dict) or not all(isinstance(t, str) and t for t in section):
            raise ConfigError(f"{path}: '{key}' must map token strings to tenant names")
        found.append({token: check_tenant(tenant) for token, tenant in section.items()})
    if not found[0]:
        raise ConfigError(f"{path}: no tokens: authentication needs at least one secret token")
    return found[0], found[1]
