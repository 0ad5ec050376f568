"""Write the batches a spool's quarantine keeps back to the store, once what refused them is fixed.

Each batch goes in under the token it was refused under (its file's name), so a batch the store had taken in part,
or a replay run twice, stores nothing twice. A batch stored is removed from the quarantine with its reason; one the
store refuses again stays, and the reason it was given is returned.
"""

from __future__ import annotations

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
    """Why the store refused it again; empty once stored."""


def replay_quarantined(spool_dir: Path, sink: SegmentSink) -> list[Replayed]:
    """Write every batch quarantined in the spool at ``spool_dir`` to ``sink``, oldest first."""
    replayed = []
    for path in quarantined(spool_dir):
        kept_for = quarantine_reason(path)
        try:
            sink.write(decode(path.read_bytes(), path), path.stem)
        except StreamscopeError as exc:
            replayed.append(Replayed(path.stem, kept_for, str(exc)))
            continue
        path.with_suffix(".reason").unlink(missing_ok=True)
        path.unlink()
        replayed.append(Replayed(path.stem, kept_for))
    return replayed
