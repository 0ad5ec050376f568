"""Bad bodies get the OTLP status and a clear message, and the collector keeps serving afterwards."""

from __future__ import annotations

import gzip
import json

import grpc
import httpx
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from streamscope import semconv as sc
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.decode.chunk_events import TraceRequestView
from tests import support
from tests.support import PROTOBUF, event_span, good_body, plain_stream_span, request_of


def post(collector, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """``body`` to /v1/traces with exactly ``headers``, allowed 10 s."""
    return support.post(collector, body, headers=headers, timeout=10)


def assert_still_serving(collector) -> None:
    response = post(collector, good_body(), PROTOBUF)
    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content) == ExportTraceServiceResponse()


def status_message(response: httpx.Response) -> str:
    if response.headers["content-type"].startswith("application/x-protobuf"):
        return Status.FromString(response.content).message
    return response.json()["message"]


BAD_BODIES = [
    ("garbage", b"\xff\xfe not protobuf \x00\x01", PROTOBUF, 400, "not a valid ExportTraceServiceRequest"),
    ("truncated", good_body()[:-7], PROTOBUF, 400, "not a valid ExportTraceServiceRequest"),
    ("bad json", b'{"resourceSpans": [', {"content-type": "application/json"}, 400, "not valid JSON"),
    ("json array", b"[1, 2]", {"content-type": "application/json"}, 400, "must be a JSON object"),
    (
        "json bad hex id",
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz", "spanId": "00"}]}]}]}).encode(),
        {"content-type": "application/json"},
        400,
        "not a hex string",
    ),
    ("wrong content type", b"hello", {"content-type": "text/plain"}, 415, "unsupported content type"),
    ("no content type", b"hello", {}, 415, "unsupported content type"),
    (
        "gzip that does not inflate",
        b"\x1f\x8b\x08\x00garbage",
        {**PROTOBUF, "content-encoding": "gzip"},
        400,
        "gzip body",
    ),
    ("truncated gzip", gzip.compress(good_body())[:-12], {**PROTOBUF, "content-encoding": "gzip"}, 400, "gzip"),
    (
        "gzip with trailing bytes",
        gzip.compress(good_body()) + b"tail",
        {**PROTOBUF, "content-encoding": "gzip"},
        400,
        "trailing data",
    ),
    ("unknown encoding", good_body(), {**PROTOBUF, "content-encoding": "br"}, 415, "unsupported content encoding"),
    ("oversize body", b"\x00" * (1024 * 1024 + 1), PROTOBUF, 413, "exceeds the limit"),
    (
        "gzip bomb",
        gzip.compress(b"\x00" * (8 * 1024 * 1024)),
        {**PROTOBUF, "content-encoding": "gzip"},
        413,
        "after decompression",
    ),
]
"""Each bad body: (name, body, headers, status, what the message says)."""


@pytest.mark.parametrize(
    ("name", "body", "headers", "code", "message"), BAD_BODIES, ids=[case[0] for case in BAD_BODIES]
)
def test_bad_http_bodies(collector, name, body, headers, code, message):
    response = post(collector, body, headers)
    assert response.status_code == code, response.text
    assert message in status_message(response)
    assert_still_serving(collector)


def test_gzip_body_is_accepted(collector):
    response = post(collector, gzip.compress(good_body()), {**PROTOBUF, "content-encoding": "gzip"})
    assert response.status_code == 200
    assert collector.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 1


def test_malformed_timelines_are_rejected_through_partial_success(collector):
    body = request_of(
        plain_stream_span(1, [10, 20, 30]),
        plain_stream_span(2, [10, 5, 30]),  # unordered
        plain_stream_span(3, [-4, 20]),  # negative
        plain_stream_span(4, [10, 20, 30], tokens=[1, 1]),  # unequal lengths
    ).SerializeToString()
    response = post(collector, body, PROTOBUF)
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 3
    for reason in ("not in order", "negative chunk offset", "unequal length (offset_us 3, tokens 2"):
        assert reason in partial.error_message
    assert collector.query_client.query("SELECT span_id FROM streams").result_rows == [("01" * 8,)]


