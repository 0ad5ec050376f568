"""streamscope: observability for LLM token streams, from the GPU to the user's screen.

The SDK records every chunk of a streamed response (arrival time, tokens, content and wire bytes) with no
span operation per chunk, and emits one OpenTelemetry span per stream that a streamscope collector (or
any OTLP backend) receives.
"""

from streamscope._internal.httpx_client import astream_ndjson, astream_sse, stream_ndjson, stream_sse
from streamscope._internal.instruments import flush_metrics
from streamscope._internal.observer import StreamEvent
from streamscope._internal.ollama_client import instrument_ollama
from streamscope._internal.openai_client import instrument_openai
from streamscope._internal.recorder import Encoding, Outcome, Side, StreamRecorder, set_default_encoding
from streamscope._internal.setup import otlp_exporter, setup
from streamscope._internal.websocket_client import astream_websocket, stream_websocket
from streamscope._internal.websocket_server import ServerWebSocketResponse
from streamscope.asgi import StreamMiddleware

__all__ = [
    "Encoding",
    "Outcome",
    "ServerChunk",
    "ServerStream",
    "ServerWebSocketResponse",
    "Side",
    "StreamEvent",
    "StreamMiddleware",
    "StreamRecorder",
    "astream_ndjson",
    "astream_sse",
    "astream_websocket",
    "flush_metrics",
    "instrument_ollama",
    "instrument_openai",
    "otlp_exporter",
    "set_default_encoding",
    "setup",
    "stream_ndjson",
    "stream_sse",
    "stream_websocket",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The server helper needs Starlette, which the base install does not require.
    if name in ("ServerStream", "ServerChunk"):
        try:
            from streamscope import server
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "starlette":
                raise
            from streamscope.errors import MissingDependency
            from streamscope.install import install_command

            raise MissingDependency(
                f"streamscope.{name} needs Starlette, which the SDK alone does not install: `pip install starlette`, "
                f"or the server side (`{install_command('server')}`)"
            ) from None
        return getattr(server, name)
    raise AttributeError(f"module 'streamscope' has no attribute {name!r}")
