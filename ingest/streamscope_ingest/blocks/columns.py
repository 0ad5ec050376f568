"""Arrow schemas of the blocks ingest writes: one per table, in the tables' column order.

They mirror schema/migrations (a test compares them with the DDL the migrations create); columns with a
DEFAULT in the DDL (``ingested_at``) are filled by the store, so they are absent here. Chunks are written to
``chunk_arrays``, one row a stream; ``chunks`` is the view of them with one row a chunk. Some columns with a
DEFAULT are written all the same: ``chunk_arrays.host_delay_us`` and the like (``CHUNKS_DECODED``), whose
default, an empty array, readers take as zeros as long as the row's other arrays (rows written without them, stored
or spooled by an earlier version, or whose chunks were all zeros), and
``streams.source`` and ``coverage`` (``STREAMS_DECODED``), whose defaults say what such rows were.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_LC = pa.dictionary(pa.int32(), pa.string())
_TIME = pa.timestamp("us", tz="UTC")
_ATTRS = pa.map_(pa.string(), pa.string())

STREAMS = pa.schema(
    [
        ("tenant", _LC),
        ("start_time", _TIME),
        ("duration_us", pa.uint64()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("service", _LC),
        ("side", _LC),
        ("span_name", _LC),
        ("operation", _LC),
        ("provider", _LC),
        ("request_model", _LC),
        ("response_model", _LC),
        ("response_id", pa.string()),
        ("server_address", _LC),
        ("server_port", pa.uint16()),
        ("route", _LC),
        ("transport", _LC),
        ("encoding", _LC),
        ("outcome", _LC),
        ("error_type", _LC),
        ("finish_reasons", pa.list_(pa.string())),
        ("node_name", _LC),
        ("engine_request_id", pa.string()),
        ("input_tokens", pa.uint32()),
        ("output_tokens", pa.uint32()),
        ("chunk_count", pa.uint32()),
        ("content_chunks", pa.uint32()),
        ("tokens", pa.uint32()),
        ("tokens_estimated", pa.bool_()),
        ("content_bytes", pa.uint64()),
        ("wire_bytes", pa.uint64()),
        ("ttfb_us", pa.uint64()),
        ("ttft_us", pa.uint64()),
        ("gap_p50_us", pa.uint32()),
        ("gap_p95_us", pa.uint32()),
        ("gap_p99_us", pa.uint32()),
        ("gap_max_us", pa.uint32()),
        ("jitter_ratio", pa.float32()),
        ("stall_count", pa.uint32()),
        ("stall_threshold_us", pa.uint32()),
        ("timeline_truncated", pa.bool_()),
        ("cancel_offset_us", pa.uint64()),
        ("tokens_after_cancel", pa.uint32()),
        ("repetition_score", pa.float32()),
        ("last_content_us", pa.uint64()),
        ("head_tokens", pa.uint32()),
        ("first_tool_call_seq", pa.uint32()),
        ("content_chunks_by_tokens", pa.map_(pa.uint16(), pa.uint32())),
        ("host_watch", _LC),
        ("attributes", _ATTRS),
        ("resource_attributes", _ATTRS),
    ]
)

STREAMS_DEFAULTED = pa.schema(
    [
        ("source", _LC),
        ("coverage", _LC),
        ("json_document", _LC),
        ("json_outcome", _LC),
        ("json_valid_us", pa.uint64()),
        ("json_field_count", pa.uint32()),
        ("json_fields", pa.list_(pa.string())),
        ("json_field_us", pa.list_(pa.uint64())),
        ("retractions", pa.uint32()),
        ("retracted_bytes", pa.uint64()),
        ("retracted_tokens", pa.uint64()),
        ("retraction_shown_us", pa.list_(pa.uint64())),
        ("tool_call_pause_us", pa.uint32()),
        ("rest_stalled_us", pa.uint64()),
    ]
)
"""Columns of streams that decode writes although their DDL has a DEFAULT (migrations 0023, 0026, 0027, 0031 and
0037), for rows written without them (by an earlier version)."""
JSON_PROGRESS_UNKNOWN: dict[str, object] = {
    "json_document": "",
    "json_outcome": "",
    "json_valid_us": None,
    "json_field_count": 0,
    "json_fields": [],
    "json_field_us": [],
}
"""The ``json_*`` columns of a stream whose emitter followed no JSON document (what the DDL defaults to)."""
NOTHING_RETRACTED: dict[str, object] = {
    "retractions": 0,
    "retracted_bytes": 0,
    "retracted_tokens": 0,
    "retraction_shown_us": [],
}
"""The retraction columns of a stream that took nothing back (what the DDL defaults to)."""
PAUSE_UNKNOWN: dict[str, object] = {"tool_call_pause_us": None, "rest_stalled_us": None}
"""The tool call pause and the time stalled past the head of a stream decoded before they were kept (what the DDL
defaults to)."""
STREAMS_DECODED = pa.unify_schemas([STREAMS, STREAMS_DEFAULTED])
"""What decode writes to streams: ``STREAMS`` then ``STREAMS_DEFAULTED``."""
SOURCE_STREAMSCOPE = "streamscope"
"""``streams.source`` of spans in streamscope's own convention (the SDK, the browser snippet, ServerStream)."""
COVERAGE_FULL, COVERAGE_PARTIAL, COVERAGE_UNREADABLE = "full", "partial", "unreadable"
"""``streams.coverage``: how much of a stream's timeline is known (migration 0023 lists every value)."""
OUTCOME_UNKNOWN = "unknown"
"""``streams.outcome`` beside ``streamscope.outcome``'s values: a stream whose source did not say how it ended
(migration 0037)."""

