"""The online snapshot's chunks read: one chunk of a table in its own short transaction, its
snapshot and watermark taken, its rows read and decoded (or, with exports, only its keys'
bounds, the rows left to whoever takes it: :mod:`.online_export`). What a chunk is in the
stream, and why it is correct, is in :mod:`.online_snapshot`'s documentation."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from .._catalog import relation_definition
from .._files import without_column_ids
from .._pg import close_quietly, one_line, quote_ident
from ..exceptions import ReplicationError
from .connection import copy_out_functions
from .online_export import ChunkPart, ExportedChunk, Exports, by_name, columns_sql, key_bounds, key_condition, keys_condition
from .online_plan import Key, OnlineTable, key_rows
from .snapshot import SEQ_BASE, SEQ_PER_CHUNK, type_options

__all__ = ["Progress", "UnorderedKey", "Chunk", "ChunkReader", "WATERMARK_PREFIX"]

#: The prefix of the watermark messages (``pg_logical_emit_message``); they are not handed out.
WATERMARK_PREFIX = "pgoutput_arrow.watermark"

log = logging.getLogger("pgoutput_arrow.live.online_snapshot")


@dataclasses.dataclass
class Progress:
    """Where one table stands: the last key read (None: nothing yet), whether every key
    range was read, and the keys to read again."""

    after: Key | None = None
    done: bool = False
    again: set[Key] = dataclasses.field(default_factory=set)

    @property
    def finished(self) -> bool:
        return self.done and not self.again


class UnorderedKey(ReplicationError):
    """A chunk of ``table`` read a key the online snapshot cannot order (``why``): the table
    is to be taken by an exported snapshot instead (:meth:`OnlineSnapshot.give_up`)."""

    def __init__(self, table: str, why: str) -> None:
        super().__init__(f"the online snapshot cannot chunk {table}: {why}")
        self.table, self.why = table, why


@dataclasses.dataclass
class Chunk:
    """A chunk read and waiting for its watermark to pass in the stream: ``batches`` of
    ``table`` at ``_commit_lsn = lsn``; ``keys`` their keys (row order; None until a
    change below the watermark needs them). ``last`` is the last
    key of the key range read, ``ends`` whether that range reached the table's end,
    ``reread`` the keys read again; ``again`` the keys to read again once more;
    ``xmax``/``xip`` the snapshot's (32-bit xids)."""

    table: OnlineTable
    token: str
    lsn: int
    batches: list[pa.RecordBatch]
    keys: list[Key | None] | None
    last: Key | None
    ends: bool
    reread: set[Key]
    #: The table's progress when it was read (a table read again since has a new one).
    progress: Progress
    xmax: int
    xip: pa.Array
    #: A batch of no rows of the table's schema (a chunk that keeps none still goes out).
    empty: pa.RecordBatch
    again: set[Key] = dataclasses.field(default_factory=set)
    #: An exported chunk (:mod:`.online_export`): its parts, its snapshot's name, the keys
    #: it counted, the keys it leaves out, and (once released) what reads its rows.
    parts: tuple[ChunkPart, ...] = ()
    snapshot_name: str = ""
    counted: int = 0
    drop: set[Key] = dataclasses.field(default_factory=set)
    exported: ExportedChunk | None = None

    def invisible(self, xids: pa.Array) -> pa.BooleanArray:
        """Which of these (32-bit) xids the chunk's snapshot does not see: at or past its
        xmax (modulo 2^32), or in progress when it was taken."""
        d = pc.bit_wise_and(pc.subtract(pa.scalar(self.xmax, pa.int64()), xids), 0xFFFFFFFF)
        return pc.or_(pc.or_(pc.equal(d, 0), pc.greater(d, 1 << 31)), pc.is_in(xids, value_set=self.xip))


