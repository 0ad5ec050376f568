"""Grafana dashboard JSON from the panel definitions, for file provisioning.

`python -m streamscope_dashboards.grafana` writes one file per board into dashboards/grafana/dashboards/ (committed;
a test fails when they are stale). Every query targets the provisioned ClickHouse data source by its uid,
uses the plugin's SQL query model (editorType sql, rawSql, numeric format) and only its documented macros.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streamscope_dashboards.boards import BOARDS, DRILLDOWN, Board
from streamscope_dashboards.files import grafana_dir
from streamscope_dashboards.panels.common import DEFAULTS, SIDE, SIDES, VARIABLES, Panel
from streamscope_dashboards.panels.drilldown import WORST_STALLED_TRACES

DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "clickhouse"}
"""The data source dashboards/grafana/provisioning/datasources/clickhouse.yaml provisions."""
PLUGIN_VERSION = "4.20.0"
"""The plugin version docker-compose.yml installs, stamped on every query: the plugin takes a query without one for
a v3 query and migrates it when a panel is opened, and the dashboard then shows as modified."""
OUTPUT_DIR = grafana_dir() / "dashboards"
SCHEMA_VERSION = 39
FORMAT_TIMESERIES, FORMAT_TABLE = 0, 1
"""The plugin's numeric query formats: 0 turns a long (time, label, value) result wide, one series per label."""
_HEIGHT = {"stat": 4, "table": 9, "heatmap": 9, "histogram": 9, "timeseries": 8, "timeline": 9}
_TYPE = {"timeline": "trend"}
"""Panel kinds whose Grafana panel type has another name: a timeline has a numeric x axis (ms), not time."""
_VARIABLE_SOURCES = {
    "tenant": "SELECT DISTINCT tenant FROM streams WHERE $__timeFilter(start_time) ORDER BY tenant",
    "service": "SELECT DISTINCT service FROM streams WHERE $__timeFilter(start_time) ORDER BY service",
    "provider": "SELECT DISTINCT provider FROM chunks WHERE $__timeFilter(start_time) ORDER BY provider",
    "model": "SELECT DISTINCT model FROM chunks WHERE $__timeFilter(start_time) ORDER BY model",
    "route": "SELECT DISTINCT route FROM streams WHERE $__timeFilter(start_time) AND route != '' ORDER BY route",
    "transport": "SELECT DISTINCT transport FROM streams WHERE $__timeFilter(start_time) AND transport != '' "
    "ORDER BY transport",
}


def _target(panel: Panel) -> dict[str, Any]:
    time_first = panel.kind == "timeseries"
    return {
        "refId": "A",
        "datasource": DATASOURCE,
        "editorType": "sql",
        "pluginVersion": PLUGIN_VERSION,
        "format": FORMAT_TIMESERIES if time_first else FORMAT_TABLE,
        "queryType": "timeseries" if time_first else "table",
        "rawSql": panel.sql,
    }


def _drilldown_link(uid: str) -> dict[str, Any]:
    """A table's ``trace_id`` cells open that trace in the drilldown board ``uid``, over the same time range."""
    return {
        "matcher": {"id": "byName", "options": "trace_id"},
        "properties": [
            {
                "id": "links",
                "value": [
                    {
                        "title": "Open this stream in the drilldown",
                        "url": f"/d/{uid}/{uid}?var-trace_id=${{__value.raw}}&${{__url_time_range}}",
                    }
                ],
            }
        ],
    }


def _field_config(panel: Panel) -> dict[str, Any]:
    # a heatmap's unit is its y axis's (``_options``); its cells are counts, which would take the default's unit
    defaults: dict[str, Any] = {"unit": panel.unit} if panel.unit and panel.kind != "heatmap" else {}
    custom: dict[str, Any] = {}
    if panel.stacked:
        custom = {"drawStyle": "bars", "fillOpacity": 80, "stacking": {"mode": "normal", "group": "A"}}
    if panel.kind == "timeline":  # the sides' x values interleave once joined: each line spans the others' rows
        custom = {"spanNulls": True}
    if panel.threshold is not None:
        custom["thresholdsStyle"] = {"mode": "line"}
        # the base step's value is ignored by Grafana (it is -Infinity); the schema wants a number there
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "red", "value": 0}, {"color": "green", "value": panel.threshold}],
        }
    if custom:
        defaults["custom"] = custom
    # every table that lists traces links them (a table without the column matches nothing)
    overrides = [_drilldown_link(DRILLDOWN.uid)] if panel.kind == "table" else []
    return {"defaults": defaults, "overrides": overrides}