CHUNK_KINDS = ("lead", "first", "content", "aside", "retract")
"""Values of chunks.kind, in the order of their Enum8 codes."""
KIND_LEAD, KIND_FIRST, KIND_CONTENT, KIND_ASIDE, KIND_RETRACT = range(5)

CHUNKS = pa.schema(  # the table chunk_arrays: one row a stream, the chunks' values in arrays (migration 0020)
    [
        ("tenant", _LC),
        ("start_time", _TIME),
        ("trace_id_bytes", pa.binary(16)),
        ("span_id_bytes", pa.binary(8)),
        ("service", _LC),
        ("side", _LC),
        ("provider", _LC),
        ("model", _LC),
        ("kind", pa.list_(pa.int8())),
        ("gap_us", pa.list_(pa.uint32())),
        ("tokens", pa.list_(pa.uint16())),
        ("content_bytes", pa.list_(pa.uint32())),
        ("wire_bytes", pa.list_(pa.uint32())),
    ]
)
CHUNKS_DEFAULTED = pa.schema(
    [
        ("paint_delay_us", pa.list_(pa.uint32())),
        ("render_us", pa.list_(pa.uint32())),
        ("host_delay_us", pa.list_(pa.uint32())),
        ("host_held_us", pa.list_(pa.uint32())),
        ("host_held_total_us", pa.list_(pa.uint32())),
        ("retracted_bytes", pa.list_(pa.uint32())),
        ("retracted_tokens", pa.list_(pa.uint16())),
    ]
)
"""Columns of chunk_arrays that decode writes although their DDL has a DEFAULT (migrations 0022, 0027, 0029, 0036
and 0038), a stream's zeros as an empty array, as the store keeps them: readers take an empty array as zeros, one a
chunk."""
CHUNKS_DECODED = pa.unify_schemas([CHUNKS, CHUNKS_DEFAULTED])
"""What decode writes to chunk_arrays: ``CHUNKS`` then ``CHUNKS_DEFAULTED``."""


def completed(table: str, block: pa.Table) -> pa.Table:
    """``block`` of ``table`` with the columns it lacks because an earlier version decoded it (a batch left in the
    spool) given the values the store gives such rows, so that it concatenates with blocks decoded now."""
    present = set(block.schema.names)  # read once: each read of the names builds them anew
    if table == "chunk_arrays":
        for field in CHUNKS_DEFAULTED:
            if field.name not in present:
                nothing = zeros_left_empty(np.zeros(block.num_rows, np.int64), np.empty(0), field.type.value_type)
                block = block.append_column(field, nothing)
    elif table == "streams":
        if "host_watch" not in present:
            block = _with_column(block, "host_watch", pa.array([""] * block.num_rows, _LC))
        if "source" not in present:
            block = _with_column(block, "source", pa.array([SOURCE_STREAMSCOPE] * block.num_rows, _LC))
        if "coverage" not in present:
            truncated = block["timeline_truncated"].to_numpy(zero_copy_only=False)
            coverage = np.where(truncated, COVERAGE_PARTIAL, COVERAGE_FULL).tolist()
            block = _with_column(block, "coverage", pa.array(coverage, _LC))
        for name, value in (JSON_PROGRESS_UNKNOWN | NOTHING_RETRACTED | PAUSE_UNKNOWN).items():
            if name not in present:
                field = STREAMS_DECODED.field(name)
                block = _with_column(block, name, pa.array([value] * block.num_rows, field.type))
    return block


