"""The durable spool: accepted batches on local disk until the store confirms them (write-ahead).

Each append is one *segment* file holding one or more decoded batches (Arrow IPC, one stream per table per
batch). A segment is written under a temporary name, flushed, and renamed into place, so a reader sees whole
segments or none; the writer removes a segment only after the store has every row of it. After a crash, the
segments still on disk are exactly what was acknowledged and not yet confirmed written.

fsync policy (``fsync``):
  ``always``  the file and then the directory are fsynced before ``append`` returns: an acknowledged batch
              survives a crash of the process *and* of the machine (power loss, kernel panic).
  ``never``   the bytes are in the operating system's page cache when ``append`` returns: they survive a
              crash of the process (kill -9, OOM kill) but not of the machine. Faster on slow disks.

The writer may insert several segments at once. It first records which (``GROUP``), so that after a crash it
inserts exactly the same ones again under the same token, whatever arrived since, and whichever of them the
cleanup had already removed: the token comes from the recorded range, not from the files left. With no group
recorded, the interrupted insert (if any) was of the oldest segment alone. The record also says when a group is
being written batch by batch (each batch under a token of its own, the tables the whole insert had stored left
out), so that a crash does not insert those batches again under the group's token. A segment written ahead of
the oldest, to learn whether the store takes other data (``PROBE``), is recorded the same way.

One process owns a spool directory at a time (an exclusive lock on ``LOCK``). The spool's identity (a random
id kept in ``ID``) names its segments' insert deduplication tokens, so a segment replayed after a crash is
deduplicated by the store. Numbering goes on after the newest segment still pending; a spool opened with none
pending cannot know the numbers it used before, so it takes a new identity: a new segment's token never repeats
one still in the store's deduplication window, which would have the store drop it as a replay.

The spool's directories are made for its user alone (0700) and its files likewise (0600), whatever the process's
umask: they hold what tenants sent.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import struct
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from streamscope.errors import ConfigError, SpoolFull, SpoolUnavailable, WriteError
from streamscope_ingest.blocks import ipc_streams
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.blocks.ipc_streams import SizedStream
from streamscope_ingest.durability import spooled_upgrades

FsyncPolicy = Literal["always", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("always", "never")
MAGIC = b"streamscope-spool/1\n"
_FRAME = struct.Struct("<IQ")  # header length, payload length
_SUFFIX = ".seg"
_QUARANTINE = "quarantine"
_GROUP = "GROUP"
_PROBE = "PROBE"
_ALONE = "alone"
_DONE = "done"
_REASON = ".reason"
_PRIVATE_DIRECTORY = 0o700
_PRIVATE_FILE = 0o600
_WRITE_BUFFER_BYTES = 1 << 18
"""Small pieces of a file (headers, a stream's metadata and padding) are gathered up to this before a write."""


@dataclass(frozen=True)
class Segment:
    seq: int
    path: Path
    size: int


@dataclass(frozen=True)
class Group:
    """Segments inserted together under one token, named by the range ``first``..``last`` it was formed from."""

    segments: tuple[Segment, ...]
    first: int
    last: int
    marker: str = ""
    """The file that records it (``GROUP``, ``PROBE``), or none: a lone oldest segment needs no record."""
    alone: frozenset[str] | None = None
    """Set once it is written batch by batch: the tables its whole insert had stored, left out of each batch."""


class Spool:
    def __init__(self, directory: Path, *, max_bytes: int, fsync: FsyncPolicy = "always") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"spool fsync policy {fsync!r}: use one of {', '.join(FSYNC_POLICIES)}")
        self.directory = directory
        self.max_bytes = max_bytes
        self._fsync = fsync == "always"
        directory.mkdir(parents=True, exist_ok=True, mode=_PRIVATE_DIRECTORY)
        lock = os.open(directory / "LOCK", os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE_FILE)
        self._lock_file = os.fdopen(lock, "a")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise ConfigError(f"spool {directory} is in use by another collector; give each its own") from None
        for leftover in directory.glob("*.tmp"):  # an append that never completed was never acknowledged
            leftover.unlink()
        for marker in (_GROUP, _PROBE):
            self._finish_removal(marker)
        self._segments = {s.seq: s for s in self._scan()}
        self.id = self._identity(renew=not self._segments)
        self._next_seq = max(self._segments, default=0) + 1
        self._mutex = threading.Lock()

    def close(self) -> None:
        self._lock_file.close()

    @property
    def bytes(self) -> int:
        with self._mutex:
            return sum(s.size for s in self._segments.values())

    def pending(self) -> list[Segment]:
        """Segments not yet confirmed written, oldest first."""
        with self._mutex:
            return [self._segments[seq] for seq in sorted(self._segments)]

    def append(self, batches: list[DecodedBatch]) -> Segment:
        """Write ``batches`` as one segment, durable per the fsync policy.

        Raises SpoolFull when the segment would take the spool past ``max_bytes``.
        """
        pieces = _segment(batches)
        size = ipc_streams.size_of(pieces)
        with self._mutex:
            used = sum(s.size for s in self._segments.values())
            if used + size > self.max_bytes:
                raise SpoolFull(
                    f"spool full: {used} bytes waiting for the store, limit {self.max_bytes} bytes; "
                    "the store is down or slower than the load"
                )
            seq = self._next_seq
            self._next_seq += 1
            segment = Segment(seq, self._path(seq), size)
            # reserved before the write so concurrent appends count each other
            self._segments[seq] = segment
        try:
            self._write_file(segment.path, pieces)
        except OSError as exc:
            with self._mutex:
                del self._segments[seq]
            # the sender is told why without the path; the path is in the exception's cause, for the log
            raise SpoolUnavailable(f"the spool cannot take the request: {_reason(exc)}") from exc
        return segment

    def check_writable(self) -> None:
        """Write, sync and remove a small file, as an append would; raises OSError while the disk refuses."""
        probe = self.directory / "WRITABLE"
        self._write_file(probe, [b"ok"])
        probe.unlink()

    def read(self, segment: Segment) -> list[DecodedBatch]:
        return decode(segment.path.read_bytes(), segment.path)

    def token(self, segments: list[Segment] | Group) -> str:
        """The insert deduplication token of a group, or of ``segments`` written together (consecutive, oldest
        first)."""
        if isinstance(segments, Group):
            return f"{self.id}-{segments.first}-{segments.last}"
        return f"{self.id}-{segments[0].seq}-{segments[-1].seq}"

    def group(self, segments: list[Segment]) -> Group:
        """``segments`` (consecutive, oldest first) as a group not recorded: a lone oldest segment."""
        return Group(tuple(segments), segments[0].seq, segments[-1].seq)

    def begin_group(self, segments: list[Segment]) -> Group:
        """Record that ``segments`` (consecutive) are about to be inserted together."""
        self._write_file(self.directory / _GROUP, [f"{segments[0].seq} {segments[-1].seq}".encode()])
        return Group(tuple(segments), segments[0].seq, segments[-1].seq, _GROUP)

    def begin_probe(self, segment: Segment) -> Group:
        """Record that ``segment`` is about to be inserted alone, ahead of older ones."""
        self._write_file(self.directory / _PROBE, [f"{segment.seq} {segment.seq}".encode()])
        return Group((segment,), segment.seq, segment.seq, _PROBE)

    def begin_alone(self, group: Group, written: set[str]) -> Group:
        """Record that ``group`` is written batch by batch from now on, leaving out the tables in ``written``."""
        tables = ",".join(sorted(written))
        self._write_file(self.directory / _GROUP, [f"{group.first} {group.last} {_ALONE} {tables}".encode()])
        return Group(group.segments, group.first, group.last, _GROUP, frozenset(written))

    def first_groups(self) -> list[Group]:
        """The groups to insert first after a start: exactly those of inserts a crash may have interrupted, each
        under the token it had."""
        pending = self.pending()
        if not pending:
            return []
        groups = [self._recorded(_GROUP, pending) or self.group(pending[:1])]
        probe = self._recorded(_PROBE, pending)
        if probe is not None and probe.segments[0] not in groups[0].segments:
            groups.append(probe)
        return groups

    def _recorded(self, marker: str, pending: list[Segment]) -> Group | None:
        record = self._record(marker)
        if not record:
            return None
        first, last, *mode = record
        members = tuple(s for s in pending if int(first) <= s.seq <= int(last))
        if not members:
            return None
        alone = frozenset(filter(None, mode[1].split(","))) if mode[:1] == [_ALONE] else None
        return Group(members, int(first), int(last), marker, alone)

    def remove(self, group: Group) -> None:
        """The store has every row of ``group``: forget its segments, then its record.

        A recorded group is first recorded as done: a crash part way through the removal leaves the rest of its
        segments to be removed at the next start, never to be inserted again as a smaller group, whose rows the
        store would not take for a replay of the same token.
        """
        recorded = group.marker and self._record(group.marker)[:2] == [str(group.first), str(group.last)]
        if recorded:
            self._write_file(self.directory / group.marker, [f"{group.first} {group.last} {_DONE}".encode()])
        for segment in group.segments:
            segment.path.unlink(missing_ok=True)
        if recorded:
            (self.directory / group.marker).unlink()
        with self._mutex:
            for segment in group.segments:
                self._segments.pop(segment.seq, None)

    def _record(self, marker: str) -> list[str]:
        """The words of a group's record: first and last seq, then ``alone`` and tables, or ``done``."""
        path = self.directory / marker
        return path.read_text().split(" ") if path.exists() else []

    def _finish_removal(self, marker: str) -> None:
        """Remove what is left of a group recorded as done (a crash came during its removal)."""
        record = self._record(marker)
        if record[2:] == [_DONE]:
            for seq in range(int(record[0]), int(record[1]) + 1):
                self._path(seq).unlink(missing_ok=True)
            (self.directory / marker).unlink()

    def quarantine(self, batch: DecodedBatch, name: str, reason: str) -> Path:
        """Keep a batch the store refused for good out of the way (never deleted by us), with the reason beside it
        (``<name>.reason``); returns its file."""
        path = self._quarantine_dir() / f"{name}{_SUFFIX}"
        self._write_file(path.with_suffix(_REASON), [reason.encode()])
        self._write_file(path, _segment([batch]))
        return path

    def set_aside(self, segment: Segment) -> Path:
        """Move a segment that cannot be read to the quarantine, for a human to look at."""
        path = self._quarantine_dir() / segment.path.name
        if segment.path.exists():  # already moved when the same group is tried again
            segment.path.rename(path)
        with self._mutex:
            self._segments.pop(segment.seq, None)
        return path

    def _quarantine_dir(self) -> Path:
        directory = self.directory / _QUARANTINE
        directory.mkdir(exist_ok=True, mode=_PRIVATE_DIRECTORY)
        return directory

    def _write_file(self, path: Path, pieces: Sequence[builtins.bytes | SizedStream]) -> None:
        temporary = path.with_suffix(".tmp")
        with pa.OSFile(str(temporary), "w") as file, pa.BufferedOutputStream(file, _WRITE_BUFFER_BYTES) as out:
            os.fchmod(file.fileno(), _PRIVATE_FILE)  # Arrow creates it under the umask
            ipc_streams.write_pieces(out, pieces)
            out.flush()
            if self._fsync:
                os.fsync(file.fileno())
        temporary.rename(path)
        if self._fsync:
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:020d}{_SUFFIX}"

    def _scan(self) -> Iterator[Segment]:
        for path in self.directory.glob(f"*{_SUFFIX}"):
            if path.stem.isdigit():
                yield Segment(int(path.stem), path, path.stat().st_size)

    def _identity(self, renew: bool) -> str:
        path = self.directory / "ID"
        if renew or not path.exists():
            self._write_file(path, [uuid.uuid4().hex.encode()])
        return path.read_text().strip()


