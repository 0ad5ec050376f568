"""OTLP attribute values as plain Python values, and a span's attributes read from their encoded bytes.

The collector parses trace requests with each span's attributes left as bytes (``chunk_events.TraceRequestView``).
Most of a stream span's attributes repeat from span to span (the model, the provider, the side, the encoding), so
each encoded attribute is parsed with OTLP's class the first time it is seen and its plain value remembered; a
repeat is a dictionary hit. Parsing every attribute through the message classes instead costs Python objects for
its KeyValue, key and AnyValue on every span. The packed chunk arrays are never remembered: they differ from span
to span and are decoded together (``streamscope_ingest.decode.int_arrays``). One in the bytes form and encoded as
protobuf encodes it (as our SDKs send them) is cut from its encoding as its integers' bytes, without a message
object; any other encoding is parsed by OTLP's class.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from streamscope import semconv as sc
from streamscope_ingest.decode.int_arrays import PackedArray
from streamscope_ingest.decode.remembered import Remembered

_PACKED = frozenset(sc.PACKED_ARRAYS)
_CAPACITY = 16_384
"""Distinct encoded attributes remembered; past it the memory starts over."""
_REMEMBERED_BYTES = 512
"""Longer attributes are parsed each time: a long value rarely repeats, and would hold memory that one does."""

_Read = tuple[str, Any, bool]
"""An encoded attribute's key, its plain value (or its ``PackedArray`` for a packed array), and whether it is one."""
_PACKED_HEADS = {b"\x0a" + bytes([len(name)]) + name.encode() + b"\x12": name for name in sc.PACKED_ARRAYS}
"""How a KeyValue of each packed array begins: its key (field 1), then the tag of its value (field 2)."""
_BYTES_VALUE_TAG = 0x3A  # AnyValue.bytes_value, length-delimited


class AttributeRejected(ValueError):
    """An attribute that is not a valid OTLP KeyValue."""


def plain(value: AnyValue) -> Any:
    """``value`` as Python holds it: a list for an array, a dict for a key-value list, hex for bytes."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def attribute_map(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: plain(kv.value) for kv in attributes}


def stringify(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else str(value)


def span_attributes(encoded: Sequence[bytes]) -> tuple[dict[str, Any], dict[str, PackedArray]]:
    """A span's attributes (each one's encoding) as plain values, and its packed chunk arrays, each by key; of a key
    sent twice the last counts, as OTLP's classes read it. Raises AttributeRejected."""
    plain_values: dict[str, Any] = {}
    packed: dict[str, PackedArray] = {}
    for index, attribute in enumerate(encoded):
        try:
            key, value, is_packed = _READS[attribute] if len(attribute) <= _REMEMBERED_BYTES else _read(attribute)
        except DecodeError:
            raise AttributeRejected(f"attribute {index} is not a valid OTLP KeyValue") from None
        if is_packed:
            packed[key] = value
        else:
            plain_values[key] = value
    return plain_values, packed


def _read(encoded: bytes) -> _Read:
    value_at = encoded[1] + 3 if len(encoded) > 1 else 0  # where the value begins, if the key is one byte long
    name = _PACKED_HEADS.get(encoded[:value_at])
    header = _VALUE_HEADERS[len(encoded) - value_at] if name else None
    if name and header and encoded.startswith(header, value_at):
        return name, encoded[value_at + len(header) :], True
    try:
        attribute = KeyValue.FromString(encoded)
    except (RuntimeError, ValueError) as exc:  # what upb raises for some malformed input
        raise DecodeError(str(exc)) from None
    if attribute.key in _PACKED:
        return attribute.key, attribute.value, True
    return attribute.key, plain(attribute.value), False


def _value_header(size: int) -> bytes | None:
    """What a KeyValue's value of ``size`` encoded bytes, when it is a ``bytes_value`` alone, begins with: its
    length, the bytes_value tag and the bytes' length, each length as protobuf writes it; None if no such value
    has that size."""
    for length_bytes in range(1, 6):
        for raw_length_bytes in range(1, 6):
            raw = size - length_bytes - 1 - raw_length_bytes
            if raw < 0:
                continue
            length, raw_length = _varint(1 + raw_length_bytes + raw), _varint(raw)
            if (len(length), len(raw_length)) == (length_bytes, raw_length_bytes):
                return length + bytes([_BYTES_VALUE_TAG]) + raw_length
    return None


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _shareable(read: _Read) -> bool:
    """Whether spans may share ``read``: not a packed array, nor a value its reader could change."""
    return not read[2] and not isinstance(read[1], (list, dict))


_VALUE_HEADERS: Remembered[int, bytes | None] = Remembered(_value_header, _CAPACITY)
"""The header of a bytes_value of each size, worked out once."""
_READS: Remembered[bytes, _Read] = Remembered(_read, _CAPACITY, kept=_shareable)
"""Each short encoded attribute, read once."""
