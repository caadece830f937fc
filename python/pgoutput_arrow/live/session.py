"""One replication session on a slot: :class:`ReplicationSession`, the connection that runs
``START_REPLICATION`` where the positions say, its native receiver, and the standby status
updates sent on it; and where the session stands (pgoutput-proto's ``SessionPositions``:
received, handed out, acknowledged, confirmed, where to resume) and which transactions are
open (``TxnTracker``, the decoder's framing rules).

:class:`~.livestream.LiveStream` holds one, and every live path (``stream()``,
``pgoutput-dump``, the snapshots and Spark's streaming source) runs on a ``LiveStream``."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .._internal import SessionPositions, TxnTracker
from .._pg import classify_connect_error, close_quietly
from .connection import CopyBoth, connect
from .options import StreamOptions
from .slot import preflight, start_command

__all__ = ["ReplicationSession"]


class ReplicationSession:
    """The replication connection of a live stream and where it stands.

    ``positions`` and ``txns`` outlive a connection: a reconnect resumes from them
    (:meth:`start`); ``txns`` starts again with each connection, whose stream starts at a
    transaction boundary."""

    def __init__(self, dsn: str, options: StreamOptions) -> None:
        self.dsn = dsn
        self.options = options
        #: The start LSN says everything before it is handled already (for the CLI: the
        #: checkpoint of its output).
        self.positions = SessionPositions(options.start_lsn)
        self.txns = TxnTracker()
        self.conn: Any = None
        self.copy: Any = None
        #: Reads frames natively, many messages per call, as one Arrow batch for the decoder.
        self.receiver: Any = None
        self.proto_version: int | None = None
        self.server_version: int | None = None
        #: When the last standby status update went out (``time.monotonic()``).
        self.last_status = 0.0

    @property
    def connected(self) -> bool:
        return self.copy is not None

    def start(self, first: bool, conn: Any = None) -> None:
        """Starts streaming on a new connection, or on ``conn`` (the one that created the
        slot, whose checks were made), at :meth:`resume_lsn`."""
        import psycopg2

        checked = conn is not None
        if conn is None:
            conn = connect(self.dsn, self.options.connect_timeout)
        try:
            if not checked:
                # What the server holds as confirmed already counts as sent (for lag_bytes).
                self.positions.server_confirmed(preflight(conn, self.options, first, dsn=self.dsn))
            self.server_version = int(conn.server_version)
            start = self.resume_lsn()
            options = self.options
            if options.online_snapshot and not options.messages:
                # The online snapshot's watermarks are messages (not handed out).
                options = dataclasses.replace(options, messages=True)
            command, self.proto_version = start_command(options, self.server_version, start)
            cur = conn.cursor()
            try:
                cur.start_replication_expert(command, decode=False)
            except psycopg2.Error as e:
                raise classify_connect_error(
                    e, f'cannot stream replication slot "{self.options.slot}"') from None
            copy = CopyBoth(conn)
        except BaseException:
            close_quietly(conn)
            raise
        self.conn, self.copy, self.receiver = conn, copy, copy.receiver
        self.txns = TxnTracker()
        self.last_status = time.monotonic()

    def resume_lsn(self) -> int:
        """Where to ask the server to start: after everything handed out, but not past an
        unresolved prepared transaction (the server would not send its changes again)."""
        return self.positions.resume_lsn(self.txns.prepared_floor())

    def until_status(self, now: float) -> float:
        """Seconds until the next status update is due (``status_interval`` after the last;
        0 or less: due)."""
        return self.last_status + self.options.status_interval - now

    def status_due(self, now: float) -> bool:
        """Whether ``status_interval`` passed since the last status update."""
        return self.until_status(now) <= 0

    def send_status(self, answering: bool = False) -> None:
        """Sends a standby status update: the position received, and the one handled
        (confirmed to the server). ``answering``: the server asked for a reply."""
        copy = self.copy
        if copy is None:
            return
        positions = self.positions
        new_ack = positions.dirty
        written, flush = positions.status(self.txns.prepared_floor())
        if answering and not new_ack and flush < written:
            # The server asked for an answer and there is nothing new to confirm: the answer
            # carries no flush position (the slot keeps the one confirmed before). A
            # walsender that is shutting down asks until the client's flush position (or,
            # without one, its write position) reaches what it sent: a consumer still
            # holding batches it has not acknowledged would hold up the server's shutdown.
            copy.send_status(written, 0, 0)
        else:
            copy.send_status(written, flush, flush)
        self.last_status = time.monotonic()

    def finish(self) -> None:
        """Sends the last status update and ends the COPY (errors ignored: the connection
        may be gone), then disconnects."""
        if self.copy is not None:
            try:
                self.send_status()
                self.copy.finish()
            except Exception:
                pass
        self.disconnect()

    def disconnect(self) -> None:
        conn, self.conn, self.copy, self.receiver = self.conn, None, None, None
        close_quietly(conn)
