"""Several attribution jobs over one store, as several collectors run them: one holds the lease and attributes,
every stream exactly once; when it stops, or dies, another takes over from the same watermark; a holder that only
went quiet and comes back writes nothing."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from streamscope_ingest.analysis.attribution_job import JOB, AttributionJob
from streamscope_ingest.store.lease import Lease
from tests.ingest.analysis.test_attribution_job import MS, T0, span, trace_hex, with_gap, write


def jobs(client, count: int, lease_s: float) -> list[AttributionJob]:
    return [
        AttributionJob(
            client, settle_s=0, pass_streams=2, lease=Lease(client, client, JOB, holder=f"job-{i}", lease_s=lease_s)
        )
        for i in range(count)
    ]


def store_streams(client, traces: range) -> None:
    """A client stream with a stall and its server side per trace, each trace stored apart (passes of two streams
    then end between them)."""
    for trace in traces:
        start = T0 + trace * 1000 * MS
        write(
            client,
            [
                span(trace, 1, "client", start, with_gap(10, 600)),
                span(trace, 2, "server", start, with_gap(10, 600), node="n"),
            ],
            [],
        )


def attributed(client) -> Counter[str]:
    """How many times each client stream was attributed (its quality row)."""
    rows = client.query("SELECT trace_id FROM stream_quality WHERE side = 'client'").result_rows
    return Counter(row[0] for row in rows)


def run_until_attributed(client, running: list[AttributionJob], traces: range, timeout_s: float = 60) -> None:
    until = datetime.now(UTC) + timedelta(seconds=1)
    deadline = time.monotonic() + timeout_s
    while not {trace_hex(t) for t in traces} <= set(attributed(client)):
        assert time.monotonic() < deadline, f"attributed: {sorted(attributed(client))}"
        for job in running:  # interleaved, as collectors' ticks are
            job.run_pass(until)
        time.sleep(0.05)


def holder(client) -> str | None:
    return Lease(client, client, JOB).state().holder


def test_of_several_jobs_one_attributes_each_stream_once_and_another_takes_over_when_it_stops(store_client):
    one_attributes_each_stream_once_and_another_takes_over_when_it_stops(store_client)


def one_attributes_each_stream_once_and_another_takes_over_when_it_stops(client) -> None:
    """Three jobs over one store (whichever way it decides claims)."""
    first = range(1, 7)
    store_streams(client, first)
    running = jobs(client, 3, lease_s=30)
    run_until_attributed(client, running, first)
    assert set(attributed(client).values()) == {1}
    leader = next(job for job in running if job.lease.holder == holder(client))
    stalls = client.query("SELECT trace_id, count() FROM stalls GROUP BY trace_id").result_rows
    assert len(stalls) == 6 and {count for _, count in stalls} == {1}

    leader.lease.release()  # a collector stopping
    rest = [job for job in running if job is not leader]
    then = range(7, 13)
    store_streams(client, then)
    run_until_attributed(client, rest, then)
    assert set(attributed(client).values()) == {1} and len(attributed(client)) == 12
    assert holder(client) in {job.lease.holder for job in rest}


def test_a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing(store_client):
    a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing(store_client)


def a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing(client) -> None:
    first = range(1, 5)
    store_streams(client, first)
    running = jobs(client, 2, lease_s=0.5)
    run_until_attributed(client, running, first)
    quiet = next(job for job in running if job.lease.holder == holder(client))
    other = next(job for job in running if job is not quiet)

    then = range(5, 9)
    store_streams(client, then)
    run_until_attributed(client, [other], then)  # the holder went quiet: after 0.5 s and 0.5 s of grace
    assert holder(client) == other.lease.holder

    later = range(9, 11)
    store_streams(client, later)
    assert quiet.run_pass(datetime.now(UTC) + timedelta(seconds=1)) == (0, True)  # back, and no longer the holder
    run_until_attributed(client, [quiet, other], later)
    assert set(attributed(client).values()) == {1} and len(attributed(client)) == 10


def test_a_holder_that_loses_the_lease_during_a_pass_writes_nothing(store_client, monkeypatch):
    """The pass outlasts the lease (a holder starved of CPU): another job claims it meanwhile, and the slow pass
    finds that out before it writes; the new holder attributes the streams once its grace is over."""
    traces = range(1, 3)
    store_streams(store_client, traces)
    slow, other = jobs(store_client, 2, lease_s=0.3)
    until = datetime.now(UTC) + timedelta(seconds=1)
    judge = slow._judge

    def outlasting_the_lease(streams):
        found = judge(streams)
        time.sleep(0.4)
        assert other.run_pass(until) == (0, True)  # it claims the lease, and waits out its grace
        return found

    monkeypatch.setattr(slow, "_judge", outlasting_the_lease)
    assert slow.run_pass(until) == (0, True)
    assert attributed(store_client) == Counter()
    assert holder(store_client) == other.lease.holder and not slow.lease.still_held()
    run_until_attributed(store_client, [slow, other], traces)
    assert set(attributed(store_client).values()) == {1} and len(attributed(store_client)) == 2


def test_a_holder_keeps_the_lease_past_the_day_the_leases_rows_are_kept(store_client):
    """``attribution_leases`` drops rows after a day: a collector that has held the lease for longer still holds it
    once its claim is gone, and nobody else takes it while it beats."""
    long, other = (Lease(store_client, store_client, JOB, holder=name, lease_s=30) for name in ("long", "other"))
    assert long.held()
    store_client.command("TRUNCATE TABLE attribution_leases")  # as if it claimed 25 hours ago, and beat since
    for kind, ago in (("claim", "25 HOUR"), ("beat", "1 HOUR"), ("beat", "1 SECOND")):
        store_client.command(
            f"INSERT INTO attribution_leases SELECT {{job:String}}, 1, 'long', '{kind}', now64(6) - INTERVAL {ago}",
            parameters={"job": JOB},
        )
    assert long.held()
    store_client.command("OPTIMIZE TABLE attribution_leases FINAL")  # the TTL's merge
    assert long.held() and not other.held()
    assert holder(store_client) == "long" and long.still_held()