def _options(panel: Panel) -> dict[str, Any]:
    if panel.kind == "heatmap":
        return {
            "calculate": False,
            "rowsFrame": {"layout": "le"},
            "yAxis": {"unit": panel.unit},
            "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5},
            "cellGap": 1,
            "tooltip": {"mode": "single", "yHistogram": True},
        }
    if panel.kind == "stat":
        reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
        return {"reduceOptions": reduce, "textMode": "value_and_name"}
    if panel.kind == "timeline":
        return {"xField": panel.x_field}
    return {}


def _panel(panel: Panel, panel_id: int, x: int, y: int, width: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": panel_id,
        "type": _TYPE.get(panel.kind, panel.kind),
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": _HEIGHT[panel.kind], "w": width, "x": x, "y": y},
        "targets": [_target(panel)],
        "fieldConfig": _field_config(panel),
        "options": _options(panel),
    }
    if panel.kind == "timeline":
        # one line per side, in the one frame a Trend panel draws: x ascending across all of them
        out["transformations"] = [
            # frames named by their side (not labelled): the legend reads "client", not a label set
            {"id": "partitionByValues", "options": {"fields": ["side"], "naming": {"asLabels": False}}},
            {"id": "joinByField", "options": {"byField": panel.x_field, "mode": "outer"}},
        ]
    return out


def _query_variable(name: str) -> dict[str, Any]:
    sql = _VARIABLE_SOURCES[name]
    return {
        "type": "query",
        "name": name,
        "label": name,
        "datasource": DATASOURCE,
        "query": {"editorType": "sql", "pluginVersion": PLUGIN_VERSION, "rawSql": sql},
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "current": {"text": "All", "value": "$__all"},
        "options": [],
        "hide": 0,
        "regex": "",
        "skipUrlSync": False,
    }


def _side_variable() -> dict[str, Any]:
    """One side at a time, the client's when the dashboard opens."""
    (default,) = DEFAULTS[SIDE]
    return {
        "type": "custom",
        "name": SIDE,
        "label": SIDE,
        "query": ",".join(SIDES),
        "multi": False,
        "includeAll": False,
        "current": {"text": default, "value": default},
        "options": [{"text": side, "value": side, "selected": side == default} for side in SIDES],
        "hide": 0,
        "skipUrlSync": False,
    }


def _trace_variable() -> dict[str, Any]:
    """The trace to drill into: with no current value Grafana takes the first choice, the range's worst stalled
    trace, unless a link (``var-trace_id``) or the user names another, which need not be in the list."""
    return {
        "type": "query",
        "name": "trace_id",
        "label": "trace id",
        "datasource": DATASOURCE,
        "query": {"editorType": "sql", "pluginVersion": PLUGIN_VERSION, "rawSql": WORST_STALLED_TRACES},
        "refresh": 2,
        "sort": 0,
        "multi": False,
        "includeAll": False,
        "allowCustomValue": True,
        "options": [],
        "hide": 0,
        "regex": "",
        "skipUrlSync": False,
    }


def dashboard(board: Board) -> dict[str, Any]:
    panels, y, panel_id = [], 0, 1
    for row in board.rows:
        x = 0
        for panel, width in row:
            panels.append(_panel(panel, panel_id, x, y, width))
            panel_id, x = panel_id + 1, x + width
        y += max(_HEIGHT[panel.kind] for panel, _ in row)
    variables = (
        [_trace_variable()] if board.trace_variable else [_side_variable(), *(_query_variable(v) for v in VARIABLES)]
    )
    return {
        "uid": board.uid,
        "title": board.title,
        "description": board.description,
        "tags": ["streamscope"],
        "timezone": "utc",
        "editable": False,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "panels": panels,
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [
            {
                "title": "streamscope",
                "type": "dashboards",
                "icon": "external link",
                "tooltip": "",
                "tags": ["streamscope"],
                "asDropdown": True,
                "targetBlank": False,
                "includeVars": True,
                "keepTime": True,
            }
        ],
    }


def render(board: Board) -> str:
    return json.dumps(dashboard(board), indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = OUTPUT_DIR) -> list[Path]:
    """Write every board's JSON; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for board in BOARDS:
        path = directory / f"{board.uid}.json"
        path.write_text(render(board))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_all():
        print(path)
