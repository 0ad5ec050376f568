"""Grafana's webhook contact point into a running collector, over a real socket: every alert of a notification
becomes a row of ``alerts``, read back through the collector's SQL route (the one `streamscope sql` uses while
the collector owns the embedded store); a malformed notification gets a 400 that names the field, stores nothing,
and the collector keeps serving. Only the webhook's own token writes there: a tenant's is refused, and the
README's query shows nothing a tenant wrote."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from streamscope.errors import ConfigError
from streamscope_collector.auth import WEBHOOK_TENANT
from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.alerts import ALERTS_PATH
from streamscope_collector.service import Collector
from tests import support

JSON = {"content-type": "application/json"}
WEBHOOK_TOKEN = "grafana-webhook-secret"  # the ``secured`` collector's (tests/collector/conftest.py)
README = Path(__file__).resolve().parents[2] / "README.md"


def alert(fingerprint: str, status: str = "firing", **changes: Any) -> dict[str, Any]:
    """One alert as Grafana's webhook notifier (payload version 1) sends it."""
    return {
        "status": status,
        "labels": {"alertname": "ITL goodput burning", "severity": "page", "grafana_folder": "streamscope"},
        "annotations": {"summary": "Client streams are freezing", "runbook": "Jitter attribution dashboard"},
        "startsAt": "2026-10-12T09:51:03.157076+02:00",
        "endsAt": "2026-10-12T08:20:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://grafana:3000/alerting/grafana/streamscope-itl-burn-fast/view",
        "fingerprint": fingerprint,
        "silenceURL": "http://grafana:3000/alerting/silence/new",
        "dashboardURL": "",
        "panelURL": "",
        "values": {"B": 22.5, "C": 1},
        "valueString": "[ var='B' labels={} value=22.5 ], [ var='C' labels={} value=1 ]",
        "orgId": 1,
        **changes,
    }


def notification(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "receiver": "streamscope-collector",
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "orgId": 1,
        "alerts": list(alerts),
        "groupLabels": {"alertname": "ITL goodput burning"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://grafana:3000/",
        "version": "1",
        "groupKey": '{}:{alertname="ITL goodput burning"}',
        "truncatedAlerts": 0,
        "title": "[FIRING:1] ITL goodput burning",
        "state": "alerting",
        "message": "",
    }


def post(collector, body: bytes | dict[str, Any], headers: dict[str, str] = JSON) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return support.post(collector, content, path=ALERTS_PATH, headers=headers, timeout=10)


def select(collector, query: str) -> list[dict[str, Any]]:
    response = support.sql_request(collector, query, timeout=10)
    assert response.status_code == 200, response.text
    document = response.json()
    names = [column["name"] for column in document["meta"]]
    return [dict(zip(names, row)) for row in document["data"]]


def test_each_alert_of_a_notification_is_recorded(collector):
    firing = post(collector, notification(alert("c6eadffa33fcdf37"), alert("bc97ff14869b13e3")))
    assert firing.status_code == 200 and firing.json() == {"recorded": 2}
    resolved = post(collector, notification(alert("c6eadffa33fcdf37", status="resolved")))
    assert resolved.status_code == 200 and resolved.json() == {"recorded": 1}

    rows = select(
        collector,
        "SELECT tenant, receiver, status, alertname, fingerprint, starts_at, ends_at, labels['severity'] AS severity, "
        "annotations['summary'] AS summary, query_values, generator_url, group_key "
        "FROM alerts ORDER BY fingerprint, status",
    )
    assert [(r["fingerprint"], r["status"], r["ends_at"]) for r in rows] == [
        ("bc97ff14869b13e3", "firing", None),  # Grafana's zero time: not ended
        ("c6eadffa33fcdf37", "firing", None),
        ("c6eadffa33fcdf37", "resolved", "2026-10-12 08:20:00.000"),
    ]
    first = rows[0]
    assert first["starts_at"] == "2026-10-12 07:51:03.157"  # +02:00 stored as UTC, to the millisecond
    assert (first["tenant"], first["receiver"], first["alertname"]) == (
        WEBHOOK_TENANT,
        "streamscope-collector",
        "ITL goodput burning",
    )
    assert (first["severity"], first["summary"]) == ("page", "Client streams are freezing")
    assert first["query_values"] == {"B": 22.5, "C": 1}
    assert first["generator_url"].endswith("/streamscope-itl-burn-fast/view")
    assert first["group_key"] == '{}:{alertname="ITL goodput burning"}'


def test_a_repeated_delivery_is_one_alert_state(collector):
    """Grafana retries a failed delivery and repeats a firing alert: one row per alert and state once merged."""
    for _ in range(2):
        assert post(collector, notification(alert("c6eadffa33fcdf37"))).status_code == 200
    assert select(collector, "SELECT count() AS n FROM alerts") == [{"n": 2}]
    assert select(collector, "SELECT count() AS n FROM alerts FINAL") == [{"n": 1}]


def _broken(**changes: Any) -> dict[str, Any]:
    body = notification(alert("c6eadffa33fcdf37"))
    body["alerts"][0] |= changes
    return body


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        pytest.param(b"{not json", JSON, 400, "body is not JSON", id="not json"),
        pytest.param({"alerts": "all of them"}, JSON, 400, '"alerts" list', id="alerts not a list"),
        pytest.param(_broken(status="pending"), JSON, 400, "alerts[0].status", id="status"),
        pytest.param(_broken(labels={"severity": 1}), JSON, 400, "alerts[0].labels", id="labels"),
        pytest.param(_broken(startsAt="yesterday"), JSON, 400, "alerts[0].startsAt", id="start time"),
        pytest.param(_broken(endsAt="2026-10-12T08:20:00"), JSON, 400, "alerts[0].endsAt", id="no time zone"),
        pytest.param(_broken(fingerprint=""), JSON, 400, "alerts[0].fingerprint", id="fingerprint"),
        pytest.param(_broken(values={"B": "high"}), JSON, 400, "alerts[0].values.B", id="values"),
        pytest.param(notification(alert("a"), "b"), JSON, 400, "alerts[1]: expected an object", id="alert"),
        pytest.param(notification(alert("a")), {"content-type": "text/plain"}, 415, "application/json", id="type"),
        pytest.param(b" " * (1024 * 1024 + 1), JSON, 413, "limit", id="too large"),
    ],
)
def test_a_bad_notification_is_refused_with_the_reason(collector, body, headers, status, message):
    response = post(collector, body, headers)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert select(collector, "SELECT count() AS n FROM alerts") == [{"n": 0}]  # nothing half-recorded
    assert post(collector, notification(alert("c6eadffa33fcdf37"))).json() == {"recorded": 1}


