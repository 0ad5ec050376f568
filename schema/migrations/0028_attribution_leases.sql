-- Which collector runs the attribution job, when several share one store (ingest/streamscope_ingest/store/lease.py):
-- every claim of a new epoch of the lease, every heartbeat of its holder and its release, timed by the server.
-- The earliest claim of the newest epoch holds it. Rows older than a day are of no use, and go.
CREATE TABLE IF NOT EXISTS attribution_leases
(
    job     LowCardinality(String),
    epoch   UInt64,
    holder  String,
    kind    LowCardinality(String),
    at      DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = MergeTree
PARTITION BY toDate(at)
ORDER BY (job, epoch, at)
TTL toDateTime(at) + INTERVAL 1 DAY;
