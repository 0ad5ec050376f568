"""A span's attributes read from their encoded bytes come out as OTLP's own message classes read them, repeats and
all, and what one span's reader gets cannot change what the next span reads."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

import streamscope_ingest.decode.attributes as attributes_module
from streamscope import semconv as sc
from streamscope.int64_bytes import int64_bytes
from streamscope_ingest.decode.attributes import AttributeRejected, plain, span_attributes
from streamscope_ingest.decode.int_arrays import bytes_form

LEAVES = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda n: AnyValue(int_value=n)),
    st.integers(0, 3).map(lambda n: AnyValue(int_value=n)),  # the repeats the memory is for
    st.text(max_size=3).map(lambda s: AnyValue(string_value=s)),
    st.text(min_size=600, max_size=700).map(lambda s: AnyValue(string_value=s)),  # too long to be remembered
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.floats(allow_nan=False).map(lambda x: AnyValue(double_value=x)),
    st.binary(max_size=4).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
VALUES = st.one_of(
    LEAVES,
    st.lists(LEAVES, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
    st.lists(st.builds(KeyValue, key=st.sampled_from(["a", "b"]), value=LEAVES), max_size=3).map(
        lambda kvs: AnyValue(kvlist_value=KeyValueList(values=kvs))
    ),
    st.lists(st.integers(0, 2**40), max_size=40).map(lambda ns: AnyValue(bytes_value=int64_bytes(ns))),
)
KEYS = st.sampled_from([sc.STREAMSCOPE_SIDE, sc.GEN_AI_REQUEST_MODEL, *sc.PACKED_ARRAYS[:3], "other", ""])
ATTRIBUTES = st.lists(st.builds(KeyValue, key=KEYS, value=VALUES), max_size=8)


def _as_kept(value: AnyValue) -> AnyValue | bytes:
    raw = bytes_form(value)
    return value if raw is None else raw


def read_with_otlp_classes(attributes: list[KeyValue]) -> tuple[dict, dict]:
    """Plain values, and packed arrays as the collector keeps them: the bytes form as its bytes."""
    plain_values = {kv.key: plain(kv.value) for kv in attributes if kv.key not in sc.PACKED_ARRAYS}
    packed = {kv.key: _as_kept(kv.value) for kv in attributes if kv.key in sc.PACKED_ARRAYS}
    return plain_values, packed


@settings(max_examples=400, deadline=None)
@given(ATTRIBUTES)
def test_attributes_read_as_bytes_read_as_otlp_classes_read_them_the_first_time_and_again(attributes):
    encoded = [kv.SerializeToString() for kv in attributes]
    expected = read_with_otlp_classes(attributes)
    assert span_attributes(encoded) == expected
    assert span_attributes(encoded) == expected  # now from memory


OFFSETS_KEY = b"\x0a" + bytes([len(sc.STREAMSCOPE_CHUNKS_OFFSET_US)]) + sc.STREAMSCOPE_CHUNKS_OFFSET_US.encode()


@pytest.mark.parametrize(
    "encoded",
    [
        b"\x12\x0a\x3a\x08" + int64_bytes([7]) + OFFSETS_KEY,  # the value before the key
        OFFSETS_KEY + b"\x12\x0c\x3a\x08" + int64_bytes([7]) + b"\x78\x01",  # then an unknown field of the value
        OFFSETS_KEY + b"\x12\x0a\x3a\x08" + int64_bytes([7]) + b"\x78\x01",  # then one of the KeyValue
        OFFSETS_KEY + b"\x12\x0e\x3a\x02" + int64_bytes([9])[:2] + b"\x3a\x08" + int64_bytes([7]),  # sent twice
        OFFSETS_KEY + b"\x12\x03\x3a\x01\x00" + b"\x12\x0a\x3a\x08" + int64_bytes([7]),  # the value twice
        OFFSETS_KEY + b"\x12\x8a\x00\x3a\x08" + int64_bytes([7]),  # a length in more bytes than it needs
    ],
)
def test_a_packed_array_encoded_otherwise_reads_as_otlp_classes_read_it(encoded):
    expected = KeyValue.FromString(encoded)
    _, packed = span_attributes([encoded])
    assert bytes_form(packed[sc.STREAMSCOPE_CHUNKS_OFFSET_US]) == expected.value.bytes_value == int64_bytes([7])


def test_a_packed_array_cut_short_is_refused_as_otlp_classes_refuse_it():
    encoded = OFFSETS_KEY + b"\x12\x0a\x3a\x08" + int64_bytes([7])[:5]
    with pytest.raises(DecodeError):
        KeyValue.FromString(encoded)
    with pytest.raises(AttributeRejected):
        span_attributes([encoded])


def test_a_value_a_reader_changes_is_not_what_the_next_span_reads():
    encoded = [
        KeyValue(
            key=sc.GEN_AI_RESPONSE_FINISH_REASONS,
            value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="stop")])),
        ).SerializeToString()
    ]
    first, _ = span_attributes(encoded)
    first[sc.GEN_AI_RESPONSE_FINISH_REASONS].append("length")
    again, _ = span_attributes(encoded)
    assert again[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ["stop"]


def test_an_attribute_that_is_not_protobuf_is_refused_by_its_place():
    good = KeyValue(key="k", value=AnyValue(int_value=1)).SerializeToString()
    with pytest.raises(AttributeRejected, match="attribute 1 is not a valid OTLP KeyValue"):
        span_attributes([good, b"\x12\x05"])  # a value whose length runs past the end


def test_the_memory_of_attributes_is_bounded(monkeypatch):
    monkeypatch.setattr(attributes_module._READS, "capacity", 10)
    for n in range(25):
        span_attributes([KeyValue(key="n", value=AnyValue(int_value=n)).SerializeToString()])
    assert 0 < len(attributes_module._READS) <= 10
