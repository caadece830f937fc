"""Slot management: the checks made before ``START_REPLICATION`` (wal_level, publication,
slot) with a clear error for each, the creation of what is missing when asked, and the
replication commands themselves."""

from __future__ import annotations

from typing import Any

from .._internal import lsn_to_int, lsn_to_str
from .._pg import check_slot, classify_connect_error, one_line, quote_ident, quote_literal
from ..exceptions import (
    PublicationNotFound,
    ReplicationError,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    WalLevelNotLogical,
)
from .options import StreamOptions, default_proto_version
from .slot_guard import invalidation_message

__all__ = ["preflight", "create_slot_command", "start_command"]


def preflight(conn: Any, opts: StreamOptions, first: bool = True, export: bool = False,
              answer: list[tuple[Any, ...]] | None = None) -> int:
    """Checks that give a clear error before START_REPLICATION, and the creations
    (``first``: the first connection of this stream, not a reconnection). Returns the slot's
    confirmed position (its consistent point when created here; 0 when unknown). With
    ``export`` the slot must not exist yet: it is created exporting its snapshot, and
    CREATE_REPLICATION_SLOT's answer (slot name, consistent point, snapshot name, plugin) is
    appended to ``answer``; the connection must then run no other command while the
    snapshot is in use."""
    import psycopg2

    cur = conn.cursor()
    server_version = int(conn.server_version)
    cur.execute("SHOW wal_level")
    wal_level = cur.fetchone()[0]
    if wal_level != "logical":
        raise WalLevelNotLogical(
            f"the server runs with wal_level = {wal_level}; logical replication needs "
            f"wal_level = logical (set it in postgresql.conf and restart the server)")
    cur.execute("SELECT current_database()")
    dbname = cur.fetchone()[0]
    ensure_publication(cur, opts, dbname)
    if opts.failover and server_version < 170000:
        raise ReplicationError(
            f"failover slots need PostgreSQL 17 or later; the server runs "
            f"{server_version // 10000} (without failover, a slot is lost when the primary "
            f"fails over)")
    # wal_status and the columns of newer versions (invalidation_reason, failover: 17+).
    cur.execute(
        "SELECT plugin, slot_type, database, active_pid, wal_status, confirmed_flush_lsn::text, "
        "to_jsonb(s)->>'invalidation_reason', (to_jsonb(s)->>'failover')::bool "
        "FROM pg_replication_slots s WHERE slot_name = %s", (opts.slot,))
    row = cur.fetchone()
    if row is None:
        if not first and not opts.temporary_slot:
            # Created again now, it would start at the current WAL position, and the
            # changes in between would be lost without a word.
            raise SlotNotFound(
                f'replication slot "{opts.slot}" was dropped while streaming from it (or, '
                f"after a failover, was not synchronized to the new primary: a failover slot "
                f"needs sync_replication_slots = on on the standby): the changes since the "
                f"last acknowledged position cannot be recovered")
        if opts.start_lsn and not opts.temporary_slot:
            # A stream that resumes (the CLI's output holds changes up to start_lsn) from
            # a slot that is gone: a new one would skip what was written in between.
            raise SlotInvalidated(invalidation_message(opts.slot, "does not exist",
                                                       opts.start_lsn))
        if not opts.create_slot and not export:
            raise SlotNotFound(
                f'replication slot "{opts.slot}" does not exist (create it with '
                f"--create-slot / create_slot=True, or pg_create_logical_replication_slot)")
        try:
            cur.execute(create_slot_command(opts, server_version, export=export))
            created = cur.fetchall()  # slot_name, consistent_point, snapshot_name, output_plugin
        except psycopg2.Error as e:
            if getattr(e, "pgcode", None) == "42710" and not export:  # created concurrently: use it
                return 0
            raise classify_connect_error(
                e, f'cannot create replication slot "{opts.slot}"') from None
        if answer is not None and created:
            answer.append(tuple(created[0]))
        return lsn_to_int(created[0][1]) if created and created[0][1] else 0
    if export:
        raise ReplicationError(
            f'replication slot "{opts.slot}" already exists: a snapshot is taken as its slot is '
            "created (drop the slot to start over, or stream without a snapshot to resume from it)")
    plugin, slot_type, database, active_pid, wal_status, confirmed, invalidation, failover = row
    check_slot(opts.slot, plugin, slot_type, database, dbname)
    if wal_status == "lost" or invalidation is not None:
        reason = f"was invalidated ({invalidation or 'wal_status lost'})"
        raise SlotInvalidated(invalidation_message(opts.slot, reason, opts.start_lsn or None))
    if active_pid is not None:
        raise SlotInUse(
            f'replication slot "{opts.slot}" is active for PID {active_pid} '
            f"(another process is streaming this slot)")
    if opts.failover and not failover:
        try:
            cur.execute(f"ALTER_REPLICATION_SLOT {quote_ident(opts.slot)} (FAILOVER true)")
        except psycopg2.Error as e:
            raise classify_connect_error(
                e, f'cannot make replication slot "{opts.slot}" a failover slot') from None
    return lsn_to_int(confirmed) if confirmed else 0