def forged() -> dict[str, Any]:
    """What a tenant would send to close the operator's page: the real rule, resolved."""
    labels = {"alertname": "ITL goodput burn, fast", "severity": "page", "grafana_folder": "streamscope"}
    return notification(alert("c6eadffa33fcdf37", status="resolved", labels=labels))


@pytest.mark.parametrize("token", ["secret-a", "public-a"])
def test_a_tenants_token_cannot_write_the_alert_history(secured, token):
    response = post(secured, forged(), {**JSON, "authorization": f"Bearer {token}"})
    assert response.status_code == 403
    assert "alert webhook" in response.json()["error"] and token not in response.text
    assert select(secured, "SELECT count() AS n FROM alerts") == [{"n": 0}]


def bearing(token: str) -> dict[str, str]:
    return {**JSON, "authorization": f"Bearer {token}"}


@pytest.mark.parametrize("token", [None, "wrong"])
def test_without_the_webhook_token_the_answer_is_401(secured, token):
    response = post(secured, forged(), bearing(token) if token else JSON)
    assert response.status_code == 401 and "--alert-webhook-token" in response.json()["error"]
    assert select(secured, "SELECT count() AS n FROM alerts") == [{"n": 0}]


def test_the_webhook_token_writes_the_operators_alert_history(secured):
    assert post(secured, forged(), bearing(WEBHOOK_TOKEN)).json() == {"recorded": 1}
    assert select(secured, "SELECT tenant, alertname FROM alerts") == [
        {"tenant": WEBHOOK_TENANT, "alertname": "ITL goodput burn, fast"}
    ]


def test_a_webhook_token_is_needed_even_with_authentication_off(storage_dsn):
    config = CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, alert_webhook_token=WEBHOOK_TOKEN)
    running = Collector(config).start()
    try:
        assert post(running, forged()).status_code == 401
        assert post(running, forged(), bearing(WEBHOOK_TOKEN)).status_code == 200
    finally:
        running.stop()


def test_the_webhook_token_cannot_be_a_tenants():
    for tokens in ({"tokens": {WEBHOOK_TOKEN: "team-a"}}, {"browser_tokens": {WEBHOOK_TOKEN: "team-a"}}):
        with pytest.raises(ConfigError, match="alert webhook token"):
            CollectorConfig(alert_webhook_token=WEBHOOK_TOKEN, **tokens).credentials()


def test_the_readmes_alerts_query_shows_only_what_the_webhook_wrote(secured, store_client):
    """A row a tenant stored before its token was refused at the webhook stays in the table; the documented query
    leaves it out."""
    (query,) = re.findall(r'streamscope sql "(SELECT [^"]* FROM alerts [^"]*)"', README.read_text())
    assert post(secured, notification(alert("bc97ff14869b13e3")), bearing(WEBHOOK_TOKEN)).status_code == 200
    row = select(secured, "SELECT * FROM alerts")[0]
    store_client.insert(
        "alerts",
        [[*({**row, "tenant": "team-a", "fingerprint": "c6eadffa33fcdf37", "status": "resolved"}).values()]],
        column_names=list(row),
    )
    assert select(secured, "SELECT count() AS n FROM alerts") == [{"n": 2}]
    assert [r["status"] for r in select(secured, query)] == ["firing"]