def without_zero_defaults(block: pa.Table) -> pa.Table:
    """A chunk_arrays ``block`` whose ``CHUNKS_DEFAULTED`` arrays are left empty in each row where they hold only
    zeros, and left out where every row's are: the store keeps an empty array (their DEFAULT), which readers take as
    the same zeros, instead of a zero a chunk to write and merge (docs/benchmarks.md)."""
    for field in CHUNKS_DEFAULTED:
        if field.name not in block.column_names:
            continue
        lists = block[field.name].combine_chunks()
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        values = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
        emptied = zeros_left_empty(lengths, values, field.type.value_type)
        index = block.schema.get_field_index(field.name)
        block = block.set_column(index, field, emptied) if len(emptied.values) else block.remove_column(index)
    return block


def per_chunk(arrays: pa.Table, name: str) -> pa.Array:
    """A column of a chunk_arrays block as one value a chunk: an empty array of a ``CHUNKS_DEFAULTED`` column read as
    zeros, as the chunks view reads it."""
    lists = arrays[name].combine_chunks()
    if name not in CHUNKS_DEFAULTED.names:
        return pc.list_flatten(lists)
    lengths = pc.list_value_length(arrays["gap_us"]).to_numpy(zero_copy_only=False)
    item_type = lists.type.value_type
    values = np.zeros(int(lengths.sum()), dtype=item_type.to_pandas_dtype())
    stored = pc.list_value_length(lists).to_numpy(zero_copy_only=False) > 0
    values[np.repeat(stored, lengths)] = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    return pa.array(values, item_type)


def zeros_left_empty(lengths: np.ndarray, values: np.ndarray, item_type: pa.DataType) -> pa.ListArray:
    """Per-chunk ``values``, ``lengths[i]`` of them for row ``i``, as a list a row, a row of zeros as an empty list:
    how chunk_arrays keeps the ``CHUNKS_DEFAULTED`` arrays (migration 0036). Empty ``values`` are all zeros."""
    valued = np.zeros(lengths.size, dtype=bool)
    nonempty = lengths > 0
    if values.size:
        starts = np.cumsum(lengths) - lengths
        valued[nonempty] = np.maximum.reduceat(values, starts[nonempty]) > 0
    offsets = np.concatenate(([0], np.cumsum(np.where(valued, lengths, 0)))).astype(np.int32)
    kept = (values[np.repeat(valued, lengths)] if values.size else values).astype(item_type.to_pandas_dtype())
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(kept, item_type))


