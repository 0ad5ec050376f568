"""Names of the streamscope streaming span conventions.

GENERATED from schema/conventions/streaming.yaml by streamscope_cli.dev.semconv_codegen;
do not edit by hand.
"""

from typing import Final

REGISTRY_VERSION: Final = 1
SEMCONV_VERSION: Final = "1.41.0"

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""The operation requested of the model. type string; required; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""The provider (or serving engine) as identified by the emitter. type string; required; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""The model the request asked for. type string; conditionally required (if available); sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""The model that produced the response, as reported by the provider. type string; recommended; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""The provider's response id; the fallback key joining sides when trace context was lost. type string; recommended; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
"""Set to true because the response was streamed. type boolean; conditionally required (always true on stream spans); sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""Seconds from the request to the first chunk carrying content. type double; unit s; recommended; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
"""Why generation stopped, one entry per choice. type string[]; recommended; sides: client, server, browser, gateway; OTel GenAI semconv."""

GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Prompt tokens as reported by the provider. type int; unit {token}; recommended; sides: client, server; OTel GenAI semconv."""

GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Generated tokens as reported by the provider. type int; unit {token}; recommended; sides: client, server; OTel GenAI semconv."""

GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
"""Of the generated tokens, those the model spent reasoning, as reported by the provider (counted in gen_ai.usage.output_tokens; a stream that did not show them has fewer tokens in its chunks than that total). type int; unit {token}; recommended; sides: client, server; OTel GenAI semconv."""

SERVER_ADDRESS: Final = "server.address"
"""The host the client streamed from. type string; recommended; sides: client, browser; OTel GenAI semconv."""

SERVER_PORT: Final = "server.port"
"""The port the client streamed from. type int; conditionally required (if server.address is set); sides: client, browser; OTel GenAI semconv."""

ERROR_TYPE: Final = "error.type"
"""The class of error that ended the stream. type string; conditionally required (if the stream ended in an error); sides: client, server, browser, gateway; OTel GenAI semconv."""

HTTP_ROUTE: Final = "http.route"
"""The route template that served the stream. type string; recommended; sides: server, gateway; OTel GenAI semconv."""

RPC_METHOD: Final = "rpc.method"
"""The fully-qualified gRPC method that streamed the response (package.Service/Method). type string; recommended; sides: client, server; OTel GenAI semconv."""

STREAMSCOPE_SIDE: Final = "streamscope.side"
"""Where the chunk times were observed; marks the span as a stream span. type string; required; sides: client, server, browser, gateway; streamscope extension."""
STREAMSCOPE_SIDE_VALUES: Final = ("client", "server", "browser", "gateway")


class StreamscopeSideValues:
    """The values of ``streamscope.side``."""

    CLIENT: Final = "client"
    SERVER: Final = "server"
    BROWSER: Final = "browser"
    GATEWAY: Final = "gateway"


STREAMSCOPE_ENCODING: Final = "streamscope.encoding"
"""How the chunk timeline is carried (see encodings below). type string; required; sides: client, server, browser, gateway; streamscope extension."""
STREAMSCOPE_ENCODING_VALUES: Final = ("packed", "events")


class StreamscopeEncodingValues:
    """The values of ``streamscope.encoding``."""

    PACKED: Final = "packed"
    EVENTS: Final = "events"


STREAMSCOPE_TRANSPORT: Final = "streamscope.transport"
"""The streaming transport. type string; recommended; sides: client, server, browser, gateway; streamscope extension."""
STREAMSCOPE_TRANSPORT_VALUES: Final = ("sse", "websocket", "grpc", "chunked")


class StreamscopeTransportValues:
    """The values of ``streamscope.transport``."""

    SSE: Final = "sse"
    WEBSOCKET: Final = "websocket"
    GRPC: Final = "grpc"
    CHUNKED: Final = "chunked"


STREAMSCOPE_OUTCOME: Final = "streamscope.outcome"
"""How the stream ended; cancelled means our side stopped it, disconnected means the peer went away. type string; required; sides: client, server, browser, gateway; streamscope extension."""
STREAMSCOPE_OUTCOME_VALUES: Final = ("completed", "cancelled", "error", "timeout", "disconnected")


class StreamscopeOutcomeValues:
    """The values of ``streamscope.outcome``."""

    COMPLETED: Final = "completed"
    CANCELLED: Final = "cancelled"
    ERROR: Final = "error"
    TIMEOUT: Final = "timeout"
    DISCONNECTED: Final = "disconnected"


STREAMSCOPE_FIRST_BYTE_OFFSET_US: Final = "streamscope.first_byte_offset_us"
"""Microseconds from span start to the first byte of the response body (received, or sent on the server). type int; unit us; recommended; sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CANCEL_OFFSET_US: Final = "streamscope.cancel_offset_us"
"""Microseconds from span start to the cancel or disconnect. type int; unit us; conditionally required (if streamscope.outcome is cancelled or disconnected); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_TOKENS_AFTER_CANCEL: Final = "streamscope.tokens_after_cancel"
"""Tokens the server generated after the client cancelled or went away (the cancellation tax). type int; unit {token}; recommended; sides: server; streamscope extension."""

STREAMSCOPE_TOKENS_ESTIMATED: Final = "streamscope.tokens_estimated"
"""True when chunk token counts are estimates because the provider did not report them per chunk. type boolean; recommended; sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_ENGINE_REQUEST_ID: Final = "streamscope.engine.request_id"
"""The serving engine's request id, to join with engine logs. type string; recommended; sides: server; streamscope extension."""

