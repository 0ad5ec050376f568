"""Content a stream showed and then took back (streamscope.chunks.retracted_bytes), per stream.

A chunk withdraws bytes from the end of what was shown before its own content (draft tokens a verifier rejected,
a replaced suffix); the rest of the answer is unchanged. What the reader saw is counted: how many times text
was taken back, how much, and for how long the oldest withdrawn byte had been on screen when it went (its
writer's arrival to the withdrawing chunk's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RetractionStats:
    count: np.ndarray
    """Chunks per stream that withdrew content."""
    bytes: np.ndarray
    tokens: np.ndarray
    shown_us: list[list[int]]
    """Per stream, per withdrawing chunk in order: µs the oldest byte it withdrew had been shown."""


def over_withdrawn(lengths: np.ndarray, content: np.ndarray, retracted: np.ndarray) -> np.ndarray:
    """Per stream, whether some chunk withdraws more than had been shown before it (a malformed timeline)."""
    starts = np.cumsum(lengths) - lengths
    shown = np.cumsum(content) - content  # content before each chunk, over all streams
    taken = np.cumsum(retracted)  # withdrawn up to and including each chunk
    before_stream = np.zeros(lengths.size + 1, np.int64)
    if content.size:
        first = np.minimum(starts, content.size - 1)
        before_stream[:-1] = np.where(lengths > 0, shown[first] - (taken[first] - retracted[first]), 0)
    owner = np.repeat(np.arange(lengths.size), lengths)
    net = (shown - taken) - before_stream[owner]
    bad = np.zeros(lengths.size, bool)
    np.logical_or.at(bad, owner, net < 0)
    return bad


def retraction_stats(
    lengths: np.ndarray,
    offsets: np.ndarray,
    content: np.ndarray,
    retracted_bytes: np.ndarray | None,
    retracted_tokens: np.ndarray | None,
) -> RetractionStats:
    """What each stream took back; None for an array no stream sent (all zeros)."""
    streams = lengths.size
    if retracted_bytes is None or not retracted_bytes.any():  # nearly every request: nothing taken back
        zeros = np.zeros(streams, np.uint64)
        return RetractionStats(zeros.astype(np.uint32), zeros, zeros.copy(), [[] for _ in range(streams)])
    owner = np.repeat(np.arange(streams), lengths)
    withdrawing = retracted_bytes > 0
    stats = RetractionStats(
        count=np.bincount(owner[withdrawing], minlength=streams).astype(np.uint32),
        bytes=np.bincount(owner, weights=retracted_bytes, minlength=streams).astype(np.uint64),
        tokens=np.zeros(streams, np.uint64)
        if retracted_tokens is None
        else np.bincount(owner, weights=retracted_tokens, minlength=streams).astype(np.uint64),
        shown_us=[[] for _ in range(streams)],
    )
    starts = np.cumsum(lengths) - lengths
    for stream in np.flatnonzero(stats.count):  # rare: walk only the streams that took text back
        span = slice(starts[stream], starts[stream] + lengths[stream])
        stats.shown_us[stream] = shown_before_withdrawal(offsets[span], content[span], retracted_bytes[span])
    return stats


def shown_before_withdrawal(offsets: np.ndarray, content: np.ndarray, retracted: np.ndarray) -> list[int]:
    """For each withdrawing chunk of one stream: how long the oldest byte it withdrew had been shown."""
    written: list[list[int]] = []  # [arrival of its writer, bytes still shown] of the text on screen, oldest first
    shown = []
    for at, added, withdrawn in zip(offsets.tolist(), content.tolist(), retracted.tolist(), strict=True):
        oldest = None
        while withdrawn and written:
            writer, size = written[-1]
            take = min(withdrawn, size)
            oldest, withdrawn = writer, withdrawn - take
            if take == size:
                written.pop()
            else:
                written[-1][1] = size - take
        if oldest is not None:
            shown.append(at - oldest)
        if added:
            written.append([at, added])
    return shown
