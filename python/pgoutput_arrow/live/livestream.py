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
the consumer is acknowledged as soon as everything handed out before it is. The reading itself
(messages into the decoder, its flushes into groups, reconnects) is :class:`.reader.Reader`'s.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Iterator

from .._catalog import published_tables
from .._pg import close_quietly
from ..decoding import Output
from ..exceptions import ConnectionLost
from .batches import TableSchemas, drop_handled
from .connection import CopyBothEnded, connect
from .online_feed import OnlineFeed
from .options import StreamOptions, options_doc, parse_lsn
from .reader import Group, Reader
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
        #: Whether the online snapshot reads its next chunk once the last one went out. A
        #: consumer that holds what it was handed before storing it (Spark's streaming
        #: source) pauses it, so that a kill loses few chunks read ahead.
        self.read_chunks = True
        self._closed = False
        self._started = False

        # The replication connection, and where the session stands (received, handed out,
        # acknowledged, confirmed to the server; where to resume: pgoutput-proto's
        # SessionPositions, also self._positions).
        self._session = ReplicationSession(dsn, o)
        self._positions = self._session.positions
        # The ordinary connection: pg_attribute reads and heartbeats.
        self._sidecar = Sidecar(dsn, o.connect_timeout, o.heartbeat_interval)
        # Every batch of a table under one schema, whatever its versions.
        schemas = TableSchemas()
        self._counters = StreamCounters()
        # The initial snapshot while it is read, and tables' own snapshots (snapshot_table).
        self._feed = SnapshotFeed(dsn, o, schemas)
        #: The online snapshot (online_snapshot=True, or resnapshot()).
        self.online = OnlineFeed(dsn, o, schemas, self.snapshot_table)
        # The stream read into a decoder, and the groups decoded not yet handed out.
        self._reader = Reader(o, self._session, self._sidecar, self._counters, schemas,
                              self._feed, self.online)
        self._metrics: Any = None

    @property
    def stop_at_lsn(self) -> int | None:
        """Where the stream ends: once the server's WAL end reached it and nothing is
        pending. A caller may move it while the stream runs."""
        return self._reader.stop_at_lsn

    @stop_at_lsn.setter
    def stop_at_lsn(self, lsn: int | None) -> None:
        self._reader.stop_at_lsn = lsn

    @property
    def follow_idle(self) -> bool:
        """Whether positions nothing was handed out for (an idle stream's WAL end, the
        transactions that touched no published table) are acknowledged on their own, once
        everything handed out before them is (True by default). A consumer that acknowledges
        every position itself (Spark's streaming source: the slot moves only where Spark
        committed) sets it False and takes the idle positions with :meth:`hand_out_idle`."""
        return self._reader.follow_idle

    @follow_idle.setter
    def follow_idle(self, follow: bool) -> None:
        self._reader.follow_idle = follow

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
        while not self._reader.current:
            group = self._next_group(wait=True)
            if group is None:
                raise StopIteration
            self._reader.current.extend(group[0])
        item = self._reader.current.popleft()
        positions.yielded(item.ack_lsn)
        self._counters.given(1, item.num_rows)
        return item

    def groups(self, linger: float = 0.0) -> Iterator[Group]:
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
            while (linger > 0 and time.monotonic() - t_first < linger and not self._reader.stop
                   and not any(b.snapshot for b in batches) and self._feed.initial is None):
                more = self._next_group(wait=False)
                if more is None:
                    continue
                if any(b.snapshot for b in more[0]):
                    self._reader.pending.appendleft(more)
                    break
                batches += more[0]
                ack = more[1]
            self._positions.yielded(ack)
            self._counters.given(len(batches), sum(b.num_rows for b in batches))
            yield batches, ack

    def poll(self, wait: bool = False) -> Group | None:
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
        reader = self._reader
        if (not self._session.txns.idle or reader.holds_batches or reader.fed_since_flush
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
            self._reader.reconnect(ConnectionLost("not connected"))
        try:
            self._session.send_status()
        except CopyBothEnded as e:
            self._reader.reconnect(e)
            self._session.send_status()

    def _next_group(self, wait: bool) -> Group | None:
        """The next decoded group; None at the end of the stream (or, with ``wait`` False,
        when nothing arrived during one short read). A table snapshot queued
        (:meth:`snapshot_table`) comes out before anything else, the stream read after it
        included."""
        while True:
            while self._feed.late and not (self._closed or self._reader.stop):
                late = self._feed.next_table_group(self._positions.emitted, self.online.current)
                if late is not None:
                    return late
            if self._reader.pending:
                return self._reader.pending.popleft()
            if self._feed.initial is not None and not (self._closed or self._reader.stop):
                self._pump_snapshot()
                continue
            if self._closed or self._reader.stop:
                self._finish_stream()
                return self._reader.pending.popleft() if self._reader.pending else None
            # A table added to the publication is read online; the next chunk comes out where
            # its watermark passes in the stream.
            self.online.read_next(read_chunk=not self._feed.late and self.read_chunks)
            if self._feed.late:
                continue  # its rows before the changes read from now on
            self._reader.pump()
            if not wait and not self._reader.pending:
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
                self._reader.connect_and_start(first=True)
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
        self._reader.stop = True

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
        return self._counters.stats(self._positions, self._reader.holds_batches)

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
            self._reader.pending.append(group)
        if end is not None:
            self._positions.snapshot_done(end.lsn, end.empty)
            self._reader.connect_and_start(first=True, conn=end.conn)

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

        reader = self._reader
        reader.current = collections.deque(b for b in map(below, reader.current) if b is not None)
        reader.pending = collections.deque(
            ([b for b in map(below, group) if b is not None], ack) for group, ack in reader.pending)
        return lsn

    def resnapshot(self, table: str) -> None:
        """Reads ``table`` (``"schema.table"``, published) online from its first key, chunk
        by chunk, while the stream flows: a table added to the publication (call it once
        ``ALTER PUBLICATION ... ADD TABLE`` committed), or one to read again. Its rows come
        out as snapshot rows where each chunk's watermark passes in the stream; its progress
        is part of ``snapshot_state`` from then on."""
        self.online.resnapshot(table)

    def _finish_stream(self) -> None:
        """At the end of the iteration: hand out whatever complete batches remain, then
        confirm and disconnect."""
        self._reader.finish()
        if not self._reader.pending and not self._closed:
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
