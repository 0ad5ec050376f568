"""A lease on a job, so that of several collectors over one store exactly one runs it, and another takes over when
its holder stops or dies. The collector's accounts may only insert and read (no DDL), and that is all it uses.

The lease has epochs. To take it, a process claims the next epoch; one claim of each epoch wins, whoever reads it.
The holder beats on every pass; when it has not beaten for ``lease_s``, or it released the lease, anyone may claim
the next epoch.

Which claim wins depends on the store:

- one server: every claim is a row of ``attribution_leases``; the one the server stored first (``at``, set by the
  server; then the holder's name) wins. A claim stored after another was read is stored later, so a reader's winner
  never changes. The table keeps a day of rows, so a holder claims its own next epoch every few hours.
- a cluster (``migrate --cluster`` made ``attribution_lease_claims``): replicas and nodes' clocks differ, so the
  claim is a key in ClickHouse Keeper that only one insert can make (a ``KeeperMap`` table in strict mode), the same
  on every node. Beats and releases stay rows of the replicated table; a beat a replica has not seen yet only
  makes a takeover come early, never two holders. Nodes' clocks must agree to well within ``lease_s`` (NTP).

A holder that stopped beating may only be slow, not dead. So a process that took the lease from a holder that
did not release it waits ``lease_s`` more before it runs the job, and every holder checks it still holds the
lease just before it writes (``still_held``): a slow holder that lost it sees so and writes nothing.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

LEASE_S = 30.0
RENEW_S = 6 * 3600.0
"""How old a holder's claim may grow on one server before it claims its own next epoch: well inside the day
``attribution_leases`` keeps (its TTL)."""
CLAIMS_TABLE = "attribution_lease_claims"
ROWS_SQL = """
SELECT epoch, holder, kind, toUnixTimestamp64Micro(at), toUnixTimestamp64Micro(now64(6))
FROM attribution_leases
WHERE job = {job:String} AND epoch = (SELECT max(epoch) FROM attribution_leases WHERE job = {job:String})
ORDER BY at, holder
"""
KEEPER_CLAIM_SQL = f"""
SELECT epoch, holder, toUnixTimestamp64Micro(claimed_at), toUnixTimestamp64Micro(now64(6))
FROM {CLAIMS_TABLE}
WHERE job = {{job:String}}
ORDER BY epoch DESC
LIMIT 1
"""
HOLDERS_ROWS_SQL = """
SELECT kind, toUnixTimestamp64Micro(max(at))
FROM attribution_leases
WHERE job = {job:String} AND epoch = {epoch:UInt64} AND holder = {holder:String}
GROUP BY kind
"""
NOW_SQL = "SELECT toUnixTimestamp64Micro(now64(6))"


def claims_table_ddl(database: str, cluster: str | None) -> str:
    """The Keeper table of claims on a cluster (``migrate --cluster`` makes it; one key per job and epoch)."""
    on_cluster = f" ON CLUSTER {cluster}" if cluster else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {CLAIMS_TABLE}{on_cluster} "
        "(claim String, job String, epoch UInt64, holder String, claimed_at DateTime64(6, 'UTC')) "
        f"ENGINE = KeeperMap('/streamscope/{database}/{CLAIMS_TABLE}') PRIMARY KEY claim"
    )


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
        self,
        client: Client,
        insert_client: Client,
        job: str,
        *,
        holder: str | None = None,
        lease_s: float = LEASE_S,
        keeper: bool | None = None,
    ) -> None:
        """``keeper``: claims are keys in ClickHouse Keeper (a cluster); None: whether the store has the table."""
        self._client, self._insert_client, self.job = client, insert_client, job
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()} {uuid.uuid4().hex[:8]}"
        self.lease_us = round(lease_s * 1e6)
        self._keeper = keeper
        self._runs_from_us: int | None = None
        """Server time from which this holder may run the job (its epoch's grace over); None: not holding."""

    @property
    def keeper(self) -> bool:
        if self._keeper is None:
            self._keeper = bool(self._client.query(f"EXISTS TABLE {CLAIMS_TABLE}").result_rows[0][0])
        return self._keeper

    def held(self) -> bool:
        """Before a pass: renew the lease when holding it, take it when it is free; whether to run the job now."""
        state = self.state()
        if state.holder == self.holder and not state.released and self._runs_from_us is not None:
            if not self.keeper and state.now_us - state.claimed_us > RENEW_S * 1e6:
                return self._claim(state, renewing=True)
            self._record(state.epoch, "beat")
            return state.now_us >= self._runs_from_us
        self._runs_from_us = None
        if not state.free(self.lease_us):
            return False
        return self._claim(state, renewing=False)

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
        return self._keeper_state() if self.keeper else self._rows_state()

    def _claim(self, state: LeaseState, *, renewing: bool) -> bool:
        """Claim the epoch after ``state``'s; whether this process won it and may run the job now."""
        epoch = state.epoch + 1
        if self.keeper and not self._keeper_claim(epoch):
            return False
        self._record(epoch, "claim")
        won = self.state()
        if won.epoch != epoch or won.holder != self.holder:
            self._runs_from_us = None
            return False
        if not renewing:
            # from a holder that let go, at once; from one that only went quiet, once it has had a lease's time to
            # see that it lost
            dead = state.holder is not None and not state.released
            self._runs_from_us = won.claimed_us + (self.lease_us if dead else 0)
        assert self._runs_from_us is not None
        return won.now_us >= self._runs_from_us

    def _keeper_claim(self, epoch: int) -> bool:
        """Make the epoch's key in Keeper; False when another process made it first."""
        try:
            self._insert_client.command(
                f"INSERT INTO {CLAIMS_TABLE} SETTINGS keeper_map_strict_mode = 1 "
                "VALUES (%(claim)s, %(job)s, %(epoch)s, %(holder)s, now64(6))",
                parameters={"claim": f"{self.job}/{epoch}", "job": self.job, "epoch": epoch, "holder": self.holder},
            )
            return True
        except DatabaseError:
            if self._keeper_state().epoch < epoch:
                raise  # nobody holds the key: a real error
            return False

    def _rows_state(self) -> LeaseState:
        rows = self._client.query(ROWS_SQL, parameters={"job": self.job}).result_rows
        claims = [row for row in rows if row[2] == "claim"]
        if not claims:  # never claimed, or its rows outlived by the table's TTL (a holder renews long before)
            now = rows[0][4] if rows else self._client.query(NOW_SQL).result_rows[0][0]
            return LeaseState(rows[0][0] if rows else 0, None, 0, 0, False, now)
        epoch, holder, _, claimed_us, now_us = claims[0]
        seen = [row for row in rows if row[1] == holder]
        last_seen = max(row[3] for row in seen if row[2] in ("claim", "beat"))
        released = any(row[2] == "release" for row in seen)
        return LeaseState(epoch, holder, claimed_us, last_seen, released, now_us)

    def _keeper_state(self) -> LeaseState:
        claim = self._client.query(KEEPER_CLAIM_SQL, parameters={"job": self.job}).result_rows
        if not claim:
            return LeaseState(0, None, 0, 0, False, self._client.query(NOW_SQL).result_rows[0][0])
        epoch, holder, claimed_us, now_us = claim[0]
        parameters = {"job": self.job, "epoch": epoch, "holder": holder}
        rows = self._client.query(HOLDERS_ROWS_SQL, parameters=parameters).result_rows
        newest: dict[str, int] = {kind: at for kind, at in rows}
        last_seen = max(claimed_us, newest.get("claim", 0), newest.get("beat", 0))
        return LeaseState(epoch, holder, claimed_us, last_seen, "release" in newest, now_us)

    def _record(self, epoch: int, kind: str) -> None:
        self._insert_client.insert(
            "attribution_leases",
            [[self.job, epoch, self.holder, kind]],
            column_names=["job", "epoch", "holder", "kind"],
            settings={"insert_deduplicate": 0},
        )
