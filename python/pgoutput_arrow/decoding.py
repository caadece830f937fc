"""The decoder's Python API: :func:`decode` for a whole capture, :class:`Decoder` for a
stream, :class:`Changes` and :class:`Output` for what they return, and the schema helpers
:func:`unify_schemas` and :func:`conform`. Re-exported by the package's ``__init__``; a module
of its own so that the live source can use the decoder without importing the package."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Sequence, cast

import pyarrow as pa

from . import _internal
from ._internal import lsn_to_int
from .capture import Capture, capture_from, capture_table, open_capture, out_of_order_hint

__all__ = ["decode", "Decoder", "Changes", "Output", "commit_column", "OutputKind", "SpecialValues", "EmitMode", "DateOrder",
           "IntervalType", "UuidType", "TimeType",
           "unify_schemas", "conform"]

SpecialValues = Literal["keep", "error", "null", "text"]
EmitMode = Literal["committed", "arrived", "immediate"]
DateOrder = Literal["MDY", "DMY", "YMD"]
IntervalType = Literal["struct", "month_day_nano"]
UuidType = Literal["text", "fixed_size_binary"]
TimeType = Literal["text", "time64"]
DatetimeRange = Literal["python", "arrow", "pandas"]
OutputKind = Literal["table", "truncates", "messages", "transactions"]


@dataclasses.dataclass(frozen=True)
class Output:
    """One decoded batch: what :meth:`Decoder.take` hands out, and what the live stream
    (:func:`~pgoutput_arrow.stream`, where it is also called ``LiveBatch``), ``pgoutput-dump``
    and every sink take. One type from the decoder to every sink.

    ``kind`` is ``"table"`` for changes of a relation (then ``table`` is ``"schema.table"``
    and ``version`` the number of its schema version, which a new Relation message
    increments), or ``"truncates"``, ``"messages"``, ``"transactions"``. It unpacks as
    ``kind, table, version, batch``.

    The live stream sets the rest: ``ack_lsn`` may be passed to ``LiveStream.ack`` once this
    batch and every batch before it are durable (0 from a :class:`Decoder`: nothing to
    acknowledge); ``snapshot`` marks rows of the initial snapshot (``_op = 'snapshot'``), not
    changes; ``snapshot_state``, on the last batch of each chunk of the online snapshot, its
    progress, to store with the chunk and give back as ``snapshot_state`` to resume there;
    ``read_elsewhere``, a chunk of the online snapshot whose rows are not in ``batch`` (no
    rows) but read under its exported snapshot by whoever takes it (Spark's executors:
    ``live.online_export.ExportedChunk``).
    """

    kind: OutputKind
    table: str | None
    version: int | None
    batch: pa.RecordBatch
    ack_lsn: int = 0
    snapshot: bool = False
    snapshot_state: Mapping[str, Any] | None = None
    read_elsewhere: Any = None

    def __iter__(self) -> Iterator[Any]:
        """``kind, table, version, batch``: what the decoder decided."""
        return iter((self.kind, self.table, self.version, self.batch))

    @property
    def name(self) -> str:
        """The table name for changes, else the kind (``truncates``, ``messages``, ...)."""
        return self.table if self.kind == "table" and self.table else self.kind

    @property
    def num_rows(self) -> int:
        return int(self.batch.num_rows)

    def commit_lsn_range(self) -> tuple[int, int] | None:
        """The smallest and largest ``_commit_lsn`` in the batch, when it has that column."""
        col = commit_column(self.batch)
        if col is None or self.batch.num_rows == 0:
            return None
        import pyarrow.compute as pc

        mm = pc.min_max(self.batch.column(col))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        return None if lo is None else (int(lo), int(hi))


def commit_column(batch: pa.RecordBatch) -> str | None:
    """The column of ``batch`` that holds each row's commit LSN, if it has one."""
    names = batch.schema.names
    for name in ("_commit_lsn", "commit_lsn"):
        if name in names:
            return name
    return None


