"""The online snapshot: every published table read in key order, chunk by chunk, while the
change stream flows; no transaction open longer than one chunk, and resumable after a kill.

After Netflix's DBLog ("DBLog: A Watermark Based Change-Data-Capture Framework", 2020), as
Debezium's incremental snapshots and Flink CDC's chunked snapshots do it, with one change:
the watermark is the chunk's own MVCC snapshot, so no row of a chunk is dropped for a change
that PostgreSQL had already made visible to it.

One chunk of a table, on a plain connection of the stream (:meth:`OnlineSnapshot.read`):

1. ``BEGIN ISOLATION LEVEL REPEATABLE READ`` and, in its first statement,
   ``pg_current_snapshot()`` (the chunk's snapshot S: its ``xmax`` and in-progress xids) and
   ``pg_logical_emit_message(false, 'pgoutput_arrow.watermark', token)``: a non-transactional
   message, in the change stream where its WAL record is, written after S was taken. The
   chunk's position W is one byte below the record's end (where a commit may start): every
   commit is below W or above it.
2. ``COPY (SELECT <published columns> FROM <table> WHERE (<key>) > (<last key read>) AND
   <row filter> ORDER BY <key> LIMIT n) TO STDOUT (FORMAT binary)``, decoded in Rust as the
   exported snapshot's chunks are; the keys to read again (below) the same way with
   ``WHERE (<key>) IN (...)``; ``COMMIT``.

The stream goes on; the chunk's rows come out where the watermark W is in the stream, as
snapshot rows (``_op = 'snapshot'``) at ``_lsn = _commit_lsn = W``:

* a transaction visible in S committed before S was taken, so below W: the chunk holds its
  changes and comes after them;
* a transaction that commits after W was invisible to S: its changes come after the chunk;
* a transaction that commits below W but is invisible in S (it committed while S was
  taken, or PostgreSQL had written its commit but not yet made it visible): its changes come
  before the chunk, which is stale for the rows it touched. Those rows are dropped from the
  chunk (the stream's version wins; DBLog's rule, told by xid instead of by time).

Rows the stream changed but cannot rebuild alone are read again in a later chunk: an UPDATE
that left a TOAST value unsent (``_unchanged``) of a row the replica does not hold whole (its
chunk row was dropped as above, or its old key is past the part of the table read so far
and its new key is not). Every other change carries the whole row.

Ordering by ``_commit_lsn, _seq``, or applying the batches in the order they come (the
watermark's flush is cut there), a replica that takes a snapshot row as an insert-or-replace
ends equal to the table. The progress (per table: the last key read, done, keys to read
again) is :attr:`OnlineSnapshot.state`: handed out with each chunk (``LiveBatch.
snapshot_state``), and with any other group whose changes added keys to read again, stored
by the consumer with the group, and given back as ``snapshot_state`` to resume at the next
chunk after a kill.

Tables are chunked by their replica identity index or primary key when its columns have
types whose order Python reproduces (integers, numeric, text under the C collation, uuid,
dates and timestamps, bool, bytea); any other table is said in one line and read by the
exported snapshot of :meth:`LiveStream.snapshot_table` (:mod:`.online_plan`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..decoding import OutputKind
from ..exceptions import ReplicationError
from .online_export import Exports
from .online_plan import Key, OnlineTable, key_rows, plan_online
from .online_read import WATERMARK_PREFIX, Chunk, ChunkReader, Progress, UnorderedKey

__all__ = ["WATERMARK_PREFIX", "RESNAPSHOT_PREFIX", "OnlineTable", "OnlineSnapshot", "Chunk", "Flush", "Item", "UnorderedKey",
           "plan_online", "split_rows", "split_at", "DEFAULT_CHUNK_ROWS"]

#: The prefix of a message that asks a running stream to read a table again (its content:
#: ``schema.table``), Debezium's signal table without a table:
#: ``SELECT pg_logical_emit_message(true, 'pgoutput_arrow.resnapshot', 'public.orders')``.
RESNAPSHOT_PREFIX = "pgoutput_arrow.resnapshot"
DEFAULT_CHUNK_ROWS = 20_000
#: The state's format.
STATE_VERSION = 1

#: A decoded batch as the live stream holds it: (kind, table, relation version, batch).
Item = tuple[OutputKind, str | None, int | None, pa.RecordBatch]

class OnlineSnapshot:
    """The online snapshot of a live stream: ``tables`` read chunk by chunk on ``conn`` (a
    plain autocommit connection of its own), ``state`` its progress (resumed from a stored
    one). See the module documentation."""

    def __init__(self, conn: Any, tables: Iterable[OnlineTable], *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 state: Mapping[str, Any] | None = None, decoder_options: Mapping[str, Any] | None = None,
                 exports: Exports | None = None) -> None:
        #: Reads the chunks (on ``conn``, a plain autocommit connection of its own; with
        #: ``exports``, the chunks' rows are read elsewhere, under their exported snapshots:
        #: :mod:`.online_export`).
        self.reader = ChunkReader(conn, chunk_rows, decoder_options, exports)
        self.conn = conn
        self.chunk_rows = self.reader.chunk_rows
        self.tables: dict[str, OnlineTable] = {}
        self.progress: dict[str, Progress] = {}
        self.chunk: Chunk | None = None
        self.rows = 0
        self.reread = 0
        self.dropped = 0
        #: Changes of the tables handed out since the last chunk was read: (table, batch).
        self._recent: list[tuple[str, pa.RecordBatch]] = []
        #: The stored state's tables (resumed as each is added), and the tables it took by
        #: an exported snapshot to the end.
        self.saved, exported = _read_state(state)
        self.exported: set[str] = set(exported)
        #: The tables taken by an exported snapshot instead (not chunked in key order).
        self.fallback: set[str] = set()
        #: Whether the progress changed since :attr:`state` was last handed out (keys to
        #: read again found by changes, a table taken by an exported snapshot): the next
        #: group handed out carries it, so a consumer that stores that group stores it too.
        self.dirty = False
        for t in tables:
            self.add(t, self.saved.get(t.table))

    def add(self, table: OnlineTable, saved: Mapping[str, Any] | None = None) -> None:
        """Reads ``table`` (again) from its first key, or from where ``saved`` (its part of
        a stored state) stands."""
        self.tables[table.table] = table
        p = Progress()
        if saved:
            after = saved.get("after")
            p.after = table.from_text(after) if after is not None else None
            p.done = bool(saved.get("done"))
            p.again = {table.from_text(k) for k in saved.get("again", [])}
        self.progress[table.table] = p
        self.dirty = True

    @property
    def finished(self) -> bool:
        return self.chunk is None and all(p.finished for p in self.progress.values())

    def covers(self, table: str | None) -> bool:
        """Whether changes of ``table`` are followed (its snapshot is not finished)."""
        p = self.progress.get(table or "")
        return p is not None and not p.finished

    @property
    def state(self) -> dict[str, Any]:
        """The progress as JSON-able data: give it back as ``snapshot_state`` to resume."""
        tables = {}
        waiting = self.chunk
        for name, p in self.progress.items():
            t = self.tables[name]
            # Keys the waiting chunk found to read again count already: a consumer that
            # stores the changes that found them, but not the chunk, reads them on resuming.
            again = p.again | waiting.again if waiting is not None and waiting.table.table == name else p.again
            tables[name] = {"after": None if p.after is None else t.to_text(p.after), "done": p.done,
                            "again": sorted(t.to_text(k) for k in again)}
        return {"version": STATE_VERSION, "tables": tables, "exported": sorted(self.exported)}

    # ------------------------------------------------------------------ reading

    def next_table(self) -> OnlineTable | None:
        for name, p in self.progress.items():
            if not p.finished:
                return self.tables[name]
        return None

    @property
    def chunks(self) -> int:
        """How many chunks were read."""
        return self.reader.chunks

    def read(self, export: bool = True) -> Chunk | None:
        """Reads the next chunk (:class:`~.online_read.ChunkReader`; exported if it exports
        and ``export``, else its rows read now); None when every table is read. The chunk
        waits in :attr:`chunk` for its watermark."""
        assert self.chunk is None
        table = self.next_table()
        if table is None:
            return None
        self.chunk = self.reader.read(table, self.progress[table.table], export)
        self.tables[table.table] = table = self.chunk.table  # its columns as the chunk read them
        # Changes handed out before this chunk by transactions its snapshot does not see
        # (committed, but not yet visible: PostgreSQL writes a commit before it shows it, and
        # a synchronous standby can hold that for a while) are below the watermark too; they
        # are kept for the chunks after, until one sees them. What this chunk sees, every
        # later one sees: forgotten.
        recent, self._recent = self._recent, []
        for name, b in recent:
            hit = _true(self.chunk.invisible(_xids(b)))
            if not hit:
                continue
            unseen = _rows(b, hit)
            if name == table.table:
                self._against_chunk(self.chunk, unseen, pa.array([True] * unseen.num_rows))
            self._recent.append((name, unseen))
        return self.chunk

    # ------------------------------------------------------------------ the stream

    def sync(self, cur: Any, publications: Sequence[str], only: Sequence[str] | None = None) -> dict[str, str]:
        """Reads every published table it does not know yet (a table added to the
        publication: from its first key; at the start, from the stored state), and forgets
        those no longer published; with ``only``, of those tables only. Returns the tables newly published that it cannot chunk
        in key order, with why: the caller takes them by an exported snapshot (they are
        :attr:`fallback` from now on)."""
        self.reader.publications = tuple(publications)
        tables, fallback = plan_online(cur, publications, only=only)
        published = {t.table for t in tables} | set(fallback)
        for gone in [t for t in (set(self.tables) | self.fallback | self.exported) if t not in published]:
            self.remove(gone)
        for planned in tables:
            # A table an exported snapshot took (one a chunk could not order) is done.
            if planned.table not in self.tables and planned.table not in self.exported:
                self.add(planned, self.saved.get(planned.table))
        new = {name: why for name, why in fallback.items() if name not in self.exported and name not in self.fallback}
        self.fallback |= set(new)
        self.saved = {}  # a table published again later is read from its first key
        return new

    def read_again(self, cur: Any, publications: Sequence[str], table: str) -> None:
        """Reads ``table`` (published) again from its first key; an error if it cannot be
        chunked in key order."""
        self.reader.publications = tuple(publications)
        tables, fallback = plan_online(cur, publications, [table])
        if fallback:
            raise ReplicationError(f"{table} cannot be read online: {fallback[table]}; "
                                   "LiveStream.snapshot_table takes it by an exported snapshot")
        self.add(tables[0])

    def give_up(self, table: str) -> None:
        """Stops reading ``table`` online (a chunk found a key it cannot order): the caller
        takes it by an exported snapshot (it is :attr:`fallback` from now on)."""
        self.tables.pop(table, None)
        self.progress.pop(table, None)
        self.fallback.add(table)
        self.dirty = True

    def remove(self, table: str) -> None:
        """Stops reading ``table`` (no longer published)."""
        self.tables.pop(table, None)
        self.progress.pop(table, None)
        self.fallback.discard(table)
        self.exported.discard(table)
        self.dirty = True

    def changed_state(self) -> dict[str, Any] | None:
        """:attr:`state` if it changed since last handed out (it is then handed out), else
        None."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.state

    def take_messages(self, batches: list[Item], keep: bool) -> tuple[list[Item], int | None, list[str]]:
        """A decoder flush without the watermark messages (without any message unless
        ``keep``), the waiting chunk's position if its watermark is in it, and the tables
        resnapshot messages ask to read again."""
        cut = None
        signals: list[str] = []
        out = []
        for kind, table, version, batch in batches:
            if kind == "messages":
                signals += self.signals(batch)
                batch, found = self.watermark(batch)
                cut = found if found is not None else cut
                if not keep:
                    continue
            if batch.num_rows:
                out.append((kind, table, version, batch))
        return out, cut, signals

    def cut_flush(self, batches: list[Item], cut: int | None) -> Flush | None:
        """The changes of a decoder flush (without messages it does not hand out) shown to
        the snapshot in stream order; where the waiting chunk's watermark is in it (``cut``),
        the flush cut there, the chunk released between the two parts (None: not in this
        flush; the changes were shown)."""
        if cut is None:
            for kind, table, _, batch in batches:
                if kind == "table":
                    self.observe(table or "", batch, before_watermark=True)
            return None
        pre, post = [], []
        for kind, table, version, batch in batches:
            below, above = split_at(batch, cut)
            if below.num_rows:
                pre.append((kind, table, version, below))
            if above.num_rows:
                post.append((kind, table, version, above))
        for kind, table, _, batch in pre:
            if kind == "table":
                self.observe(table or "", batch, before_watermark=True)
        pre_state = self.changed_state() if pre else None  # without the chunk
        chunk, state = self.release()
        for kind, table, _, batch in post:
            if kind == "table":
                self.observe(table or "", batch, before_watermark=False)
        return Flush(pre, pre_state, chunk, state, post, self.changed_state() if post else None, cut)

    @staticmethod
    def signals(messages: pa.RecordBatch) -> list[str]:
        """The tables that resnapshot messages among ``messages`` ask to read again."""
        if "prefix" not in messages.schema.names or RESNAPSHOT_PREFIX not in messages.column("prefix").to_pylist():
            return []
        return [bytes(c).decode("utf-8", "replace").strip()
                for p, c in zip(messages.column("prefix").to_pylist(), messages.column("content").to_pylist())
                if p == RESNAPSHOT_PREFIX]

    def watermark(self, messages: pa.RecordBatch) -> tuple[pa.RecordBatch, int | None]:
        """The messages of a flush without the watermarks, and the waiting chunk's position
        (:attr:`Chunk.lsn`) when its watermark is among them (its rows come out there)."""
        if "prefix" not in messages.schema.names or messages.num_rows == 0:
            return messages, None
        prefixes = messages.column("prefix").to_pylist()
        if WATERMARK_PREFIX not in prefixes:
            return messages, None
        found = None
        contents = messages.column("content").to_pylist()
        for prefix, content in zip(prefixes, contents):
            if prefix == WATERMARK_PREFIX and self.chunk is not None and bytes(content).decode() == self.chunk.token:
                found = self.chunk.lsn
        keep = [i for i, p in enumerate(prefixes) if p != WATERMARK_PREFIX]
        return _rows(messages, keep), found

    def observe(self, table: str, batch: pa.RecordBatch, *, before_watermark: bool) -> None:
        """Changes of ``table`` as they are handed out, in stream order
        (``before_watermark``: committed below the waiting chunk's watermark). Against the
        waiting chunk: a change by a transaction its snapshot does not see drops the rows
        of the keys it touched from the chunk. Against the table's progress: an UPDATE that
        left a TOAST value unsent, of a row the replica may not hold whole, has its row read
        again when no later chunk reads it."""
        t = self.tables.get(table)
        if t is None or batch.num_rows == 0 or not self.covers(table):
            return
        chunk = self.chunk if (self.chunk is not None and before_watermark
                               and self.chunk.table.table == table) else None
        invisible = pa.array([False] * batch.num_rows)
        if "_xid" in batch.schema.names:
            # Until a chunk's snapshot sees them (see read).
            self._recent.append((table, batch))
            if chunk is not None:
                invisible = chunk.invisible(_xids(batch))
                hit = _true(invisible)
                if hit:
                    self._drop_from_chunk(chunk, _rows(batch, hit))
        if chunk is not None:
            self._against_chunk(chunk, batch, invisible, drop=False)
        else:
            self._against_progress(t, batch)

    def _against_progress(self, t: OnlineTable, batch: pa.RecordBatch) -> None:
        """Changes handed out after every chunk read so far: an UPDATE that left a TOAST
        value unsent, of a row the replica may not hold whole, in the part read."""
        p = self.progress[t.table]
        for k_new, k_old in self._partial_keys(t, batch, None):
            if self._held_whole(t, p, k_old if k_old is not None else k_new):
                continue
            if self._read_past(t, p, k_new) and k_new not in p.again:
                p.again.add(k_new)
                self.reread += 1
                self.dirty = True

    def _partial_keys(self, t: OnlineTable, batch: pa.RecordBatch, mask: pa.BooleanArray | None
                      ) -> list[tuple[Key, Key | None]]:
        """(new key, old key or None) of each UPDATE of ``batch`` that left a TOAST value
        unsent, with its row's ``mask`` value when given (as the third element's stand-in:
        rows whose mask is False are skipped)."""
        partial = [i for i in self._partial_updates(batch) if mask is None or mask[i].as_py()]
        if not partial:
            return []
        sub = _rows(batch, partial)
        new = key_rows(t, sub)
        old = key_rows(t, sub, struct="_before") if "_before" in sub.schema.names else [None] * len(new)
        return [(k_new, k_old) for k_new, k_old in zip(new, old) if k_new is not None]

    def _against_chunk(self, chunk: Chunk, batch: pa.RecordBatch, invisible: pa.BooleanArray,
                       drop: bool = True) -> None:
        """Changes below the waiting chunk's watermark (``invisible``: by a transaction its
        snapshot does not see; with ``drop`` those rows' keys are dropped from it first)."""
        t = chunk.table
        hit = _true(invisible) if drop else []
        if hit:
            self._drop_from_chunk(chunk, _rows(batch, hit))
        p = self.progress[t.table]
        for seen in (True, False):
            for k_new, k_old in self._partial_keys(t, batch, pc.invert(invisible) if seen else invisible):
                self._partial_below(t, p, chunk, k_new, k_old, seen)

    def _partial_below(self, t: OnlineTable, p: Progress, chunk: Chunk, k_new: Key, k_old: Key | None,
                       seen: bool) -> None:
        """An UPDATE below the chunk's watermark left a TOAST value of ``k_new`` unsent;
        ``seen``: the chunk's snapshot sees it."""
        if self._held_whole(t, p, k_old if k_old is not None else k_new):
            return
        # The chunk comes out after this change. It holds the row whole if its snapshot
        # saw the change and it read the key.
        if seen and (k_new in chunk.reread or self._in_range(t, p, chunk, k_new)):
            return
        if (self._read_past(t, p, k_new) or chunk.ends or
                (chunk.last is not None and t.sort_key(k_new) <= t.sort_key(chunk.last))):
            self.reread += k_new not in chunk.again
            chunk.again.add(k_new)
            self.dirty = True

    def _drop_from_chunk(self, chunk: Chunk, changes: pa.RecordBatch) -> None:
        """Drops from ``chunk`` the rows of every key ``changes`` touch (new and old)."""
        t = chunk.table
        touched = {k for k in key_rows(t, changes) if k is not None}
        if "_before" in changes.schema.names:
            touched |= {k for k in key_rows(t, changes, struct="_before") if k is not None}
        if chunk.snapshot_name:  # exported: its rows are read later, without these keys
            new = {k for k in touched - chunk.drop
                   if k in chunk.reread or self._in_range(t, chunk.progress, chunk, k)}
            chunk.drop |= new
            self.dropped += len(new)
            return
        keys = chunk.keys
        if keys is None:  # the chunk's keys, read once a change may drop some
            keys = chunk.keys = [k for b in chunk.batches for k in key_rows(t, b)]
        keep = [i for i, k in enumerate(keys) if k not in touched]
        if len(keep) == len(keys):
            return
        self.dropped += len(keys) - len(keep)
        chunk.keys = [keys[i] for i in keep]
        chunk.batches = split_rows(chunk.batches, keep)

    @staticmethod
    def _partial_updates(batch: pa.RecordBatch) -> list[int]:
        """The rows of ``batch`` that are UPDATEs with a TOAST value left unsent."""
        if "_unchanged" not in batch.schema.names or "_op" not in batch.schema.names:
            return []
        n = pc.list_value_length(batch.column("_unchanged")).fill_null(0)
        mask = pc.and_(pc.greater(n, 0), pc.equal(batch.column("_op"), "update"))
        return _true(mask)

    @staticmethod
    def _read_past(t: OnlineTable, p: Progress, key: Key) -> bool:
        """Whether the key range read (and handed out) so far holds ``key``."""
        return p.done or (p.after is not None and t.sort_key(key) <= t.sort_key(p.after))

    @staticmethod
    def _in_range(t: OnlineTable, p: Progress, chunk: Chunk, key: Key) -> bool:
        """Whether ``key`` is in the key range ``chunk`` read (past what was read before)."""
        if p.done or OnlineSnapshot._read_past(t, p, key):
            return False
        return chunk.ends or (chunk.last is not None and t.sort_key(key) <= t.sort_key(chunk.last))

    def _held_whole(self, t: OnlineTable, p: Progress, key: Key) -> bool:
        """Whether the replica holds the row of ``key`` whole (as far as this snapshot
        knows): its range was handed out and it is not waiting to be read again."""
        return self._read_past(t, p, key) and key not in p.again

    def release(self) -> tuple[Chunk, dict[str, Any]]:
        """The waiting chunk, once its watermark passed in the stream, and the progress
        that includes it: the table's last key read, the keys read again settled, those to
        read once more added."""
        chunk, self.chunk = self.chunk, None
        assert chunk is not None
        p = chunk.progress
        if chunk.last is not None:
            p.after = chunk.last
        if chunk.ends:
            p.done = True
        p.again = (p.again - chunk.reread) | chunk.again
        if chunk.snapshot_name:
            chunk.exported = self.reader.exported(chunk)
            self.rows += chunk.exported.rows
        else:
            self.rows += sum(b.num_rows for b in chunk.batches)
        self.dirty = False
        return chunk, self.state

    def close(self) -> None:
        """Closes its connections (an exported chunk's transaction ends with its own)."""
        self.reader.close()


