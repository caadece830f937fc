"""The connection to the walsender: opened by psycopg2 (:func:`connect`), its CopyBoth half
driven through the libpq that psycopg2 uses (:class:`CopyBoth`).

psycopg2 opens the connection (libpq does SCRAM, TLS, passfile, PGPASSWORD, service files and
URIs) and issues ``START_REPLICATION``; the stream itself is read and answered by
``_internal.WalReceiver`` (Rust), which calls libpq's ``PQgetCopyData`` and ``PQputCopyData``
on the same ``PGconn`` (``connection.pgconn_ptr``): no byte of the walsender's frames is
parsed or built in Python. The reason is the flush
position: psycopg2's ``ReplicationCursor.read_message`` answers keepalives by itself, and
moves the flushed position forward to the keepalive's WAL end whenever the last flushed LSN
is at or beyond the last XLogData's start — which is always true after a message whose start
the walsender leaves at 0 (Relation messages), so it could confirm transactions that the
consumer had received but not yet stored. Here nothing is confirmed that the caller did not
say.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable
from typing import Any

from .._pg import classify_connect_error, one_line, with_output_settings
from ..exceptions import (AuthenticationFailed, ConnectionFailed, ConnectionLost, PublicationNotFound,
                          ReplicationError, SlotInUse, SlotInvalidated, SlotNotFound, WalLevelNotLogical)
from .options import StreamOptions

__all__ = ["connect", "reconnect", "CopyBoth", "CopyBothEnded", "load_libpq", "copy_out_functions"]

_PGRES_COPY_BOTH = 8
_PGRES_COMMAND_OK = 1
_PG_DIAG_SQLSTATE = ord("C")
_CONNECTION_BAD = 1

_lib: Any = None


def connect(dsn: str, connect_timeout: float, *, replication: bool = True) -> Any:
    """A psycopg2 replication connection to ``dsn`` (a ``LogicalReplicationConnection``),
    or with ``replication=False`` a plain one in autocommit mode (for catalog queries);
    both with the package's output settings (``_pg.OUTPUT_SETTINGS``) added to the DSN's
    options; failures as the package's exceptions, naming the host and port."""
    import psycopg2
    import psycopg2.extensions
    import psycopg2.extras

    try:
        params = psycopg2.extensions.parse_dsn(dsn)
        dsn = with_output_settings(dsn)
    except psycopg2.ProgrammingError as e:
        raise ReplicationError(f"invalid DSN: {one_line(str(e))}") from None
    host = params.get("host") or os.environ.get("PGHOST") or "(default socket)"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    where = f"cannot connect to {host} port {port}"
    kwargs: dict[str, Any] = {}
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        kwargs["connect_timeout"] = max(1, int(round(connect_timeout)))
    if replication:
        kwargs["connection_factory"] = psycopg2.extras.LogicalReplicationConnection
    try:
        conn = psycopg2.connect(dsn, **kwargs)
    except psycopg2.Error as e:
        raise classify_connect_error(e, where) from None
    if not replication:
        conn.autocommit = True
    return conn


def reconnect(start: Callable[[], None], options: StreamOptions, cause: BaseException,
              stopping: Callable[[], bool]) -> None:
    """Calls ``start`` (connect and stream again) until it succeeds, with exponential backoff:
    at most ``reconnect_attempts`` tries within ``reconnect_timeout`` seconds, the first after
    ``reconnect_initial_delay``, the delay doubling up to ``reconnect_max_delay``; none once
    ``stopping()``. A failure that waiting cannot mend (a wrong password, the slot or the
    publication gone, ``wal_level``) is raised at once; when the tries run out,
    :class:`ConnectionLost` names ``cause`` and the last failure."""
    deadline = time.monotonic() + options.reconnect_timeout
    delay = options.reconnect_initial_delay
    last: BaseException = cause
    for _ in range(options.reconnect_attempts):
        if stopping() or time.monotonic() > deadline:
            break
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, options.reconnect_max_delay)
        try:
            start()
            return
        except (AuthenticationFailed, SlotNotFound, SlotInvalidated, PublicationNotFound, WalLevelNotLogical):
            raise
        except (ConnectionFailed, SlotInUse) as e:  # server restarting, old walsender
            last = e
        except Exception as e:  # noqa: BLE001 - any other transient failure: try again
            last = e
    raise ConnectionLost(
        f"lost the replication connection ({one_line(str(cause))}) and could not "
        f"resume within {options.reconnect_attempts} attempts / {options.reconnect_timeout:.0f}s: "
        f"{one_line(str(last))}") from None


class CopyBothEnded(Exception):
    """The server ended the stream or the connection broke.

    ``sqlstate`` is the server's error code when it sent one (for example ``57P01`` when an
    administrator shut it down), else None.
    """

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def load_libpq() -> Any:
    """The libpq that psycopg2 is linked to (the same library, so the same ``PGconn``): its
    functions looked up through psycopg2's own extension module, whose dependencies the
    dynamic linker searches (dlsym on a handle), so no path is guessed; a system libpq only
    where that module does not export them."""
    global _lib
    if _lib is not None:
        return _lib
    import psycopg2._psycopg as psycopg

    lib = ctypes.CDLL(psycopg.__file__)
    if not hasattr(lib, "PQgetCopyData"):
        path = ctypes.util.find_library("pq")
        if path is None:
            raise OSError(f"cannot find the libpq that psycopg2 uses ({psycopg.__file__} does not "
                          "export its functions, and no libpq is installed)")
        lib = ctypes.CDLL(path)
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for name, restype, argtypes in [
        ("PQgetCopyData", i, [vp, ctypes.POINTER(vp), i]),
        ("PQputCopyData", i, [vp, cp, i]),
        ("PQputCopyEnd", i, [vp, cp]),
        ("PQflush", i, [vp]),
        ("PQconsumeInput", i, [vp]),
        ("PQsocket", i, [vp]),
        ("PQstatus", i, [vp]),
        ("PQserverVersion", i, [vp]),
        ("PQerrorMessage", cp, [vp]),
        ("PQgetResult", vp, [vp]),
        ("PQsendQuery", i, [vp, cp]),
        ("PQresultStatus", i, [vp]),
        ("PQresultErrorMessage", cp, [vp]),
        ("PQresultErrorField", cp, [vp, i]),
        ("PQclear", None, [vp]),
        ("PQfreemem", None, [vp]),
    ]:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    _lib = lib
    return lib


