"""The exceptions pgoutput_arrow raises: one hierarchy under :class:`PgoutputError`.

Every message says what was expected, what was found and where: the LSN (``X/Y``), the
position of the message in the input, the byte offset inside it, the table and column.
The same facts are attributes, for programs (``None`` where they do not apply).
"""

from __future__ import annotations

__all__ = [
    "PgoutputError",
    "CaptureError",
    "ParseError",
    "DecodeValueError",
    "SchemaError",
    "CopyDataError",
    "UnknownRelationError",
    "ProtocolError",
    "SpillError",
    "ReplicationError",
    "ConnectionFailed",
    "AuthenticationFailed",
    "ConnectionLost",
    "SlotNotFound",
    "SlotInUse",
    "SlotInvalidated",
    "PublicationNotFound",
    "WalLevelNotLogical",
]


class PgoutputError(Exception):
    """Base class of every error pgoutput_arrow raises on purpose.

    ``lsn`` is the LSN (an int) of the message being decoded when the error happened,
    when there was one.
    """

    lsn: int | None

    def __init__(self, message: str, *, lsn: int | None = None) -> None:
        super().__init__(message)
        self.lsn = lsn


class CaptureError(PgoutputError):
    """The input is not a capture: unreadable file, unknown format, a missing or mistyped
    ``lsn``/``data`` column, an LSN that is not ``X/Y``."""


class ParseError(PgoutputError):
    """A message is not a valid pgoutput message (truncated, corrupted, unknown kind).

    ``index`` is the message's position in the input (0-based, counting every message fed
    to the decoder), ``offset`` the byte offset inside the message where parsing stopped.
    """

    index: int | None
    offset: int | None

    def __init__(
        self,
        message: str,
        *,
        lsn: int | None = None,
        index: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message, lsn=lsn)
        self.index = index
        self.offset = offset


class DecodeValueError(PgoutputError, ValueError):
    """A value cannot be represented in its column's Arrow type (for example
    ``infinity`` in a date column under ``special_values='error'``), or is malformed.
    ``index`` is the message's position in the input, ``offset`` the value's byte offset
    inside it."""

    table: str | None
    column: str | None
    index: int | None
    offset: int | None

    def __init__(
        self,
        message: str,
        *,
        lsn: int | None = None,
        table: str | None = None,
        column: str | None = None,
        index: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message, lsn=lsn)
        self.table = table
        self.column = column
        self.index = index
        self.offset = offset


class SchemaError(PgoutputError):
    """The schema versions of a table (before and after ALTER TABLE) cannot be brought to
    one schema for ``Changes.tables`` (``Changes.table_versions`` has them apart)."""

    table: str | None
    column: str | None

    def __init__(
        self,
        message: str,
        *,
        lsn: int | None = None,
        table: str | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message, lsn=lsn)
        self.table = table
        self.column = column


class CopyDataError(PgoutputError, ValueError):
    """The binary COPY data of a snapshot is truncated or malformed, or a value in it cannot
    be decoded. ``row`` counts from 1 (the row being read), ``column`` is the column's name
    when the error is about one value, ``offset`` the byte offset in the whole COPY data."""

    table: str | None
    row: int | None
    column: str | None
    offset: int | None

    def __init__(
        self,
        message: str,
        *,
        lsn: int | None = None,
        table: str | None = None,
        row: int | None = None,
        column: str | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message, lsn=lsn)
        self.table = table
        self.row = row
        self.column = column
        self.offset = offset


class UnknownRelationError(PgoutputError):
    """A change refers to a relation id that no Relation message announced: the capture
    does not start at the beginning of the replication session."""

    relation_id: int | None

    def __init__(
        self, message: str, *, lsn: int | None = None, relation_id: int | None = None
    ) -> None:
        super().__init__(message, lsn=lsn)
        self.relation_id = relation_id


class ProtocolError(PgoutputError):
    """Messages that parse but arrive in an impossible order (a change outside a
    transaction, a Commit without Begin, a Stream Stop without Stream Start, ...).
    ``index`` is the message's position in the input."""

    index: int | None

    def __init__(self, message: str, *, lsn: int | None = None, index: int | None = None) -> None:
        super().__init__(message, lsn=lsn)
        self.index = index


class SpillError(PgoutputError, OSError):
    """Buffered changes could not be written to or read back from the spill directory."""


class ReplicationError(PgoutputError):
    """The live replication connection failed (connection refused, slot missing, server
    gone)."""


class ConnectionFailed(ReplicationError):
    """The server could not be reached: refused, unreachable, timed out, TLS failed, or the
    server is starting up or shutting down. ``sqlstate`` is set when the server sent one."""

    sqlstate: str | None

    def __init__(self, message: str, *, lsn: int | None = None, sqlstate: str | None = None) -> None:
        super().__init__(message, lsn=lsn)
        self.sqlstate = sqlstate


class AuthenticationFailed(ConnectionFailed):
    """The server refused the credentials (wrong password, no pg_hba.conf entry, unknown
    role): retrying does not help."""


class ConnectionLost(ConnectionFailed):
    """The stream broke and could not be resumed within the reconnect budget (or cannot be
    resumed at all: a temporary slot dies with its connection)."""


class SlotNotFound(ReplicationError):
    """The replication slot does not exist (and ``create_slot`` was not asked for)."""


class SlotInUse(ReplicationError):
    """The replication slot is being streamed by another process (``active_pid``)."""


class PublicationNotFound(ReplicationError):
    """A publication named in ``publication_names`` does not exist in the database."""


class WalLevelNotLogical(ReplicationError):
    """The server runs with ``wal_level`` below ``logical``: no logical decoding at all."""


class SlotInvalidated(ReplicationError):
    """The slot cannot be streamed any more: the server invalidated it (the WAL it needed was
    removed past ``max_slot_wal_keep_size``, or a conflict on a standby), or a slot that
    held the stream's position is gone. The changes since its position are lost; a new
    slot and a new snapshot are the way on."""