@dataclasses.dataclass
class Flush:
    """A decoder flush cut where a chunk's watermark is: the changes committed below the
    chunk's position ``cut`` (handed out at ``cut``), the chunk (at ``cut + 1``: the position
    is inside the watermark's WAL record, one byte below its end E, where the next record,
    maybe a commit, starts; an output tells a chunk it holds, rows below the handled
    position, from one a kill cut short), then the others; each part with the state it
    carries (None: unchanged)."""

    pre: list[Item]
    pre_state: dict[str, Any] | None
    chunk: Chunk
    state: dict[str, Any]
    post: list[Item]
    post_state: dict[str, Any] | None
    cut: int


def split_at(batch: pa.RecordBatch, lsn: int) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """``batch``'s rows committed below ``lsn`` and the others (rows come in commit order;
    a message outside any transaction is placed by its own LSN)."""
    names = batch.schema.names
    col = next((c for c in ("_commit_lsn", "commit_lsn") if c in names), None)
    if col is None or batch.num_rows == 0:
        return batch.slice(0, 0), batch
    at = batch.column(col)
    if "_lsn" in names:
        at = pc.coalesce(at, batch.column("_lsn"))
    below = pc.less(at.fill_null(1 << 62), lsn)
    n = int(pc.sum(below).as_py() or 0)
    if pc.all(below.slice(0, n)).as_py() is not False:
        return batch.slice(0, n), batch.slice(n)
    rows = below.to_pylist()
    return (split_rows([batch], [i for i, b in enumerate(rows) if b])[0],
            split_rows([batch], [i for i, b in enumerate(rows) if not b])[0])


