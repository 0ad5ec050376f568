"""OTLP trace requests to column blocks for ``streams`` and ``chunk_arrays``; no I/O, nothing of ClickHouse.

A span is a stream span when it carries ``streamscope.side``, or when a reader in ``sources`` recognises it as
another GenAI instrumentation's; other spans are counted and ignored. A stream span's chunk timeline comes from
the packed arrays when ``streamscope.chunks.offset_us`` is present, else from its ``streamscope.chunk`` events.
Spans with a malformed timeline are rejected with a reason, which the collector returns in ``partial_success``;
the rest of the request is kept.

One module a step: ``rows`` reads a span's attributes into its row, ``timelines`` decodes and checks its chunks,
``blocks`` builds the column blocks, ``request`` walks a request's spans through them.
"""

from streamscope_ingest.decode.traces.request import decode_traces

__all__ = ["decode_traces"]
