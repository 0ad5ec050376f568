"""The collector's public browser side over real sockets: the snippet at a stable URL with CORS and revalidation,
and /v1/browser/traces, which takes OTLP JSON (also as the text/plain a beacon sends), only browser stream
spans, a small body, and the public token when one is configured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamscope_collector.browser import ROUTE, SNIPPET_PATH
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from tests import support
from tests.support import otlp_json, stream_span, trace_request

APP = "http://chat.example"
TOKEN = "public-page-token"
SNIPPET = Path(__file__).parents[2] / "collector" / "streamscope_collector" / "snippet" / "streamscope.js"


@pytest.fixture
def collector(storage_dsn: str) -> Iterator[Collector]:
    running = Collector(
        CollectorConfig(
            storage_dsn=storage_dsn,
            http_port=0,
            grpc_port=None,
            attribution_interval_s=None,
            cors_origins=(APP,),
            browser_token=TOKEN,
            browser_max_request_bytes=64 * 1024,
            store_wait_s=5.0,  # the test reads what it sent as soon as it is answered
        )
    ).start()
    yield running
    running.stop()


def _span(span: int, side: str = "browser"):
    return stream_span(7, span, side=side, offsets_ms=[100, 120, 140], tokens=[1, 1, 1], paint_delay_us=[9, 9, 9])


def _post(collector: Collector, body: bytes, *, query: str = f"?token={TOKEN}", **headers: str) -> httpx.Response:
    headers = {"content-type": "text/plain;charset=UTF-8", "origin": APP, **headers}
    return support.post(collector, body, path=f"{ROUTE}{query}", headers=headers, timeout=5.0)


def _stored(collector: Collector) -> list[tuple[str, int]]:
    return collector.query_client.query("SELECT side, span_id FROM streams ORDER BY span_id").result_rows


def test_the_snippet_is_served_with_cors_and_revalidation(collector) -> None:
    answer = httpx.get(f"{collector.http_url}{SNIPPET_PATH}", headers={"Origin": APP})
    assert answer.status_code == 200
    assert answer.content == SNIPPET.read_bytes()
    assert answer.headers["content-type"].startswith("text/javascript")
    assert answer.headers["access-control-allow-origin"] == APP
    again = httpx.get(f"{collector.http_url}{SNIPPET_PATH}", headers={"If-None-Match": answer.headers["etag"]})
    assert again.status_code == 304


def test_preflight_admits_the_configured_origin_only(collector) -> None:
    def preflight(origin: str) -> httpx.Response:
        headers = {
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,content-encoding",
        }
        return httpx.options(f"{collector.http_url}{ROUTE}", headers=headers)

    allowed = preflight(APP)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == APP
    assert "content-encoding" in allowed.headers["access-control-allow-headers"].lower()
    refused = preflight("http://elsewhere.example")
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers


def test_a_beacon_body_is_stored_and_other_sides_are_refused(collector) -> None:
    body = otlp_json(trace_request([_span(1), _span(2, side="server"), _span(3, side="client")]))
    answer = _post(collector, body)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == APP
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "only browser stream spans" in partial["errorMessage"]
    assert _stored(collector) == [("browser", (1).to_bytes(8, "big").hex())]


@pytest.mark.parametrize(
    ("query", "headers", "status"),
    [
        ("", {}, 401),
        ("?token=guess", {}, 401),
        ("", {"authorization": "Bearer guess"}, 401),
        ("", {"authorization": f"Bearer {TOKEN}"}, 200),
        (f"?token={TOKEN}", {}, 200),
    ],
)
def test_the_public_token_is_required(collector, query, headers, status) -> None:
    answer = _post(collector, otlp_json(trace_request([_span(1)])), query=query, **headers)
    assert answer.status_code == status, answer.text
    if status == 401:
        assert "browser ingest token" in answer.json()["message"]
        assert _stored(collector) == []
    else:
        assert len(_stored(collector)) == 1


def test_protobuf_and_oversized_bodies_are_refused_with_reasons(collector) -> None:
    request = trace_request([_span(1)])
    protobuf = _post(collector, request.SerializeToString(), **{"content-type": "application/x-protobuf"})
    assert protobuf.status_code == 415
    assert "application/json or text/plain" in protobuf.json()["message"]
    big = _post(collector, b" " * (64 * 1024 + 1))
    assert big.status_code == 413
    assert _stored(collector) == []
    # the OTLP route is unchanged: protobuf from any SDK, no browser token asked
    otlp = support.post(collector, request.SerializeToString(), timeout=5.0)
    assert otlp.status_code == 200
