"""The simulated engine over real sockets: the OpenAI streaming contract, /metrics, disconnects, ground truth."""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Iterator

import grpc
import grpc.aio
import httpx
import pytest
from google.protobuf.struct_pb2 import Struct
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from streamscope import semconv as sc
from streamscope.formats import estimate_tokens
from streamscope_cli.engine.app import EngineNode, NodeConfig, OutputConfig
from streamscope_cli.engine.grpc_service import GENERATE, struct
from streamscope_cli.engine.scheduler import SchedulerConfig, SpecDecodeConfig
from streamscope_cli.workload.ground_truth import MemorySink
from streamscope_collector.serving import BackgroundServer
from tests.support import wait_until


class RunningNode:
    def __init__(self, config: NodeConfig) -> None:
        self.sink = MemorySink()
        self.spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.node = EngineNode(config, sink=self.sink, tracer_provider=provider)
        self.server = BackgroundServer(self.node.app).start()
        self.url = f"http://127.0.0.1:{self.server.port}"

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"{self.url}/metrics").text
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if not sample.labels.get("le")
            and not sample.labels.get("position")
            and not sample.labels.get("finished_reason")
        }


@pytest.fixture
def running() -> Iterator[callable]:
    nodes: list[RunningNode] = []

    def start(**overrides) -> RunningNode:
        nodes.append(RunningNode(NodeConfig(**overrides)))
        return nodes[-1]

    yield start
    for node in nodes:
        node.server.stop()


def sse_events(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.text.split("\n\n") if line.startswith("data: ")]


def chat(max_tokens: int = 20, **extra) -> dict:
    return {
        "model": "sim-llm",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": True,
        **extra,
    }


def test_chat_stream_follows_the_openai_contract(running):
    node = running(output=OutputConfig(tokens_per_chunk=1))
    response = httpx.post(
        f"{node.url}/v1/chat/completions", json=chat(12, stream_options={"include_usage": True}), timeout=30
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    data = sse_events(response)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 12
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12


@pytest.mark.parametrize("tokens_per_chunk", [1, 3])
def test_a_json_answer_streams_as_a_document_in_the_same_chunks(running, tokens_per_chunk):
    node = running(output=OutputConfig(tokens_per_chunk=tokens_per_chunk))
    url = f"{node.url}/v1/chat/completions"

    def contents(body: dict) -> list[str]:
        chunks = [json.loads(d) for d in sse_events(httpx.post(url, json=body, timeout=30))[:-1]]
        return [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"] and c["choices"][0]["delta"]]

    pieces = contents(chat(13, response_format={"type": "json_object"}))
    plain = contents(chat(13))
    assert len(pieces) == len(plain)  # the same rhythm: the framing rides on the chunks the words came in
    answer = json.loads("".join(pieces))
    assert list(answer) == ["answer", "detail", "tokens"] and answer["tokens"] == 13
    assert len((answer["answer"] + " " + answer["detail"]).split()) == 13
    with pytest.raises(json.JSONDecodeError):
        json.loads("".join(plain))


def test_completions_streamed_and_whole(running):
    node = running()
    streamed = httpx.post(f"{node.url}/v1/completions", json={"prompt": "hi", "max_tokens": 7, "stream": True})
    texts = [json.loads(d)["choices"][0]["text"] for d in sse_events(streamed)[:-1]]
    assert sum(1 for t in texts if t) == 7
    whole = httpx.post(f"{node.url}/v1/completions", json={"prompt": "hi", "max_tokens": 7}).json()
    assert whole["object"] == "text_completion" and whole["usage"]["completion_tokens"] == 7
    assert len(whole["choices"][0]["text"].split()) == 7
    chat_whole = httpx.post(f"{node.url}/v1/chat/completions", json={**chat(5), "stream": False}).json()
    assert chat_whole["choices"][0]["message"]["role"] == "assistant"
    assert httpx.get(f"{node.url}/v1/models").json()["data"][0]["id"] == "sim-llm"
    assert httpx.get(f"{node.url}/health").json()["status"] == "ok"


def test_anthropic_messages_stream_as_the_anthropic_client_reads_them(running):
    """``/v1/messages`` as Anthropic's own client reads it (the real ``anthropic`` package): the message opened with
    its prompt's count, one text delta a chunk, the stop reason and the output count at its end; the system prompt
    and content blocks read as text; not streamed, one message."""
    import anthropic

    node = running(output=OutputConfig(tokens_per_chunk=2))
    client = anthropic.Anthropic(base_url=node.url, api_key="unused", max_retries=0)
    request = {
        "model": "sim-llm",
        "max_tokens": 12,
        "system": "Answer briefly.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "How do streams arrive?"}]}],
    }
    with client.messages.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("text") == 6  # 12 tokens, 2 a chunk
    assert (final.stop_reason, final.usage.output_tokens) == ("max_tokens", 12)
    assert final.usage.input_tokens == estimate_tokens("Answer briefly.\nHow do streams arrive?")
    assert len(final.content[0].text.split()) == 12
    whole = client.messages.create(**request)
    assert whole.usage.output_tokens == 12 and len(whole.content[0].text.split()) == 12


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": "hi"}, "messages must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens must be"),
        ({"messages": [{"role": "user", "content": "x"}], "sim": {"spec_collapse": "soon"}}, "spec_collapse"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**7}, "more KV blocks than the engine has"),
    ],
)
def test_bad_requests_get_a_400_with_a_message(running, body, message):
    node = running()
    response = httpx.post(f"{node.url}/v1/chat/completions", json=body)
    assert response.status_code == 400 and message in response.json()["error"]["message"]
    assert httpx.post(f"{node.url}/v1/chat/completions", json=chat(3)).status_code == 200