def test_chunk_events_are_read_in_time_order_and_malformed_ones_rejected(collector):
    def tokens(n: int) -> dict[str, AnyValue]:
        return {
            sc.STREAMSCOPE_CHUNK_TOKENS: AnyValue(int_value=n),
            sc.STREAMSCOPE_CHUNK_CONTENT_BYTES: AnyValue(int_value=4),
        }

    body = request_of(
        event_span(
            1,
            [
                (30, sc.CHUNK_EVENT, tokens(3)),
                (10, sc.CHUNK_EVENT, tokens(1)),
                (15, "log", tokens(9)),
                (20, sc.CHUNK_EVENT, tokens(2)),
            ],
        ),  # out of order, with an event that is not a chunk
        event_span(
            2,
            [
                (10, sc.CHUNK_EVENT, tokens(1)),
                (20, sc.CHUNK_EVENT, {sc.STREAMSCOPE_CHUNK_TOKENS: AnyValue(string_value="2")}),
            ],
        ),
        event_span(3, [(-5, sc.CHUNK_EVENT, tokens(1)), (20, sc.CHUNK_EVENT, tokens(1))]),
    ).SerializeToString()
    response = post(collector, body, PROTOBUF)
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 2
    assert f"chunk event 1: {sc.STREAMSCOPE_CHUNK_TOKENS} must be an integer" in partial.error_message
    assert "a chunk event precedes the span start" in partial.error_message
    rows = collector.query_client.query("SELECT span_id, seq, gap_us, tokens FROM chunks ORDER BY seq").result_rows
    assert rows == [("01" * 8, 0, 10, 1), ("01" * 8, 1, 10, 2), ("01" * 8, 2, 10, 3)]


def test_stream_spans_whose_timeline_cannot_be_read_are_stored_as_unreadable_and_named(collector):
    """A span that says it is a stream but whose chunks are not as the convention says (events under another name,
    the packed arrays' plural names on the events, no encoding) is not stored as an empty or all-zero timeline in
    silence: partial_success names the problem, the stream is marked, and the collector counts it."""
    sizes = {
        sc.STREAMSCOPE_CHUNK_TOKENS: AnyValue(int_value=1),
        sc.STREAMSCOPE_CHUNK_CONTENT_BYTES: AnyValue(int_value=4),
    }
    plural = {
        sc.STREAMSCOPE_CHUNKS_TOKENS: AnyValue(int_value=1),
        sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES: AnyValue(int_value=4),
    }
    no_encoding = event_span(3, [(10, sc.CHUNK_EVENT, sizes), (20, sc.CHUNK_EVENT, sizes)])
    del no_encoding.attributes[1]  # streamscope.encoding
    body = request_of(
        event_span(1, [(10, "streamscope.chunk_arrived", sizes), (20, "streamscope.chunk_arrived", sizes)]),
        event_span(2, [(10, sc.CHUNK_EVENT, plural), (20, sc.CHUNK_EVENT, plural)]),
        no_encoding,
        event_span(4, [(10, sc.CHUNK_EVENT, sizes), (30, sc.CHUNK_EVENT, sizes)]),
    ).SerializeToString()
    response = post(collector, body, PROTOBUF)
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 0
    message = partial.error_message
    assert "span 0101010101010101 of trace" in message
    assert f"none of its 2 events is a {sc.CHUNK_EVENT} event (they are named streamscope.chunk_arrived)" in message
    assert f"carry none of {sc.STREAMSCOPE_CHUNK_TOKENS}, {sc.STREAMSCOPE_CHUNK_CONTENT_BYTES}" in message
    assert f"(they carry {sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES}, {sc.STREAMSCOPE_CHUNKS_TOKENS})" in message
    assert f"span 0303030303030303 of trace {'03' * 16}: {sc.STREAMSCOPE_ENCODING} is missing" in message
    assert "0404040404040404" not in message
    rows = collector.query_client.query(
        "SELECT span_id, coverage, chunk_count, tokens, ttft_us FROM streams ORDER BY span_id"
    ).result_rows
    assert rows == [
        ("01" * 8, "unreadable", 0, 0, None),
        ("02" * 8, "unreadable", 0, 0, None),
        ("03" * 8, "full", 2, 2, 10),
        ("04" * 8, "full", 2, 2, 10),
    ]
    assert (
        support.metric(collector.http_url, "streamscope_collector_incomplete_streams_total", coverage="unreadable") == 2
    )


