"""Stream a logical replication slot live, and confirm to the server only what was handled.

Follows section 54.4 of the PostgreSQL 18 documentation (streaming replication protocol) and
the walsender notes in the project's spec. ::

    import pgoutput_arrow

    with pgoutput_arrow.stream(dsn, slot="s", publication="pub") as changes:
        for item in changes:                # Output: .kind, .table, .batch, .ack_lsn
            store(item.table, item.batch)   # make it durable
            changes.ack(item.ack_lsn)       # only now may the server discard that WAL

How nothing is lost or emitted twice:

* Batches come out only for committed transactions, at flush points of the decoder;
  ``ack_lsn`` of the last batch of a flush is the decoder's ``safe_lsn`` (every transaction
  that ended at or before it is fully out), the other batches of that flush repeat the
  previous flush's position. The flushed position sent to the server is the highest acked
  LSN, never more (one exception below), and never beyond an unresolved prepared
  transaction, which the server would not send again.
* While nothing is pending (no open transaction in the stream, every batch handed out was
  acked), the WAL end of the server's keepalives is confirmed as well, so that a slot whose
  publication sees no changes still advances and does not hold WAL.
* When the connection breaks (server restart, network), the stream reconnects with
  exponential backoff and asks the server to start at the highest LSN already handed out; the
  server then resends only transactions that commit after it, into a fresh decoder (the
  partial transaction is dropped). Rows whose ``_commit_lsn`` is below that point are
  filtered out as a second guard.
* Across process restarts the consumer's durable output is the reference: pass the highest
  end LSN it holds as ``start_lsn`` (what ``pgoutput-dump --output DIR`` does).

Each of these rules has its one home in pgoutput-proto's ``SessionPositions``
(``crates/pgoutput-proto/src/session.rs``), which this stream's replication session holds
(:class:`.session.ReplicationSession`: the connection, its status updates); a flush with nothing for
the consumer is acknowledged as soon as everything handed out before it is.
"""

from __future__ import annotations

import collections
import dataclasses
import select
import time
from collections.abc import Mapping
from typing import Any, Iterator

from .._catalog import published_tables
from ..decoding import Decoder, Output
from .._pg import SqlError, classify_connect_error, close_quietly, one_line
from ..exceptions import ConnectionLost
from .batches import TableSchemas, drop_handled
from .connection import CopyBothEnded, connect, reconnect
from .online_export import ExportedChunk
from .online_feed import OnlineFeed
from .online_snapshot import Item
from .options import StreamOptions, options_doc, parse_lsn
from .sidecar import HEARTBEAT_PREFIX, Sidecar
from .session import ReplicationSession
from .snapshot_feed import SnapshotFeed
from .stats import StreamCounters, StreamStats

__all__ = ["stream", "LiveStream", "StreamStats", "HEARTBEAT_PREFIX"]

#: StreamOptions' fields, readable as attributes of a LiveStream.
_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(StreamOptions))


