"""What a live stream reports of its progress: :class:`StreamStats`."""

from __future__ import annotations

import dataclasses

__all__ = ["StreamStats"]


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
