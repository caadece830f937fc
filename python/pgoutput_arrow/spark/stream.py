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
* ``latestOffset`` reads the slot with ``pg_logical_slot_peek_binary_changes`` up to the
  server's flushed WAL position (peeking does not consume), and returns that position, or the
  end of the last whole transaction that fits the read limit. It keeps the messages it
  peeked (under a limit, READ_AHEAD batches' worth: the next polls cut their batches from
  them without a peek), and ``partitions`` hands those of the batch to the executor inside
  the partition: the server decodes a micro-batch's WAL once. A batch planned without that peek (a query
  restarted from its checkpoint re-runs its last batch) is read by peeking again up to the
  batch's end. Either way ``read`` decodes the transactions that commit inside the batch,
  with the same code: re-reading a batch after a restart gives the same rows.
* ``commit(end)`` — called by Spark once the micro-batch is in its commit log — is the only
  place the slot moves: ``pg_replication_slot_advance(slot, end)``. The server may then
  discard the WAL before ``end``.

Transactions are sent whole, at their commit (pgoutput without ``streaming``), so a batch never
holds part of one. Slots created with ``two_phase`` are refused: their prepared transactions
would be decoded at PREPARE, and a slot advanced past a PREPARE does not send its changes again.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterator, Mapping, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from .. import _internal
from .._internal import lsn_to_int as parse_lsn
from .._internal import lsn_to_str
from .._catalog import relation_definition
from .._pg import classify_connect_error, close_quietly, quote_ident, with_output_settings
from ..exceptions import ReplicationError, SlotInUse, SlotNotFound
from ..live.slot import check_publications, check_usable, slot_row
from ..live.slot_guard import drop_unused_slot
from ..live.snapshot import SnapshotChunk, SnapshotGone
from ._common import from_executor, is_table_column, ranked_seq, spark_schema, with_seq
from .generic import UDTF_SCHEMA, changes_to_generic
from .snapshot import SparkSnapshot, read_chunk_batches
from .snapshot import snapshot as take_snapshot
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, to_spark_arrow_schema

__all__ = ["PgoutputStreamReader", "StreamSource", "LsnRange", "SnapshotRange", "Peeked", "stream_schema",
           "read_range", "decode_range"]

#: Without changes to the publication, the offset still moves once the server has written
#: this much other WAL, so that an idle slot does not hold it (an empty micro-batch).
DEFAULT_IDLE_ADVANCE_BYTES = 16 << 20

#: After a poll that found nothing, the next one waits this long (Spark polls every 10 ms).
DEFAULT_POLL_INTERVAL_S = 1.0

#: The stream asks for text tuple data (``peek_options``): say so, so that enum and composite
#: columns are typed the same in the schema (built before any data) and in every batch.
#: Arrays nest one level (the schema is built before any data): a micro-batch must not learn
#: another depth from its own first array; arrays of another depth are kept in _special.
DECODER_OPTIONS: dict[str, Any] = {"views": False, "binary": False, "array_ndims": 1, **SPARK_DECODER_OPTIONS}

#: Change messages (Insert, Update, Delete, Truncate), counted for read limits.
#: describe_messages' `kind` names of the row changes, and of a Commit.
_CHANGE_KIND_NAMES = pa.array(["insert", "update", "delete", "truncate"])
_COMMIT = "commit"

#: ``latestOffset`` keeps what it peeked for the batch's partition up to this many bytes of
#: messages; a bigger batch is peeked again by its executor (driver memory stays bounded).
MAX_CARRIED_BYTES = 256 << 20

#: Under maxChangesPerTrigger a poll peeks this many batches' worth of changes ahead (within
#: MAX_CARRIED_BYTES), and the next polls cut their batches from what it kept.
READ_AHEAD = 4

#: The messages of a peek are fetched from the server in chunks of this many.
_FETCH_ROWS = 20000

_T = TypeVar("_T")


# --------------------------------------------------------------------------- options

