from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue

from streamscope.int64_bytes import int64_bytes
from streamscope_ingest.decode import int_arrays
from streamscope_ingest.decode.int_arrays import NotAnIntArray, decode_int_array, decode_int_arrays, element_count

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