def _xids(batch: pa.RecordBatch) -> pa.Array:
    return batch.column("_xid").fill_null(0).cast(pa.int64())


def _true(mask: pa.BooleanArray) -> list[int]:
    """The indices where ``mask`` is true."""
    return [int(i) for i in pc.indices_nonzero(mask.fill_null(False)).to_pylist()]


def _rows(batch: pa.RecordBatch, rows: Sequence[int]) -> pa.RecordBatch:
    """The rows ``rows`` (ascending) of ``batch``, as slices: pyarrow's take and filter have
    no kernel for the view columns of text and bytea."""
    return split_rows([batch], list(rows))[0] if rows else batch.slice(0, 0)


def split_rows(batches: Sequence[pa.RecordBatch], rows: Sequence[int]) -> list[pa.RecordBatch]:
    """The rows ``rows`` (ascending indices over the batches one after the other), as one
    batch per input batch that keeps any (slices concatenated)."""
    out = []
    start = 0
    it = iter(rows)
    nxt = next(it, None)
    for b in batches:
        end = start + b.num_rows
        pieces = []
        while nxt is not None and nxt < end:
            first = nxt
            last = nxt
            nxt = next(it, None)
            while nxt is not None and nxt == last + 1 and nxt < end:
                last = nxt
                nxt = next(it, None)
            pieces.append(b.slice(first - start, last - first + 1))
        if pieces:
            out.append(pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces))
        start = end
    return out if out or not batches else [batches[0].slice(0, 0)]


def _read_state(state: Mapping[str, Any] | None) -> tuple[dict[str, Mapping[str, Any]], list[str]]:
    if not state:
        return {}, []
    if state.get("version") != STATE_VERSION or not isinstance(state.get("tables"), Mapping):
        raise ValueError(f"snapshot_state is not an online snapshot's state (version {STATE_VERSION}): "
                         f"{str(state)[:200]}")
    return dict(state["tables"]), [str(t) for t in state.get("exported", [])]
