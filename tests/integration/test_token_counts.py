"""The tokens-per-chunk panels read the ``token_counts`` projection of ``chunks`` (migration 0019), and get
from its counts the median they would get from the chunks themselves: the lower one, for an even count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dashboards.macros import QueryContext, resolve
from dashboards.panels import DEFAULTS, TOKENS_PER_CHUNK
from ingest import sql
from tests.otlp_build import T0, store_spans, stream_span

START = datetime.fromtimestamp(T0 / 1e9, UTC) - timedelta(seconds=5)
CTX = QueryContext(START, START + timedelta(minutes=1), timedelta(seconds=1))
QUERY = resolve(TOKENS_PER_CHUNK.sql, CTX, DEFAULTS)


def client_stream(trace: int, tokens: list[int]):
    return stream_span(trace, 1, side="client", offsets_ms=[100 + 20 * i for i in range(len(tokens))], tokens=tokens)


def medians(client) -> list[tuple[str, float]]:
    return [(row[1], row[2]) for row in sql.parse_result(sql.query_json(client, QUERY)).rows]


def test_the_median_over_two_inserts_is_the_lower_middle_of_every_chunk(store_client):
    store_spans(store_client, [client_stream(1, [1, 1, 4, 4])])
    store_spans(store_client, [client_stream(2, [2, 3])])  # a second part: its own projection part
    assert medians(store_client) == [(" ", 2)]  # of 1, 1, 2, 3, 4, 4


def test_the_panel_reads_the_projection_not_the_chunks(store_client):
    store_spans(store_client, [client_stream(1, [1, 2, 3])])
    plan = "\n".join(row[0] for row in sql.parse_result(sql.query_json(store_client, f"EXPLAIN {QUERY}")).rows)
    assert "ReadFromMergeTree (token_counts)" in plan, plan