@dataclasses.dataclass(frozen=True)
class StreamSource:
    """The stream's options, checked: what every side (driver, executors) needs to reach the
    slot. ``table`` is ``"schema.table"``, or None for the generic change schema."""

    dsn: str
    slot: str
    publications: tuple[str, ...]
    table: str | None
    max_changes: int | None
    idle_advance_bytes: int
    poll_interval: float
    connect_timeout: int
    snapshot: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "StreamSource":
        opts = {k.lower(): v for k, v in options.items()}
        missing = [k for k in ("dsn", "slot", "publication") if not opts.get(k)]
        if missing:
            raise ValueError(
                "spark.readStream.format('pgoutput') needs the options dsn (libpq connection "
                "string), slot (a logical slot with plugin pgoutput) and publication; missing: "
                + ", ".join(missing))
        table = opts.get("table") or None
        if table is not None and "." not in table:
            raise ValueError(f"option table must be schema-qualified ('public.{table}'), "
                             f"not {table!r}")
        pubs = tuple(p.strip() for p in opts["publication"].split(",") if p.strip())
        return cls(
            dsn=opts["dsn"], slot=opts["slot"], publications=pubs, table=table,
            max_changes=_int_option(opts, "maxChangesPerTrigger", None, minimum=1),
            idle_advance_bytes=_int_option(opts, "idleAdvanceBytes", DEFAULT_IDLE_ADVANCE_BYTES,
                                           minimum=0) or 0,
            poll_interval=_float_option(opts, "pollInterval", DEFAULT_POLL_INTERVAL_S),
            connect_timeout=_int_option(opts, "connectTimeout", 10, minimum=1) or 10,
            snapshot=_bool_option(opts, "snapshot"),
        )

    # ---------------------------------------------------------------- SQL

    def connect(self, autocommit: bool = True) -> Any:
        """A connection of the driver or of an executor; the peeks print text-mode values
        under its session's settings, so it carries the package's output settings."""
        import psycopg2

        try:
            conn = psycopg2.connect(with_output_settings(self.dsn), connect_timeout=self.connect_timeout)
        except psycopg2.Error as e:
            raise classify_connect_error(e, "pgoutput stream: cannot connect") from None
        conn.autocommit = autocommit
        return conn

    def peek_options(self) -> list[str]:
        # Protocol 1 without streaming: every transaction arrives whole at its commit.
        return ["proto_version", "1",
                "publication_names", ",".join(quote_ident(p) for p in self.publications)]

    def check(self, cur: Any) -> int | None:
        """Clear errors before anything is read: the slot exists, is a pgoutput slot of
        this database without two_phase, no walsender streams it, the publications exist and
        publish ``table``. Returns the slot's ``confirmed_flush_lsn``; with ``snapshot``, None
        if the slot does not exist yet (the query creates it)."""
        cur.execute("SELECT current_database()")
        dbname = cur.fetchone()[0]
        row = slot_row(cur, self.slot)
        if row is None and self.snapshot:
            self._check_publications(cur, dbname)
            return None
        if row is None:
            raise SlotNotFound(
                f'pgoutput stream: replication slot "{self.slot}" does not exist in database '
                f"{dbname} (create it with SELECT pg_create_logical_replication_slot("
                f"'{self.slot}', 'pgoutput'))")
        check_usable(row, dbname, where="pgoutput stream: ")
        if row.get("two_phase"):
            raise ReplicationError(
                f'pgoutput stream: replication slot "{self.slot}" was created with two_phase: '
                "its prepared transactions would be decoded at PREPARE, and a slot advanced "
                "past a PREPARE never sends those changes again; use a slot without two_phase")
        self._check_publications(cur, dbname)
        return parse_lsn(row["confirmed_flush_lsn"])

    def _check_publications(self, cur: Any, dbname: str) -> None:
        check_publications(cur, self.publications, dbname, where="pgoutput stream: ")
        if self.table is not None:
            cur.execute("SELECT DISTINCT schemaname || '.' || tablename FROM pg_publication_tables"
                        " WHERE pubname = ANY(%s) ORDER BY 1", (list(self.publications),))
            published = [r[0] for r in cur.fetchall()]
            if self.table not in published:
                raise ValueError(
                    f"pgoutput stream: table {self.table} is not in publication "
                    f"{', '.join(self.publications)}; it publishes {published}")

    def confirmed_flush(self, cur: Any) -> int:
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s", (self.slot,))
        row = cur.fetchone()
        if row is None:
            raise SlotNotFound(f'pgoutput stream: replication slot "{self.slot}" no longer exists')
        if row[0] is None:
            raise ReplicationError(f'pgoutput stream: replication slot "{self.slot}" was '
                                   "invalidated (no confirmed_flush_lsn): its WAL is gone")
        return parse_lsn(row[0])

    def check_not_consumed(self, cur: Any, start: int) -> int:
        """The slot must not be past ``start``: what lies between was consumed elsewhere.
        Returns the slot's position."""
        confirmed = self.confirmed_flush(cur)
        if confirmed > start:
            raise ReplicationError(
                f'pgoutput stream: replication slot "{self.slot}" is at {lsn_to_str(confirmed)}, '
                f"past this micro-batch's start {lsn_to_str(start)}: the changes between were "
                "consumed by someone else (another query on the same slot, or "
                "pg_replication_slot_advance / pg_logical_slot_get_changes); exactly-once output "
                "is no longer possible from this checkpoint")
        return confirmed


