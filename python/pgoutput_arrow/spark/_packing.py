"""The decoding pass's rows (:func:`layout`): each table's decoded rows packed as Arrow IPC
streams, or, for the one table decoded *direct*, as rows of the pass; each partition's
summary and sizes beside them; and how the driver hands each table's DataFrame out of the
cached pass (unpacked on the executors, collected for the small tables, projected for the
direct one).

Public names of a private module: :mod:`.batch` uses them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._common import bytes_setting, ipc_stream, quoted, spark_schema
from ._pieces import SAMPLE_EVERY

__all__ = ["PACKED", "layout", "SUMMARY_T", "SIZES_T", "SIZES", "SUMMARY", "ipc_value", "packed_row", "direct_rows",
           "unpack_fn", "xid_index", "shifted", "summaries", "SMALL_TABLE", "SMALL_TOTAL", "SMALL_MOST", "small_total", "small_tables",
           "GUESS_SLACK", "ROW_OVERHEAD", "likely_small",
           "CREATING", "from_driver", "DIRECT_ROW_BYTES", "largest", "direct_columns"]


#: The decoding pass's first columns: ``_t`` is the row's table's number (or
#: :data:`SUMMARY_T`), ``_p`` the partition it was decoded in; ``ipc``, when set, an Arrow IPC
#: stream of up to 64 Ki of the table's rows (:func:`layout`).
PACKED = pa.schema([pa.field("_t", pa.int32(), False), pa.field("_p", pa.int32(), False),
                    pa.field("ipc", pa.binary())])


def layout(direct: pa.Schema | None) -> pa.Schema:
    """What the decoding pass hands the JVM: :data:`PACKED`, then the columns of the one
    table decoded *direct* (``direct``, its schema for Spark; ``f0``, ``f1``, … in its
    order). Its rows are rows of the pass (``ipc`` null): the JVM caches them as columns, and
    its DataFrame is a projection of the cache, with no second trip through Python. Every
    other table's rows travel packed, a few large values of ``ipc``; each table's DataFrame
    unpacks its own (:func:`unpack_fn`). One table only: another's columns would be nulls
    in each of its rows, which cost as much to move as values."""
    direct_fields = [pa.field(f"f{j}", f.type) for j, f in enumerate(direct or [])]
    return pa.schema([*PACKED, *direct_fields])


#: ``_t`` of a partition's summary (:data:`SUMMARY`), beside its tables' rows.
SUMMARY_T = -1

#: ``_t`` of a partition's :data:`SIZES`, after its tables' rows.
SIZES_T = -2

#: The bytes of each packed table's rows in a partition, as Arrow arrays before their IPC
#: streams are compressed (``t``: the table's number).
SIZES = pa.schema([pa.field("t", pa.int32()), pa.field("bytes", pa.int64())])

#: A partition's summary (``_p``: the partition): the rows it decoded of each split
#: transaction, the span of that transaction's changes it held, and the transactions it held a
#: part of that the catalog scan did not find split (``incomplete``; see
#: ``_internal.partition_summary``).
SUMMARY = pa.schema([pa.field("p", pa.int32()), pa.field("xid", pa.int64()), pa.field("rows", pa.int64()),
                     pa.field("first_lsn", pa.int64()), pa.field("first_tb", pa.int64()),
                     pa.field("last_lsn", pa.int64()), pa.field("last_tb", pa.int64()),
                     pa.field("incomplete", pa.bool_())])


def ipc_value(batch: pa.RecordBatch) -> pa.Array:
    """``batch`` as one Arrow IPC stream (:data:`IPC_OPTIONS`), in a binary array of one value
    (no copy of it)."""
    ipc = ipc_stream(batch)
    offsets = pa.py_buffer(np.array([0, ipc.size], np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, ipc])


def packed_row(t: int, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """One row of the pass (``schema``: its :func:`layout`) holding ``batch`` packed."""
    head = [pa.array([t], pa.int32()), pa.array([partition], pa.int32()), ipc_value(batch)]
    return pa.record_batch(head + [pa.nulls(1, f.type) for f in list(schema)[len(head):]], schema=schema)


def direct_rows(t: int, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (the direct table's rows) as rows of the pass (``schema``: its :func:`layout`)."""
    n = batch.num_rows
    head = [pa.array(np.full(n, t, np.int32)), pa.array(np.full(n, partition, np.int32)), pa.nulls(n, pa.binary())]
    return pa.RecordBatch.from_arrays(head + batch.columns, schema=schema)


