"""Provision streamscope into a Grafana that already runs, over its HTTP API, from the file-provisioning files.

The compose stack mounts dashboards/grafana/provisioning/ into the Grafana it starts. A Grafana that runs
elsewhere gets the same things from `streamscope dashboards push`, read from the same files so the two never
drift: the ClickHouse data source (the file's jsonData, pointed at the given ClickHouse), a folder, every
dashboard of ``streamscope_dashboards.grafana``, and the alerting files' contact points, notification policy and alert
rules, converted from the file-provisioning shape to the HTTP provisioning API's (grafana.md §3.4 and §5).

Every step is keyed by a fixed uid or name, so a second push updates what the first one created:

- data source: GET /api/datasources/uid/{uid}, then PUT there, or POST /api/datasources
- folder: looked up by title in GET /api/folders, else POST /api/folders with a uid made from the title
- dashboards: POST /api/dashboards/db with ``overwrite`` (GET /api/dashboards/uid/{uid} only to report)
- contact points: GET /api/v1/provisioning/contact-points?name=…, then PUT …/{uid}, or POST
- notification policy tree: PUT /api/v1/provisioning/policies (one resource, replaced whole)
- alert rules: PUT /api/v1/provisioning/folder/{folderUid}/rule-groups/{group}, Grafana's "create or update
  alert rule group", which carries the group's interval along with its rules (GET
  /api/v1/provisioning/alert-rules/{uid} only to report). Rules are never POSTed: Grafana answers a POST of a uid
  that exists with 400 "a conflicting alert rule is found" (500 before Grafana 10), which cannot be told from a
  rule it rejects, and a POST into a new group would give that group the default interval, not the file's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import niquests
import yaml
from grafana_client import GrafanaApi
from grafana_client.client import GrafanaException, GrafanaTimeoutError

from streamscope.errors import ConfigError, GrafanaError
from streamscope_dashboards.boards import BOARDS
from streamscope_dashboards.files import grafana_dir
from streamscope_dashboards.grafana import DATASOURCE, dashboard
from streamscope_dashboards.report import parse_duration

PROVISIONING_DIR = grafana_dir() / "provisioning"
"""The files the compose stack mounts into Grafana: datasources/, dashboards/ and alerting/."""
MESSAGE = "streamscope dashboards push"
"""Saved with each dashboard version, so Grafana's history says where a change came from."""

Announce = Callable[[str], None]

_CLICKHOUSE_PORTS = {"http": 8123, "https": 8443}
"""The plugin's default HTTP ports (it does not pick the TLS port by itself)."""
_ALERTING_SECTIONS = frozenset({"apiVersion", "groups", "contactPoints", "policies"})
_RAW_KEYS = frozenset({"annotations", "relativeTimeRange", "model"})
"""Alerting-file fields Grafana does not interpolate (grafana.md §3.1): `{{ $labels.x }}` and SQL macros stay."""
_RENAMED = {"keepFiringFor": "keep_firing_for", "missing_series_evals_to_resolve": "missingSeriesEvalsToResolve"}
"""AlertRuleV1 keys spelled differently in the HTTP API's ProvisionedAlertRule."""
_LINKS = {"dashboardUid": "__dashboardUid__", "panelId": "__panelId__"}
"""A rule's dashboard link: its own fields in the file, reserved annotations in the HTTP API."""
_FILE_DEFAULTS = {"noDataState": "NoData", "execErrState": "Alerting", "queryType": ""}
"""What file provisioning fills in when a rule leaves these out; the HTTP API requires the states."""
_VARIABLE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z0-9_]+))")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")


@dataclass(frozen=True)
class ClickHouseTarget:
    """How Grafana reaches ClickHouse. None keeps the provisioning file's value (the compose stack's)."""

    password: str
    url: str | None = None
    """http://host:8123 or https://host:8443; the plugin connects with host and port, so those are what change."""
    user: str | None = None
    database: str | None = None

    def json_data(self) -> dict[str, Any]:
        """The jsonData keys (the plugin's v4 names, as in the provisioning file) that these values replace."""
        out: dict[str, Any] = {}
        if self.url:
            parts = urlsplit(self.url)
            try:
                port = parts.port or _CLICKHOUSE_PORTS.get(parts.scheme)
            except ValueError:  # a port that is not a number
                port = None
            if parts.scheme not in _CLICKHOUSE_PORTS or port is None or not parts.hostname:
                raise ConfigError(f"ClickHouse URL {self.url!r}: expected http://host:8123 or https://host:8443")
            out.update(host=parts.hostname, port=port, protocol="http", secure=parts.scheme == "https")
        if self.user:
            out["username"] = self.user
        if self.database:
            out["defaultDatabase"] = self.database
        return out