def test_tokens_per_chunk_and_burst_at_head_shape_the_stream(running):
    node = running(output=OutputConfig(tokens_per_chunk=4, burst_at_head=12))
    started = time.perf_counter()
    arrivals, sizes = [], []
    with httpx.stream("POST", f"{node.url}/v1/chat/completions", json=chat(40), timeout=30) as response:
        buffer = ""
        for text in response.iter_text():
            buffer += text
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                payload = event[len("data: ") :]
                if payload != "[DONE]":
                    content = json.loads(payload)["choices"][0]["delta"].get("content")
                    if content:
                        arrivals.append(time.perf_counter() - started)
                        sizes.append(len(content.split()))
    assert sizes == [4] * 10
    head, tail = arrivals[:3], arrivals[3:]
    assert head[-1] - head[0] < min(b - a for a, b in itertools.pairwise(tail))  # released together, then trickled


def test_metrics_parse_and_preemptions_rise_under_kv_pressure(running):
    node = running(scheduler=SchedulerConfig(num_blocks=60, block_size=16), output=OutputConfig(tokens_per_chunk=2))
    before = node.metrics()
    assert before["vllm:num_preemptions_total"] == 0

    async def load() -> None:
        async with httpx.AsyncClient(base_url=node.url, timeout=60) as client:
            await asyncio.gather(
                *(client.post("/v1/chat/completions", json=chat(200, sim={"prompt_tokens": 200})) for _ in range(6))
            )

    asyncio.run(load())
    after = node.metrics()
    assert after["vllm:num_preemptions_total"] > 0
    assert after["vllm:generation_tokens_total"] == 6 * 200
    assert after["vllm:prompt_tokens_total"] == 6 * 200
    assert after["vllm:iteration_tokens_total_count"] > 0
    assert after["vllm:inter_token_latency_seconds_count"] > 0
    assert after["vllm:num_requests_running"] == 0
    kv = [t for t in node.sink.snapshot() if t.cause == "kv_pressure"]
    assert len(kv) >= after["vllm:num_preemptions_total"] * 0.5 and all(t.chunk_indices for t in kv)