def _address(fn: Any) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def copy_out_functions(conn: Any) -> list[int]:
    """The addresses of the libpq functions ``_internal.CopyDecoder.start`` calls on the
    psycopg2 connection ``conn`` to run a ``COPY ... TO STDOUT`` (checked to be the libpq
    that psycopg2 uses)."""
    lib = load_libpq()
    if lib.PQserverVersion(ctypes.c_void_p(conn.pgconn_ptr)) != conn.server_version:
        raise OSError("the libpq found is not the one psycopg2 uses")
    return [_address(getattr(lib, name)) for name in (
        "PQsendQuery", "PQgetResult", "PQresultStatus", "PQresultErrorMessage", "PQclear",
        "PQgetCopyData", "PQfreemem", "PQerrorMessage")]


class CopyBoth:
    """The CopyBoth stream of a psycopg2 connection whose ``START_REPLICATION`` has already
    been answered with CopyBothResponse: :attr:`receiver` (``_internal.WalReceiver``) reads
    its frames and sends standby status updates."""

    def __init__(self, conn: Any) -> None:
        from .._internal import WalReceiver

        self._lib = load_libpq()
        self._conn = conn  # keeps the psycopg2 connection (and so the PGconn) alive
        self._pg = ctypes.c_void_p(conn.pgconn_ptr)
        # A different libpq than psycopg2's would read another struct layout: check first.
        if self._lib.PQserverVersion(self._pg) != conn.server_version:
            raise OSError("the libpq found is not the one psycopg2 uses")

        address = _address
        lib = self._lib
        self.receiver = WalReceiver(conn.pgconn_ptr, address(lib.PQgetCopyData),
                                    address(lib.PQconsumeInput), address(lib.PQfreemem),
                                    address(lib.PQputCopyData), address(lib.PQflush))

    def fileno(self) -> int:
        return int(self._lib.PQsocket(self._pg))

    def send_status(self, written: int, flushed: int, applied: int, reply: bool = False) -> None:
        """A standby status update: the flushed position is what the server may discard
        WAL up to (the slot's confirmed_flush_lsn)."""
        if not self.receiver.send_status(written, flushed, applied, reply):
            raise CopyBothEnded(self.connection_error() or "could not send a status update")

    def finish(self, timeout: float = 5.0) -> bool:
        """Ends the stream as PostgreSQL's own clients do (pg_recvlogical): CopyDone, then
        whatever the server still sends is read and dropped until its CopyDone. The
        server reads a client's messages in order, so once its CopyDone arrives it has
        applied the status update sent before ours: closing the socket instead loses that
        update whenever the walsender is busy sending (it then dies on the broken pipe
        without reading it), and a restart gets acknowledged changes again. True when the
        server ended the stream within ``timeout`` seconds."""
        import select
        import time

        lib, pg = self._lib, self._pg
        if lib.PQputCopyEnd(pg, None) != 1:
            return False
        deadline = time.monotonic() + timeout
        buf = ctypes.c_void_p()
        while time.monotonic() < deadline:
            if lib.PQflush(pg) < 0:
                return False
            n = lib.PQgetCopyData(pg, ctypes.byref(buf), 1)
            if n > 0:
                lib.PQfreemem(buf)
                continue
            if n == -1:  # the server's CopyDone: its command result follows
                self.ended()
                return True
            if n < -1:
                return False
            select.select([self.fileno()], [], [], max(0.0, min(0.1, deadline - time.monotonic())))
            if lib.PQconsumeInput(pg) != 1:
                return False
        return False

    def connection_error(self) -> str:
        raw = self._lib.PQerrorMessage(self._pg) or b""
        return raw.decode("utf-8", "replace").strip() or "the connection to the server was lost"

    def ended(self) -> CopyBothEnded:
        """The stream ended: collect the server's error (if any) from the final result."""
        message, sqlstate = "", None
        for _ in range(8):  # bounded: a CopyBoth ends with one result, then NULL
            res = self._lib.PQgetResult(self._pg)
            if not res:
                break
            try:
                if self._lib.PQresultStatus(res) not in (_PGRES_COMMAND_OK, _PGRES_COPY_BOTH):
                    text = self._lib.PQresultErrorMessage(res) or b""
                    message = message or text.decode("utf-8", "replace").strip()
                    code = self._lib.PQresultErrorField(res, _PG_DIAG_SQLSTATE)
                    sqlstate = sqlstate or (code.decode() if code else None)
            finally:
                self._lib.PQclear(res)
        if not message and self._lib.PQstatus(self._pg) == _CONNECTION_BAD:
            message = self.connection_error()
        return CopyBothEnded(message or "the server ended the replication stream", sqlstate)

