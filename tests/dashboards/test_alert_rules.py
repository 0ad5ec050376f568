"""The provisioned alert rules, as Grafana would load and evaluate them: rules.yaml is current and has the fields
Grafana requires; rule SQL uses backend macros only; every query runs on the embedded engine over real workload
runs and answers as Grafana's numeric (table) alert data; and each rule's condition, evaluated as Grafana does
(A's SQL for A's time range, B reduce, C threshold), fires on data that breaks it and stays quiet otherwise.

No Grafana server runs here, so ``evaluate`` below stands in for its rule evaluation: it reads the rule from the
provisioned file and mirrors pkg/expr (a reduce passes a table's number through; threshold compares it).
"""

from __future__ import annotations

import operator
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamscope import semconv as sc
from streamscope_cli.workload.load import run_load, wait_until_stored
from streamscope_cli.workload.scenario import Distribution, load_scenario, plan
from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.alerts import ALERTS_PATH
from streamscope_collector.service import Collector
from streamscope_dashboards import alerts, grafana
from streamscope_dashboards.macros import QueryContext, apply_variables, expand
from streamscope_dashboards.panels.common import SLO_US
from streamscope_ingest.store import sql
from streamscope_ingest.store.sql import QueryResult
from tests.support import T0, store_spans, stream_span

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "dashboards" / "grafana" / "provisioning"
Query = Callable[[str], QueryResult]
Labels = tuple[tuple[str, str], ...]


def provisioned() -> dict[str, dict[str, Any]]:
    """The rules as Grafana reads them from the provisioning file, by uid."""
    document = yaml.safe_load(alerts.RULES_FILE.read_text())
    return {rule["uid"]: rule for group in document["groups"] for rule in group["rules"]}


def run_on(client) -> Query:
    return lambda query: sql.parse_result(sql.query_json(client, query))


def _base(clickhouse_type: str) -> str:
    while match := re.fullmatch(r"(?:Nullable|LowCardinality)\((.*)\)", clickhouse_type):
        clickhouse_type = match.group(1)
    return clickhouse_type


def numeric_alert_data(result: QueryResult) -> tuple[int, list[int]]:
    """Where the value and the label columns are, checking the shape Grafana turns into alert numbers: exactly
    one numeric column, every other a string."""
    kinds = [_base(t) for t in result.types]
    numeric = [i for i, t in enumerate(kinds) if re.fullmatch(r"U?Int\d+|Float\d+|Decimal.*", t)]
    labels = [i for i, t in enumerate(kinds) if t == "String"]
    assert len(numeric) == 1 and len(numeric) + len(labels) == len(kinds), list(zip(result.names, result.types))
    return numeric[0], labels


def query_context(rule: dict[str, Any], at: datetime) -> QueryContext:
    """The range Grafana gives query A when it evaluates the rule at ``at``: relativeTimeRange, intervalMs."""
    (query,) = [d for d in rule["data"] if d["refId"] == "A"]
    span = query["relativeTimeRange"]
    return QueryContext(
        start=at - timedelta(seconds=span["from"]),
        end=at - timedelta(seconds=span["to"]),
        interval=timedelta(milliseconds=query["model"]["intervalMs"]),
    )


_COMPARE = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}


def evaluate(uid: str, run: Query, at: datetime) -> dict[Labels, tuple[float, bool]]:
    """One evaluation of the provisioned rule at ``at``: each alert instance's labels, its value and whether C
    holds (reduce ``last`` of a number is the number; threshold compares it with its one evaluator)."""
    rule = provisioned()[uid]
    data = {d["refId"]: d["model"] for d in rule["data"]}
    assert data["B"]["type"] == "reduce" and data["B"]["expression"] == "A"
    assert data[rule["condition"]]["type"] == "threshold" and data[rule["condition"]]["expression"] == "B"
    (condition,) = data[rule["condition"]]["conditions"]
    compare, (threshold,) = _COMPARE[condition["evaluator"]["type"]], condition["evaluator"]["params"]
    result = run(expand(data["A"]["rawSql"], query_context(rule, at)))
    value, labels = numeric_alert_data(result)
    instances = {}
    for row in result.rows:
        key = tuple((result.names[i], row[i]) for i in labels)
        assert key not in instances, f"{uid}: two rows with labels {key}"
        instances[key] = (row[value], row[value] is not None and compare(row[value], threshold))
    return instances


