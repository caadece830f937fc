"""The CopyBoth half of a walsender connection, driven through the libpq that psycopg2 uses.

psycopg2 opens the connection (libpq does SCRAM, TLS, passfile, PGPASSWORD, service files and
URIs) and issues ``START_REPLICATION``; the stream itself is read here with libpq's
``PQgetCopyData`` on the same ``PGconn`` (``connection.pgconn_ptr``). The reason is the flush
position: psycopg2's ``ReplicationCursor.read_message`` answers keepalives by itself, and
moves the flushed position forward to the keepalive's WAL end whenever the last flushed LSN
is at or beyond the last XLogData's start — which is always true after a message whose start
the walsender leaves at 0 (Relation messages), so it could confirm transactions that the
consumer had received but not yet stored. Here nothing is confirmed that the caller did not
say.

Frames follow section 54.4 of the PostgreSQL 18 documentation (streaming replication
protocol): XLogData ``'w'``, primary keepalive ``'k'``, standby status update ``'r'``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import struct
import time
from typing import Any

__all__ = ["CopyBoth", "CopyBothEnded", "load_libpq", "PG_EPOCH_OFFSET_US"]

#: Microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01 (UTC).
PG_EPOCH_OFFSET_US = 946_684_800_000_000

_PGRES_COPY_BOTH = 8
_PGRES_COMMAND_OK = 1
_PG_DIAG_SQLSTATE = ord("C")
_CONNECTION_BAD = 1

_XLOG_HEADER = struct.Struct("!QQq")  # WAL start, WAL end, server clock
_KEEPALIVE = struct.Struct("!QqB")  # WAL end, server clock, reply requested
_STATUS = struct.Struct("!cQQQqB")  # 'r', written, flushed, applied, clock, reply requested

_lib: Any = None
_string_at = ctypes.string_at


class CopyBothEnded(Exception):
    """The server ended the stream or the connection broke.

    ``sqlstate`` is the server's error code when it sent one (for example ``57P01`` when an
    administrator shut it down), else None.
    """

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _loaded_libpq_path() -> str | None:
    """The libpq already mapped into this process (psycopg2's), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "/libpq" in path and ".so" in path:
                    return path
    except OSError:
        return None
    return None


def load_libpq() -> Any:
    """The libpq that psycopg2 is linked to (the same library, so the same ``PGconn``)."""
    global _lib
    if _lib is not None:
        return _lib
    import psycopg2._psycopg  # noqa: F401  (maps psycopg2's libpq into the process)

    path = _loaded_libpq_path() or ctypes.util.find_library("pq")
    if path is None:
        raise OSError("cannot find the libpq that psycopg2 uses (no libpq in /proc/self/maps)")
    lib = ctypes.CDLL(path)
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for name, restype, argtypes in [
        ("PQgetCopyData", i, [vp, ctypes.POINTER(vp), i]),
        ("PQputCopyData", i, [vp, cp, i]),
        ("PQflush", i, [vp]),
        ("PQconsumeInput", i, [vp]),
        ("PQsocket", i, [vp]),
        ("PQstatus", i, [vp]),
        ("PQserverVersion", i, [vp]),
        ("PQerrorMessage", cp, [vp]),
        ("PQgetResult", vp, [vp]),
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


def now_pg_us() -> int:
    """The current time in microseconds since 2000-01-01 UTC (the protocol's clock)."""
    return time.time_ns() // 1000 - PG_EPOCH_OFFSET_US


class CopyBoth:
    """Reads XLogData and keepalives, and sends standby status updates, on a psycopg2
    connection whose ``START_REPLICATION`` has already been answered with CopyBothResponse.
    """

    def __init__(self, conn: Any) -> None:
        self._lib = load_libpq()
        self._conn = conn  # keeps the psycopg2 connection (and so the PGconn) alive
        self._pg = ctypes.c_void_p(conn.pgconn_ptr)
        # A different libpq than psycopg2's would read another struct layout: check first.
        if self._lib.PQserverVersion(self._pg) != conn.server_version:
            raise OSError("the libpq found is not the one psycopg2 uses")
        self._buf = ctypes.c_void_p()
        self._bufref = ctypes.byref(self._buf)
        # Bound once: read() runs once per message.
        self._get = self._lib.PQgetCopyData
        self._free = self._lib.PQfreemem

    def fileno(self) -> int:
        return int(self._lib.PQsocket(self._pg))

    def receiver(self) -> Any:
        """A native reader of this connection's frames (many per call, no Python object per
        message): ``_internal.WalReceiver`` over the same ``PGconn`` and libpq."""
        from ._internal import WalReceiver

        def address(fn: Any) -> int:
            return ctypes.cast(fn, ctypes.c_void_p).value or 0

        return WalReceiver(self._conn.pgconn_ptr, address(self._lib.PQgetCopyData),
                           address(self._lib.PQconsumeInput), address(self._lib.PQfreemem))

    def read(self) -> tuple[str, Any] | None:
        """The next frame without blocking, or None when none is buffered or readable.

        Returns ``('w', (wal_start, wal_end, server_clock, payload: bytes))`` or
        ``('k', (wal_end, server_clock, reply_requested: bool))``.
        """
        pg, buf, ref = self._pg, self._buf, self._bufref
        n = self._get(pg, ref, 1)
        if n == 0:
            if not self._lib.PQconsumeInput(pg):
                raise CopyBothEnded(self.connection_error())
            n = self._get(pg, ref, 1)
            if n == 0:
                return None
        if n == -1:
            raise self.ended()
        if n < 0:
            raise CopyBothEnded(self.connection_error())
        try:
            frame = _string_at(buf.value or 0, n)
        finally:
            self._free(buf)
        kind = frame[:1]
        if kind == b"w" and n >= 25:
            start, end, clock = _XLOG_HEADER.unpack_from(frame, 1)
            return "w", (start, end, clock, frame[25:])
        if kind == b"k" and n >= 18:
            end, clock, reply = _KEEPALIVE.unpack_from(frame, 1)
            return "k", (end, clock, bool(reply))
        raise CopyBothEnded(f"unexpected CopyData from the walsender: kind {kind!r}, {n} bytes")

    def send_status(self, written: int, flushed: int, applied: int, reply: bool = False) -> None:
        """A standby status update: the flushed position is what the server may discard
        WAL up to (the slot's confirmed_flush_lsn)."""
        msg = _STATUS.pack(b"r", written, flushed, applied, now_pg_us(), 1 if reply else 0)
        if self._lib.PQputCopyData(self._pg, msg, len(msg)) != 1:
            raise CopyBothEnded(self.connection_error())
        deadline = time.monotonic() + 30.0
        while True:
            rc = self._lib.PQflush(self._pg)
            if rc == 0:
                return
            if rc < 0 or time.monotonic() > deadline:
                raise CopyBothEnded(self.connection_error() or "could not send a status update")
            time.sleep(0.001)

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

