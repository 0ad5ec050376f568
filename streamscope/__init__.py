"""streamscope: observability for LLM token streams."""
