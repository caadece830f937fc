"""``spark.readStream.format("pgoutput")``: a live logical replication slot as a Spark streaming
source whose offsets are LSNs, so that Spark's checkpoints give exactly-once output.

::

    stream = (spark.readStream.format("pgoutput")
              .option("dsn", "host=db user=repl dbname=shop")
              .option("slot", "shop_spark").option("publication", "shop")
              .option("table", "public.orders")
              .load())

How a micro-batch is cut and read (docs/spark.md, "Streaming from a replication slot"):

* An offset ``{"lsn": "X/Y"}`` means: every transaction whose commit record starts before
  ``X/Y`` has been delivered. A micro-batch ``[start, end)`` holds exactly the transactions whose
  commit LSN lies in it. This is the rule the server itself applies to a slot: decoding skips
  the transactions whose commit record starts before the slot's ``confirmed_flush_lsn``.
* The driver streams the slot through the package's one replication session
  (:class:`~pgoutput_arrow.live.LiveStream`, as ``stream()`` and ``pgoutput-dump`` do), started
  at the query's offset and read by a thread of its own between Spark's calls
  (:class:`~.stream_held.StreamPump`): the server decodes each change once, the next batches
  are decoded while the executors work on the last, and a poll costs what arrived since the
  last one, however large the backlog. ``latestOffset`` cuts a batch from what the stream
  holds now (read limits cut at whole transactions); ``partitions`` hands its rows to the
  executors inside its partitions, which cast them for Spark. A batch planned again after a
  restart (a query re-runs its last uncommitted batch) is read again from the slot, which has
  not moved past its start.
* ``commit(end)`` — called by Spark once the micro-batch is in its commit log — is the only
  place the slot moves: the session acknowledges ``end`` and confirms it to the server, which
  may then discard the WAL before it. Positions the stream passes without changes for the
  query (other tables, an idle server) are handed to Spark as an empty micro-batch once
  ``idleAdvanceBytes`` of WAL went by, so that they too are confirmed only by Spark.

Slots created with ``two_phase`` are refused: their prepared transactions would be decoded at
PREPARE, and a slot advanced past a PREPARE does not send its changes again.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterator, Mapping, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .._internal import lsn_to_int as parse_lsn
from .._internal import lsn_to_str
from .._catalog import relation_definition
from .._pg import close_quietly
from ..exceptions import ReplicationError, SlotInUse, SlotNotFound
from ..live import LiveStream
from ..live.slot_guard import drop_unused_slot
from ..live.snapshot import SnapshotChunk, SnapshotGone
from ._common import spark_schema
from .generic import UDTF_SCHEMA
from .snapshot import SparkSnapshot, read_chunk_batches, read_exported_part
from .snapshot import snapshot as take_snapshot
from .stream_held import Held, RangeChanges, StreamPump, from_ipc, split
from .stream_rows import generic_batches, table_batches
from .stream_source import StreamSource, log_to_stderr, retry_in_use
from .types import SPARK_DECODER_OPTIONS, to_spark_arrow_schema

__all__ = ["PgoutputStreamReader", "StreamSource", "ChangesRange", "SnapshotRange", "ChunkRange", "stream_schema"]

#: The key of an offset that carries the online snapshot's progress (``onlineSnapshot``).
ONLINE = "online"

#: The stream asks for text tuple data (``binary`` off): say so, so that enum and composite
#: columns are typed the same in the schema (built before any data) and in every batch.
#: Arrays nest one level (the schema is built before any data): a micro-batch must not learn
#: another depth from its own first array; arrays of another depth are kept in _special.
DECODER_OPTIONS: dict[str, Any] = {"views": False, "binary": False, "array_ndims": 1, **SPARK_DECODER_OPTIONS}

#: The driver holds at most about this many bytes of decoded rows that Spark has not
#: committed: its stream stops reading there (the rest waits in the slot).
MAX_HELD_BYTES = 256 << 20

#: A batch waits at most this long for the stream to reach its end without the stream moving
#: at all.
REPLAY_STALL_S = 300.0

#: ``latestOffset`` waits at most this long for the online snapshot's next chunk (its keys'
#: bounds read and its watermark reached in the stream); a chunk later comes in a later batch.
CHUNK_WAIT_S = 10.0

_T = TypeVar("_T")


# --------------------------------------------------------------------------- schema

def _relation_schema(cur: Any, table: str, publications: tuple[str, ...]) -> pa.Schema:
    """The schema the decoder gives ``table`` as pgoutput would describe it now (its Relation
    message and the Type messages of its non-built-in column types), from the catalog."""
    try:
        return relation_definition(cur, table, publications).schema(**_TYPE_OPTIONS)
    except ValueError as e:
        raise ValueError(f"pgoutput stream: {e}") from None


#: The decoder options that type columns (DECODER_OPTIONS without the others).
_TYPE_OPTIONS: dict[str, Any] = {k: DECODER_OPTIONS[k] for k in ("views", "binary", "array_ndims", "time")}


def stream_schema(options: Mapping[str, str], time_type: bool = False) -> Any:
    """The stream's Spark schema: with ``table``, that table's columns as the decoder types
    them (and as ``spark.read.format("pgoutput")`` gives them), built from its definition in
    the catalog now; without, the generic change schema of ``pgoutput_changes``.
    ``time_type``: ``time`` columns are TIME, else text (the executors cast to this schema)."""
    source = StreamSource.from_options(options)
    conn = source.connect()
    try:
        cur = conn.cursor()
        retry_in_use(source.check, cur)
        if source.table is None:
            return UDTF_SCHEMA
        schema = _relation_schema(cur, source.table, source.publications)
    finally:
        conn.close()
    return spark_schema(to_spark_arrow_schema(schema, time_type))



# --------------------------------------------------------------------------- the reader

class ChangesRange(InputPartition):
    """A part of one micro-batch: the decoded rows of transactions whose commit LSN is in
    ``[start, end)``, as Arrow IPC streams: ``tables`` by name, and the TRUNCATEs (or None)."""

    def __init__(self, start: int, end: int, part: int, tables: dict[str, bytes], truncates: bytes | None) -> None:
        super().__init__((start, end, part))
        self.start = start
        self.end = end
        self.tables = tables
        self.truncates = truncates

    def changes(self) -> RangeChanges:
        return RangeChanges({name: from_ipc(data) for name, data in self.tables.items()},
                            from_ipc(self.truncates) if self.truncates is not None else pa.table({}))

class SnapshotRange(InputPartition):
    """A chunk of the snapshot's micro-batch, read inside the exported snapshot."""

    def __init__(self, snapshot_name: str, chunk: SnapshotChunk) -> None:
        super().__init__(chunk.index)
        self.snapshot_name = snapshot_name
        self.chunk = chunk


