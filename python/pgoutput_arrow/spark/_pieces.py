"""A capture that is a plain scan of local Parquet files, read by :func:`.batch.decode`'s own
tasks: each task of the catalog scan and of the decoding pass opens its *piece* (a run of the
files' row groups) with pyarrow, where Spark's path reads the files in the JVM and turns every
row into Arrow again for the Python workers (most of Spark's own floor for moving a capture
through Python: benches/findings.md, "The tasks read the capture's files"). Any other capture
DataFrame (a filter, a join, a local relation, files Spark reads through Hadoop's filesystems:
``s3a://``, ``hdfs://``) goes through Spark.

Public names of a private module: :mod:`.batch` uses them."""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ..exceptions import CaptureError
from ._common import bytes_setting
__all__ = ["SAMPLE_EVERY", "CapturePieces", "plain_parquet_capture", "pieces_frame", "catalog_rows_fn",
           "catalog_rows_here", "catalog_rows", "catalog_schema"]

#: A bare scan in Spark's optimized plan (``Relation [lsn#0,xid#1L,data#2] parquet``, or a
#: catalog table's ``Relation spark_catalog.db.t[...] parquet``), under at most a projection
#: of its columns (``Project [lsn#0, xid#1L, data#2]``), which read no other way.
_RELATION = re.compile(r"^(\+- )?Relation [^\[\]]*\[[^\[\]]*\] parquet$")
_PROJECT = re.compile(r"^Project \[\w+#\d+L?(, \w+#\d+L?)*\]$")

#: One in this many changes of each partition, at random, is sampled by the catalog scan, as
#: its first 9 bytes (the kind, and the relation id at either place: after the kind, or after
#: a streamed change's xid) and its size.
SAMPLE_EVERY = 64

#: How many rounds of tasks a capture's pieces make at least, on the cores Spark has.
ROUNDS = 2
_WHOLE_KINDS = np.frombuffer(_internal.CATALOG_KINDS + _internal.FRAMING_KINDS, np.uint8)
_CHANGE_KINDS = np.frombuffer(b"IUD", np.uint8)


@dataclass(frozen=True)
class CapturePieces:
    """The capture's files (local paths) and its pieces: each a run of ``(file index, row
    group, first row, end row)`` (rows of the row group, all of them but where a capture has
    fewer row groups than pieces), in the files' order. ``lsn_text``: the files' ``lsn`` is
    text (else an integer). ``order_col``: the column read as the tie-breaker ``_tb``, if any."""

    files: tuple[str, ...]
    pieces: tuple[tuple[tuple[int, int, int, int], ...], ...]
    lsn_text: bool
    order_col: str | None
    #: The bytes the files store (compressed), and Spark's split size for a scan.
    stored_bytes: int = 0
    split_bytes: int = 128 << 20

    def _columns(self, with_order: bool) -> list[str]:
        return ["lsn", "xid", "data", *([self.order_col] if with_order and self.order_col else [])]

    def read(self, piece: int, with_order: bool = True) -> pa.Table:
        """The rows of ``piece``: ``lsn`` (as stored), ``xid`` int64, ``data`` binary and,
        with an order column, ``_tb`` int64."""
        import pyarrow.parquet as pq

        columns = self._columns(with_order)
        parts = []
        opened: dict[int, Any] = {}
        for f, g, start, end in self.pieces[piece]:
            with self._reading(f, g):
                if f not in opened:
                    opened[f] = pq.ParquetFile(self.files[f])
                parts.append(_row_range(opened[f], g, start, end, columns))
        return self._normalized(pa.concat_tables(parts) if parts else _empty(columns), with_order)

    @contextmanager
    def _reading(self, f: int, g: int) -> Iterator[None]:
        """A file that cannot be read (changed or cut short since ``decode()`` listed it) as a
        :class:`~pgoutput_arrow.CaptureError` naming the file and the row group."""
        try:
            yield
        except (OSError, pa.ArrowException) as e:
            raise CaptureError(f"spark.decode: cannot read row group {g} of {self.files[f]}: "
                               f"{' '.join(str(e).split()) or type(e).__name__}") from None

    def read_by_row_group(self, f: int, g: int, cuts: list[tuple[int, int, int]]) -> Iterator[tuple[int, pa.Table]]:
        """Row group ``g`` of file ``f``, read once, as the pieces hold it: ``(piece, rows)``
        for each ``(piece, first row, end row)`` of ``cuts`` (without the order column)."""
        import pyarrow.parquet as pq

        with self._reading(f, g):
            group = self._normalized(pq.ParquetFile(self.files[f]).read_row_group(g, columns=self._columns(False)), False)
        for p, start, end in cuts:
            yield p, group.slice(start, end - start)

    def row_groups(self) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
        """Each row group's parts: ``(file, row group) -> [(piece, first row, end row)]``."""
        out: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for p, piece in enumerate(self.pieces):
            for f, g, start, end in piece:
                out.setdefault((f, g), []).append((p, start, end))
        return out

    def _normalized(self, table: pa.Table, with_order: bool) -> pa.Table:
        cols = {"lsn": table.column("lsn"), "xid": table.column("xid").cast(pa.int64()),
                "data": table.column("data").cast(pa.binary())}
        if with_order and self.order_col:
            cols["_tb"] = table.column(self.order_col).cast(pa.int64())
        return pa.table(cols)