def fires(uid: str, run: Query, at: datetime) -> bool:
    return any(firing for _, firing in evaluate(uid, run, at).values())


# --- the file -------------------------------------------------------------------------------------------------


def test_rules_file_is_current():
    assert alerts.RULES_FILE.read_text() == alerts.render(), "run `python -m streamscope_dashboards.alerts`"


def test_rules_have_what_grafana_requires():
    document = yaml.safe_load(alerts.RULES_FILE.read_text())
    datasource_uid = yaml.safe_load((PROVISIONING / "datasources" / "clickhouse.yaml").read_text())["datasources"][0]
    dashboards_folder = yaml.safe_load((PROVISIONING / "dashboards" / "streamscope.yaml").read_text())["providers"][0]
    assert document["apiVersion"] == 1 and document["groups"]
    duration = re.compile(r"\d+[smhdw]")
    uids, titles = set(), set()
    for group in document["groups"]:
        assert group["name"] and group["folder"] == dashboards_folder["folder"] == "streamscope"
        assert duration.fullmatch(group["interval"])
        for rule in group["rules"]:
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", rule["uid"]) and rule["uid"] not in uids
            assert rule["title"] and rule["title"] not in titles
            uids.add(rule["uid"])
            titles.add(rule["title"])
            assert duration.fullmatch(rule["for"])
            assert rule["noDataState"] in ("OK", "NoData", "Alerting") and rule["execErrState"] in ("OK", "Error")
            assert rule["labels"]["severity"] in ("page", "ticket") and rule["annotations"]["summary"]
            refs = {d["refId"]: d for d in rule["data"]}
            assert rule["condition"] in refs and list(refs) == ["A", "B", "C"]
            query = refs["A"]
            assert query["datasourceUid"] == datasource_uid["uid"] == query["model"]["datasource"]["uid"]
            assert query["model"]["datasource"]["type"] == datasource_uid["type"]
            assert query["model"]["format"] == 1 and query["model"]["editorType"] == "sql"
            assert query["relativeTimeRange"]["from"] > query["relativeTimeRange"]["to"] == 0
            for expression in (refs["B"], refs["C"]):
                assert expression["datasourceUid"] == "__expr__" == expression["model"]["datasource"]["uid"]
            # Grafana fills $VAR in titles and labels, and ${VAR} in annotations, from its environment
            assert "$" not in rule["title"] + "".join(rule["labels"].values())
            assert "${" not in "".join(rule["annotations"].values())


@pytest.mark.parametrize("rule", alerts.RULES, ids=lambda rule: rule.uid)
def test_rule_sql_uses_backend_macros_only(rule):
    """What the frontend would rewrite is absent, and every $ token is a backend macro (expansion leaves none)."""
    assert apply_variables(rule.sql, {}) == rule.sql
    assert "$__conditionalAll" not in rule.sql and "$__adHocFilters" not in rule.sql
    at = datetime(2027, 1, 1, tzinfo=UTC)
    assert "$" not in expand(rule.sql, QueryContext(at - timedelta(hours=1), at, timedelta(seconds=1)))


def test_contact_point_and_policy_reach_the_collector():
    directory = PROVISIONING / "alerting"
    (contact,) = yaml.safe_load((directory / "contact-points.yaml").read_text())["contactPoints"]
    (receiver,) = contact["receivers"]
    assert receiver["type"] == "webhook" and receiver["settings"]["httpMethod"] == "POST"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert receiver["settings"]["url"] == f"http://collector:4318{ALERTS_PATH}"
    assert "4318:4318" in compose["collector"]["ports"]
    assert "./dashboards/grafana/provisioning:/etc/grafana/provisioning:ro" in compose["grafana"]["volumes"]
    (policy,) = yaml.safe_load((directory / "policies.yaml").read_text())["policies"]
    assert policy["receiver"] == contact["name"] and not policy.get("routes")


