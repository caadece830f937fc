"""Decoding a capture on Spark's executors (:func:`decode`), and in one process the same way
(:func:`decode_table_locally`, for the UDTF and the batch data source).

How it is distributed (docs/spark.md, "How decoding is distributed"): each partition of the
capture is decoded where it is. One filtering scan first (:func:`capture_catalog`) collects a
small catalog: the Relation and Type messages, and the framing of the transactions whose
framing lies in more than one partition (*split*). Each partition's rows are rebuilt by the
crates (``_internal.canonical_stream``) into a self-contained stream, a part of a split
transaction framed by its real Begin and end, and decoded, its rows numbered from 0; the
partitions' summaries tell the driver where each part falls (:func:`placement`), and each
table's rows get their ``_seq`` moved past the parts before as they are unpacked (or, for the
one table whose rows are rows of the pass, :func:`layout`, as they are read from the cache).
Small tables are handed out from the driver. A capture that is a bare scan of local Parquet
files is read by the tasks themselves (:mod:`._pieces`), in the catalog scan and in the pass.
A capture not in the server's order (parts that
overlap, a part of a transaction not found split) is decoded again, shuffled by xid.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ._catalog_pass import CaptureCatalog, capture_catalog, capture_catalog_of_pieces, normalized, placement, sample_inserts, table_schemas
from ._common import is_binary_capture, ranked_seq, spark_schema, with_seq, with_setting
from ._packing import (
    SIZES,
    SIZES_T,
    SUMMARY,
    SUMMARY_T,
    direct_columns,
    direct_rows,
    from_driver,
    largest,
    layout,
    likely_small,
    packed_row,
    small_tables,
    small_total,
    summaries,
    unpack_fn,
    xid_index,
)
from ._pieces import CapturePieces, pieces_frame, plain_parquet_capture
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["decode", "decode_table_locally", "decode_rows_locally", "canonical_stream", "TRUNCATES"]

_log = logging.getLogger(__name__)

TRUNCATES = "_truncates"
"""The key of :func:`decode`'s TRUNCATEs (``with_truncates=True``); no table name lacks a schema."""


def canonical_stream(rows: Any, catalog: Any, history: bool = False, pieces: Sequence[int] = ()) -> pa.RecordBatch:
    """The whole transactions of ``rows`` (a capture: ``lsn``, ``xid``, ``data``, optionally a
    tie-breaker ``_tb``; any order) rebuilt into one self-contained stream (``lsn``,
    ``data``), with the Relation and Type messages they need from ``catalog`` (the capture,
    or its rows of the kinds ``_internal.CATALOG_KINDS``) injected. ``pieces``: the
    transactions ``rows`` hold only a part of, framed from ``catalog`` (:func:`capture_catalog`)."""
    return pa.record_batch(_internal.canonical_stream(rows, catalog, history, list(pieces)))


def _decoder(options: dict[str, Any]) -> Any:
    import pgoutput_arrow

    return pgoutput_arrow.Decoder(**options)


def decode_table_locally(table: pa.Table, options: dict[str, Any]) -> Any:
    """Decode whole transactions in any order in this process: the rows of ``table`` (``lsn``
    text or integer, ``xid``, ``data``, optionally ``_tb``) rebuilt as :func:`decode` rebuilds
    them, the catalog taken from the rows themselves. ``options`` go to the decoder, after
    :data:`~.types.SPARK_DECODER_OPTIONS`."""
    decoder = _decoder({**SPARK_DECODER_OPTIONS, **options})
    if table.num_rows:
        decoder.feed_rebuilt(table, table)
    return decoder.finish()


def decode_rows_locally(rows: Sequence[tuple[int, int, bytes, int]], options: dict[str, Any]) -> Any:
    """:func:`decode_table_locally` of ``(lsn, xid, data, tie-breaker)`` rows."""
    lsn, xid, data, tb = zip(*rows) if rows else ((), (), (), ())
    return decode_table_locally(pa.table({"lsn": pa.array(lsn, pa.int64()), "xid": pa.array(xid, pa.int64()),
                                          "data": pa.array(data, pa.binary()), "_tb": pa.array(tb, pa.int64())}),
                                options)


#: The SQL setting under which Spark plans a cached query adaptively, as any other (off by
#: default: then a cached plan's shuffles are not coalesced where a plain query's are).
_CACHED_AQE = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"

