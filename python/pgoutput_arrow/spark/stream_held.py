"""The Spark streaming source's driver side of the replication stream: the stream read by a
thread (:class:`StreamPump`), what it holds until Spark commits it (:class:`Held`), and how a
micro-batch's rows travel to the executors (:func:`split`, :class:`RangeChanges`).

The driver reads the slot through the package's one replication session
(:class:`~pgoutput_arrow.live.LiveStream`): the server decodes each change once, and a poll
costs what arrived since the last one, whatever the backlog. The decoded groups are held here
in the order they came. A micro-batch ``[start, end)`` is every held row of a transaction whose
commit LSN lies in it; its rows go to the executors inside the partitions, as Arrow IPC
streams (zstd) of at most :data:`PART_BYTES` of rows each (no shared filesystem needed, nothing to replay:
a batch planned again after a restart is read again from the slot, which Spark's commit alone
moves).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from ..decoding import Output
from ..live import LiveStream
from ._common import ipc_stream, ranked_seq, with_seq

__all__ = ["Held", "StreamPump", "RangeChanges", "split", "from_ipc", "PART_BYTES"]

#: A partition of a micro-batch carries at most about this many bytes of decoded rows (a
#: task's size stays far below ``spark.rpc.message.maxSize``, and the executors share the
#: work of casting them).
PART_BYTES = 32 << 20

#: The online snapshot's chunks the driver holds at most before Spark commits them. A chunk
#: held is its keys' bounds and its exported snapshot, read when ``latestOffset`` asks for one
#: (:meth:`StreamPump.want_chunk`), its rows read by the executors of the micro-batch it is
#: planned in, one chunk per micro-batch (:meth:`Held.one_chunk`). Spark commits batch N to
#: the source only after it planned batch N + 1: the chunk of batch N + 1 is the second one
#: held. The chunk's snapshot (and the server's xmin horizon) is held from the plan of its
#: micro-batch until its parts were read (``holdChunkSnapshot``: to its commit); a kill costs
#: the rows of the one chunk in flight (the offsets claim a batch's chunks one batch late: a
#: chunk not committed is read again after a kill).
MAX_HELD_CHUNKS = 2

#: The columns a row of another table keeps when the query reads one table: they count for
#: read limits and rank ``_seq``, the rank within the transaction across every table.
_RANKING = ["_commit_lsn", "_seq"]


@dataclasses.dataclass
class RangeChanges:
    """The decoded changes of one micro-batch (or a part of one): ``tables`` (only rows of
    transactions that commit in the batch, ``_seq`` their rank within the transaction), and
    the TRUNCATEs (same rule; an empty table when there are none)."""

    tables: dict[str, pa.Table]
    truncates: pa.Table
    #: The online snapshot's chunks in the batch whose rows the executors read
    #: (:class:`~pgoutput_arrow.live.online_export.ExportedChunk`).
    exported: list[Any] = dataclasses.field(default_factory=list)


def _commits(batch: pa.RecordBatch) -> np.ndarray:
    return np.asarray(batch.column("_commit_lsn").to_numpy(zero_copy_only=False), dtype=np.int64)


class Held:
    """The stream's decoded batches that Spark has not committed, in the order they came
    (``""``: the TRUNCATEs). Each batch's rows are in commit order. With ``table`` (a query
    of one table), the other tables' rows keep only ``_commit_lsn`` and ``_seq``."""

    def __init__(self, table: str | None) -> None:
        self.table = table
        self.items: list[tuple[str, pa.RecordBatch]] = []
        #: The online snapshot's progress after each group that carried it, with the last
        #: commit LSN of the group's rows: a batch that holds all of them holds that progress.
        self.states: list[tuple[int, Mapping[str, Any]]] = []
        self._last = -1  # the highest commit LSN of the rows added
        #: The watermark (commit LSN) of each online snapshot chunk held.
        self.chunks: list[int] = []
        #: The online snapshot's chunks held whose rows the executors read (by position).
        self.exported: list[Any] = []
        #: The bytes of the batches in ``items``, kept as they come and go: the stream's
        #: thread asks before each read, and summing thousands of held batches each time
        #: cost the driver more than decoding them.
        self.nbytes = 0

    def add(self, batches: Iterable[Output]) -> None:
        """A group of the live stream: its tables' rows and TRUNCATEs; other kinds are not
        part of a Spark stream."""
        state = None
        for item in batches:
            if item.snapshot_state is not None:
                state = item.snapshot_state
            if item.snapshot and item.batch.num_rows:
                self._chunk_at(int(_commits(item.batch).max()))
            if item.read_elsewhere is not None:
                self.exported.append(item.read_elsewhere)
                self._chunk_at(item.read_elsewhere.lsn)
                self._last = max(self._last, item.read_elsewhere.lsn)
            batch = item.batch
            if item.kind == "table" and item.table:
                name = item.table
                if self.table is not None and name != self.table:
                    batch = batch.select(_RANKING)
            elif item.kind == "truncates":
                name = ""
            else:
                continue
            if batch.num_rows:
                self.items.append((name, batch))
                self.nbytes += batch.nbytes
                self._last = max(self._last, int(_commits(batch).max()))
        if state is not None:
            # It rides on the group's last batch: it holds once every row so far is stored.
            self.states.append((self._last, state))

    def _chunk_at(self, lsn: int) -> None:
        """A chunk's rows (or its exported rows) came at its watermark ``lsn``: once, however
        many batches they came in (a chunk read on the driver with keys read again: two)."""
        if lsn not in self.chunks:
            self.chunks.append(lsn)

    def chunk_from(self, start: int) -> bool:
        """Whether a chunk at or after ``start`` is held."""
        return any(w >= start for w in self.chunks)

    def state_at(self, end: int) -> Mapping[str, Any] | None:
        """The online snapshot's progress after the last group whose rows all commit before
        ``end`` (None when no such group carried one)."""
        found = None
        for last, state in self.states:
            if last < end:
                found = state
        return found

    def commits(self, start: int, end: int | None = None) -> np.ndarray:
        """The commit LSN of every change held in ``[start, end)``, sorted."""
        parts = []
        for _, batch in self.items:
            c = _commits(batch)
            lo = int(np.searchsorted(c, start, side="left"))
            hi = len(c) if end is None else int(np.searchsorted(c, end, side="left"))
            parts.append(c[lo:hi])
        for chunk in self.exported:  # its rows (about) at its position
            if start <= chunk.lsn and (end is None or chunk.lsn < end):
                parts.append(np.full(max(1, chunk.rows), chunk.lsn, np.int64))
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)

    def any_from(self, start: int) -> bool:
        """Whether a change committing at or after ``start`` is held (each batch's rows are in
        commit order: its last row tells)."""
        return (any(_commits(batch)[-1] >= start for _, batch in self.items)
                or any(chunk.lsn >= start for chunk in self.exported))

    def cut(self, start: int, end: int, max_rows: int) -> int:
        """Where a micro-batch from ``start`` ends under a limit of ``max_rows`` changes: at
        ``end``, or at the commit LSN of the first transaction that does not fit (at least
        one transaction, however large: a batch holds whole transactions)."""
        commits = self.commits(start, end)
        if len(commits) <= max_rows:
            return end
        txns, counts = np.unique(commits, return_counts=True)
        fit = max(1, int(np.searchsorted(np.cumsum(counts), max_rows, side="right")))
        return end if fit >= len(txns) else int(txns[fit])

    def one_chunk(self, start: int, end: int) -> int:
        """Where a micro-batch from ``start`` to at most ``end`` ends so that it holds at
        most one online snapshot chunk: before the second one."""
        inside = sorted(w for w in self.chunks if start <= w < end)
        return inside[1] if len(inside) > 1 else end

    def prune(self, upto: int) -> None:
        """Spark committed every transaction committing before ``upto``: drop their rows."""
        kept = []
        for name, batch in self.items:
            at = int(np.searchsorted(_commits(batch), upto, side="left"))
            if at < batch.num_rows:
                kept.append((name, batch if at == 0 else batch.slice(at)))
        self.items = kept
        self.nbytes = sum(b.nbytes for _, b in kept)
        self.states = [(last, state) for last, state in self.states if last >= upto]
        self.chunks = [w for w in self.chunks if w >= upto]
        self.exported = [chunk for chunk in self.exported if chunk.lsn >= upto]

    def take(self, start: int, end: int) -> RangeChanges:
        """The rows of the transactions committing in ``[start, end)``, ``_seq`` ranked within
        each transaction across every table (as the batch decode ranks it); with ``table``,
        only that table's rows and the TRUNCATEs."""
        import pgoutput_arrow

        by_name: dict[str, list[pa.RecordBatch]] = {}
        for name, batch in self.items:
            c = _commits(batch)
            lo, hi = (int(np.searchsorted(c, x, side="left")) for x in (start, end))
            if hi > lo:
                by_name.setdefault(name, []).append(batch.slice(lo, hi - lo))

        def whole(batches: list[pa.RecordBatch]) -> pa.Table:
            schemas = {b.schema for b in batches}
            if len(schemas) == 1:
                return pa.Table.from_batches(batches)
            # A table's schema grew while the stream ran (a column added): every batch under
            # the unified one, as the live stream unifies them.
            unified = pgoutput_arrow.unify_schemas([b.schema for b in batches])
            return pa.concat_tables([pgoutput_arrow.conform(b, unified) for b in batches])

        tables = {name: whole(bs) for name, bs in by_name.items() if name}
        truncates = whole(by_name[""]) if "" in by_name else pa.table({})
        seqs = ranked_seq(tables, truncates)
        if self.table is not None:
            tables = {n: t for n, t in tables.items() if n == self.table}
        tables = {n: with_seq(t, seqs[n]) for n, t in tables.items()}
        if truncates.num_rows:
            truncates = with_seq(truncates, seqs[""])
        exported = [c for c in self.exported if start <= c.lsn < end
                    and (self.table is None or c.table == self.table)]
        return RangeChanges(tables, truncates, exported)