def _to_pyarrow_table(native: Any) -> pa.Table:
    # Imported through __arrow_c_stream__: the buffers stay where Rust made them. Not
    # pa.table(), which imports pandas first to ask whether this is a DataFrame (0.4 s of
    # every pgoutput-dump run).
    return pa.RecordBatchReader.from_stream(native).read_all()


class Changes:
    """Everything decoded from a stream.

    ``tables``
        ``"schema.table"`` → ``pyarrow.Table`` of its changes in commit order, with the
        newest column set (older rows cast losslessly, dropped columns kept).
    ``table_versions``
        ``"schema.table"`` → list of ``pyarrow.Table``, one per schema version, as decoded.
    ``truncates``, ``messages``, ``transactions``
        ``pyarrow.Table`` s of TRUNCATEs, logical decoding messages and transactions.
    """

    tables: dict[str, pa.Table]
    table_versions: dict[str, list[pa.Table]]
    truncates: pa.Table
    messages: pa.Table
    transactions: pa.Table

    def __init__(self, native: dict[str, Any]) -> None:
        self.tables = {name: _to_pyarrow_table(t) for name, t in native["tables"].items()}
        self.table_versions = {
            name: [_to_pyarrow_table(t) for t in versions]
            for name, versions in native["table_versions"].items()
        }
        self.truncates = _to_pyarrow_table(native["truncates"])
        self.messages = _to_pyarrow_table(native["messages"])
        self.transactions = _to_pyarrow_table(native["transactions"])

    def __repr__(self) -> str:
        tables = ", ".join(f"{name!r}: {t.num_rows} rows" for name, t in self.tables.items())
        return (
            f"Changes(tables={{{tables}}}, truncates={self.truncates.num_rows}, "
            f"messages={self.messages.num_rows}, transactions={self.transactions.num_rows})"
        )

    def __getitem__(self, table: str) -> pa.Table:
        """``changes["public.t"]`` is ``changes.tables["public.t"]``."""
        return self.tables[table]