def test_a_request_left_waiting_for_a_slot_is_ground_truth_for_its_first_token(running):
    node = running(scheduler=SchedulerConfig(max_running=2), output=OutputConfig(tokens_per_chunk=1))

    async def load() -> None:
        async with httpx.AsyncClient(base_url=node.url, timeout=60) as client:
            running_two = [asyncio.create_task(client.post("/v1/chat/completions", json=chat(60))) for _ in range(2)]
            await asyncio.sleep(0.2)
            await client.post("/v1/chat/completions", json=chat(5))
            await asyncio.gather(*running_two)

    asyncio.run(load())
    (queued,) = [t for t in node.sink.snapshot() if t.cause == "queue"]
    # the third waited until a slot freed: one record, on the event that carried its first token (after the role's)
    assert queued.chunk_indices == (1,) and queued.detail == {"kind": "first_token"}
    assert queued.magnitude == pytest.approx((queued.end_ns - queued.start_ns) / 1e9) and queued.magnitude > 0.1
    # its server span says how long it queued, as vLLM's do; the two admitted at once say they did not wait
    waits = sorted(span.attributes[sc.GEN_AI_LATENCY_TIME_IN_QUEUE] for span in node.spans.get_finished_spans())
    assert len(waits) == 3 and waits[2] == pytest.approx(queued.magnitude, abs=1e-6) and waits[1] < waits[2]


def test_sglang_flavor_exposes_sglang_names(running):
    node = running(flavor="sglang")
    httpx.post(f"{node.url}/v1/chat/completions", json=chat(5))
    names = node.metrics()
    assert names["sglang:generation_tokens_total"] == 5
    assert "sglang:token_usage" in names and not any(n.startswith("vllm:") for n in names)


def test_spec_decode_collapse_is_ground_truth_for_the_chunks_it_slowed(running):
    node = running(
        scheduler=SchedulerConfig(spec_decode=SpecDecodeConfig(draft_tokens=3)), output=OutputConfig(tokens_per_chunk=1)
    )
    httpx.post(f"{node.url}/v1/chat/completions", json=chat(120, sim={"spec_collapse": [40, 80]}), timeout=30)
    truths = [t for t in node.sink.snapshot() if t.cause == "spec_decode"]
    # one record per event the collapse slowed, each as long as the steps it added over normal acceptance;
    # event 0 is the role chunk: token k travels in event k + 1
    indices = sorted(i for t in truths for i in t.chunk_indices)
    assert 38 <= indices[0] <= 42 and 78 <= indices[-1] <= 82
    assert len(truths) > 1 and all(t.end_ns > t.start_ns for t in truths)
    assert all(t.magnitude == pytest.approx((t.end_ns - t.start_ns) / 1e9) for t in truths)
    metrics = node.metrics()
    assert metrics["vllm:spec_decode_num_drafts_total"] > 0
    assert metrics["vllm:spec_decode_num_accepted_tokens_total"] < 3 * metrics["vllm:spec_decode_num_drafts_total"]


def test_prefill_interference_is_ground_truth_for_decoding_streams(running):
    node = running(
        scheduler=SchedulerConfig(chunked_prefill=False, max_step_tokens=16384),
        output=OutputConfig(tokens_per_chunk=1),
        interference_threshold_s=0.05,
    )

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=node.url, timeout=60) as client:
            victim = asyncio.create_task(client.post("/v1/chat/completions", json=chat(150)))
            await asyncio.sleep(0.3)
            await client.post("/v1/chat/completions", json=chat(2, sim={"prompt_tokens": 12000}))
            await victim

    asyncio.run(scenario())
    interference = [t for t in node.sink.snapshot() if t.cause == "prefill_interference"]
    assert len(interference) == 1 and interference[0].magnitude >= 0.2  # 12000 tokens x 0.02 ms


def test_a_disconnect_stops_generation(running):
    node = running(output=OutputConfig(tokens_per_chunk=1))
    with httpx.stream("POST", f"{node.url}/v1/chat/completions", json=chat(2000), timeout=30) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i > 10:
                break
    wait_until(lambda: not node.metrics()["vllm:num_requests_running"], "the request to stop", timeout_s=5)
    generated = node.metrics()["vllm:generation_tokens_total"]
    time.sleep(0.3)
    assert node.metrics()["vllm:generation_tokens_total"] == generated < 2000
    assert node.metrics()["vllm:num_requests_running"] == 0


def test_with_ignore_disconnect_the_engine_generates_to_the_end(running):
    node = running(output=OutputConfig(tokens_per_chunk=1), ignore_disconnect=True)
    with httpx.stream("POST", f"{node.url}/v1/chat/completions", json=chat(300), timeout=30) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i > 10:
                break
    wait_until(lambda: node.metrics()["vllm:generation_tokens_total"] >= 300, "all 300 tokens", timeout_s=20)
    assert node.metrics()["vllm:generation_tokens_total"] == 300


