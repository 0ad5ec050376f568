"""Read a running collector's /metrics the way Prometheus does."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def metric(base_url: str, name: str, **labels: str) -> float:
    """The value of sample ``name`` with ``labels`` (0 when absent, as for a counter never incremented)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
