"""A stream span's ``streams`` row from its attributes: each attribute read into its column and checked, the rest
kept in the ``attributes`` map; and how a span is named in rejections and warnings."""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.decode.attributes import stringify
from streamscope_ingest.decode.int_arrays import PackedArray
from streamscope_ingest.decode.limits import LATEST_OFFSET_US, LATEST_START_NS, SpanLimits

# Attributes that become columns (or chunk arrays) and so stay out of the ``attributes`` map.
_PROMOTED = frozenset(
    {
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_PROVIDER_NAME,
        sc.GEN_AI_REQUEST_MODEL,
        sc.GEN_AI_RESPONSE_MODEL,
        sc.GEN_AI_RESPONSE_ID,
        sc.GEN_AI_RESPONSE_FINISH_REASONS,
        sc.GEN_AI_USAGE_INPUT_TOKENS,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS,
        sc.SERVER_ADDRESS,
        sc.SERVER_PORT,
        sc.ERROR_TYPE,
        sc.HTTP_ROUTE,
        sc.STREAMSCOPE_SIDE,
        sc.STREAMSCOPE_ENCODING,
        sc.STREAMSCOPE_TRANSPORT,
        sc.STREAMSCOPE_OUTCOME,
        sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US,
        sc.STREAMSCOPE_CANCEL_OFFSET_US,
        sc.STREAMSCOPE_TOKENS_AFTER_CANCEL,
        sc.STREAMSCOPE_TOKENS_ESTIMATED,
        sc.STREAMSCOPE_ENGINE_REQUEST_ID,
        sc.STREAMSCOPE_NODE_NAME,
        sc.STREAMSCOPE_REPETITION_SCORE,
        sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK,
        sc.STREAMSCOPE_HOST_WATCH,
        *sc.PACKED_ARRAYS,
        *sc.JSON_PROGRESS,
    }
)
U32_MAX = 2**32 - 1
_TEXT = (pa.string(), pa.dictionary(pa.int32(), pa.string()))
_TEXT_COLUMNS = operator.itemgetter(
    *map(sys.intern, ("model", *(f.name for f in columns.STREAMS_DECODED if f.type in _TEXT)))
)
"""A stream row's string values (``model`` is not a streams column, but a chunk_arrays one)."""


class SpanRejected(Exception):
    pass


@dataclass
class Stream:
    """One accepted stream span before vectorisation: scalars plus its chunk arrays."""

    row: dict[str, Any]
    chunk_count: int
    first_byte_us: int | None
    packed: dict[str, PackedArray] | None = None
    """The packed arrays by name, in the order the span sent them, until the request's arrays are decoded
    together."""
    offsets: np.ndarray | None = None
    values: np.ndarray | Sequence[np.ndarray | None] | None = None
    """One row per packed array after the offsets (tokens, content bytes, wire bytes, paint delay, render, host
    delay); None for an optional array the span did not send, which is all zeros."""
    notes: list[str] = field(default_factory=list)
    """What the sender should hear about this span's timeline (``partial_success`` warnings)."""
    first_chunk_lost: bool = False
    """The sender dropped span events, the oldest first: the stored chunks do not begin with the stream's first."""
    sizes_unknown: bool = False
    """Each chunk's arrival is known, not what it carried (``arrivals``). OpenAI-compatible servers send a
    role-only chunk before prefill ends, so the first arrival is the first byte, not the first token: it counts
    as no content (its wait is no gap between tokens) and the time to the first token is unknown. Every later
    arrival counts as content."""
    ttft_us: int | None = None
    """The time to the first token as the span's source measured it, for a stream without chunks."""

    @property
    def subject(self) -> str:
        """The span as warnings and rejections name it, from the ids its row holds."""
        return _named(self.row["span_id"], self.row["trace_id"])


def may_be_too_long(row: dict[str, Any], limits: SpanLimits) -> bool:
    """Whether a string of ``row`` (or of its attributes) may be past ``limits``: most rows are shown short by the
    length of their text columns' strings joined, as no one string is longer than all of them together."""
    try:
        strings = (*_TEXT_COLUMNS(row), *row["attributes"].values())
        joined = "".join(strings)
    except (TypeError, KeyError):  # a column that holds no string, or none at all: look at each
        return True
    return len(joined) > limits.max_string_length and max(map(len, strings)) > limits.max_string_length


def span_subject(span: Message) -> str:
    return _named(span.span_id.hex(), span.trace_id.hex())


def _named(span_id: str, trace_id: str) -> str:
    """How warnings and rejections name a span, by its ids in hex."""
    return f"span {span_id or '?'} of trace {trace_id or '?'}"