#: Spark caches a plan in a clone of the session while this is on (turned off in the clone), and
#: a clone of a Spark Connect session adds the session's artifacts again: every archive it added
#: (a shipped environment, hundreds of MB) is unpacked once more on the server, per ``persist``.
#: Off while the decoding pass is cached, the session itself plans it, as the clone would have.
_CACHED_BUCKETED_SCAN = "spark.sql.sources.bucketing.autoBucketedScan.enabled"


def _persist_adaptively(df: Any) -> Any:
    """``df.persist()``, planned as the catalog's plain query was (adaptively, if the session
    is): the capture's partitions must be the same in both, and a shuffle in the user's
    DataFrame is coalesced alike only when both are planned alike."""
    spark = df.sparkSession
    return with_setting(spark, _CACHED_AQE, "false", lambda _: "true",
                         lambda: with_setting(spark, _CACHED_BUCKETED_SCAN, "true", lambda _: "false",
                                               df.persist))


#: The decoding pass's cache is built uncompressed: the packed tables' rows are zstd IPC
#: streams already, and Spark's per-column encoders on the direct table's columns (wide rows)
#: cost more than they save: 14-17% of a toast decode, compressible values or not
#: (benches/findings.md, "The pass's cache uncompressed").
_CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def _decoding_pass(df: Any, collect: list[int]) -> tuple[Any, pa.Table, dict[int, int], pa.Table]:
    """``df`` (the decoding pass) persisted (:func:`_persist_adaptively`) and run, its cache
    built uncompressed: the persisted DataFrame, and its :func:`summaries` (with the packed
    rows of the tables numbered in ``collect``)."""
    def run() -> tuple[Any, pa.Table, dict[int, int], pa.Table]:
        packed = _persist_adaptively(df)
        return (packed, *summaries(packed, collect))

    result: tuple[Any, pa.Table, dict[int, int], pa.Table] = with_setting(
        df.sparkSession, _CACHE_COMPRESSED, "true", lambda _: "false", run)
    return result


