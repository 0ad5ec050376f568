"""The collector's HTTP side, one module per job: OTLP export, the alert webhook, SQL, the snippet, health."""