def unpack_fn(offsets: dict[int, dict[int, int]]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The rows of the IPC streams of :data:`PACKED` batches (one table's), the ``_seq`` of
    the rows of a split transaction moved past the rows of its parts in partitions before
    (``offsets``: :attr:`._catalog_pass.Placement.offsets`)."""
    shifts = {p: (np.array(sorted(by_xid), np.int64), np.array([by_xid[x] for x in sorted(by_xid)], np.int64))
              for p, by_xid in offsets.items()}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p, ipc in zip(batch.column("_p").to_pylist(), batch.column("ipc")):
                shift = shifts.get(p)
                for rows in pa.ipc.open_stream(ipc.as_buffer()):
                    yield rows if shift is None else shifted(rows, *shift)

    return run


def xid_index(xids: np.ndarray, rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``rows`` (a table or batch with ``_xid``): its transaction's place in
    ``xids`` (sorted, not empty), and whether it is one of them."""
    row_xid = rows.column("_xid").to_numpy(zero_copy_only=False)
    at = np.clip(np.searchsorted(xids, row_xid), 0, len(xids) - 1)
    return at, xids[at] == row_xid


def shifted(rows: pa.RecordBatch, xids: np.ndarray, before: np.ndarray) -> pa.RecordBatch:
    """``rows`` with ``before[i]`` added to the ``_seq`` of the rows of transaction ``xids[i]``."""
    at, hit = xid_index(xids, rows)
    add = np.where(hit, before[at], 0)
    if not add.any():
        return rows
    i = rows.schema.get_field_index("_seq")
    seq = pa.array(rows.column(i).to_numpy(zero_copy_only=False) + add, rows.schema.field(i).type)
    return pa.RecordBatch.from_arrays([seq if j == i else c for j, c in enumerate(rows.columns)], schema=rows.schema)


def summaries(packed: Any, collect: Collection[int] = ()) -> tuple[pa.Table, dict[int, int], pa.Table]:
    """Every partition's :data:`SUMMARY` rows of a persisted decoding pass (the job that
    decodes the capture and fills the cache), the bytes of each packed table's rows
    (:data:`SIZES`, by ``_t``), and, collected by the same job, the packed rows (``_t``,
    ``_p``, ``ipc``) of the tables numbered in ``collect`` (:func:`likely_small`)."""
    from pyspark.sql import functions as F

    wanted = F.col("_t") < 0
    if collect:
        wanted = wanted | F.col("_t").isin(sorted(collect))
    got = packed.where(wanted).select("_t", "_p", "ipc").toArrow()
    batches: dict[int, list[pa.RecordBatch]] = {SUMMARY_T: [], SIZES_T: []}
    is_meta = pc.less(got.column("_t"), 0)
    meta = got.filter(is_meta)
    for t, ipc in zip(meta.column("_t").to_pylist(), meta.column("ipc")):
        batches[t] += pa.ipc.open_stream(ipc.as_buffer())
    sizes: dict[int, int] = {}
    for r in pa.Table.from_batches(batches[SIZES_T], schema=SIZES).to_pylist():
        sizes[r["t"]] = sizes.get(r["t"], 0) + r["bytes"]
    return pa.Table.from_batches(batches[SUMMARY_T], schema=SUMMARY), sizes, got.filter(pc.invert(is_meta))


#: A packed table whose rows take at most this many bytes (:data:`SIZES`) is handed out from
#: the driver (``createDataFrame``), its rows collected by the decoding pass's own job
#: (:func:`likely_small`): a table's own job over the cache costs about 0.15 s of Spark's
#: overhead, paid by each of a capture's many small tables, a local relation's write 0.05 s
#: (benches/findings.md). At most :func:`small_total` bytes in all: the
#: driver holds them (as rows of local relations) while their DataFrames live.
SMALL_TABLE = 4 << 20
SMALL_TOTAL = 64 << 20
SMALL_MOST = 512 << 20


def small_total(spark: Any) -> int:
    """The bytes of small tables the driver takes in all: :data:`SMALL_TOTAL`, or a sixteenth
    of its heap (``spark.driver.memory``) where that is more, :data:`SMALL_MOST` at most."""
    heap = bytes_setting(str(spark.conf.get("spark.driver.memory", "1g")), 1 << 30)
    return max(SMALL_TOTAL, min(SMALL_MOST, heap // 16))


def small_tables(sizes: dict[int, int], tables: int, direct: int, most: int) -> list[int]:
    """The tables (numbers ``0 .. tables - 1``, not the ``direct`` one) handed out from the
    driver, smallest first, ``most`` bytes in all (:func:`small_total`)."""
    chosen, total = [], 0
    for t in sorted((t for t in range(tables) if t != direct), key=lambda t: sizes.get(t, 0)):
        n = sizes.get(t, 0)
        if n > SMALL_TABLE or total + n > most:
            break
        chosen.append(t)
        total += n
    return chosen


#: How far :func:`likely_small`'s guess reaches past :data:`SMALL_TABLE` and
#: :func:`small_total`: its estimates run up to half again the sizes (measured on the
#: benchmark's captures), and a table it collects but :func:`small_tables` leaves out costs
#: only its packed bytes to the driver, where one it misses costs a job.
GUESS_SLACK = 2

#: What a decoded row costs in Arrow beyond its change's bytes on the wire: the decoder's
#: metadata columns (``_op``, ``_lsn``, ``_commit_lsn``, ``_xid``, ``_seq``, …), about 70 bytes,
#: rounded up (:func:`likely_small`).
ROW_OVERHEAD = 96


def likely_small(names: list[str], schemas: dict[str, pa.Schema], sampled: dict[int, tuple[int, int]],
                 tables: int, direct: int, most: int) -> list[int]:
    """The tables (numbers ``0 .. tables - 1``, not the ``direct`` one; ``tables`` may count
    the TRUNCATEs after ``names``) that the catalog scan's sample puts under
    :data:`SMALL_TABLE` (``most`` in all; :data:`GUESS_SLACK` times either), smallest first
    as :func:`small_tables` chooses by their sizes. The decoding pass's own job collects their
    packed rows (:func:`summaries`), so that the small tables cost no job of their own. A
    guess, from one change in :data:`._pieces.SAMPLE_EVERY`: :func:`from_driver` takes the
    tables by their real sizes (:func:`small_tables`) and collects any the guess missed."""
    def estimate(t: int) -> int:
        count, size = _sample(names, schemas, sampled, t) if t < len(names) else (0, 0)
        return SAMPLE_EVERY * (size + count * ROW_OVERHEAD)

    chosen, total = [], 0
    for n, t in sorted((estimate(t), t) for t in range(tables) if t != direct):
        if n > GUESS_SLACK * SMALL_TABLE or total + n > GUESS_SLACK * most:
            break
        chosen.append(t)
        total += n
    return chosen


#: How many small tables' DataFrames :func:`from_driver` makes at a time (measured: 40
#: ``createDataFrame`` calls of small tables 1.0-1.6 s one at a time, 0.4-0.7 s four at a
#: time, on two cores).
CREATING = 4


def from_driver(packed: Any, small: list[int], targets: list[pa.Schema],
                 unpack: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                 collected: pa.Table | None = None, of: Collection[int] = ()) -> dict[int, Any]:
    """The ``small`` tables' DataFrames, made on the driver from their packed rows (unpacked
    as the executors would): those of the tables numbered in ``of`` from ``collected`` (their
    rows of :data:`PACKED`'s columns, which the decoding pass's job collected:
    :func:`summaries`), the others collected in one job."""
    from pyspark.sql import functions as F

    if not small:
        return {}
    spark = packed.sparkSession
    parts = [] if collected is None else [collected.select(["_t", "_p", "ipc"])]
    guessed = set(of)
    missing = [t for t in small if t not in guessed]
    if missing:
        parts.append(packed.where(F.col("_t").isin(missing)).select("_t", "_p", "ipc").toArrow())
    got = pa.concat_tables(parts)

    def made(t: int) -> Any:
        mine = got.filter(pc.equal(got.column("_t"), t)).select(["_p", "ipc"])
        # At least one batch: pyspark's createDataFrame fails on a table of no chunks with a
        # nested column ("cannot construct ChunkedArray from empty vector").
        batches = list(unpack(iter(mine.to_batches()))) or [pa.RecordBatch.from_pylist([], schema=targets[t])]
        table = pa.Table.from_batches(batches, schema=targets[t])
        return spark.createDataFrame(table, schema=spark_schema(targets[t]))

    # A few at a time: createDataFrame mostly waits on the JVM (tens of round trips, 20-30 ms
    # a table), and a capture may have hundreds of small tables.
    with ThreadPoolExecutor(min(CREATING, len(small))) as pool:
        return dict(zip(small, pool.map(made, small)))


#: The direct table (:func:`layout`) is the largest only if its changes average at least
#: this many bytes: the JVM caches a direct row column by column and reads it back, which costs
#: more than a second trip through Python for narrow rows (a bulk load of pgbench's) and less
#: for wide ones (TOAST values): BENCHMARKS.md.
DIRECT_ROW_BYTES = 1024


def _sample(names: list[str], schemas: dict[str, pa.Schema], sampled: dict[int, tuple[int, int]],
            i: int) -> tuple[int, int]:
    """The sampled changes' count and bytes of table number ``i``."""
    relid = (schemas[names[i]].metadata or {}).get(b"pg.relation_id", b"")
    return sampled.get(int(relid), (0, 0)) if relid.isdigit() else (0, 0)


def largest(names: list[str], schemas: dict[str, pa.Schema], sampled: dict[int, tuple[int, int]]) -> int:
    """The number of the table decoded direct (:func:`layout`): the one with the most bytes
    of sampled changes, when they average :data:`DIRECT_ROW_BYTES` at least; else -1."""
    best = max(range(len(names)), key=lambda i: (_sample(names, schemas, sampled, i)[1], i), default=-1)
    if best < 0:
        return -1
    count, size = _sample(names, schemas, sampled, best)
    return best if count and size >= DIRECT_ROW_BYTES * count else -1


def direct_columns(target: pa.Schema, offsets: dict[int, dict[int, int]]) -> list[str]:
    """The direct table's columns as SQL expressions for ``selectExpr``, from the pass's ``f0``,
    ``f1``, … (:func:`layout`), with the ``_seq`` of its rows of split transactions moved past
    the parts before (as :func:`shifted` does to an unpacked table's). Text, not ``Column`` objects:
    one call to the JVM for the whole projection, where each ``Column`` is several (0.15 s for
    a table of 45 columns; benches/findings.md)."""
    names = target.names
    columns = [f"f{j}" for j in range(len(names))]
    moved = {(p << 32) + x: before for p, by_xid in offsets.items() for x, before in by_xid.items()}
    if moved:
        # The decoder's columns come after the table's: the last _seq and _xid are its.
        seq, xid = (len(names) - 1 - names[::-1].index(n) for n in ("_seq", "_xid"))
        pairs = ", ".join(f"{k}L, {v}L" for k, v in sorted(moved.items()))
        key = f"CAST(_p AS BIGINT) * {1 << 32}L + {columns[xid]}"
        columns[seq] = f"{columns[seq]} + coalesce(try_element_at(map({pairs}), {key}), 0L)"
    return [f"{c} AS {quoted(n)}" for c, n in zip(columns, names)]