def _decode_partition_fn(catalog: CaptureCatalog, schemas: dict[str, pa.Schema], targets: list[pa.Schema],
                         direct: int, options: dict[str, Any], whole: bool, pieces: CapturePieces | None = None,
                         ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The executors' step: rebuild the partition's transactions, decode them, and hand every
    table's rows back, already cast for Spark (``targets``: the tables' Spark schemas, in the
    order of their names, ``_truncates`` last): the ``direct`` table's as rows, every other
    table's as Arrow IPC streams of up to 64 Ki rows, a row each (:func:`layout`). A
    partition holding a part of a split transaction decodes it with the transaction's framing
    from the catalog, numbers its rows from 0 and says how many it decoded in a
    :data:`SUMMARY` row (``_t`` = -1): the driver then knows each part's first ``_seq``
    (:func:`placement`). A partition holding a part of a transaction the catalog does not
    name split decodes nothing and says so. ``whole``: the partitions hold whole
    transactions (shuffled by xid). ``pieces``: the partitions are :func:`._pieces.pieces_frame`'s,
    each reading its piece of the capture's files (:mod:`._pieces`)."""
    import pgoutput_arrow

    names = sorted(schemas)
    schema = layout(targets[direct] if direct >= 0 else None)
    split = [] if whole else catalog.split

    def rows_of(i: int, partition: int, table: pa.Table, sizes: dict[int, int]) -> Iterator[pa.RecordBatch]:
        for chunk in table.to_batches(max_chunksize=65536):
            cast = cast_for_spark(chunk, targets[i])
            if i == direct:
                yield direct_rows(i, partition, cast, schema)
            else:
                row = packed_row(i, partition, cast, schema)
                sizes[i] = sizes.get(i, 0) + cast.nbytes
                yield row

    def summary(partition: int, spans: list[tuple[int, int, int, int, int, int]], decoded: list[int],
                incomplete: list[int]) -> pa.RecordBatch:
        rows = [(partition, x, n, first, low, last, high, False)
                for (x, _, first, low, last, high), n in zip(spans, decoded)]
        rows += [(partition, x, 0, 0, 0, 0, 0, True) for x in incomplete]
        return packed_row(SUMMARY_T, partition, pa.RecordBatch.from_pylist(
            [dict(zip(SUMMARY.names, r)) for r in rows], schema=SUMMARY), schema)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        if pieces is not None:
            for batch in batches:
                for piece in batch.column(0).to_pylist():
                    yield from decode_rows(piece, pieces.read(piece))
            return
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        context = TaskContext.get()
        yield from decode_rows(context.partitionId() if context is not None else -1, pa.Table.from_batches(received))

    def decode_rows(partition: int, rows: pa.Table) -> Iterator[pa.RecordBatch]:
        if not rows.num_rows:
            return
        spans, incomplete = ([], []) if whole else _internal.partition_summary(rows, split)
        if incomplete:
            # Its rows would decode to less than the transaction holds: the driver decodes
            # the capture again, shuffled by transaction.
            yield summary(partition, [], [], incomplete)
            return
        # The catalog's history first: the decoder then numbers each table's versions and
        # columns as the driver's schemas do.
        decoder = _decoder(options)
        # Fed as it is rebuilt, the messages referenced in the partition's own buffers (held
        # by the decoder until it is finished).
        decoder.feed_rebuilt(rows, catalog.catalog, history=True, pieces=split)
        changes = decoder.finish()
        seqs = ranked_seq(changes.tables, changes.truncates)
        if spans:
            # The rows decoded of each split transaction (spans come sorted by xid).
            pieces = np.array([x for x, *_ in spans], np.int64)
            decoded = np.zeros(len(pieces), np.int64)
            for table in [*changes.tables.values(), changes.truncates]:
                at, hit = xid_index(pieces, table)
                decoded += np.bincount(at[hit], minlength=len(pieces))
            yield summary(partition, spans, decoded.tolist(), [])
        sizes: dict[int, int] = {}
        for i, name in enumerate(names):
            table = changes.tables.get(name)
            if table is None or table.num_rows == 0:
                continue
            # Columns by pg.column_id (a renamed column under its newest name), then by name.
            yield from rows_of(i, partition, with_seq(pgoutput_arrow.conform(table, schemas[name]), seqs[name]), sizes)
        if changes.truncates.num_rows:
            yield from rows_of(len(names), partition, with_seq(changes.truncates, seqs[""]), sizes)
        if sizes:
            yield packed_row(SIZES_T, partition, pa.record_batch(
                [pa.array(list(sizes), pa.int32()), pa.array(list(sizes.values()), pa.int64())], schema=SIZES), schema)

    return run