def stream_row(
    span: Message,
    scalars: dict[str, Any],
    tenant: str,
    service: str,
    resource: dict[str, str],
    *,
    side: str,
    encoding: str,
    coverage: str,
    source: str = columns.SOURCE_STREAMSCOPE,
) -> dict[str, Any]:
    """A stream's ``streams`` row from its span's attributes (plain values), before its timeline's statistics.

    Each attribute the span sent is read into its column (``_COLUMN_OF``), in one pass over what was sent; a column
    whose attribute was not sent keeps its default (``_COLUMN_DEFAULTS``). The row starts as a copy of one that
    holds every key (``_ROW_DEFAULTS``): a copy takes the keys' table whole, where adding some seventy keys one by
    one would grow it several times."""
    row = _ROW_DEFAULTS.copy()
    row["tenant"] = tenant
    row["start_time"] = span.start_time_unix_nano // 1000
    row["duration_us"] = (span.end_time_unix_nano - span.start_time_unix_nano) // 1000
    row["trace_id"] = span.trace_id.hex()
    row["span_id"] = span.span_id.hex()
    row["parent_span_id"] = span.parent_span_id.hex()
    row["service"] = service
    row["side"] = side
    row["span_name"] = span.name
    row["encoding"] = encoding
    row["timeline_truncated"] = coverage == columns.COVERAGE_PARTIAL
    row["source"] = source
    row["coverage"] = coverage
    row["resource_attributes"] = resource
    others = row["attributes"] = {}
    for key, value in scalars.items():
        if (column := _COLUMN_OF.get(key)) is not None:
            name, read, _ = column
            row[name] = read(key, value)
        elif key not in _PROMOTED:
            others[key] = stringify(value)
    row["model"] = row["response_model"] or row["request_model"]
    return row


def json_progress(scalars: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The ``json_*`` columns from the streamscope.json.* attributes. What does not read as the convention says
    is left out, with a note to the sender, rather than stored as a wrong time; the stream itself is kept."""
    document = scalars.get(sc.STREAMSCOPE_JSON_DOCUMENT)
    if document is None:
        return {}
    outcome = scalars.get(sc.STREAMSCOPE_JSON_OUTCOME)
    if document not in sc.STREAMSCOPE_JSON_DOCUMENT_VALUES or outcome not in sc.STREAMSCOPE_JSON_OUTCOME_VALUES:
        notes.append(
            f"{sc.STREAMSCOPE_JSON_DOCUMENT} with {sc.STREAMSCOPE_JSON_OUTCOME} is not one of "
            f"{', '.join(sc.STREAMSCOPE_JSON_DOCUMENT_VALUES)} with {', '.join(sc.STREAMSCOPE_JSON_OUTCOME_VALUES)}: "
            "its JSON progress was not stored"
        )
        return {}
    valid = _natural(scalars.get(sc.STREAMSCOPE_JSON_VALID_OFFSET_US), LATEST_OFFSET_US)
    count = _natural(scalars.get(sc.STREAMSCOPE_JSON_FIELD_COUNT), 2**63 - 1)
    names = scalars.get(sc.STREAMSCOPE_JSON_FIELD_NAMES, [])
    offsets = scalars.get(sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US, [])
    names = names if isinstance(names, list) else [names]
    offsets = [_natural(o, LATEST_OFFSET_US) for o in (offsets if isinstance(offsets, list) else [offsets])]
    fields_read = len(names) == len(offsets) and None not in offsets and all(isinstance(n, str) for n in names)
    if not fields_read or (outcome == "valid") != (valid is not None) or count is None or count < len(names):
        notes.append(
            f"the {sc.STREAMSCOPE_JSON_DOCUMENT} attributes disagree (an outcome {outcome} needs a valid offset "
            "exactly when valid, as many field offsets as names, whole microseconds, a field count at least the "
            "names): its JSON progress was not stored"
        )
        return {}
    return {
        "json_document": document,
        "json_outcome": outcome,
        "json_valid_us": valid,
        "json_field_count": min(count, U32_MAX),
        "json_fields": names,
        "json_field_us": offsets,
    }


def _natural(value: Any, largest: int) -> int | None:
    """A whole number in 0..largest, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= largest:
        return None
    return value


def dropped_events(span: Message, kept: str, first: str) -> str:
    """What the sender hears when it dropped span events: the OTel SDK drops the oldest, so the head is lost."""
    return (
        f"the sender dropped {span.dropped_events_count} of its span events (its span event limit), the oldest"
        f" first: stored as a partial timeline of the {kept} kept, time to first {first} unknown"
    )


def check_ids_and_times(span: Message) -> None:
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id) or not any(span.span_id):
        raise SpanRejected("invalid trace or span id")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise SpanRejected("span ends before it starts")
    if span.start_time_unix_nano > LATEST_START_NS:
        raise SpanRejected("span starts after 2299-12-24, past the times the store holds")


def stringified(attributes: dict[str, Any]) -> dict[str, str]:
    return {k: stringify(v) for k, v in attributes.items()}


def _text(_: str, value: Any) -> str:
    return stringify(value)


def _str(_: str, value: Any) -> str:
    return str(value)


