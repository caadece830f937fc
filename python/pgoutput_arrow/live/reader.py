"""The reading side of a live stream: the replication session's messages fed to a decoder,
the decoder's flushes made into groups of batches for the consumer, keepalives and status
updates answered, a lost connection resumed. :class:`.livestream.LiveStream` hands the groups
out and takes the consumer's acknowledgements; this module decides what a group holds and
which position it may acknowledge (pgoutput-proto's ``SessionPositions``, held by the
session)."""

from __future__ import annotations

import collections
import select
import time
from collections.abc import Mapping
from typing import Any

from .._pg import SqlError, classify_connect_error, one_line
from ..decoding import Decoder, Output
from ..exceptions import ConnectionLost
from .batches import TableSchemas, drop_handled
from .connection import CopyBothEnded, reconnect
from .online_export import ExportedChunk
from .online_feed import OnlineFeed
from .online_snapshot import Item
from .options import StreamOptions
from .session import ReplicationSession
from .sidecar import Sidecar
from .snapshot_feed import SnapshotFeed
from .stats import StreamCounters

__all__ = ["Reader", "Group"]

#: A group of batches, and the position that is handled once every one of them is.
Group = tuple[list[Output], int]

#: The SQLSTATEs of a replication stream ended by the server going away (shutdown, crash,
#: connection failure): the stream reconnects; any other error is raised.
_RECONNECTABLE = ("57P01", "57P02", "57P03", "08006", "08003")


