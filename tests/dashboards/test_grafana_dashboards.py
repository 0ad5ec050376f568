"""The generated Grafana dashboards: current, valid against the dashboard schema, on the provisioned data
source, and every panel's SQL, expanded as the plugin expands it, runs on demo data with the shape its panel
type needs. (No Grafana server runs here: what Grafana does with the JSON beyond that is not tested.)"""

from __future__ import annotations

import copy
import json
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
import yaml

from streamscope_cli.demo.chat import start_chat
from streamscope_cli.workload.load import attribute_settled, run_load, wait_until_stored
from streamscope_cli.workload.scenario import load_scenario, plan
from streamscope_collector.service import Collector
from streamscope_dashboards import grafana
from streamscope_dashboards.boards import BOARDS, DRILLDOWN
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.attribution import CLIENT_VS_SERVER, STALL_CAUSES
from streamscope_dashboards.panels.common import DEFAULTS, Panel, chosen
from streamscope_dashboards.panels.drilldown import STREAM_TIMELINE, WORST_STALLED_TRACE
from streamscope_dashboards.panels.quality import FLEET_STATS
from streamscope_ingest.store import sql
from tests import browser
from tests.support import free_port, wait_for_rows

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "schemas" / "grafana-dashboard.jsonschema.json"
DATASOURCES = ROOT / "dashboards" / "grafana" / "provisioning" / "datasources" / "clickhouse.yaml"
NO_GPU_HERE = {"gpu_utilization", "gpu_memory", "gpu_power"}
"""NVML panels: the demo's nodes have no GPU, so these queries run but return no rows."""
MAY_BE_EMPTY = NO_GPU_HERE | {"chunking_changes", "trace_node_events", "spec_acceptance", "genai_metrics"}
"""(The demo's apps run the streamscope SDK, which sends no GenAI metrics: tests/collector/test_genai_metrics.py
fills that panel from another instrumentation's.)"""
NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal.*)\)?$")
TEXT = re.compile(r"^(LowCardinality\()?(Nullable\()?String\)?\)?$")


def schema_for_generated_json() -> dict:
    """The dashboard schema with two quirks relaxed: it wants every key of an object-form variable query to be
    an object, while the ClickHouse plugin's own variables carry {"editorType": "sql", "rawSql": "..."}; and it
    wants a field matcher's options and an override's value to be objects, while Grafana's own dashboards match
    by name with a string and give links as a list (``"options": "trace_id"``, ``"value": [{"url": ...}]``)."""
    schema = json.loads(SCHEMA.read_text())
    relaxed = copy.deepcopy(schema)
    definitions = relaxed["definitions"]
    definitions["VariableModel"]["properties"]["query"] = {"oneOf": [{"type": "string"}, {"type": "object"}]}
    definitions["MatcherConfig"]["properties"]["options"] = {}
    definitions["DynamicConfigValue"]["properties"]["value"] = {}
    return relaxed


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.uid)
def test_committed_json_is_current_and_valid(board):
    path = grafana.OUTPUT_DIR / f"{board.uid}.json"
    assert path.read_text() == grafana.render(board), "stale: run python -m streamscope_dashboards.grafana"
    document = json.loads(path.read_text())
    jsonschema.Draft7Validator(schema_for_generated_json()).validate(document)
    provisioned = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]["uid"]
    for panel in document["panels"]:
        assert panel["datasource"]["uid"] == provisioned
        assert all(t["datasource"]["uid"] == provisioned and t["editorType"] == "sql" for t in panel["targets"])
    ids = [p["id"] for p in document["panels"]]
    assert len(ids) == len(set(ids))


def test_panels_never_overlap():
    for board in BOARDS:
        cells = set()
        for panel in grafana.dashboard(board)["panels"]:
            g = panel["gridPos"]
            assert g["x"] + g["w"] <= 24
            area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & area, f"{board.uid}: {panel['title']} overlaps"
            cells |= area