#: Rows per batch where a piece reads a part of a row group (:func:`_row_range`).
_RANGE_BATCH = 4096


def _row_range(file: Any, g: int, start: int, end: int, columns: list[str]) -> pa.Table:
    """Rows ``start .. end`` of row group ``g`` of ``file`` (a ``pyarrow.parquet.ParquetFile``):
    the whole row group in one read, or, for a part of it, its batches decoded only up to
    ``end`` (a row group cut in four is read five eighths as much on average, where each
    piece used to decode all of it: 0.07 s against 0.11 s for a quarter of the toast capture's
    126 MB row group)."""
    rows = file.metadata.row_group(g).num_rows
    if (start, end) == (0, rows):
        return file.read_row_group(g, columns=columns)
    batches, first, seen = [], 0, 0
    for batch in file.iter_batches(batch_size=_RANGE_BATCH, row_groups=[g], columns=columns):
        if seen + batch.num_rows <= start:
            first = seen + batch.num_rows
        else:
            batches.append(batch)
        seen += batch.num_rows
        if seen >= end:
            break
    schema = pa.schema([file.schema_arrow.field(c) for c in columns])
    return pa.Table.from_batches(batches, schema=schema).slice(start - first, end - start)


def _empty(columns: list[str]) -> pa.Table:
    return pa.table({c: pa.array([], pa.binary() if c == "data" else pa.int64()) for c in columns})


def _optimized_plan(df: Any) -> str | None:
    """Spark's optimized logical plan of ``df`` as text (classic and Connect alike)."""
    jdf = getattr(df, "_jdf", None)
    if jdf is not None:
        return str(jdf.queryExecution().optimizedPlan().toString())
    explain = getattr(df, "_explain_string", None)
    if explain is None:
        return None
    text = str(explain(extended=True))
    head, found, rest = text.partition("== Optimized Logical Plan ==")
    return rest.partition("== Physical Plan ==")[0] if found else None


def _is_bare_scan(plan: str) -> bool:
    lines = [l.strip() for l in plan.strip().splitlines() if l.strip()]
    if len(lines) == 2 and _PROJECT.match(lines[0]):
        lines = lines[1:]
    return len(lines) == 1 and bool(_RELATION.match(lines[0]))


def _local_path(uri: str) -> str | None:
    parts = urlsplit(uri)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return unquote(parts.path)
    return None