GEN_AI_LATENCY_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
"""Seconds the request waited from its arrival to its first scheduling (vLLM's name); tells a first token's wait for a slot from what held it after. type double; unit s; recommended; sides: server; vLLM's tracing."""

STREAMSCOPE_NODE_NAME: Final = "streamscope.node.name"
"""The serving node, named as its GPU agent names it, to join stalls with that node's samples. type string; recommended; sides: server; streamscope extension."""

STREAMSCOPE_CHUNKS_DROPPED: Final = "streamscope.chunks_dropped"
"""Chunks the emitter did not keep (its per-stream cap); the stored timeline is then marked truncated. type int; conditionally required (if the emitter dropped chunks past its per-stream cap); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_BROWSER_FRAMES_DROPPED: Final = "streamscope.browser.frames_dropped"
"""Animation frames the page missed while the stream was on screen (frames over 1/60 s late, counted while the page was visible): a stream that janks the page shows here. type int; recommended; sides: browser; streamscope extension."""

STREAMSCOPE_REPETITION_SCORE: Final = "streamscope.repetition_score"
"""Share (0 to 1) of repeated text in the tail of the stream; high values flag stuck generation loops. type double; recommended; sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_HOST_WATCH: Final = "streamscope.host.watch"
"""How the emitter watched its own host for streamscope.chunks.host_delay_us: an asyncio event loop's heartbeat, a thread's heartbeat, or the browser's Long Tasks API; absent when it did not watch. type string; recommended; sides: client, server, browser, gateway; streamscope extension."""
STREAMSCOPE_HOST_WATCH_VALUES: Final = ("asyncio", "thread", "longtask")


class StreamscopeHostWatchValues:
    """The values of ``streamscope.host.watch``."""

    ASYNCIO: Final = "asyncio"
    THREAD: Final = "thread"
    LONGTASK: Final = "longtask"


STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: Final = "streamscope.first_tool_call_chunk"
"""Index (from 0) in the chunk timeline of the first chunk carrying part of a tool call (name or arguments). type int; recommended (if the stream called a tool); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_JSON_DOCUMENT: Final = "streamscope.json.document"
"""The JSON document the emitter followed as it streamed: the answer itself (structured output, a JSON response format) or the first tool call's arguments. The streamscope.json.* attributes describe it. type string; conditionally required (if the emitter followed a JSON document in the stream); sides: client, browser; streamscope extension."""
STREAMSCOPE_JSON_DOCUMENT_VALUES: Final = ("content", "tool_call")


class StreamscopeJsonDocumentValues:
    """The values of ``streamscope.json.document``."""

    CONTENT: Final = "content"
    TOOL_CALL: Final = "tool_call"


STREAMSCOPE_JSON_OUTCOME: Final = "streamscope.json.outcome"
"""valid: the document closed with nothing but whitespace after it; truncated: the stream ended before it closed; malformed: a character broke the JSON grammar (or followed the closed document). type string; conditionally required (if streamscope.json.document is set); sides: client, browser; streamscope extension."""
STREAMSCOPE_JSON_OUTCOME_VALUES: Final = ("valid", "truncated", "malformed")