@dataclass(frozen=True)
class PushConfig:
    grafana_url: str
    token: str | None
    """A service account token (Bearer); without one, user:password in the URL (basic auth)."""
    clickhouse: ClickHouseTarget
    folder: str | None = None
    """One folder title for the dashboards and the rules; None: the dashboards provider's folder for the
    dashboards and each rule group's own folder, as file provisioning places them."""
    provisioning_dir: Path = PROVISIONING_DIR
    timeout_s: float = 10.0


@dataclass(frozen=True)
class RuleGroup:
    """A file rule group, checked; only its folder's uid is left to find, which only Grafana can tell."""

    name: str
    folder: str
    """The folder title from the file."""
    interval_s: int
    org_id: int
    rules: list[dict[str, Any]]
    """As the file has them (AlertRuleV1), interpolated."""

    def payload(self, folder_uid: str) -> dict[str, Any]:
        """The body of PUT /api/v1/provisioning/folder/{folderUid}/rule-groups/{group}."""
        return {
            "title": self.name,
            "folderUid": folder_uid,
            "interval": self.interval_s,
            "rules": [alert_rule(rule, self.name, folder_uid, self.org_id) for rule in self.rules],
        }


@dataclass(frozen=True)
class Alerting:
    """The alerting files' contents, interpolated as Grafana does; contact points and policies in HTTP shape."""

    groups: list[RuleGroup]
    contact_points: list[dict[str, Any]]
    policies: list[dict[str, Any]]


class _Grafana:
    """grafana-client calls whose failures become one-line GrafanaErrors that say what was being done."""

    def __init__(self, api: GrafanaApi, url: str) -> None:
        self.api, self.url = api, url

    def call(self, doing: str, fn: Callable[..., Any], *args: Any) -> Any:
        with _grafana_errors(self.url, doing):
            return fn(*args)

    def find(self, doing: str, fn: Callable[..., Any], *args: Any) -> Any | None:
        """A lookup whose 404 means "not there yet", the cue to create instead of update."""
        with _grafana_errors(self.url, doing):
            try:
                return fn(*args)
            except GrafanaException as exc:
                if exc.status_code == 404:
                    return None
                raise


def push(config: PushConfig, announce: Announce, environ: Mapping[str, str] = os.environ) -> None:
    """Provision everything, printing one line per resource; files are read before Grafana is touched."""
    directory = config.provisioning_dir
    datasource = datasource_payload(provisioned_datasource(directory), config.clickhouse)
    board_folder_title = config.folder or dashboards_folder(directory)
    alerting = load_alerting(directory / "alerting", environ)
    grafana = _Grafana(connect(config.grafana_url, config.token, config.timeout_s), config.grafana_url)
    folders: dict[str, str] = {}

    def folder_uid(title: str) -> str:
        if title not in folders:
            folders[title] = ensure_folder(grafana, title, announce)
        return folders[title]

    push_datasource(grafana, datasource, announce)
    board_folder = folder_uid(board_folder_title)
    for board in BOARDS:
        push_dashboard(grafana, dashboard(board), board_folder, announce)
    for point in alerting.contact_points:
        push_contact_point(grafana, point, announce)
    for tree in alerting.policies:
        push_policy_tree(grafana, tree, announce)
    for group in alerting.groups:
        push_rule_group(grafana, group.payload(folder_uid(config.folder or group.folder)), announce)


