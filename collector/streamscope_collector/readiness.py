"""What ``/readyz`` says: whether what the collector accepts reaches the store now, and if not, why.

Ready means all of: the spool has room for the largest request and its disk takes writes, the writer is running and
making progress, and the store is open and takes writes. While the store is down the collector still accepts into
the spool (the answer to a request is about the spool), but it is not ready: its data is not flowing. The reasons
name no filesystem path (the probe is public): the log has them.
"""

from __future__ import annotations

from streamscope.errors import WriteError
from streamscope_collector.http.health import Readiness
from streamscope_collector.store_link import StoreLink
from streamscope_ingest import store
from streamscope_ingest.durability.group_commit import GroupCommitWriter
from streamscope_ingest.durability.isolation import without_paths
from streamscope_ingest.durability.spool import Spool


def readiness(writer: GroupCommitWriter, spool: Spool, link: StoreLink, max_request_bytes: int) -> Readiness:
    def check() -> tuple[bool, dict]:
        waiting = spool.bytes
        reasons = []
        if waiting + max_request_bytes > spool.max_bytes:
            reasons.append("spool full")
        if spool_error := writer.check_spool():
            reasons.append(spool_error)
        writer_state = "up" if writer.alive and not writer.fault else writer.fault or "stopped"
        if writer_state != "up":
            reasons.append(f"writer: {writer_state}")
        store_state = _store_state(writer, link)
        if store_state != "up":
            reasons.append(f"store {store_state}")
        state = {
            "status": "ready" if not reasons else without_paths("; ".join(reasons)),
            "store": without_paths(store_state),
            "writer": without_paths(writer_state),
            "spool": {"segments": writer.backlog(), "bytes": waiting, "max_bytes": spool.max_bytes},
        }
        return not reasons, state

    return check


def _store_state(writer: GroupCommitWriter, link: StoreLink) -> str:
    if not link.opened:
        return f"down: {link.last_error or 'not opened yet'}"
    if not writer.store_healthy:
        return f"down: {writer.last_error}"
    try:
        answered = store.call(link.clients().query.ping)
    except WriteError as exc:
        return f"down: {exc}"
    return "up" if answered else "down: no answer to ping"
