-- One row per alert in each notification Grafana's webhook contact point delivers to the collector
-- (POST /api/v1/alerts), so delivery is visible in the store: `streamscope sql "SELECT * FROM alerts"`.
--   status        firing | resolved
--   fingerprint   Grafana's identity of the alert instance (its rule and labels)
--   ends_at       NULL while firing (Grafana sends its zero time, 0001-01-01)
--   query_values  the rule's expression values at evaluation, by refId (B: the reduced query, C: the condition)
-- Grafana retries a delivery that failed and repeats a firing alert every repeat_interval: the rows of one
-- alert in one state (fingerprint, starts_at, status) collapse to the latest delivery when parts merge
-- (SELECT ... FINAL to see them collapsed at once).
CREATE TABLE IF NOT EXISTS alerts
(
    tenant         LowCardinality(String),
    received_at    DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    receiver       LowCardinality(String),
    status         LowCardinality(String),
    alertname      LowCardinality(String),
    fingerprint    String,
    starts_at      DateTime64(3, 'UTC'),
    ends_at        Nullable(DateTime64(3, 'UTC')),
    labels         Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    annotations    Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    query_values   Map(LowCardinality(String), Float64),
    generator_url  String,
    group_key      String
)
ENGINE = ReplacingMergeTree(received_at)
PARTITION BY toYYYYMM(starts_at)
ORDER BY (tenant, fingerprint, starts_at, status);
