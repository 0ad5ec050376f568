"""The accepted streams and their timelines as the ``streams`` and ``chunk_arrays`` column blocks: per-stream
figures computed once for the request's chunks together."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.decode.retractions import retraction_stats
from streamscope_ingest.decode.timeline import PerStream, build_timeline, stream_stats
from streamscope_ingest.decode.traces.rows import Stream
from streamscope_ingest.decode.traces.timelines import Timelines, or_zeros


def _tool_call_pauses(rows: list[dict[str, Any]], lengths: np.ndarray, gap_us: np.ndarray) -> list[int | None]:
    """Each stream's gap before the chunk at its ``first_tool_call_seq``; None without one (or without the chunks
    it counts, a stream stored without its timeline)."""
    starts = np.cumsum(lengths) - lengths
    return [
        int(gap_us[starts[i] + seq]) if (seq := row["first_tool_call_seq"]) is not None and seq < lengths[i] else None
        for i, row in enumerate(rows)
    ]


def column_blocks(streams: list[Stream], timelines: Timelines, stall: StallRule) -> tuple[pa.Table, pa.Table]:
    lengths, offsets, values = timelines
    (tokens, content, wire, paint_delay, render, host_delay, host_held, host_held_total, retracted_bytes,
     retracted_tokens) = values  # fmt: skip
    tokens, content = or_zeros(tokens, offsets.size), or_zeros(content, offsets.size)  # required: sent
    sizes = content
    unknown = np.fromiter((s.sizes_unknown for s in streams), bool, len(streams))
    if unknown.any():  # arrivals only: each is content but the first, which may have carried only a role
        sizes = np.where(np.repeat(unknown, lengths), 1, content)
        firsts = (np.cumsum(lengths) - lengths)[unknown & (lengths > 0)]
        sizes[firsts] = 0
    timeline = build_timeline(lengths, offsets, sizes, retracted_bytes)
    stats = stream_stats(lengths, offsets, tokens, content, wire, timeline, stall)
    taken_back = retraction_stats(lengths, offsets, content, retracted_bytes, retracted_tokens)
    rows = [s.row for s in streams]

    first_byte = PerStream(stats.first_chunk_us.values.copy(), stats.first_chunk_us.present.copy())
    # the first chunks lost, the first stored is not the first: times to it are unknown, and so is the head
    lost = np.fromiter((s.first_chunk_lost for s in streams), dtype=bool, count=len(streams))
    first_byte.present[lost] = stats.ttft_us.present[lost] = False
    stats.ttft_us.present[unknown] = False  # which arrival carried the first token is not known
    stats.head_tokens[lost] = 0
    for index, stream in enumerate(streams):  # a source that measured the first token but sent no chunks
        if stream.ttft_us is not None and not stream.chunk_count:
            stats.ttft_us.values[index], stats.ttft_us.present[index] = stream.ttft_us, True
    sent = np.fromiter((s.first_byte_us is not None for s in streams), dtype=bool, count=len(streams))
    first_byte.values[sent] = [s.first_byte_us for s in streams if s.first_byte_us is not None]
    first_byte.present[sent] = True  # the span says when its first byte came: not its first chunk
    derived = {
        "chunk_count": pa.array(lengths, pa.uint32()),
        "content_chunks": pa.array(stats.content_chunks),
        "tokens": pa.array(stats.tokens, pa.uint32()),
        "content_bytes": pa.array(stats.content_bytes),
        "wire_bytes": pa.array(stats.wire_bytes),
        "ttfb_us": _nullable(first_byte, pa.uint64()),
        "ttft_us": _nullable(stats.ttft_us, pa.uint64()),
        "gap_p50_us": _nullable(stats.gap_quantiles_us[0.5], pa.uint32()),
        "gap_p95_us": _nullable(stats.gap_quantiles_us[0.95], pa.uint32()),
        "gap_p99_us": _nullable(stats.gap_quantiles_us[0.99], pa.uint32()),
        "gap_max_us": _nullable(stats.gap_max_us, pa.uint32()),
        "jitter_ratio": _nullable(stats.jitter_ratio, pa.float32()),
        "stall_count": pa.array(stats.stall_count),
        "rest_stalled_us": pa.array(stats.rest_stalled_us, pa.uint64()),
        "stall_threshold_us": pa.array(np.full(len(streams), stall.threshold_us, dtype=np.uint32)),
        "last_content_us": _nullable(stats.last_content_us, pa.uint64()),
        "head_tokens": pa.array(stats.head_tokens),
        "content_chunks_by_tokens": stats.chunks_by_tokens.map_array(),
        "retractions": pa.array(taken_back.count),
        "retracted_bytes": pa.array(taken_back.bytes),
        "retracted_tokens": pa.array(taken_back.tokens),
        "retraction_shown_us": pa.array(taken_back.shown_us, pa.list_(pa.uint64())),
        "tool_call_pause_us": pa.array(_tool_call_pauses(rows, lengths, timeline.gap_us), pa.uint32()),
    }
    derived["resource_attributes"] = _shared_maps(
        [r["resource_attributes"] for r in rows], columns.STREAMS_DECODED.field("resource_attributes").type
    )
    decoded = columns.STREAMS_DECODED
    from_rows = pa.Table.from_pylist(rows, schema=pa.schema(f for f in decoded if f.name not in derived))
    stream_columns = [derived[name] if name in derived else from_rows[name] for name in decoded.names]
    streams_block = pa.Table.from_arrays(stream_columns, schema=decoded)

    total = offsets.size
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))

    def chunk_values(values: np.ndarray | None, name: str) -> pa.ListArray:
        """A per-chunk column as one list per stream; for a column stored with a default, a stream's zeros as an
        empty list. None is an array no stream sent: all zeros."""
        item_type = columns.CHUNKS_DECODED.field(name).type.value_type
        if name in columns.CHUNKS_DEFAULTED.names:
            return columns.zeros_left_empty(lengths, np.empty(0, np.int64) if values is None else values, item_type)
        items = or_zeros(values, total).astype(item_type.to_pandas_dtype(), copy=False)
        return pa.ListArray.from_arrays(offsets, pa.array(items))

    stream_values = {name: streams_block[name] for name in ("tenant", "start_time", "service", "side", "provider")}
    chunks_block = pa.Table.from_pydict(
        {
            **stream_values,
            "trace_id_bytes": columns.ids_as_bytes(streams_block["trace_id"], "trace_id_bytes"),
            "span_id_bytes": columns.ids_as_bytes(streams_block["span_id"], "span_id_bytes"),
            "model": pa.array([r["model"] for r in rows], pa.string()).dictionary_encode(),
            "kind": chunk_values(timeline.kind, "kind"),
            "gap_us": chunk_values(timeline.gap_us, "gap_us"),
            "tokens": chunk_values(tokens, "tokens"),
            "content_bytes": chunk_values(content, "content_bytes"),
            "wire_bytes": chunk_values(wire, "wire_bytes"),
            "paint_delay_us": chunk_values(paint_delay, "paint_delay_us"),
            "render_us": chunk_values(render, "render_us"),
            "host_delay_us": chunk_values(host_delay, "host_delay_us"),
            "host_held_us": chunk_values(host_held, "host_held_us"),
            "host_held_total_us": chunk_values(host_held_total, "host_held_total_us"),
            "retracted_bytes": chunk_values(retracted_bytes, "retracted_bytes"),
            "retracted_tokens": chunk_values(retracted_tokens, "retracted_tokens"),
        },
        schema=columns.CHUNKS_DECODED,
    )
    return streams_block, chunks_block


def _shared_maps(maps: list[dict[str, str]], arrow_type: pa.DataType) -> pa.Array:
    """A map column whose rows share a few dicts (each resource's attributes, for all its spans): each distinct
    dict converted once, then repeated where it is shared."""
    position: dict[int, int] = {}  # by identity: the maps are alive, so no two share an id
    distinct: list[dict[str, str]] = []
    for shared in maps:
        if id(shared) not in position:
            position[id(shared)] = len(distinct)
            distinct.append(shared)
    index = pa.array([position[id(shared)] for shared in maps], pa.int32())
    return pa.array(distinct, arrow_type).take(index)


def _nullable(values: PerStream, arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values.values, mask=~values.present).cast(arrow_type)
