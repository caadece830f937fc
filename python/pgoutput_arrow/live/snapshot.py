"""The initial snapshot: every published table as it was when the slot was created, read in
parallel and handed over to the change stream with no gap and no overlap.

How (the procedure PostgreSQL's own table synchronization uses, spread over connections):

1. The slot is created on the replication connection with ``CREATE_REPLICATION_SLOT s
   LOGICAL pgoutput (SNAPSHOT 'export')`` (``EXPORT_SNAPSHOT`` before 15). Its answer is
   the *consistent point* C and a snapshot name: the snapshot holds exactly the
   transactions that committed before C, and the slot streams exactly those that commit at
   or after C. The snapshot lives while that connection runs no other command, so it is
   kept open and idle until the rows are read (:class:`ExportedSnapshot`).
2. :func:`plan_snapshot` reads, inside the snapshot, what the publications publish
   (``pg_publication_tables``: the tables, or for ``publish_via_partition_root`` the roots;
   on 15+ their column lists ``attnames`` and row filters ``rowfilter``) and cuts each
   table into chunks of block ranges (``ctid >= '(a,0)' AND ctid < '(b,0)'``, a TID range
   scan on 14+); a partitioned root is read leaf by leaf.
3. Each connection of :class:`SnapshotReader` runs ``BEGIN ISOLATION LEVEL REPEATABLE READ;
   SET TRANSACTION SNAPSHOT '...'`` and reads chunks with ``COPY (SELECT <published
   columns> FROM ONLY <relation> WHERE <block range> AND <row filter>) TO STDOUT (FORMAT
   binary)``, decoded in Rust (``_internal.CopyDecoder``, without the GIL, so connections
   read in parallel) into batches of the table's own schema with ``_op = 'snapshot'``,
   ``_lsn = _commit_lsn = C`` and a negative ``_seq``: ordered by ``_commit_lsn, _seq`` they
   come before every change of the stream, whose commits are at or after C.
4. The stream starts at C on the same replication connection.

What is not covered (PostgreSQL's MVCC caveat): a table-rewriting ``ALTER TABLE`` (ALTER
COLUMN TYPE, ADD COLUMN with a volatile default) or ``VACUUM FULL`` / ``CLUSTER`` that
commits during the snapshot, before a chunk of that table is read, makes the table look
empty to the snapshot, and the stream carries no change for it. A ``TRUNCATE`` does the
same but is safe: the stream carries the TRUNCATE, after the snapshot's rows.

:func:`export_snapshot`, :func:`plan_snapshot` and :func:`read_chunk` are the pieces the
Spark batch reader runs (the driver exports and plans, executors read chunks);
:func:`stream` with ``snapshot=True`` and :func:`snapshot_table` use them here.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .. import _internal
from .._catalog import RelationDefinition, published_tables, relation_definition
from .._internal import lsn_to_int
from .._pg import classify_connect_error, close_quietly, one_line, quote_ident
from ..exceptions import ReplicationError
from .connection import connect, copy_out_functions
from .options import DEFAULT_CONNECT_TIMEOUT_S, StreamOptions
from .slot import preflight

__all__ = ["ExportedSnapshot", "SnapshotChunk", "SnapshotPlan", "SnapshotReader", "SnapshotGone",
           "export_snapshot", "plan_snapshot", "open_snapshot_connection", "read_chunk",
           "snapshot_table", "SEQ_BASE", "SEQ_PER_CHUNK", "DEFAULT_CHUNK_BYTES"]

#: ``_seq`` of the first row of chunk ``i`` is ``SEQ_BASE + i * SEQ_PER_CHUNK``: negative,
#: below every change's (a decoder numbers its messages from 0), unique per row.
SEQ_BASE = -(1 << 62)
SEQ_PER_CHUNK = 1 << 36
DEFAULT_CHUNK_BYTES = 64 << 20

#: The decoder options that type columns, which the snapshot's decoder takes too.
_TYPE_OPTIONS = ("special_values", "views", "interval", "uuid", "time", "binary", "array_ndims", "batch_size", "datetime_range")


class SnapshotGone(ReplicationError):
    """The exported snapshot no longer exists (its exporting connection ended): the rows
    it holds cannot be read any more; the snapshot must start over with a new slot."""


@dataclasses.dataclass
class ExportedSnapshot:
    """A slot just created with its snapshot exported. ``lsn`` is the consistent point,
    ``name`` the snapshot's name for ``SET TRANSACTION SNAPSHOT``, ``time_us`` when it was
    taken (microseconds since 1970; the rows' ``_commit_ts``). ``conn`` is the replication
    connection that exports it: the snapshot lives while it stays open and idle."""

    slot: str
    lsn: int
    name: str
    time_us: int
    conn: Any = dataclasses.field(repr=False, default=None)

    def close(self) -> None:
        """Ends the snapshot (and a temporary slot with it)."""
        conn, self.conn = self.conn, None
        close_quietly(conn)


@dataclasses.dataclass(frozen=True)
class SnapshotChunk:
    """One piece of work: the rows of ``source`` (the relation read: a table, or a leaf
    partition of the published root ``table``) in blocks ``[first_block, end_block)``
    (``end_block`` None: to the end), that pass ``row_filter``, as rows of ``relation``."""

    index: int
    table: str
    relation: RelationDefinition
    source: str
    first_block: int
    end_block: int | None
    row_filter: str | None
    lsn: int
    time_us: int

    @property
    def first_seq(self) -> int:
        return SEQ_BASE + self.index * SEQ_PER_CHUNK

    def sql(self, text_columns: Sequence[bool]) -> str:
        """The ``COPY`` that reads this chunk (``text_columns``: the CopyDecoder's)."""
        cols = ", ".join(quote_ident(c[0]) + ("::text" if text else "")
                         for c, text in zip(self.relation.columns, text_columns))
        where = []
        if self.first_block > 0:
            where.append(f"ctid >= '({self.first_block},0)'::tid")
        if self.end_block is not None:
            where.append(f"ctid < '({self.end_block},0)'::tid")
        if self.row_filter:
            where.append(f"({self.row_filter})")
        condition = (" WHERE " + " AND ".join(where)) if where else ""
        return f"COPY (SELECT {cols} FROM ONLY {self.source}{condition}) TO STDOUT (FORMAT binary)"


@dataclasses.dataclass(frozen=True)
class SnapshotPlan:
    """What a snapshot reads: its slot, consistent point and snapshot name, each published
    table's definition (``tables``, by ``"schema.table"``) and the chunks, biggest first."""

    slot: str
    lsn: int
    snapshot_name: str
    time_us: int
    tables: dict[str, RelationDefinition]
    chunks: tuple[SnapshotChunk, ...]


def export_snapshot(dsn: str, options: StreamOptions) -> ExportedSnapshot:
    """Checks the server, creates the publication if asked, and creates the slot
    ``options.slot`` exporting its snapshot (an error if the slot exists already)."""
    conn = connect(dsn, options.connect_timeout)
    try:
        answer: list[tuple[Any, ...]] = []
        preflight(conn, options, first=True, export=True, answer=answer, dsn=dsn)
        _, lsn, name, _ = answer[0]
        if not name:
            raise ReplicationError(f'replication slot "{options.slot}" was created without exporting a snapshot')
        return ExportedSnapshot(options.slot, lsn_to_int(lsn), name, int(time.time() * 1e6), conn)
    except BaseException:
        conn.close()
        raise


def open_snapshot_connection(dsn: str, snapshot_name: str,
                             connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Any:
    """A plain connection in a ``REPEATABLE READ`` transaction that sees the exported
    snapshot ``snapshot_name``; :class:`SnapshotGone` when it no longer exists."""
    import psycopg2

    conn = connect(dsn, connect_timeout, replication=False)
    try:
        cur = conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
    except psycopg2.Error as e:
        conn.close()
        if getattr(e, "pgcode", None) in ("22023", "42704", "0A000") or "does not exist" in str(e):
            raise SnapshotGone(f"the exported snapshot {snapshot_name} is gone ({one_line(str(e))}): "
                               "its slot's connection ended before the rows were read") from None
        raise classify_connect_error(e, "cannot open a snapshot connection") from None
    except BaseException:
        conn.close()
        raise
    return conn


def plan_snapshot(dsn: str, exported: ExportedSnapshot, publications: Sequence[str], *,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES, tables: Sequence[str] | None = None,
                  connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> SnapshotPlan:
    """The chunks of every table the publications publish (or only of ``tables``), read
    from the catalog inside the snapshot."""
    conn = open_snapshot_connection(dsn, exported.name, connect_timeout)
    try:
        cur = conn.cursor()
        published = published_tables(cur, publications, tables)
        cur.execute("SELECT current_setting('block_size')::int")
        block_size = int(cur.fetchone()[0])
        per_chunk = max(1, chunk_bytes // block_size)
        definitions: dict[str, RelationDefinition] = {}
        pieces: list[tuple[int, str, str, int, int | None, str | None]] = []
        for table, (cols, row_filter) in published.items():
            rel = relation_definition(cur, table, publications, cols)
            definitions[table] = rel
            cur.execute(
                "WITH RECURSIVE leaves(oid) AS (SELECT %s::oid UNION ALL SELECT i.inhrelid "
                "FROM pg_inherits i JOIN leaves l ON i.inhparent = l.oid "
                "JOIN pg_class p ON p.oid = l.oid WHERE p.relkind = 'p') "
                "SELECT n.nspname, c.relname, pg_relation_size(c.oid) FROM leaves l "
                "JOIN pg_class c ON c.oid = l.oid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'm')", (rel.relation_id,))
            for nspname, relname, size in cur.fetchall():
                source = f"{quote_ident(nspname)}.{quote_ident(relname)}"
                blocks = int(size) // block_size
                start = 0
                # The last chunk is open-ended: rows the table grew by are not visible to
                # the snapshot anyway, but nothing depends on the size read here.
                while True:
                    end = start + per_chunk
                    last = end >= blocks
                    pieces.append((blocks, table, source, start, None if last else end, row_filter))
                    if last:
                        break
                    start = end
    finally:
        conn.close()
    # Biggest tables first: the last chunks to finish are small ones.
    pieces.sort(key=lambda p: -p[0])
    chunks = tuple(SnapshotChunk(i, table, definitions[table], source, first, end, row_filter,
                                 exported.lsn, exported.time_us)
                   for i, (_, table, source, first, end, row_filter) in enumerate(pieces))
    return SnapshotPlan(exported.slot, exported.lsn, exported.name, exported.time_us, definitions, chunks)


def type_options(options: dict[str, Any]) -> dict[str, Any]:
    """The decoder options that the snapshot's decoder takes."""
    return {k: v for k, v in options.items() if k in _TYPE_OPTIONS and v is not None}


def read_chunk(conn: Any, chunk: SnapshotChunk, **decoder_options: Any) -> Iterator[pa.RecordBatch]:
    """The rows of ``chunk``, read on ``conn`` (from :func:`open_snapshot_connection`), as
    batches of the table's schema; the decoder options as :class:`pgoutput_arrow.Decoder`'s
    (``binary`` as the stream is started: it decides how undecodable types are kept)."""
    decoder = _internal.CopyDecoder(*chunk.relation.native_args(), lsn=chunk.lsn, commit_ts=chunk.time_us,
                                    first_seq=chunk.first_seq, **type_options(decoder_options))
    decoder.start(conn.pgconn_ptr, chunk.sql(decoder.text_columns), copy_out_functions(conn))
    while not decoder.done:
        for batch in decoder.read():
            yield pa.record_batch(batch)


class SnapshotReader:
    """Reads the chunks of ``plan`` on ``connections`` connections in parallel threads;
    iterate it for ``(chunk, batches)`` as each chunk completes (in completion order)."""

    def __init__(self, dsn: str, plan: SnapshotPlan, connections: int = 4,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S, **decoder_options: Any) -> None:
        self.plan = plan
        self.rows = 0
        self.bytes = 0
        self._todo: queue.Queue[SnapshotChunk] = queue.Queue()
        for chunk in plan.chunks:
            self._todo.put(chunk)
        n = max(1, min(connections, len(plan.chunks)))
        # Bounded: finished chunks wait here for the consumer, not in unbounded memory.
        self._done: queue.Queue[Any] = queue.Queue(maxsize=n + 1)
        self._stop = threading.Event()
        self._left = len(plan.chunks)
        self._options = decoder_options
        self._threads = [threading.Thread(target=self._work, args=(dsn, connect_timeout), daemon=True,
                                          name=f"pgoutput-snapshot-{i}") for i in range(n)]
        for t in self._threads:
            t.start()

    def _work(self, dsn: str, connect_timeout: float) -> None:
        conn = None
        try:
            conn = open_snapshot_connection(dsn, self.plan.snapshot_name, connect_timeout)
            while not self._stop.is_set():
                try:
                    chunk = self._todo.get_nowait()
                except queue.Empty:
                    return
                batches = list(read_chunk(conn, chunk, **self._options))
                self._put((chunk, batches))
        except BaseException as e:  # noqa: BLE001  (handed to the consumer)
            self._put(e)
        finally:
            close_quietly(conn)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._done.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[tuple[SnapshotChunk, list[pa.RecordBatch]]]:
        return self

    def __next__(self) -> tuple[SnapshotChunk, list[pa.RecordBatch]]:
        if self._left == 0:
            raise StopIteration
        while True:
            try:
                item = self._done.get(timeout=0.5)
                break
            except queue.Empty:
                if not any(t.is_alive() for t in self._threads) and self._done.empty():
                    raise ReplicationError("the snapshot's connections ended before every chunk was read")
        if isinstance(item, BaseException):
            self.close()
            raise item
        self._left -= 1
        chunk, batches = item
        self.rows += sum(b.num_rows for b in batches)
        return chunk, batches

    def close(self) -> None:
        """Stops the connections after the chunk each is reading."""
        self._stop.set()


def snapshot_table(dsn: str, table: str, *, publication: str | Sequence[str], connections: int = 2,
                   chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                   connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
                   **decoder_options: Any) -> tuple[int, Iterator[pa.RecordBatch]]:
    """The snapshot of one table that was added to the publication after the stream's slot
    was created: ``(lsn, batches)``. A temporary slot is created (and dropped when the
    batches are exhausted) only to export a snapshot at its consistent point ``lsn``; the
    table's rows as of ``lsn`` come out as snapshot rows at ``lsn``.

    No gap, no duplicate: call it after ``ALTER PUBLICATION ... ADD TABLE`` committed. Every
    change of the table that commits at or after ``lsn`` is in the stream and not in the
    snapshot; every one that committed before is in the snapshot: drop the table's stream
    rows whose ``_commit_lsn`` is below ``lsn`` (``LiveStream.snapshot_table`` does both).
    """
    pubs = (publication,) if isinstance(publication, str) else tuple(publication)
    slot = f"pgoutput_arrow_snap_{int(time.time() * 1000) % 10**10}_{threading.get_ident() % 10**6}"
    options = StreamOptions.of(slot=slot, publication=list(pubs), temporary_slot=True,
                               connect_timeout=connect_timeout)
    exported = export_snapshot(dsn, options)
    try:
        plan = plan_snapshot(dsn, exported, pubs, chunk_bytes=chunk_bytes, tables=[table],
                             connect_timeout=connect_timeout)
    except BaseException:
        exported.close()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        reader = SnapshotReader(dsn, plan, connections, connect_timeout, **decoder_options)
        try:
            for _, chunk_batches in reader:
                yield from chunk_batches
        finally:
            reader.close()
            exported.close()

    return plan.lsn, batches()
