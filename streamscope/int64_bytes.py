"""The packed timeline's arrays as bytes attributes: the integers as little-endian int64, 8 bytes each.

An int-array attribute costs the application an element at a time twice: the OpenTelemetry SDK checks every
element when the attribute is set, and the OTLP exporter builds an ``AnyValue`` message for every element
when the span is sent. A bytes attribute is checked and encoded once (``benchmarks/sdk_overhead.py``). The
collector accepts either form, so SDKs without bytes attributes still send int arrays.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

_INT64 = "q"  # the C type that is 8 bytes on every platform Python supports


def int64_bytes(values: Iterable[int]) -> bytes:
    """``values`` as little-endian int64s; raises OverflowError or TypeError for anything that is not one."""
    packed = array(_INT64, values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()