def test_an_event_that_is_not_protobuf_rejects_its_span_only_over_http_and_grpc(collector):
    """Events are read lazily (decode.chunk_events), so a broken one costs its span, not the request."""
    view = TraceRequestView.FromString(
        request_of(event_span(1, [(10, sc.CHUNK_EVENT, {})]), plain_stream_span(2, [10, 20])).SerializeToString()
    )
    view.resource_spans[0].scope_spans[0].spans[0].events.append(b"\x1a\x05")  # an attribute past the end
    assert_first_span_alone_rejected(collector, view.SerializeToString(), "event 1 is not a valid OTLP Span.Event")


def test_an_attribute_that_is_not_protobuf_rejects_its_span_only_over_http_and_grpc(collector):
    """Span attributes are read lazily too (decode.attributes): a broken one costs its span, not the request."""
    view = TraceRequestView.FromString(
        request_of(plain_stream_span(1, [10, 20]), plain_stream_span(2, [10, 20])).SerializeToString()
    )
    view.resource_spans[0].scope_spans[0].spans[0].attributes.append(b"\x12\x05")  # a value past the end
    assert_first_span_alone_rejected(collector, view.SerializeToString(), "is not a valid OTLP KeyValue")


def assert_first_span_alone_rejected(collector, body: bytes, reason: str) -> None:
    """``body`` (span 01, then span 02) sent over HTTP and over gRPC: each time span 01 is rejected for ``reason``
    and span 02 is stored."""
    with grpc.insecure_channel(collector.grpc_endpoint) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=lambda raw: raw,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        answers = [ExportTraceServiceResponse.FromString(post(collector, body, PROTOBUF).content), export(body)]
    for answer in answers:
        assert answer.partial_success.rejected_spans == 1
        assert reason in answer.partial_success.error_message
    assert collector.query_client.query("SELECT span_id FROM streams").result_rows == [("02" * 8,)]


def test_partial_success_in_json(collector):
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0a" * 16,
                                "spanId": "0b" * 8,
                                "name": "chat",
                                "kind": 3,
                                "startTimeUnixNano": "1800000000000000000",
                                "endTimeUnixNano": 1800000000500000000,
                                "attributes": [
                                    {"key": sc.STREAMSCOPE_SIDE, "value": {"stringValue": "client"}},
                                    {
                                        "key": sc.STREAMSCOPE_CHUNKS_OFFSET_US,
                                        "value": {"arrayValue": {"values": [{"intValue": "5"}]}},
                                    },
                                    {
                                        "key": sc.STREAMSCOPE_CHUNKS_TOKENS,
                                        "value": {"arrayValue": {"values": [{"stringValue": "x"}]}},
                                    },
                                    {
                                        "key": sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES,
                                        "value": {"arrayValue": {"values": [{"intValue": 3}]}},
                                    },
                                ],
                                "unknownField": {"ignored": True},
                            }
                        ]
                    }
                ]
            }
        ]
    }
    response = post(collector, json.dumps(document).encode(), {"content-type": "application/json"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "streamscope.chunks.tokens: element 0 is string_value, not an integer" in partial["errorMessage"]


def test_empty_request_succeeds_without_partial_success(collector):
    response = post(collector, b"", PROTOBUF)
    assert response.status_code == 200
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")


def test_grpc_oversize_is_resource_exhausted_and_service_continues(collector):
    with grpc.insecure_channel(collector.grpc_endpoint) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        huge = request_of(plain_stream_span(1, list(range(0, 400_000, 2))))
        with pytest.raises(grpc.RpcError) as failure:
            stub.Export(huge, timeout=10)
        assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        response = stub.Export(request_of(plain_stream_span(2, [1, 2, 3])), timeout=10)
        assert not response.HasField("partial_success")
    assert collector.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 1


def test_readiness_and_health(collector):
    assert httpx.get(f"{collector.http_url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{collector.http_url}/readyz").status_code == 200


def attribute(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, AnyValue(double_value=float("nan"))), "must be an integer"),
        (attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, AnyValue(double_value=3.7)), "must be an integer"),
        (attribute(sc.STREAMSCOPE_OUTCOME, AnyValue(string_value="exploded")), "must be one of completed"),
        (attribute(sc.STREAMSCOPE_TOKENS_ESTIMATED, AnyValue(string_value="false")), "must be a boolean"),
        (
            attribute(sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK, AnyValue(int_value=2)),  # the span has chunks 0 and 1
            "streamscope.first_tool_call_chunk is outside the stream's 2 chunks",
        ),
        (attribute(sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK, AnyValue(int_value=-1)), "must be an integer in 0.."),
        (
            attribute(sc.STREAMSCOPE_CHUNKS_WIRE_BYTES, AnyValue(bytes_value=bytes(12))),
            "streamscope.chunks.wire_bytes: 12 bytes, not a whole number of 8-byte little-endian integers",
        ),
        (
            attribute(sc.STREAMSCOPE_CHUNKS_WIRE_BYTES, AnyValue(bytes_value=bytes(24))),
            "chunk arrays of unequal length (offset_us 2, tokens 2, content_bytes 2, wire_bytes 3",
        ),
    ],
)
def test_one_bad_attribute_rejects_its_span_and_keeps_the_others(collector, extra, reason):
    bad = plain_stream_span(2, [10, 20])
    bad.attributes.append(extra)
    response = post(collector, request_of(plain_stream_span(1, [1, 2, 3]), bad).SerializeToString(), PROTOBUF)
    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1 and reason in partial.error_message
    assert collector.query_client.query("SELECT span_id FROM streams").result_rows == [("01" * 8,)]