class StreamscopeJsonOutcomeValues:
    """The values of ``streamscope.json.outcome``."""

    VALID: Final = "valid"
    TRUNCATED: Final = "truncated"
    MALFORMED: Final = "malformed"


STREAMSCOPE_JSON_VALID_OFFSET_US: Final = "streamscope.json.valid_offset_us"
"""Microseconds from the span start to the chunk that closed the document (made it parse). type int; unit us; conditionally required (if the document closed); sides: client, browser; streamscope extension."""

STREAMSCOPE_JSON_FIELD_COUNT: Final = "streamscope.json.field_count"
"""Top-level fields (of an object) or elements (of an array) whose values were complete: a string, object or array at its closing character, a number or literal at the character after it. type int; conditionally required (if streamscope.json.document is set); sides: client, browser; streamscope extension."""

STREAMSCOPE_JSON_FIELD_NAMES: Final = "streamscope.json.field_names"
"""The first 32 complete top-level fields' names, in the order they completed ([0], [1], ... in an array). type string[]; recommended; sides: client, browser; streamscope extension."""

STREAMSCOPE_JSON_FIELD_OFFSETS_US: Final = "streamscope.json.field_offsets_us"
"""Microseconds from the span start to the chunk that completed each of streamscope.json.field_names, in the same order; the first is the time to the first usable field. type int[]; unit us; recommended; sides: client, browser; streamscope extension."""

STREAMSCOPE_CHUNKS_OFFSET_US: Final = "streamscope.chunks.offset_us"
"""Microseconds from span start to each chunk's arrival (client, browser) or emission (server); non-decreasing. type int64s; unit us; required (in the packed encoding); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_TOKENS: Final = "streamscope.chunks.tokens"
"""Tokens in each chunk. type int64s; unit {token}; required (in the packed encoding); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_CONTENT_BYTES: Final = "streamscope.chunks.content_bytes"
"""UTF-8 bytes of generated content in each chunk; 0 marks a chunk without content (role, ping, usage). type int64s; unit By; required (in the packed encoding); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_WIRE_BYTES: Final = "streamscope.chunks.wire_bytes"
"""Bytes each chunk took on the wire, framing included; 0 when unknown. type int64s; unit By; recommended (in the packed encoding); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_PAINT_DELAY_US: Final = "streamscope.chunks.paint_delay_us"
"""Microseconds from each chunk's arrival to the frame that showed it (the animation frame after the app rendered it); 0 when not measured. type int64s; unit us; recommended (in the packed encoding, on the browser side); sides: browser; streamscope extension."""

STREAMSCOPE_CHUNKS_RENDER_US: Final = "streamscope.chunks.render_us"
"""Microseconds of main-thread work the app spent rendering each chunk; 0 when not measured. type int64s; unit us; recommended (in the packed encoding, on the browser side); sides: browser; streamscope extension."""

STREAMSCOPE_CHUNKS_HOST_DELAY_US: Final = "streamscope.chunks.host_delay_us"
"""Microseconds of the wait before each chunk during which the emitter's own host did not run it, in the hold the chunk waited out (its event loop ran late, its process was starved of CPU, the page's main thread ran a long task, ending just before the chunk was read, or on a server or gateway sent): measured for the first chunk and for every chunk that came at least 100 ms after the one before it; 0 otherwise. On a server it is the serving process's own part of the gap (tokenising, detokenising, an interpreter busy with other requests), not the engine's. type int64s; unit us; recommended (in the packed encoding, when the emitter watched its own host (streamscope.host.watch)); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_HOST_HELD_US: Final = "streamscope.chunks.host_held_us"
"""Microseconds of the longest hold of the reader's own host anywhere in the wait before each chunk, where longer than streamscope.chunks.host_delay_us (measured for the same chunks); 0 elsewhere, and absent when no chunk has one. A hold that ended well before the read did not delay the read itself, but a peer on the same host (an engine beside its load generator) was held too and sent late because of it. type int64s; unit us; recommended (in the packed encoding, when the emitter watched its own host and a hold fell inside a wait); sides: client; streamscope extension."""

STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US: Final = "streamscope.chunks.host_held_total_us"
"""Microseconds of every hold of the reader's own host in the wait before each chunk, summed, where more than streamscope.chunks.host_held_us (measured for the same chunks); 0 elsewhere, and absent when no chunk has one. A host busy in fits holds the reader several times in one wait: the longest alone under-counts it. type int64s; unit us; recommended (in the packed encoding, when the emitter watched its own host and it held the reader more than once in a wait); sides: client; streamscope extension."""

