"""The slot guard: what the server says about its logical replication slots (active, lag,
retained WAL, ``wal_status``, invalidation), and their removal.

A slot pins WAL on the server until its consumer confirms it; an abandoned or stuck one
fills the server's disk, and one past ``max_slot_wal_keep_size`` is invalidated (its changes
are gone). :func:`slot_status` reads every column the server's ``pg_replication_slots`` has
(PostgreSQL 15 lacks ``invalidation_reason``, ``inactive_since``, ``failover`` and
``synced``; they are None there), on an ordinary connection.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .._internal import lsn_to_int, lsn_to_str
from .._pg import check_slot, classify_connect_error, quote_literal
from ..exceptions import SlotInUse, SlotNotFound
from .connection import connect
from .options import DEFAULT_CONNECT_TIMEOUT_S

__all__ = ["SlotStatus", "slot_status", "query_slot_status", "drop_slot", "drop_unfinished_slot",
           "drop_unused_slot", "invalidation_message", "RELEASE_WAIT_S"]

# The server's WAL position (a standby's replay position, where pg_current_wal_lsn fails),
# then every logical slot as JSON: the columns differ between versions.
_QUERY = """
SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn()
       END::text, to_jsonb(s) FROM pg_replication_slots s
WHERE slot_type = 'logical'{where} ORDER BY slot_name"""


@dataclasses.dataclass(frozen=True)
class SlotStatus:
    """One logical slot as the server sees it. LSNs and sizes are ints (bytes); the
    columns a server version lacks are None."""

    slot_name: str
    plugin: str
    database: str
    active: bool
    active_pid: int | None
    temporary: bool
    restart_lsn: int | None
    confirmed_flush_lsn: int | None
    #: The server's WAL position when this was read.
    server_lsn: int
    #: ``reserved``, ``extended``, ``unreserved`` or ``lost`` (None: never reserved WAL).
    wal_status: str | None
    #: Bytes of WAL that can still be written before the slot is in danger of being
    #: invalidated (None: no ``max_slot_wal_keep_size`` limit, or already lost).
    safe_wal_size: int | None
    invalidation_reason: str | None = None
    inactive_since: str | None = None
    failover: bool | None = None
    synced: bool | None = None

    @property
    def retained_wal_bytes(self) -> int:
        """WAL the server keeps for this slot: its position minus the slot's restart_lsn."""
        return max(0, self.server_lsn - self.restart_lsn) if self.restart_lsn else 0

    @property
    def lag_bytes(self) -> int:
        """WAL not yet confirmed by the consumer: the server's position minus
        confirmed_flush_lsn."""
        return max(0, self.server_lsn - self.confirmed_flush_lsn) if self.confirmed_flush_lsn else 0

    @property
    def invalidated(self) -> bool:
        """The slot can no longer be streamed: the WAL it needed was removed (or another
        invalidation_reason)."""
        return self.wal_status == "lost" or self.invalidation_reason is not None

    def as_dict(self) -> dict[str, Any]:
        """The fields and the derived sizes, LSNs as ``X/Y`` text (for JSON output)."""
        d = dataclasses.asdict(self)
        for key in ("restart_lsn", "confirmed_flush_lsn", "server_lsn"):
            d[key] = lsn_to_str(d[key]) if d[key] is not None else None
        d["retained_wal_bytes"] = self.retained_wal_bytes
        d["lag_bytes"] = self.lag_bytes
        d["invalidated"] = self.invalidated
        return d


def _lsn(text: str | None) -> int | None:
    return lsn_to_int(text) if text else None


def query_slot_status(cur: Any, slot: str | None = None) -> list[SlotStatus]:
    """:func:`slot_status` on an open cursor (of an ordinary connection)."""
    where = f" AND slot_name = {quote_literal(slot)}" if slot is not None else ""
    cur.execute(_QUERY.format(where=where))
    out = []
    for server_lsn, row in cur.fetchall():
        safe = row.get("safe_wal_size")
        out.append(SlotStatus(
            slot_name=row["slot_name"], plugin=row.get("plugin") or "",
            database=row.get("database") or "", active=bool(row.get("active")),
            active_pid=row.get("active_pid"), temporary=bool(row.get("temporary")),
            restart_lsn=_lsn(row.get("restart_lsn")),
            confirmed_flush_lsn=_lsn(row.get("confirmed_flush_lsn")),
            server_lsn=_lsn(server_lsn) or 0, wal_status=row.get("wal_status"),
            safe_wal_size=int(safe) if safe is not None else None,
            invalidation_reason=row.get("invalidation_reason"),
            inactive_since=row.get("inactive_since"), failover=row.get("failover"),
            synced=row.get("synced")))
    return out


