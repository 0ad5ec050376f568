"""`streamscope dashboards push`, run as a real process against a DOUBLE of Grafana's HTTP API.

No Grafana server can run here, so this file serves a thin stand-in for the endpoints push uses, over a real
socket (uvicorn in a thread). It is a test double, not Grafana: it checks what Grafana's handlers would refuse
(the bearer token, the body shapes, references from dashboards and rules to the data source, from policies to
contact points), keeps what it was sent, and answers errors as Grafana does, with JSON {"message": ...}. What it
cannot tell is whether a real Grafana accepts every detail of these bodies; see the module docstring of
streamscope_dashboards.push for the API facts it encodes.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from streamscope.errors import ConfigError
from streamscope_collector.serving import BackgroundServer
from streamscope_dashboards.boards import BOARDS
from streamscope_dashboards.push import PROVISIONING_DIR, alert_rule, load_alerting, rule_group
from tests.support import free_port, run

ADMIN_TOKEN = "glsa_admin-token"
VIEWER_TOKEN = "glsa_viewer-token"
CLICKHOUSE_TYPE = "grafana-clickhouse-datasource"
UID = re.compile(r"[A-Za-z0-9_-]{1,40}")


class Rejected(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def check(condition: Any, message: str, status: int = 400) -> None:
    if not condition:
        raise Rejected(status, message)


class GrafanaDouble:
    """State and checks for the Grafana endpoints push calls; anything else is answered 404 by FastAPI."""

    def __init__(self) -> None:
        self.datasources: dict[str, dict[str, Any]] = {}
        self.folders: dict[str, dict[str, Any]] = {}
        self.dashboards: dict[str, dict[str, Any]] = {}
        self.rules: dict[str, dict[str, Any]] = {}
        self.groups: dict[tuple[str, str], int] = {}
        self.contact_points: dict[str, dict[str, Any]] = {}
        self.policy: dict[str, Any] | None = None
        self.requests: list[tuple[str, str]] = []
        self.app = self._app()

    def counts(self) -> dict[str, int]:
        return {
            "datasources": len(self.datasources),
            "folders": len(self.folders),
            "dashboards": len(self.dashboards),
            "rules": len(self.rules),
            "groups": len(self.groups),
            "contact_points": len(self.contact_points),
            "policies": int(self.policy is not None),
        }

    def check_datasource(self, body: dict[str, Any]) -> None:
        check(body.get("name") and body.get("type") == CLICKHOUSE_TYPE, "name and the ClickHouse type are required")
        check(UID.fullmatch(body.get("uid", "")), "invalid uid")
        json_data = body.get("jsonData") or {}
        check(json_data.get("host") and isinstance(json_data.get("port"), int), "the plugin needs host and port")
        check((body.get("secureJsonData") or {}).get("password"), "no password in secureJsonData")

    def check_rule(self, rule: dict[str, Any], folder_uid: str, group: str) -> None:
        check(UID.fullmatch(rule.get("uid", "")), f"invalid rule uid {rule.get('uid')!r}")
        check(rule.get("title"), "rule title is required")
        check(rule.get("folderUID") == folder_uid and rule.get("ruleGroup") == group, "folderUID/ruleGroup mismatch")
        check(isinstance(rule.get("orgID"), int), "orgID is required")
        check(rule.get("noDataState") in {"NoData", "Alerting", "OK", "KeepLast"}, "invalid noDataState")
        check(rule.get("execErrState") in {"Error", "Alerting", "OK", "KeepLast"}, "invalid execErrState")
        data = rule.get("data") or []
        check(rule.get("condition") in {query.get("refId") for query in data}, "condition is not one of the refIds")
        for query in data:
            source = query.get("datasourceUid")
            check(isinstance(query.get("model"), dict) and "queryType" in query, "query without model or queryType")
            check(source == "__expr__" or source in self.datasources, f"data source {source!r} not found")
            if source != "__expr__":
                check((query.get("relativeTimeRange") or {}).get("from", 0) > 0, "invalid relative time range")
        receiver = (rule.get("notification_settings") or {}).get("receiver")
        check(receiver is None or self.contact_point_named(receiver), f"receiver {receiver!r} does not exist")
        same_title = [r for r in self.rules.values() if r["folderUID"] == folder_uid and r["title"] == rule["title"]]
        check(
            all(r["uid"] == rule["uid"] for r in same_title),
            "a conflicting alert rule is found: rule title under the same organisation and folder should be unique",
        )

    def contact_point_named(self, name: str) -> bool:
        return any(point["name"] == name for point in self.contact_points.values())

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.exception_handler(Rejected)
        async def rejected(request: Request, exc: Rejected) -> JSONResponse:
            return JSONResponse({"message": exc.message}, status_code=exc.status)

        @app.middleware("http")
        async def auth(request: Request, call_next: Any) -> Response:
            self.requests.append((request.method, request.url.path))
            token = request.headers.get("authorization", "")
            if token not in (f"Bearer {ADMIN_TOKEN}", f"Bearer {VIEWER_TOKEN}"):
                return JSONResponse({"message": "invalid API key"}, status_code=401)
            if request.method != "GET" and token == f"Bearer {VIEWER_TOKEN}":
                message = "You'll need additional permissions to perform this action."
                return JSONResponse({"message": message}, status_code=403)
            return await call_next(request)

        @app.get("/api/datasources/uid/{uid}")
        async def get_datasource(uid: str) -> dict[str, Any]:
            check(uid in self.datasources, "Data source not found", 404)
            return self.datasources[uid]

        @app.post("/api/datasources")
        async def create_datasource(request: Request) -> dict[str, Any]:
            body = await request.json()
            self.check_datasource(body)
            check(body["uid"] not in self.datasources, "data source with the same uid already exists", 409)
            names = {ds["name"] for ds in self.datasources.values()}
            check(body["name"] not in names, "data source with the same name already exists", 409)
            self.datasources[body["uid"]] = {**body, "id": len(self.datasources) + 1}
            return {"datasource": self.datasources[body["uid"]], "message": "Datasource added"}

        @app.put("/api/datasources/uid/{uid}")
        async def update_datasource(uid: str, request: Request) -> dict[str, Any]:
            check(uid in self.datasources, "Data source not found", 404)
            body = await request.json()
            self.check_datasource(body)
            self.datasources[uid] = {**body, "id": self.datasources[uid]["id"]}
            return {"datasource": self.datasources[uid], "message": "Datasource updated"}

        @app.get("/api/folders")
        async def list_folders() -> list[dict[str, Any]]:
            return list(self.folders.values())

        @app.post("/api/folders")
        async def create_folder(request: Request) -> dict[str, Any]:
            body = await request.json()
            uid = body.get("uid") or f"generated{len(self.folders) + 1}"
            check(body.get("title") and UID.fullmatch(uid), "a title is required, and a uid must be valid")
            check(uid not in self.folders, "a folder with the same uid already exists", 409)
            titles = {folder["title"] for folder in self.folders.values()}
            check(body["title"] not in titles, "a folder with that name already exists", 409)
            self.folders[uid] = {"uid": uid, "title": body["title"], "id": len(self.folders) + 1}
            return self.folders[uid]

        @app.get("/api/dashboards/uid/{uid}")
        async def get_dashboard(uid: str) -> dict[str, Any]:
            check(uid in self.dashboards, "Dashboard not found", 404)
            stored = self.dashboards[uid]
            return {"dashboard": stored["dashboard"], "meta": {"folderUid": stored["folderUid"]}}

        @app.post("/api/dashboards/db")
        async def save_dashboard(request: Request) -> dict[str, Any]:
            body = await request.json()
            board = body.get("dashboard") or {}
            check(board.get("uid") and board.get("title") and board.get("panels"), "dashboard needs uid, title, panels")
            check(board.get("id") is None, "a dashboard from another instance must not carry an id")
            check(body.get("folderUid") in self.folders, "folder not found")
            check(body.get("overwrite") is True or board["uid"] not in self.dashboards, "version-mismatch", 412)
            for panel in board["panels"]:
                check(panel["datasource"]["uid"] in self.datasources, f"panel {panel['title']!r}: unknown data source")
            version = self.dashboards.get(board["uid"], {}).get("version", 0) + 1
            self.dashboards[board["uid"]] = {"dashboard": board, "folderUid": body["folderUid"], "version": version}
            return {"status": "success", "uid": board["uid"], "version": version, "url": f"/d/{board['uid']}"}

        @app.get("/api/v1/provisioning/alert-rules/{uid}")
        async def get_rule(uid: str) -> Response:
            if uid not in self.rules:
                return Response(status_code=404)  # Grafana answers a missing rule with an empty 404
            return JSONResponse(self.rules[uid])

        @app.put("/api/v1/provisioning/folder/{folder_uid}/rule-groups/{group}")
        async def put_rule_group(folder_uid: str, group: str, request: Request) -> dict[str, Any]:
            body = await request.json()
            check(folder_uid in self.folders, "folder does not exist", 404)
            interval = body.get("interval")
            check(isinstance(interval, int) and interval > 0 and interval % 10 == 0, "invalid group interval")
            for rule in body.get("rules") or []:
                self.check_rule(rule, folder_uid, group)
            for uid in [
                uid for uid, r in self.rules.items() if (r["folderUID"], r["ruleGroup"]) == (folder_uid, group)
            ]:
                del self.rules[uid]
            self.rules.update({rule["uid"]: rule for rule in body["rules"]})
            self.groups[(folder_uid, group)] = interval
            return body

        @app.get("/api/v1/provisioning/contact-points")
        async def list_contact_points(name: str | None = None) -> list[dict[str, Any]]:
            return [point for point in self.contact_points.values() if name in (None, point["name"])]

        def check_contact_point(body: dict[str, Any]) -> None:
            check(body.get("name") and body.get("type"), "name and type are required")
            check(UID.fullmatch(body.get("uid", "")) and isinstance(body.get("settings"), dict), "uid and settings")

        @app.post("/api/v1/provisioning/contact-points", status_code=202)
        async def create_contact_point(request: Request) -> dict[str, Any]:
            body = await request.json()
            check_contact_point(body)
            check(body["uid"] not in self.contact_points, "contact point with this uid already exists", 409)
            self.contact_points[body["uid"]] = body
            return body

        @app.put("/api/v1/provisioning/contact-points/{uid}", status_code=202)
        async def update_contact_point(uid: str, request: Request) -> dict[str, Any]:
            check(uid in self.contact_points, "contact point not found", 404)
            body = await request.json()
            check_contact_point(body)
            self.contact_points[uid] = body
            return {"message": "contactpoint updated"}

        @app.put("/api/v1/provisioning/policies", status_code=202)
        async def put_policies(request: Request) -> dict[str, Any]:
            body = await request.json()
            receivers = [body.get("receiver")] + [route.get("receiver") for route in body.get("routes") or []]
            for receiver in filter(None, receivers):
                check(self.contact_point_named(receiver), f"receiver '{receiver}' does not exist")
            check(body.get("receiver"), "the root route needs a receiver")
            self.policy = body
            return {"message": "policies updated"}

        return app


RULES = {
    "apiVersion": 1,
    "groups": [
        {
            "orgId": 1,
            "name": "itl-slo",
            "folder": "streamscope",
            "interval": "1m",
            "rules": [
                {
                    "uid": "itl-p99-of-p99",
                    "title": "ITL p99 of per-stream p99 over $$SLO",
                    "condition": "C",
                    "for": "5m",
                    "keepFiringFor": "2m",
                    "dashboardUid": "streamscope-quality",
                    "panelId": 2,
                    "labels": {"severity": "page", "team": "${ALERT_TEAM}"},
                    "annotations": {"summary": "p99 of p99 is {{ $values.B.Value }} ms"},
                    "notification_settings": {"receiver": "streamscope-collector"},
                    "data": [
                        {
                            "refId": "A",
                            "relativeTimeRange": {"from": 900, "to": 0},
                            "datasourceUid": "clickhouse",
                            "model": {
                                "refId": "A",
                                "editorType": "sql",
                                "format": 1,
                                "rawSql": "SELECT quantileExact(0.99)(gap_p99_us) / 1000 AS value FROM streams "
                                "WHERE $__timeFilter(start_time)",
                            },
                        },
                        {
                            "refId": "B",
                            "datasourceUid": "__expr__",
                            "model": {"refId": "B", "type": "reduce", "expression": "A", "reducer": "last"},
                        },
                        {
                            "refId": "C",
                            "datasourceUid": "__expr__",
                            "model": {
                                "refId": "C",
                                "type": "threshold",
                                "expression": "B",
                                "conditions": [{"evaluator": {"type": "gt", "params": [250]}}],
                            },
                        },
                    ],
                }
            ],
        }
    ],
}
CONTACT_POINTS = {
    "apiVersion": 1,
    "contactPoints": [
        {
            "orgId": 1,
            "name": "streamscope-collector",
            "receivers": [
                {
                    "uid": "streamscope-webhook",
                    "type": "webhook",
                    "settings": {"url": "${ALERT_WEBHOOK_URL}", "httpMethod": "POST"},
                }
            ],
        }
    ],
}
POLICIES = {
    "apiVersion": 1,
    "policies": [
        {
            "orgId": 1,
            "receiver": "streamscope-collector",
            "group_by": ["alertname"],
            "routes": [{"receiver": "streamscope-collector", "object_matchers": [["severity", "=", "page"]]}],
        }
    ],
}
ENV = {
    "GRAFANA_TOKEN": ADMIN_TOKEN,
    "GRAFANA_CLICKHOUSE_PASSWORD": "read-only-secret",
    "ALERT_TEAM": "inference",
    "ALERT_WEBHOOK_URL": "http://collector.internal:4318/alerts",
    "STREAMSCOPE_ALERT_WEBHOOK_TOKEN": "webhook-secret",
}


@pytest.fixture
def grafana() -> Iterator[tuple[GrafanaDouble, str]]:
    double = GrafanaDouble()
    server = BackgroundServer(double.app, name="grafana-double").start()
    yield double, f"http://127.0.0.1:{server.port}"
    server.stop()


@pytest.fixture
def provisioning(tmp_path: Path) -> Path:
    """The shipped data source and dashboards provider files, with the alerting documents above."""
    directory = tmp_path / "provisioning"
    for part in ("datasources", "dashboards"):
        shutil.copytree(PROVISIONING_DIR / part, directory / part)
    (directory / "alerting").mkdir()
    for name, document in (("rules", RULES), ("contact-points", CONTACT_POINTS), ("policies", POLICIES)):
        (directory / "alerting" / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def push(url: str, *args: str, env: dict[str, str] | None = None):
    return run("dashboards", "push", "--grafana-url", url, *args, env_extra=env or ENV)


def test_push_provisions_everything_and_a_second_push_only_updates(grafana, provisioning):
    double, url = grafana
    args = ("--clickhouse-url", "https://clickhouse.internal:8443", "--provisioning", str(provisioning))
    first = push(url, *args)
    assert first.returncode == 0, first.stderr
    assert double.counts() == {
        "datasources": 1,
        "folders": 1,
        "dashboards": len(BOARDS),
        "rules": 1,
        "groups": 1,
        "contact_points": 1,
        "policies": 1,
    }

    # the data source: the provisioning file's jsonData keys, with the given connection substituted
    provisioned = yaml.safe_load((PROVISIONING_DIR / "datasources" / "clickhouse.yaml").read_text())["datasources"][0]
    datasource = double.datasources["clickhouse"]
    assert datasource["jsonData"].keys() == provisioned["jsonData"].keys()
    connection = {key: datasource["jsonData"][key] for key in ("host", "port", "protocol", "secure")}
    assert connection == {"host": "clickhouse.internal", "port": 8443, "protocol": "http", "secure": True}
    assert datasource["jsonData"]["username"] == provisioned["jsonData"]["username"]
    assert datasource["secureJsonData"] == {"password": "read-only-secret"}

    (folder,) = double.folders.values()
    assert folder["title"] == "streamscope"
    assert {uid: d["folderUid"] for uid, d in double.dashboards.items()} == {b.uid: folder["uid"] for b in BOARDS}

    # the rule, converted from the file shape: placement on the rule, renamed keys, link annotations,
    # interpolation where Grafana interpolates and none in annotations or the query model
    rule = double.rules["itl-p99-of-p99"]
    assert (rule["folderUID"], rule["ruleGroup"], rule["orgID"]) == (folder["uid"], "itl-slo", 1)
    assert double.groups[(folder["uid"], "itl-slo")] == 60
    assert rule["title"] == "ITL p99 of per-stream p99 over $SLO"
    assert rule["labels"] == {"severity": "page", "team": "inference"}
    assert rule["annotations"] == {
        "summary": "p99 of p99 is {{ $values.B.Value }} ms",
        "__dashboardUid__": "streamscope-quality",
        "__panelId__": "2",
    }
    assert rule["keep_firing_for"] == "2m" and "dashboardUid" not in rule
    assert "$__timeFilter(start_time)" in rule["data"][0]["model"]["rawSql"]
    assert double.contact_points["streamscope-webhook"]["settings"]["url"] == ENV["ALERT_WEBHOOK_URL"]
    assert double.policy["receiver"] == "streamscope-collector" and "orgId" not in double.policy
    assert "created" in first.stdout and "updated" not in first.stdout

    after_first = double.counts()
    double.requests.clear()
    second = push(url, *args)
    assert second.returncode == 0, second.stderr
    assert double.counts() == after_first
    assert {d["version"] for d in double.dashboards.values()} == {2}
    assert "created" not in second.stdout
    assert second.stdout.count("updated") == 1 + len(BOARDS) + 1 + 1  # data source, dashboards, contact point, rule
    creations = {(method, path) for method, path in double.requests if method == "POST"}
    assert creations == {("POST", "/api/dashboards/db")}  # the dashboards' save-with-overwrite; nothing created


def test_the_shipped_files_push(grafana):
    """Whatever dashboards/grafana/provisioning/ holds today, alerting files included, arrives whole."""
    double, url = grafana
    alerting = load_alerting(PROVISIONING_DIR / "alerting", ENV)
    result = push(url)
    assert result.returncode == 0, result.stderr
    assert len(double.dashboards) == len(BOARDS)
    assert len(double.groups) == len(alerting.groups)
    assert len(double.rules) == sum(len(group.rules) for group in alerting.groups)
    assert len(double.contact_points) == len(alerting.contact_points)
    assert (double.policy is not None) == bool(alerting.policies)
    webhooks = [point["settings"] for point in double.contact_points.values() if point["type"] == "webhook"]
    assert webhooks and all(w["authorization_credentials"] == ENV["STREAMSCOPE_ALERT_WEBHOOK_TOKEN"] for w in webhooks)


def test_grafana_under_a_sub_path_and_one_folder_for_everything(provisioning):
    double = GrafanaDouble()
    behind_proxy = FastAPI()
    behind_proxy.mount("/grafana", double.app)
    server = BackgroundServer(behind_proxy, name="grafana-double").start()
    try:
        url = f"http://127.0.0.1:{server.port}/grafana/"
        result = push(url, "--provisioning", str(provisioning), "--folder", "LLM streams")
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert list(double.folders.values()) == [{"uid": "llm-streams", "title": "LLM streams", "id": 1}]
    assert {d["folderUid"] for d in double.dashboards.values()} == {"llm-streams"}
    assert len(double.dashboards) == len(BOARDS)
    assert {rule["folderUID"] for rule in double.rules.values()} == {"llm-streams"}


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("glsa_wrong", "did not accept the credentials (401 Unauthorized)"),
        (VIEWER_TOKEN, "Grafana refused creating the data source 'ClickHouse' (403): You'll need additional"),
    ],
)
def test_refused_credentials_end_in_one_line(grafana, provisioning, token, message):
    double, url = grafana
    result = push(url, "--provisioning", str(provisioning), env={**ENV, "GRAFANA_TOKEN": token})
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sum(double.counts().values()) == 0


def test_grafanas_own_message_is_shown(grafana, provisioning):
    double, url = grafana
    double.datasources["other"] = {"uid": "other", "name": "ClickHouse", "type": CLICKHOUSE_TYPE, "id": 1}
    result = push(url, "--provisioning", str(provisioning))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        "Grafana refused creating the data source 'ClickHouse' (409): data source with the same name already exists"
        in result.stderr
    )


def test_unreachable_grafana(provisioning):
    port = free_port()
    result = push(f"http://127.0.0.1:{port}", "--provisioning", str(provisioning))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"cannot reach Grafana at http://127.0.0.1:{port}: [Errno 111] Connection refused" in result.stderr


def test_files_are_checked_before_grafana_is_touched(grafana, provisioning):
    double, url = grafana
    unset = {key: value for key, value in ENV.items() if key != "ALERT_TEAM"}
    result = push(url, "--provisioning", str(provisioning), env=unset)
    assert result.returncode == 1 and double.requests == []
    assert "rules.yaml: environment variable ALERT_TEAM is not set" in result.stderr


def test_rule_conversion_defaults_and_required_fields():
    group = rule_group({"name": "g", "folder": "f", "interval": "30s", "rules": [{"uid": "r", **_minimal_rule()}]})
    assert (group.interval_s, group.org_id) == (30, 1)
    converted = alert_rule(group.rules[0], "g", "folder-uid", 1)
    assert converted["noDataState"] == "NoData" and converted["execErrState"] == "Alerting"
    assert converted["data"][0]["queryType"] == ""
    with pytest.raises(ConfigError, match="lacks uid"):
        rule_group({"name": "g", "folder": "f", "interval": "1m", "rules": [_minimal_rule()]})
    with pytest.raises(ConfigError, match="interval"):
        rule_group({"name": "g", "folder": "f", "interval": "often", "rules": []})


def _minimal_rule() -> dict[str, Any]:
    return {"title": "t", "condition": "A", "data": [{"refId": "A", "datasourceUid": "__expr__", "model": {}}]}


def test_help_shows_an_example_and_the_environment_variables():
    result = run("dashboards", "push", "--help")
    assert result.returncode == 0 and "Example:" in result.stdout
    assert all(name in result.stdout for name in ("GRAFANA_URL", "GRAFANA_TOKEN", "GRAFANA_CLICKHOUSE_PASSWORD"))