@pytest.fixture(scope="module")
def demo(chdb_dir, tmp_path_factory):
    """A shortened mixed scenario, attributed: engines, proxy, GPU agents and clients into the embedded store; and
    one answer on the demo chat page in headless Chromium, for the browser's panels."""
    dsn = f"chdb://{chdb_dir}?database=t_{uuid.uuid4().hex[:12]}"
    scenario = load_scenario("mixed")
    scenario = replace(scenario, load=replace(scenario.load, streams=40))
    chat_port = free_port()
    collector = Collector(browser.collector_for_chat(dsn, chat_port))
    collector.start()
    try:
        start = datetime.now(UTC) - timedelta(minutes=1)
        run_load(scenario, collector.http_url)
        chat = start_chat(collector.http_url, port=chat_port)
        try:
            with browser.chromium(tmp_path_factory.mktemp("chromium")) as driver:
                browser.chat(driver, chat.url)
        finally:
            chat.stop()  # (flushes the engine's server span)
        wait_until_stored(collector.query_client, len(plan(scenario)), start, 60)
        browser_streams = "SELECT count() FROM streams WHERE side = 'browser'"
        wait_for_rows(collector.query_client, browser_streams, 1, timeout_s=60)
        attribute_settled(collector.query_client)
        yield (
            collector.query_client,
            QueryContext(start, datetime.now(UTC) + timedelta(minutes=1), timedelta(seconds=5)),
        )
    finally:
        collector.stop()


def shape_problems(panel: Panel, result: sql.QueryResult) -> list[str]:
    names, types = result.names, result.types
    if panel.kind == "heatmap":
        buckets_ok = all(n == "+Inf" or n.replace(".", "").isdigit() for n in names[1:])
        return [] if names[0] == "time" and buckets_ok and all(NUMERIC.match(t) for t in types[1:]) else [str(names)]
    if panel.kind == "timeseries":
        ok = names[0] == "time" and types[0].startswith("DateTime") and TEXT.match(types[1]) and NUMERIC.match(types[2])
        return [] if ok and len(names) == 3 else [f"{names} {types}"]
    if panel.kind == "stat":
        return [] if len(result.rows) == 1 and all(NUMERIC.match(t) for t in types) else [f"{types}"]
    if panel.kind == "histogram":
        return [] if len(names) == 1 and NUMERIC.match(types[0]) else [f"{types}"]
    if panel.kind == "timeline":
        return [] if panel.x_field in names and TEXT.match(types[0]) else [f"{names}"]
    return []


def test_every_panel_query_runs_on_demo_data_with_its_shape(demo):
    client, ctx = demo
    run = lambda q: sql.parse_result(sql.query_json(client, q))  # noqa: E731
    (trace,) = run(resolve(WORST_STALLED_TRACE, ctx, DEFAULTS)).rows[0]
    checked = set()
    for board in BOARDS:
        for panel in board.panels:
            if panel.key in checked:
                continue
            checked.add(panel.key)
            result = run(resolve(panel.bind(trace_id=trace) if panel.variables else panel.sql, ctx, DEFAULTS))
            assert not shape_problems(panel, result), (panel.key, shape_problems(panel, result))
            if panel.key not in MAY_BE_EMPTY:
                assert result.rows, f"{panel.key} returned nothing on demo data"
    assert len(checked) >= 25