def _int_option(opts: Mapping[str, str], key: str, default: int | None,
                minimum: int) -> int | None:
    """``opts`` has lower-case keys (Spark's options are case-insensitive); ``key`` is the
    documented spelling, used in messages."""
    text = opts.get(key.lower())
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {text!r}") from None
    if value < minimum:
        raise ValueError(f"option {key} must be at least {minimum}, not {value}")
    return value


def _bool_option(opts: Mapping[str, str], key: str) -> bool:
    text = (opts.get(key.lower()) or "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"option {key} must be true or false, not {text!r}")
    return text == "true"


def _float_option(opts: Mapping[str, str], key: str, default: float) -> float:
    text = opts.get(key.lower())
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"option {key} must be a number of seconds, not {text!r}") from None
    if value < 0:
        raise ValueError(f"option {key} must not be negative, not {value}")
    return value


def _retry_in_use(fn: Any, *args: Any, attempts: int = 50) -> Any:
    """Run a slot function, waiting out a short overlap with another user of the slot (the
    previous query's backend still releasing it): ``55006`` object in use."""
    import psycopg2

    for attempt in range(attempts):
        try:
            return fn(*args)
        except psycopg2.Error as e:
            if getattr(e, "pgcode", None) != "55006" or attempt == attempts - 1:
                raise classify_connect_error(e, "pgoutput stream") from None
            time.sleep(0.2)
    raise AssertionError("unreachable")


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
        source.check(cur)
        if source.table is None:
            return UDTF_SCHEMA
        schema = _relation_schema(cur, source.table, source.publications)
    finally:
        conn.close()
    return spark_schema(to_spark_arrow_schema(schema, time_type))


# --------------------------------------------------------------------------- the reader

class LsnRange(InputPartition):
    """One micro-batch: the transactions whose commit LSN is in ``[start, end)``, with the
    slot's messages for it (``lsn``, ``data``) when the driver peeked them already, or None
    (then ``read`` peeks the slot)."""

    def __init__(self, start: int, end: int, messages: pa.RecordBatch | None = None) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.messages = messages


class SnapshotRange(InputPartition):
    """A chunk of the snapshot's micro-batch, read inside the exported snapshot."""

    def __init__(self, snapshot_name: str, chunk: SnapshotChunk) -> None:
        super().__init__(chunk.index)
        self.snapshot_name = snapshot_name
        self.chunk = chunk