def decode(df: Any, *, order_col: str | None = None, num_partitions: int | None = None,
           with_truncates: bool = False, **options: Any) -> dict[str, Any]:
    """Decode a capture DataFrame (``lsn`` text or long, ``xid``, ``data`` binary) on the
    executors into ``{"schema.table": DataFrame}`` with the decoder's columns.

    Each of ``df``'s partitions is decoded where it is, a transaction split across partitions
    (a bulk load) in parts, in parallel: one filtering scan first (:func:`capture_catalog`)
    gives every part its transaction's framing; each part numbers its rows from 0 and the
    driver moves them past the parts before (:func:`placement`). Only when the capture's rows
    are not in the server's order (a shuffled capture: parts of a transaction overlap, or a
    partition holds a part of a transaction not found split) is the capture decoded again,
    shuffled by transaction into ``num_partitions`` partitions (default
    ``spark.sql.shuffle.partitions``).

    The result does not depend on how ``df`` is partitioned or ordered. ``_seq`` is the row's
    rank within its transaction, across every table and the TRUNCATEs: ordering by
    ``(_commit_lsn, _seq)`` is the server's order (as for the streaming source; a single-process
    ``decode()`` numbers the whole stream instead). ``order_col`` (a capture-time row number, if
    the capture has one) only breaks ties among messages that share an LSN, which otherwise
    only decides ``_seq`` among them. ``options`` go to the decoder. A capture that is a bare
    scan of local Parquet files (``spark.read.parquet(path)``, its columns selected at most) is
    read by the tasks themselves, a run of row groups each, with pyarrow: Spark does not turn
    its rows into Arrow again for them (:mod:`._pieces`). The decoding pass runs
    here, in one job, and its rows are cached (``persist``): the per-table DataFrames share it,
    and an error in the capture is raised by this call.
    ``with_truncates=True`` adds ``result["_truncates"]`` (:data:`TRUNCATES`): the decoder's
    TRUNCATEs (``relations``, ``cascade``, ``restart_identity`` and the transaction columns),
    for :func:`apply_changes`. Works through Spark Connect.
    """
    from pyspark.sql import functions as F

    spark = df.sparkSession
    options = {**SPARK_DECODER_OPTIONS, **options}
    options.setdefault("views", False)
    if options.get("array_ndims") is None:
        # The schema is settled on the driver before any data is seen: every partition must
        # nest arrays as deep as it does, not learn a depth from its own first array (an
        # array of another depth is kept in _special, as everywhere).
        options["array_ndims"] = 1
    # The crates read text LSNs faster than the JVM converts them (the catalog scan converts
    # only the rows it keeps).
    rows = normalized(df, order_col, lsn_text=True)
    pieces = plain_parquet_capture(df, order_col)
    if pieces is not None:
        _log.info("decode: the tasks read the capture's %d Parquet file(s) themselves, in %d piece(s)",
                  len(pieces.files), len(pieces.pieces))
        catalog = capture_catalog_of_pieces(spark, pieces)
    else:
        catalog = capture_catalog(rows)
    if options.get("binary") is None:
        # Every partition's decoder must type enum/composite columns alike, and the
        # schemas are made before any data is seen: a few Inserts tell, when it matters.
        options["binary"], schemas = _binary_mode(catalog.catalog, options, rows)
    else:
        schemas = table_schemas(catalog.catalog, options)
    names = sorted(schemas)
    time_type = time_type_enabled(spark)
    targets = [to_spark_arrow_schema(schemas[n], time_type) for n in names]
    targets.append(to_spark_arrow_schema(_decoder(options).finish().truncates.schema))
    direct = largest(names, schemas, catalog.sampled)
    count = len(targets) if with_truncates else len(names)
    # The small tables' rows are collected by the pass's own job, as far as the catalog's
    # sample tells which they are.
    most = small_total(spark)
    collect = likely_small(names, schemas, catalog.sampled, count, direct, most)
    pass_schema = spark_schema(layout(targets[direct] if direct >= 0 else None))
    fn = _decode_partition_fn(catalog, schemas, targets, direct, options, whole=False, pieces=pieces)
    source = rows if pieces is None else pieces_frame(spark, pieces)
    packed, summary, sizes, collected = _decoding_pass(source.mapInArrow(fn, pass_schema), collect)
    placed = placement(summary)
    if not placed.ordered:
        _log.info("decode: the capture's rows are not in the server's order across partitions; "
                  "decoding it again, shuffled by transaction")
        packed.unpersist()
        n = num_partitions or int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
        fn = _decode_partition_fn(catalog, schemas, targets, direct, options, whole=True)
        packed, _, sizes, collected = _decoding_pass(rows.repartition(n, "xid").mapInArrow(fn, pass_schema), collect)
    unpack = unpack_fn(placed.offsets)
    small = from_driver(packed, small_tables(sizes, count, direct, most), targets, unpack, collected, collect)
    if len(small) == count:
        packed.unpersist()  # every table came to the driver

    def table(i: int) -> Any:
        if i in small:
            return small[i]
        mine = packed.where(F.col("_t") == i)
        if i == direct:
            return mine.selectExpr(*direct_columns(targets[i], placed.offsets))
        return mine.select("_p", "ipc").mapInArrow(unpack, spark_schema(targets[i]))

    out: dict[str, Any] = {name: table(i) for i, name in enumerate(names)}
    if with_truncates:
        out[TRUNCATES] = table(len(names))
    return out


def _binary_mode(catalog: pa.Table, options: dict[str, Any], rows: Any) -> tuple[bool, dict[str, pa.Schema]]:
    """Whether the capture was taken with ``binary 'true'``, and the tables' schemas in that
    mode. Its first Inserts are asked (a small job) only when the schemas depend on it (a
    type without a text rendering: an enum, a composite, …); else ``False``, which types
    them alike."""
    by_mode = {b: table_schemas(catalog, {**options, "binary": b}) for b in (False, True)}
    binary = by_mode[False] != by_mode[True] and is_binary_capture(sample_inserts(rows))
    return binary, by_mode[binary]