def _string_list(_: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [stringify(v) for v in value]
    return [stringify(value)]


def bounded_int(key: str, value: Any, largest: int) -> int | None:
    """An integer attribute's value in 0..largest (an integral double counts); anything else rejects the span."""
    if value is None:
        return None
    integral = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not integral or not 0 <= value <= largest:
        raise SpanRejected(f"{key} must be an integer in 0..{largest}")
    return int(value)


def _count(key: str, value: Any) -> int | None:
    return bounded_int(key, value, U32_MAX)


def offset_attribute(key: str, value: Any) -> int | None:
    return bounded_int(key, value, LATEST_OFFSET_US)


def _port(key: str, value: Any) -> int:
    return bounded_int(key, value, 65535) or 0


def chunk_seq(scalars: dict[str, Any], key: str, chunk_count: int, events_dropped: bool) -> int | None:
    """A chunk index attribute as a ``chunks.seq``; an index past the stream's chunks rejects the span.

    When the sender dropped span events (the OTel SDK drops the oldest) the stored seqs no longer count from
    the sender's first chunk, so the index cannot be placed and is stored as unknown.
    """
    index = _count(key, scalars.get(key))
    if index is None or events_dropped:
        return None
    if index >= chunk_count:
        raise SpanRejected(f"{key} is outside the stream's {chunk_count} chunks")
    return index


def _enum(allowed: tuple[str, ...], default: str) -> Callable[[str, Any], str]:
    """A reader of an attribute that must be one of ``allowed`` (None: ``default``)."""

    def read(key: str, value: Any) -> str:
        if value is None:
            return default
        if value not in allowed:
            raise SpanRejected(f"{key} must be one of {', '.join(allowed)}")
        return str(value)

    return read


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpanRejected(f"{key} must be a boolean")
    return value


def _float(_: str, value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


_COLUMN_OF: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    sc.GEN_AI_OPERATION_NAME: ("operation", _text, ""),
    sc.GEN_AI_PROVIDER_NAME: ("provider", _text, ""),
    sc.GEN_AI_REQUEST_MODEL: ("request_model", _str, ""),
    sc.GEN_AI_RESPONSE_MODEL: ("response_model", _str, ""),
    sc.GEN_AI_RESPONSE_ID: ("response_id", _text, ""),
    sc.SERVER_ADDRESS: ("server_address", _text, ""),
    sc.SERVER_PORT: ("server_port", _port, 0),
    sc.HTTP_ROUTE: ("route", _text, ""),
    sc.STREAMSCOPE_TRANSPORT: ("transport", _enum(sc.STREAMSCOPE_TRANSPORT_VALUES, ""), ""),
    sc.STREAMSCOPE_OUTCOME: ("outcome", _enum(sc.STREAMSCOPE_OUTCOME_VALUES, "completed"), "completed"),
    sc.ERROR_TYPE: ("error_type", _text, ""),
    sc.GEN_AI_RESPONSE_FINISH_REASONS: ("finish_reasons", _string_list, []),
    sc.STREAMSCOPE_NODE_NAME: ("node_name", _text, ""),
    sc.STREAMSCOPE_ENGINE_REQUEST_ID: ("engine_request_id", _text, ""),
    sc.GEN_AI_USAGE_INPUT_TOKENS: ("input_tokens", _count, None),
    sc.GEN_AI_USAGE_OUTPUT_TOKENS: ("output_tokens", _count, None),
    sc.STREAMSCOPE_TOKENS_ESTIMATED: ("tokens_estimated", _flag, False),
    sc.STREAMSCOPE_CANCEL_OFFSET_US: ("cancel_offset_us", offset_attribute, None),
    sc.STREAMSCOPE_TOKENS_AFTER_CANCEL: ("tokens_after_cancel", _count, None),
    sc.STREAMSCOPE_REPETITION_SCORE: ("repetition_score", _float, None),
    sc.STREAMSCOPE_HOST_WATCH: ("host_watch", _enum(sc.STREAMSCOPE_HOST_WATCH_VALUES, ""), ""),
}
"""The streams column each attribute is read into, its reader (which may reject the span), and its value when the
attribute was not sent."""
_COLUMN_DEFAULTS = {column: default for column, _, default in _COLUMN_OF.values()}
"""Each of those columns when its attribute was not sent (never changed in place: rows share these values)."""
_ROW_DEFAULTS: dict[str, Any] = dict.fromkeys(
    ("tenant", "start_time", "duration_us", "trace_id", "span_id", "parent_span_id", "service", "side", "span_name")
) | {
    **_COLUMN_DEFAULTS,
    "encoding": "",
    "timeline_truncated": False,
    "first_tool_call_seq": None,
    "source": columns.SOURCE_STREAMSCOPE,
    "coverage": columns.COVERAGE_FULL,
    **columns.JSON_PROGRESS_UNKNOWN,
    **columns.NOTHING_RETRACTED,
    "resource_attributes": None,
    "attributes": None,
    "model": "",
}
"""Every key of a row from ``stream_row``, each set there or left at its default."""