def _parallelism(spark: Any) -> int:
    """The session's default parallelism (its cores), or 0 where it cannot tell (Spark
    Connect, which has no SparkContext, without ``spark.default.parallelism`` set)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext
        pass
    try:
        return max(1, int(spark.conf.get("spark.default.parallelism")))
    except Exception:  # noqa: BLE001 - unset
        return 0


def plain_parquet_capture(df: Any, order_col: str | None) -> CapturePieces | None:
    """The pieces of ``df`` when it is a bare scan of local Parquet files holding the capture's
    columns (and ``order_col``), with one type of ``lsn`` (text or integer) in every file;
    else None (the capture goes through Spark). The pieces: the files' row groups cut into
    runs of about the bytes Spark's scan would give a split
    (``spark.sql.files.maxPartitionBytes``, less for a capture smaller than that per core), a
    multiple of twice the session's parallelism in number (a row group cut in row ranges
    where there are fewer row groups)."""
    import pyarrow.parquet as pq

    if df.isStreaming:
        return None
    try:
        plan = _optimized_plan(df)
        uris = list(df.inputFiles())
    except Exception:  # noqa: BLE001 - anything Spark cannot tell of this DataFrame
        return None
    if plan is None or not _is_bare_scan(plan) or not uris:
        return None
    local = [_local_path(u) for u in sorted(uris)]
    files = [f for f in local if f is not None]
    if len(files) != len(local):
        return None
    wanted = ["lsn", "xid", "data", *([order_col] if order_col else [])]
    groups: list[tuple[int, int, int, int]] = []
    lsn_kinds: set[str] = set()
    try:
        for i, f in enumerate(files):
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
            if any(c not in schema.names for c in wanted) or not _readable_as_spark_reads(schema, order_col):
                return None
            lsn_kinds.add(_lsn_kind(schema.field("lsn").type))
            groups += [(i, g, group.num_rows, sum(group.column(c).total_compressed_size for c in range(group.num_columns)))
                       for g, group in ((g, meta.row_group(g)) for g in range(meta.num_row_groups))]
    except (OSError, pa.ArrowException):
        return None
    if len(lsn_kinds) != 1 or "other" in lsn_kinds:
        return None
    spark = df.sparkSession
    # Spark's own rule for a scan's splits (FilePartition.maxSplitBytes), on the bytes stored.
    most = bytes_setting(str(spark.conf.get("spark.sql.files.maxPartitionBytes", "128m")))
    opening = bytes_setting(str(spark.conf.get("spark.sql.files.openCostInBytes", "4m")))
    cores = _parallelism(spark)
    total = sum(b for *_, b in groups) + opening * len(files)
    size = min(most, max(opening, total // cores if cores else most))
    count = max(1, math.ceil(total / max(size, 1)))
    # Two rounds of tasks at least: pieces of one capture differ in what they cost to decode
    # (a bulk load's rows, small transactions' framing), and smaller ones even out. Row groups
    # are cut only to give every core its pieces (and not in a capture of a few MB, which
    # its tasks' own cost would outweigh), never for the bytes alone.
    rounds = ROUNDS * cores
    if rounds:
        count = rounds * math.ceil(count / rounds)
    cuttable = rounds if total - opening * len(files) >= opening else 0
    count = max(1, min(count, max(len(groups), cuttable), sum(n for _, _, n, _ in groups)))
    return CapturePieces(tuple(files), _cut(_units(groups, count), count), lsn_text="text" in lsn_kinds,
                         order_col=order_col, stored_bytes=total - opening * len(files), split_bytes=most)


def _readable_as_spark_reads(schema: pa.Schema, order_col: str | None) -> bool:
    """Whether pyarrow's casts of the file's columns give what Spark's casts in
    :func:`._catalog_pass.normalized` give: an integer ``xid`` (and order column), and
    ``data`` binary or text (its UTF-8 bytes)."""
    t = schema.field("data").type
    data_ok = pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
    ints = [schema.field(c).type for c in ("xid", *([order_col] if order_col else []))]
    return data_ok and all(pa.types.is_integer(i) for i in ints)


def _lsn_kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    return "text" if pa.types.is_string(t) or pa.types.is_large_string(t) else "other"


def _units(groups: list[tuple[int, int, int, int]], count: int) -> list[tuple[int, int, int, int, int]]:
    """The row groups (file, row group, rows, bytes) as ``(file, row group, first row, end
    row, bytes)``; where there are fewer than ``count``, each cut in row ranges (a task then
    reads the whole row group for its part: a capture of one large row group is still decoded
    by every core, where Spark's scan gives it one task)."""
    ways = math.ceil(count / len(groups)) if groups else 1
    units = []
    for f, g, rows, size in groups:
        k = max(1, min(ways, rows))
        cuts = [rows * i // k for i in range(k + 1)]
        units += [(f, g, a, b, size // k) for a, b in zip(cuts, cuts[1:])]
    return units


def _cut(units: list[tuple[int, int, int, int, int]], count: int) -> tuple[tuple[tuple[int, int, int, int], ...], ...]:
    """``units`` (file, row group, first row, end row, bytes) in runs of about equal bytes,
    ``count`` at most."""
    total = sum(u[-1] for u in units) or 1
    pieces: list[tuple[tuple[int, int, int, int], ...]] = []
    run: list[tuple[int, int, int, int]] = []
    done = 0
    for f, g, a, z, b in units:
        run.append((f, g, a, z))
        done += b
        if done >= total * (len(pieces) + 1) / count and len(pieces) < count - 1:
            pieces.append(tuple(run))
            run = []
    if run or not pieces:
        pieces.append(tuple(run))
    return tuple(pieces)


def pieces_frame(spark: Any, pieces: CapturePieces) -> Any:
    """One row per piece, its number, in a partition of its own (partition *i* holds piece
    *i*): the DataFrame the catalog scan and the decoding pass map."""
    n = len(pieces.pieces)
    return spark.range(0, n, 1, n)


def catalog_schema(pieces: CapturePieces) -> pa.Schema:
    """The catalog scan's rows, as the Spark path's scan collects them: the piece ``p``,
    ``xid``, ``lsn`` (as the files have it), ``data`` (whole; a sampled change's first 9
    bytes) and ``bytes`` (null; a sampled change's size)."""
    return pa.schema([("p", pa.int32()), ("xid", pa.int64()), ("lsn", pa.string() if pieces.lsn_text else pa.int64()),
                      ("data", pa.binary()), ("bytes", pa.int64())])


def catalog_rows_fn(pieces: CapturePieces) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The catalog scan's step, as a ``mapInArrow`` of :func:`pieces_frame`: each piece's
    :func:`catalog_rows`."""
    schema = catalog_schema(pieces)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p in batch.column(0).to_pylist():
                yield from catalog_rows(p, pieces.read(p, with_order=False), schema)

    return run


def catalog_rows_here(pieces: CapturePieces) -> pa.Table:
    """The catalog scan's rows read in this process, each row group once, a few at a time in
    threads (pyarrow and numpy let go of the GIL): for a capture of no more bytes than one of
    Spark's splits, which takes less time than a Spark job's own cost (0.25 s on two cores)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    schema = catalog_schema(pieces)

    def one(item: tuple[tuple[int, int], list[tuple[int, int, int]]]) -> list[pa.RecordBatch]:
        (f, g), cuts = item
        return [b for p, rows in pieces.read_by_row_group(f, g, cuts) for b in catalog_rows(p, rows, schema)]

    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        batches = [b for part in pool.map(one, pieces.row_groups().items()) for b in part]
    return pa.Table.from_batches(batches, schema=schema)


def catalog_rows(p: int, rows: pa.Table, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The catalog scan's rows of piece ``p``'s ``rows`` (:func:`catalog_schema`): its
    messages of the kinds ``CATALOG_KINDS`` and ``FRAMING_KINDS`` whole, and the heads of one
    change in :data:`SAMPLE_EVERY`. Batch by batch, as read: the piece's ``data`` is never
    copied into one array (hundreds of MB, in fresh memory of the worker's)."""
    # At random (seeded by the piece: the same rows each time), not every n-th row: a workload's
    # transactions repeat one pattern of changes, which a fixed stride would sample one
    # table of (pgbench's four changes a transaction: never pgbench_branches).
    rng = np.random.default_rng(p)
    for batch in rows.to_batches():
        data = batch.column("data")
        first = _first_bytes(data)
        whole = np.isin(first, _WHOLE_KINDS)
        sampled = np.isin(first, _CHANGE_KINDS) & (rng.random(len(first)) < 1 / SAMPLE_EVERY)
        lsn = batch.column("lsn").cast(schema.field("lsn").type)
        for keep, head in ((np.flatnonzero(whole), False), (np.flatnonzero(sampled), True)):
            if not len(keep):
                continue
            at = pa.array(keep, pa.int64())
            kept = data.take(at)
            yield pa.record_batch([
                pa.array(np.full(len(keep), p, np.int32)), batch.column("xid").take(at),
                lsn.take(at), pc.binary_slice(kept, 0, 9) if head else kept,
                pc.binary_length(kept).cast(pa.int64()) if head else pa.nulls(len(keep), pa.int64()),
            ], schema=schema)


def _first_bytes(data: pa.Array) -> np.ndarray:
    """The first byte of each value of a binary array (0 for an empty or null one)."""
    n = len(data)
    if n == 0:
        return np.zeros(0, np.uint8)
    offsets = np.frombuffer(data.buffers()[1], np.int32)[data.offset:data.offset + n + 1]
    values = data.buffers()[2]
    if values is None or len(values) == 0:
        return np.zeros(n, np.uint8)
    bytes_ = np.frombuffer(values, np.uint8)
    starts = offsets[:-1]
    nonempty = (offsets[1:] > starts) & np.asarray(data.is_valid())
    return np.where(nonempty, bytes_[np.minimum(starts, len(bytes_) - 1)], 0).astype(np.uint8)