def ensure_publication(cur: Any, opts: StreamOptions, dbname: str) -> None:
    """The publications exist, or are created when ``create_publication`` says so."""
    import psycopg2

    cur.execute("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)",
                (list(opts.publications),))
    existing = {r[0] for r in cur.fetchall()}
    missing = [p for p in opts.publications if p not in existing]
    if not missing:
        return
    if opts.create_publication is None:
        raise PublicationNotFound(
            f'publication {", ".join(missing)} does not exist in database {dbname} '
            f"(create it with CREATE PUBLICATION, or --create-publication)")
    target = opts.create_publication
    if isinstance(target, str) and target.upper() == "ALL":
        what = "FOR ALL TABLES"
    else:
        tables = [target] if isinstance(target, str) else list(target)
        if not tables:
            raise ValueError("create_publication needs table names or 'ALL'")
        what = "FOR TABLE " + ", ".join(
            ".".join(quote_ident(part) for part in t.split(".", 1)) for t in tables)
    for name in missing:
        try:
            cur.execute(f"CREATE PUBLICATION {quote_ident(name)} {what}")
        except psycopg2.Error as e:
            code = getattr(e, "pgcode", None)
            if code == "42710":
                continue
            if code == "23505":
                # Another client created it between the check above and this CREATE (two
                # streams started together): the catalog's unique index refused the second.
                cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
                if cur.fetchone() is not None:
                    continue
            raise ReplicationError(
                f"cannot create publication {name}: {one_line(str(e))}") from None


def create_slot_command(opts: StreamOptions, server_version: int, export: bool = False) -> str:
    """``CREATE_REPLICATION_SLOT`` in the syntax of the server's version; ``export``: the
    slot exports its snapshot (for the initial snapshot), else none is made."""
    parts = [f"CREATE_REPLICATION_SLOT {quote_ident(opts.slot)}"]
    if opts.temporary_slot:
        parts.append("TEMPORARY")
    parts.append("LOGICAL pgoutput")
    if server_version >= 150000:
        snapshot = "SNAPSHOT 'export'" if export else "SNAPSHOT 'nothing'"
        options = ([snapshot] + (["TWO_PHASE"] if opts.two_phase else [])
                   + (["FAILOVER"] if opts.failover else []))
        parts.append("(" + ", ".join(options) + ")")
    else:
        parts.append("EXPORT_SNAPSHOT" if export else "NOEXPORT_SNAPSHOT")
        if opts.two_phase:
            if server_version < 140000:
                raise ReplicationError("two_phase slots need PostgreSQL 14 or later")
            parts.append("TWO_PHASE")
    return " ".join(parts)


def start_command(opts: StreamOptions, server_version: int, start_lsn: int) -> tuple[str, int]:
    """``START_REPLICATION`` from ``start_lsn``, and the protocol version it asks for."""
    highest = default_proto_version(server_version)
    proto = opts.proto_version or highest
    if proto > highest:
        raise ReplicationError(
            f"proto_version {proto} is not supported by this server "
            f"(PostgreSQL {server_version // 10000} speaks up to {highest})")
    streaming = opts.streaming if opts.streaming is not None else ("on" if proto >= 2 else None)
    if streaming == "parallel" and proto < 4:
        raise ReplicationError("streaming 'parallel' needs proto_version 4 (PostgreSQL 16+)")
    pairs = [("proto_version", str(proto)),
             ("publication_names", ",".join(quote_ident(p) for p in opts.publications))]
    if opts.binary:
        pairs.append(("binary", "true"))
    if opts.messages:
        pairs.append(("messages", "true"))
    if streaming and streaming != "off":
        pairs.append(("streaming", streaming))
    if opts.two_phase:
        pairs.append(("two_phase", "true"))
    if opts.origin:
        pairs.append(("origin", opts.origin))
    options = ", ".join(f"{k} {quote_literal(v)}" for k, v in pairs)
    return (f"START_REPLICATION SLOT {quote_ident(opts.slot)} LOGICAL "
            f"{lsn_to_str(start_lsn)} ({options})", proto)
