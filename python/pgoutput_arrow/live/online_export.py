"""The online snapshot's chunks read elsewhere: on Spark's executors, under the chunk's own
exported snapshot, instead of on the stream's side.

The stream's side (:meth:`OnlineSnapshot.read <.online_snapshot.OnlineSnapshot.read>` with
``export_connect``) opens the chunk's transaction as always (its snapshot S, the watermark W)
on a connection of its own, exports S (``pg_export_snapshot()``) and reads only the chunk's
keys: the last one (where the chunk's key range ends) and one every
``chunk_rows / parts`` rows, which cut the range into :class:`ChunkPart`\\ s of about equal
size. The rows are read by whoever takes the :class:`ExportedChunk` handed out at W
(``LiveBatch.read_elsewhere``): a connection that imports S
(``SET TRANSACTION SNAPSHOT``) and runs each part's COPY sees exactly the rows the stream's
side would have read. The keys that the chunk must leave out (touched below W by a
transaction S does not see: the stream's version wins) are known once the stream passed W;
they are in the parts' ``WHERE`` by then.

S must live until the rows are read, and no longer: the chunk's transaction holds the
server's xmin horizon while it is open. Each part's reader says when it read its rows (a
notification on the :attr:`Exports.channel`, :meth:`ExportedChunk.read_done`), and the
chunk's transaction ends once every part did (:meth:`Exports.release_read`, through
``OnlineFeed.release_read``): the horizon is held for one chunk's read. A part read
again after that (a Spark task retried, a micro-batch's DataFrame read twice) finds S gone
and says so. Without the channel (``release_when_read=False``) a chunk's transaction lasts
until the consumer says its rows were read (:meth:`Exports.end`, through
``OnlineFeed.release_exported``; Spark's source calls it when Spark commits the micro-batch
that read the chunk): any part may then be read again until then.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from .. import _internal
from .._catalog import RelationDefinition
from .._files import without_column_ids
from .._pg import close_quietly, quote_ident
from ..decoding import conform
from .connection import copy_out_functions
from .online_plan import Key, OnlineTable

__all__ = ["ChunkPart", "ExportedChunk", "Exports", "key_bounds", "columns_sql", "by_name"]

#: A part of an exported chunk holds about this many rows (Spark: one task each).
PART_ROWS = 10_000


def columns_sql(relation: RelationDefinition, text_columns: Sequence[bool]) -> str:
    """The published columns to select for a CopyDecoder of ``relation`` (``text_columns``:
    the decoder's)."""
    return ", ".join(quote_ident(c[0]) + ("::text" if text else "")
                     for c, text in zip(relation.columns, text_columns))


def by_name(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """A CopyDecoder's batches without column ids (one decoder's own numbering: the stream's
    decoder keeps its own across the table's versions, so the chunk's columns are matched to
    them by name)."""
    schema = without_column_ids(batches[0].schema)
    return [pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in batches]


@dataclasses.dataclass(frozen=True)
class ChunkPart:
    """One part of an exported chunk: the ``WHERE`` conditions (SQL, values quoted) that
    select its rows, the ``_seq`` of its first row (its rank in the chunk), and how many rows
    it selects at most (the keys counted in the snapshot)."""

    where: tuple[str, ...]
    first_seq: int
    rows: int


@dataclasses.dataclass(frozen=True)
class ExportedChunk:
    """A chunk of ``table`` handed out at ``lsn`` whose rows are read under the exported
    snapshot ``snapshot_name`` (see the module documentation), in ``parts``, as rows of
    ``schema`` (the table's unified schema when it was handed out). ``rows``: the keys it
    counted, less those it leaves out (the rows read are at most that)."""

    table: str
    snapshot_name: str
    relation: RelationDefinition
    source: str
    parts: tuple[ChunkPart, ...]
    lsn: int
    commit_ts: int
    options: Mapping[str, Any]
    rows: int
    schema: pa.Schema | None = None
    #: Where a part's reader says it read its rows (:meth:`read_done`); "": nowhere (the
    #: snapshot lasts until the consumer ends it).
    channel: str = ""

    def sql(self, part: int, text_columns: Sequence[bool]) -> str:
        """The COPY that reads part ``part``."""
        where = " AND ".join(self.parts[part].where)
        select = f"SELECT {columns_sql(self.relation, text_columns)} FROM {self.source}" + (
            f" WHERE {where}" if where else "")
        return f"COPY ({select}) TO STDOUT (FORMAT binary)"

    def read(self, conn: Any, part: int) -> Iterator[pa.RecordBatch]:
        """The rows of part ``part``, on ``conn`` (a connection in the exported snapshot:
        ``live.snapshot.open_snapshot_connection``), as batches of :attr:`schema`."""
        decoder = _internal.CopyDecoder(*self.relation.native_args(), lsn=self.lsn, commit_ts=self.commit_ts,
                                        first_seq=self.parts[part].first_seq, **self.options)
        decoder.start(conn.pgconn_ptr, self.sql(part, decoder.text_columns), copy_out_functions(conn))
        while not decoder.done:
            batches = [pa.record_batch(b) for b in decoder.read()]
            batches = [b for b in batches if b.num_rows]
            if not batches:
                continue
            for b in by_name(batches):
                yield b if self.schema is None else conform(b, self.schema).combine_chunks().to_batches()[0]

    def read_done(self, conn: Any, part: int) -> None:
        """Part ``part`` was read on ``conn`` (its transaction in the exported snapshot):
        the transaction ends, and the stream's side is told on :attr:`channel` (it ends the
        exported snapshot once every part was read). A failed notification is left alone:
        the snapshot then ends when the consumer says so."""
        import psycopg2

        cur = conn.cursor()
        cur.execute("COMMIT")
        if self.channel:
            try:
                cur.execute("SELECT pg_notify(%s, %s)", (self.channel, f"{self.snapshot_name} {part}"))
            except psycopg2.Error:
                pass


def key_bounds(cur: Any, table: OnlineTable, range_sql: str, chunk_rows: int
               ) -> tuple[int, Key | None, list[tuple[int, Key]]]:
    """In the chunk's transaction on ``cur``: how many keys the chunk's range
    (``range_sql``: its ``SELECT {cols} ... ORDER BY <key> LIMIT n``) holds, its last key
    (None: none), and ``(rank, key)`` every :data:`PART_ROWS` keys before it (where its parts
    are cut). A key value Python cannot parse (a BC date) raises ValueError."""
    key = ", ".join(quote_ident(k) for k in table.key)
    texts = ", ".join(f"{quote_ident(k)}::text" for k in table.key)
    step = max(1, min(PART_ROWS, chunk_rows))
    inner = range_sql.replace("{cols}", key, 1)
    cur.execute(f"SELECT _pgoa_n, _pgoa_total, {texts} FROM (SELECT row_number() OVER (ORDER BY {key}) AS _pgoa_n, "
                f"count(*) OVER () AS _pgoa_total, {key} FROM ({inner}) s) q "
                f"WHERE _pgoa_n % {step} = 0 OR _pgoa_n = _pgoa_total ORDER BY _pgoa_n")
    rows = cur.fetchall()
    if not rows:
        return 0, None, []
    total = int(rows[-1][1])
    cuts = [(int(r[0]), table.from_text(r[2:])) for r in rows if int(r[0]) < total]
    return total, table.from_text(rows[-1][2:]), cuts


def key_condition(cur: Any, table: OnlineTable, op: str, key: Key) -> str:
    """``(<key>) <op> (<key's values>)`` as SQL."""
    cols = ", ".join(quote_ident(k) for k in table.key)
    values = ", ".join(f"%s::{t}" for t in table.key_types)
    return str(cur.mogrify(f"({cols}) {op} ({values})", table.to_text(key)).decode())


def keys_condition(cur: Any, table: OnlineTable, keys: Iterable[Key], negate: bool = False) -> str | None:
    """``(<key>) IN (...)`` (or ``NOT ...``) as SQL; None for no keys."""
    keys = list(keys)
    if not keys:
        return None
    cols = ", ".join(quote_ident(k) for k in table.key)
    one = "(" + ", ".join(f"%s::{t}" for t in table.key_types) + ")"
    values = ", ".join(cur.mogrify(one, table.to_text(k)).decode() for k in keys)
    return f"{'NOT ' if negate else ''}(({cols}) IN ({values}))"


@dataclasses.dataclass
class _Open:
    """An exported chunk's open transaction: its position, its snapshot's name, its
    connection, and the parts not read yet (None: not known yet)."""

    lsn: int
    name: str
    conn: Any
    unread: set[int] | None = None


class Exports:
    """The exported chunks' transactions, each open on a connection of its own until its
    rows were read (``connect``: a new plain autocommit connection): until every part's
    reader said so on :attr:`channel` (:meth:`release_read`) with ``release_when_read``, at
    the latest when :meth:`end` says so."""

    def __init__(self, connect: Callable[[], Any], release_when_read: bool = True) -> None:
        self._connect = connect
        self._open: list[_Open] = []
        self._idle: list[Any] = []
        #: The notification channel the parts' readers report on ("": none).
        self.channel = f"pgoutput_arrow_read_{secrets.token_hex(6)}" if release_when_read else ""
        self._listener: Any = None

    def begin(self) -> Any:
        """A connection for the next chunk's transaction (not begun yet)."""
        if self.channel and self._listener is None:  # listening before any part is handed out
            self._listener = self._connect()
            self._listener.cursor().execute(f'LISTEN "{self.channel}"')
        return self._idle.pop() if self._idle else self._connect()

    def opened(self, lsn: int, name: str, conn: Any) -> None:
        """The chunk at ``lsn`` exported its snapshot ``name`` on ``conn``: keep it open."""
        self._open.append(_Open(lsn, name, conn))

    def expect(self, name: str, parts: int) -> None:
        """The chunk of snapshot ``name`` is read in ``parts`` parts."""
        for o in self._open:
            if o.name == name:
                o.unread = set(range(parts))
        self._end_read()

    def failed(self, conn: Any) -> None:
        close_quietly(conn)

    def release_read(self) -> None:
        """End the transactions of the chunks whose every part was read (as their readers
        said on :attr:`channel`)."""
        listener = self._listener
        if listener is None or not self._open:
            return
        try:
            listener.poll()
        except Exception:  # noqa: BLE001  (the transactions then end when end() says so)
            close_quietly(listener)
            self._listener = None
            return
        for n in listener.notifies:
            name, _, part = n.payload.rpartition(" ")
            for o in self._open:
                if o.name == name and o.unread is not None:
                    o.unread.discard(int(part))
        listener.notifies.clear()
        self._end_read()

    def _end_read(self) -> None:
        if self.channel:
            self._end_where(lambda o: o.unread is not None and not o.unread)

    def end(self, upto: int) -> None:
        """The chunks handed out below ``upto`` were read: end their transactions."""
        self._end_where(lambda o: o.lsn < upto)

    def _end_where(self, done: Callable[[_Open], bool]) -> None:
        keep = []
        for o in self._open:
            if not done(o):
                keep.append(o)
                continue
            try:
                o.conn.cursor().execute("COMMIT")
                self._idle.append(o.conn)
            except Exception:  # noqa: BLE001  (a lost connection ended its snapshot already)
                close_quietly(o.conn)
        self._open = keep

    @property
    def held(self) -> int:
        """How many exported snapshots are open."""
        return len(self._open)

    def close(self) -> None:
        for o in self._open:
            close_quietly(o.conn)
        for conn in self._idle:
            close_quietly(conn)
        close_quietly(self._listener)
        self._open, self._idle, self._listener = [], [], None
