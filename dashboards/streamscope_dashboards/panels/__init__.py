"""The stream-health panels, defined once: Grafana dashboards are generated from them and the local report
runs them. Each panel is SQL in the ClickHouse plugin's dialect (backend macros only, so the same text also
works in alert rules) over the tables and views in schema/migrations.

One module per board (``boards`` lays them out), and ``common`` for what they share.
"""

from __future__ import annotations

from streamscope_dashboards.panels.attribution import GPU_TO_GLASS, SLOW_STARTS, STALL_CAUSES, STALLS_BY_CAUSE
from streamscope_dashboards.panels.common import Panel
from streamscope_dashboards.panels.cost import (
    BROWSER_RENDER,
    CANCELLATION,
    CHUNK_ECONOMICS,
    CHUNKING_CHANGES,
    TOKENS_PER_CHUNK,
)
from streamscope_dashboards.panels.drilldown import STREAM_TIMELINE
from streamscope_dashboards.panels.quality import (
    GENAI_METRICS,
    ITL_HEATMAP,
    MODEL_TEXTURE,
    RETRACTED_TEXT,
    SMOOTHING_TRADE,
    STREAM_P99_HISTOGRAM,
    STREAM_QUALITY,
    STREAM_SHAPE,
    STREAM_SOURCES,
    STRUCTURED_OUTPUT,
)

PANELS: tuple[Panel, ...] = (
    ITL_HEATMAP,
    STREAM_P99_HISTOGRAM,
    STALLS_BY_CAUSE,
    TOKENS_PER_CHUNK,
    STALL_CAUSES,
    SLOW_STARTS,
    STREAM_SHAPE,
    MODEL_TEXTURE,
    STREAM_QUALITY,
    SMOOTHING_TRADE,
    STRUCTURED_OUTPUT,
    RETRACTED_TEXT,
    CHUNK_ECONOMICS,
    CHUNKING_CHANGES,
    CANCELLATION,
    BROWSER_RENDER,
    GPU_TO_GLASS,
    STREAM_TIMELINE,
    STREAM_SOURCES,
    GENAI_METRICS,
)
"""The panels the report runs, in the order it shows them."""