class ChunkReader:
    """Reads chunks on ``conn`` (a plain autocommit connection of its own), ``chunk_rows``
    keys of a table each, decoded with ``decoder_options``; with ``exports`` (the chunks'
    transactions) the chunks are exported instead (:mod:`.online_export`)."""

    def __init__(self, conn: Any, chunk_rows: int, decoder_options: Mapping[str, Any] | None = None,
                 exports: Exports | None = None) -> None:
        self.conn = conn
        self.chunk_rows = max(1, int(chunk_rows))
        self.exports = exports
        #: The publications read: each chunk reads its table's columns as they publish them
        #: when the chunk is read.
        self.publications: tuple[str, ...] = ()
        self.chunks = 0
        self._options = type_options(dict(decoder_options or {}))
        self._run = secrets.token_hex(6)
        self._seq = 0

    def read(self, table: OnlineTable, p: Progress, export: bool = True) -> Chunk:
        """The next chunk of ``table``, standing at ``p`` (see the module documentation of
        :mod:`.online_snapshot`); its ``table`` has the columns published when it was read.
        With exports (and ``export``), its rows are left to be read under its exported
        snapshot (:mod:`.online_export`); else they are read here."""
        started = time.monotonic()
        token = f"{self._run}:{self._seq}"
        self._seq += 1
        exports = self.exports if export else None
        conn = exports.begin() if exports is not None else self.conn
        cur = conn.cursor()
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot_name = ""
        parts: tuple[ChunkPart, ...] = ()
        try:
            snap, lsn, snapshot_name = self._watermark(cur, token, exports is not None)
            xmin, xmax, xip = snap.split(":")
            table = self._as_published(cur, table)
            first_seq = SEQ_BASE + (self.chunks % (1 << 25)) * SEQ_PER_CHUNK
            read: list[pa.RecordBatch] = []
            range_rows = 0
            again = set(p.again)
            if exports is None:
                if not p.done:
                    read += self._copy(cur, table, lsn, first_seq, self._range_sql(cur, table, p.after))
                    range_rows = sum(b.num_rows for b in read)
                if again:
                    read += self._copy(cur, table, lsn, first_seq + range_rows, self._keys_sql(cur, table, again))
                cur.execute("COMMIT")
                again_rows = sum(b.num_rows for b in read) - range_rows
            else:
                # Exported rows are ranked in the chunk from 0 (as Spark ranks _seq).
                parts, range_rows, last_key = self._export_parts(cur, table, p, again, 0)
                read = [self._empty(table)]
                again_rows = len(again)
                exports.opened(lsn, snapshot_name, conn)
        except BaseException as e:
            try:
                cur.execute("ROLLBACK")
            except Exception:  # noqa: BLE001  (the error that matters is raised)
                pass
            if exports is not None:
                exports.failed(conn)
            code = getattr(e, "pgcode", None)
            if code is not None:  # the server's: which chunk, and why
                raise ReplicationError(f"the online snapshot cannot read a chunk of {table.table}: "
                                       f"{one_line(str(e))}"
                                       + (" (its watermarks are written: the server must accept writes, "
                                          "not be a standby)" if code == "25006" or "during recovery" in str(e) else "")) from None
            raise
        finally:
            cur.close()
        batches = [b for b in read if b.num_rows]
        for b in batches:
            # A key value the decoder leaves null (its text in _special) that the codec
            # cannot order (a BC date, a year past 9999): the table is taken another way.
            special = b.column("_special") if "_special" in b.schema.names else None
            if special is not None and special.null_count < b.num_rows \
                    and None in key_rows(table, b.filter(special.is_valid())):
                raise UnorderedKey(table.table, f"it holds a key value ({', '.join(table.key)}) that is not "
                                   "ordered here (a BC date, a year past 9999)")
        last = None
        if exports is not None:
            last = last_key
        elif range_rows:
            # The range's rows come in key order: its last row has the last key read.
            at = range_rows - 1
            for b in batches:
                if at < b.num_rows:
                    last = key_rows(table, b.slice(at, 1))[0]
                    break
                at -= b.num_rows
            if last is None:
                raise UnorderedKey(table.table, f"it holds a key value ({', '.join(table.key)}) that the "
                                   "decoder cannot represent")
        chunk = Chunk(table, token, lsn, batches, None, last,
                           not p.done and range_rows < self.chunk_rows, again, p, int(xmax) & 0xFFFFFFFF,
                           pa.array([int(x) & 0xFFFFFFFF for x in xip.split(",") if x], pa.int64()),
                           read[0].slice(0, 0), parts=parts, snapshot_name=snapshot_name,
                           counted=range_rows + again_rows)
        self.chunks += 1
        log.info("online snapshot of %s: %s %d rows after key %s%s in %.2f s%s", table.table,
                 "read" if exports is None else "exported (keys read)", range_rows,
                 "(none)" if p.after is None else ", ".join(table.to_text(p.after)),
                 f" and {again_rows} rows read again" if again else "",
                 time.monotonic() - started, ", to its end" if chunk.ends else "")
        return chunk


    def _watermark(self, cur: Any, token: str, export: bool) -> tuple[str, int, str]:
        """In the chunk's transaction just begun on ``cur``: its snapshot (``pg_current_snapshot``
        text), the chunk's position (its watermark written after the snapshot was taken), and
        with ``export`` the snapshot's exported name."""
        # The watermark reaches the stream once the WAL is flushed past it: at once on 17+
        # (the message's flush argument); before, by a transaction's commit (an xid makes it
        # write and flush one; locally: a synchronous standby is not waited for), not by the
        # WAL writer's next round: this transaction's own, or, when it stays open for its
        # exported snapshot, one of its own on the snapshot's other connection, after it.
        exported = ", pg_export_snapshot()" if export else ", ''"
        if self.conn.server_version >= 170000:
            cur.execute(f"SELECT pg_current_snapshot()::text{exported}, "
                        "pg_logical_emit_message(false, %s, %s, true)::text", (WATERMARK_PREFIX, token))
            snap, name, lsn_text = cur.fetchone()[:3]
        elif export:
            cur.execute(f"SELECT pg_current_snapshot()::text{exported}")
            snap, name = cur.fetchone()
            with self.conn.cursor() as other:  # autocommit: a transaction of its own
                other.execute("SELECT pg_logical_emit_message(false, %s, %s)::text, pg_current_xact_id(), "
                              "set_config('synchronous_commit', 'local', true)", (WATERMARK_PREFIX, token))
                lsn_text = other.fetchone()[0]
        else:
            cur.execute(f"SELECT pg_current_snapshot()::text{exported}, pg_logical_emit_message(false, %s, %s)::text, "
                        "pg_current_xact_id(), set_config('synchronous_commit', 'local', true)",
                        (WATERMARK_PREFIX, token))
            snap, name, lsn_text = cur.fetchone()[:3]
        # The function returns the end of the message's WAL record, where the next record
        # (maybe a commit) starts: the chunk is placed one byte below, inside the record,
        # after every commit before it and before every commit after it.
        return str(snap), _internal.lsn_to_int(lsn_text) - 1, str(name)

    def _export_parts(self, cur: Any, table: OnlineTable, p: Progress, again: set[Key], first_seq: int
                      ) -> tuple[tuple[ChunkPart, ...], int, Key | None]:
        """An exported chunk's parts (their conditions before the keys left out are known),
        the rows of its key range, and the range's last key."""
        filters = (f"({table.row_filter})",) if table.row_filter else ()
        parts: list[ChunkPart] = []
        total, last = 0, None
        if not p.done:
            try:
                total, last, cuts = key_bounds(cur, table, self._range_sql(cur, table, p.after), self.chunk_rows)
            except ValueError as e:
                raise UnorderedKey(table.table, f"it holds a key value ({', '.join(table.key)}) that is not "
                                   f"ordered here (a BC date, a year past 9999: {e})") from None
            lower, rank = p.after, 0
            for upto, key in [*cuts, *([(total, last)] if last is not None else [])]:
                where = [key_condition(cur, table, "<=", key)]
                if lower is not None:
                    where.insert(0, key_condition(cur, table, ">", lower))
                parts.append(ChunkPart((*where, *filters), first_seq + rank, upto - rank))
                lower, rank = key, upto
        cond = keys_condition(cur, table, again)
        if cond is not None:
            parts.append(ChunkPart((cond, *filters), first_seq + total, len(again)))
        return tuple(parts), total, last

    def _empty(self, table: OnlineTable) -> pa.RecordBatch:
        """A batch of no rows of ``table``'s chunks."""
        decoder = _internal.CopyDecoder(*table.relation.native_args(), lsn=0, commit_ts=0, first_seq=0,
                                        **self._options)
        schema = without_column_ids(pa.RecordBatchReader.from_stream(decoder.schema).schema)
        return pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)

    def _as_published(self, cur: Any, table: OnlineTable) -> OnlineTable:
        """``table`` with its columns as published in the chunk's snapshot (a column added
        since it was planned, maybe with a default every row has; one dropped)."""
        if not self.publications:
            return table
        rel = relation_definition(cur, table.table, self.publications)
        if rel.columns == table.relation.columns and rel.types == table.relation.types:
            return table
        return dataclasses.replace(table, relation=rel)

    def _range_sql(self, cur: Any, table: OnlineTable, after: Key | None) -> str:
        key = ", ".join(quote_ident(k) for k in table.key)
        where = [key_condition(cur, table, ">", after)] if after is not None else []
        if table.row_filter:
            where.append(f"({table.row_filter})")
        condition = (" WHERE " + " AND ".join(where)) if where else ""
        return f"SELECT {{cols}} FROM {table.source}{condition} ORDER BY {key} LIMIT {self.chunk_rows}"

    def _keys_sql(self, cur: Any, table: OnlineTable, keys: Iterable[Key]) -> str:
        condition = keys_condition(cur, table, keys) or "false"
        if table.row_filter:
            condition += f" AND ({table.row_filter})"
        return f"SELECT {{cols}} FROM {table.source} WHERE {condition}"

    def _copy(self, cur: Any, table: OnlineTable, lsn: int, first_seq: int, select: str) -> list[pa.RecordBatch]:
        """The rows of ``select`` (``{cols}``: the published columns), decoded; the first
        batch is kept when empty (it gives the schema)."""
        rel = table.relation
        decoder = _internal.CopyDecoder(*rel.native_args(), lsn=lsn, commit_ts=int(time.time() * 1e6),
                                        first_seq=first_seq, **self._options)
        cols = columns_sql(rel, decoder.text_columns)
        decoder.start(self.conn.pgconn_ptr, f"COPY ({select.replace('{cols}', cols, 1)}) TO STDOUT (FORMAT binary)",
                      copy_out_functions(self.conn))
        out: list[pa.RecordBatch] = []
        while not decoder.done:
            out += [pa.record_batch(b) for b in decoder.read()]
        if not out:
            schema = pa.RecordBatchReader.from_stream(decoder.schema).schema
            out = [pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)]
        return by_name([b for b in out if b.num_rows] or out[:1])

    def exported(self, chunk: Chunk) -> ExportedChunk:
        """What reads an exported chunk's rows, the keys it leaves out known."""
        t = chunk.table
        parts = chunk.parts
        if chunk.drop:
            with self.conn.cursor() as cur:
                left_out = keys_condition(cur, t, sorted(chunk.drop, key=t.sort_key), negate=True) or "true"
            parts = tuple(ChunkPart((*part.where, left_out), part.first_seq, part.rows) for part in parts)
        assert self.exports is not None
        self.exports.expect(chunk.snapshot_name, len(parts))
        return ExportedChunk(t.table, chunk.snapshot_name, t.relation, t.source, parts, chunk.lsn,
                             int(time.time() * 1e6), dict(self._options), max(0, chunk.counted - len(chunk.drop)),
                             channel=self.exports.channel)

    def close(self) -> None:
        """Closes its connections (an exported chunk's transaction ends with its own)."""
        if self.exports is not None:
            self.exports.close()
        close_quietly(self.conn)
