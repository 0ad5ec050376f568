"""`streamscope gateway` in its own process in front of an app that streams as engines do and records its own server
side (tests/gateway/sse_app.py): what crosses the gateway each way, and the trace it carries on."""

from __future__ import annotations

import json
import secrets
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from streamscope_collector.service import Collector
from tests.gateway.conftest import gateway_process
from tests.gateway.sse_app import BIG_EVENT_BYTES, WORDS, RunningApp, chat_events, running_app
from tests.support import free_port, wait_for_rows, wait_until

STREAM = {"model": "m", "stream": True}


@pytest.fixture
def upstream() -> Iterator[RunningApp]:
    with running_app() as app:
        yield app


@pytest.fixture
def gateway(upstream: RunningApp, collector: Collector) -> Iterator[str]:
    with gateway_process(upstream.url, collector.http_url) as url:
        yield url


def gateway_rows(collector: Collector, expected: int, columns: str) -> list[tuple]:
    wait_for_rows(collector.query_client, "SELECT count() FROM streams WHERE side = 'gateway'", expected)
    return collector.query_client.query(f"SELECT {columns} FROM streams WHERE side = 'gateway'").result_rows


def test_the_gateway_span_sits_between_the_caller_and_the_server_in_one_trace(
    upstream: RunningApp, gateway: str, collector: Collector
) -> None:
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    traceparent = f"00-{trace_id}-{caller_span}-01"
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=STREAM, headers={"traceparent": traceparent}) as r:
        raw = b"".join(r.iter_raw())

    assert raw == "".join(chat_events(WORDS)).encode()
    ((trace, span, parent, chunk_count, outcome),) = gateway_rows(
        collector, 1, "trace_id, span_id, parent_span_id, chunk_count, outcome"
    )
    assert (trace, parent, chunk_count, outcome) == (trace_id, caller_span, len(chat_events(WORDS)), "completed")
    (server,) = wait_until(upstream.spans.get_finished_spans, "the server's span")
    assert format(server.context.trace_id, "032x") == trace_id
    assert server.parent is not None and format(server.parent.span_id, "016x") == span
    assert upstream.seen.headers[-1]["traceparent"] != traceparent


def test_plain_answers_pass_through_unrecorded_with_the_callers_trace_context(
    upstream: RunningApp, gateway: str, collector: Collector
) -> None:
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    answer = httpx.post(
        f"{gateway}/v1/chat/completions?x=1",
        json={"model": "m"},
        headers={
            "traceparent": traceparent,
            "connection": "keep-alive, x-hop",
            "x-hop": "1",
            "keep-alive": "timeout=9",
            "x-end": "2",
        },
    )
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "".join(WORDS)
    forwarded = upstream.seen.headers[-1]
    assert forwarded["traceparent"] == traceparent  # no span of the gateway's to continue it
    assert forwarded["x-end"] == "2"
    assert "x-hop" not in forwarded and "keep-alive" not in forwarded  # the client's connection's, not the upstream's
    assert forwarded["x-forwarded-for"] == "127.0.0.1" and forwarded["x-forwarded-proto"] == "http"

    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=STREAM) as streamed:
        streamed.read()
    ((chunk_count,),) = gateway_rows(collector, 1, "chunk_count")
    assert chunk_count == len(chat_events(WORDS))  # the stream's span alone: the plain answer had none


def test_a_stream_the_upstream_refuses_is_an_error_passed_through(gateway: str, collector: Collector) -> None:
    answer = httpx.post(f"{gateway}/v1/chat/completions", json={"model": "refuse", "stream": True})

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert gateway_rows(collector, 1, "outcome, error_type") == [("error", "http_400")]