def test_side_and_route_variables_narrow_the_panels(demo):
    """Side picks whose streams are counted (the client's by default); route keeps the streams whose server span
    was served on a chosen route, whichever side is shown."""
    client, ctx = demo
    run = lambda q, **variables: sql.parse_result(sql.query_json(client, resolve(q, ctx, chosen(variables))))  # noqa: E731
    count = "SELECT side, count() FROM streams WHERE $__timeFilter(start_time) GROUP BY side"
    per_side = dict(run(count).rows)
    routes = run("SELECT DISTINCT route FROM streams WHERE route != ''").rows
    assert routes == [["/v1/chat/completions"]]
    served = (
        "SELECT count() FROM streams WHERE side = 'client'"
        " AND trace_id IN (SELECT trace_id FROM streams WHERE route != '')"
    )
    (with_server,) = run(served).rows[0]

    def streams(**variables):
        return run(FLEET_STATS.sql, **variables).rows[0][0]

    assert streams() == per_side["client"] == streams(side=["client"])
    assert streams(side=["server"]) == per_side["server"]
    assert streams(route=["/v1/chat/completions"]) == with_server
    assert streams(route=["/v1/nothing"]) == 0
    stalls = lambda **variables: sum(row[1] for row in run(STALL_CAUSES.sql, **variables).rows)  # noqa: E731
    assert stalls() > 0 and stalls(side=["server"]) == 0 and stalls(route=["/v1/nothing"]) == 0


@pytest.mark.parametrize("board", [b for b in BOARDS if not b.trace_variable], ids=lambda b: b.uid)
def test_the_side_variable_opens_on_the_client_and_has_no_all(board):
    (side,) = [v for v in grafana.dashboard(board)["templating"]["list"] if v["name"] == "side"]
    assert (side["current"]["value"], side["includeAll"], side["multi"]) == ("client", False, False)
    assert [o["value"] for o in side["options"] if o["selected"]] == ["client"] == list(DEFAULTS["side"])


def _v3_query(query: dict) -> bool:
    """The plugin's test for a query saved by v3 (src/data/migration.ts isV3CHQuery), which it migrates when the
    panel is opened: no pluginVersion, or one before 4.0.0, or a v3 query type."""
    version = query.get("pluginVersion")
    old = not version or tuple(int(part) for part in version.split(".")) < (4, 0, 0)
    return old or query.get("queryType") in ("sql", "builder")


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b.uid)
def test_no_query_is_taken_for_a_v3_query(board):
    document = grafana.dashboard(board)
    queries = [target for panel in document["panels"] for target in panel["targets"]]
    queries += [variable["query"] for variable in document["templating"]["list"] if variable["type"] == "query"]
    assert queries and not [query["rawSql"][:60] for query in queries if _v3_query(query)]


def test_queries_carry_the_plugin_version_compose_installs():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["grafana"]["environment"]
    assert compose["GF_PLUGINS_PREINSTALL_SYNC"] == f"grafana-clickhouse-datasource@{grafana.PLUGIN_VERSION}"


def test_a_heatmap_keeps_its_unit_on_the_y_axis_and_its_counts_plain():
    heatmaps = [
        (panel, grafana.dashboard(board)["panels"][index])
        for board in BOARDS
        for index, panel in enumerate(panel for row in board.rows for panel, _ in row)
        if panel.kind == "heatmap"
    ]
    assert heatmaps
    for panel, out in heatmaps:
        assert out["options"]["yAxis"]["unit"] == panel.unit == "ms"
        assert "unit" not in out["fieldConfig"]["defaults"]  # the cells' counts would show as ms


