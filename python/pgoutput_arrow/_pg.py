"""Helpers shared by the live source and the Spark streaming source: SQL quoting of names and
literals, the output settings every connection is opened with, and psycopg2's errors mapped
to the package's exception hierarchy."""

from __future__ import annotations

import os
from typing import Any

from . import _internal
from .exceptions import (
    AuthenticationFailed,
    ConnectionFailed,
    PublicationNotFound,
    ReplicationError,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    WalLevelNotLogical,
)

__all__ = ["quote_ident", "quote_literal", "one_line", "classify_connect_error", "SqlError", "check_slot",
           "OUTPUT_SETTINGS", "output_options", "with_output_settings", "close_quietly"]

#: The settings every connection the package opens carries (:func:`with_output_settings`), so
#: that PostgreSQL prints every value the way the decoder reads it exactly, in UTF-8: one
#: list, the crates' (``pgoutput_proto::OUTPUT_SETTINGS``, where each is explained).
OUTPUT_SETTINGS: dict[str, str] = dict(_internal.OUTPUT_SETTINGS)


def output_options(base: str | None = None) -> str:
    """libpq's ``options`` value: ``base`` (the caller's own options) followed by ``-c``
    for each of :data:`OUTPUT_SETTINGS`, which so win over the same settings in ``base``."""
    ours = " ".join(f"-c {name}={value}" for name, value in OUTPUT_SETTINGS.items())
    return f"{base} {ours}" if base and base.strip() else ours


def with_output_settings(dsn: str) -> str:
    """``dsn`` (keywords or URI) with :data:`OUTPUT_SETTINGS` added to its ``options``: a
    DSN that already has options keeps them, and so does PGOPTIONS (which libpq reads only
    when the DSN has no options). ``client_encoding`` is also set as the connection's own
    parameter, which the server applies after ``options`` (a DSN's ``client_encoding`` or
    PGCLIENTENCODING would otherwise win). Raises psycopg2.ProgrammingError for a malformed
    DSN."""
    import psycopg2.extensions

    params = psycopg2.extensions.parse_dsn(dsn)
    base = params.get("options")
    if base is None:
        base = os.environ.get("PGOPTIONS")
    return str(psycopg2.extensions.make_dsn(dsn, options=output_options(base),
                                            client_encoding=OUTPUT_SETTINGS["client_encoding"]))


def close_quietly(conn: Any) -> None:
    """Closes a connection (None: nothing) whose errors no longer matter: one being given up
    after a failure, or at the end."""
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001  (already broken: nothing to say)
            pass


def quote_ident(name: str) -> str:
    """``name`` as an SQL identifier (double quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """``value`` as an SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def one_line(message: str) -> str:
    """A server's multi-line error message on one line."""
    return "; ".join(part.strip() for part in str(message).strip().splitlines() if part.strip())


class SqlError(Exception):
    """An error with a SQLSTATE (``pgcode``, as psycopg2's), for :func:`classify_connect_error`."""

    def __init__(self, message: str, pgcode: str | None) -> None:
        super().__init__(message)
        self.pgcode = pgcode


def classify_connect_error(exc: BaseException, where: str) -> ReplicationError:
    """psycopg2's connect and command errors → the exception hierarchy, one clear line."""
    text = one_line(str(exc)) or type(exc).__name__
    sqlstate = getattr(exc, "pgcode", None)
    lower = text.lower()
    if "can no longer get changes from replication slot" in lower or (
            "replication slot" in lower and "has been invalidated" in lower):
        return SlotInvalidated(f"{where}: {text} (the changes since the slot's position are "
                               f"lost: drop it, then take a new snapshot with a new slot)")
    if sqlstate == "42704" and "replication slot" in lower:
        return SlotNotFound(f"{where}: {text}")
    if sqlstate == "42704" and "publication" in lower:
        return PublicationNotFound(f"{where}: {text}")
    if sqlstate == "55006" or "is active for pid" in lower:
        return SlotInUse(f"{where}: {text} (another process is streaming this slot)")
    if "wal_level" in lower:
        return WalLevelNotLogical(f"{where}: {text}")
    auth_markers = ("password authentication failed", "authentication failed",
                    "no password supplied", "no pg_hba.conf entry", "pg_hba.conf rejects",
                    "role \"", "fe_sendauth")
    if any(m in lower for m in auth_markers) or sqlstate in ("28P01", "28000"):
        return AuthenticationFailed(f"{where}: {text}", sqlstate=sqlstate)
    if sqlstate == "22021":  # character_not_in_repertoire
        return ReplicationError(
            f"{where}: {text} (the server cannot send this text in UTF-8, which every connection asks "
            f"for: a SQL_ASCII database holding text in another encoding, which PostgreSQL's own "
            f"subscriber cannot take either; README, known limits)")
    if "timeout expired" in lower:
        return ConnectionFailed(f"{where}: timed out ({text})", sqlstate=sqlstate)
    return ConnectionFailed(f"{where}: {text}", sqlstate=sqlstate)


def check_slot(slot: str, plugin: str, slot_type: str, database: str, dbname: str, where: str = "") -> None:
    """Refuses a slot (a row of pg_replication_slots) that is not a logical pgoutput slot
    of the connection's database ``dbname``; ``where`` prefixes the message."""
    if slot_type != "logical" or plugin != "pgoutput":
        what = f"a logical slot with plugin {plugin}" if slot_type == "logical" else f"a {slot_type} slot"
        raise ReplicationError(
            f'{where}replication slot "{slot}" is {what}; expected a logical slot with plugin pgoutput')
    if database != dbname:
        raise ReplicationError(
            f'{where}replication slot "{slot}" belongs to database {database}, '
            f"but the connection is to {dbname}")
