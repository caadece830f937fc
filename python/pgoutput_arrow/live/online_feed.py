"""The online snapshot as a live stream runs it (:mod:`.online_snapshot` reads and cuts; this
module drives it for the stream): started with the stream or by :meth:`OnlineFeed.resnapshot`,
its next chunk read when the stream asks, tables added to the publication found every
:data:`PUBLICATION_POLL_S`, a table it cannot chunk in key order handed to the stream's own
table snapshot (said in one line), the resnapshot messages of the stream obeyed, and each
decoder flush cut where the waiting chunk's watermark is. With :attr:`OnlineFeed.export_chunks`
the chunks' rows are read elsewhere, under their exported snapshots (:mod:`.online_export`)."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .._catalog import published_tables
from .._pg import close_quietly, one_line
from ..exceptions import ReplicationError
from .batches import TableSchemas
from .connection import connect
from .online_export import ExportedChunk, Exports
from .online_snapshot import Item, OnlineSnapshot, UnorderedKey
from .options import StreamOptions

__all__ = ["OnlineFeed", "HandOut", "PUBLICATION_POLL_S"]

#: Seconds between two looks of the online snapshot for tables added to the publication.
PUBLICATION_POLL_S = 10.0

#: A chunk is exported only while the stream's walsender is at most this many bytes of WAL
#: behind the server's flushed WAL (see :meth:`OnlineFeed.may_export`); else its rows are read
#: on the stream's side.
CATCH_UP_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class HandOut:
    """A group for the stream to hand out: ``batches`` complete up to ``safe``; snapshot rows
    or not; the online snapshot's ``state`` reached with them; the chunk whose rows are read
    elsewhere (its batches are then empty)."""

    batches: list[Item]
    safe: int
    snapshot: bool = False
    state: Mapping[str, Any] | None = None
    read_elsewhere: ExportedChunk | None = None


class OnlineFeed:
    """The online snapshot of one live stream (see the module documentation): none until
    started (``online_snapshot=True``) or asked for (:meth:`resnapshot`). ``take_whole(table)``
    takes a table by the stream's own exported snapshot (``LiveStream.snapshot_table``)."""

    def __init__(self, dsn: str, options: StreamOptions, schemas: TableSchemas,
                 take_whole: Callable[[str], object]) -> None:
        self.dsn = dsn
        self.options = options
        self.schemas = schemas
        self._take_whole = take_whole
        #: Whether the chunks are handed out with their rows to be read elsewhere
        #: (``LiveBatch.read_elsewhere``: Spark's executors) under each chunk's exported
        #: snapshot (set before the stream opens). The snapshot ends once every part's reader
        #: said it read its rows (:meth:`release_read`) with ``end_exports_when_read``, else
        #: (and at the latest) at :meth:`release_exported`.
        self.export_chunks = False
        self.end_exports_when_read = True
        #: Whether the readers of exported chunks run already: :meth:`release_exported` was
        #: called (Spark committed a batch of this stream). Until then every chunk is read on
        #: the stream's side, as :meth:`may_export` says why.
        self._readers_running = False
        #: The online snapshot, once started.
        self.current: OnlineSnapshot | None = None
        self._exports: Exports | None = None
        self._last_poll = 0.0

    # ------------------------------------------------------------------ state

    @property
    def pending(self) -> bool:
        """Whether the online snapshot still has rows to hand out."""
        return self.current is not None and not self.current.finished

    @property
    def waiting(self) -> bool:
        """Whether a chunk waits for its watermark in the stream."""
        return self.current is not None and self.current.chunk is not None

    def changed_state(self) -> Mapping[str, Any] | None:
        """The snapshot's state, if it changed since it was last handed out (see
        :meth:`OnlineSnapshot.changed_state`)."""
        return self.current.changed_state() if self.current is not None else None

    # ------------------------------------------------------------------ starting

    def _snapshot(self) -> OnlineSnapshot:
        if self.current is None:
            o = self.options
            conn = connect(self.dsn, o.connect_timeout, replication=False)
            try:
                self.current = OnlineSnapshot(
                    conn, [], chunk_rows=o.snapshot_chunk_rows, state=o.snapshot_state,
                    decoder_options={"binary": o.binary, **o.decoder_options},
                    exports=self._new_exports())
            except BaseException:
                close_quietly(conn)
                raise
        return self.current

    def _new_exports(self) -> Exports | None:
        if not self.export_chunks:
            return None
        o = self.options
        self._exports = Exports(lambda: connect(self.dsn, o.connect_timeout, replication=False),
                                release_when_read=self.end_exports_when_read)
        return self._exports

    def start(self) -> None:
        """Plans the online snapshot of every published table, or of ``snapshot_tables``,
        resuming a stored state."""
        o = self.options
        if o.snapshot_tables is not None and o.create_publication is not None:
            with self._snapshot().conn.cursor() as cur:  # the publication the stream created
                published_tables(cur, o.publications, o.snapshot_tables)
        self._sync_publications()

    def resnapshot(self, table: str) -> None:
        """Reads ``table`` online from its first key (see ``LiveStream.resnapshot``)."""
        if not (self.options.online_snapshot or self.options.messages):
            raise ReplicationError("resnapshot needs the stream started with online_snapshot=True or "
                                   "messages=True: its watermarks are logical decoding messages")
        online = self._snapshot()
        with online.conn.cursor() as cur:
            online.read_again(cur, self.options.publications, table)

    # ------------------------------------------------------------------ reading

    def read_next(self, read_chunk: bool = True) -> None:
        """Looks for tables added to the publication (every :data:`PUBLICATION_POLL_S`, with
        ``online_snapshot``) and, with ``read_chunk``, reads the next chunk unless one waits
        for its watermark."""
        online = self.current
        if online is None:
            return
        if self.options.online_snapshot and time.monotonic() - self._last_poll >= PUBLICATION_POLL_S:
            self._sync_publications()
        if read_chunk and online.chunk is None and not online.finished:
            # The next chunk: it comes out where its watermark passes in the stream.
            try:
                online.read(export=self.may_export())
            except UnorderedKey as e:
                self._fall_back(e.table, e.why)

    def may_export(self) -> bool:
        """Whether the next chunk may be exported (read elsewhere, after its watermark passed
        in the stream). An exported chunk's snapshot is held until its rows are read, so it
        holds the server's xmin horizon for as long as its readers take to come:

        - taken while the stream is far behind (a consumer restarted after a while, a burst
          of writes, a consumer that does not keep up), while the stream reads its way to the
          watermark. So a chunk is exported only while the slot's walsender is at most
          :data:`CATCH_UP_BYTES` behind the server's flushed WAL (``pg_stat_replication.sent_lsn``);
        - taken before the readers run, while they start (a Spark query's first tasks start
          the executors' Python workers: seconds, tens of seconds on a busy cluster). So a
          chunk is exported only once the consumer committed a batch of this stream
          (:meth:`release_exported`).

        Else its rows are read on the stream's side at once, its transaction ended, and they
        wait for the watermark in memory. (Without ``export_chunks`` every chunk is read so.)"""
        if not self.export_chunks or self.current is None or not self._readers_running:
            return False
        with self.current.conn.cursor() as cur:
            cur.execute("SELECT (pg_current_wal_flush_lsn() - r.sent_lsn)::bigint FROM pg_replication_slots s "
                        "JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = %s",
                        (self.options.slot,))
            row = cur.fetchone()
        return row is None or row[0] is None or int(row[0]) <= CATCH_UP_BYTES

    def _sync_publications(self) -> None:
        """Reads every published table the online snapshot does not know yet (a table added
        to the publication: from its first key; at the start, from the stored state), and
        forgets those no longer published. A table it cannot chunk in key order is said in
        one line and taken whole (:meth:`_fall_back`)."""
        online = self._snapshot()
        self._last_poll = time.monotonic()
        with online.conn.cursor() as cur:
            fallback = online.sync(cur, self.options.publications, self.options.snapshot_tables)
        for name, why in fallback.items():
            self._fall_back(name, why)

    def _fall_back(self, table: str, why: str) -> None:
        """``table`` is taken by an exported snapshot, not online (said in one line)."""
        assert self.current is not None
        warnings.warn(f"pgoutput live stream: {table} is taken by an exported snapshot, not online: {why}",
                      RuntimeWarning, stacklevel=6)
        self.current.give_up(table)
        self._take_whole(table)

    def _signalled(self, table: str) -> None:
        """A resnapshot message asked to read ``table`` again (see RESNAPSHOT_PREFIX): a
        wrong one is said in one line, the stream goes on."""
        try:
            self.resnapshot(table)
        except Exception as e:  # noqa: BLE001  (a signal does not stop the stream)
            warnings.warn(f"pgoutput live stream: cannot read {table!r} again as a message asked: "
                          f"{one_line(str(e))}", RuntimeWarning, stacklevel=2)

    # ------------------------------------------------------------------ the stream's flushes

    def watermark_arrived(self, batch: Any) -> bool:
        """Whether the messages just read (a receiver's batch) reach the waiting chunk's
        watermark (by the positions of their frames)."""
        online = self.current
        if online is None or online.chunk is None:
            return False
        lsns = pa.record_batch(batch).column(0)
        return bool(len(lsns)) and int(pc.max(lsns).as_py()) >= online.chunk.lsn

    def cut_flush(self, batches: list[Item], safe: int) -> list[HandOut] | None:
        """A decoder flush (``batches``, complete up to ``safe``) while the online snapshot
        runs, cut as :meth:`OnlineSnapshot.cut_flush` cuts it: the groups to hand out, the
        chunk's rows among them; None when the flush holds nothing of the chunk (the
        resnapshot messages and watermarks are taken out of ``batches`` either way)."""
        online = self.current
        if online is None:
            return None
        batches[:], cut, signals = online.take_messages(batches, keep=self.options.messages)
        for table in signals:
            self._signalled(table)
        flush = online.cut_flush(batches, cut)
        if flush is None:
            return None
        name = flush.chunk.table.table
        rows: list[Item] = [("table", name, None, self.schemas.unify(name, b))
                            for b in flush.chunk.batches or [flush.chunk.empty]]
        exported = flush.chunk.exported
        if exported is not None:  # its rows are read elsewhere, as rows of the table's schema now
            exported = dataclasses.replace(exported, schema=rows[-1][3].schema)
        return [HandOut(flush.pre, flush.cut, state=flush.pre_state),
                HandOut(rows, flush.cut + 1, snapshot=True, state=flush.state, read_elsewhere=exported),
                HandOut(flush.post, safe, state=flush.post_state)]

    # ------------------------------------------------------------------ exported chunks

    def release_exported(self, upto: int) -> None:
        """The consumer committed what was handed out below ``upto``: the exported chunks among
        it were read, their snapshots end, and the next chunks may be exported
        (:meth:`may_export`)."""
        self._readers_running = True
        if self._exports is not None:
            self._exports.end(upto)

    def release_read(self) -> None:
        """The exported chunks whose every part's reader said it read its rows: their
        snapshots end (``export_chunks`` with ``end_exports_when_read``)."""
        if self._exports is not None:
            self._exports.release_read()

    def close(self) -> None:
        """Closes its connections (an exported chunk's transaction ends with its own)."""
        if self.current is not None:
            self.current.close()
