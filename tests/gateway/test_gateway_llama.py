"""`streamscope gateway` in its own process in front of llama.cpp's real llama-server, streamed through by the real
``openai`` client (instrumented by the SDK, in a process of its own) and by httpx, exporting to a collector.

Every figure of the gateway's span is checked against what the client received and what the engine said it did
(its final chunk's ``timings``, its /slots and /metrics); none against a clock.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from typing import Any

import httpx
import pytest

from streamscope.sse import SSEDecoder
from streamscope_cli.llama.server import LlamaServer
from streamscope_collector.service import Collector
from tests.gateway.conftest import ENGINE_CONTEXT, gateway_process
from tests.llama.conftest import BUILD_TIMEOUT_S
from tests.support import wait_for_rows, wait_until

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

STREAM_COLUMNS = (
    "side, trace_id, span_id, parent_span_id, chunk_count, content_bytes, wire_bytes, output_tokens, input_tokens, "
    "outcome, finish_reasons, cancel_offset_us, ttfb_us, request_model, response_model, node_name"
)
LONG = ENGINE_CONTEXT - 100
"""Tokens a stream would run to if nothing stopped it: thousands of the tiny model's (the prompt takes about 20)."""


def streams(collector: Collector, expected: int) -> dict[str, dict[str, Any]]:
    """The stored stream rows, by side, once there are ``expected``."""
    client = collector.query_client
    wait_for_rows(client, "SELECT count() FROM streams", expected)
    result = client.query(f"SELECT {STREAM_COLUMNS} FROM streams")
    rows = [dict(zip(result.column_names, row)) for row in result.result_rows]
    assert len(rows) == expected, rows
    return {row["side"]: row for row in rows}


def run_client(base_url: str, collector: Collector, max_tokens: int, leave_after: int | None = None) -> list[dict]:
    """The instrumented openai application (tests/gateway/openai_client.py): the chunks it received."""
    arguments = [base_url, collector.http_url, str(max_tokens)] + ([str(leave_after)] if leave_after else [])
    run = subprocess.run(
        [sys.executable, "-m", "tests.gateway.openai_client", *arguments], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def slots_idle(engine: LlamaServer) -> bool:
    return not any(slot["is_processing"] for slot in httpx.get(f"{engine.url}/slots").raise_for_status().json())


def predicted_tokens(engine: LlamaServer) -> float:
    for line in httpx.get(f"{engine.url}/metrics").raise_for_status().text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return float(line.split()[1])
    raise AssertionError("llama-server has no llamacpp:tokens_predicted_total")


def test_the_gateway_span_joins_the_clients_trace_and_counts_what_it_received(
    engine: LlamaServer, collector: Collector
) -> None:
    with gateway_process(engine.url, collector.http_url, node="llama-0") as gateway:
        received = run_client(gateway, collector, max_tokens=32)

    by_side = streams(collector, 2)
    client, gateway_row = by_side["client"], by_side["gateway"]
    assert gateway_row["trace_id"] == client["trace_id"]
    assert (gateway_row["node_name"], client["node_name"]) == ("llama-0", "")  # the engine's node, for its events
    assert gateway_row["parent_span_id"] == client["span_id"]
    timings = received[-1]["timings"]  # the usage chunk, last, carries the engine's timings too
    assert timings["predicted_n"] == 32
    assert client["chunk_count"] == len(received)
    assert gateway_row["chunk_count"] == len(received) + 1  # and [DONE], which the client does not hand over
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in received if chunk["choices"])
    assert gateway_row["content_bytes"] == client["content_bytes"] == len(text.encode())
    assert gateway_row["output_tokens"] == client["output_tokens"] == timings["predicted_n"]
    assert gateway_row["input_tokens"] == client["input_tokens"] == timings["prompt_n"]
    assert gateway_row["outcome"] == client["outcome"] == "completed"
    assert gateway_row["finish_reasons"] == ["length"]
    assert gateway_row["request_model"] == "tiny"
    assert gateway_row["response_model"] == received[0]["model"]
    assert gateway_row["ttfb_us"] is not None


def test_the_gateway_forwards_the_engines_bytes_and_counts_each_one(engine: LlamaServer, collector: Collector) -> None:
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Tell me about token streams."}],
        "max_tokens": 24,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with (
        gateway_process(engine.url, collector.http_url) as gateway,
        httpx.stream(
            "POST",
            f"{gateway}/v1/chat/completions",
            json=body,
            headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
        ) as answer,
    ):
        raw = b"".join(answer.iter_raw())
        headers = answer.headers

    assert headers["content-type"] == "text/event-stream"
    assert headers["server"] == "llama.cpp"  # the engine's own, passed through
    assert "keep-alive" not in headers  # the engine's connection's, not the client's
    events = list(SSEDecoder().feed(raw)) + list(SSEDecoder().flush())
    assert events[-1].data == "[DONE]"
    row = streams(collector, 1)["gateway"]
    assert (row["trace_id"], row["parent_span_id"]) == (trace_id, caller_span)
    assert row["chunk_count"] == len(events)
    assert row["wire_bytes"] == len(raw) == sum(event.wire_bytes for event in events)
    timings = json.loads(events[-2].data)["timings"]
    assert row["output_tokens"] == timings["predicted_n"] == 24


def test_a_client_that_closes_mid_stream_frees_the_engines_slot(engine: LlamaServer, collector: Collector) -> None:
    with gateway_process(engine.url, collector.http_url) as gateway:
        received = run_client(gateway, collector, max_tokens=LONG, leave_after=3)
        wait_until(lambda: slots_idle(engine), "llama-server's slot to be idle again", timeout_s=30)

    assert len(received) == 3
    assert predicted_tokens(engine) < LONG  # the engine stopped early: it was told the client had gone
    by_side = streams(collector, 2)
    client, gateway_row = by_side["client"], by_side["gateway"]
    assert client["outcome"] == gateway_row["outcome"] == "cancelled"
    assert gateway_row["trace_id"] == client["trace_id"]
    assert gateway_row["cancel_offset_us"] is not None
    assert 3 <= gateway_row["chunk_count"] < LONG
    assert gateway_row["output_tokens"] is None  # the usage chunk never came


def test_a_legacy_completions_stream_is_read_for_its_text(engine: LlamaServer, collector: Collector) -> None:
    body = {"model": "tiny", "prompt": "Token streams", "max_tokens": 12, "stream": True, "ignore_eos": True}
    with (
        gateway_process(engine.url, collector.http_url) as gateway,
        httpx.stream("POST", f"{gateway}/v1/completions", json=body) as answer,
    ):
        raw = b"".join(answer.iter_raw())

    events = [event for event in list(SSEDecoder().feed(raw)) + list(SSEDecoder().flush()) if event.data != "[DONE]"]
    texts = [choice["text"] for event in events for choice in json.loads(event.data).get("choices", ())]
    assert json.loads(events[0].data)["object"] == "text_completion"
    row = streams(collector, 1)["gateway"]
    assert row["content_bytes"] == len("".join(texts).encode()) > 0
    assert row["output_tokens"] == 12
    route = collector.query_client.query("SELECT route FROM streams").result_rows
    assert route == [("/v1/completions",)]
