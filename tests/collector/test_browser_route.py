"""The collector's public browser side over real sockets: the snippet at a stable URL with CORS and revalidation,
and /v1/browser/traces, which takes OTLP JSON (also as the text/plain a beacon sends), only browser stream
spans starting near the collector's clock, a small body, a bounded number of requests a minute per origin, and the
public token when one is configured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamscope_collector.browser import ROUTE, SNIPPET_PATH
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from tests import support
from tests.support import metric, otlp_json, stream_span, trace_request

APP = "http://chat.example"
TOKEN = "public-page-token"
SNIPPET = Path(__file__).parents[2] / "collector" / "streamscope_collector" / "snippet" / "streamscope.js"
DAY_NS = 86_400 * 10**9
REFUSED = "streamscope_collector_browser_refused_total"


def _start(storage_dsn: str, **settings) -> Collector:
    config = CollectorConfig(
        storage_dsn=storage_dsn,
        http_port=0,
        grpc_port=None,
        attribution_interval_s=None,
        cors_origins=(APP,),
        browser_token=TOKEN,
        browser_max_request_bytes=64 * 1024,
        store_wait_s=5.0,  # the test reads what it sent as soon as it is answered
        **settings,
    )
    return Collector(config).start()


@pytest.fixture
def collector(storage_dsn: str) -> Iterator[Collector]:
    running = _start(storage_dsn)
    yield running
    running.stop()


@pytest.fixture
def three_a_minute(storage_dsn: str) -> Iterator[Collector]:
    running = _start(storage_dsn, browser_requests_per_minute=3)
    yield running
    running.stop()


def _span(span: int, side: str = "browser", start_ns: int | None = None):
    """A stream span that started a moment ago, as a page sends it, or at ``start_ns``."""
    start = time.time_ns() - 1_000_000_000 if start_ns is None else start_ns
    return stream_span(
        7, span, side=side, offsets_ms=[100, 120, 140], tokens=[1, 1, 1], paint_delay_us=[9, 9, 9], start_ns=start
    )


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
    assert metric(collector.http_url, REFUSED, reason="not_browser") == 2


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


def test_spans_starting_far_from_the_collectors_clock_are_rejected_by_name_and_counted(collector) -> None:
    """One span a request, each on a day of its own, as a stranger could send them to make every insert touch
    another partition of the tables: only the spans near the collector's clock are stored."""
    now = time.time_ns()
    far = {span: now - span * DAY_NS for span in range(1, 11)} | {11: now + 2 * DAY_NS}
    for span, start_ns in far.items():
        answer = _post(collector, otlp_json(trace_request([_span(span, start_ns=start_ns)])))
        assert answer.status_code == 200, answer.text
        partial = answer.json().get("partialSuccess", {})
        assert partial.get("rejectedSpans") == "1", answer.text
        assert f"span {span.to_bytes(8, 'big').hex()}" in partial["errorMessage"]
        assert "the collector's clock" in partial["errorMessage"]
    near = _post(collector, otlp_json(trace_request([_span(12, start_ns=now - 30 * 60 * 10**9)])))
    assert near.status_code == 200 and "partialSuccess" not in near.json(), near.text
    assert _stored(collector) == [("browser", (12).to_bytes(8, "big").hex())]
    assert metric(collector.http_url, REFUSED, reason="clock_window") == len(far)


def test_an_origin_past_its_requests_a_minute_is_answered_429_and_counted(three_a_minute) -> None:
    collector = three_a_minute
    answers = [_post(collector, otlp_json(trace_request([_span(span)]))).status_code for span in (1, 2, 3)]
    assert answers == [200, 200, 200]
    refused = _post(collector, otlp_json(trace_request([_span(4)])))
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    assert "3 requests a minute" in refused.json()["message"] and APP not in refused.text
    assert refused.headers["access-control-allow-origin"] == APP  # the page may read why
    # another origin has a budget of its own
    elsewhere = _post(collector, otlp_json(trace_request([_span(5)])), origin="http://elsewhere.example")
    assert elsewhere.status_code == 200, elsewhere.text
    assert [span for _, span in _stored(collector)] == [(n).to_bytes(8, "big").hex() for n in (1, 2, 3, 5)]
    assert metric(collector.http_url, REFUSED, reason="origin_rate") == 1
