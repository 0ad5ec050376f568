"""Write the batches a spool's quarantine keeps back to the store, once what refused them is fixed.

Each batch goes in under the token it was refused under (its file's name), so a batch the store had taken in part,
or a replay run twice, stores nothing twice. A batch stored is removed from the quarantine with its reason; one the
store refuses again, or that cannot be read, stays, and the reason is returned. Whatever one batch raises, the next
is tried: a batch the writer cannot turn into rows, or a damaged file, says nothing of the batches after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamscope.errors import StreamscopeError
from streamscope_ingest.durability.isolation import SegmentSink
from streamscope_ingest.durability.spool import decode, quarantine_reason, quarantined


@dataclass(frozen=True)
class Replayed:
    name: str
    """The quarantined batch's name (its insert token)."""
    kept_for: str
    """Why it was quarantined."""
    error: str = ""
    """Why the store refused it again, or why it cannot be read; empty once stored."""


def replay_quarantined(spool_dir: Path, sink: SegmentSink) -> Iterator[Replayed]:
    """Write every batch quarantined in the spool at ``spool_dir`` to ``sink``, oldest first, telling each outcome
    as it comes."""
    for path in quarantined(spool_dir):
        kept_for = quarantine_reason(path)
        try:
            batches = decode(path.read_bytes(), path)
        except Exception as exc:  # a damaged file: reported, and the next one tried
            yield Replayed(path.stem, kept_for, f"cannot be read: {_said(exc)}")
            continue
        try:
            sink.write(batches, path.stem)
        except Exception as exc:  # the store's refusal, or rows the writer cannot build: reported, the next tried
            yield Replayed(path.stem, kept_for, _said(exc))
            continue
        path.with_suffix(".reason").unlink(missing_ok=True)
        path.unlink()
        yield Replayed(path.stem, kept_for)


def _said(exc: Exception) -> str:
    """What ``exc`` says, named by its type unless it is one of streamscope's own errors (which say it in words)."""
    return str(exc) if isinstance(exc, StreamscopeError) else f"{type(exc).__name__}: {exc}"