# --- real workload runs ---------------------------------------------------------------------------------------

STREAMS = 40
SCENARIOS: dict[str, tuple[dict[str, Any], bool]] = {
    # name: (load changes, whether the run breaks the ITL SLO)
    "steady": ({}, False),
    # Answers longer than the scenario's own, so every stream through the gateway outlives its 700 ms flushes
    # and waits one out mid-answer (with short answers many fit in one flush, and only their first chunk waits).
    "gateway-buffering": ({"output_tokens": Distribution("uniform", 300, 400)}, True),
}


@dataclass(frozen=True)
class Run:
    scenario: str
    breaks_slo: bool
    query: Query
    at: datetime
    """When Grafana evaluates: just after the run's streams were all stored."""
    since: datetime
    client: Any
    """The store's client, to read the run's chunks and ground truth directly."""


BAD_GAPS_SQL = f"""
SELECT trace_id, toUnixTimestamp64Micro(time) - gap_us, toUnixTimestamp64Micro(time)
FROM chunk_timeline
WHERE start_time >= {{since:DateTime64(6)}} AND side = 'client' AND kind = 'content' AND gap_us > {SLO_US}
"""
"""Each client gap over the SLO: its stream, when it began and when it ended (µs)."""
FROZEN_SQL = """
SELECT toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time)
FROM ground_truth WHERE start_time >= {since:DateTime64(6)} AND cause = 'client_host'
"""
"""When the clients' event loop did not run (the run's watchdog and injected blocks)."""


def frozen_within(start: int, end: int, frozen: list[tuple[int, int]]) -> int:
    """How much of [start, end) the clients' loop spent frozen (windows may overlap)."""
    covered, reached = 0, start
    for lo, hi in sorted(frozen):
        lo, hi = max(lo, reached), min(hi, end)
        if hi > lo:
            covered += hi - lo
            reached = hi
    return covered


def bad_streams(client, since: datetime) -> tuple[set[str], set[str]]:
    """The run's client streams that broke the ITL SLO, read from their chunks rather than through the rule's
    SQL; and of those, the ones whose every bad gap was the clients' own host: without the time their loop
    was frozen, the gap would have kept to the SLO."""
    parameters = {"since": since}
    frozen = [tuple(row) for row in client.query(FROZEN_SQL, parameters=parameters).result_rows]
    gaps = client.query(BAD_GAPS_SQL, parameters=parameters).result_rows
    bad = {trace for trace, _, _ in gaps}
    not_the_host = {trace for trace, start, end in gaps if end - start - frozen_within(start, end, frozen) > SLO_US}
    return bad, bad - not_the_host


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def workload_run(request: pytest.FixtureRequest, chdb_dir: Path) -> Iterator[Run]:
    changes, breaks = SCENARIOS[request.param]
    scenario = load_scenario(request.param)
    scenario = replace(scenario, load=replace(scenario.load, streams=STREAMS, **changes))
    dsn = f"chdb://{chdb_dir}?database=t_{uuid.uuid4().hex[:12]}"
    collector = Collector(
        CollectorConfig(storage_dsn=dsn, http_port=0, grpc_port=None, attribution_interval_s=None)
    ).start()
    try:
        since = datetime.now(UTC)
        run_load(scenario, collector.http_url, agents=False)
        wait_until_stored(collector.query_client, len(plan(scenario)), since, timeout_s=60)
        client = collector.query_client
        yield Run(request.param, breaks, run_on(client), datetime.now(UTC), since, client)
    finally:
        collector.stop()


@pytest.mark.parametrize("rule", alerts.RULES, ids=lambda rule: rule.uid)
def test_every_rule_runs_on_workload_data(workload_run: Run, rule: alerts.Rule):
    """``evaluate`` checks the answer's shape; a rule without label columns answers exactly one number."""
    instances = evaluate(rule.uid, workload_run.query, workload_run.at)
    if rule is alerts.TOKENS_PER_CHUNK_DROP:
        assert instances == {}  # every chunk is in the last window: no window before it to compare with
    else:
        assert list(instances) == [()]