class ChunkRange(InputPartition):
    """Part ``part`` of an online snapshot's chunk, read by an executor under the chunk's
    exported snapshot."""

    def __init__(self, chunk: Any, part: int) -> None:
        super().__init__((chunk.lsn, part))
        self.chunk, self.part = chunk, part


def _dropped_if_unused(cur: Any, slot: str, lsn: int) -> bool:
    """Whether ``slot`` was dropped: only if nobody streams it and it never moved past ``lsn``
    (where it was created), a slot of an unfinished snapshot that no checkpoint can use."""
    try:
        drop_unused_slot(cur, slot, created_at=lsn)
    except (SlotNotFound, SlotInUse):
        return False
    return True


def _flushed_wal(cur: Any) -> int:
    """How far the server's WAL is flushed: what the decoding functions can read."""
    cur.execute("SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::int8")
    return int(cur.fetchone()[0])


def _offset(lsn: int) -> dict[str, str]:
    return {"lsn": lsn_to_str(lsn)}


def _offset_lsn(offset: Mapping[str, Any]) -> int:
    try:
        return parse_lsn(offset["lsn"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"pgoutput stream: not an offset of this source: {offset!r} "
                         "(expected {'lsn': 'X/Y'}; is the checkpoint from another source?)") from None


class PgoutputStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The micro-batch reader behind ``spark.readStream.format("pgoutput")``; see the module
    docstring. The driver-side methods keep the replication stream, what it holds for Spark, and
    one SQL connection (checks, and moving a slot no stream holds)."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.source = StreamSource.from_options(options)
        self.schema = schema
        self._conn: Any = None
        self._target: int | None = None  # Trigger.AvailableNow: never past this LSN
        self._next_poll = 0.0
        # The replication stream, read by a thread into what it holds for Spark.
        self._pump: StreamPump | None = None
        self._initial: dict[str, Any] | None = None  # the first initialOffset's answer
        # With onlineSnapshot: the progress each planned batch reaches, by its end.
        self._progress: dict[int, Any] = {}
        # With the option snapshot: the snapshot this query exported when it created the
        # slot, until Spark commits the micro-batch that reads it.
        self._snapshot: SparkSnapshot | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_pump"] = None  # the executors get their rows in the partition
        state["_snapshot"] = None
        return state

    def _on_server(self, fn: Callable[[Any], _T]) -> _T:
        """``fn(cursor)`` on the driver's connection; once more on a new connection if the
        old one was lost (a server restart between two micro-batches)."""
        import psycopg2

        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = self.source.connect()
            try:
                return fn(self._conn.cursor())
            except (psycopg2.OperationalError, psycopg2.InterfaceError):
                if not self._conn.closed or attempt == 2:
                    raise
                self._conn = None
        raise AssertionError("unreachable")

    def initialOffset(self) -> dict[str, str]:
        """Where the slot is now: a new query starts with what the slot has not confirmed.
        With ``snapshot``, the query creates the slot exporting its snapshot: the first
        micro-batch, ``{"lsn": C, "snapshot": "pending"}`` to ``{"lsn": C}``, holds the rows
        of the snapshot (C: the slot's consistent point), and the changes follow from C."""
        if self._snapshot is not None:  # Spark asks more than once
            return {**_offset(self._snapshot.lsn), "snapshot": "pending"}
        if self._initial is not None:  # and meanwhile this reader may stream the slot
            return self._initial
        # The previous query's walsender may still be releasing the slot.
        confirmed = retry_in_use(self._on_server, self.source.check)
        source = self.source
        if confirmed is not None and source.snapshot:
            raise ReplicationError(
                f'pgoutput stream: option snapshot: replication slot "{source.slot}" exists '
                "already, and a snapshot is exported only by the slot's creation: drop the "
                "slot (or name a new one) for a snapshot, or leave snapshot off to stream "
                "from the slot's position")
        if source.online_snapshot:
            if confirmed is None:
                confirmed = self._on_server(self._create_slot)
            # The online snapshot's progress rides on the offsets: none yet.
            self._initial = {**_offset(confirmed), ONLINE: None}
            return self._initial
        if confirmed is not None:
            self._initial = _offset(confirmed)
            return self._initial
        self._snapshot = take_snapshot(
            None, source.dsn, slot=source.slot, publication=list(source.publications),
            tables=[source.table] if source.table else None, connect_timeout=source.connect_timeout)
        return {**_offset(self._snapshot.lsn), "snapshot": "pending"}

    def _create_slot(self, cur: Any) -> int:
        cur.execute("SELECT (lsn - '0/0'::pg_lsn)::int8 FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                    (self.source.slot,))
        return int(cur.fetchone()[0])

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_changes is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.source.max_changes)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._on_server(_flushed_wal)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = _offset_lsn(start)
        if "snapshot" in start:
            return _offset(begin)  # the whole snapshot, one micro-batch
        wait = self._next_poll - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        pump = self._stream_from(begin, start.get(ONLINE))
        with pump.lock:
            asked = pump.want_chunk(begin)
        if asked:
            # The online snapshot's next chunk, read now for this batch (its snapshot is held
            # from here to the batch's commit): its keys' bounds, and its watermark reached.
            self._wait_for(pump, lambda: not pump.snapshot_pending or pump.held.chunk_from(begin),
                           give_up_s=CHUNK_WAIT_S)
        target = self._target
        if target is not None:
            # Trigger.AvailableNow ends at the first poll that finds nothing: until the stream
            # reached what the server had written when the query started, and the online
            # snapshot is read to its end, wait for something. (The batch is what the stream
            # holds now: the executors work on it while the stream reads on.)
            self._wait_for(pump, lambda: (pump.upto >= target and not self._snapshot_ahead(pump, target))
                           or pump.held.any_from(begin))
        with pump.lock:
            end = pump.upto
            if target is not None and not self._snapshot_ahead(pump, target):
                end = max(begin, min(end, target))
            if isinstance(limit, ReadMaxRows):
                end = pump.held.cut(begin, end, limit.max_rows)
            end = pump.held.one_chunk(begin, end)
            if (not len(pump.held.commits(begin, end)) and target is None
                    and end - begin < self.source.idle_advance_bytes):
                end = begin  # nothing for the query, and not yet worth an empty batch
            reached = pump.held.state_at(end) if end > begin else None
        if end <= begin:
            self._next_poll = time.monotonic() + self.source.poll_interval
            return start
        if ONLINE not in start:
            return _offset(end)
        # The online snapshot's progress that batches before this one delivered: a batch run
        # again after a restart cannot give the same chunk rows (the table moved on), so its
        # offset claims none of its own chunks; they are read again after it. The progress
        # this batch reaches goes in the next offset, once Spark logged this batch as done.
        before = self._progress.pop(begin, start[ONLINE])
        self._progress[end] = reached if reached is not None else before
        return {**_offset(end), ONLINE: before}

    @staticmethod
    def _snapshot_ahead(pump: StreamPump, target: int) -> bool:
        """Whether the online snapshot still has rows to give at or past ``target``: chunks
        not read yet, or read and held there (under the pump's lock)."""
        return pump.snapshot_pending or any(last >= target for last, _ in pump.held.states)

    def _stream_from(self, begin: int, state: Mapping[str, Any] | None = None) -> StreamPump:
        """The driver's replication stream, holding every transaction committed from ``begin``
        on that it has read: the running one, or one started at ``begin`` (after checking that
        nobody consumed the slot past it), with the online snapshot at ``state``."""
        pump = self._pump
        if pump is not None:
            pump.check()
            if pump.start <= begin <= pump.upto:
                return pump
        self._close_stream()
        self._on_server(lambda cur: self.source.check_not_consumed(cur, begin))
        source = self.source
        if source.verbose:
            log_to_stderr()

        def started() -> LiveStream:
            online = {"online_snapshot": True, "snapshot_state": state, "snapshot_chunk_rows": source.chunk_rows,
                      "snapshot_tables": [source.table] if source.table else None} if source.online_snapshot else {}
            live = LiveStream(source.dsn, slot=source.slot, publication=list(source.publications),
                              start_lsn=begin, connect_timeout=source.connect_timeout, **online,
                              **DECODER_OPTIONS)
            live.follow_idle = False  # the slot moves where Spark commits, nowhere else
            # The executors read the online snapshot's chunks (unless chunksOnDriver).
            live.online.export_chunks = not source.chunks_on_driver
            live.online.end_exports_when_read = not source.hold_chunk_snapshot
            live.open()
            return live

        self._pump = StreamPump(retry_in_use(started), begin, Held(source.table), MAX_HELD_BYTES)
        return self._pump

    def _close_stream(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.close()

    def _wait_for(self, pump: StreamPump, ready: Callable[[], bool], give_up_s: float | None = None) -> None:
        """Wait until ``ready()`` (read under the pump's lock) while the stream moves; a
        stream that stops moving for REPLAY_STALL_S is an error. With ``give_up_s``, at most
        that long (then without it)."""
        seen, moved = -1, time.monotonic()
        deadline = None if give_up_s is None else moved + give_up_s
        while True:
            pump.check()
            with pump.lock:
                if ready() or (deadline is not None and time.monotonic() > deadline):
                    return
                upto = pump.upto
            if upto != seen:
                seen, moved = upto, time.monotonic()
            elif time.monotonic() - moved > REPLAY_STALL_S:
                raise ReplicationError(
                    f'pgoutput stream: replication slot "{self.source.slot}" did not move for '
                    f"{REPLAY_STALL_S:.0f} s (the stream stands at {lsn_to_str(upto)})")
            time.sleep(0.01)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if "snapshot" in start:
            return self._snapshot_partitions(_offset_lsn(start))
        first, last = _offset_lsn(start), _offset_lsn(end)
        if last <= first:
            return []
        # At once after this reader's own poll; a batch planned before a restart is read
        # again from the slot.
        pump = self._stream_from(first, end.get(ONLINE))
        self._wait_for(pump, lambda: pump.upto >= last)
        with pump.lock:
            changes = pump.held.take(first, last)
        # The online snapshot's chunks: each part of each read by an executor, under the
        # chunk's exported snapshot, open on the driver until every part was read. They come
        # first: Spark starts the batch's tasks in this order, and the snapshot (the server's
        # xmin horizon) is held until the last part is read, not behind the changes' parts.
        parts: list[InputPartition] = [ChunkRange(chunk, i) for chunk in changes.exported
                                       for i in range(len(chunk.parts))]
        parts += [ChangesRange(first, last, i, tables, truncates)
                  for i, (tables, truncates) in enumerate(split(changes))]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        if isinstance(partition, SnapshotRange):
            changes = RangeChanges({partition.chunk.table: pa.Table.from_batches(
                list(read_chunk_batches(self.source.dsn, partition.snapshot_name, partition.chunk,
                                        None, self.source.connect_timeout)))}, pa.table({}))
        elif isinstance(partition, ChangesRange):
            changes = partition.changes()
        elif isinstance(partition, ChunkRange):
            chunk = partition.chunk
            if self.source.verbose:  # counted before the read: a kill may cut it short
                print(f"online snapshot of {chunk.table}: reading part {partition.part + 1}/{len(chunk.parts)} "
                      f"of the chunk at {lsn_to_str(chunk.lsn)} on an executor, at most "
                      f"{chunk.parts[partition.part].rows} rows", file=sys.stderr, flush=True)
            started = time.monotonic()
            changes = RangeChanges({chunk.table: pa.Table.from_batches(
                list(read_exported_part(self.source.dsn, chunk, partition.part, self.source.connect_timeout)),
                chunk.schema)}, pa.table({}))
            if self.source.verbose:
                print(f"online snapshot of {chunk.table}: part {partition.part + 1}/{len(chunk.parts)} of the chunk "
                      f"at {lsn_to_str(chunk.lsn)} read on an executor: {changes.tables[chunk.table].num_rows} rows "
                      f"in {time.monotonic() - started:.2f} s", file=sys.stderr, flush=True)
        else:
            raise TypeError(f"pgoutput stream: not a partition of this source: {partition!r}")
        if self.source.table is None:
            yield from generic_batches(changes, target)
        else:
            yield from table_batches(self.source, changes, target)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has committed every batch up to ``end``: only now does the slot move."""
        lsn = _offset_lsn(end)
        if "snapshot" in end:
            return
        if self._snapshot is not None:
            self._snapshot.close()  # its micro-batch is committed: the rows are not read again
            self._snapshot = None
        pump = self._pump
        if pump is not None and pump.start <= lsn:
            self._wait_for(pump, lambda: pump.upto >= lsn)
            pump.ack(lsn)
            return

        def advance(cur: Any) -> None:
            # No stream open (a query restarted after its last batch was committed, before
            # the slot was told): move the slot here.
            if self.source.confirmed_flush(cur) < lsn:
                retry_in_use(cur.execute, "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                              (self.source.slot, lsn_to_str(lsn)))
                cur.fetchall()

        self._on_server(advance)

    def _snapshot_partitions(self, lsn: int) -> list[InputPartition]:
        """The snapshot's micro-batch: one partition per chunk of the tables it reads."""
        snap = self._snapshot
        if snap is None or snap.lsn != lsn:
            # A restarted query re-runs the uncommitted snapshot batch: its exported snapshot
            # ended with the driver that created the slot, so the same rows cannot be read.
            dropped = self._on_server(lambda cur: _dropped_if_unused(cur, self.source.slot, lsn))
            raise SnapshotGone(
                f"pgoutput stream: the checkpoint's first micro-batch (the snapshot at "
                f"{lsn_to_str(lsn)}) was not committed, and its exported snapshot ended with the "
                "query that took it; nothing of it reached the sink. "
                + (f'Replication slot "{self.source.slot}" (never advanced) was dropped: '
                   if dropped else "")
                + "delete the checkpoint directory and start the query again for a new snapshot")
        return [SnapshotRange(snap.snapshot_name, chunk) for chunk in snap.all_chunks()]

    def stop(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None
        self._close_stream()
        conn, self._conn = self._conn, None
        close_quietly(conn)
