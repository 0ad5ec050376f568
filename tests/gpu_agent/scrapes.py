"""What scraper tests share: an endpoint whose answers the test sets, and the values a scrape reported."""

from __future__ import annotations

from streamscope_gpu_agent.scrape import ScrapeResult


class Endpoint:
    """A ``fetch`` whose answer the test sets: exposition text, or an exception to raise. ``slots`` answers a URL
    ending in ``/slots`` (llama.cpp's, beside its /metrics)."""

    def __init__(self, answer: str | Exception, slots: str | Exception | None = None) -> None:
        self.answer = answer
        self.slots = slots
        self.calls: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout_s: float) -> str:
        self.calls.append((url, timeout_s))
        answer = self.slots if url.endswith("/slots") else self.answer
        if answer is None:
            raise AssertionError(f"{url} was not expected to be fetched")
        if isinstance(answer, Exception):
            raise answer
        return answer


def engine_values(result: ScrapeResult) -> dict[str, dict[str, float]]:
    """engine -> metric -> value, from the result's engine samples (each pair must appear once)."""
    values: dict[str, dict[str, float]] = {}
    for sample in result.samples:
        if sample.source == "engine":
            assert sample.metric not in values.get(sample.engine, {}), sample
            values.setdefault(sample.engine, {})[sample.metric] = sample.value
    return values


def agent_values(result: ScrapeResult) -> dict[str, float]:
    return {sample.metric: sample.value for sample in result.samples if sample.source == "agent"}