@pytest.mark.parametrize("rule", [alerts.ITL_BURN_FAST, alerts.ITL_BURN_SLOW], ids=lambda rule: rule.uid)
def test_burn_rate_fires_when_the_slo_breaks_and_stays_quiet_on_steady(workload_run: Run, rule: alerts.Rule):
    """The rule's burn rate is the share of streams the chunks say broke the SLO. A run meant to keep the SLO
    may still break it when the host starves the clients (a busy CI machine): then every bad stream must be the
    host's, by the run's own watchdog, and the rule is right to fire."""
    ((value, firing),) = evaluate(rule.uid, workload_run.query, workload_run.at).values()
    bad, the_host = bad_streams(workload_run.client, workload_run.since)
    assert value == pytest.approx(len(bad) / STREAMS / alerts.ERROR_BUDGET)
    if workload_run.breaks_slo:
        assert firing, f"{workload_run.scenario}: burn rate {value:.1f}"
    else:
        assert not firing or the_host == bad, f"{workload_run.scenario}: burn rate {value:.1f}, {bad - the_host}"


# --- hand-built streams, placed in the rules' windows -----------------------------------------------------------

AT = datetime.fromtimestamp(T0 / 1e9, UTC) + timedelta(hours=7)
"""Evaluation time for hand-built streams (T0 keeps them clear of other tests' partitions)."""
_serial = iter(range(1, 1_000_000))