def _with_column(block: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return block.add_column(STREAMS_DECODED.get_field_index(name), STREAMS_DECODED.field(name), values)


def ids_as_bytes(hex_ids: pa.Array | pa.ChunkedArray, column: str) -> pa.Array:
    """Hex ids as the bytes that ``CHUNKS``'s ``column`` holds; each distinct id is decoded once."""
    ids = hex_ids.combine_chunks() if isinstance(hex_ids, pa.ChunkedArray) else hex_ids
    if not pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_encode()
    as_bytes = pa.array([bytes.fromhex(v) for v in ids.dictionary.to_pylist()], CHUNKS.field(column).type)
    return as_bytes.take(ids.indices)


def span_keys(
    tenants: pa.Array | pa.ChunkedArray,
    trace_ids: pa.Array | pa.ChunkedArray,
    span_ids: pa.Array | pa.ChunkedArray,
    as_type: pa.DataType,
) -> pa.Array | pa.ChunkedArray:
    """Each row's span as one key, its tenant first: ``tenant/`` then the trace and span ids, as ``pa.string()`` for
    hex ids, as ``pa.binary()`` for bytes. A span of another tenant with the same ids is another span."""
    tenant = pc.cast(pc.cast(tenants, pa.string()), as_type)
    separator = b"" if as_type == pa.binary() else ""
    slash = b"/" if as_type == pa.binary() else "/"
    return pc.binary_join_element_wise(
        tenant, pa.scalar(slash, as_type), pc.cast(trace_ids, as_type), pc.cast(span_ids, as_type), separator
    )


GROUND_TRUTH = pa.schema(
    [
        ("tenant", _LC),
        ("start_time", _TIME),
        ("end_time", _TIME),
        ("cause", _LC),
        ("node_name", _LC),
        ("scenario", _LC),
        ("trace_id", pa.string()),
        ("request_id", pa.string()),
        ("chunk_indices", pa.list_(pa.uint32())),
        ("magnitude", pa.float64()),
        ("service", _LC),
        ("attributes", _ATTRS),
    ]
)

ENGINE_SAMPLES = pa.schema(
    [
        ("tenant", _LC),
        ("time", _TIME),
        ("node_name", _LC),
        ("host", _LC),
        ("engine_url", _LC),
        ("source", _LC),
        ("metric", _LC),
        ("engine", _LC),
        ("gpu_uuid", _LC),
        ("gpu_index", pa.int16()),
        ("value", pa.float64()),
    ]
)

GENAI_METRICS = pa.schema(
    [
        ("tenant", _LC),
        ("time", _TIME),
        ("start_time", _TIME),
        ("metric", _LC),
        ("unit", _LC),
        ("temporality", _LC),
        ("series", pa.uint64()),
        ("service", _LC),
        ("source", _LC),
        ("operation", _LC),
        ("provider", _LC),
        ("model", _LC),
        ("server_address", _LC),
        ("token_type", _LC),
        ("error_type", _LC),
        ("count", pa.uint64()),
        ("sum", pa.float64()),
        ("min", pa.float64()),
        ("max", pa.float64()),
        ("bounds", pa.list_(pa.float64())),
        ("bucket_counts", pa.list_(pa.uint64())),
        ("attributes", _ATTRS),
    ]
)

ENGINE_EVENTS = pa.schema(
    [
        ("tenant", _LC),
        ("start_time", _TIME),
        ("end_time", _TIME),
        ("node_name", _LC),
        ("host", _LC),
        ("engine", _LC),
        ("kind", _LC),
        ("magnitude", pa.float64()),
        ("gpu_uuid", _LC),
        ("xid", pa.int32()),
        ("attributes", _ATTRS),
    ]
)

_ANALYSED_STREAM = [
    ("tenant", _LC),
    ("start_time", _TIME),
    ("trace_id", pa.string()),
    ("span_id", pa.string()),
    ("service", _LC),
    ("side", _LC),
    ("model", _LC),
    ("node_name", _LC),
]
"""The columns that name a stream in the attribution job's per-stream tables (stream_quality, stream_smoothing)."""
_WAIT = [*_ANALYSED_STREAM[:2], ("end_time", _TIME), *_ANALYSED_STREAM[2:]]
"""The columns that name a wait the attribution job judged (a stall, a slow start): its stream and its window."""
_VERDICT = [("cause", _LC), ("confidence", pa.float32()), ("evidence", _ATTRS)]

STALLS = pa.schema(
    [
        *_WAIT,
        ("seq", pa.uint32()),
        ("gap_us", pa.uint32()),
        ("server_gap_us", pa.uint32()),
        ("server_seq", pa.uint32()),
        *_VERDICT,
    ]
)

SLOW_STARTS = pa.schema(
    [
        *_WAIT,
        ("ttft_us", pa.uint32()),
        ("upstream_us", pa.uint32()),
        ("path_us", pa.uint32()),
        ("host_us", pa.uint32()),
        *_VERDICT,
    ]
)

STREAM_QUALITY = pa.schema(
    [
        *_ANALYSED_STREAM,
        ("stalls", pa.uint32()),
        ("fluidity_index", pa.float32()),
        ("andes_qoe", pa.float32()),
        ("first_deadline_ms", pa.float32()),
        ("token_deadline_ms", pa.float32()),
        ("reading_tokens_per_s", pa.float32()),
    ]
)

STREAM_SMOOTHING = pa.schema(
    [
        *_ANALYSED_STREAM,
        ("depth_ms", pa.float32()),
        ("rate_ms", pa.float32()),
        ("added_ttft_us", pa.uint32()),
        ("added_end_us", pa.uint32()),
        ("stalls_before", pa.uint32()),
        ("stalls_after", pa.uint32()),
        ("longest_gap_before_us", pa.uint32()),
        ("longest_gap_after_us", pa.uint32()),
        ("fluidity_before", pa.float32()),
        ("fluidity_after", pa.float32()),
        ("andes_before", pa.float32()),
        ("andes_after", pa.float32()),
    ]
)

_PER_INTERVAL = [
    ("step", pa.uint16()),
    ("tenant", _LC),
    ("side", _LC),
    ("interval_start", pa.timestamp("s", tz="UTC")),
    ("service", _LC),
]
"""The leading columns of the tables counted per interval (migrations 0030 and 0032)."""
_STREAMS_COUNTED = [("figure", _LC), ("bucket", pa.int16()), ("streams", pa.uint64())]
"""The trailing columns of the per-stream histograms (migration 0032)."""

SMOOTHING_HISTOGRAMS = pa.schema(  # stream_smoothing counted (migration 0032, rollups.stream_histograms)
    [*_PER_INTERVAL, ("model", _LC), ("depth_ms", pa.float32()), *_STREAMS_COUNTED]
)

INGEST_REQUESTS = pa.schema(
    [
        ("tenant", _LC),
        ("time", pa.timestamp("ms", tz="UTC")),
        ("signal", _LC),
        ("transport", _LC),
        ("content_type", _LC),
        ("content_encoding", _LC),
        ("received_bytes", pa.uint64()),
        ("message_bytes", pa.uint64()),
        ("rejected", pa.uint32()),
        ("ignored", pa.uint32()),
        ("rows", pa.map_(pa.string(), pa.uint64())),
    ]
)

ALERTS = pa.schema(
    [
        ("tenant", _LC),
        ("received_at", pa.timestamp("ms", tz="UTC")),
        ("receiver", _LC),
        ("status", _LC),
        ("alertname", _LC),
        ("fingerprint", pa.string()),
        ("starts_at", pa.timestamp("ms", tz="UTC")),
        ("ends_at", pa.timestamp("ms", tz="UTC")),
        ("labels", _ATTRS),
        ("annotations", _ATTRS),
        ("query_values", pa.map_(pa.string(), pa.float64())),
        ("generator_url", pa.string()),
        ("group_key", pa.string()),
    ]
)

GAP_HISTOGRAMS = pa.schema(  # content gaps counted (migration 0030, streamscope_ingest.rollups.gap_histograms)
    [
        *_PER_INTERVAL,
        ("provider", _LC),
        ("model", _LC),
        ("itl_upper_ms", pa.uint16()),
        ("gap_bucket", pa.uint16()),
        ("gaps", pa.uint64()),
        ("gap_max_us", pa.uint32()),
    ]
)

STREAM_HISTOGRAMS = pa.schema(  # per-stream figures counted (migration 0032, rollups.stream_histograms)
    [*_PER_INTERVAL, ("provider", _LC), ("model", _LC), *_STREAMS_COUNTED]
)

STREAM_SUMS = ("streams", "content_chunks", "tokens", "content_bytes", "wire_bytes", "cancelled", "stalled",
               "over_slo", "frontloaded_then_stalled", "stuck_loops", "unknown_outcome", "wired_chunks",
               "wired_content_bytes", "counted_tokens", "counted_chunks")  # fmt: skip
"""The summed columns of ``stream_totals``, in order (migrations 0033, 0037, 0039)."""
STREAM_TOTALS = pa.schema(  # streams summed per interval (migration 0033, rollups.stream_histograms)
    [
        *_PER_INTERVAL,
        ("provider", _LC),
        ("model", _LC),
        ("source", _LC),
        ("coverage", _LC),
        ("tokens_estimated", pa.bool_()),  # counted and estimated tokens summed apart (migration 0037)
        ("node_name", _LC),  # each engine node's streams summed apart (migration 0040)
        *[(name, pa.uint64()) for name in STREAM_SUMS],
        ("content_chunks_by_tokens", pa.map_(pa.uint16(), pa.uint64())),
    ]
)

TABLES: dict[str, pa.Schema] = {  # in write order (ingest/streamscope_ingest/store/writer.py)
    "chunk_arrays": CHUNKS,
    "gap_histograms": GAP_HISTOGRAMS,  # counted by the writer from chunk_arrays
    "stream_histograms": STREAM_HISTOGRAMS,  # counted by the writer from streams
    "stream_totals": STREAM_TOTALS,  # summed by the writer from streams
    "streams": STREAMS,
    "ground_truth": GROUND_TRUTH,
    "engine_samples": ENGINE_SAMPLES,
    "genai_metrics": GENAI_METRICS,
    "engine_events": ENGINE_EVENTS,
    "stalls": STALLS,
    "slow_starts": SLOW_STARTS,
    "stream_quality": STREAM_QUALITY,
    "stream_smoothing": STREAM_SMOOTHING,
    "smoothing_histograms": SMOOTHING_HISTOGRAMS,  # counted by the attribution job from stream_smoothing
    "ingest_requests": INGEST_REQUESTS,
    "alerts": ALERTS,  # Grafana's webhook deliveries: never in a batch with OTLP rows or their request log
}