def test_token_totals_beyond_their_column_reject_the_span(storage_dsn):
    config = CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, store_wait_s=5.0)
    roomy = Collector(config).start()  # the test reads what it sent as soon as it is answered
    try:
        offsets = list(range(70_000))
        huge = plain_stream_span(2, offsets, tokens=[65_535] * len(offsets))
        response = post(roomy, request_of(plain_stream_span(1, [1, 2]), huge).SerializeToString(), PROTOBUF)
        assert response.status_code == 200
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        assert partial.rejected_spans == 1 and "tokens add up to more than" in partial.error_message
        assert roomy.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 1
    finally:
        roomy.stop()


def test_deeply_nested_json_is_a_400(collector):
    response = post(collector, b"[" * 100_000, {"content-type": "application/json"})
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["message"]
    assert_still_serving(collector)


@pytest.mark.parametrize(
    ("json_attributes", "note"),
    [
        ({sc.STREAMSCOPE_JSON_DOCUMENT: "answer", sc.STREAMSCOPE_JSON_OUTCOME: "valid"}, "is not one of"),
        (
            {
                sc.STREAMSCOPE_JSON_DOCUMENT: "content",
                sc.STREAMSCOPE_JSON_OUTCOME: "valid",
                sc.STREAMSCOPE_JSON_FIELD_COUNT: 2,
                sc.STREAMSCOPE_JSON_FIELD_NAMES: ["a", "b"],
                sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US: [10],
                sc.STREAMSCOPE_JSON_VALID_OFFSET_US: 20,
            },
            "as many field offsets as names",
        ),
        (
            {
                sc.STREAMSCOPE_JSON_DOCUMENT: "content",
                sc.STREAMSCOPE_JSON_OUTCOME: "valid",
                sc.STREAMSCOPE_JSON_FIELD_COUNT: 0,
            },
            "a valid offset exactly when valid",
        ),
    ],
)
def test_json_progress_that_disagrees_with_itself_is_left_out_and_said(collector, json_attributes, note):
    span = plain_stream_span(5, [10, 20])
    span.attributes.extend(KeyValue(key=k, value=support.any_value(v)) for k, v in json_attributes.items())
    response = post(collector, request_of(span).SerializeToString(), PROTOBUF)
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 0 and note in partial.error_message, partial.error_message
    rows = collector.query_client.query("SELECT chunk_count, json_document, json_fields FROM streams").result_rows
    assert rows == [(2, "", [])]  # the stream is kept, without a JSON progress that would be wrong
