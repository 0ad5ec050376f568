"""The ``ingest_requests`` row of one export request: what arrived, how big, and what it wrote.

It rides in the request's own batch, written after its data, so the log never counts a request whose rows
are missing, and OTLP bytes per chunk is one query over the store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa

from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch

TABLE = "ingest_requests"


@dataclass(frozen=True)
class Received:
    """How an export request arrived."""

    transport: str
    """``http`` or ``grpc``."""
    content_type: str
    """``protobuf`` or ``json``."""
    content_encoding: str
    """``gzip`` or ``identity``; empty where the transport decompressed it before us (gRPC)."""
    size: int
    """Body bytes as received (compressed, if it was); the message's own size where the transport hands over the
    decoded message (gRPC)."""
    message_bytes: int
    """The message's protobuf size: a protobuf body's, once inflated, as it is. Taken from the body rather than
    ``ByteSize()``, which walks the whole parsed message again: a tenth of the collector's time with events."""


def with_request_row(batch: DecodedBatch, *, tenant: str, signal: str, received: Received) -> None:
    """Append the request's log row to ``batch`` as its last block."""
    row = {
        "tenant": tenant,
        "time": time.time_ns() // 1_000_000,
        "signal": signal,
        "transport": received.transport,
        "content_type": received.content_type,
        "content_encoding": received.content_encoding,
        "received_bytes": received.size,
        "message_bytes": received.message_bytes,
        "rejected": len(batch.rejected),
        "ignored": batch.ignored_count,
        "rows": list(batch.counts().items()),
    }
    batch.blocks[TABLE] = pa.Table.from_pylist([row], schema=columns.INGEST_REQUESTS)