class Decoder:
    """Incremental decoder: feed messages as they arrive, take batches as they complete.

    Options (all keyword-only):

    ``special_values``
        What to do with a value PostgreSQL accepted that no Arrow value of its column's type
        can hold (``time '24:00:00'``, NaN or Infinity in ``numeric(p,s)``, a timestamp
        beyond int64 microseconds, an array whose lower bound is not 1): ``"keep"`` (the
        default) stores NULL in the column and PostgreSQL's exact text of the value in the
        row's ``_special`` column (``map<utf8, utf8>``: column name → text, key
        ``"_before.<column>"`` for an old value; null when the row has none), so decoding
        never stops, never loses a value and the column keeps its type. Opt-in policies:
        ``"error"`` raises :class:`DecodeValueError` naming table, column and LSN;
        ``"null"`` stores NULL (and ±infinity dates and timestamps too) and loses the value;
        ``"text"`` decodes such columns as PostgreSQL's text instead. Except under
        ``"null"``, infinity dates and timestamps are the largest value of their Arrow
        type and -infinity the smallest plus one (DuckDB's ±infinity; pandas reads the
        smallest timestamp as NaT).
    ``views``
        Build text and binary columns as view arrays (``string_view``, ``binary_view``) that
        point into the input messages (zero copy) instead of copying values into plain
        ``string``/``binary`` columns (the default). Plain columns are what every consumer
        takes; pyarrow's ``filter``, ``sort_by``, ``take`` and ``join`` and pandas'
        conversion of lists refuse views, which Arrow IPC, DuckDB and polars take.
    ``interval``
        ``"struct"`` (the default): interval columns are ``struct<months: int32, days:
        int32, microseconds: int64>``, PostgreSQL's own fields, exact for every interval
        (``pg.type_name`` = ``interval`` in the field metadata). ``"month_day_nano"``:
        Arrow's interval type (DuckDB's INTERVAL; polars, Spark and Delta have no such
        type), where a time part beyond int64 nanoseconds is a special value.
    ``uuid``
        ``"text"`` (the default): uuid columns are ``string``, PostgreSQL's canonical text
        (pyarrow sorts, groups and joins them; pandas converts lists of them).
        ``"fixed_size_binary"``: 16 bytes with pyarrow's ``arrow.uuid`` extension type
        (pyarrow 26 neither sorts nor groups by it, pandas cannot convert a list of it).
    ``batch_size``
        Rows per output batch. A batch is also cut once its values reach 256 MiB.
    ``memory_limit``
        Bytes of buffered changes of open transactions kept in memory before spilling to
        ``spill_dir`` (a temporary directory when None). A transaction sent whole keeps up
        to half of it as decoded rows awaiting its commit, the rest of it as messages.
    ``emit``
        ``"committed"`` (the default): changes come out at their transaction's commit, in
        commit order. ``"arrived"`` (alias ``"immediate"``): as they arrive, with ``_status``
        and ``_subxid`` columns; the Transactions table says how each transaction ended.
    ``binary``
        Whether the slot was started with ``binary 'true'``. Only types the stream does not
        describe well enough to decode depend on it (enums, composites, extension types):
        binary with the raw send bytes (and ``pg.type_name`` in the field metadata) in a
        binary stream, utf8 with PostgreSQL's text in a text stream. None (the default)
        takes it from the stream: the first value cell of the first change says.
    ``array_ndims``
        How deep array columns nest: ``1`` is ``list<T>``, ``2`` ``list<list<T>>``, ...;
        ``0`` gives PostgreSQL's array text (any shape, any lower bounds). None (the
        default): ``1``, unless the column's first non-empty array, before its first
        batch comes out, has more dimensions; then that many. An array of another depth
        than its column's later is a special value (see ``special_values``).
    ``time``
        ``"text"`` (the default): time columns are ``string``, PostgreSQL's
        ``HH:MM:SS[.ffffff]`` (exact, ``24:00:00`` included; sorts correctly as text), which
        every consumer takes (Spark's default session refuses TIME). ``"time64"``:
        ``time64[us]`` (pyarrow's, polars' and DuckDB's time of day), where ``24:00:00`` is
        a special value.
    ``date_order``, ``timezone``
        Only for a capture printed under a DateStyle other than ISO (text mode; the live
        stream and the CLI pin ISO): ``date_order`` is DateStyle's field order, ``"MDY"``
        (PostgreSQL's default, and what YMD prints) or ``"DMY"``, which only the SQL
        (``01/02/2026``) and Postgres (``01-02-2026``) styles need; ``timezone`` is the
        TimeZone it was printed under (an IANA name, ``"Europe/Berlin"``), which turns the
        zone abbreviations those styles print for timestamptz (``CET``, ``LMT``) into
        offsets. Without it such a value raises :class:`DecodeValueError` naming it.
        Every IntervalStyle is read without an option.
    ``datetime_range``
        Which dates and timestamps the typed columns hold; the others are special values
        (null in the column, PostgreSQL's exact text in ``_special``; see
        ``special_values``). ``"python"`` (the default): what Python's ``datetime`` holds,
        0001-01-01 to 9999-12-31, so that ``to_pandas()``, ``to_pylist()`` and ``as_py()``
        take every row (±infinity, BC dates and years past 9999 are special).
        ``"arrow"``: every value of date32 and timestamp[us], infinity as the type's largest
        value and -infinity as its smallest plus one (DuckDB's ±infinity; polars reads
        them too). ``"pandas"``: as ``"python"``, with timestamps only from 1677-09-22 to
        2262-04-10 (pandas' ``datetime64[ns]`` less a day at each end for time zone
        offsets): the Spark integration asks for it, so that PySpark's ``collect()`` and
        ``toPandas()`` take every row.

    Typical loop::

        dec = Decoder()
        for lsn, data in messages:
            dec.feed(data, lsn)
            for out in dec.take():
                store(out.kind, out.table, out.batch)
            confirm(dec.safe_lsn)
        changes = dec.finish()

    A Decoder is not meant to be shared between threads: a call made while another
    thread is decoding raises RuntimeError instead of waiting.
    """

    def __init__(
        self,
        *,
        special_values: SpecialValues = "keep",
        views: bool = False,
        interval: IntervalType = "struct",
        uuid: UuidType = "text",
        time: TimeType = "text",
        batch_size: int | None = None,
        memory_limit: int | None = None,
        spill_dir: str | os.PathLike[str] | None = None,
        emit: EmitMode = "committed",
        binary: bool | None = None,
        array_ndims: int | None = None,
        date_order: DateOrder | None = None,
        timezone: str | None = None,
        datetime_range: DatetimeRange = "python",
    ) -> None:
        self._native = _internal.Decoder(
            special_values=special_values,
            views=views,
            interval=interval,
            uuid=uuid,
            time=time,
            batch_size=batch_size,
            memory_limit=memory_limit,
            spill_dir=os.fspath(spill_dir) if spill_dir is not None else None,
            emit=emit,
            binary=binary,
            array_ndims=array_ndims,
            date_order=date_order,
            timezone=timezone,
            datetime_range=datetime_range,
        )

    def feed(self, data: bytes | bytearray | memoryview, lsn: int | str | None = None) -> None:
        """Feeds one pgoutput message (the ``data`` of one row, or the payload of one
        XLogData frame) and the LSN it came with (int, ``'X/Y'``, or None for unknown: 0).
        The bytes are copied once; use :meth:`feed_batch` for many messages at a time."""
        if not isinstance(data, bytes):
            data = bytes(data)
        self._native.push(_lsn_value(lsn), data)

    def feed_batch(self, batch: Any) -> int:
        """Feeds every row of a capture-shaped Arrow object (columns ``lsn`` and ``data``):
        a pyarrow Table, RecordBatch or RecordBatchReader, or any object with
        ``__arrow_c_stream__``. Messages are not copied. Returns the number fed."""
        return self.feed_capture(capture_from(batch))

    def feed_capture(self, capture: Capture) -> int:
        """Feeds a whole :class:`Capture` (see :func:`open_capture`)."""
        fed: int = self._native.push_stream(capture.reader)
        return fed

    def feed_rebuilt(self, rows: Any, catalog: Any, *, history: bool = False, pieces: Sequence[int] = ()) -> int:
        """Feeds whole transactions in any order: the rows of ``rows`` (a capture-shaped Arrow
        object with ``lsn``, ``xid``, ``data`` and optionally a tie-breaker ``_tb``) rebuilt
        into one self-contained stream in commit order, with the Relation and Type messages
        they need taken from ``catalog`` (a capture, or its definition and framing rows), as
        ``pgoutput_arrow.spark`` rebuilds a partition; with ``history``, every definition of
        the catalog first. ``pieces``: the transactions ``rows`` hold only a part of, framed
        from ``catalog``. Messages are not copied. Returns the number fed."""
        fed: int = self._native.push_canonical(rows, catalog, history, list(pieces))
        return fed

    def take(self) -> list[Output]:
        """The batches completed so far (each handed out once)."""
        return [
            Output(cast(OutputKind, kind), table, version, pa.record_batch(native))
            for kind, table, version, native in self._native.take()
        ]

    def __iter__(self) -> Iterator[Output]:
        """Iterating takes what is ready: ``for out in dec: ...``."""
        return iter(self.take())

    def flush(self) -> None:
        """Completes the pending batches of committed changes, even if smaller than
        ``batch_size``, so that the next :meth:`take` returns them."""
        self._native.flush()

    def column_attnums(self, relation_id: int, columns: Mapping[str, int]) -> None:
        """Tells which attnum (``pg_attribute.attnum``) each column of ``relation_id`` has,
        as the catalog says now. The Relation messages fed after this are matched to the
        relation's earlier definitions by attnum, so that a rename is never taken for a drop
        plus an add or the reverse (without it, PostgreSQL's column order decides; see
        README, "Known limits"). The live source does this by itself."""
        self._native.column_attnums(relation_id, list(columns), list(columns.values()))

    @property
    def safe_lsn(self) -> int:
        """The LSN up to which every change has been handed out by :meth:`take`: what a
        consumer may confirm to the server (as flushed) once it has stored them."""
        lsn: int = self._native.safe_lsn
        return lsn

    @property
    def pending(self) -> tuple[int, int, int]:
        """Transactions begun whose outcome is not known yet (open, streamed, prepared):
        ``(count, bytes of their messages held in memory, bytes held in spill files)``."""
        value: tuple[int, int, int] = self._native.pending
        return value

    def finish(self) -> Changes:
        """Ends the stream and returns every change not yet taken, as whole tables.
        Transactions still open at the end are not included."""
        return Changes(self._native.finish())

    def __repr__(self) -> str:
        return repr(self._native)


