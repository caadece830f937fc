"""What a live stream reports of its progress: :class:`StreamStats`, counted by
:class:`StreamCounters`."""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["StreamStats", "StreamCounters"]


@dataclasses.dataclass(frozen=True)
class StreamStats:
    """A snapshot of the stream's progress. LSNs are ints (``lsn_to_str`` prints them)."""

    server_wal_end: int
    received_lsn: int
    emitted_lsn: int
    acked_lsn: int
    confirmed_lsn: int
    messages: int
    bytes: int
    batches: int
    rows: int
    elapsed_s: float
    messages_per_s: float
    bytes_per_s: float
    reconnects: int
    #: Transactions begun whose outcome is not known yet, and the bytes of their messages
    #: held in memory and in spill files.
    in_flight_transactions: int = 0
    buffered_bytes: int = 0
    spilled_bytes: int = 0
    #: Now minus the commit time of the last transaction received (seconds); 0 while
    #: caught up (nothing in flight or pending, everything received confirmed), None
    #: before the first commit.
    lag_seconds: float | None = None
    #: Row changes handed out per table ("schema.table"), and the bytes of their batches.
    table_changes: dict[str, int] = dataclasses.field(default_factory=dict)
    table_bytes: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def lag_bytes(self) -> int:
        """Server WAL end minus the position confirmed to the server."""
        return max(0, self.server_wal_end - self.confirmed_lsn)


class StreamCounters:
    """What a live stream counts as it runs, and :meth:`stats` from it and the session's
    positions (``_internal.SessionPositions``)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.messages = 0
        self.bytes = 0
        self.batches = 0
        self.rows = 0
        self.reconnects = 0
        #: Transactions in flight in the decoder, and the bytes it buffers and spilled.
        self.in_flight = (0, 0, 0)
        # Per table: changes and Arrow bytes handed out; the commit time (epoch seconds) of
        # the last transaction decoded; (time, messages, bytes) samples for the rates.
        self._table_changes: dict[str, int] = {}
        self._table_bytes: dict[str, int] = {}
        self._last_commit_ts: float | None = None
        self._window: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=12)

    def received(self, messages: int, nbytes: int) -> None:
        self.messages += messages
        self.bytes += nbytes

    def given(self, batches: int, rows: int) -> None:
        """Batches given to the consumer."""
        self.batches += batches
        self.rows += rows

    def tick(self, now: float) -> None:
        """A sample for the rates, at most every half second."""
        if not self._window or now - self._window[-1][0] >= 0.5:
            self._window.append((now, self.messages, self.bytes))

    def decoded(self, table: str, batch: pa.RecordBatch) -> None:
        """A table's batch decoded: its changes, bytes, and latest commit time."""
        self._table_changes[table] = self._table_changes.get(table, 0) + batch.num_rows
        self._table_bytes[table] = self._table_bytes.get(table, 0) + batch.nbytes
        if "_commit_ts" in batch.schema.names:
            latest = pc.max(batch.column("_commit_ts")).as_py()
            ts = latest.timestamp() if hasattr(latest, "timestamp") else None
            if ts is not None and (self._last_commit_ts is None or ts > self._last_commit_ts):
                self._last_commit_ts = ts

    def stats(self, positions: Any, waiting: bool) -> StreamStats:
        """The stream's progress; ``waiting``: decoded batches not yet given or taken."""
        now = time.monotonic()
        mps = bps = 0.0
        if self._window:
            t, m, b = self._window[0]
            if now - t > 1e-3:
                mps = (self.messages - m) / (now - t)
                bps = (self.bytes - b) / (now - t)
        in_flight, buffered, spilled = self.in_flight
        lag_seconds = None
        if in_flight == 0 and not waiting and positions.confirmed >= positions.wal_end:
            lag_seconds = 0.0  # caught up: nothing received is waiting
        elif self._last_commit_ts is not None:
            lag_seconds = max(0.0, time.time() - self._last_commit_ts)
        return StreamStats(
            server_wal_end=positions.wal_end, received_lsn=positions.received,
            emitted_lsn=positions.emitted, acked_lsn=positions.acked,
            confirmed_lsn=positions.confirmed, messages=self.messages, bytes=self.bytes,
            batches=self.batches, rows=self.rows, elapsed_s=now - self.t0, messages_per_s=mps,
            bytes_per_s=bps, reconnects=self.reconnects, in_flight_transactions=in_flight,
            buffered_bytes=buffered, spilled_bytes=spilled, lag_seconds=lag_seconds,
            table_changes=dict(self._table_changes), table_bytes=dict(self._table_bytes))