def _ipc(table: pa.Table) -> bytes:
    data: bytes = ipc_stream(table).to_pybytes()
    return data


def from_ipc(data: bytes) -> pa.Table:
    """A table that :func:`split` wrote."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def split(changes: RangeChanges, part_bytes: int | None = None) -> list[tuple[dict[str, bytes], bytes | None]]:
    """``changes`` cut into parts of about ``part_bytes`` (default :data:`PART_BYTES`) of rows
    each: per part, each table's rows (a slice of them) and, in the first part, the
    TRUNCATEs, as Arrow IPC streams."""
    part_bytes = part_bytes or PART_BYTES
    parts: list[tuple[dict[str, bytes], bytes | None]] = []
    current: dict[str, bytes] = {}
    size = 0
    for name, table in sorted(changes.tables.items()):
        rows = max(1, part_bytes // max(1, table.nbytes // max(1, table.num_rows)))
        for lo in range(0, table.num_rows, rows):
            piece = table.slice(lo, rows)
            if current and (name in current or size + piece.nbytes > part_bytes):
                parts.append((current, None))
                current, size = {}, 0
            current[name] = _ipc(piece)
            size += piece.nbytes
    if current:
        parts.append((current, None))
    if changes.truncates.num_rows:
        truncates = _ipc(changes.truncates)
        parts = [(parts[0][0], truncates), *parts[1:]] if parts else [({}, truncates)]
    return parts


class StreamPump:
    """The driver's replication stream, read by a thread of its own into a :class:`Held`
    between Spark's calls: the server is answered at once (keepalives, a shutdown, which waits
    for the client), and the next batches are decoded while the executors work on the last.
    Every call on the stream happens on that thread; Spark's side asks through :meth:`ack`
    and reads ``held`` and ``upto`` under ``lock``. The thread stops reading while ``held``
    holds ``max_bytes`` or more (the rest waits in the slot)."""

    def __init__(self, live: LiveStream, start: int, held: Held, max_bytes: int) -> None:
        self.live = live
        self.start = start
        self.held = held
        self.max_bytes = max_bytes
        #: Every transaction committing before this (from ``start`` on) is in ``held``, or
        #: was committed by Spark.
        self.upto = start
        #: Whether the stream's snapshot (the online one) still has rows to hand out.
        self.snapshot_pending = live.snapshot_pending
        self.lock = threading.Lock()
        #: Whether the online snapshot reads its next chunk (``latestOffset`` asks for one).
        self.chunk_wanted = False
        self.error: BaseException | None = None
        self._ack: int | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgoutput-spark-stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        live = self.live
        try:
            while not self._stopping.is_set():
                self._apply_ack()
                with self.lock:
                    full = self.held.nbytes >= self.max_bytes
                    # The online snapshot reads ahead of Spark's commits by at most this many
                    # chunks: a kill loses them with the batch in flight.
                    live.read_chunks = self.chunk_wanted and len(self.held.chunks) < MAX_HELD_CHUNKS
                if full:
                    self._stopping.wait(0.05)
                    continue
                group = live.poll(wait=False)
                # The chunks whose parts the executors read: their snapshots end now.
                live.online.release_read()
                with self.lock:
                    self.snapshot_pending = live.snapshot_pending
                    if group is not None:
                        chunks = len(self.held.chunks)
                        self.held.add(group[0])
                        if len(self.held.chunks) > chunks:
                            self.chunk_wanted = False  # the one asked for
                        self.upto = max(self.upto, group[1])
                    else:
                        # Positions passed without changes for Spark (other tables, an idle
                        # server): Spark may make them an empty batch.
                        self.upto = max(self.upto, live.hand_out_idle() or 0)
        except BaseException as e:  # noqa: BLE001 - raised in Spark's next call
            self.error = e

    def _apply_ack(self) -> None:
        with self.lock:
            lsn, self._ack = self._ack, None
        if lsn is not None:
            self.live.ack(max(lsn, self.live.acked_lsn))
            self.live.confirm()
            # Spark read the chunks of the batches it committed: their snapshots end.
            self.live.online.release_exported(lsn)

    def want_chunk(self, start: int) -> bool:
        """Ask the online snapshot for its next chunk unless one committing at or after
        ``start`` is held already (under the lock); True when one was asked for."""
        if not self.snapshot_pending or self.held.chunk_from(start):
            return False
        self.chunk_wanted = True
        return True

    def check(self) -> None:
        """Raise what stopped the thread (the stream failed), if anything did."""
        if self.error is not None:
            raise self.error

    def ack(self, lsn: int) -> None:
        """Spark committed every transaction committing before ``lsn``: the stream confirms it
        to the server (soon, from the thread), and ``held`` lets their rows go."""
        with self.lock:
            self.held.prune(lsn)
            self._ack = max(lsn, self._ack or 0)

    def close(self) -> None:
        """Stop the thread, confirm the last acknowledgement and close the stream."""
        self._stopping.set()
        self._thread.join()
        try:
            if self.error is None:
                self._apply_ack()
        finally:
            self.live.close()
