"""Which panels make up each Grafana dashboard, and how they are laid out (rows of panels, widths out of 24)."""

from __future__ import annotations

from dataclasses import dataclass

from streamscope_dashboards.panels import attribution, cost, drilldown, nodes, quality
from streamscope_dashboards.panels.common import Panel

Row = tuple[tuple[Panel, int], ...]


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    trace_variable: bool = False
    """A text box for one trace id (the drilldown) instead of the fleet filters."""

    @property
    def panels(self) -> list[Panel]:
        return [panel for row in self.rows for panel, _ in row]


STREAM_QUALITY = Board(
    "streamscope-quality",
    "Stream quality",
    "What users feel: time to first token and the rhythm of the rest, per stream, against the ITL SLO.",
    (
        ((quality.FLEET_STATS, 24),),
        ((quality.ITL_HEATMAP, 16), (quality.STREAM_P99_HISTOGRAM, 8)),
        ((quality.ITL_GOODPUT, 12), (quality.TTFT_OVER_TIME, 12)),
        ((quality.STREAM_SHAPE, 12), (quality.STREAM_QUALITY, 12)),
        ((quality.SMOOTHING_TRADE, 24),),
        ((quality.STRUCTURED_OUTPUT, 24),),
        ((quality.RETRACTED_TEXT, 24),),
        ((quality.MODEL_TEXTURE, 24),),
        ((quality.STREAM_SOURCES, 24),),
        ((quality.GENAI_METRICS, 24),),
    ),
)

ATTRIBUTION = Board(
    "streamscope-attribution",
    "Jitter attribution",
    "Where each stall and slow first token came from: causes over time, the nodes' KV pressure, preemptions and "
    "step sizes against them, the client's gap next to the server's, and where a browser's first token spent its "
    "time.",
    (
        ((attribution.STALLS_BY_CAUSE, 16), (attribution.STALL_CAUSES, 8)),
        ((attribution.SLOW_STARTS, 24),),
        ((nodes.KV_USAGE, 8), (nodes.PREEMPTIONS, 8), (nodes.STEP_TOKENS, 8)),
        ((attribution.CLIENT_VS_SERVER, 14), (nodes.ENGINE_EVENTS, 10)),
        ((attribution.GPU_TO_GLASS, 24),),
    ),
)

TRACE_COST = Board(
    "streamscope-cost",
    "Trace cost per chunk",
    "What a chunk costs on the wire, in OTLP, on disk and on the user's screen, and whether a provider started "
    "sending fewer tokens per chunk.",
    (
        ((cost.TOKENS_PER_CHUNK, 12), (cost.OTLP_BYTES_PER_CHUNK, 12)),
        ((cost.CHUNK_ECONOMICS, 24),),
        ((cost.CHUNKING_CHANGES, 12), (cost.CANCELLATION, 12)),
        ((cost.BROWSER_RENDER, 24),),
    ),
)

DRILLDOWN = Board(
    "streamscope-drilldown",
    "Stream drilldown",
    "One trace: each side's chunk timeline, its stalls with their evidence, and what its node did meanwhile.",
    (
        ((drilldown.STREAM_TIMELINE, 24),),
        ((drilldown.TRACE_STREAMS, 24),),
        ((drilldown.TRACE_STALLS, 12), (drilldown.TRACE_NODE_EVENTS, 12)),
    ),
    trace_variable=True,
)

SERVING_NODES = Board(
    "streamscope-nodes",
    "Serving nodes",
    "Engine and GPU telemetry from the GPU agents, per node.",
    (
        ((nodes.KV_USAGE, 8), (nodes.REQUESTS_WAITING, 8), (nodes.SPEC_ACCEPTANCE, 8)),
        ((nodes.PREEMPTIONS, 8), (nodes.STEP_TOKENS, 8), (nodes.GPU_UTILIZATION, 8)),
        ((nodes.GPU_MEMORY, 12), (nodes.GPU_POWER, 12)),
        ((nodes.ENGINE_EVENTS, 24),),
    ),
)

BOARDS: tuple[Board, ...] = (STREAM_QUALITY, ATTRIBUTION, TRACE_COST, DRILLDOWN, SERVING_NODES)
