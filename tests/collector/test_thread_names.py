"""A running collector's threads show as what they do to the operating system's tools, beside the engine's."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from streamscope_collector.admission import DECODE_THREAD, DECODING_AT_ONCE
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.blocks.batch import DecodedBatch
from tests.support import good_body, plain_stream_span, post, request_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")


def os_thread_names() -> set[str]:
    return {task.joinpath("comm").read_text().strip() for task in Path("/proc/self/task").iterdir()}


def test_the_collectors_threads_are_named_for_the_operating_system(collector):
    assert post(collector, good_body()).status_code == 200
    names = os_thread_names()
    for expected in ("otlp-http", "otlp-decode", "spool", "writer", "attribution"):
        assert expected in names, f"no thread named {expected} in {sorted(names)}"
    python_names = {t.name for t in threading.enumerate()}
    assert "streamscope-writer" in python_names  # the Python name stays whole


def test_requests_sent_at_once_are_all_decoded_on_the_one_decode_thread(collector, monkeypatch):
    """Whichever of the web framework's threads takes a request, it is decoded on the thread kept for decoding, so
    the memory one decode frees is the memory the next one takes (``streamscope_collector.admission``)."""
    decoded_on: list[threading.Thread] = []
    decode = collector.pipeline.decode

    def recorded(*args: Any, **kwargs: Any) -> DecodedBatch:
        decoded_on.append(threading.current_thread())
        return decode(*args, **kwargs)

    monkeypatch.setattr(collector.pipeline, "decode", recorded)
    bodies = [request_of(plain_stream_span(span, [10, 20, 30])).SerializeToString() for span in range(1, 9)]
    with ThreadPoolExecutor(len(bodies)) as senders:
        answers = list(senders.map(lambda body: post(collector, body), bodies))
    assert [answer.status_code for answer in answers] == [200] * len(bodies)
    assert len(decoded_on) == len(bodies)
    assert len(set(decoded_on)) == DECODING_AT_ONCE
    assert {thread.name.split("_")[0] for thread in decoded_on} == {DECODE_THREAD}


def test_a_stopped_collector_leaves_no_decode_thread_behind(storage_dsn):
    collector = Collector(CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None)).start()
    try:
        assert post(collector, good_body()).status_code == 200
        assert any(t.name.startswith(DECODE_THREAD) for t in threading.enumerate())
    finally:
        collector.stop()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(DECODE_THREAD)]
