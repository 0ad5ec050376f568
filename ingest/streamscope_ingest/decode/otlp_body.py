"""Parse OTLP export request bodies: binary protobuf, or JSON under the OTLP JSON rules.

OTLP JSON differs from the standard proto3 mapping: trace and span ids are hex strings (not base64) and
enums are integers; 64-bit integers may be strings or numbers; unknown fields are ignored. The JSON is
rewritten to the proto3 form (ids to base64) and handed to protobuf's own parser, so both encodings come out
as the same message type. On the way, a packed chunk array sent as an int array becomes the bytes form our
SDKs send, which means the same to the decoder and spares the parser a message per chunk.

A body that does not parse is refused with the reason and the field's name, never its value: protobuf's own
messages quote what was sent, so they are read for the field's path and what went wrong, and rewritten.
"""

from __future__ import annotations

import base64
import json
import re
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
_FIELD_CHAIN = re.compile(r"(?:Failed to parse \w+ field: )*")
"""How protobuf's JSON parser begins a message: each field it was inside, outermost first."""
_AT_PATH = re.compile(r' at "?(?P<root>[A-Z]\w*)\.(?P<path>[\w.\[\]]+?)"?[.\s]*$')
"""The path (the message type, then field names and indices) many of its messages end with."""
_REASONS = (
    ("must be in []", "expected a list"),
    ("null is not allowed", "null in a list"),
    ("should not have multiple", "more than one of fields that exclude each other"),
    ("too deep", "nested too deeply"),
    ("string or bytes", "expected a string"),
    ("true or false", "expected true or false"),
    ("float", "expected a number"),
    ("NaN", "expected a number"),
    ("integer", "expected an integer in the field's range"),
    ("for int()", "expected an integer in the field's range"),
    ("out of range", "expected an integer in the field's range"),
)
"""What went wrong, in words of our own, by a phrase of protobuf's message (the first that matches)."""


class _BadId(ValueError):
    """An id field that is not a hex string; its message names the field only."""


def parse_protobuf(body: bytes, message_type: type[M]) -> M:
    try:
        return message_type.FromString(body)
    except (ProtobufDecodeError, RuntimeError, ValueError):
        raise DecodeError(
            f"body is not a valid {message_type.DESCRIPTOR.name} protobuf: the wire format does not parse"
        ) from None


def parse_json(body: bytes, message_type: type[M]) -> M:
    try:
        document = json.loads(body)
    except json.JSONDecodeError as exc:
        raise DecodeError(f"body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise DecodeError("body is not valid JSON: not UTF-8") from None
    except ValueError:
        raise DecodeError("body is not valid JSON") from None
    except RecursionError:
        raise DecodeError("body is not valid OTLP JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise DecodeError(f"body must be a JSON object ({message_type.DESCRIPTOR.name}), not {type(document).__name__}")
    invalid = f"body is not a valid OTLP JSON {message_type.DESCRIPTOR.name}"
    try:
        _to_proto3_json(document)
        return json_format.ParseDict(document, message_type(), ignore_unknown_fields=True)
    except _BadId as exc:
        raise DecodeError(f"{invalid}: {exc}") from None
    except RecursionError:
        raise DecodeError(f"{invalid}: nested too deeply") from None
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise DecodeError(f"{invalid}: {_parse_failure(str(exc), message_type.DESCRIPTOR.name)}") from None


def _parse_failure(message: str, root: str) -> str:
    """Where protobuf's JSON parser failed in a ``root`` message and why, from its ``message``, without the value
    it quotes: the field names come from the chain it begins with and the path it may end with, never from
    between them, where the value is."""
    chain = _FIELD_CHAIN.match(message)
    assert chain is not None  # the pattern matches the empty string
    names = re.findall(r"parse (\w+) field", chain.group())
    at = _AT_PATH.search(message)
    at = at if at and at["root"] == root else None
    path = at["path"] if at else ".".join(names)
    if at and names and names[-1] not in re.split(r"[.\[\]]", path):
        path = f"{path}.{names[-1]}"  # a message that names the field's parent: the field is the last one entered
    inner = message[chain.end() :]
    reason = next((said for phrase, said in _REASONS if phrase in inner), "a value of the wrong type")
    return f"{path or 'the request'}: {reason}"


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
                        raise _BadId(f"{key} is not a hex string") from None
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
