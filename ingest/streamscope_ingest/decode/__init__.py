"""Decoding OTLP into the store's columnar blocks: pure functions of the request bytes, no I/O."""