def _lsn_value(lsn: int | str | None) -> int:
    if lsn is None:
        return 0
    if isinstance(lsn, str):
        return lsn_to_int(lsn)
    return int(lsn)


def decode(
    source: Any,
    *,
    special_values: SpecialValues = "keep",
    views: bool = False,
    interval: IntervalType = "struct",
    uuid: UuidType = "text",
    time: TimeType = "text",
    batch_size: int | None = None,
    memory_limit: int | None = None,
    spill_dir: str | os.PathLike[str] | None = None,
    binary: bool | None = None,
    array_ndims: int | None = None,
    date_order: DateOrder | None = None,
    timezone: str | None = None,
    datetime_range: DatetimeRange = "python",
    any_order: bool = False,
) -> Changes:
    """Decodes a whole capture and returns its :class:`Changes`.

    ``source`` is one of:

    * a path (``str`` or ``os.PathLike``) to a capture file: Parquet, Arrow IPC (file or
      stream; memory-mapped) or CSV, recognised by content, with the columns that
      ``pg_logical_slot_get_binary_changes`` returns: ``lsn`` (text ``'X/Y'``, int64 or
      uint64), ``xid`` (ignored) and ``data`` (binary; in CSV bytea hex ``\\x...``); or to
      a directory of Parquet files (a capture Spark wrote), read in the order of their names;
    * a pyarrow ``Table``, ``RecordBatch`` or ``RecordBatchReader`` with those columns, or
      any object with ``__arrow_c_stream__`` (polars, DuckDB results, ...);
    * an iterable of ``(lsn, data)`` pairs (lsn an int, ``'X/Y'`` or None) or of bare
      ``bytes`` messages, whose LSN is then 0 (PostgreSQL's invalid LSN: unknown).

    The rows must be in the server's order, as the function returns them. With
    ``any_order=True`` they may come in any order (a capture read back through Spark, whose
    files or partitions were reordered): the whole capture is read into memory with its
    ``xid`` column and decoded whole transaction by whole transaction in commit order
    (:meth:`Decoder.feed_rebuilt`); ``source`` is then a path or an Arrow table. The options
    are :class:`Decoder`'s. The GIL is released while decoding.
    """
    decoder = Decoder(
        special_values=special_values,
        views=views,
        interval=interval,
        uuid=uuid,
        time=time,
        batch_size=batch_size,
        memory_limit=memory_limit,
        spill_dir=spill_dir,
        binary=binary,
        array_ndims=array_ndims,
        date_order=date_order,
        timezone=timezone,
        datetime_range=datetime_range,
    )
    if any_order:
        table = capture_table(source)
        decoder.feed_rebuilt(table, table)
        return decoder.finish()
    with out_of_order_hint("any_order=True"):
        decoder.feed_capture(capture_from(source))
        return decoder.finish()


def unify_schemas(schemas: list[pa.Schema]) -> pa.Schema:
    """The schema that batches of every version of a table (``schemas``, oldest first; the
    last is the newest definition) can be brought to with :func:`conform`: the newest
    columns in order, then columns dropped since, a renamed column under its newest name
    (``pg.column_id`` field metadata), a retyped one widened losslessly or else utf8 with
    PostgreSQL's text. The same rule as :attr:`Changes.tables`; it never fails."""
    return _to_pyarrow_table(_internal.unify_schemas(list(schemas))).schema


def conform(data: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` (a batch or table of one version of a table) brought to ``schema`` (from
    :func:`unify_schemas`): missing columns null, widened columns cast."""
    return _to_pyarrow_table(_internal.conform(data, schema))