def streams(
    count: int,
    minutes_ago: float,
    *,
    chunks: int = 30,
    tokens: int = 2,
    gap_ms: float = 20,
    first_ms: float = 100,
    attributes: dict[str, str] | None = None,
) -> list:
    """``count`` client streams that started ``minutes_ago`` before AT: ``chunks`` content chunks of ``tokens``
    tokens, the first at ``first_ms``, 20 ms apart but for one gap of ``gap_ms`` halfway."""
    offsets = [first_ms + i * 20 for i in range(chunks)]
    offsets[chunks // 2 :] = [o + gap_ms - 20 for o in offsets[chunks // 2 :]]
    start_ns = round((AT - timedelta(minutes=minutes_ago)).timestamp() * 1e9)
    return [
        stream_span(
            next(_serial),
            1,
            side="client",
            offsets_ms=offsets,
            tokens=[tokens] * chunks,
            start_ns=start_ns,
            attributes=attributes,
        )
        for _ in range(count)
    ]


def bad(count: int, minutes_ago: float) -> list:
    """Streams that broke the ITL SLO: one 500 ms gap (over the 400 ms line)."""
    return streams(count, minutes_ago, gap_ms=500)


@pytest.mark.parametrize(
    ("spans", "burning"),
    [
        pytest.param(lambda: bad(4, 2) + streams(16, 2) + bad(4, 40) + streams(16, 40), True, id="both windows"),
        pytest.param(lambda: bad(4, 2) + streams(16, 2) + streams(100, 40), False, id="only the last 5 minutes"),
        pytest.param(lambda: streams(20, 2) + bad(20, 40) + streams(20, 40), False, id="only the hour before"),
        pytest.param(lambda: bad(5, 2) + bad(4, 40), False, id="too few streams to say"),
    ],
)
def test_fast_burn_needs_both_windows(store_client, spans, burning):
    store_spans(store_client, spans())
    ((value, firing),) = evaluate(alerts.ITL_BURN_FAST.uid, run_on(store_client), AT).values()
    assert firing == burning, f"burn rate {value:.1f}"


def test_both_windows_at_20_percent_bad_burn_20x(store_client):
    store_spans(store_client, bad(4, 2) + streams(16, 2) + bad(4, 40) + streams(16, 40))
    assert evaluate(alerts.ITL_BURN_FAST.uid, run_on(store_client), AT) == {(): (pytest.approx(20.0), True)}
    # the slow pair: 4 of 20 in its 30 minutes, 8 of 40 in its 6 hours, also 20x
    assert fires(alerts.ITL_BURN_SLOW.uid, run_on(store_client), AT)


def test_a_pause_before_a_tool_call_burns_the_itl_budget_as_any_stall(store_client):
    """A pause before a tool call is a stall of the answer (docs/analytics.md): the SLO's rules count it as the
    panels do, so a fifth of the streams pausing 500 ms before their tool call burn the budget 20x."""
    tool_call = {sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: 15}  # the chunk after the pause (halfway)
    paused = streams(4, 2, gap_ms=500, attributes=tool_call) + streams(4, 40, gap_ms=500, attributes=tool_call)
    store_spans(store_client, paused + streams(16, 2) + streams(16, 40))
    assert store_client.query("SELECT countIf(tool_call_pause_us = 500000) FROM streams").result_rows == [(8,)]
    assert evaluate(alerts.ITL_BURN_FAST.uid, run_on(store_client), AT) == {(): (pytest.approx(20.0), True)}


@pytest.mark.parametrize(
    ("slow", "p99_of_p99_ms", "ttft_p95_ms", "firing"),
    [(0, 20, 100, False), (12, 1500, 2500, True)],
    ids=["healthy", "half stall 1.5 s and begin after 2.5 s"],
)
def test_tail_and_ttft_rules(store_client, slow, p99_of_p99_ms, ttft_p95_ms, firing):
    store_spans(store_client, streams(12, 3) + streams(slow, 3, gap_ms=1500, first_ms=2500))
    run = run_on(store_client)
    # each from its stream_histograms bucket: its geometric middle, within 0.5 %
    assert evaluate(alerts.P99_OF_P99.uid, run, AT) == {(): (pytest.approx(p99_of_p99_ms, rel=0.005), firing)}
    assert evaluate(alerts.TTFT_P95.uid, run, AT) == {(): (pytest.approx(ttft_p95_ms, rel=0.005), firing)}


def test_tokens_per_chunk_drop_is_per_provider_and_model_and_never_counted_against_estimated(store_client):
    def model(name: str, tokens: int, chunks: int, minutes_ago: float, estimated: bool = False) -> list:
        attributes = {sc.GEN_AI_PROVIDER_NAME: "openai", sc.GEN_AI_REQUEST_MODEL: name}
        if estimated:
            attributes[sc.STREAMSCOPE_TOKENS_ESTIMATED] = True
        return streams(1, minutes_ago, chunks=chunks, tokens=tokens, attributes=attributes)

    halved = model("m-1", 4, 60, 20) + model("m-1", 1, 60, 5)  # 4 tokens per chunk, then 1
    unchanged = model("m-2", 4, 60, 20) + model("m-2", 4, 60, 5)
    too_few_since = model("m-3", 4, 60, 20) + model("m-3", 1, 20, 5)
    # counted 4 per chunk before; now only estimated ones (1 per chunk): no like to compare with
    kinds_changed = model("m-4", 4, 60, 20) + model("m-4", 1, 60, 5, estimated=True)
    estimated_halved = model("m-5", 6, 60, 20, estimated=True) + model("m-5", 3, 60, 5, estimated=True)
    store_spans(store_client, halved + unchanged + too_few_since + kinds_changed + estimated_halved)
    assert evaluate(alerts.TOKENS_PER_CHUNK_DROP.uid, run_on(store_client), AT) == {
        (("provider", "openai"), ("model", "m-1"), ("tokens_kind", "counted")): (0.25, True),
        (("provider", "openai"), ("model", "m-2"), ("tokens_kind", "counted")): (1, False),
        (("provider", "openai"), ("model", "m-5"), ("tokens_kind", "estimated")): (0.5, True),
    }


@pytest.mark.parametrize("rule", alerts.RULES, ids=lambda rule: rule.uid)
def test_an_empty_window_answers_zero_not_no_data(store_client, rule: alerts.Rule):
    """Grafana turns a query that returns no row into No Data; a quiet fleet must read as 0, not as an error."""
    instances = evaluate(rule.uid, run_on(store_client), AT)
    assert instances == ({} if rule is alerts.TOKENS_PER_CHUNK_DROP else {(): (0, False)})


def test_rule_queries_carry_the_plugin_version_so_the_editor_does_not_migrate_them():
    models = [item["model"] for rule in provisioned().values() for item in rule["data"] if item["refId"] == "A"]
    assert models and all(model["pluginVersion"] == grafana.PLUGIN_VERSION for model in models)