def connect(url: str, token: str | None, timeout_s: float) -> GrafanaApi:
    """A client for the Grafana at ``url``, which may sit under a sub-path (http://host/grafana).

    Built from the URL's parts rather than with GrafanaApi.from_url, which drops the slash between a sub-path and
    "api" (http://host/grafana would become http://host/grafanaapi).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"Grafana URL {url!r}: expected http(s)://host[:port][/path]")
    if token:
        auth: str | tuple[str, str] = token
    elif parts.username and parts.password:
        auth = (unquote(parts.username), unquote(parts.password))
    else:
        raise ConfigError("no Grafana credentials: give a service account token, or user:password in the URL")
    prefix = parts.path.strip("/")
    return GrafanaApi(
        auth,
        host=parts.hostname,
        port=parts.port,
        url_path_prefix=f"{prefix}/" if prefix else "",
        protocol=parts.scheme,
        timeout=timeout_s,
    )


@contextmanager
def _grafana_errors(url: str, doing: str) -> Iterator[None]:
    try:
        yield
    except GrafanaTimeoutError:
        raise GrafanaError(f"Grafana at {url} did not answer in time while {doing}") from None
    except GrafanaException as exc:
        if exc.status_code == 0:  # grafana-client's wrapper for a failed exchange
            raise GrafanaError(f"cannot talk to Grafana at {url} while {doing}: {_reason(exc)}") from None
        if exc.status_code == 401:
            raise GrafanaError(f"Grafana at {url} did not accept the credentials (401 Unauthorized)") from None
        message = _grafana_message(exc) or "no reason given"
        raise GrafanaError(f"Grafana refused {doing} ({exc.status_code}): {message}") from None
    except niquests.exceptions.RequestException as exc:
        raise GrafanaError(f"cannot reach Grafana at {url}: {_reason(exc)}") from None


def _grafana_message(exc: GrafanaException) -> str:
    """Grafana's own explanation: the "message" of its JSON error body, else the body's text."""
    body = exc.response
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or "")
    return str(body or "").strip()


def _reason(exc: Exception) -> str:
    """The socket error under niquests' wrapping ("[Errno 111] Connection refused"), else the exception's text."""
    found = _ERRNO.search(str(exc))
    return found.group(0) if found else str(exc) or type(exc).__name__


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a provisioning document (a mapping with apiVersion: 1)")
    return document


def _require(entry: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    missing = [key for key in keys if entry.get(key) in (None, "", [])]
    if missing:
        raise ConfigError(f"{what} lacks {', '.join(missing)}")


def provisioned_datasource(directory: Path) -> dict[str, Any]:
    """The entry of datasources/*.yaml whose uid the dashboards and alert rules name."""
    for path in sorted((directory / "datasources").glob("*.y*ml")):
        for entry in _load_yaml(path).get("datasources") or []:
            if entry.get("uid") == DATASOURCE["uid"]:
                _require(entry, ("name", "type", "jsonData"), f"the data source in {path}")
                return entry
    raise ConfigError(f"no data source with uid {DATASOURCE['uid']!r} in {directory / 'datasources'}")


def datasource_payload(provisioned: dict[str, Any], clickhouse: ClickHouseTarget) -> dict[str, Any]:
    """The data source as POST/PUT /api/datasources take it: the file's name, type, uid and jsonData, with the
    given connection values substituted, and the password.

    ``isDefault`` is left out: an existing Grafana keeps its own default data source, and every dashboard and
    rule names this one by uid anyway.
    """
    return {
        "name": provisioned["name"],
        "type": provisioned["type"],
        "uid": provisioned["uid"],
        "access": "proxy",
        "jsonData": {**provisioned["jsonData"], **clickhouse.json_data()},
        "secureJsonData": {"password": clickhouse.password},
    }


def dashboards_folder(directory: Path) -> str:
    """The folder title the dashboards provider file puts the dashboards in."""
    for path in sorted((directory / "dashboards").glob("*.y*ml")):
        for provider in _load_yaml(path).get("providers") or []:
            if provider.get("folder"):
                return str(provider["folder"])
    raise ConfigError(f"no dashboards provider with a folder in {directory / 'dashboards'}: give a folder")


def interpolate(value: Any, environ: Mapping[str, str]) -> Any:
    """Expand $VAR and ${VAR} in strings as Grafana does in alerting files ($$ is a literal $), except under the
    keys Grafana leaves raw. An unset variable is an error here, where Grafana would substitute nothing."""

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1) if match.group(1) is not None else match.group(2)
        if name not in environ:
            raise ConfigError(f"environment variable {name} is not set")
        return environ[name]

    if isinstance(value, str):
        return "$".join(_VARIABLE.sub(lookup, part) for part in value.split("$$"))
    if isinstance(value, list):
        return [interpolate(item, environ) for item in value]
    if isinstance(value, dict):
        return {k: v if k in _RAW_KEYS else interpolate(v, environ) for k, v in value.items()}
    return value


def load_alerting(directory: Path, environ: Mapping[str, str]) -> Alerting:
    """Every .yaml, .yml and .json file of the alerting directory, as Grafana reads it; no directory, nothing."""
    alerting = Alerting([], [], [])
    paths = sorted(p for p in directory.glob("*") if p.suffix in {".yaml", ".yml", ".json"})
    for path in paths:
        document = _load_yaml(path)
        unsupported = sorted(set(document) - _ALERTING_SECTIONS)
        if unsupported:
            raise ConfigError(f"{path}: push provisions groups, contactPoints and policies, not {unsupported}")
        try:
            document = interpolate(document, environ)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        alerting.groups.extend(rule_group(group) for group in document.get("groups") or [])
        alerting.contact_points.extend(
            p for point in document.get("contactPoints") or [] for p in contact_points(point)
        )
        alerting.policies.extend(policy_tree(policy) for policy in document.get("policies") or [])
    if len(alerting.policies) > 1:
        raise ConfigError(f"{directory}: more than one notification policy tree (Grafana keeps one per org)")
    return alerting


def contact_points(point: dict[str, Any]) -> list[dict[str, Any]]:
    """A file contact point is a name with receivers; the HTTP API has one contact point per receiver, sharing
    the name. Each needs its uid: it is how a second push finds the one to update."""
    _require(point, ("name",), "a contact point")
    out = []
    for receiver in point.get("receivers") or []:
        _require(receiver, ("uid", "type"), f"a receiver of contact point {point['name']!r}")
        out.append(
            {
                "uid": receiver["uid"],
                "name": point["name"],
                "type": receiver["type"],
                "settings": receiver.get("settings") or {},
                "disableResolveMessage": bool(receiver.get("disableResolveMessage", False)),
            }
        )
    return out


def policy_tree(policy: dict[str, Any]) -> dict[str, Any]:
    """A file policy is the API's route tree plus the org it belongs to (the token's org, over HTTP)."""
    return {k: v for k, v in policy.items() if k != "orgId"}


def rule_group(group: dict[str, Any]) -> RuleGroup:
    """A file rule group, with the fields Grafana requires checked here, before anything is sent."""
    _require(group, ("name", "folder", "interval"), "a rule group")
    try:
        interval_s = int(parse_duration(str(group["interval"])).total_seconds())
    except ValueError as exc:
        raise ConfigError(f"rule group {group['name']!r}: interval {exc}") from None
    rules = group.get("rules") or []
    for rule in rules:
        # the uid is how a second push updates the rule instead of adding another
        _require(rule, ("uid", "title", "condition", "data"), f"a rule in group {group['name']!r}")
    return RuleGroup(str(group["name"]), str(group["folder"]), interval_s, int(group.get("orgId", 1)), rules)


def alert_rule(rule: dict[str, Any], group: str, folder_uid: str, org_id: int) -> dict[str, Any]:
    """A file rule (AlertRuleV1) as the HTTP API's ProvisionedAlertRule: the group's placement moves onto the
    rule (folderUID, ruleGroup, orgID), a few keys are spelled differently, the dashboard link becomes the
    annotations Grafana keeps it in, and the defaults file provisioning applies are made explicit."""
    out = {_RENAMED.get(key, key): value for key, value in rule.items() if key not in _LINKS}
    links = {_LINKS[key]: str(rule[key]) for key in _LINKS if key in rule}
    if links:
        out["annotations"] = {**rule.get("annotations", {}), **links}
    out["data"] = [{"queryType": _FILE_DEFAULTS["queryType"], **query} for query in rule.get("data") or []]
    out.setdefault("noDataState", _FILE_DEFAULTS["noDataState"])
    out.setdefault("execErrState", _FILE_DEFAULTS["execErrState"])
    out.update(folderUID=folder_uid, ruleGroup=group, orgID=org_id)
    return out


def push_datasource(grafana: _Grafana, payload: dict[str, Any], announce: Announce) -> None:
    uid, doing = payload["uid"], f"the data source {payload['name']!r}"
    existing = grafana.find(f"looking up {doing}", grafana.api.datasource.get_datasource_by_uid, uid)
    if existing is None:
        grafana.call(f"creating {doing}", grafana.api.datasource.create_datasource, payload)
    else:
        grafana.call(f"updating {doing}", grafana.api.datasource.update_datasource_by_uid, uid, payload)
    where = payload["jsonData"]
    announce(
        f"data source {payload['name']} (uid {uid}): {'created' if existing is None else 'updated'}, "
        f"{where.get('host')}:{where.get('port')} database {where.get('defaultDatabase')} as {where.get('username')}"
    )


def folder_uid_for(title: str) -> str | None:
    """A readable folder uid from its title (at most 40 of [a-z0-9_-]), for URLs and the rules' folderUID; None,
    for Grafana to choose one, when no such character is left. A second push finds the folder by title anyway."""
    return re.sub(r"[^a-z0-9_-]+", "-", title.lower()).strip("-")[:40] or None


def ensure_folder(grafana: _Grafana, title: str, announce: Announce) -> str:
    """The uid of the top-level folder with this title, created when missing. Looked up by title so that a
    folder made another way (file provisioning gives it a random uid) is reused, not duplicated."""
    folders = grafana.call("listing folders", grafana.api.folder.get_all_folders)
    uid = next((f["uid"] for f in folders if f.get("title") == title), None)
    if uid is None:
        uid = grafana.call(
            f"creating the folder {title!r}", grafana.api.folder.create_folder, title, folder_uid_for(title)
        )["uid"]
        announce(f"folder {title} (uid {uid}): created")
    else:
        announce(f"folder {title} (uid {uid}): exists")
    return uid


def push_dashboard(grafana: _Grafana, board: dict[str, Any], folder_uid: str, announce: Announce) -> None:
    doing = f"the dashboard {board['title']!r}"
    existing = grafana.find(f"looking up {doing}", grafana.api.dashboard.get_dashboard, board["uid"])
    payload = {"dashboard": board, "folderUid": folder_uid, "overwrite": True, "message": MESSAGE}
    saved = grafana.call(f"saving {doing}", grafana.api.dashboard.update_dashboard, payload)
    announce(
        f"dashboard {board['title']} (uid {board['uid']}): {'created' if existing is None else 'updated'}, "
        f"version {saved.get('version')}"
    )


def push_contact_point(grafana: _Grafana, point: dict[str, Any], announce: Announce) -> None:
    doing = f"the contact point {point['name']!r} ({point['type']}, uid {point['uid']})"
    named = grafana.call(f"looking up {doing}", grafana.api.alertingprovisioning.get_contactpoints, point["name"])
    exists = any(existing.get("uid") == point["uid"] for existing in named or [])
    if exists:
        grafana.call(f"updating {doing}", grafana.api.alertingprovisioning.update_contactpoint, point["uid"], point)
    else:
        grafana.call(f"creating {doing}", grafana.api.alertingprovisioning.create_contactpoint, point)
    announce(
        f"contact point {point['name']} ({point['type']}, uid {point['uid']}): {'updated' if exists else 'created'}"
    )


def push_policy_tree(grafana: _Grafana, tree: dict[str, Any], announce: Announce) -> None:
    grafana.call(
        "setting the notification policy tree", grafana.api.alertingprovisioning.set_notification_policy_tree, tree
    )
    routes = len(tree.get("routes") or [])
    announce(f"notification policy tree: replaced (default contact point {tree.get('receiver')}, routes: {routes})")


def push_rule_group(grafana: _Grafana, payload: dict[str, Any], announce: Announce) -> None:
    provisioning = grafana.api.alertingprovisioning
    title, folder = payload["title"], payload["folderUid"]
    known = {
        rule["uid"]
        for rule in payload["rules"]
        if grafana.find(f"looking up the alert rule {rule['uid']!r}", provisioning.get_alertrule, rule["uid"])
    }
    grafana.call(f"saving the alert rule group {title!r}", provisioning.update_rule_group, folder, title, payload)
    for rule in payload["rules"]:
        announce(f"alert rule {rule['title']} (uid {rule['uid']}): {'updated' if rule['uid'] in known else 'created'}")
    announce(
        f"alert rule group {title} (folder uid {folder}): rules: {len(payload['rules'])}, every {payload['interval']}s"
    )
