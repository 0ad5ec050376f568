"""StreamRecorder: one streamed response's chunk timeline, emitted as one span when the stream ends.

Per chunk it only appends four integers to lists (the hot path); the span, its attributes and the
metrics are built once, at ``finish``. Application code calls these methods, so none of them raises:
a failure is logged once and the stream is dropped from telemetry, never from the application.

A stream also watches its own host (``host_watch``: its event loop, else the process) while it runs, and for
the first chunk and each chunk ``HOST_GAP_NS`` or more after the one before it keeps how much of that wait the
host did not run the reader, or on a server or gateway the sender (streamscope.chunks.host_delay_us), and on a
client the longest hold anywhere in it when longer (streamscope.chunks.host_held_us) and all of them summed when
more (streamscope.chunks.host_held_total_us): a stall of the client's own making is told from one of the
network's, and a serving process too busy to send from its engine. Checking for such a gap is one comparison a
chunk.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.util.types import AttributeValue

from streamscope import env
from streamscope import semconv as sc
from streamscope._internal import host_watch, instruments
from streamscope._internal.json_progress import JsonProgress
from streamscope.int64_bytes import int64_bytes

Side = Literal["client", "server", "browser", "gateway"]
Outcome = Literal["completed", "cancelled", "error", "timeout", "disconnected"]
Encoding = Literal["packed", "events"]

MAX_CHUNKS = 1_000_000
"""Chunks kept per stream at most; later ones are counted in streamscope.chunks_dropped, not stored."""
_TEXT_TAIL_CHUNKS = 256  # chunks of text kept for the repetition score
_KINDS = {"client": trace.SpanKind.CLIENT, "browser": trace.SpanKind.CLIENT}
HOST_GAP_NS = 100_000_000
"""A chunk this long or longer after the one before it (or the first chunk) has its host delay measured."""
_NEVER = 2**63 - 1
_INT64_LE = struct.Struct("<q")

log = logging.getLogger("streamscope")
_FINISHING = threading.Lock()
"""Makes a stream's first ``finish`` one step: the check and the mark, never two threads between them."""
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args, exc_info=True)


_default_encoding: Encoding = "events" if os.environ.get(env.STREAMSCOPE_ENCODING) == "events" else "packed"
_watch_host = env.host_watch_enabled()
_WATCHING_SIDES = ("client", "server", "gateway")
"""Sides that watch their own host (a browser's is watched by the page's snippet)."""


def set_default_encoding(encoding: Encoding) -> None:
    """The encoding recorders use when none is passed (``setup`` calls this)."""
    global _default_encoding
    if encoding not in sc.STREAMSCOPE_ENCODING_VALUES:
        raise ValueError(f"encoding must be one of {sc.STREAMSCOPE_ENCODING_VALUES}, not {encoding!r}")
    _default_encoding = encoding


