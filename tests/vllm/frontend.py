"""vLLM's own front end (its ``OutputProcessor``, with vLLM's tracer), serving streamed chat completions over HTTP
from a scripted engine core. No model runs here (no GPU, no weights): the engine core is replaced by a loop that
queues each request, schedules it and emits one token per step, as vLLM's ``EngineCoreOutput``s with their
``QUEUED``/``SCHEDULED`` events. Everything from there on is vLLM's: the request's stats, and at its end the
``llm_request`` span that ``--otlp-traces-endpoint`` exports, continuing the caller's ``traceparent``.

    $VLLM_VENV/bin/python tests/vllm/frontend.py COLLECTOR_OTLP_HTTP_URL

Prints the port it serves on, then each span vLLM exported, a JSON line each, as the request ends (or, of a
request whose client left, that it was aborted, as vLLM's API server aborts it). It
runs in vLLM's own virtual environment (tests/vllm/requirements.txt), without streamscope installed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUEUE_S = 0.030
"""How long a request waits for the scripted scheduler."""
PREFILL_S = 0.060
STEP_S = 0.015
TOKENS = 24
"""Tokens of an answer whose request set no ``max_tokens``."""


def main(collector_url: str) -> None:
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    os.environ.setdefault("OTEL_SERVICE_NAME", "vllm-frontend")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from vllm.tracing import init_tracer
    from vllm.v1.engine.output_processor import OutputProcessor

    assert init_tracer("vllm.llm_engine", f"{collector_url}/v1/traces") is not None, "vLLM found no OpenTelemetry"
    provider = trace.get_tracer_provider()
    copies = InMemorySpanExporter()  # what vLLM exported, for the test to compare with what was stored
    provider.add_span_processor(SimpleSpanProcessor(copies))
    processor = OutputProcessor(None, log_stats=True, tracing_enabled=True)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not body.get("messages"):
                self._refuse()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in ("traceparent", "tracestate")}
            request_id = f"chatcmpl-{uuid.uuid4().hex}"
            tokens = int(body.get("max_tokens") or TOKENS)
            try:
                for text, finished in serve(processor, lock, request_id, headers, tokens):
                    self._send(chunk(request_id, body["model"], text, finished))
            except (BrokenPipeError, ConnectionResetError):  # the client left: vLLM's API server aborts the request
                with lock:
                    processor.abort_requests([request_id], internal=False)
                print(json.dumps({"aborted": request_id}), flush=True)
                return
            if (body.get("stream_options") or {}).get("include_usage"):
                self._send(usage_chunk(request_id, body["model"], tokens))
            self._write(b"data: [DONE]\n\n")
            self._write(b"")
            provider.force_flush()
            for span in copies.get_finished_spans():
                print(json.dumps(described(span)), flush=True)
            copies.clear()

        def _refuse(self) -> None:
            payload = json.dumps({"error": {"message": "messages is empty", "type": "BadRequestError"}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _send(self, event: dict) -> None:
            self._write(f"data: {json.dumps(event)}\n\n".encode())

        def _write(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


def serve(processor, lock: threading.Lock, request_id: str, trace_headers: dict[str, str], tokens: int):
    """The request through vLLM's front end, a token per step of the scripted engine core; yields each token's
    text and whether it was the last."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreRequest, FinishReason
    from vllm.v1.metrics.stats import IterationStats

    params = SamplingParams(max_tokens=tokens, detokenize=False, output_kind=RequestOutputKind.DELTA)
    prompt = list(range(1, 33))
    request = EngineCoreRequest(
        request_id, prompt, None, params, None, time.time(), None, None, None,
        trace_headers=trace_headers, external_req_id=request_id,
    )  # fmt: skip
    with lock:
        processor.add_request(request, None)
    queued = time.monotonic()
    time.sleep(QUEUE_S)
    events = [
        EngineCoreEvent(EngineCoreEventType.QUEUED, queued),
        EngineCoreEvent(EngineCoreEventType.SCHEDULED, time.monotonic()),
    ]
    time.sleep(PREFILL_S)
    for index in range(tokens):
        if index:
            time.sleep(STEP_S)
        last = index == tokens - 1
        output = EngineCoreOutput(
            request_id,
            [100 + index],
            events=events if index == 0 else None,
            finish_reason=FinishReason.LENGTH if last else None,
            trace_headers=trace_headers,
        )
        with lock:
            stats = IterationStats()
            processor.process_outputs([output], engine_core_timestamp=time.monotonic(), iteration_stats=stats)
        yield f"t{index} ", last


def described(span) -> dict:
    return {
        "name": span.name,
        "scope": span.instrumentation_scope.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else "",
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes),
    }


def chunk(request_id: str, model: str, text: str, finished: bool) -> dict:
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "length" if finished else None}],
    }


def usage_chunk(request_id: str, model: str, tokens: int) -> dict:
    usage = {"prompt_tokens": 32, "completion_tokens": tokens, "total_tokens": 32 + tokens}
    return {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [], "usage": usage}  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