class Reader:
    """Reads the replication session into a decoder and queues its flushes as groups
    (:attr:`pending`; :attr:`current` holds the batches of a group being iterated one by
    one). One per :class:`.livestream.LiveStream`, which shares with it the session, the
    ordinary connection (``sidecar``), the counters, the schemas and the snapshot feeds."""

    def __init__(self, options: StreamOptions, session: ReplicationSession, sidecar: Sidecar,
                 counters: StreamCounters, schemas: TableSchemas, feed: SnapshotFeed,
                 online: OnlineFeed) -> None:
        self.options = options
        self.session, self.positions = session, session.positions
        self.sidecar, self.counters, self.schemas = sidecar, counters, schemas
        self.feed, self.online = feed, online
        self.decoder: Any = None
        self.pending: collections.deque[Group] = collections.deque()
        self.current: collections.deque[Output] = collections.deque()
        #: Set to end the iteration after the batches already decoded.
        self.stop = False
        #: Where the stream ends; a caller may move it while the stream runs.
        self.stop_at_lsn: int | None = options.stop_at_lsn
        #: Whether positions nothing was handed out for are acknowledged on their own (see
        #: :attr:`.livestream.LiveStream.follow_idle`).
        self.follow_idle = True
        # Messages fed since the decoder's last flush, and when data last arrived (for
        # idle_timeout).
        self.fed_since_flush = 0
        self.last_data = counters.t0
        #: When the decoder was last flushed (a busy stream lingers after it: :meth:`_linger`).
        self.last_flush = 0.0

    @property
    def holds_batches(self) -> bool:
        """Whether decoded batches wait to be handed out."""
        return bool(self.pending or self.current)

    # ------------------------------------------------------------------ connecting

    def connect_and_start(self, first: bool, conn: Any = None) -> None:
        """Starts streaming (:meth:`.session.ReplicationSession.start`) into a new decoder."""
        self.session.start(first, conn)
        # The stream's mode is known here: no need to detect it from the first change.
        self.decoder = Decoder(**{"binary": self.options.binary, **self.options.decoder_options})
        self.schemas.new_decoder()
        self.fed_since_flush = 0
        self.last_data = time.monotonic()

    def disconnect(self) -> None:
        self.session.disconnect()
        self.sidecar.close()

    def reconnect(self, cause: BaseException) -> None:
        """Reconnect (:func:`.connection.reconnect`: with backoff), resuming after what was
        handed out."""
        self.disconnect()
        if self.options.temporary_slot:
            raise ConnectionLost(
                f"the replication connection was lost ({one_line(str(cause))}) and the "
                f'temporary slot "{self.options.slot}" went with it: cannot resume') from None

        def start() -> None:
            self.positions.reconnecting()
            self.connect_and_start(first=False)

        reconnect(start, self.options, cause, lambda: self.stop)
        self.counters.reconnects += 1

    def _tell_attnums(self, relation_ids: list[int]) -> None:
        """Tells the decoder which attnum each column of these relations has, before it
        reads their Relation messages, so that a renamed column is told from a dropped and
        an added one by the catalog rather than by the columns' order. The catalog is read
        now, after the messages were sent: a column renamed or dropped since then is not
        found by its old name, and that definition falls back to the order rule (as does
        every one when pg_attribute cannot be read)."""
        for relid, by_name in self.sidecar.attnums(relation_ids).items():
            self.decoder.column_attnums(relid, by_name)

    # ------------------------------------------------------------------ reading

    def pump(self) -> None:
        """Read what is there, feed the decoder, and return once batches are ready or after
        at most a short wait; handles keepalives, status updates and reconnects."""
        if not self.session.connected:
            self.reconnect(ConnectionLost("not connected"))
        try:
            self._read_available()
        except CopyBothEnded as e:
            self.flush_decoder()  # keep what fully arrived: it is complete and in order
            if self.pending:
                # Hand those out first; reconnect on the next call.
                self.disconnect()
                return
            if e.sqlstate and e.sqlstate not in _RECONNECTABLE:
                raise classify_connect_error(SqlError(str(e), e.sqlstate),
                                              "the replication stream failed") from None
            self.reconnect(e)

    def _read_available(self) -> None:
        session = self.session
        copy, receiver, txns, positions = session.copy, session.receiver, session.txns, session.positions
        feed_batch = self.decoder.feed_batch
        deadline = time.monotonic() + self.options.flush_interval
        n = 0
        while True:
            batch, count, nbytes, end, reply, status, error = receiver.read(txns, 1024)
            if count:
                relations = txns.take_relations()
                if relations:
                    self._tell_attnums(relations)
                feed_batch(batch)
                self.counters.received(count, nbytes)
                self.fed_since_flush += count
                n += count
                if self.online.watermark_arrived(batch):
                    self.last_data = time.monotonic()
                    self.flush_decoder()  # the waiting chunk goes out with this flush
                    if self.pending:
                        return
            if end:
                positions.server_end(end)
            if reply:
                session.send_status(answering=True)
            if status == -1:
                raise copy.ended()
            if status == -2:
                raise CopyBothEnded(error or copy.connection_error())
            if count:
                now = time.monotonic()
                self.counters.tick(now)
                if session.status_due(now):
                    session.send_status()
                if self.fed_since_flush >= self.options.flush_messages or now >= deadline:
                    self.flush_decoder()
                    if self.pending:
                        return
                    deadline = now + self.options.flush_interval
            if status == 0:
                break
        self._after_read(n)

    def _after_read(self, n: int) -> None:
        """Once nothing more is readable (``n`` messages were read): hand out what is
        complete, confirm, and wait a little for more."""
        session = self.session
        now = time.monotonic()
        if n:
            self.last_data = now
        # Caught up with the server: hand out what is complete, unless more is coming.
        if self.fed_since_flush:
            if n and self._linger(now):
                return
            self.flush_decoder()
        self.counters.tick(now)
        if self.pending:
            return
        if self.follow_idle:
            # Nothing pending and everything handed out acknowledged: confirm the server's
            # WAL end, so an idle publication does not hold WAL.
            self.positions.idle_advance(session.txns.idle and not self.current)
        self.sidecar.heartbeat(now)
        if self.positions.dirty or session.status_due(now):
            session.send_status()
        if self._should_stop(now):
            self.stop = True
            return
        wait = min(0.5, max(0.0, session.until_status(now)))
        if n == 0:
            select.select([session.copy], [], [], wait)

    def _linger(self, now: float) -> bool:
        """Whether more changes arrived while this stream, caught up less than
        ``flush_linger`` after its last flush, slept out the rest of that time: a stream that
        keeps receiving hands out one group per ``flush_linger`` at most, not one per read (a
        group costs the same whatever its rows: hundreds a second cost more than the
        decoding, benches/findings.md). It sleeps rather than waiting on the socket, so that
        the server's sends do not wake it each time. A stream whose changes come further
        apart hands each out as soon as it has caught up."""
        wait = self.last_flush + self.options.flush_linger - now
        if wait <= 0:
            return False
        time.sleep(wait)
        readable, _, _ = select.select([self.session.copy], [], [], 0)
        return bool(readable)

    def _should_stop(self, now: float) -> bool:
        o = self.options
        if o.stop_after is not None and now - self.counters.t0 >= o.stop_after:
            return True
        # Not idle while the online snapshot has chunks to read (the stream may be catching
        # up to a chunk's watermark without a change to hand out).
        if (o.idle_timeout is not None and now - self.last_data >= o.idle_timeout
                and not self.online.pending):
            return True
        if (self.stop_at_lsn is not None and self.positions.wal_end >= self.stop_at_lsn
                and self.session.txns.idle and not self.pending):
            return True
        return False

    # ------------------------------------------------------------------ handing out

    def flush_decoder(self) -> None:
        """The decoder's complete transactions, as the next group (or groups, where the
        online snapshot cuts the flush at a chunk's watermark)."""
        dec = self.decoder
        if dec is None:
            return
        dec.flush()
        self.last_flush = time.monotonic()
        items = dec.take()
        safe = int(dec.safe_lsn or 0)
        self.counters.in_flight = dec.pending
        self.fed_since_flush = 0
        batches = [b for b in (self._to_live(item) for item in items) if b is not None]
        for kind, table, _, batch in batches:
            if kind == "table" and table is not None:
                self.counters.decoded(table, batch)
        cut = self.online.cut_flush(batches, safe)
        if cut is not None:
            for group in cut:
                self.hand_out(group.batches, group.safe, group.snapshot, group.state, group.read_elsewhere)
            return
        self.hand_out(batches, safe, state=self.online.changed_state() if batches else None)

    def hand_out(self, batches: list[Item], safe: int, snapshot: bool = False,
                 state: Mapping[str, Any] | None = None, read_elsewhere: ExportedChunk | None = None) -> None:
        """``batches``, complete up to ``safe``, as the next group. With nothing to store
        (e.g. transactions that touched no published table) the position is handled as
        soon as everything handed out before it is."""
        previous, group_ack = self.positions.handed_out(safe, self.session.txns.prepared_floor(),
                                                        not batches and self.follow_idle)
        last = len(batches) - 1
        group = [Output(kind, table, version, batch, group_ack if i == last else previous,
                        snapshot=snapshot, snapshot_state=state if i == last else None,
                        read_elsewhere=read_elsewhere if i == last else None)
                 for i, (kind, table, version, batch) in enumerate(batches)]
        if group:
            self.pending.append((group, group_ack))

    def _to_live(self, item: Output) -> Item | None:
        """A decoded batch without the rows already handled (before the resume point, or in
        a table's snapshot), under its table's one schema; None when no row is left."""
        kind, table, version, batch = item
        batch = drop_handled(batch, self.positions.floor)
        if batch.num_rows == 0:
            return None
        if kind == "table" and table is not None:
            floor = self.feed.floors.get(table)
            if floor is not None:
                batch = drop_handled(batch, floor)
                if batch.num_rows == 0:
                    return None
            batch = self.schemas.unify(table, batch)
        return kind, table, version, batch

    def finish(self) -> None:
        """At the end of the iteration: whatever complete batches remain, as a last group."""
        if self.decoder is not None and self.fed_since_flush:
            try:
                self.flush_decoder()
            except Exception:
                pass
