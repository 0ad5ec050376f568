"""Alert rules on the streams' service levels, defined once here and rendered to Grafana's alerting file
provisioning: ``python -m streamscope_dashboards.alerts`` writes dashboards/grafana/provisioning/alerting/rules.yaml.

Grafana evaluates rules on its server, where only the plugin's backend macros exist: ``$__conditionalAll``
and dashboard variables would reach ClickHouse unexpanded, so rule SQL uses neither. Every query answers
as a table (format 1): one numeric column, plus string columns that become the alert instance's labels,
which Grafana reads as numbers. B reduces them (a number passes through) and C compares B with the threshold.

Time: a single-window rule's window is its query range (``$__timeFilter``, ``relativeTimeRange`` ending at
the evaluation). A rule that compares windows writes them into its SQL relative to ``$__toTime``, the
evaluation time, so its meaning is in its text; its ``relativeTimeRange`` spans the longest window anyway, so
the rule's preview in Grafana's editor shows the data it reads. Only client streams count: the latency the
application received.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from streamscope_dashboards.files import grafana_dir
from streamscope_dashboards.grafana import DATASOURCE, PLUGIN_VERSION
from streamscope_dashboards.panels.common import (
    GOODPUT_TARGET,
    SIZED,
    SLO_US,
    TIMED,
    figure_histogram,
    figure_quantile,
    median_of,
    over_range,
)
from streamscope_dashboards.panels.cost import CHANGE_FACTOR, CHANGE_MIN_CHUNKS, TOKENS_KIND

RULES_FILE = grafana_dir() / "provisioning" / "alerting" / "rules.yaml"
FOLDER = "streamscope"
"""Folder title; the dashboards provider puts the dashboards in the same folder."""
EXPRESSIONS = {"type": "__expr__", "uid": "__expr__"}
TABLE_FORMAT = 1
INTERVAL_MS = 1000
"""Grafana's default query interval for rules; no rule SQL buckets by it."""
MAX_DATA_POINTS = 43200

ERROR_BUDGET = round(1 - GOODPUT_TARGET, 9)
MIN_STREAMS = 10
"""Streams a window needs before its figure counts (below, it is 0). Under ten streams a single frozen one is
over a tenth of the window, more than a 10x burn on its own (past the 14.4x page at six): one user's bad luck
would page a quiet fleet at night. From ten on it takes two."""

FAST_BURN = 14.4
"""Page when the last hour and the last 5 minutes both burn the budget 14.4x faster than sustainable: 2% of a
30-day budget gone in one hour (SRE workbook, "Alerting on SLOs", recommended parameters). The hour proves
the burn is big; the 5 minutes prove it is still going, so the page clears within minutes of a fix."""
FAST_WINDOWS_S = (300, 3600)
SLOW_BURN = 6.0
"""Ticket when the last 6 hours and the last 30 minutes both burn 6x: 5% of the budget in 6 hours, the whole
budget in 5 days. The workbook pages on this pair; a freeze degrades an answer rather than failing it, so a
burn that leaves days is worked in hours from a ticket instead of waking someone."""
SLOW_WINDOWS_S = (1800, 21600)

P99_OF_P99_MS = 1000.0
"""The 99th percentile across streams of each stream's own p99 gap, over 10 minutes. Past 1 s (the limit for
keeping a reader's flow of thought, Nielsen's response-time limits) the worst streams' typical bad gap is a
real interruption, not jitter: the burn rates say how many streams freeze, this says how badly."""
TAIL_WINDOW_S = 600
TTFT_P95_MS = 2000.0
"""TTFT p95 over 10 minutes. The quality indices give the first token a 1 s deadline (Etalon's fluidity-index,
the Andes-style QoE); a p95 past twice that means one user in twenty waits over 2 s for the answer to begin."""
CHUNKING_WINDOW_S = 900
"""Tokens per chunk in the last 15 minutes against the 15 before: long enough for CHANGE_MIN_CHUNKS chunks of
one provider and model at low traffic (one stream is about a hundred), short enough to flag a deploy that
changed chunking within 20 minutes. It clears once both windows hold the new chunking: a step, not a state."""
CHUNKING_RATIO = 1 / CHANGE_FACTOR
"""Median tokens per chunk now at most half of before: the factor the chunking-changes panel flags. Each
chunk costs an envelope on the wire and a row in the trace, so halving tokens per chunk doubles both."""

