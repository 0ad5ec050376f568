"""Decode a packed chunk array (an OTLP value holding integers) to numpy without a Python object per element.

A packed array arrives in one of two forms:
- ``bytes_value``: the integers as little-endian int64, 8 bytes each, as our SDKs send them (see
  ``streamscope.int64_bytes``). One ``frombuffer`` reads every array of a request.
- ``ArrayValue{values: [AnyValue{int_value: v}, ...]}``, which every OpenTelemetry SDK can emit. On the wire
  every element is ``0x0a <len> 0x18 <varint>``: three bytes below 0x80, then a varint whose last byte is the
  only one below 0x80. So every element holds exactly four bytes below 0x80, which locates all elements at
  once with numpy. Anything else (doubles, mixed types, unknown fields) takes the per-element path, which
  accepts integral doubles, as a JavaScript SDK may send, and rejects the rest.
A ``PackedArray`` is the OTLP value, or for the bytes form just its bytes, as the collector reads them
(``streamscope_ingest.decode.attributes``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from streamscope.int64_bytes import int64_bytes

_ELEMENT_TAG = 0x0A  # ArrayValue.values, length-delimited
_INT_TAG = 0x18  # AnyValue.int_value, varint
_MAX_VARINT_BYTES = 10
_INT64_LE = np.dtype("<i8")
INT64_BYTES = _INT64_LE.itemsize
"""The bytes of one integer in the bytes form."""
_DECIMAL = re.compile(r"-?[0-9]+")  # how OTLP/JSON may write an int64
PASS_BYTES = 1 << 20
"""Serialised ArrayValues decoded in one numpy pass, at most (one array alone may be larger)."""


PackedArray: TypeAlias = AnyValue | bytes
"""A packed array: the bytes of the bytes form, or any OTLP value sent for one."""


class NotAnIntArray(ValueError):
    """The value is not an array of integers."""


def bytes_form(value: PackedArray) -> bytes | None:
    """The bytes of ``value`` when it is in the bytes form, else None."""
    if isinstance(value, bytes):
        return value
    return value.bytes_value if value.WhichOneof("value") == "bytes_value" else None


def element_count(value: PackedArray) -> int:
    """How many integers ``value`` holds, in either form (0 for anything else), without decoding them."""
    if (raw := bytes_form(value)) is not None:
        return len(raw) // INT64_BYTES
    assert not isinstance(value, bytes)
    return len(value.array_value.values) if value.WhichOneof("value") == "array_value" else 0


def decode_int_array(value: PackedArray) -> np.ndarray:
    """The integers in ``value`` as int64; raises NotAnIntArray for anything else."""
    if (raw := bytes_form(value)) is not None:
        return _from_bytes(raw)
    assert not isinstance(value, bytes)
    kind = value.WhichOneof("value")
    if kind != "array_value":
        raise NotAnIntArray(f"expected an array of integers, got {kind or 'nothing'}")
    fast = _decode_wire(value.array_value.SerializeToString())
    return fast if fast is not None else _decode_elements(value)


def decode_int_arrays(values: Sequence[PackedArray]) -> list[np.ndarray | NotAnIntArray]:
    """Each value's integers (or the NotAnIntArray it raises), decoded in few vectorised passes.

    Arrays of one form serialised one after another are themselves one array of that form, so a request's
    arrays cost a numpy pass per megabyte instead of one per array; only a request that mixes the forms, or
    a run with an array that is not plain, decodes each on its own.
    """
    raws = [raw for raw in map(bytes_form, values) if raw is not None]
    if len(raws) == len(values) and not any(len(raw) % INT64_BYTES for raw in raws):
        return _split(_from_bytes(b"".join(raws)), [len(raw) // INT64_BYTES for raw in raws])
    arrays = [v for v in values if isinstance(v, AnyValue) and v.WhichOneof("value") == "array_value"]
    if arrays and len(arrays) == len(values):
        return [array for group in _groups_by_size(arrays) for array in _decode_plain_together(group)]
    return _decode_each(values)


def _decode_plain_together(values: Sequence[AnyValue]) -> list[np.ndarray | NotAnIntArray]:
    """ArrayValues decoded in one pass when all are plain, else each on its own."""
    counts = [len(v.array_value.values) for v in values]
    fast = _decode_wire(b"".join(v.array_value.SerializeToString() for v in values))
    if fast is not None and fast.size == sum(counts):
        return _split(fast, counts)
    return _decode_each(values)


def _groups_by_size(values: Sequence[AnyValue]) -> Iterator[Sequence[AnyValue]]:
    """``values`` in runs of about ``PASS_BYTES`` serialised: a pass holds many times its input while it runs
    (index arrays of 8 bytes for every byte below 0x80), so a large request is decoded a run at a time."""
    start, size = 0, 0
    for end, value in enumerate(values, start=1):
        size += value.ByteSize()
        if size >= PASS_BYTES:
            yield values[start:end]
            start, size = end, 0
    if start < len(values):
        yield values[start:]


def _decode_each(values: Sequence[PackedArray]) -> list[np.ndarray | NotAnIntArray]:
    results: list[np.ndarray | NotAnIntArray] = []
    for value in values:
        try:
            results.append(decode_int_array(value))
        except NotAnIntArray as exc:
            results.append(exc)
    return results


def json_ints_as_base64(array_value: Any) -> str | None:
    """An OTLP/JSON ``arrayValue`` of plain ``intValue``s (numbers or decimal strings) as the bytes form, in
    base64 as JSON writes bytes; None for anything else, which the protobuf path decodes or refuses.

    protobuf's JSON parser builds a message per element, about 30 µs a chunk for a packed timeline
    (``benchmarks/wire_cost.py``); the bytes form is one value."""
    values = array_value.get("values") if isinstance(array_value, dict) else None
    if not isinstance(values, list):
        return None
    integers = []
    for element in values:
        value = element.get("intValue") if isinstance(element, dict) and len(element) == 1 else None
        if type(value) is str and _DECIMAL.fullmatch(value):
            value = int(value)
        if type(value) is not int:
            return None
        integers.append(value)
    try:
        return base64.b64encode(int64_bytes(integers)).decode()
    except OverflowError:
        return None


def _split(flat: np.ndarray, counts: list[int]) -> list[np.ndarray | NotAnIntArray]:
    """``flat`` cut into views of ``counts`` elements each (slicing: ``np.split`` costs several times more)."""
    ends = np.cumsum(counts).tolist()
    return [flat[end - count : end] for end, count in zip(ends, counts, strict=True)]


def int64s(raw: bytes) -> np.ndarray:
    """The integers of the bytes form, read in place (a read-only view of ``raw``); raises NotAnIntArray when its
    length is not a whole number of them."""
    if len(raw) % INT64_BYTES:
        raise NotAnIntArray(f"{len(raw)} bytes, not a whole number of 8-byte little-endian integers")
    return np.frombuffer(raw, dtype=_INT64_LE)


def _from_bytes(raw: bytes) -> np.ndarray:
    return int64s(raw).astype(np.int64)


def _decode_wire(raw: bytes) -> np.ndarray | None:
    """Vectorised decode of the serialised ArrayValue; None when the layout is not the plain one."""
    if not raw:
        return np.empty(0, dtype=np.int64)
    data = np.frombuffer(raw, dtype=np.uint8)
    low = np.flatnonzero(data < 0x80)
    if low.size % 4:
        return None
    tag, length, int_tag, last = low.reshape(-1, 4).T
    plain = (
        tag[0] == 0
        and last[-1] == data.size - 1
        and np.array_equal(tag[1:], last[:-1] + 1)
        and np.array_equal(length, tag + 1)
        and np.array_equal(int_tag, length + 1)
        and bool(np.all(data[tag] == _ELEMENT_TAG))
        and bool(np.all(data[int_tag] == _INT_TAG))
        and np.array_equal(data[length].astype(np.int64), last - length)
    )
    if not plain:
        return None
    first = int_tag + 1
    width = last - int_tag
    if width.max() > _MAX_VARINT_BYTES:
        return None
    result = np.zeros(first.size, dtype=np.uint64)
    for k in range(int(width.max())):
        present = k < width
        byte = data[np.where(present, first + k, 0)].astype(np.uint64) & np.uint64(0x7F)
        result |= np.where(present, byte << np.uint64(7 * k), np.uint64(0))
    return result.view(np.int64)


def _decode_elements(value: AnyValue) -> np.ndarray:
    out = np.empty(len(value.array_value.values), dtype=np.int64)
    for i, element in enumerate(value.array_value.values):
        kind = element.WhichOneof("value")
        if kind == "int_value":
            out[i] = element.int_value
        elif kind == "double_value" and element.double_value.is_integer():
            out[i] = int(element.double_value)
        else:
            raise NotAnIntArray(f"element {i} is {kind or 'empty'}, not an integer")
    return out
