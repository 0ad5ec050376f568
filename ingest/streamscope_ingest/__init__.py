"""OTLP to rows: decoding both chunk encodings, per-stream statistics, migrations and the ClickHouse writer."""
