"""A collector with authentication on, for the tests of who may write what."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector


@pytest.fixture
def secured(storage_dsn: str) -> Iterator[Collector]:
    """Two tenants' secret tokens, a browser token of the first, and the token Grafana's contact point sends to
    the alert webhook (``secured.config.alert_webhook_token``)."""
    config = CollectorConfig(
        storage_dsn=storage_dsn,
        http_port=0,
        grpc_port=0,
        attribution_interval_s=None,
        tokens={"secret-a": "team-a", "secret-b": "team-b"},
        browser_tokens={"public-a": "team-a"},
        alert_webhook_token="grafana-webhook-secret",
        store_wait_s=5.0,  # the test reads what it sent as soon as it is answered
    )
    running = Collector(config).start()
    yield running
    running.stop()