def slot_status(dsn: str, slot: str | None = None,
                connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[SlotStatus]:
    """Every logical slot of the server at ``dsn`` (or only ``slot``), in name order."""
    conn = connect(dsn, connect_timeout, replication=False)
    try:
        with conn.cursor() as cur:
            return query_slot_status(cur, slot)
    finally:
        conn.close()


def drop_slot(dsn: str, slot: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
              wait: float = 0.0) -> None:
    """Drops the logical slot ``slot`` (the WAL it holds is released). Refuses a slot that
    a consumer is streaming from (:class:`SlotInUse`; after ``wait`` seconds of waiting for
    it to stop) or that does not exist."""
    conn = connect(dsn, connect_timeout, replication=False)
    try:
        drop_unused_slot(conn.cursor(), slot, wait=wait)
    finally:
        conn.close()


#: How long a slot left by a run of ours that just ended is waited for: its walsender notices
#: the closed connection (a killed process's included) a moment later.
RELEASE_WAIT_S = 10.0


def drop_unfinished_slot(dsn: str, slot: str, lsn: int | None,
                         connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
                         wait: float = RELEASE_WAIT_S) -> bool:
    """Drops ``slot`` left by a snapshot that never finished, so that it can start over (see
    :func:`drop_unused_slot`; ``lsn`` None: the slot's creation was under way, so its
    consistent point was never heard of). A walsender still holding it (the interrupted
    run's, going away) is waited for up to ``wait`` seconds. Returns whether a slot was
    dropped (False: there is none)."""
    conn = connect(dsn, connect_timeout, replication=False)
    try:
        drop_unused_slot(conn.cursor(), slot, created_at=lsn, ours=True, wait=wait)
        return True
    except SlotNotFound:
        return False
    finally:
        conn.close()


def drop_unused_slot(cur: Any, slot: str, created_at: int | None = None,
                     ours: bool = False, wait: float = 0.0) -> None:
    """Drops ``slot`` through ``cur`` (an ordinary connection) unless it is used: the one
    place slots are dropped (``pgoutput-dump --drop-slot``, a failed run's new slot, an
    unfinished snapshot's slot, the Spark source's). :class:`SlotNotFound` if it does not
    exist; :class:`SlotInUse` if a consumer streams it, or (``created_at``: its consistent
    point) it was confirmed past where it was created, so something consumed from it; with
    ``ours`` a :class:`ReplicationError` if it is not a logical pgoutput slot of this
    database; ``wait``: seconds to wait for a consumer streaming it to stop."""
    import psycopg2

    deadline = time.monotonic() + wait
    while True:
        cur.execute("SELECT plugin, slot_type, database, current_database(), active_pid, "
                    "confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                    (slot,))
        row = cur.fetchone()
        if row is None:
            raise SlotNotFound(f'replication slot "{slot}" does not exist')
        plugin, slot_type, database, dbname, active_pid, confirmed = row
        if ours:
            check_slot(slot, plugin, slot_type, database, dbname)
        if active_pid is None or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if active_pid is not None:
        raise SlotInUse(f'replication slot "{slot}" is active for PID {active_pid} '
                        f"(stop its consumer first)")
    if created_at is not None and confirmed is not None and lsn_to_int(confirmed) != created_at:
        raise SlotInUse(f'replication slot "{slot}" was confirmed up to {confirmed}, past '
                        f"{lsn_to_str(created_at)} where it was created: something consumed "
                        "from it; not dropping it")
    try:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    except psycopg2.Error as e:
        raise classify_connect_error(e, f'cannot drop replication slot "{slot}"') from None


def invalidation_message(slot: str, reason: str | None, resume: int | None) -> str:
    """The one line said when a slot to be streamed is invalidated or gone: changes were
    lost, and how to start again."""
    since = f" since {lsn_to_str(resume)}" if resume else ""
    return (f'replication slot "{slot}" {reason}: the changes{since} are lost and cannot be '
            f"streamed; drop it (pgoutput-dump --drop-slot), then take a new snapshot into "
            f"a fresh output (a new slot with --create-slot --snapshot)")