def test_a_trace_in_any_table_opens_the_drilldown_on_that_trace_and_range():
    panels = [(board, panel) for board in BOARDS for panel in grafana.dashboard(board)["panels"]]
    tables = [(board, panel) for board, panel in panels if panel["type"] == "table"]
    assert tables
    for board, panel in tables:
        links = [
            link
            for override in panel["fieldConfig"]["overrides"]
            if override["matcher"] == {"id": "byName", "options": "trace_id"}
            for prop in override["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        assert [link["url"] for link in links] == [
            "/d/streamscope-drilldown/streamscope-drilldown?var-trace_id=${__value.raw}&${__url_time_range}"
        ], (board.uid, panel["title"])
    assert any(board.uid == "streamscope-drilldown" for board in BOARDS)


def test_the_drilldown_opens_on_the_worst_stalled_trace_and_tables_list_traces(demo):
    client, ctx = demo
    run = lambda q: sql.parse_result(sql.query_json(client, q))  # noqa: E731
    (variable,) = grafana.dashboard(DRILLDOWN)["templating"]["list"]
    choices = [row[0] for row in run(resolve(variable["query"]["rawSql"], ctx)).rows]
    worst = run(
        "SELECT trace_id FROM stalls WHERE side = 'client' AND server_gap_us IS NOT NULL ORDER BY gap_us DESC LIMIT 1"
    ).rows[0][0]
    assert choices[0] == worst and len(choices) == len(set(choices))
    assert "current" not in variable and variable["allowCustomValue"]  # the first choice, unless a link names one
    assert "trace_id" in run(resolve(CLIENT_VS_SERVER.sql, ctx, DEFAULTS)).names  # the longest stalls link theirs


Frame = tuple[dict[str, str], dict[str, list]]
"""A data frame: its labels, and its fields by name."""


def _transformed(rows: list[tuple], names: list[str], transformations: list[dict]) -> list[Frame]:
    """The frames Grafana's transformers make of a query result, modelled on @grafana/data for the two a timeline
    uses: partitionByValues (a frame per value of the field, which is dropped and becomes a label) and joinByField
    outer (one frame: every x once, ascending, each frame's other fields aligned to it, null where it has none)."""
    frames: list[Frame] = [({}, {name: [row[i] for row in rows] for i, name in enumerate(names)})]
    for step in transformations:
        if step["id"] == "partitionByValues":
            (by,) = step["options"]["fields"]
            as_labels = step["options"].get("naming", {}).get("asLabels", True)
            frames = [
                (
                    labels | ({by: value} if as_labels else {"name": value}),
                    {n: [v for v, k in zip(f[n], f[by]) if k == value] for n in f if n != by},
                )
                for labels, f in frames
                for value in dict.fromkeys(f[by])
            ]
        elif step["id"] == "joinByField":
            x = step["options"]["byField"]
            xs = sorted({v for _, f in frames for v in f[x]})
            joined: dict[str, list] = {x: xs}
            for labels, f in frames:
                at = {v: i for i, v in enumerate(f[x])}
                for name, values in f.items():
                    if name != x:  # a named frame's field shows as the frame's name, a labelled one with its labels
                        shown = labels["name"] if set(labels) == {"name"} else f"{name} {labels}"
                        joined[shown] = [values[at[v]] if v in at else None for v in xs]
            frames = [({}, joined)]
        else:
            raise AssertionError(f"no model of the {step['id']} transformation")
    return frames


def _trend_warning(frames: list[Frame], x_field: str) -> str | None:
    """The Trend panel's checks (public/app/plugins/panel/trend/utils.ts): one frame, the x field there, ascending."""
    if len(frames) > 1:
        return "Only one frame is supported, consider adding a join transformation"
    xs = frames[0][1].get(x_field)
    if xs is None:
        return f"Unable to find field: {x_field}"
    return None if xs == sorted(xs) else "Values must be in ascending order"


def test_the_stream_timeline_gives_the_trend_panel_one_ascending_frame(demo):
    client, ctx = demo
    run = lambda q: sql.parse_result(sql.query_json(client, q))  # noqa: E731
    (trace,) = run(resolve(WORST_STALLED_TRACE, ctx, DEFAULTS)).rows[0]
    (panel,) = [p for p in grafana.dashboard(DRILLDOWN)["panels"] if p["type"] == "trend"]
    result = run(resolve(STREAM_TIMELINE.bind(trace_id=trace), ctx))
    assert len({row[0] for row in result.rows}) >= 2  # client and server: several lines
    frames = _transformed(result.rows, result.names, panel.get("transformations", []))
    assert _trend_warning(frames, panel["options"]["xField"]) is None
    lines = [name for name in frames[0][1] if name != panel["options"]["xField"]]
    assert len(lines) >= 2 and {"client", "server"} <= set(lines), lines  # each line named by its side alone
    assert panel["fieldConfig"]["defaults"]["custom"]["spanNulls"]
