"""Log each cause of a recurring failure once, not once a request: a sender that keeps sending the same broken
request (or a hostile one) cannot flood the log. The requests themselves are counted in the metrics."""

from __future__ import annotations

import logging
import threading

MAX_CAUSES = 256
"""Causes remembered at most; past it, new causes are no longer logged (the counters still count them)."""


class LogOnce:
    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def warning(self, cause: str, message: str, *args: object) -> None:
        """Log ``message`` at WARNING the first time ``cause`` comes up."""
        with self._lock:
            if cause in self._seen or len(self._seen) >= MAX_CAUSES:
                return
            self._seen.add(cause)
        self._logger.warning(message + " (logged once for this cause; the requests are counted)", *args)