@dataclasses.dataclass(frozen=True)
class Peeked:
    """What ``latestOffset`` read from the slot: every message of the transactions committing
    from the slot's position (at most ``first``) up to ``covered`` (exclusive), in order, and
    where each transaction's Commit is: ``commit_rows`` (row numbers), ``commit_lsns``,
    ``end_lsns`` and ``changes`` (changes up to and including it, counted from the first)."""

    first: int
    covered: int
    messages: pa.RecordBatch
    commit_rows: np.ndarray
    commit_lsns: np.ndarray
    end_lsns: np.ndarray
    changes: np.ndarray

    def commits(self, begin: int, upto: int) -> list[tuple[int, int, int]] | None:
        """What a peek up to ``upto`` would say of the transactions from ``begin`` on (as
        ``_commits``), if this one holds them all; else None."""
        if begin < self.first or upto > self.covered:
            return None
        return self.commits_before(upto)

    def commits_before(self, upto: int) -> list[tuple[int, int, int]]:
        n = int(np.searchsorted(self.commit_lsns, upto, side="left"))
        return list(zip(self.commit_lsns[:n].tolist(), self.end_lsns[:n].tolist(),
                        self.changes[:n].tolist()))

    def cut(self, start: int, end: int) -> pa.RecordBatch | None:
        """The messages a batch ``[start, end)`` needs, or None if this peek does not hold it:
        up to the Commit of its last transaction; the changes of the transactions before
        ``start`` left out (their Begin, Relation, Type and Commit messages stay, so that the
        decoder knows the relations the batch's changes refer to)."""
        if start < self.first or end > self.covered:
            return None
        last = int(np.searchsorted(self.commit_lsns, end, side="left"))  # commits before end
        if last == 0 or self.commit_lsns[last - 1] < start:
            return self.messages.slice(0, 0)
        upto = int(self.commit_rows[last - 1]) + 1
        batch = self.messages.slice(0, upto)
        before = int(np.searchsorted(self.commit_lsns, start, side="left"))
        if before == 0:
            return batch
        # Rows up to the Commit of the last transaction before start: keep all but changes.
        split = int(self.commit_rows[before - 1]) + 1
        kinds = _described(batch.column(1).slice(0, split)).column("kind")
        keep = np.r_[~_is_change(kinds), np.ones(upto - split, bool)]
        return batch.filter(pa.array(keep))


def _described(data: pa.Array) -> pa.Table:
    """Each message's kind name, and a commit's LSNs, as the crates read them."""
    return pa.table(_internal.describe_messages(pa.table({"data": data})))