def _reason(exc: OSError) -> str:
    """What the disk said, without the file's name."""
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def quarantined(directory: Path) -> list[Path]:
    """The batches kept in the quarantine of the spool in ``directory``, oldest first."""
    return sorted((directory / _QUARANTINE).glob(f"*{_SUFFIX}"), key=lambda path: path.stat().st_mtime_ns)


def quarantine_reason(path: Path) -> str:
    """Why the quarantined batch in ``path`` was set aside, as recorded beside it."""
    reason = path.with_suffix(_REASON)
    return reason.read_text() if reason.exists() else "not recorded"


def encode(batches: list[DecodedBatch]) -> bytes:
    """Batches as the bytes of one segment."""
    sink = pa.BufferOutputStream()
    ipc_streams.write_pieces(sink, _segment(batches))
    return sink.getvalue().to_pybytes()


def _segment(batches: list[DecodedBatch]) -> list[bytes | SizedStream]:
    """A segment's pieces: frames of (JSON header, Arrow IPC stream), one per table per batch."""
    pieces: list[bytes | SizedStream] = [MAGIC]
    for index, batch in enumerate(batches):
        for table, block in batch.blocks.items():
            header = json.dumps({"batch": index, "table": table}).encode()
            stream = ipc_streams.sized(block)
            pieces += [_FRAME.pack(len(header), stream.size), header, stream]
    return pieces


def decode(data: bytes, source: Path) -> list[DecodedBatch]:
    if not data.startswith(MAGIC):
        raise WriteError(f"{source} is not a spool segment")
    batches: dict[int, DecodedBatch] = {}
    offset = len(MAGIC)
    view = memoryview(data)
    while offset < len(data):
        header_size, payload_size = _FRAME.unpack_from(data, offset)
        offset += _FRAME.size
        header = json.loads(bytes(view[offset : offset + header_size]))
        offset += header_size
        block = pa.ipc.open_stream(pa.py_buffer(view[offset : offset + payload_size])).read_all()
        offset += payload_size
        table, block = spooled_upgrades.block_as_now(header["table"], block)
        batches.setdefault(header["batch"], DecodedBatch()).blocks[table] = block
    return [spooled_upgrades.batch_as_now(batches[index]) for index in sorted(batches)]