class LiveStream:
    """An iterator of :class:`Output` over a live replication slot, and a context manager
    that closes it (after sending the last acknowledged position). See :func:`stream`."""

    def __getattr__(self, name: str) -> Any:
        """The options as read-only attributes (``stream.slot``, ``stream.binary``, ...):
        :attr:`options` holds them."""
        options = self.__dict__.get("options")
        if options is not None and name in _OPTION_NAMES:
            value = getattr(options, name)
            return list(value) if name == "publications" else value
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __init__(self, dsn: str, options: StreamOptions | None = None, /, **keywords: Any) -> None:
        """``LiveStream(dsn, slot=..., **options)`` takes the keyword options of
        :func:`stream`; or ``LiveStream(dsn, StreamOptions.of(...))``."""
        if options is None:
            options = StreamOptions.of(**keywords)
        elif keywords:
            raise TypeError("LiveStream takes StreamOptions or keyword options, not both")
        o = self.options = options
        self.dsn = dsn
        # Where the stream ends; a caller may move it while the stream runs.
        self.stop_at_lsn: int | None = o.stop_at_lsn
        #: Whether positions nothing was handed out for (an idle stream's WAL end, the
        #: transactions that touched no published table) are acknowledged on their own, once
        #: everything handed out before them is. A consumer that acknowledges every position
        #: itself (Spark's streaming source: the slot moves only where Spark committed) sets
        #: it False and takes the idle positions with :meth:`hand_out_idle`.
        self.follow_idle = True
        #: Whether the online snapshot reads its next chunk once the last one went out. A
        #: consumer that holds what it was handed before storing it (Spark's streaming
        #: source) pauses it, so that a kill loses few chunks read ahead.
        self.read_chunks = True

        # The replication connection, and where the session stands (received, handed out,
        # acknowledged, confirmed to the server; where to resume: pgoutput-proto's
        # SessionPositions, also self._positions).
        self._session = ReplicationSession(dsn, o)
        self._positions = self._session.positions
        # The ordinary connection: pg_attribute reads (see _tell_attnums) and heartbeats.
        self._sidecar = Sidecar(dsn, o.connect_timeout, o.heartbeat_interval)
        self._decoder: Any = None
        # Decoded groups not yet handed out: the batches of one decoder flush, and the
        # position that is handled once all of them are.
        self._pending: collections.deque[tuple[list[Output], int]] = collections.deque()
        self._current: collections.deque[Output] = collections.deque()
        self._closed = False
        self._stop = False
        self._started = False

        # Every batch of a table under one schema, whatever its versions.
        self._schemas = TableSchemas()

        self._counters = StreamCounters()
        self._last_data = self._counters.t0
        # The initial snapshot while it is read, and tables' own snapshots (snapshot_table).
        self._feed = SnapshotFeed(dsn, o, self._schemas)
        #: The online snapshot (online_snapshot=True, or resnapshot()).
        self.online = OnlineFeed(dsn, o, self._schemas, self.snapshot_table)
        self._fed_since_flush = 0
        self._last_flush = self._counters.t0
        self._metrics: Any = None

    @property
    def proto_version(self) -> int | None:
        """The pgoutput protocol of the stream, once it started."""
        return self._session.proto_version

    @property
    def server_version(self) -> int | None:
        """The server's ``server_version_num``, once connected."""
        return self._session.server_version

    @property
    def metrics_port(self) -> int | None:
        """The port of the Prometheus endpoint while it is served (``metrics_port`` 0
        picks a free one), else None."""
        return self._metrics.port if self._metrics is not None else None

    # ------------------------------------------------------------------ public API

    def __enter__(self) -> "LiveStream":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Output]:
        return self

    def __next__(self) -> Output:
        if not self._started:
            self.open()
        positions = self._positions
        if self.options.auto_ack and positions.last_yielded > positions.acked:
            positions.ack()
        while not self._current:
            group = self._next_group(wait=True)
            if group is None:
                raise StopIteration
            self._current.extend(group[0])
        item = self._current.popleft()
        positions.yielded(item.ack_lsn)
        self._counters.given(1, item.num_rows)
        return item

    def groups(self, linger: float = 0.0) -> Iterator[tuple[list[Output], int]]:
        """Whole decoder flushes instead of single batches: ``(batches, ack_lsn)``, where
        ``ack_lsn`` is handled once every batch of the group is. With ``linger`` > 0, the
        flushes that arrive within that many seconds of the first are merged into one group
        (fewer, larger files for a sink). Do not mix with plain iteration."""
        if not self._started:
            self.open()
        while True:
            group = self._next_group(wait=True)
            if group is None:
                return
            batches, ack = list(group[0]), group[1]
            t_first = time.monotonic()
            # A snapshot's chunk stays a group of its own (a sink names its files apart).
            while (linger > 0 and time.monotonic() - t_first < linger and not self._stop
                   and not any(b.snapshot for b in batches) and self._feed.initial is None):
                more = self._next_group(wait=False)
                if more is None:
                    continue
                if any(b.snapshot for b in more[0]):
                    self._pending.appendleft(more)
                    break
                batches += more[0]
                ack = more[1]
            self._positions.yielded(ack)
            self._counters.given(len(batches), sum(b.num_rows for b in batches))
            yield batches, ack

    def poll(self, wait: bool = False) -> tuple[list[Output], int] | None:
        """The next group as :meth:`groups` gives it, ``(batches, ack_lsn)``; None at the end
        of the stream, or (``wait`` False) when none is ready after one short read."""
        if not self._started:
            self.open()
        group = self._next_group(wait)
        if group is not None:
            self._positions.yielded(group[1])
            self._counters.given(len(group[0]), sum(b.num_rows for b in group[0]))
        return group

    def hand_out_idle(self) -> int | None:
        """With :attr:`follow_idle` False: when nothing is in flight, decoded or waiting, the
        server's WAL end is handed out, to be acknowledged like a group's position; returns
        the position handed out, or None when something is in flight."""
        if (not self._session.txns.idle or self._pending or self._current or self._fed_since_flush
                or self._feed.pending or self.online.waiting):
            return None
        positions = self._positions
        positions.handed_out(positions.wal_end, self._session.txns.prepared_floor(), False)
        positions.yielded(positions.emitted)
        return int(positions.emitted)

    @property
    def snapshot_pending(self) -> bool:
        """Whether a snapshot (the initial one, a table's, or the online snapshot) still has
        rows to hand out."""
        return self._feed.pending or self.online.pending

    def confirm(self) -> None:
        """Send the acknowledged position to the server now, rather than at the next
        status update (reconnecting first if the connection was lost)."""
        if not self._session.connected:
            self._reconnect(ConnectionLost("not connected"))
        try:
            self._session.send_status()
        except CopyBothEnded as e:
            self._reconnect(e)
            self._session.send_status()

    def _next_group(self, wait: bool) -> tuple[list[Output], int] | None:
        """The next decoded group; None at the end of the stream (or, with ``wait`` False,
        when nothing arrived during one short read). A table snapshot queued
        (:meth:`snapshot_table`) comes out before anything else, the stream read after it
        included."""
        while True:
            while self._feed.late and not (self._closed or self._stop):
                late = self._feed.next_table_group(self._positions.emitted, self.online.current)
                if late is not None:
                    return late
            if self._pending:
                return self._pending.popleft()
            if self._feed.initial is not None and not (self._closed or self._stop):
                self._pump_snapshot()
                continue
            if self._closed or self._stop:
                self._finish_stream()
                return self._pending.popleft() if self._pending else None
            # A table added to the publication is read online; the next chunk comes out where
            # its watermark passes in the stream.
            self.online.read_next(read_chunk=not self._feed.late and self.read_chunks)
            if self._feed.late:
                continue  # its rows before the changes read from now on
            self._pump()
            if not wait and not self._pending:
                return None

    def open(self) -> None:
        """Connect, check the slot and publication (creating them if asked), and start
        streaming. Called by ``with`` or the first ``next()``."""
        if self._started:
            return
        self._started = True
        # The endpoint first: a missing prometheus_client or a port in use fails before
        # anything is created on the server.
        if self.options.metrics_port is not None:
            from .metrics import MetricsServer

            self._metrics = MetricsServer(self.stats, dsn=self.dsn, slot=self.options.slot,
                                          port=self.options.metrics_port,
                                          connect_timeout=self.options.connect_timeout)
        try:
            self._check_snapshot_tables()
            if self.options.snapshot:
                self._feed.start_initial()
            else:
                self._connect_and_start(first=True)
                if self.options.online_snapshot:
                    self.online.start()
        except BaseException:
            self.close()
            raise

    def ack(self, lsn: int | str | None = None) -> None:
        """Confirm that everything up to ``lsn`` (an ``ack_lsn`` of a yielded batch; default:
        the last one yielded) is durably handled. Positions only move forward; an LSN beyond
        what was handed out is refused."""
        self._positions.ack(None if lsn is None else parse_lsn(lsn))

    def stop(self) -> None:
        """Ask the iteration to end after the batches already decoded (safe from a signal
        handler or another thread)."""
        self._stop = True

    def close(self) -> None:
        """Send the last acknowledged position and disconnect. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._feed.close()
        self.online.close()
        self._session.finish()
        self._sidecar.close()
        metrics, self._metrics = self._metrics, None
        if metrics is not None:
            metrics.close()

    @property
    def confirmed_lsn(self) -> int:
        """The flushed position last sent to the server."""
        return self._positions.confirmed

    @property
    def acked_lsn(self) -> int:
        return self._positions.acked

    @property
    def emitted_lsn(self) -> int:
        return self._positions.emitted

    @property
    def server_wal_end(self) -> int:
        return self._positions.wal_end

    @property
    def lag_bytes(self) -> int:
        """Server WAL end minus the confirmed position."""
        return max(0, self._positions.wal_end - self._positions.confirmed)

    @property
    def messages_per_s(self) -> float:
        return self.stats().messages_per_s

    @property
    def bytes_per_s(self) -> float:
        return self.stats().bytes_per_s

    def stats(self) -> StreamStats:
        return self._counters.stats(self._positions, bool(self._pending or self._current))

    # ------------------------------------------------------------------ the snapshot

    def _check_snapshot_tables(self) -> None:
        """Each of ``snapshot_tables`` is published, or an error names those that are not,
        before anything is created on the server (a publication this stream creates is
        checked once created, as the snapshot is planned)."""
        o = self.options
        if o.snapshot_tables is None or o.create_publication is not None:
            return
        conn = connect(self.dsn, o.connect_timeout, replication=False)
        try:
            published_tables(conn.cursor(), o.publications, o.snapshot_tables)
        finally:
            close_quietly(conn)

    def _pump_snapshot(self) -> None:
        """The initial snapshot's next chunk as a group; after the last, the stream starts
        at its consistent point on the exporting connection."""
        group, end = self._feed.next_initial(self._positions.emitted)
        if group is not None:
            self._pending.append(group)
        if end is not None:
            self._positions.snapshot_done(end.lsn, end.empty)
            self._connect_and_start(first=True, conn=end.conn)

    def snapshot_table(self, table: str, connections: int = 2) -> int:
        """Takes the snapshot of ``table``, added to the publication after this stream's slot
        was created (call it once ``ALTER PUBLICATION ... ADD TABLE`` committed): its rows
        come out next (read as they are handed out), as snapshot rows at the LSN returned,
        and the table's changes that committed before that LSN are dropped from the stream
        from now on (the snapshot holds them), those decoded but not handed out yet
        included. Changes of the table handed out before this call committed before that
        LSN too: ordered by ``_commit_lsn, _seq`` the snapshot's rows come after them."""
        lsn = self._feed.add_table(table, connections)

        def below(item: Output) -> Output | None:
            if item.table != table or item.kind != "table" or item.snapshot:
                return item
            kept = drop_handled(item.batch, lsn)
            return dataclasses.replace(item, batch=kept) if kept.num_rows else None

        self._current = collections.deque(b for b in map(below, self._current) if b is not None)
        self._pending = collections.deque(
            ([b for b in map(below, group) if b is not None], ack) for group, ack in self._pending)
        return lsn

    def resnapshot(self, table: str) -> None:
        """Reads ``table`` (``"schema.table"``, published) online from its first key, chunk
        by chunk, while the stream flows: a table added to the publication (call it once
        ``ALTER PUBLICATION ... ADD TABLE`` committed), or one to read again. Its rows come
        out as snapshot rows where each chunk's watermark passes in the stream; its progress
        is part of ``snapshot_state`` from then on."""
        self.online.resnapshot(table)

    # ------------------------------------------------------------------ connecting

    def _connect_and_start(self, first: bool, conn: Any = None) -> None:
        """Starts streaming (:meth:`.session.ReplicationSession.start`) into a new decoder."""
        self._session.start(first, conn)
        self._new_decoder()
        self._last_data = time.monotonic()

    def _new_decoder(self) -> None:
        # The stream's mode is known here: no need to detect it from the first change.
        self._decoder = Decoder(**{"binary": self.options.binary, **self.options.decoder_options})
        self._schemas.new_decoder()
        self._fed_since_flush = 0

    def _disconnect(self) -> None:
        self._session.disconnect()
        self._sidecar.close()

    def _tell_attnums(self, relation_ids: list[int]) -> None:
        """Tells the decoder which attnum each column of these relations has, before it
        reads their Relation messages, so that a renamed column is told from a dropped and
        an added one by the catalog rather than by the columns' order. The catalog is read
        now, after the messages were sent: a column renamed or dropped since then is not
        found by its old name, and that definition falls back to the order rule (as does
        every one when pg_attribute cannot be read)."""
        for relid, by_name in self._sidecar.attnums(relation_ids).items():
            self._decoder.column_attnums(relid, by_name)

    def _reconnect(self, cause: BaseException) -> None:
        """Reconnect (:func:`.connection.reconnect`: with backoff), resuming after what was
        handed out."""
        self._disconnect()
        if self.options.temporary_slot:
            raise ConnectionLost(
                f"the replication connection was lost ({one_line(str(cause))}) and the "
                f'temporary slot "{self.options.slot}" went with it: cannot resume') from None

        def start() -> None:
            self._positions.reconnecting()
            self._connect_and_start(first=False)

        reconnect(start, self.options, cause, lambda: self._stop)
        self._counters.reconnects += 1

    # ------------------------------------------------------------------ streaming

    def _pump(self) -> None:
        """Read what is there, feed the decoder, and return once batches are ready or after
        at most a short wait; handles keepalives, status updates and reconnects."""
        if not self._session.connected:
            self._reconnect(ConnectionLost("not connected"))
        try:
            self._read_available()
        except CopyBothEnded as e:
            self._flush_decoder()  # keep what fully arrived: it is complete and in order
            if self._pending:
                # Hand those out first; reconnect on the next call.
                self._disconnect()
                return
            if e.sqlstate and e.sqlstate not in ("57P01", "57P02", "57P03", "08006", "08003"):
                raise classify_connect_error(SqlError(str(e), e.sqlstate),
                                              "the replication stream failed") from None
            self._reconnect(e)

    def _read_available(self) -> None:
        session = self._session
        copy, receiver, txns, positions = session.copy, session.receiver, session.txns, session.positions
        feed_batch = self._decoder.feed_batch
        deadline = time.monotonic() + self.options.flush_interval
        n = 0
        while True:
            batch, count, nbytes, end, reply, status, error = receiver.read(txns, 1024)
            if count:
                relations = txns.take_relations()
                if relations:
                    self._tell_attnums(relations)
                feed_batch(batch)
                self._counters.received(count, nbytes)
                self._fed_since_flush += count
                n += count
                if self.online.watermark_arrived(batch):
                    self._last_data = time.monotonic()
                    self._flush_decoder()  # the waiting chunk goes out with this flush
                    if self._pending:
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
                self._counters.tick(now)
                if session.status_due(now):
                    session.send_status()
                if self._fed_since_flush >= self.options.flush_messages or now >= deadline:
                    self._flush_decoder()
                    if self._pending:
                        return
                    deadline = now + self.options.flush_interval
            if status == 0:
                break
        self._after_read(n)

    def _after_read(self, n: int) -> None:
        """Once nothing more is readable (``n`` messages were read): hand out what is
        complete, confirm, and wait a little for more."""
        session = self._session
        now = time.monotonic()
        if n:
            self._last_data = now
        # Caught up with the server: hand out what is complete.
        if self._fed_since_flush:
            self._flush_decoder()
        self._counters.tick(now)
        if self._pending:
            return
        if self.follow_idle:
            self._idle_advance()
        self._sidecar.heartbeat(now)
        if self._positions.dirty or session.status_due(now):
            session.send_status()
        if self._should_stop(now):
            self._stop = True
            return
        wait = min(0.5, max(0.0, session.until_status(now)))
        if n == 0:
            select.select([session.copy], [], [], wait)

    def _should_stop(self, now: float) -> bool:
        if self.options.stop_after is not None and now - self._counters.t0 >= self.options.stop_after:
            return True
        # Not idle while the online snapshot has chunks to read (the stream may be catching
        # up to a chunk's watermark without a change to hand out).
        if (self.options.idle_timeout is not None and now - self._last_data >= self.options.idle_timeout
                and not self.online.pending):
            return True
        if (self.stop_at_lsn is not None and self._positions.wal_end >= self.stop_at_lsn
                and self._session.txns.idle and not self._pending):
            return True
        return False

    def _flush_decoder(self) -> None:
        dec = self._decoder
        if dec is None:
            return
        dec.flush()
        items = dec.take()
        safe = int(dec.safe_lsn or 0)
        self._counters.in_flight = dec.pending
        self._fed_since_flush = 0
        self._last_flush = time.monotonic()
        batches = [b for b in (self._to_live(item) for item in items) if b is not None]
        for kind, table, _, batch in batches:
            if kind == "table" and table is not None:
                self._counters.decoded(table, batch)
        cut = self.online.cut_flush(batches, safe)
        if cut is not None:
            for group in cut:
                self._hand_out(group.batches, group.safe, group.snapshot, group.state, group.read_elsewhere)
            return
        self._hand_out(batches, safe, state=self.online.changed_state() if batches else None)

    def _hand_out(self, batches: list[Item], safe: int, snapshot: bool = False,
                  state: Mapping[str, Any] | None = None, read_elsewhere: ExportedChunk | None = None) -> None:
        """``batches``, complete up to ``safe``, as the next group. With nothing to store
        (e.g. transactions that touched no published table) the position is handled as
        soon as everything handed out before it is."""
        previous, group_ack = self._positions.handed_out(safe, self._session.txns.prepared_floor(),
                                                         not batches and self.follow_idle)
        last = len(batches) - 1
        group = [Output(kind, table, version, batch, group_ack if i == last else previous,
                           snapshot=snapshot, snapshot_state=state if i == last else None,
                           read_elsewhere=read_elsewhere if i == last else None)
                 for i, (kind, table, version, batch) in enumerate(batches)]
        if group:
            self._pending.append((group, group_ack))

    def _to_live(self, item: Output) -> Item | None:
        kind, table, version, batch = item
        batch = drop_handled(batch, self._positions.floor)
        if batch.num_rows == 0:
            return None
        if kind == "table" and table is not None:
            floor = self._feed.floors.get(table)
            if floor is not None:
                batch = drop_handled(batch, floor)
                if batch.num_rows == 0:
                    return None
            batch = self._schemas.unify(table, batch)
        return kind, table, version, batch

    def _idle_advance(self) -> None:
        """Nothing pending and everything handed out acknowledged: confirm the server's WAL
        end, so an idle publication does not hold WAL."""
        self._positions.idle_advance(self._session.txns.idle and not self._pending and not self._current)

    def _finish_stream(self) -> None:
        """At the end of the iteration: hand out whatever complete batches remain, then
        confirm and disconnect."""
        if self._decoder is not None and self._fed_since_flush:
            try:
                self._flush_decoder()
            except Exception:
                pass
        if not self._pending and not self._closed:
            self.close()


def stream(dsn: str, *, slot: str, **options: Any) -> LiveStream:
    return LiveStream(dsn, slot=slot, **options)


stream.__doc__ = """Stream the logical replication slot ``slot`` (plugin pgoutput) live, decoded.

``dsn`` is a libpq keyword string or URI (``host=... user=... password=... sslmode=
verify-full sslrootcert=...``; PGPASSWORD, ``~/.pgpass`` and the other PG* variables
apply).

``publication`` (a name or a list; required unless ``create_publication``),
``create_publication`` (a list of tables, or ``'ALL'``; ``publication`` defaults to the
slot's name), ``start_lsn`` (``'X/Y'`` or an int: start there, and count everything before
it as handled), ``stop_at_lsn`` (stop once the server's WAL end reached it and nothing is
pending), and:

{options}

Anything else goes to :class:`pgoutput_arrow.Decoder`. An option neither takes (a
misspelling: ``TypeError`` naming it and the nearest known one) or a decoder option of a
wrong value (``ValueError``) fails here, before anything is done on the server.

Returns a :class:`LiveStream`: iterate it for :class:`Output` items, ``ack(lsn)`` what
is durable, use it in ``with`` to close cleanly.
""".format(options=options_doc())