def _is_change(kinds: pa.ChunkedArray | pa.Array) -> np.ndarray:
    mask = pc.is_in(kinds, value_set=_CHANGE_KIND_NAMES).fill_null(False)
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _after(commits: list[tuple[int, int, int]], begin: int
           ) -> tuple[list[tuple[int, int, int]], int]:
    """The transactions committing at or after ``begin``, and the change count before them."""
    pending = [(c, e, n) for c, e, n in commits if c >= begin]
    before = max((n for c, _, n in commits if c < begin), default=0)
    return pending, before


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
    docstring. The driver-side methods keep one SQL connection; ``read`` opens its own."""

    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.source = StreamSource.from_options(options)
        self.schema = schema
        self._conn: Any = None
        self._target: int | None = None  # Trigger.AvailableNow: never past this LSN
        self._next_poll = 0.0
        self._peeked: Peeked | None = None  # the last poll's messages, for partitions()
        # With the option snapshot: the snapshot this query exported when it created the
        # slot, until Spark commits the micro-batch that reads it.
        self._snapshot: SparkSnapshot | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_peeked"] = None  # the executors get theirs in the partition
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
        confirmed = self._on_server(self.source.check)
        source = self.source
        if confirmed is not None and source.snapshot:
            raise ReplicationError(
                f'pgoutput stream: option snapshot: replication slot "{source.slot}" exists '
                "already, and a snapshot is exported only by the slot's creation: drop the "
                "slot (or name a new one) for a snapshot, or leave snapshot off to stream "
                "from the slot's position")
        if confirmed is not None:
            return _offset(confirmed)
        self._snapshot = take_snapshot(
            None, source.dsn, slot=source.slot, publication=list(source.publications),
            tables=[source.table] if source.table else None, connect_timeout=source.connect_timeout)
        return {**_offset(self._snapshot.lsn), "snapshot": "pending"}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_changes is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.source.max_changes)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._on_server(_flushed_wal)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, str]:
        begin = _offset_lsn(start)
        if "snapshot" in start:
            return _offset(begin)  # the whole snapshot, one micro-batch
        wait = self._next_poll - time.monotonic()
        if wait > 0:
            time.sleep(wait)

        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None

        def poll(cur: Any) -> tuple[int, list[tuple[int, int, int]], bool]:
            slot_at = self.source.check_not_consumed(cur, begin)
            upto = _flushed_wal(cur)
            if self._target is not None:
                upto = min(upto, self._target)
            if upto <= begin:
                return upto, [], False
            peeked = self._peeked
            if peeked is not None and peeked.first <= begin:
                # The last poll read ahead: if what it holds decides this cut, no new peek.
                known = peeked.commits(begin, upto)
                if known is not None:
                    return upto, known, False
                if max_rows is not None and begin <= peeked.covered:
                    held = peeked.commits_before(min(upto, peeked.covered))
                    pending, before = _after(held, begin)
                    if pending and pending[-1][2] - before > max_rows:
                        return upto, held, True
            if max_rows is None:
                return upto, self._commits(cur, slot_at, upto, None)[0], False
            # With a limit, the server is asked to stop after the transaction in which the
            # bound-th message falls, so that a poll does not decode the whole backlog. The
            # bound grows until the peek either reached `upto` or saw a transaction that
            # no longer fits: then the cut is the same as with everything read. (A quarter
            # more than the limit, for Begin, Commit and Relation messages and the next
            # transaction, usually does it at once.)
            # The slot trails the query by a batch (Spark commits batch N when it plans N+1):
            # the messages before `begin` that the last poll saw count on top, or the first
            # peek would mostly read the batch before and have to be done again.
            # It reads READ_AHEAD batches' worth, so that the next polls are answered from
            # what it kept, and the server decodes the batch before again only once in a while.
            bound = READ_AHEAD * (max_rows + max_rows // 4 + 16) + self._rows_before(begin)
            while True:
                commits, messages = self._commits(cur, slot_at, upto, bound)
                pending, before = _after(commits, begin)
                limited = messages >= bound
                if not limited or (pending and pending[-1][2] - before > max_rows):
                    return upto, commits, limited
                bound *= 2

        upto, commits, limited = self._on_server(poll)
        if upto <= begin:
            return _offset(begin)
        pending, before = _after(commits, begin)
        end = upto
        if max_rows is not None and pending and (limited or pending[-1][2] - before > max_rows):
            # Whole transactions, at least one: up to the end of the last that fits.
            taken = [p for p in pending if p[2] - before <= max_rows] or pending[:1]
            end = taken[-1][1]
        elif not pending and upto - begin < self.source.idle_advance_bytes:
            end = begin
        self._next_poll = time.monotonic() + (self.source.poll_interval if end == begin else 0.0)
        return _offset(end)

    def _rows_before(self, lsn: int) -> int:
        """How many messages the last poll read before the transactions committing at or
        after ``lsn`` (0 if it did not reach ``lsn``)."""
        peeked = self._peeked
        if peeked is None or peeked.covered < lsn:
            return 0
        n = int(np.searchsorted(peeked.commit_lsns, lsn, side="left"))
        return int(peeked.commit_rows[n - 1]) + 1 if n else 0

    def _commits(self, cur: Any, slot_at: int, upto: int, bound: int | None
                 ) -> tuple[list[tuple[int, int, int]], int]:
        """The transactions the slot (at ``slot_at``) has before ``upto`` (at most up to the one in which the
        ``bound``-th message falls): (commit LSN, end LSN, changes up to and including it,
        counted from the slot's position) each, and the number of messages read. The messages
        are kept in ``self._peeked`` (if they fit MAX_CARRIED_BYTES) for ``partitions``."""
        conn = cur.connection

        def run() -> tuple[list[tuple[int, int, int]], int]:
            self._peeked = None
            chunks: list[pa.RecordBatch] = []
            carried = 0
            commit_rows: list[np.ndarray] = []
            commit_lsns: list[np.ndarray] = []
            end_lsns: list[np.ndarray] = []
            counts: list[np.ndarray] = []
            changes = rows_read = 0
            # A server-side cursor (it needs a transaction): the messages come in chunks.
            conn.autocommit = False
            try:
                named = conn.cursor(name="pgoutput_stream_poll")
                named.execute(
                    "SELECT (lsn - '0/0'::pg_lsn)::int8, data FROM "
                    "pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s, VARIADIC %s)",
                    (self.source.slot, lsn_to_str(upto), bound, self.source.peek_options()))
                while rows := named.fetchmany(_FETCH_ROWS):
                    batch = pa.record_batch(
                        [pa.array([r[0] for r in rows], pa.int64()),
                         pa.array([bytes(r[1]) for r in rows], pa.binary())], names=["lsn", "data"])
                    described = _described(batch.column(1))
                    kinds = described.column("kind")
                    cumulative = changes + np.cumsum(_is_change(kinds))
                    is_commit = pc.equal(kinds, _COMMIT).fill_null(False).to_numpy(zero_copy_only=False)
                    at = np.flatnonzero(np.asarray(is_commit, dtype=bool))
                    if len(at):
                        ends = described.take(pa.array(at))
                        commit_rows.append(at + rows_read)
                        commit_lsns.append(ends.column("commit_lsn").to_numpy())
                        end_lsns.append(ends.column("end_lsn").to_numpy())
                        counts.append(cumulative[at])
                    changes = int(cumulative[-1])
                    rows_read += len(rows)
                    carried += batch.nbytes
                    if carried <= MAX_CARRIED_BYTES:
                        chunks.append(batch)
                named.close()
            finally:
                conn.rollback()  # read only: ends the transaction, failed or not
                conn.autocommit = True
            if not commit_rows:
                return [], rows_read
            c_rows, c_lsns = np.concatenate(commit_rows), np.concatenate(commit_lsns)
            e_lsns, c_counts = np.concatenate(end_lsns), np.concatenate(counts)
            commits = list(zip(c_lsns.tolist(), e_lsns.tolist(), c_counts.tolist()))
            kept = sum(c.num_rows for c in chunks)
            whole = int(np.searchsorted(c_rows, kept, side="left"))  # commits among them
            if whole:
                # Whole transactions: the last message is a Commit. Without a bound the peek
                # holds every transaction committing before upto; with one, up to its last;
                # past MAX_CARRIED_BYTES, up to the last one kept.
                if whole < len(c_rows):
                    covered = int(e_lsns[whole - 1])
                else:
                    covered = upto if bound is None or rows_read < bound else int(e_lsns[-1])
                upto_row = int(c_rows[whole - 1]) + 1
                batch = pa.Table.from_batches(chunks).slice(0, upto_row).combine_chunks().to_batches()[0]
                self._peeked = Peeked(slot_at, covered, batch, c_rows[:whole], c_lsns[:whole],
                                      e_lsns[:whole], c_counts[:whole])
            return commits, rows_read

        result: tuple[list[tuple[int, int, int]], int] = _retry_in_use(run)
        return result

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if "snapshot" in start:
            return self._snapshot_partitions(_offset_lsn(start))
        # One partition: the slot is one ordered stream, read by one peek.
        first, last = _offset_lsn(start), _offset_lsn(end)
        if last <= first:
            return []
        messages = self._peeked.cut(first, last) if self._peeked is not None else None
        if messages is not None:
            # The executor will not look at the slot: check here that nobody consumed it.
            self._on_server(lambda cur: self.source.check_not_consumed(cur, first))
        return [LsnRange(first, last, messages)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        if isinstance(partition, SnapshotRange):
            changes = RangeChanges({partition.chunk.table: pa.Table.from_batches(
                list(read_chunk_batches(self.source.dsn, partition.snapshot_name, partition.chunk,
                                        None, self.source.connect_timeout)))}, pa.table({}))
            yield from (_generic_batches(changes, target) if self.source.table is None
                        else _table_batches(self.source, changes, target))
            return
        if not isinstance(partition, LsnRange):
            raise TypeError(f"pgoutput stream: not a partition of this source: {partition!r}")
        if partition.messages is None:
            changes = read_range(self.source, partition.start, partition.end)
        else:
            changes = decode_range([partition.messages], partition.start, partition.end)
        if self.source.table is None:
            yield from _generic_batches(changes, target)
        else:
            yield from _table_batches(self.source, changes, target)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has committed every batch up to ``end``: only now does the slot move."""
        lsn = _offset_lsn(end)
        if "snapshot" in end:
            return
        if self._snapshot is not None:
            self._snapshot.close()  # its micro-batch is committed: the rows are not read again
            self._snapshot = None

        def advance(cur: Any) -> None:
            if self.source.confirmed_flush(cur) < lsn:
                _retry_in_use(cur.execute, "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
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
        conn, self._conn = self._conn, None
        close_quietly(conn)


# --------------------------------------------------------------------------- reading a batch

@dataclasses.dataclass
class RangeChanges:
    """The decoded changes of one micro-batch: ``tables`` (only rows of transactions that
    commit in the batch, ``_seq`` renumbered), and the TRUNCATEs (same rule)."""

    tables: dict[str, pa.Table]
    truncates: pa.Table


def read_range(source: StreamSource, start: int, end: int) -> RangeChanges:
    """Peek the slot up to ``end`` and decode the transactions whose commit LSN is in
    ``[start, end)`` (``decode_range``); on an executor."""
    with from_executor(source.dsn, "a micro-batch the driver did not peek"):
        conn = source.connect(autocommit=False)
    try:
        cur = conn.cursor()
        source.check_not_consumed(cur, start)
        conn.commit()

        def peek() -> list[pa.RecordBatch]:
            chunks = []  # gathered anew for each attempt
            try:
                # A server-side cursor: the rows come in chunks, not all at once.
                named = conn.cursor(name="pgoutput_stream_peek")
                named.execute(
                    "SELECT (lsn - '0/0'::pg_lsn)::int8, data FROM "
                    "pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, VARIADIC %s)",
                    (source.slot, lsn_to_str(end), source.peek_options()))
                while rows := named.fetchmany(_FETCH_ROWS):
                    chunks.append(pa.record_batch(
                        [pa.array([r[0] for r in rows], pa.int64()),
                         pa.array([bytes(r[1]) for r in rows], pa.binary())], names=["lsn", "data"]))
                named.close()
            finally:
                conn.rollback()  # read only: ends the transaction, failed or not
            return chunks

        messages: list[pa.RecordBatch] = _retry_in_use(peek)
    finally:
        conn.close()
    return decode_range(messages, start, end)


def decode_range(messages: list[pa.RecordBatch], start: int, end: int) -> RangeChanges:
    """Decode the slot's messages (``lsn``, ``data``, from the slot's position on, whole
    transactions) and keep the transactions whose commit LSN is in ``[start, end)``.
    ``_seq`` becomes the row's rank within its transaction (:func:`ranked_seq`: in the
    decoder's order, which is the transaction's), so that a batch read again after a restart gives the same rows
    whatever the slot's position was when it was read."""
    import pgoutput_arrow

    decoder = pgoutput_arrow.Decoder(**DECODER_OPTIONS)
    for batch in messages:
        decoder.feed_batch(batch)
    decoded = decoder.finish()

    def inside(t: pa.Table) -> pa.Table:
        commit = t.column("_commit_lsn")
        keep = pc.and_(pc.greater_equal(commit, pa.scalar(start, commit.type)),
                       pc.less(commit, pa.scalar(end, commit.type)))
        return t.filter(pc.fill_null(keep, False))

    tables = {name: inside(t) for name, t in decoded.tables.items()}
    tables = {name: t for name, t in tables.items() if t.num_rows}
    truncates = inside(decoded.truncates)
    seqs = ranked_seq(tables, truncates)
    tables = {name: with_seq(t, seqs[name]) for name, t in tables.items()}
    if truncates.num_rows:
        truncates = with_seq(truncates, seqs[""])
    return RangeChanges(tables, truncates)


def _table_batches(source: StreamSource, changes: RangeChanges,
                   target: pa.Schema) -> Iterator[pa.RecordBatch]:
    assert source.table is not None
    table = changes.tables.get(source.table)
    parts: list[pa.Table] = []
    if table is not None:
        _check_columns(source, table, target)
        parts.append(pa.Table.from_batches(
            [cast_for_spark(b, target) for b in table.to_batches(max_chunksize=65536)], target))
    truncates = changes.truncates
    if truncates.num_rows:
        mine = truncates.filter(pa.array([source.table in rels for rels in
                                          truncates.column("relations").to_pylist()]))
        if mine.num_rows:
            parts.append(_truncate_rows(mine, target))
    if not parts:
        return
    out = pa.concat_tables(parts).sort_by([("_commit_lsn", "ascending"), ("_seq", "ascending")])
    yield from out.combine_chunks().to_batches(max_chunksize=65536)


def _truncate_rows(truncates: pa.Table, target: pa.Schema) -> pa.Table:
    """One row per TRUNCATE of the table: ``_op = 'truncate'``, the data columns NULL."""
    n = truncates.num_rows
    given = {"_op": pa.array(["truncate"] * n, pa.string()),
             "_unchanged": pa.array([[]] * n, pa.list_(pa.string()))}
    for name in ("_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq"):
        given[name] = truncates.column(name).combine_chunks()
    arrays = []
    for f in target:
        if f.name in given:
            arrays.append(given[f.name].cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=target)


def _check_columns(source: StreamSource, table: pa.Table, target: pa.Schema) -> None:
    """A column the stream's schema lacks: if the table has it now, it was added after the
    query started, and its values would be lost: fail, so that a restarted query (which
    takes the schema again) reads this batch with it. A dropped column is left out."""
    extra = [f.name for f in table.schema if is_table_column(f) and f.name not in target.names]
    if not extra:
        return
    assert source.table is not None
    schema, name = source.table.split(".", 1)
    with from_executor(source.dsn, f"checking {source.table}'s columns"):
        conn = source.connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
                    "c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped AND "
                    "a.attname = ANY(%s)", (schema, name, extra))
        added = [r[0] for r in cur.fetchall()]
    finally:
        conn.close()
    if added:
        raise ReplicationError(
            f"pgoutput stream: {source.table} has column(s) {', '.join(added)} that the "
            "stream's schema (taken when the query was started) lacks; restart the query "
            "(from its checkpoint: nothing is lost) to read them")


def _generic_batches(changes: RangeChanges, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    batches = list(changes_to_generic(changes))
    if changes.truncates.num_rows:
        batches.append(_generic_truncates(changes.truncates, target))
    if not batches:
        return
    out = pa.Table.from_batches([pa.RecordBatch.from_arrays(list(b.columns), schema=target)
                                 for b in batches], target)
    out = out.sort_by([("commit_lsn", "ascending"), ("seq", "ascending")])
    yield from out.combine_chunks().to_batches(max_chunksize=65536)


def _generic_truncates(truncates: pa.Table, target: pa.Schema) -> pa.RecordBatch:
    """One row per truncated table of each TRUNCATE: ``op = 'truncate'``."""
    rows = truncates.to_pylist()
    out: dict[str, list[Any]] = {f.name: [] for f in target}
    for r in rows:
        for rel in r["relations"]:
            out["table"].append(rel)
            out["op"].append("truncate")
            out["lsn"].append(r["_lsn"])
            out["commit_lsn"].append(r["_commit_lsn"])
            out["commit_ts"].append(r["_commit_ts"])
            out["xid"].append(r["_xid"])
            out["seq"].append(r["_seq"])
            out["new"].append(None)
            out["old"].append(None)
            out["unchanged"].append([])
    return pa.RecordBatch.from_pydict(out, schema=target)
