"""The drilldown of a trace whose engine records nothing (llama-server behind ``streamscope gateway --node``): the
gateway's side stands beside the client's, and the node the gateway names gives the trace its engine events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import DEFAULTS
from streamscope_dashboards.panels.drilldown import TRACE_NODE_EVENTS, TRACE_STREAMS
from streamscope_ingest.store import sql
from tests.ingest.analysis.test_attribution_job import MS, T0, preemption, span, steady, trace_hex, with_gap, write


def test_the_drilldown_shows_the_gateway_side_and_its_nodes_events(store_client):
    spans = [span(31, 1, "client", T0, with_gap(10, 600)), span(31, 2, "gateway", T0 + 5 * MS, steady(), "node-1")]
    write(store_client, spans, [preemption(T0 + 300 * MS, T0 + 900 * MS)])
    start = datetime.fromtimestamp(T0 / 1e9, UTC)
    context = QueryContext(start - timedelta(minutes=1), start + timedelta(minutes=1), timedelta(seconds=5))

    def run(panel) -> list:
        return sql.parse_result(
            sql.query_json(store_client, resolve(panel.bind(trace_id=trace_hex(31)), context, DEFAULTS))
        ).rows

    assert sorted((row[0], row[2]) for row in run(TRACE_STREAMS)) == [("client", ""), ("gateway", "node-1")]
    assert [row[2] for row in run(TRACE_NODE_EVENTS)] == ["preemption"]
