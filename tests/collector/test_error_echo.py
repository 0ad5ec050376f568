"""What a refusal says names the reason and the field, never what was sent: a value carrying markup goes through
every way the collector refuses a request (400 and 415 over HTTP, INVALID_ARGUMENT over gRPC, rejections in
partial_success, the alert webhook's 400) and comes back in no answer."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from streamscope import semconv as sc
from streamscope_collector.http.alerts import ALERTS_PATH
from tests import support
from tests.support import PROTOBUF, otlp_json, plain_stream_span, request_of, stream_span

MARK = "ECHO7f3a"
SENT = f"{MARK}<script>alert(1)</script>"
JSON = {"content-type": "application/json"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

Document = dict[str, Any]


def document() -> Document:
    """A valid OTLP JSON request: one client stream of 3 chunks."""
    return json.loads(otlp_json(request_of(plain_stream_span(1, [10, 20, 30]))))


def span(doc: Document) -> Document:
    return doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]


def changed(change: Callable[[Document], Any]) -> bytes:
    """The valid request with ``change`` made to it, as JSON."""
    doc = copy.deepcopy(document())
    change(doc)
    return json.dumps(doc).encode()


def attribute_value(value: Document) -> Callable[[Document], None]:
    """A change that adds an attribute of ``value`` (an OTLP JSON AnyValue) to the span."""
    return lambda doc: span(doc)["attributes"].append({"key": "app.extra", "value": value})


REFUSED_BODIES = [
    pytest.param(changed(lambda d: span(d).update(startTimeUnixNano=SENT)), JSON, 400, id="int64 field"),
    pytest.param(changed(lambda d: span(d).update(flags=SENT)), JSON, 400, id="fixed32 field"),
    pytest.param(changed(attribute_value({"intValue": SENT})), JSON, 400, id="intValue"),
    pytest.param(changed(attribute_value({"doubleValue": SENT})), JSON, 400, id="doubleValue"),
    pytest.param(changed(attribute_value({"boolValue": SENT})), JSON, 400, id="boolValue"),
    pytest.param(changed(attribute_value({"arrayValue": {"values": [{"intValue": SENT}]}})), JSON, 400, id="nested"),
    pytest.param(changed(lambda d: span(d).update(attributes=SENT)), JSON, 400, id="list expected"),
    pytest.param(
        changed(lambda d: d["resourceSpans"][0]["scopeSpans"][0].update(spans={SENT: SENT})), JSON, 400, id="object"
    ),
    pytest.param(changed(lambda d: span(d).update(name={SENT: 1})), JSON, 400, id="string expected"),
    pytest.param(changed(lambda d: span(d).update(traceId=SENT)), JSON, 400, id="trace id"),
    pytest.param(changed(lambda d: span(d).update(spanId=f"ab{SENT}")), JSON, 400, id="span id"),
    pytest.param(changed(lambda d: span(d).update(parentSpanId=[SENT])), JSON, 400, id="id not a string"),
    pytest.param(b'{"resourceSpans": [' + SENT.encode(), JSON, 400, id="json syntax"),
    pytest.param(b'{"resourceSpans": "\xff' + SENT.encode() + b'"}', JSON, 400, id="json not utf-8"),
    pytest.param(b"\x0a\x40" + SENT.encode() * 2, PROTOBUF, 400, id="protobuf"),
    pytest.param(b"\x0a\x40" + SENT.encode() * 2, {"content-type": f"application/{SENT}"}, 415, id="content type"),
    pytest.param(request_of().SerializeToString(), {**PROTOBUF, "content-encoding": SENT}, 415, id="encoding"),
]


def refusal_text(response: httpx.Response) -> str:
    """The whole answer, headers and body, as lower-case text (a protobuf body's strings are in it as UTF-8; a
    header may come back lower-cased)."""
    headers = "\n".join(f"{name}: {value}" for name, value in response.headers.items())
    return (headers + "\n" + response.content.decode("utf-8", "replace")).lower()


@pytest.mark.parametrize(("body", "headers", "status"), REFUSED_BODIES)
def test_a_refused_body_is_answered_without_what_it_sent(collector, body, headers, status):
    response = support.post(collector, body, headers=headers, timeout=10)
    assert response.status_code == status, response.text
    assert MARK.lower() not in refusal_text(response)


def test_a_protobuf_that_does_not_parse_over_grpc_is_answered_without_what_it_sent(collector):
    with grpc.insecure_channel(collector.grpc_endpoint) as channel:
        export = channel.unary_unary(EXPORT)  # the bytes as they are
        with pytest.raises(grpc.RpcError) as refused:
            export(b"\x0a\x40" + SENT.encode() * 2, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert MARK not in refused.value.details()


REJECTED_ATTRIBUTES = {
    "side": {sc.STREAMSCOPE_SIDE: SENT},
    "enum": {sc.STREAMSCOPE_OUTCOME: SENT},
    "integer": {sc.GEN_AI_USAGE_OUTPUT_TOKENS: SENT},
    "boolean": {sc.STREAMSCOPE_TOKENS_ESTIMATED: SENT},
}
WARNED_ATTRIBUTES = {
    "json progress": {sc.STREAMSCOPE_JSON_DOCUMENT: SENT, sc.STREAMSCOPE_JSON_OUTCOME: SENT},
}


@pytest.mark.parametrize(
    ("attributes", "rejected"),
    [pytest.param(a, 1, id=name) for name, a in REJECTED_ATTRIBUTES.items()]
    + [pytest.param(a, 0, id=name) for name, a in WARNED_ATTRIBUTES.items()],
)
def test_partial_success_names_the_attribute_not_its_value(collector, attributes, rejected):
    """Over HTTP (protobuf and JSON) and gRPC, the span is rejected or warned about by its attribute's name."""
    request = request_of(stream_span(1, 1, side="client", offsets_ms=[0, 5], tokens=[1, 1], attributes=attributes))
    with grpc.insecure_channel(collector.grpc_endpoint) as channel:
        export = channel.unary_unary(EXPORT, response_deserializer=ExportTraceServiceResponse.FromString)
        over_grpc = export(request.SerializeToString(), timeout=10)
    over_protobuf = support.post(collector, request.SerializeToString(), timeout=10)
    over_json = support.post(collector, otlp_json(request), headers=JSON, timeout=10)
    answers = [over_grpc.partial_success, ExportTraceServiceResponse.FromString(over_protobuf.content).partial_success]
    json_answer = over_json.json()["partialSuccess"]
    assert [a.rejected_spans for a in answers] + [int(json_answer.get("rejectedSpans", 0))] == [rejected] * 3
    for message in [a.error_message for a in answers] + [json_answer["errorMessage"]]:
        assert next(iter(attributes)) in message and MARK not in message
    assert MARK not in over_json.text


def alert(**changes: Any) -> Document:
    fields = {"status": "firing", "labels": {"alertname": "a"}, "startsAt": "2026-10-12T09:51:03Z", "fingerprint": "f"}
    return {"alerts": [{**fields, **changes}]}


@pytest.mark.parametrize(
    "notification",
    [
        pytest.param(alert(status=SENT), id="status"),
        pytest.param(alert(startsAt=SENT), id="start time"),
        pytest.param(alert(endsAt=f"2026-10-12T{SENT}"), id="end time"),
        pytest.param(alert(startsAt="9999-12-31T00:00:00+00:00"), id="past 2299"),
    ],
)
def test_the_alert_webhook_names_the_field_not_its_value(collector, notification):
    body = json.dumps(notification).encode()
    response = support.post(collector, body, path=ALERTS_PATH, headers=JSON, timeout=10)
    assert response.status_code == 400 and "alerts[0]." in response.json()["error"]
    assert MARK not in response.text and "9999" not in response.text