STREAMSCOPE_CHUNKS_RETRACTED_BYTES: Final = "streamscope.chunks.retracted_bytes"
"""UTF-8 bytes of content already delivered that each chunk withdrew (draft tokens a verifier rejected, a replaced suffix), taken from the end of what was shown before the chunk's own content; 0 for the rest. A chunk that withdraws and carries no content of its own is a retraction; one that does replaces text. type int64s; unit By; recommended (in the packed encoding, when the stream took back content it had shown); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNKS_RETRACTED_TOKENS: Final = "streamscope.chunks.retracted_tokens"
"""Tokens of the content each chunk withdrew (see streamscope.chunks.retracted_bytes); 0 for the rest. type int64s; unit {token}; recommended (in the packed encoding, when the stream took back content it had shown); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_TOKENS: Final = "streamscope.chunk.tokens"
"""Tokens in this chunk. type int; unit {token}; required (on streamscope.chunk events); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_CONTENT_BYTES: Final = "streamscope.chunk.content_bytes"
"""UTF-8 bytes of generated content in this chunk; 0 marks a chunk without content. type int; unit By; required (on streamscope.chunk events); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_WIRE_BYTES: Final = "streamscope.chunk.wire_bytes"
"""Bytes this chunk took on the wire, framing included; 0 when unknown. type int; unit By; recommended (on streamscope.chunk events); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_PAINT_DELAY_US: Final = "streamscope.chunk.paint_delay_us"
"""Microseconds from this chunk's arrival to the frame that showed it; 0 when not measured. type int; unit us; recommended (on streamscope.chunk events, on the browser side); sides: browser; streamscope extension."""

STREAMSCOPE_CHUNK_RENDER_US: Final = "streamscope.chunk.render_us"
"""Microseconds of main-thread work the app spent rendering this chunk; 0 when not measured. type int; unit us; recommended (on streamscope.chunk events, on the browser side); sides: browser; streamscope extension."""

STREAMSCOPE_CHUNK_HOST_DELAY_US: Final = "streamscope.chunk.host_delay_us"
"""Microseconds of the wait before this chunk during which the emitter's own host did not run it (see streamscope.chunks.host_delay_us); an event without it reads 0. type int; unit us; recommended (on streamscope.chunk events, when the emitter watched its own host (streamscope.host.watch)); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_HOST_HELD_US: Final = "streamscope.chunk.host_held_us"
"""Microseconds of the longest hold of the reader's own host in the wait before this chunk (see streamscope.chunks.host_held_us); an event without it reads 0. type int; unit us; recommended (on streamscope.chunk events, when the emitter watched its own host and a hold fell inside the wait); sides: client; streamscope extension."""

STREAMSCOPE_CHUNK_HOST_HELD_TOTAL_US: Final = "streamscope.chunk.host_held_total_us"
"""Microseconds of every hold of the reader's own host in the wait before this chunk, summed (see streamscope.chunks.host_held_total_us); an event without it reads 0. type int; unit us; recommended (on streamscope.chunk events, when the emitter watched its own host and it held the reader more than once in the wait); sides: client; streamscope extension."""