Severity = Literal["page", "ticket"]
Evaluator = Literal["gt", "gte", "lt", "lte"]


@dataclass(frozen=True)
class Rule:
    uid: str
    title: str
    sql: str
    """Plugin SQL with backend macros only: one numeric column, and string columns that become labels."""
    evaluator: Evaluator
    """Grafana's threshold comparison of the value with ``threshold``; gte and lte came with grafana/grafana#99516
    (2025), which the pinned Grafana 12.4 has."""
    threshold: float
    range_s: int
    """The query's time range: from this many seconds before the evaluation up to it."""
    pending: str
    """Grafana's ``for``: how long the condition must hold before the alert fires."""
    severity: Severity
    area: str
    """What the rule watches (``itl``, ``ttft``, ``chunking``), a label to route and filter by."""
    summary: str
    description: str
    runbook: str


@dataclass(frozen=True)
class RuleGroup:
    name: str
    interval: str
    """How often Grafana evaluates the group's rules."""
    rules: tuple[Rule, ...]


def _last(seconds: int, until: int = 0) -> str:
    """The pre-aggregated rows counting the client streams that started in the ``seconds`` before the evaluation
    (less ``until`` seconds), each once (``common.over_range``: a window's first 5 s may take in streams that
    started up to 5 s before it)."""
    end = f"$__toTime - toIntervalSecond({until})" if until else "$__toTime"
    return f"{over_range(f'$__toTime - toIntervalSecond({seconds + until})', end)} AND side = 'client'"


def burn_rate_sql(short_s: int, long_s: int) -> str:
    """The smaller of two windows' burn rates (share of bad streams / error budget), both ending at the
    evaluation: it crosses a threshold only when both windows burn at least that fast. Read from
    ``stream_totals``: its ``over_slo`` counts the streams with a content gap over the SLO."""
    window = "SELECT sum(streams) AS streams, sum(over_slo) AS bad FROM stream_totals WHERE {} AND {}"
    return f"""SELECT least(
    if(recent.streams >= {MIN_STREAMS}, recent.bad / recent.streams, 0),
    if(longer.streams >= {MIN_STREAMS}, longer.bad / longer.streams, 0)
) / {ERROR_BUDGET} AS burn_rate
FROM ({window.format(_last(short_s), TIMED)}) AS recent
CROSS JOIN ({window.format(_last(long_s), TIMED)}) AS longer"""


def client_quantile_ms_sql(level: float, figure: str, name: str) -> str:
    """A quantile, in ms, of a per-stream µs ``figure`` of ``stream_histograms`` over the client streams in the
    query's range that have it (the bucket's middle: within 0.5 %); 0 with fewer than MIN_STREAMS of them."""
    at = figure_quantile(level, "histogram", "counted", name)
    return f"""SELECT any(if(counted >= {MIN_STREAMS}, {at} / 1000, 0)) AS {name}
FROM ({figure_histogram(figure, _last(TAIL_WINDOW_S))})"""


def _duration(seconds: int) -> str:
    """``1h``, ``10m``: as `streamscope report --since` reads it."""
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m"


def _minutes(seconds: int) -> str:
    return _duration(seconds).replace("h", " h").replace("m", " min")


def _burn_rule(uid: str, windows: tuple[int, int], burn: float, pending: str, severity: Severity) -> Rule:
    short_s, long_s = windows
    span = f"{_minutes(short_s)} and {_minutes(long_s)}"
    return Rule(
        uid=uid,
        title=f"ITL goodput burning its error budget {burn:g}x ({span})",
        sql=burn_rate_sql(short_s, long_s),
        evaluator="gt",
        threshold=burn,
        range_s=long_s,
        pending=pending,
        severity=severity,
        area="itl",
        summary=(
            "Client streams are freezing: the ITL SLO's error budget is burning "
            '{{ printf "%.1f" $values.B.Value }}x faster than sustainable over both the last '
            f"{span}."
        ),
        description=(
            f"SLO: {GOODPUT_TARGET:.0%} of client streams keep every gap between content chunks within "
            f"{SLO_US // 1000} ms (stream_metrics.gap_max_us). Both windows burn faster than {burn:g}x "
            f"the {ERROR_BUDGET:.0%} budget (the value is the smaller of the two; a window with fewer than "
            f"{MIN_STREAMS} streams counts as 0)."
        ),
        runbook=(
            "Find where the stalls come from: the Jitter attribution dashboard (stalls by cause, per-node KV "
            "usage and preemptions against stalls, client against server gaps), or `streamscope report "
            f"--since {_duration(long_s)}`. network_buffering and connection point at the path "
            "(gateway, proxy); kv_pressure, prefill_interference, spec_decode, gpu_fault and gpu_throttle at "
            "the serving nodes; "
            "client_render and client_host at the clients (a page slow to paint, a host too busy to read)."
        ),
    )


