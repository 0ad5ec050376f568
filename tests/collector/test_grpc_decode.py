"""Undecodable OTLP/gRPC messages: the sender is told INVALID_ARGUMENT, each is counted, and the log says each cause
once, whatever the number of requests (a broken or hostile sender cannot flood it)."""

from __future__ import annotations

import logging

import grpc
import pytest

from streamscope_collector.pipeline import TRACES
from tests.support import metric, request_of, stream_span

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_undecodable_grpc_messages_are_invalid_argument_logged_once_and_counted(collector, caplog):
    caplog.set_level(logging.DEBUG)
    with grpc.insecure_channel(collector.grpc_endpoint) as channel:
        export = channel.unary_unary(EXPORT)  # raw bytes in, raw bytes out
        for _ in range(20):
            with pytest.raises(grpc.RpcError) as failure:
                export(b"\xff\xff\xff\xff", timeout=30)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not a valid" in failure.value.details()
        good = request_of(stream_span(1, 1, side="client", offsets_ms=[0, 10], tokens=[1, 1]))
        answer = TRACES.protobuf_type.FromString(export(good.SerializeToString(), timeout=30))
        assert answer is not None
    about_it = [r for r in caplog.records if "deserializ" in r.getMessage() or "not a valid" in r.getMessage()]
    assert len(about_it) == 1, [r.getMessage() for r in about_it]
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.WARNING)
    assert metric(collector.http_url, "streamscope_collector_refused_requests_total", reason="bad_request") == 20