class StreamRecorder:
    """Records one stream. Use as a context manager, or call ``start`` and ``finish`` yourself.

    >>> with StreamRecorder(side="client", provider="openai", request_model="gpt-4o") as rec:
    ...     for chunk in response:
    ...         rec.chunk(tokens=1, content_bytes=len(text.encode()), wire_bytes=len(raw))
    """

    __slots__ = (
        "__weakref__",
        "_attributes",
        "_cancel_ns",
        "_content",
        "_dropped",
        "_encoding",
        "_finished",
        "_first_byte_ns",
        "_first_tool_call",
        "_host_delays",
        "_host_due_ns",
        "_host_held_totals",
        "_host_holds",
        "_json",
        "_json_document",
        "_kind",
        "_meter_provider",
        "_name",
        "_parent",
        "_retracted",
        "_side",
        "_span",
        "_start_ns",
        "_tail",
        "_times",
        "_tokens",
        "_tokens_estimated",
        "_tracer",
        "_wall_start_ns",
        "_watch",
        "_watch_kind",
        "_watch_release",
        "_wire",
        "tokens_after_cancel",
    )

    def __init__(
        self,
        *,
        side: Side,
        provider: str,
        request_model: str | None = None,
        operation: str = "chat",
        transport: str = "sse",
        encoding: Encoding | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        parent: otel_context.Context | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: Any | None = None,
    ) -> None:
        self._side = side
        self._encoding = encoding or _default_encoding
        self._name = f"{operation} {request_model}" if request_model else operation
        self._kind = _KINDS.get(side, trace.SpanKind.SERVER)
        self._attributes: dict[str, AttributeValue] = {
            sc.STREAMSCOPE_SIDE: side,
            sc.STREAMSCOPE_ENCODING: self._encoding,
            sc.STREAMSCOPE_TRANSPORT: transport,
            sc.GEN_AI_OPERATION_NAME: operation,
            sc.GEN_AI_PROVIDER_NAME: provider,
            sc.GEN_AI_REQUEST_STREAM: True,
        }
        if request_model:
            self._attributes[sc.GEN_AI_REQUEST_MODEL] = request_model
        if attributes:
            self._attributes.update(attributes)
        self._parent = parent
        try:
            self._tracer = _tracer(tracer_provider)
        except Exception:
            _warn_once("tracer", "streamscope: the tracer provider failed; streams are not recorded")
            self._tracer = trace.NoOpTracer()
        self._meter_provider = meter_provider
        self._times: list[int] = []
        self._tokens: list[int] = []
        self._content: list[int] = []
        self._wire: list[int] = []
        self._tail: deque[str] = deque(maxlen=_TEXT_TAIL_CHUNKS)
        self._dropped = 0
        self._first_byte_ns: int | None = None
        self._first_tool_call: int | None = None
        self._cancel_ns: int | None = None
        self._tokens_estimated = False
        self._finished = False
        self._span: trace.Span | None = None
        self._start_ns = 0
        self._wall_start_ns = 0
        self._watch: host_watch.Watch | None = None
        self._watch_kind: str | None = None
        self._watch_release: weakref.finalize[[], StreamRecorder] | None = None
        self._host_delays: dict[int, int] = {}
        """Chunk index -> microseconds its host did not run the reader, where measured and not 0."""
        self._host_holds: dict[int, int] = {}
        """Chunk index -> the longest hold of the host in its wait, where longer than its host delay."""
        self._host_held_totals: dict[int, int] = {}
        """Chunk index -> every hold of the host in its wait summed, where more than the longest."""
        self._host_due_ns = 0
        """A chunk at or after this time has its host delay measured (the first chunk always is)."""
        self._json: JsonProgress | None = None
        self._json_document = ""
        self._retracted: dict[int, tuple[int, int]] = {}
        """Chunk index -> (bytes, tokens) of content already shown that the chunk withdrew."""
        self.tokens_after_cancel: int | None = None
        """Server side: tokens generated after the peer went away; set it before ``finish``."""

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> StreamRecorder:
        """Start the clock and the span; call just before sending the request (or, on a server, on receipt)."""
        if self._side in _WATCHING_SIDES and _watch_host and self._watch is None:
            self._watch_host()
        self._wall_start_ns = time.time_ns()
        self._start_ns = time.perf_counter_ns()
        try:
            self._span = self._tracer.start_span(
                self._name,
                context=self._parent,
                kind=self._kind,
                attributes=self._attributes,
                start_time=self._wall_start_ns,
            )
        except Exception:
            _warn_once("start", "streamscope: could not start a stream span; this stream is not recorded")
        return self

    def _watch_host(self) -> None:
        """Attach the watch of the host this stream is read on; it is released when the stream finishes, or
        when the recorder is collected without finishing."""
        try:
            watch = host_watch.acquire()
        except Exception:
            _warn_once("watch", "streamscope: could not watch the host; host delays are not recorded")
            return
        self._watch, self._watch_kind = watch, watch.kind
        release = self._watch_release = weakref.finalize(self, watch.release)
        release.atexit = False

    def _release_watch(self) -> None:
        release, self._watch, self._watch_release = self._watch_release, None, None
        if release is not None:
            try:
                release()
            except Exception:
                _warn_once("release", "streamscope: could not release the host watch")

    @property
    def span(self) -> trace.Span:
        return self._span or trace.INVALID_SPAN

    def inject(self, headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
        """Add W3C trace context (``traceparent``) for this stream's span to outgoing request headers."""
        try:
            propagate.inject(headers, context=trace.set_span_in_context(self.span, self._parent))
        except Exception:
            _warn_once("inject", "streamscope: could not inject trace context")
        return headers

    # --- the hot path ------------------------------------------------------------------------------------

    def first_byte(self) -> None:
        """Mark the first byte of the response body (received, or sent on a server); later calls are no-ops."""
        if self._first_byte_ns is None:
            self._first_byte_ns = time.perf_counter_ns()

    def chunk(
        self,
        tokens: int = 0,
        content_bytes: int = 0,
        wire_bytes: int = 0,
        text: str | None = None,
        tool_call: bool = False,
    ) -> None:
        """Record one chunk now. ``content_bytes`` 0 marks a chunk without content (role, ping, usage);
        ``tool_call`` says the chunk carries part of a tool call (only the first such chunk is remembered)."""
        if len(self._times) >= MAX_CHUNKS:
            self._dropped += 1
            return
        if tool_call and self._first_tool_call is None:
            self._first_tool_call = len(self._times)
        now = time.perf_counter_ns()
        if now >= self._host_due_ns:
            self._host_delay(now)
        self._times.append(now)
        self._tokens.append(tokens)
        self._content.append(content_bytes)
        self._wire.append(wire_bytes)
        if text:
            self._tail.append(text)

    def _host_delay(self, now: int) -> None:
        """The slow path of ``chunk``, run at most once per ``HOST_GAP_NS`` of the stream: keep how much of the
        wait for the chunk arriving ``now`` the host did not run the reader, if it came that long after the
        one before (or is the first), and when the next chunk is worth looking at (never, without a watch)."""
        watch = self._watch
        if watch is None:
            self._host_due_ns = _NEVER
            return
        self._host_due_ns = now + HOST_GAP_NS  # from a chunk at or before the one before: never too late
        times = self._times
        if times and now - times[-1] < HOST_GAP_NS:
            return
        try:
            since = times[-1] if times else self._start_ns
            late_us = watch.late_us(since, now)
            longest_us, total_us = watch.holds_us(since, now)
            held_us = max(late_us, longest_us)
        except Exception:
            _warn_once("host_delay", "streamscope: could not read the host watch; host delays are not recorded")
            self._release_watch()
            self._watch_kind = None
            self._host_delays.clear()
            self._host_holds.clear()
            self._host_held_totals.clear()
            return
        if late_us:
            self._host_delays[len(self._times)] = late_us
        if self._side == "client":
            if held_us > late_us:
                self._host_holds[len(self._times)] = held_us
            if total_us > held_us:
                self._host_held_totals[len(self._times)] = total_us

    def retract(self, content_bytes: int, tokens: int = 0) -> None:
        """Say that the chunk recorded last withdrew ``content_bytes`` (``tokens``) of the content shown before
        it, from the end (rejected draft tokens, a replaced suffix). A chunk that only withdraws is recorded with
        ``chunk(0, 0, wire_bytes)`` first."""
        if self._times and content_bytes > 0 and not self._dropped:  # a dropped chunk's withdrawal is not kept
            index = len(self._times) - 1
            withdrawn, withdrawn_tokens = self._retracted.get(index, (0, 0))
            self._retracted[index] = (withdrawn + content_bytes, withdrawn_tokens + max(0, tokens))

    def json_text(self, text: str, document: Literal["content", "tool_call"] = "content") -> None:
        """Follow ``text``, the next piece of a JSON document the stream carries (``content``: the answer in a
        JSON response format; ``tool_call``: a tool call's arguments), as part of the chunk recorded last. The
        span then says when each top-level field and the whole document became complete. One document a
        stream: pieces of another are ignored."""
        try:
            if self._json is None:
                self._json, self._json_document = JsonProgress(), document
            elif document != self._json_document:
                return
            self._json.feed(text, self._times[-1] if self._times else time.perf_counter_ns())
        except Exception:
            _warn_once("json", "streamscope: could not follow a JSON document; its progress is not recorded")
            self._json = None
            self._json_document = "failed"

    # --- stream facts ------------------------------------------------------------------------------------

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self._attributes[key] = value

    def mark_tokens_estimated(self) -> None:
        """Say that per-chunk token counts are estimates (the provider did not report them per chunk)."""
        self._tokens_estimated = True

    def cancel(self) -> None:
        """Mark the moment the stream was cancelled (or the peer went away); the first call counts."""
        if self._cancel_ns is None:
            self._cancel_ns = time.perf_counter_ns()

    def finish(self, outcome: Outcome = "completed", *, error_type: str | None = None) -> None:
        """End the stream and emit its span (and metrics on the client side). Only the first call counts, from
        whichever thread (a gRPC callback and the application may both end a stream)."""
        with _FINISHING:
            if self._finished:
                return
            self._finished = True
        end_ns = time.perf_counter_ns()
        self._release_watch()
        if self._span is None:
            return
        try:
            self._emit(outcome, error_type, end_ns)
        except Exception:
            _warn_once("finish", "streamscope: could not emit a stream span; this stream is not recorded")

    def __enter__(self) -> StreamRecorder:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.finish("completed")
        elif issubclass(exc_type, GeneratorExit):
            self.cancel()
            self.finish("cancelled")
        else:
            self.finish("error", error_type=exc_type.__qualname__)

    # --- emission ----------------------------------------------------------------------------------------

    def _offset_us(self, perf_ns: int) -> int:
        return max(0, (perf_ns - self._start_ns) // 1000)

    def _emit(self, outcome: Outcome, error_type: str | None, end_ns: int) -> None:
        span = self._span
        assert span is not None
        start = self._start_ns
        offsets = [(t - start) // 1000 for t in self._times]
        attributes = self._attributes
        attributes[sc.STREAMSCOPE_OUTCOME] = outcome
        if error_type:
            attributes[sc.ERROR_TYPE] = error_type
        if self._first_byte_ns is not None:
            attributes[sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US] = self._offset_us(self._first_byte_ns)
        if self._cancel_ns is not None:
            attributes[sc.STREAMSCOPE_CANCEL_OFFSET_US] = self._offset_us(self._cancel_ns)
        if self.tokens_after_cancel is not None:
            attributes[sc.STREAMSCOPE_TOKENS_AFTER_CANCEL] = self.tokens_after_cancel
        if self._tokens_estimated:
            attributes[sc.STREAMSCOPE_TOKENS_ESTIMATED] = True
        if self._dropped:
            attributes[sc.STREAMSCOPE_CHUNKS_DROPPED] = self._dropped
        if self._first_tool_call is not None:
            attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] = self._first_tool_call
        content_offsets = [o for o, c in zip(offsets, self._content) if c > 0]
        if content_offsets:
            attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = content_offsets[0] / 1e6
        if self._json is not None and self._json.started_ns is not None:
            self._json_attributes(self._json, attributes)
        score = repetition_score(" ".join(self._tail))
        if score is not None:
            attributes[sc.STREAMSCOPE_REPETITION_SCORE] = score
        if self._encoding == "packed":
            attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US] = int64_bytes(offsets)
            attributes[sc.STREAMSCOPE_CHUNKS_TOKENS] = int64_bytes(self._tokens)
            attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES] = int64_bytes(self._content)
            attributes[sc.STREAMSCOPE_CHUNKS_WIRE_BYTES] = int64_bytes(self._wire)
        host_delays, host_holds, host_held_totals = self._host_delays, self._host_holds, self._host_held_totals
        if self._watch_kind is not None:
            attributes[sc.STREAMSCOPE_HOST_WATCH] = self._watch_kind
            if self._encoding == "packed":
                attributes[sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US] = _sparse_int64s(len(offsets), host_delays)
                if host_holds:
                    attributes[sc.STREAMSCOPE_CHUNKS_HOST_HELD_US] = _sparse_int64s(len(offsets), host_holds)
                if host_held_totals:
                    attributes[sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US] = _sparse_int64s(
                        len(offsets), host_held_totals
                    )
        retracted = self._retracted
        if retracted and self._encoding == "packed":
            attributes[sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES] = _sparse_int64s(
                len(offsets), {i: size for i, (size, _) in retracted.items()}
            )
            attributes[sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS] = _sparse_int64s(
                len(offsets), {i: tokens for i, (_, tokens) in retracted.items()}
            )
        span.set_attributes(attributes)
        if self._encoding == "events":
            wall = self._wall_start_ns
            chunks = zip(offsets, self._tokens, self._content, self._wire)
            for index, (offset, tokens, content, wire) in enumerate(chunks):
                event: dict[str, AttributeValue] = {
                    sc.STREAMSCOPE_CHUNK_TOKENS: tokens,
                    sc.STREAMSCOPE_CHUNK_CONTENT_BYTES: content,
                    sc.STREAMSCOPE_CHUNK_WIRE_BYTES: wire,
                }
                if index in host_delays:  # only where not 0: an event without it reads 0
                    event[sc.STREAMSCOPE_CHUNK_HOST_DELAY_US] = host_delays[index]
                if index in host_holds:
                    event[sc.STREAMSCOPE_CHUNK_HOST_HELD_US] = host_holds[index]
                if index in host_held_totals:
                    event[sc.STREAMSCOPE_CHUNK_HOST_HELD_TOTAL_US] = host_held_totals[index]
                if index in retracted:
                    size, tokens = retracted[index]
                    event[sc.STREAMSCOPE_CHUNK_RETRACTED_BYTES] = size
                    event[sc.STREAMSCOPE_CHUNK_RETRACTED_TOKENS] = tokens
                span.add_event(sc.CHUNK_EVENT, event, timestamp=wall + offset * 1000)
        if outcome == "error":
            span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))
        span.end(end_time=self._wall_start_ns + (end_ns - start))
        if self._side in ("client", "browser") and content_offsets:
            self._record_metrics(content_offsets)

    def _json_attributes(self, progress: JsonProgress, attributes: dict[str, AttributeValue]) -> None:
        progress.finish()
        attributes[sc.STREAMSCOPE_JSON_DOCUMENT] = self._json_document
        attributes[sc.STREAMSCOPE_JSON_OUTCOME] = progress.outcome
        attributes[sc.STREAMSCOPE_JSON_FIELD_COUNT] = progress.field_count
        if progress.valid_ns is not None:
            attributes[sc.STREAMSCOPE_JSON_VALID_OFFSET_US] = self._offset_us(progress.valid_ns)
        if progress.fields:
            attributes[sc.STREAMSCOPE_JSON_FIELD_NAMES] = [name for name, _ in progress.fields]
            attributes[sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US] = [self._offset_us(at) for _, at in progress.fields]

    def _record_metrics(self, content_offsets: list[int]) -> None:
        labels: dict[str, AttributeValue] = {}
        for key in (
            sc.GEN_AI_OPERATION_NAME,
            sc.GEN_AI_PROVIDER_NAME,
            sc.GEN_AI_REQUEST_MODEL,
            sc.GEN_AI_RESPONSE_MODEL,
            sc.SERVER_ADDRESS,
            sc.SERVER_PORT,
        ):
            value = self._attributes.get(key)
            if isinstance(value, str | bool | int | float):
                labels[key] = value
        instruments.RECORDS.submit(self._meter_provider, labels, content_offsets)


