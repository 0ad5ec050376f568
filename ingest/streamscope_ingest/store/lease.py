"""A lease on a job, so that of several collectors over one store exactly one runs it, and another takes over when
its holder stops or dies. Built on inserts and reads alone, which the collector's accounts may do (no DDL).

The lease has epochs. To take it, a process inserts a claim of the next epoch; the claim the server stored first
(``at``, set by the server; then the holder's name) holds that epoch, whoever reads it: a claim stored after
another was read is stored later, so a reader's winner never changes. The holder beats on every pass; when it
has not beaten for ``lease_s``, or it released the lease, anyone may claim the next epoch.

A holder that stopped beating may only be slow, not dead. So a process that took the lease from a holder that
did not release it waits ``lease_s`` more before it runs the job, and every holder checks it still holds the
lease just before it writes (``still_held``): a slow holder that lost it sees so and writes nothing.

Server time orders the claims, so every collector must use the same server: on a ClickHouse cluster, where
nodes' clocks and replicas differ, run the job on one collector instead (``--no-attribution`` on the others).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

LEASE_S = 30.0
STATE_SQL = """
SELECT epoch, holder, kind, toUnixTimestamp64Micro(at), toUnixTimestamp64Micro(now64(6))
FROM attribution_leases
WHERE job = {job:String} AND epoch = (SELECT max(epoch) FROM attribution_leases WHERE job = {job:String})
ORDER BY at, holder
"""
NOW_SQL = "SELECT toUnixTimestamp64Micro(now64(6))"


@dataclass(frozen=True)
class LeaseState:
    epoch: int
    """The newest epoch claimed (0: never)."""
    holder: str | None
    claimed_us: int
    last_seen_us: int
    """The holder's newest claim or beat (server time, µs)."""
    released: bool
    now_us: int

    def free(self, lease_us: int) -> bool:
        return self.holder is None or self.released or self.now_us - self.last_seen_us > lease_us


class Lease:
    def __init__(
        self, client: Client, insert_client: Client, job: str, *, holder: str | None = None, lease_s: float = LEASE_S
    ) -> None:
        self._client, self._insert_client, self.job = client, insert_client, job
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()} {uuid.uuid4().hex[:8]}"
        self.lease_us = round(lease_s * 1e6)
        self._runs_from_us: int | None = None
        """Server time from which this holder may run the job (its epoch's grace over); None: not holding."""

    def held(self) -> bool:
        """Before a pass: renew the lease when holding it, take it when it is free; whether to run the job now."""
        state = self.state()
        if state.holder == self.holder and not state.released and self._runs_from_us is not None:
            self._record(state.epoch, "beat")
            return state.now_us >= self._runs_from_us
        self._runs_from_us = None
        if not state.free(self.lease_us):
            return False
        self._record(state.epoch + 1, "claim")
        won = self.state()
        if won.epoch != state.epoch + 1 or won.holder != self.holder:
            return False
        # from a holder that let go, at once; from one that only went quiet, once it has had a lease's time to see
        # that it lost
        dead = state.holder is not None and not state.released
        self._runs_from_us = won.claimed_us + (self.lease_us if dead else 0)
        return won.now_us >= self._runs_from_us

    def still_held(self) -> bool:
        """Before writing what a pass found: whether this process still holds the lease."""
        if self._runs_from_us is None:
            return False
        state = self.state()
        return state.holder == self.holder and not state.released

    def release(self) -> None:
        """Let the lease go (the collector is stopping), so another takes it over at once."""
        if self._runs_from_us is not None:
            state = self.state()
            if state.holder == self.holder:
                self._record(state.epoch, "release")
        self._runs_from_us = None

    def state(self) -> LeaseState:
        rows = self._client.query(STATE_SQL, parameters={"job": self.job}).result_rows
        if not rows:
            now = self._client.query(NOW_SQL).result_rows[0][0]
            return LeaseState(0, None, 0, 0, False, now)
        epoch, holder, _, claimed_us, now_us = next(row for row in rows if row[2] == "claim")
        seen = [row for row in rows if row[1] == holder]
        last_seen = max(row[3] for row in seen if row[2] in ("claim", "beat"))
        released = any(row[2] == "release" for row in seen)
        return LeaseState(epoch, holder, claimed_us, last_seen, released, now_us)

    def _record(self, epoch: int, kind: str) -> None:
        self._insert_client.insert(
            "attribution_leases",
            [[self.job, epoch, self.holder, kind]],
            column_names=["job", "epoch", "holder", "kind"],
            settings={"insert_deduplicate": 0},
        )
