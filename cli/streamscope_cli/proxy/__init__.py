"""A network impairment proxy for LLM token streams (``streamscope proxy``).

Put it between a client and an OpenAI-compatible engine: it forwards every request (any method, path,
query, header, body) to ``ProxyConfig.upstream`` and streams the answer back byte for byte; a WebSocket is relayed
message by message, and gRPC calls too when given the engine's gRPC port (``grpc_relay``). On event streams
(``text/event-stream``, and ``application/x-ndjson``, a JSON document a line as Ollama sends; a WebSocket's or a
gRPC call's answer, a message an event, each kept whole; an "event" below is any of these) it can do what real
networks and gateways do to token streams, so that streamscope's stall attribution can be scored against what
really happened:

buffer_coalesce
    Hold whole events and flush them together every ``flush_bytes`` bytes or ``flush_ms`` after the oldest
    held event came in, whichever is first: a gateway with response buffering left on. The client sees bursts.
stall
    Stop forwarding for ``duration_ms`` right after event ``after_event`` (counted from 0), then resume: a
    connection hiccup. Events that arrive meanwhile go out together after it.
rechunk
    Move write boundaries, never bytes: ``split_bytes`` cuts writes into small pieces (events split across
    writes), ``merge_events`` sends N whole events per write (earlier ones wait for the last). Not on messages.
drop
    Close the connection right after event ``after_event``: the client gets a truncated body.

Each rule applies to a stream with its ``probability`` (drawn from a seeded RNG: same seed, same decisions)
and only to request paths starting with ``path_prefix``. Events are never split or corrupted except by
``rechunk.split_bytes``. Streams no rule hits, and every other response, are relayed untouched.

Ground truth: everything that really happened goes to the ``GroundTruthSink`` given to ``create_app``:
``network_buffering`` for holds (coalescing, merging) longer than 1 ms, ``connection`` for stalls and drops,
with the stream's trace id (from ``traceparent``: the request's header, a WebSocket's handshake, a call's
metadata) and the proxy's request id (also sent back to the client in the ``x-streamscope-proxy-request-id``
response header, handshake header or initial metadata). The proxy itself not running for a retransmission timeout
or more (a busy machine) is ``connection`` too, for every stream it was relaying (detail source ``watchdog``): it
held them as a stalled connection would.
"""

from streamscope_cli.proxy.app import REQUEST_ID_HEADER, create_app, trace_id_of
from streamscope_cli.proxy.config import BufferCoalesce, Drop, ImpairmentRule, ProxyConfig, Rechunk, Stall
from streamscope_cli.proxy.run import run_proxy

__all__ = [
    "REQUEST_ID_HEADER",
    "BufferCoalesce",
    "Drop",
    "ImpairmentRule",
    "ProxyConfig",
    "Rechunk",
    "Stall",
    "create_app",
    "run_proxy",
    "trace_id_of",
]
