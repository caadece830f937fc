"""Slot management: the checks made before ``START_REPLICATION`` (wal_level, publication,
slot) with a clear error for each, the creation of what is missing when asked, and the
replication commands themselves."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from .._internal import lsn_to_int, lsn_to_str
from .._pg import check_slot, classify_connect_error, close_quietly, one_line, quote_ident, quote_literal
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

__all__ = ["preflight", "create_slot_command", "start_command", "slot_row", "check_usable",
           "check_publications"]


def slot_row(cur: Any, slot: str) -> dict[str, Any] | None:
    """The row of ``slot`` in pg_replication_slots with every column the server has
    (``two_phase`` from 14, ``invalidation_reason`` and ``failover`` from 17: absent before),
    or None if there is no such slot."""
    cur.execute("SELECT to_jsonb(s) FROM pg_replication_slots s WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return dict(row[0]) if row is not None else None


def check_usable(row: dict[str, Any], dbname: str, resume: int | None = None,
                 where: str = "") -> None:
    """Refuses a slot (:func:`slot_row`) that is not a logical pgoutput slot of ``dbname``,
    that was invalidated (:class:`SlotInvalidated`: its changes since ``resume`` are lost), or
    that another process streams (:class:`SlotInUse`); ``where`` prefixes the message."""
    slot = str(row["slot_name"])
    check_slot(slot, row.get("plugin") or "", row.get("slot_type") or "", row.get("database") or "",
               dbname, where)
    if (row.get("wal_status") == "lost" or row.get("invalidation_reason") is not None
            or row.get("confirmed_flush_lsn") is None):
        cause = row.get("invalidation_reason") or (
            "wal_status lost" if row.get("wal_status") == "lost" else "no confirmed_flush_lsn")
        reason = f"was invalidated ({cause})"
        raise SlotInvalidated(where + invalidation_message(slot, reason, resume))
    if row.get("active_pid") is not None:
        raise SlotInUse(
            f'{where}replication slot "{slot}" is active for PID {row["active_pid"]} (another '
            f"process is streaming it; a slot has one consumer)")


def check_publications(cur: Any, publications: Sequence[str], dbname: str, required: bool = True,
                       hint: str = "", where: str = "") -> list[str]:
    """The ``publications`` that do not exist; if ``required`` none may be missing:
    :class:`PublicationNotFound` names them (and ``hint``, how to create them)."""
    cur.execute("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)", (list(publications),))
    existing = {r[0] for r in cur.fetchall()}
    missing = [p for p in publications if p not in existing]
    if missing and required:
        raise PublicationNotFound(f"{where}publication {', '.join(missing)} does not exist in "
                                  f"database {dbname}{hint}")
    return missing


def preflight(conn: Any, opts: StreamOptions, first: bool = True, export: bool = False,
              answer: list[tuple[Any, ...]] | None = None, dsn: str | None = None) -> int:
    """Checks that give a clear error before START_REPLICATION, and the creations
    (``first``: the first connection of this stream, not a reconnection; ``dsn``, that of
    ``conn``: a publication that exists is checked against ``create_publication``). Returns the slot's
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
    ensure_publication(cur, opts, dbname, dsn if first else None)
    if opts.failover and server_version < 170000:
        raise ReplicationError(
            f"failover slots need PostgreSQL 17 or later; the server runs "
            f"{server_version // 10000} (without failover, a slot is lost when the primary "
            f"fails over)")
    row = slot_row(cur, opts.slot)
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
    check_usable(row, dbname, opts.start_lsn or None)
    if opts.failover and not row.get("failover"):
        try:
            cur.execute(f"ALTER_REPLICATION_SLOT {quote_ident(opts.slot)} (FAILOVER true)")
        except psycopg2.Error as e:
            raise classify_connect_error(
                e, f'cannot make replication slot "{opts.slot}" a failover slot') from None
    return lsn_to_int(row["confirmed_flush_lsn"])


def ensure_publication(cur: Any, opts: StreamOptions, dbname: str, dsn: str | None = None) -> None:
    """The publications exist, or are created when ``create_publication`` says so; with
    ``dsn``, a warning when one that exists does not publish what it asks for."""
    import psycopg2

    missing = check_publications(
        cur, opts.publications, dbname, required=opts.create_publication is None,
        hint=" (create it with CREATE PUBLICATION, or --create-publication)")
    target = opts.create_publication
    if target is None:
        return
    every = isinstance(target, str) and target.upper() == "ALL"
    tables = [] if every else [target] if isinstance(target, str) else list(target)
    if not every and not tables:
        raise ValueError("create_publication needs table names or 'ALL'")
    quoted = [".".join(quote_ident(part) for part in t.split(".", 1)) for t in tables]
    existing = [p for p in opts.publications if p not in missing]
    if dsn is not None and existing:
        _warn_if_they_publish_less(dsn, opts.connect_timeout, existing, every, quoted)
    if not missing:
        return
    what = "FOR ALL TABLES" if every else "FOR TABLE " + ", ".join(quoted)
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


def _warn_if_they_publish_less(dsn: str, connect_timeout: float, names: list[str], every: bool,
                               quoted: list[str]) -> None:
    """A warning for each publication of ``names``, which exist already and which
    ``create_publication`` therefore leaves as they are, that does not publish what it asked
    for (every table, or the tables ``quoted``): their changes would not be in the stream.
    Best effort (a hint), on one ordinary connection of its own: ``pg_publication_tables`` read
    on the replication connection before START_REPLICATION makes the walsender send a table's
    current columns for older changes (see :func:`.._catalog.published_tables`)."""
    from .connection import connect

    said = []
    try:
        conn = connect(dsn, connect_timeout, replication=False)
    except Exception:  # noqa: BLE001  (a hint: the stream's own connection says what is wrong)
        return
    try:
        with conn.cursor() as cur:
            for name in names:
                if every:
                    cur.execute("SELECT NOT puballtables FROM pg_publication WHERE pubname = %s", (name,))
                    if (cur.fetchone() or [False])[0]:
                        said.append(f"publication {name} exists and is not FOR ALL TABLES: create_publication "
                                    "'ALL' leaves it as it is, so only the tables it publishes are streamed")
                    continue
                cur.execute("SELECT format('%%I.%%I', n.nspname, c.relname) FROM unnest(%s::text[]) AS t "
                            "JOIN pg_class c ON c.oid = to_regclass(t) JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE c.oid NOT IN (SELECT format('%%I.%%I', schemaname, tablename)::regclass "
                            "FROM pg_publication_tables WHERE pubname = %s)", (quoted, name))
                unpublished = [r[0] for r in cur.fetchall()]
                if unpublished:
                    said.append(f"publication {name} exists and does not publish {', '.join(unpublished)}: "
                                "create_publication leaves an existing publication as it is, so their changes "
                                f"are not streamed (ALTER PUBLICATION {quote_ident(name)} ADD TABLE ... adds them)")
    except Exception:  # noqa: BLE001
        return
    finally:
        close_quietly(conn)
    for text in said:
        warnings.warn(text, stacklevel=2)


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
