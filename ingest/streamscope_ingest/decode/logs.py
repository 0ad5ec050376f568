"""OTLP log requests to rows, routed by event name: ``streamscope.ground_truth`` to ``ground_truth``,
``streamscope.engine_event`` to ``engine_events``.

Log records with other event names are counted and ignored; a record with a bad field is rejected (with
its reason, through partial_success) without costing the rest of the request.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any, TypeGuard

import pyarrow as pa
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch, Rejection, ignored_kind
from streamscope_ingest.decode.attributes import attribute_map, stringify

log = logging.getLogger(__name__)
_OWN_KEYS = frozenset(
    {
        sc.STREAMSCOPE_TRUTH_CAUSE,
        sc.STREAMSCOPE_NODE_NAME,
        sc.STREAMSCOPE_TRUTH_END_UNIX_NANO,
        sc.STREAMSCOPE_TRUTH_REQUEST_ID,
        sc.STREAMSCOPE_TRUTH_CHUNK_INDICES,
        sc.STREAMSCOPE_TRUTH_MAGNITUDE,
        sc.STREAMSCOPE_TRUTH_SCENARIO,
    }
)


class _Rejected(Exception):
    pass


def decode_logs(request: ExportLogsServiceRequest, *, tenant: str) -> DecodedBatch:
    rows: dict[str, list[dict[str, Any]]] = {table: [] for table, _ in _ROUTES.values()}
    rejected: list[Rejection] = []
    ignored: Counter[str] = Counter()
    number = 0
    for resource_logs in request.resource_logs:
        resource = attribute_map(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                number += 1
                route = _ROUTES.get(record.event_name)
                if route is None:
                    ignored[ignored_kind("log record(s) of event", record.event_name)] += 1
                    continue
                table, to_row = route
                try:
                    rows[table].append(to_row(record, tenant, resource))
                except _Rejected as exc:
                    rejected.append(Rejection(f"log record {number}", str(exc)))
                except Exception as exc:  # a decoder bug must cost one record, never the request
                    log.exception("unexpected error decoding a %s record", record.event_name)
                    rejected.append(Rejection(f"log record {number}", f"internal error ({type(exc).__name__})"))
    blocks = {}
    for table, table_rows in rows.items():
        schema = columns.TABLES[table]
        blocks[table] = pa.Table.from_pylist(table_rows, schema=schema) if table_rows else schema.empty_table()
    return DecodedBatch(blocks=blocks, ignored=ignored, rejected=rejected)


def _ground_truth(record: LogRecord, tenant: str, resource: dict[str, Any]) -> dict[str, Any]:
    attrs = attribute_map(record.attributes)
    cause = attrs.get(sc.STREAMSCOPE_TRUTH_CAUSE)
    if cause not in sc.STREAMSCOPE_TRUTH_CAUSE_VALUES:
        raise _Rejected(f"{sc.STREAMSCOPE_TRUTH_CAUSE} must be one of {', '.join(sc.STREAMSCOPE_TRUTH_CAUSE_VALUES)}")
    start_ns = record.time_unix_nano
    end_ns = attrs.get(sc.STREAMSCOPE_TRUTH_END_UNIX_NANO, start_ns)
    if isinstance(end_ns, bool) or not isinstance(end_ns, int) or end_ns < start_ns or not start_ns:
        raise _Rejected(f"the record needs a time and an integer {sc.STREAMSCOPE_TRUTH_END_UNIX_NANO} not before it")
    indices = attrs.get(sc.STREAMSCOPE_TRUTH_CHUNK_INDICES, [])
    if not isinstance(indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**32 for i in indices
    ):
        raise _Rejected(f"{sc.STREAMSCOPE_TRUTH_CHUNK_INDICES} must be a list of non-negative integers")
    magnitude = attrs.get(sc.STREAMSCOPE_TRUTH_MAGNITUDE, 0.0)
    if isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)) or not math.isfinite(magnitude):
        raise _Rejected(f"{sc.STREAMSCOPE_TRUTH_MAGNITUDE} must be a finite number")
    return {
        "tenant": tenant,
        "start_time": start_ns // 1000,
        "end_time": end_ns // 1000,
        "cause": cause,
        "node_name": stringify(attrs.get(sc.STREAMSCOPE_NODE_NAME)),
        "scenario": stringify(attrs.get(sc.STREAMSCOPE_TRUTH_SCENARIO)),
        "trace_id": record.trace_id.hex() if any(record.trace_id) else "",
        "request_id": stringify(attrs.get(sc.STREAMSCOPE_TRUTH_REQUEST_ID)),
        "chunk_indices": indices,
        "magnitude": float(magnitude),
        "service": stringify(resource.get("service.name")),
        "attributes": [(k, stringify(v)) for k, v in attrs.items() if k not in _OWN_KEYS],
    }


def _engine_event(record: LogRecord, tenant: str, resource: dict[str, Any]) -> dict[str, Any]:
    attrs = attribute_map(record.attributes)
    kind = attrs.get(sc.STREAMSCOPE_EVENT_KIND)
    if kind not in sc.STREAMSCOPE_EVENT_KIND_VALUES:
        raise _Rejected(f"{sc.STREAMSCOPE_EVENT_KIND} must be one of {', '.join(sc.STREAMSCOPE_EVENT_KIND_VALUES)}")
    node = stringify(resource.get(sc.STREAMSCOPE_NODE_NAME))
    if not node:
        raise _Rejected(f"the record's resource has no {sc.STREAMSCOPE_NODE_NAME}")
    start_ns = record.time_unix_nano
    end_ns = attrs.get(sc.STREAMSCOPE_EVENT_END_UNIX_NANO)
    if not start_ns or (end_ns is not None and (not _integer(end_ns) or end_ns < start_ns)):
        raise _Rejected(f"the record needs a time, and {sc.STREAMSCOPE_EVENT_END_UNIX_NANO} (if any) not before it")
    magnitude = attrs.get(sc.STREAMSCOPE_EVENT_MAGNITUDE, 0.0)
    if isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)) or not math.isfinite(magnitude):
        raise _Rejected(f"{sc.STREAMSCOPE_EVENT_MAGNITUDE} must be a finite number")
    xid = attrs.get(sc.STREAMSCOPE_EVENT_XID)
    return {
        "tenant": tenant,
        "start_time": start_ns // 1000,
        "end_time": end_ns // 1000 if end_ns is not None else None,
        "node_name": node,
        "host": stringify(resource.get("host.name")),
        "engine": stringify(attrs.get(sc.STREAMSCOPE_ENGINE_ID)),
        "kind": kind,
        "magnitude": float(magnitude),
        "gpu_uuid": stringify(attrs.get(sc.STREAMSCOPE_GPU_UUID)),
        "xid": xid if _integer(xid) and -(2**31) <= xid < 2**31 else None,
        "attributes": [(k, stringify(v)) for k, v in attrs.items() if not k.startswith(("streamscope.event.",))],
    }


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_ROUTES = {
    sc.STREAMSCOPE_GROUND_TRUTH_EVENT: ("ground_truth", _ground_truth),
    sc.STREAMSCOPE_ENGINE_EVENT_EVENT: ("engine_events", _engine_event),
}
