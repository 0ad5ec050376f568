"""Parse OTLP export request bodies: binary protobuf, or JSON under the OTLP JSON rules.

OTLP JSON differs from the standard proto3 mapping: trace and span ids are hex strings (not base64) and
enums are integers; 64-bit integers may be strings or numbers; unknown fields are ignored. The JSON is
rewritten to the proto3 form (ids to base64) and handed to protobuf's own parser, so both encodings come out
as the same message type. On the way, a packed chunk array sent as an int array becomes the bytes form our
SDKs send, which means the same to the decoder and spares the parser a message per chunk.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtobufDecodeError
from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope.errors import DecodeError
from streamscope_ingest.decode.int_arrays import json_ints_as_base64

M = TypeVar("M", bound=Message)

_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_PACKED_ARRAYS = frozenset(sc.PACKED_ARRAYS)


def parse_protobuf(body: bytes, message_type: type[M]) -> M:
    try:
        return message_type.FromString(body)
    except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
        raise DecodeError(f"body is not a valid {message_type.DESCRIPTOR.name} protobuf: {exc}") from None


def parse_json(body: bytes, message_type: type[M]) -> M:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise DecodeError("body is not valid OTLP JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise DecodeError(f"body must be a JSON object ({message_type.DESCRIPTOR.name}), not {type(document).__name__}")
    try:
        _to_proto3_json(document)
        return json_format.ParseDict(document, message_type(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(f"body is not a valid OTLP JSON {message_type.DESCRIPTOR.name}: {exc}") from None


def _to_proto3_json(node: Any) -> None:
    """Rewrite every id field, at any depth, from OTLP's hex to proto3 JSON's base64, and every packed chunk
    array that is a plain int array to bytes, in place."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if _packed_int_array_as_bytes(current):
                continue
            for key, value in current.items():
                if key in _ID_FIELDS and isinstance(value, str):
                    try:
                        current[key] = base64.b64encode(bytes.fromhex(value)).decode()
                    except ValueError:
                        raise ValueError(f"{key} {value[:40]!r} is not a hex string") from None
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(current, list):
            stack.extend(v for v in current if isinstance(v, (dict, list)))


def _packed_int_array_as_bytes(node: dict[str, Any]) -> bool:
    """Whether ``node`` was a KeyValue of a packed chunk array as a plain int array, now as bytes."""
    name, value = node.get("key"), node.get("value")
    if not (isinstance(name, str) and name in _PACKED_ARRAYS and isinstance(value, dict) and len(value) == 1):
        return False
    packed = json_ints_as_base64(value.get("arrayValue"))
    if packed is None:
        return False
    node["value"] = {"bytesValue": packed}
    return True


def to_json(message: Message) -> bytes:
    """A response message in OTLP JSON (lowerCamelCase keys, int64 as strings)."""
    return json_format.MessageToJson(message, indent=None).encode()
