from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from streamscope import semconv as sc
from streamscope.int64_bytes import int64_bytes
from streamscope_ingest.decode import int_arrays
from streamscope_ingest.decode.int_arrays import NotAnIntArray, decode_int_array, decode_int_arrays, element_count
from streamscope_ingest.decode.traces import decode_traces
from tests.support import stream_span, trace_request

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def array(*elements: AnyValue) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=list(elements)))


@given(st.lists(INT64, max_size=300))
def test_wire_decoder_matches_protobuf_for_any_int64s(values):
    value = array(*(AnyValue(int_value=v) for v in values))
    wire = int_arrays._decode_wire(value.array_value.SerializeToString())
    assert wire is not None, "plain int arrays must take the vectorised path"
    assert wire.tolist() == values
    assert decode_int_array(value).tolist() == values


@given(st.lists(INT64, max_size=300))
def test_bytes_from_the_sdk_decode_to_the_same_integers(values):
    value = AnyValue(bytes_value=int64_bytes(values))
    assert decode_int_array(value).tolist() == values
    assert element_count(value) == len(values) == element_count(array(*(AnyValue(int_value=v) for v in values)))


def test_bytes_are_little_endian_int64s():
    raw = (258).to_bytes(8, "little") + (-2).to_bytes(8, "little", signed=True)
    assert decode_int_array(AnyValue(bytes_value=raw)).tolist() == [258, -2]
    assert int64_bytes([258, -2]) == raw


def test_integral_doubles_take_the_element_path():
    value = array(AnyValue(double_value=3.0), AnyValue(int_value=4))
    assert int_arrays._decode_wire(value.array_value.SerializeToString()) is None
    assert decode_int_array(value).tolist() == [3, 4]


@pytest.mark.parametrize(
    "value",
    [
        array(AnyValue(string_value="7")),
        array(AnyValue(double_value=2.5)),
        array(AnyValue()),
        AnyValue(int_value=3),
        AnyValue(string_value="1,2,3"),
        AnyValue(bytes_value=bytes(12)),
    ],
)
def test_anything_but_integers_is_refused(value):
    with pytest.raises(NotAnIntArray):
        decode_int_array(value)


def test_empty_array():
    assert decode_int_array(array()).dtype == np.int64
    assert decode_int_array(array()).size == 0


def test_bytes_of_a_partial_integer_say_how_many_bytes_they_hold():
    with pytest.raises(NotAnIntArray, match="12 bytes, not a whole number of 8-byte little-endian integers"):
        decode_int_array(AnyValue(bytes_value=bytes(12)))


ELEMENT = st.one_of(
    INT64.map(lambda v: AnyValue(int_value=v)),
    st.sampled_from([AnyValue(double_value=3.0), AnyValue(double_value=2.5), AnyValue(string_value="7")]),
)


@given(
    st.lists(
        st.one_of(st.lists(INT64.map(lambda v: AnyValue(int_value=v)), max_size=20), st.lists(ELEMENT, max_size=5))
    )
)
def test_arrays_decoded_together_match_each_decoded_alone(arrays):
    values = [array(*elements) for elements in arrays] + [AnyValue(int_value=1)]
    check_together_against_alone(values)


@given(st.lists(st.one_of(st.lists(INT64, max_size=20), st.binary(max_size=20))), st.booleans())
def test_bytes_decoded_together_match_each_decoded_alone(arrays, with_an_int_array):
    values = [AnyValue(bytes_value=a if isinstance(a, bytes) else int64_bytes(a)) for a in arrays]
    check_together_against_alone(values + [array(AnyValue(int_value=5))] * with_an_int_array)


def check_together_against_alone(values: list[AnyValue]) -> None:
    together = decode_int_arrays(values)
    assert len(together) == len(values)
    for value, result in zip(values, together):
        try:
            alone = decode_int_array(value)
        except NotAnIntArray as exc:
            assert isinstance(result, NotAnIntArray) and str(result) == str(exc)
        else:
            assert isinstance(result, np.ndarray) and result.tolist() == alone.tolist()


def test_bytes_arrays_are_decoded_in_one_pass():
    values = [AnyValue(bytes_value=int64_bytes(range(n))) for n in (3, 0, 200)]
    together = decode_int_arrays(values)
    assert [r.tolist() for r in together] == [list(range(n)) for n in (3, 0, 200)]
    assert together[0].base is together[2].base is not None, "views into one decoded buffer"


def test_plain_arrays_are_decoded_in_one_pass():
    values = [array(*(AnyValue(int_value=v) for v in range(n))) for n in (3, 0, 200)]
    together = decode_int_arrays(values)
    assert [r.tolist() for r in together] == [list(range(n)) for n in (3, 0, 200)]
    assert together[0].base is together[2].base is not None, "views into one decoded buffer"


def test_host_delays_as_a_javascript_sdk_sends_them_decode_beside_the_sdks_bytes():
    """A browser's host delays may come as doubles (JavaScript numbers), a Python client's as int64 bytes, in one
    request: the doubles take the element path, the rest are decoded together, each stays with its span."""

    def sent(span, host_delay_us: AnyValue):
        span.attributes.append(KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US, value=host_delay_us))
        return span

    browser = sent(
        stream_span(1, 1, side="browser", offsets_ms=[200, 210], tokens=[1, 1]),
        array(AnyValue(double_value=150_000.0), AnyValue(double_value=0.0)),
    )
    client = sent(
        stream_span(2, 2, side="client", offsets_ms=[500], tokens=[1]), AnyValue(bytes_value=int64_bytes([2**32 - 1]))
    )
    torn = sent(
        stream_span(3, 3, side="browser", offsets_ms=[1, 2], tokens=[1, 1]),
        array(AnyValue(double_value=1.0), AnyValue(double_value=0.5)),
    )
    batch = decode_traces(trace_request([browser, client, torn]), tenant="t")
    assert [r.reason for r in batch.rejected] == [
        f"{sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US}: element 1 is double_value, not an integer"
    ]
    assert batch.blocks["chunk_arrays"]["host_delay_us"].to_pylist() == [[150_000, 0], [2**32 - 1]]
