"""The demo workload: a local OpenAI-compatible streaming server and instrumented clients against it."""
