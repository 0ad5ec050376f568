"""llama-server, its binary and its models, from the fixtures tests/llama serves them with (one build per session)."""

from tests.llama.conftest import drafting_server, llama_server_binary, tiny_model

__all__ = ["drafting_server", "llama_server_binary", "tiny_model"]