STREAMSCOPE_CHUNK_RETRACTED_BYTES: Final = "streamscope.chunk.retracted_bytes"
"""UTF-8 bytes of content already delivered that this chunk withdrew (see streamscope.chunks.retracted_bytes); an event without it reads 0. type int; unit By; recommended (on streamscope.chunk events that withdrew content already shown); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_CHUNK_RETRACTED_TOKENS: Final = "streamscope.chunk.retracted_tokens"
"""Tokens of the content this chunk withdrew; an event without it reads 0. type int; unit {token}; recommended (on streamscope.chunk events that withdrew content already shown); sides: client, server, browser, gateway; streamscope extension."""

STREAMSCOPE_TRUTH_CAUSE: Final = "streamscope.truth.cause"
"""The cause, from the stall taxonomy (plus queue, a request waiting for a free slot before its first token, and chunking_regression, a change in tokens per chunk). type string; required; sides: simulator; streamscope extension."""
STREAMSCOPE_TRUTH_CAUSE_VALUES: Final = (
    "prefill_interference",
    "kv_pressure",
    "spec_decode",
    "gpu_throttle",
    "gpu_fault",
    "network_buffering",
    "connection",
    "client_render",
    "client_host",
    "server_host",
    "queue",
    "chunking_regression",
)


class StreamscopeTruthCauseValues:
    """The values of ``streamscope.truth.cause``."""

    PREFILL_INTERFERENCE: Final = "prefill_interference"
    KV_PRESSURE: Final = "kv_pressure"
    SPEC_DECODE: Final = "spec_decode"
    GPU_THROTTLE: Final = "gpu_throttle"
    GPU_FAULT: Final = "gpu_fault"
    NETWORK_BUFFERING: Final = "network_buffering"
    CONNECTION: Final = "connection"
    CLIENT_RENDER: Final = "client_render"
    CLIENT_HOST: Final = "client_host"
    SERVER_HOST: Final = "server_host"
    QUEUE: Final = "queue"
    CHUNKING_REGRESSION: Final = "chunking_regression"


STREAMSCOPE_TRUTH_END_UNIX_NANO: Final = "streamscope.truth.end_unix_nano"
"""End of the window in which the cause delayed the stream (the record's time is its start). type int; unit ns; required; sides: simulator; streamscope extension."""

STREAMSCOPE_TRUTH_REQUEST_ID: Final = "streamscope.truth.request_id"
"""The engine's or the proxy's id of the affected request. type string; recommended; sides: simulator; streamscope extension."""

STREAMSCOPE_TRUTH_CHUNK_INDICES: Final = "streamscope.truth.chunk_indices"
"""Indices of the server-emitted SSE events the cause delayed (the server span's chunk numbering). type int[]; recommended; sides: simulator; streamscope extension."""

STREAMSCOPE_TRUTH_MAGNITUDE: Final = "streamscope.truth.magnitude"
"""How much (seconds of delay added, or tokens per chunk after a chunking change). type double; recommended; sides: simulator; streamscope extension."""

STREAMSCOPE_TRUTH_SCENARIO: Final = "streamscope.truth.scenario"
"""The scenario that was running. type string; recommended; sides: simulator; streamscope extension."""

STREAMSCOPE_EVENT_KIND: Final = "streamscope.event.kind"
"""What happened on the node. type string; required; sides: agent; streamscope extension."""
STREAMSCOPE_EVENT_KIND_VALUES: Final = (
    "preemption",
    "kv_high_water",
    "prefill_burst",
    "spec_acceptance_drop",
    "queue_spike",
    "engine_restart",
    "xid",
    "throttle",
    "gpu_lost",
    "gpu_unavailable",
    "gpu_recovery_action",
)


class StreamscopeEventKindValues:
    """The values of ``streamscope.event.kind``."""

    PREEMPTION: Final = "preemption"
    KV_HIGH_WATER: Final = "kv_high_water"
    PREFILL_BURST: Final = "prefill_burst"
    SPEC_ACCEPTANCE_DROP: Final = "spec_acceptance_drop"
    QUEUE_SPIKE: Final = "queue_spike"
    ENGINE_RESTART: Final = "engine_restart"
    XID: Final = "xid"
    THROTTLE: Final = "throttle"
    GPU_LOST: Final = "gpu_lost"
    GPU_UNAVAILABLE: Final = "gpu_unavailable"
    GPU_RECOVERY_ACTION: Final = "gpu_recovery_action"


STREAMSCOPE_EVENT_END_UNIX_NANO: Final = "streamscope.event.end_unix_nano"
"""When the event ended. type int; unit ns; conditionally required (once the event has ended (instant events end where they start)); sides: agent; streamscope extension."""

STREAMSCOPE_EVENT_MAGNITUDE: Final = "streamscope.event.magnitude"
"""How much (preemptions counted, peak KV usage, tokens in the burst, acceptance reached, queue length). type double; recommended; sides: agent; streamscope extension."""

STREAMSCOPE_EVENT_XID: Final = "streamscope.event.xid"
"""The NVIDIA XID error code. type int; conditionally required (for xid events); sides: agent; streamscope extension."""

STREAMSCOPE_ENGINE_ID: Final = "streamscope.engine.id"
"""The engine behind the scraped endpoint (vllm, sglang, tgi; vllm/1 when one endpoint serves several). type string; recommended; sides: agent; streamscope extension."""

STREAMSCOPE_ENGINE_URL: Final = "streamscope.engine.url"
"""The metrics endpoint the agent scrapes (a resource attribute). type string; recommended; sides: agent; streamscope extension."""

STREAMSCOPE_BENCH_RUN: Final = "streamscope.bench.run"
"""The bench run that sent the stream (a resource attribute; `streamscope compare` selects runs by it). type string; conditionally required (on the streams `streamscope bench` sends); sides: client; streamscope extension."""

STREAMSCOPE_BENCH_LABEL: Final = "streamscope.bench.label"
"""The label the user gave the bench run (a resource attribute), e.g. the release under test. type string; recommended; sides: client; streamscope extension."""

STREAMSCOPE_GPU_UUID: Final = "streamscope.gpu.uuid"
"""The GPU's NVML UUID. type string; conditionally required (on GPU samples and GPU events); sides: agent; streamscope extension."""

STREAMSCOPE_GPU_INDEX: Final = "streamscope.gpu.index"
"""The GPU's NVML index on its host. type int; recommended; sides: agent; streamscope extension."""

STREAMSCOPE_GPU_NAME: Final = "streamscope.gpu.name"
"""The GPU's product name. type string; recommended; sides: agent; streamscope extension."""

METRIC_PREFIX: Final = "streamscope."
METRIC_SOURCES: Final = ("engine", "gpu", "agent")

CHUNK_EVENT: Final = "streamscope.chunk"
"""One chunk; the event time is its arrival (client, browser) or emission (server)."""

PACKED_ARRAYS: Final = (
    STREAMSCOPE_CHUNKS_OFFSET_US,
    STREAMSCOPE_CHUNKS_TOKENS,
    STREAMSCOPE_CHUNKS_CONTENT_BYTES,
    STREAMSCOPE_CHUNKS_WIRE_BYTES,
    STREAMSCOPE_CHUNKS_PAINT_DELAY_US,
    STREAMSCOPE_CHUNKS_RENDER_US,
    STREAMSCOPE_CHUNKS_HOST_DELAY_US,
    STREAMSCOPE_CHUNKS_HOST_HELD_US,
    STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US,
    STREAMSCOPE_CHUNKS_RETRACTED_BYTES,
    STREAMSCOPE_CHUNKS_RETRACTED_TOKENS,
)
"""The packed encoding's parallel arrays, in their canonical order."""
CHUNK_EVENT_ATTRIBUTES: Final = (
    STREAMSCOPE_CHUNK_TOKENS,
    STREAMSCOPE_CHUNK_CONTENT_BYTES,
    STREAMSCOPE_CHUNK_WIRE_BYTES,
    STREAMSCOPE_CHUNK_PAINT_DELAY_US,
    STREAMSCOPE_CHUNK_RENDER_US,
    STREAMSCOPE_CHUNK_HOST_DELAY_US,
    STREAMSCOPE_CHUNK_HOST_HELD_US,
    STREAMSCOPE_CHUNK_HOST_HELD_TOTAL_US,
    STREAMSCOPE_CHUNK_RETRACTED_BYTES,
    STREAMSCOPE_CHUNK_RETRACTED_TOKENS,
)
"""The chunk event's attributes, in the same order as PACKED_ARRAYS after the offset."""
JSON_PROGRESS: Final = (
    STREAMSCOPE_JSON_DOCUMENT,
    STREAMSCOPE_JSON_OUTCOME,
    STREAMSCOPE_JSON_VALID_OFFSET_US,
    STREAMSCOPE_JSON_FIELD_COUNT,
    STREAMSCOPE_JSON_FIELD_NAMES,
    STREAMSCOPE_JSON_FIELD_OFFSETS_US,
)
"""The attributes of a JSON document followed as it streamed (``streamscope.json.*``)."""

STREAMSCOPE_GROUND_TRUTH_EVENT: Final = "streamscope.ground_truth"
"""Something the demo workload really did to a stream (a preemption, a prefill sharing the step, bytes a proxy held back); the record's time is the start of the window and its trace id the affected stream's."""

STREAMSCOPE_ENGINE_EVENT_EVENT: Final = "streamscope.engine_event"
"""Something the serving engine or its GPU did, derived by the GPU agent from its samples (a preemption, KV usage over its high-water mark, a prefill burst, a spec-decode acceptance drop, a queue spike, an engine restart, an XID error, throttling). The record's time is the start; open-ended events have no end yet."""