def test_an_unreachable_upstream_is_a_502_and_a_failed_stream(collector: Collector) -> None:
    with gateway_process(f"http://127.0.0.1:{free_port()}", collector.http_url) as gateway:
        answer = httpx.post(f"{gateway}/v1/chat/completions", json=STREAM)

    assert answer.status_code == 502
    assert answer.json()["error"]["type"] == "gateway_error"
    assert gateway_rows(collector, 1, "outcome, error_type") == [("error", "ConnectError")]


def test_a_client_that_stops_reading_holds_the_upstream_back(upstream: RunningApp, gateway: str) -> None:
    """Backpressure: the gateway reads the upstream no faster than its client reads. The stream is 256 MiB, which
    a gateway that read ahead would take from the upstream at loopback speed; held back, the upstream gets no
    further than what the sockets' buffers between them hold."""
    count = 4096
    with httpx.stream("POST", f"{gateway}/big", json={"count": count}) as answer:
        body = answer.iter_raw()
        received = len(next(body))
        wait_until(lambda: upstream.seen.big_events_sent > 0, "the upstream to send")
        time.sleep(1.0)  # ample time for a gateway reading ahead to take the whole stream (no figure is timed)
        held_at = upstream.seen.big_events_sent
        received += sum(len(data) for data in body)
    assert held_at < count // 4
    assert received == count * BIG_EVENT_BYTES


def test_spans_still_queued_are_exported_when_the_gateway_stops(upstream: RunningApp, collector: Collector) -> None:
    with gateway_process(upstream.url, collector.http_url, export_delay_ms="600000") as gateway:
        with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=STREAM) as streamed:
            streamed.read()
        wait_until(upstream.spans.get_finished_spans, "the stream to end upstream")
    # stopped (SIGTERM) long before its next export was due

    assert gateway_rows(collector, 1, "outcome") == [("completed",)]


def test_a_gzipped_stream_passes_through_as_sent_and_is_recorded_from_its_events(
    gateway: str, collector: Collector
) -> None:
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json={**STREAM, "gzip": True}) as response:
        raw = b"".join(response.iter_raw())
        assert response.headers["content-encoding"] == "gzip"

    events = "".join(chat_events(WORDS)).encode()
    assert zlib.decompress(raw, 16 + zlib.MAX_WBITS) == events and raw != events  # forwarded still compressed
    ((chunks, content, wire, route),) = gateway_rows(collector, 1, "chunk_count, content_bytes, wire_bytes, route")
    assert (chunks, content, wire) == (len(chat_events(WORDS)), len("".join(WORDS).encode()), len(events))
    assert route == "/v1/chat/completions"


def test_a_json_body_past_a_mebibyte_still_names_the_model_and_carries_the_gateways_trace(
    upstream: RunningApp, gateway: str, collector: Collector
) -> None:
    traceparent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    body = {**STREAM, "model": "long-context", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    headers = {"traceparent": traceparent, "content-type": "application/vnd.example+json"}
    with httpx.stream(
        "POST", f"{gateway}/v1/chat/completions", content=json.dumps(body).encode(), headers=headers
    ) as response:
        response.read()

    ((model, chunks),) = gateway_rows(collector, 1, "request_model, chunk_count")
    assert (model, chunks) == ("long-context", len(chat_events(WORDS)))
    assert upstream.seen.headers[-1]["traceparent"] != traceparent  # the gateway's span is the upstream's parent


def test_a_json_body_over_the_gateways_limit_is_a_413_naming_the_option(
    upstream: RunningApp, collector: Collector
) -> None:
    body = {**STREAM, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    with gateway_process(upstream.url, collector.http_url, options=("--max-request-mib", "1")) as url:
        refused = httpx.post(f"{url}/v1/chat/completions", json=body)
        served = httpx.post(f"{url}/v1/chat/completions", json={**body, "messages": []})

    assert refused.status_code == 413
    assert "--max-request-mib (1 MiB)" in refused.json()["error"]["message"]
    assert "x" * 20 not in refused.text  # the reason, never the value
    assert served.status_code == 200 and len(upstream.seen.headers) == 1  # only the small one reached upstream
