"""Tokens map to tenants: no token, no write; the stored tenant is the token's, never the payload's."""

from __future__ import annotations

import time

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from streamscope.errors import ConfigError
from streamscope_collector.auth import load_tokens
from tests.support import any_value, otlp_json, post, sql_request, stream_span, trace_request

INJECTION = "m'); DROP TABLE streams; --"


def body(trace: int, side: str = "client", model: str = "m") -> bytes:
    model_attribute = {"gen_ai.request.model": model}
    span = stream_span(trace, 1, side=side, offsets_ms=[0, 5], tokens=[1, 1], attributes=model_attribute)
    request = trace_request([span])
    # a payload that claims a tenant: it must not matter
    claims = [KeyValue(key="service.name", value=any_value("app")), KeyValue(key="tenant", value=any_value("team-b"))]
    request.resource_spans[0].resource.CopyFrom(Resource(attributes=claims))
    return request.SerializeToString()


@pytest.mark.parametrize("token", [None, "wrong", "public-a"])
def test_otlp_without_a_valid_secret_token_is_401_and_stores_nothing(secured, token):
    response = post(secured, body(1), token=token)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert sql_request(secured, "SELECT count() FROM streams").json()["data"] == [[0]]


def test_the_stored_tenant_is_the_tokens_never_the_payloads(secured, store_client):
    assert post(secured, body(1), token="secret-a").status_code == 200
    assert post(secured, body(2), token="secret-b").status_code == 200
    rows = store_client.query("SELECT tenant, trace_id FROM streams ORDER BY tenant").result_rows
    assert [tenant for tenant, _ in rows] == ["team-a", "team-b"]


def test_sql_injection_strings_in_attributes_are_stored_verbatim_and_harmless(secured, store_client):
    assert post(secured, body(1, model=INJECTION), token="secret-a").status_code == 200
    assert store_client.query("SELECT request_model FROM streams").result_rows == [(INJECTION,)]
    found = sql_request(secured, "SELECT count() FROM streams").json()["data"]
    assert found == [[1]]


def test_browser_route_takes_public_tokens_for_their_tenant_only(secured, store_client):
    span = stream_span(3, 1, side="browser", offsets_ms=[0, 5], tokens=[1, 1], start_ns=time.time_ns())
    browser_body = otlp_json(trace_request([span]))
    path, json_headers = "/v1/browser/traces", {"content-type": "application/json"}
    assert post(secured, browser_body, path=path, headers=json_headers).status_code == 401
    assert post(secured, browser_body, path=path, headers=json_headers, token="secret-b").status_code == 401
    assert post(secured, browser_body, path=path, headers=json_headers, token="public-a").status_code == 200
    assert store_client.query("SELECT tenant, side FROM streams").result_rows == [("team-a", "browser")]


def test_the_alert_webhook_needs_a_token(secured):
    response = httpx.post(f"{secured.http_url}/api/v1/alerts", json={"alerts": []}, timeout=10)
    assert response.status_code == 401


def test_grpc_without_a_token_is_unauthenticated_and_with_one_stores_for_its_tenant(secured, store_client):
    with grpc.insecure_channel(secured.grpc_endpoint) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        request = trace_request([stream_span(4, 1, side="server", offsets_ms=[0, 5], tokens=[1, 1])])
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stub.Export(request, timeout=10, metadata=[("authorization", "Bearer secret-b")])
    assert store_client.query("SELECT tenant FROM streams").result_rows == [("team-b",)]


def test_the_tokens_file_is_checked(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text("tokens:\n  s3cret: team-a\nbrowser_tokens:\n  pub: team-a\n")
    assert load_tokens(path) == ({"s3cret": "team-a"}, {"pub": "team-a"})
    for text, message in [
        ('tokens:\n  s3cret: "team a\'"\n', "tenant name"),
        ("browser_tokens:\n  pub: team-a\n", "no tokens"),
        ("users: []\n", "expected a mapping"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_tokens(path)