ITL_BURN_FAST = _burn_rule("streamscope-itl-burn-fast", FAST_WINDOWS_S, FAST_BURN, "2m", "page")
"""``for: 2m``: the windows already smooth; two more evaluations cost 0.07% of the budget at 14.4x."""
ITL_BURN_SLOW = _burn_rule("streamscope-itl-burn-slow", SLOW_WINDOWS_S, SLOW_BURN, "15m", "ticket")
"""``for: 15m``: a ticket can wait for the burn to prove steady; 15 minutes at 6x is 0.2% of the budget."""

P99_OF_P99 = Rule(
    uid="streamscope-itl-p99-of-p99",
    title=f"Worst client streams stall over {P99_OF_P99_MS / 1000:g} s (p99 of per-stream p99 gap)",
    sql=client_quantile_ms_sql(0.99, "gap_p99_us", "p99_of_p99_ms"),
    evaluator="gt",
    threshold=P99_OF_P99_MS,
    range_s=TAIL_WINDOW_S,
    pending="5m",
    severity="ticket",
    area="itl",
    summary=(
        'p99 across client streams of their own p99 gap is {{ printf "%.0f" $values.B.Value }} ms over the '
        f"last {_minutes(TAIL_WINDOW_S)} (threshold {P99_OF_P99_MS:.0f} ms)."
    ),
    description=(
        "The tail of the tail: the streams that stall, stall for over the threshold at their own 99th "
        f"percentile. Figured over client streams whose every gap is known; with fewer than {MIN_STREAMS} it is 0."
    ),
    runbook=(
        "Open the Stream quality dashboard (per-stream p99 distribution, ITL heatmap) and the Jitter attribution "
        f"dashboard for the causes; `streamscope report --since {_duration(TAIL_WINDOW_S)}` shows the same panels in "
        "a terminal."
    ),
)

TTFT_P95 = Rule(
    uid="streamscope-ttft-p95",
    title=f"Client time to first token p95 over {TTFT_P95_MS / 1000:g} s",
    sql=client_quantile_ms_sql(0.95, "ttft_us", "ttft_p95_ms"),
    evaluator="gt",
    threshold=TTFT_P95_MS,
    range_s=TAIL_WINDOW_S,
    pending="5m",
    severity="page",
    area="ttft",
    summary=(
        'Client TTFT p95 is {{ printf "%.0f" $values.B.Value }} ms over the last '
        f"{_minutes(TAIL_WINDOW_S)} (threshold {TTFT_P95_MS:.0f} ms)."
    ),
    description=(
        "One user in twenty waits over the threshold for the answer to begin. Figured over client streams "
        f"that delivered content; with fewer than {MIN_STREAMS} it is 0."
    ),
    runbook=(
        "Queueing or prefill on the serving nodes (Serving nodes dashboard: waiting requests, KV usage, prefill "
        "bursts), or a gateway holding the first chunk (first byte to first content in `streamscope report`)."
    ),
)


def _chunking(window: str) -> str:
    """Each provider and model's content chunks and their median tokens per chunk in ``stream_totals``' rows
    ``window`` (exact: the chunks are counted by their tokens), counted and estimated tokens apart."""
    return f"""SELECT provider, model, {TOKENS_KIND}, sum(content_chunks) AS chunks,
        {median_of("sumMap(content_chunks_by_tokens)", "chunks")} AS median
    FROM stream_totals
    WHERE {window} AND {SIZED}
    GROUP BY provider, model, tokens_kind"""


