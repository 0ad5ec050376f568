"""Which panels make up each Grafana dashboard, and how they are laid out (rows of panels, widths out of 24)."""

from __future__ import annotations

from dataclasses import dataclass

from streamscope_dashboards import panels as p

Row = tuple[tuple[p.Panel, int], ...]


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    trace_variable: bool = False
    """A text box for one trace id (the drilldown) instead of the fleet filters."""

    @property
    def panels(self) -> list[p.Panel]:
        return [panel for row in self.rows for panel, _ in row]


STREAM_QUALITY = Board(
    "streamscope-quality",
    "Stream quality",
    "What users feel: time to first token and the rhythm of the rest, per stream, against the ITL SLO.",
    (
        ((p.FLEET_STATS, 24),),
        ((p.ITL_HEATMAP, 16), (p.STREAM_P99_HISTOGRAM, 8)),
        ((p.ITL_GOODPUT, 12), (p.TTFT_OVER_TIME, 12)),
        ((p.STREAM_SHAPE, 12), (p.STREAM_QUALITY, 12)),
        ((p.SMOOTHING_TRADE, 24),),
        ((p.STRUCTURED_OUTPUT, 24),),
        ((p.RETRACTED_TEXT, 24),),
        ((p.MODEL_TEXTURE, 24),),
        ((p.STREAM_SOURCES, 24),),
        ((p.GENAI_METRICS, 24),),
    ),
)

ATTRIBUTION = Board(
    "streamscope-attribution",
    "Jitter attribution",
    "Where each stall came from: causes over time, the nodes' KV pressure, preemptions and step sizes against "
    "them, the client's gap next to the server's, and where a browser's first token spent its time.",
    (
        ((p.STALLS_BY_CAUSE, 16), (p.STALL_CAUSES, 8)),
        ((p.KV_USAGE, 8), (p.PREEMPTIONS, 8), (p.STEP_TOKENS, 8)),
        ((p.CLIENT_VS_SERVER, 14), (p.ENGINE_EVENTS, 10)),
        ((p.GPU_TO_GLASS, 24),),
    ),
)

TRACE_COST = Board(
    "streamscope-cost",
    "Trace cost per chunk",
    "What a chunk costs on the wire, in OTLP, on disk and on the user's screen, and whether a provider started "
    "sending fewer tokens per chunk.",
    (
        ((p.TOKENS_PER_CHUNK, 12), (p.OTLP_BYTES_PER_CHUNK, 12)),
        ((p.CHUNK_ECONOMICS, 24),),
        ((p.CHUNKING_CHANGES, 12), (p.CANCELLATION, 12)),
        ((p.BROWSER_RENDER, 24),),
    ),
)

DRILLDOWN = Board(
    "streamscope-drilldown",
    "Stream drilldown",
    "One trace: each side's chunk timeline, its stalls with their evidence, and what its node did meanwhile.",
    (
        ((p.STREAM_TIMELINE, 24),),
        ((p.TRACE_STREAMS, 24),),
        ((p.TRACE_STALLS, 12), (p.TRACE_NODE_EVENTS, 12)),
    ),
    trace_variable=True,
)

SERVING_NODES = Board(
    "streamscope-nodes",
    "Serving nodes",
    "Engine and GPU telemetry from the GPU agents, per node.",
    (
        ((p.KV_USAGE, 8), (p.REQUESTS_WAITING, 8), (p.SPEC_ACCEPTANCE, 8)),
        ((p.PREEMPTIONS, 8), (p.STEP_TOKENS, 8), (p.GPU_UTILIZATION, 8)),
        ((p.GPU_MEMORY, 12), (p.GPU_POWER, 12)),
        ((p.ENGINE_EVENTS, 24),),
    ),
)

BOARDS: tuple[Board, ...] = (STREAM_QUALITY, ATTRIBUTION, TRACE_COST, DRILLDOWN, SERVING_NODES)