def apply_deltas(chunks: list[dict]) -> tuple[str, int, int]:
    """The text a reader ends with, applying each delta's withdrawal before its content; and the withdrawals."""
    text, withdrawals, withdrawn = b"", 0, 0
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
        if "retract" in delta:
            size = delta["retract"]["bytes"]
            assert 0 < size <= len(text)
            text, withdrawals, withdrawn = text[:-size], withdrawals + 1, withdrawn + size
        text += delta.get("content", "").encode()
    return text.decode(), withdrawals, withdrawn


def test_drafts_shown_before_verification_are_withdrawn_when_rejected(running):
    spec = SpecDecodeConfig(draft_tokens=3, acceptance=0.5)
    node = running(scheduler=SchedulerConfig(spec_decode=spec), output=OutputConfig(show_drafts=True))
    body = chat(40, stream_options={"include_usage": True})
    chunks = [
        json.loads(d) for d in sse_events(httpx.post(f"{node.url}/v1/chat/completions", json=body, timeout=30))[:-1]
    ]
    text, withdrawals, withdrawn = apply_deltas(chunks)
    assert len(text.split()) == 40 == chunks[-1]["usage"]["completion_tokens"]  # what stays is the answer
    assert withdrawals > 0 and withdrawn > 0  # at acceptance 0.5, some drafts are rejected
    shown = sum(len(c["choices"][0]["delta"].get("content", "").encode()) for c in chunks if c["choices"])
    assert shown - withdrawn == len(text.encode())

    plain = running(scheduler=SchedulerConfig(spec_decode=spec))
    body = chat(40)
    plain_chunks = [
        json.loads(d) for d in sse_events(httpx.post(f"{plain.url}/v1/chat/completions", json=body, timeout=30))[:-1]
    ]
    assert apply_deltas(plain_chunks)[1:] == (0, 0)  # drafts are not shown unless asked


def test_websocket_and_grpc_streams_get_the_ground_truth_of_what_delayed_them():
    """The same collapse of speculative decoding on a Realtime response and on a gRPC call: its records name each
    stream's trace (the response's metadata, the call's) and the events it slowed, in each transport's numbering
    (the Realtime response's event 0 is response.created; a gRPC call's first message carries the first token)."""
    sink = MemorySink()
    config = NodeConfig(
        scheduler=SchedulerConfig(spec_decode=SpecDecodeConfig(draft_tokens=3)), output=OutputConfig(tokens_per_chunk=1)
    )
    node = EngineNode(config, sink=sink, grpc_address=("127.0.0.1", 0))
    server = BackgroundServer(node.app, lifespan=True).start()
    traces = {"websocket": secrets.token_hex(16), "grpc": secrets.token_hex(16)}
    traceparent = {name: f"00-{trace}-{secrets.token_hex(8)}-01" for name, trace in traces.items()}
    collapse = {"spec_collapse": [40, 80]}

    async def both() -> None:
        async with connect(f"ws://127.0.0.1:{server.port}/v1/realtime") as websocket:
            await websocket.recv()  # session.created
            response = {
                "max_output_tokens": 120,
                "metadata": {"traceparent": traceparent["websocket"]},
                "sim": collapse,
            }
            await websocket.send(json.dumps({"type": "response.create", "response": response}))
            while json.loads(await websocket.recv())["type"] != "response.done":
                pass
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.grpc_port}") as channel:
            generate = channel.unary_stream(
                GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
            )
            request = struct(prompt="hi", max_tokens=120, sim=collapse)
            async for _ in generate(request, metadata=(("traceparent", traceparent["grpc"]),)):
                pass

    try:
        asyncio.run(both())
    finally:
        server.stop()
    for name, first_token_event in (("websocket", 1), ("grpc", 0)):
        truths = [t for t in sink.snapshot() if t.trace_id == traces[name] and t.cause == "spec_decode"]
        indices = sorted(i for t in truths for i in t.chunk_indices)
        assert truths, name
        assert 37 + first_token_event <= indices[0] <= 41 + first_token_event, (name, indices)
        assert 77 + first_token_event <= indices[-1] <= 81 + first_token_event, (name, indices)