TOKENS_PER_CHUNK_DROP = Rule(
    uid="streamscope-tokens-per-chunk-drop",
    title="Tokens per chunk halved",
    sql=f"""SELECT provider, model, tokens_kind, now.median / before.median AS tokens_per_chunk_ratio
FROM ({_chunking(_last(CHUNKING_WINDOW_S))}) AS now
INNER JOIN ({_chunking(_last(CHUNKING_WINDOW_S, until=CHUNKING_WINDOW_S))}) AS before
    USING (provider, model, tokens_kind)
WHERE now.chunks >= {CHANGE_MIN_CHUNKS} AND before.chunks >= {CHANGE_MIN_CHUNKS} AND before.median > 0""",
    evaluator="lte",
    threshold=CHUNKING_RATIO,
    range_s=2 * CHUNKING_WINDOW_S,
    pending="5m",
    severity="ticket",
    area="chunking",
    summary=(
        "{{ $labels.provider }} {{ $labels.model }}: median tokens per chunk ({{ $labels.tokens_kind }}) in the last "
        f"{_minutes(CHUNKING_WINDOW_S)} is "
        '{{ printf "%.2f" $values.B.Value }}x what it was in the '
        f"{_minutes(CHUNKING_WINDOW_S)} before."
    ),
    description=(
        "Client content chunks now carry at most half the tokens they did: every token costs more envelopes on "
        f"the wire and more chunk rows (at least {CHANGE_MIN_CHUNKS} chunks in each window). Tokens the provider "
        "counted and tokens estimated from bytes are compared each with their own kind (tokens_kind)."
    ),
    runbook=(
        "The Trace cost per chunk dashboard (tokens per chunk, chunking changes) shows when it moved; look for a "
        "deploy of the provider's gateway or of the engine's streaming settings at that time."
    ),
)

GROUPS = (
    RuleGroup("stream-slo", "1m", (ITL_BURN_FAST, ITL_BURN_SLOW, P99_OF_P99, TTFT_P95)),
    RuleGroup("chunk-economics", "5m", (TOKENS_PER_CHUNK_DROP,)),
)
"""Stream health is checked every minute; chunking, a cost rather than a user's wait, every 5 minutes."""
RULES = tuple(rule for group in GROUPS for rule in group.rules)


def _grafana_rule(rule: Rule) -> dict[str, Any]:
    query = {
        "datasource": DATASOURCE,
        "editorType": "sql",
        "pluginVersion": PLUGIN_VERSION,
        "format": TABLE_FORMAT,
        "rawSql": rule.sql,
        "refId": "A",
        "intervalMs": INTERVAL_MS,
        "maxDataPoints": MAX_DATA_POINTS,
    }
    reduce = {
        "datasource": EXPRESSIONS,
        "type": "reduce",
        "expression": "A",
        "reducer": "last",
        "settings": {"mode": "dropNN"},
        "refId": "B",
    }
    threshold = {
        "datasource": EXPRESSIONS,
        "type": "threshold",
        "expression": "B",
        "conditions": [{"evaluator": {"type": rule.evaluator, "params": [rule.threshold]}}],
        "refId": "C",
    }
    return {
        "uid": rule.uid,
        "title": rule.title,
        "condition": "C",
        "data": [
            {
                "refId": "A",
                "relativeTimeRange": {"from": rule.range_s, "to": 0},
                "datasourceUid": DATASOURCE["uid"],
                "model": query,
            },
            {"refId": "B", "datasourceUid": EXPRESSIONS["uid"], "model": reduce},
            {"refId": "C", "datasourceUid": EXPRESSIONS["uid"], "model": threshold},
        ],
        # no traffic is no evidence of a problem; a failing query is, and shows as a DatasourceError alert
        "noDataState": "OK",
        "execErrState": "Error",
        "for": rule.pending,
        "labels": {"severity": rule.severity, "area": rule.area},
        "annotations": {"summary": rule.summary, "description": rule.description, "runbook": rule.runbook},
    }


def document() -> dict[str, Any]:
    """The alerting provisioning document: every group in the streamscope folder."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": group.name,
                "folder": FOLDER,
                "interval": group.interval,
                "rules": [_grafana_rule(rule) for rule in group.rules],
            }
            for group in GROUPS
        ],
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line text (the SQL) as literal blocks, so the file reads like the source; no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)

HEADER = """\
# Generated from dashboards/streamscope_dashboards/alerts.py by `python -m streamscope_dashboards.alerts`;
# edit the rules there, not here.
# Grafana loads it from /etc/grafana/provisioning/alerting (docker-compose.yml mounts the provisioning folder).
"""


def render() -> str:
    """rules.yaml as committed."""
    return HEADER + yaml.dump(document(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_rules(path: Path = RULES_FILE) -> Path:
    """Write the rules file (for this module's entry point, or a generator that writes all of Grafana's files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    return path


def main() -> None:
    print(write_rules())


if __name__ == "__main__":
    main()
