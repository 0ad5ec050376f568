"""Ollama's newline-delimited JSON streams, end to end: the simulated engine serves ``/api/chat`` and
``/api/generate`` (a JSON document a line over chunked HTTP, recorded on its side by ``ServerStream``), the clients
read them with httpx (``stream_ndjson``) and with Ollama's own client library (``instrument_ollama``), and the
collector stores each side's chunks at the times the client's own clock and the server saw them."""

from __future__ import annotations

import asyncio
import time

import httpx
import ollama
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope
from streamscope import otlp_exporter
from streamscope_cli.engine.app import EngineNode, NodeConfig
from streamscope_collector.serving import BackgroundServer
from tests.support import wait_until

TOKENS = 12


@pytest.fixture
def engine(collector):
    """The simulated engine, its server spans exported to the test's collector."""
    provider = TracerProvider(resource=Resource.create({"service.name": "ndjson-engine"}))
    provider.add_span_processor(SimpleSpanProcessor(otlp_exporter(collector.http_url)))
    server = BackgroundServer(EngineNode(NodeConfig(node="ndjson-0"), tracer_provider=provider).app, name="engine")
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()
    provider.shutdown()


def client_provider(collector) -> tuple[TracerProvider, InMemorySpanExporter]:
    copies = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "ndjson-client"}))
    provider.add_span_processor(SimpleSpanProcessor(otlp_exporter(collector.http_url)))
    provider.add_span_processor(SimpleSpanProcessor(copies))
    return provider, copies


def stored(collector, span_id: str) -> tuple[tuple, list[tuple[str, int]]]:
    client = collector.query_client
    (row,) = client.query(
        "SELECT transport, provider, outcome, finish_reasons, output_tokens, content_chunks, trace_id FROM streams "
        "WHERE span_id = {s:String}",
        parameters={"s": span_id},
    ).result_rows
    timeline = client.query(
        "SELECT kind, offset_us FROM chunk_timeline WHERE span_id = {s:String} ORDER BY seq", parameters={"s": span_id}
    ).result_rows
    return row, timeline


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
def test_an_ndjson_stream_read_with_httpx_is_stored_at_the_clients_clock_beside_the_servers(collector, engine, path):
    provider, copies = client_provider(collector)
    body = {"model": "sim-llm", "options": {"num_predict": TOKENS}}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if path == "/api/chat" else {"prompt": "hi"}
    arrivals: list[int] = []
    with httpx.Client() as http:
        started = time.time_ns()
        with streamscope.stream_ndjson(http, "POST", f"{engine}{path}", json=body, tracer_provider=provider) as lines:
            for line in lines:
                arrivals.append(time.time_ns())
                assert isinstance(line.payload, dict)
    provider.shutdown()
    (span,) = copies.get_finished_spans()
    row, timeline = stored(collector, format(span.context.span_id, "016x"))
    assert row[:6] == ("chunked", "ollama", "completed", ["length"], TOKENS, TOKENS)
    assert [kind for kind, _ in timeline] == ["first"] + ["content"] * (TOKENS - 1) + ["aside"]  # the done line
    from_start = span.start_time
    for (_, offset_us), arrival in zip(timeline, arrivals, strict=True):  # within 2 ms of the client's own clock
        assert abs((from_start + offset_us * 1000) - arrival) < 2_000_000
    assert started <= from_start
    query = "SELECT transport, content_chunks, outcome FROM streams WHERE trace_id = {t:String} AND side = 'server'"
    server = wait_until(lambda: collector.query_client.query(query, parameters={"t": row[6]}).result_rows, "server")
    assert server == [("chunked", TOKENS, "completed")]  # the engine's side, in the client's trace


def test_a_stream_read_through_ollamas_own_client_is_recorded(collector, engine):
    provider, copies = client_provider(collector)
    client = streamscope.instrument_ollama(ollama.Client(host=engine), tracer_provider=provider)
    arrivals: list[int] = []
    messages = [{"role": "user", "content": "hi"}]
    for part in client.chat(model="sim-llm", messages=messages, stream=True, options={"num_predict": TOKENS}):
        arrivals.append(time.time_ns())
        assert part.model == "sim-llm"
    provider.force_flush()
    (span,) = copies.get_finished_spans()
    row, timeline = stored(collector, format(span.context.span_id, "016x"))
    assert row[:6] == ("chunked", "ollama", "completed", ["length"], TOKENS, TOKENS)
    for (_, offset_us), arrival in zip(timeline, arrivals, strict=True):
        assert abs((span.start_time + offset_us * 1000) - arrival) < 2_000_000

    whole = client.chat(model="sim-llm", messages=messages, options={"num_predict": 4})  # not streamed: not recorded
    assert (whole.done_reason, whole.eval_count, len(whole.message.content.split())) == ("length", 4, 4)
    provider.force_flush()
    assert len(copies.get_finished_spans()) == 1


def test_an_async_ollama_stream_closed_early_is_recorded_as_cancelled(collector, engine):
    """Ollama's AsyncClient returns an async generator: closing it through the wrapper ends the recording as a
    cancel, after the chunks read."""
    provider, copies = client_provider(collector)
    client = streamscope.instrument_ollama(ollama.AsyncClient(host=engine), tracer_provider=provider)

    async def read_three():
        stream = await client.chat(model="sim-llm", messages=[{"role": "user", "content": "hi"}], stream=True)
        async for index, _ in _enumerate(stream):
            if index == 2:
                break
        await stream.aclose()
        return stream

    kept = asyncio.run(read_three())  # still referenced: its end is the close, not its collection
    provider.force_flush()
    (span,) = copies.get_finished_spans()
    row, _ = stored(collector, format(span.context.span_id, "016x"))
    del kept
    assert (row[0], row[2], row[5]) == ("chunked", "cancelled", 3)


async def _enumerate(stream):
    index = 0
    async for item in stream:
        yield index, item
        index += 1
