"""OTLP/JSON packed arrays: an int array becomes the bytes form on parsing, with the same integers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from streamscope import semconv as sc
from streamscope.errors import DecodeError
from streamscope_ingest.decode.int_arrays import decode_int_array
from streamscope_ingest.decode.otlp_body import parse_json

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def parsed_attributes(*attributes: dict) -> list:
    span = {"traceId": "01" * 16, "spanId": "02" * 8, "name": "chat", "attributes": list(attributes)}
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    request = parse_json(json.dumps(document).encode(), ExportTraceServiceRequest)
    return list(request.resource_spans[0].scope_spans[0].spans[0].attributes)


def int_array(key: str, elements: list) -> dict:
    return {"key": key, "value": {"arrayValue": {"values": elements}}}


@given(st.lists(INT64, max_size=50), st.booleans())
def test_a_packed_int_array_becomes_bytes_with_the_same_integers(values, as_strings):
    elements = [{"intValue": str(v) if as_strings else v} for v in values]
    packed, other = parsed_attributes(int_array(sc.STREAMSCOPE_CHUNKS_TOKENS, elements), int_array("app.ids", elements))
    assert packed.value.WhichOneof("value") == "bytes_value"
    assert decode_int_array(packed.value).tolist() == values
    assert other.value.WhichOneof("value") == "array_value", "only the packed arrays change form"
    assert decode_int_array(other.value).tolist() == values


@pytest.mark.parametrize(
    ("elements", "integers"),
    [
        ([{"intValue": 1}, {"doubleValue": 3.0}], [1, 3]),  # mixed: the element path, as before
        ([{"doubleValue": 2.0}], [2]),
        ([{"intValue": "5"}, {"intValue": 6}], [5, 6]),
    ],
)
def test_arrays_that_are_not_plain_keep_their_form_and_meaning(elements, integers):
    (packed,) = parsed_attributes(int_array(sc.STREAMSCOPE_CHUNKS_OFFSET_US, elements))
    assert decode_int_array(packed.value).tolist() == integers


@pytest.mark.parametrize("element", [{"stringValue": "7"}, {}])
def test_an_element_that_is_not_an_integer_is_left_for_the_decoder_to_refuse(element):
    (packed,) = parsed_attributes(int_array(sc.STREAMSCOPE_CHUNKS_OFFSET_US, [{"intValue": 1}, element]))
    assert packed.value.WhichOneof("value") == "array_value"


@pytest.mark.parametrize("value", [1.5, True, 2**64])
def test_an_int_value_that_is_no_int64_is_still_refused_by_the_parser(value):
    with pytest.raises(DecodeError, match="intValue"):
        parsed_attributes(int_array(sc.STREAMSCOPE_CHUNKS_OFFSET_US, [{"intValue": 1}, {"intValue": value}]))
