"""The attribution job: attribute the stalls of streams that have settled and write them to ``stalls`` (a slow first
token to ``slow_starts``), their quality indices to ``stream_quality``, and what smoothing buffers would have made
of them to ``stream_smoothing`` (counted, for the fleet panel, in ``smoothing_histograms``).

Why a periodic job rather than materialized views: a stall's cause needs both sides of the stream and the
node's engine events, which arrive in separate requests, seconds apart; a view fires on one insert into one
table. The job waits until a stream has settled (``settle_s`` after it was stored), attributes every stream
stored since its watermark in passes of a few queries, and advances the watermark it keeps in
``attribution_progress`` after each pass, so a restart neither skips nor repeats streams. A pass that finds no
stream writes nothing: an idle store is not given parts to merge every few seconds. A pass holds at most
``pass_streams`` streams (and their chunks) in memory, however far behind the job is after an outage.

A pass writes up to five tables and then its progress, and the store can fail between any two. So a pass records where
it ends before it writes (``BEGUN``), and each of its inserts carries a deduplication token named by the pass and
the table: the next attempt, here or in another collector, repeats exactly that pass, and what the failed one
stored is not counted again, even when more streams have settled meanwhile.

A pass reads (``analysis.pass_inputs``), judges (``analysis.verdicts``, a pure function) and writes (here).

Several collectors over one store run one job between them: the job holds a lease (``store.lease``) and passes
only while it does, so each stream is attributed once, and another collector takes over when the holder stops.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial

import pyarrow as pa
from clickhouse_connect.driver.client import Client

from streamscope.threads import named_thread
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution import StallRules
from streamscope_ingest.analysis.pass_inputs import EPOCH, SettledStream, read_inputs, settled_streams
from streamscope_ingest.analysis.smoothing import DEPTHS_MS, Buffer
from streamscope_ingest.analysis.verdicts import TIMED, QualityTargets, Verdicts, judge
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.rollups.stream_histograms import smoothing_histograms
from streamscope_ingest.store.arrow_insert import insert_arrow
from streamscope_ingest.store.lease import Lease

log = logging.getLogger(__name__)
JOB = "stalls"
THREAD = "attribution"
BEGUN = f"{JOB}, begun"
"""The ``attribution_progress`` job under which a pass records where it ends, before it writes anything."""


class AttributionJob:
    def __init__(
        self,
        client: Client,
        rules: StallRules | None = None,
        *,
        settle_s: float = 10.0,
        quality: QualityTargets | None = None,
        pass_streams: int = 5000,
        insert_client: Client | None = None,
        smoothing_depths_ms: Sequence[float] = DEPTHS_MS,
        lease: Lease | None = None,
    ) -> None:
        """``client`` reads; ``insert_client`` (default: ``client``) writes stalls, quality and progress. Every
        stream is replayed behind a smoothing buffer of each of ``smoothing_depths_ms``. With a ``lease``, a pass
        runs only while this job holds it: of several jobs over one store, one attributes each stream."""
        self._client = client
        self._insert_client = insert_client or client
        self.lease = lease
        self.rules = rules or StallRules(stall=StallRule.configured())
        self.settle_s = settle_s
        self.quality = quality or QualityTargets()
        self.pass_streams = pass_streams
        self.buffers = tuple(Buffer(depth) for depth in smoothing_depths_ms)

    def watermark(self) -> datetime:
        """Where the last finished pass ended."""
        return self._progress()[JOB]

    def _progress(self) -> dict[str, datetime]:
        """Where the last finished pass ended (``JOB``) and where the last one begun would end (``BEGUN``)."""
        rows = self._client.query(
            "SELECT job, max(through) FROM attribution_progress FINAL WHERE job IN {jobs:Array(String)} GROUP BY job",
            parameters={"jobs": [JOB, BEGUN]},
        ).result_rows
        found = {job: _utc(through) for job, through in rows if through and through.year > 1970}
        return {job: found.get(job, EPOCH) for job in (JOB, BEGUN)}

    def run_once(self, until: datetime | None = None) -> int:
        """Attribute every stream stored after the watermark and at least ``settle_s`` ago; returns stalls written."""
        until = until or datetime.now(UTC) - timedelta(seconds=self.settle_s)
        written = 0
        while True:
            stalls, caught_up = self.run_pass(until)
            written += stalls
            if caught_up:
                return written

    def run_pass(self, until: datetime | None = None) -> tuple[int, bool]:
        """One bounded pass from the watermark towards ``until``; returns stalls written and whether it got there."""
        with store.translated_errors():
            if self.lease is not None and not self.lease.held():
                return 0, True  # another job runs it
            progress = self._progress()
            since, unfinished = progress[JOB], progress[BEGUN]
            settled = datetime.now(UTC) - timedelta(seconds=self.settle_s)  # a later bound could change a repeat
            until = _as_stored(unfinished if unfinished > since else min(until or settled, settled))
            if until <= since:
                return 0, True
            streams, last_stored = settled_streams(self._client, since, until, self.pass_streams)
            if not streams and unfinished <= since:
                return 0, True  # nothing to write, nor to record: the next pass starts where this one did
            full = len(streams) >= self.pass_streams  # more with the last one's ties
            caught_up = not full and unfinished <= since  # after a repeat, go on from there
            if full and last_stored is not None:
                until = _utc(last_stored)  # ordered by when stored, ties included: the pass ends on a whole instant
            if unfinished <= since:
                self._record(BEGUN, until)
            verdicts = self._judge(streams)
            if self.lease is not None and not self.lease.still_held():
                log.warning("the attribution lease went to another collector during a pass; it writes nothing")
                return 0, True
            self._write(verdicts, _pass_name(since, until, streams))
            self._record(JOB, until)
            return len(verdicts.stalls), caught_up

    def _record(self, job: str, through: datetime) -> None:
        """``job`` has reached ``through`` (``_progress`` reads it back)."""
        self._insert_client.insert("attribution_progress", [[job, through]], column_names=["job", "through"])

    def _insert_once(self, table: str, block: pa.Table, pass_name: str) -> None:
        """Insert ``block``, taken once however often the pass named ``pass_name`` is repeated."""
        insert_arrow(self._insert_client, table, block, {"insert_deduplication_token": f"{pass_name} {table}"})

    def _judge(self, streams: list[SettledStream]) -> Verdicts:
        if not streams:
            return Verdicts()
        inputs = read_inputs(self._client, streams, self.rules.event_slack_us)
        return judge(inputs, self.rules, self.buffers, self.quality)

    def _write(self, verdicts: Verdicts, pass_name: str) -> None:
        """The pass's rows, each table's taken once however often the pass is repeated."""
        insert = partial(self._insert_once, pass_name=pass_name)
        if verdicts.stalls:
            insert("stalls", pa.Table.from_pylist(verdicts.stalls, schema=columns.STALLS))
        if verdicts.slow_starts:
            insert("slow_starts", pa.Table.from_pylist(verdicts.slow_starts, schema=columns.SLOW_STARTS))
        if verdicts.quality:
            insert("stream_quality", pa.Table.from_pylist(verdicts.quality, schema=columns.STREAM_QUALITY))
        if verdicts.smoothing:
            smoothed = pa.Table.from_pylist(verdicts.smoothing, schema=columns.STREAM_SMOOTHING)
            insert("stream_smoothing", smoothed)
            counted = smoothed.filter(pa.array([row[TIMED] for row in verdicts.smoothing]))
            if counted.num_rows:
                insert("smoothing_histograms", smoothing_histograms(counted))


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _pass_name(since: datetime, until: datetime, streams: list[SettledStream]) -> str:
    """A pass by its bounds and its streams: a repeat that finds a stream more (stored late, inside the bounds)
    is another pass, whose rows are all written, rather than one whose rows are dropped as a repeat."""
    keys = hashlib.blake2b("\n".join(" ".join(s.key) for s in streams).encode(), digest_size=8).hexdigest()
    return f"{JOB} {since.isoformat()} {until.isoformat()} {keys}"


def _as_stored(value: datetime) -> datetime:
    """``value`` to the millisecond, as ``attribution_progress`` keeps it and the pass's queries read it."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


class PeriodicAttribution:
    """Runs the job every ``interval_s`` from a background thread inside the collector."""

    def __init__(self, job: AttributionJob, interval_s: float = 5.0) -> None:
        self.job = job
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = named_thread(self._run, THREAD)

    def start(self) -> PeriodicAttribution:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        if self.job.lease is not None:
            try:
                self.job.lease.release()  # another collector takes the job over at once
            except Exception:
                log.exception("could not release the attribution lease; another collector takes it when it expires")

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                while not self._stop.is_set() and not self.job.run_pass()[1]:
                    pass  # behind: the next pass starts at once
            except Exception:
                log.exception("attribution run failed; it is retried on the next tick")