_tracers: weakref.WeakKeyDictionary[trace.TracerProvider, trace.Tracer] = weakref.WeakKeyDictionary()


def _tracer(provider: trace.TracerProvider | None) -> trace.Tracer:
    """streamscope's tracer on ``provider`` (None: the global one), made once per provider: ``get_tracer``
    costs tens of microseconds, a stream's worth of chunks. (Until a global provider is set, the global one is a
    proxy whose tracers follow the provider set later.)"""
    provider = provider or trace.get_tracer_provider()
    tracer = _tracers.get(provider)
    if tracer is None:
        tracer = _tracers[provider] = trace.get_tracer("streamscope", tracer_provider=provider)
    return tracer


def _sparse_int64s(length: int, values: Mapping[int, int]) -> bytes:
    """``int64_bytes``' layout of an array of ``length`` that is 0 but at the indices of ``values``."""
    packed = bytearray(8 * length)
    for index, value in values.items():
        _INT64_LE.pack_into(packed, 8 * index, value)
    return bytes(packed)


def repetition_score(text: str, n: int = 3, minimum_words: int = 24) -> float | None:
    """Share of repeated word ``n``-grams in ``text``: near 0 for prose, near 1 for a stuck loop."""
    words = text.split()
    if len(words) < minimum_words:
        return None
    grams = list(zip(*(words[i:] for i in range(n))))
    return round(1.0 - len(set(grams)) / len(grams), 4)
