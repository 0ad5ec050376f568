"""Grafana's webhook notification (JSON, payload version 1) to ``alerts`` rows, one per alert it carries.

A notification is checked whole: one malformed alert refuses the delivery with a message naming the field
(never quoting its value), so Grafana's log shows what to fix and nothing half-recorded hides the problem.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from streamscope.errors import DecodeError
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch

TABLE = "alerts"
STATUSES = ("firing", "resolved")
_EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
"""DateTime64's range starts here; Grafana's zero time (0001-01-01), for "not ended", is before it."""
_LATEST = datetime(2299, 12, 31, tzinfo=UTC)


def decode_alerts(body: bytes, *, tenant: str) -> DecodedBatch:
    """The notification in ``body`` as a batch for the ``alerts`` table; raises DecodeError when malformed."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise DecodeError("body is not JSON: expected Grafana's webhook notification") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise DecodeError('expected a JSON object with an "alerts" list (Grafana\'s webhook notification)')
    received_ms = time.time_ns() // 1_000_000
    shared = {
        "tenant": tenant,
        "received_at": received_ms,
        "receiver": _text(payload, "receiver", "notification"),
        "group_key": _text(payload, "groupKey", "notification"),
    }
    rows = [_row(alert, f"alerts[{i}]", shared) for i, alert in enumerate(payload["alerts"])]
    return DecodedBatch(blocks={TABLE: pa.Table.from_pylist(rows, schema=columns.ALERTS)})


def _row(alert: Any, where: str, shared: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(alert, dict):
        raise DecodeError(f"{where}: expected an object")
    status = alert.get("status")
    if status not in STATUSES:
        raise DecodeError(f"{where}.status: expected one of {', '.join(STATUSES)}")
    labels = _strings(alert, "labels", where)
    fingerprint = _text(alert, "fingerprint", where)
    if not fingerprint:
        raise DecodeError(f"{where}.fingerprint: required")
    starts_at = _time(alert.get("startsAt"), f"{where}.startsAt")
    if starts_at is None:
        raise DecodeError(f"{where}.startsAt: required")
    return {
        **shared,
        "status": status,
        "alertname": labels.get("alertname", ""),
        "fingerprint": fingerprint,
        "starts_at": starts_at,
        "ends_at": _time(alert.get("endsAt"), f"{where}.endsAt"),
        "labels": list(labels.items()),
        "annotations": list(_strings(alert, "annotations", where).items()),
        "query_values": _values(alert.get("values"), f"{where}.values"),
        "generator_url": _text(alert, "generatorURL", where),
    }


def _text(container: dict[str, Any], key: str, where: str) -> str:
    value = container.get(key, "")
    if not isinstance(value, str):
        raise DecodeError(f"{where}.{key}: expected a string")
    return value


def _strings(alert: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = alert.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise DecodeError(f"{where}.{key}: expected an object of strings")
    return value


def _time(value: Any, where: str) -> int | None:
    """Milliseconds since the epoch; None for a missing time or Grafana's zero time."""
    if value in (None, ""):
        return None
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise DecodeError(f"{where}: expected an RFC 3339 time with its offset")
    if moment < _EARLIEST:
        return None
    if moment > _LATEST:
        raise DecodeError(f"{where}: past 2299, the last year the store holds")
    return math.floor(moment.timestamp() * 1000)


def _values(value: Any, where: str) -> list[tuple[str, float]]:
    """The expression values by refId; a null (no value at evaluation) is left out."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise DecodeError(f"{where}: expected an object of numbers")
    out = []
    for ref, number in value.items():
        if number is None:
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise DecodeError(f"{where}.{ref}: expected a number")
        out.append((ref, float(number)))
    return out
