"""Decoding a capture on Spark's executors (:func:`decode`), and in one process the same way
(:func:`decode_table_locally`, for the UDTF and the batch data source).

How it is distributed (docs/spark.md, "How decoding is distributed"): the SQL interface's
``xid`` column holds, for every message of a transaction, the top-level xid (but for a
subtransaction's Stream Abort, which the catalog keeps), so rows are shuffled by it and each
transaction lands whole in one partition. There each transaction is
rebuilt by the crates (``_internal.canonical_stream``) into a self-contained stream, the
Relation and Type messages it relies on injected from a small catalog of the capture
collected beforehand and broadcast, and decoded.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ._common import rank_within_commit, spark_schema
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["decode", "table_schemas", "decode_table_locally", "decode_rows_locally", "canonical_stream",
           "collect_catalog", "normalized", "TRUNCATES"]

TRUNCATES = "_truncates"
"""The key of :func:`decode`'s TRUNCATEs (``with_truncates=True``); no table name lacks a schema."""



def _kind_is(kinds: bytes) -> Any:
    """A Spark condition: the message's first byte (its kind) is one of ``kinds``."""
    from pyspark.sql import functions as F

    return F.expr("substring(data, 1, 1) IN (" + ", ".join(f"X'{k:02X}'" for k in kinds) + ")")


#: Inserts sampled to tell whether the capture was taken with ``binary 'true'``.
_BINARY_SAMPLE = 100


def canonical_stream(rows: Any, catalog: Any, history: bool = False) -> pa.RecordBatch:
    """The whole transactions of ``rows`` (a capture: ``lsn``, ``xid``, ``data``, optionally a
    tie-breaker ``_tb``; any order) rebuilt into one self-contained stream (``lsn``,
    ``data``), with the Relation and Type messages they need from ``catalog`` (the capture,
    or its rows of the kinds ``_internal.CATALOG_KINDS``) injected."""
    return pa.record_batch(_internal.canonical_stream(rows, catalog, history))


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
        decoder.feed_batch(canonical_stream(table, table))
    return decoder.finish()


def decode_rows_locally(rows: Sequence[tuple[int, int, bytes, int]], options: dict[str, Any]) -> Any:
    """:func:`decode_table_locally` of ``(lsn, xid, data, tie-breaker)`` rows."""
    lsn, xid, data, tb = zip(*rows) if rows else ((), (), (), ())
    return decode_table_locally(pa.table({"lsn": pa.array(lsn, pa.int64()), "xid": pa.array(xid, pa.int64()),
                                          "data": pa.array(data, pa.binary()), "_tb": pa.array(tb, pa.int64())}),
                                options)


def normalized(df: Any, order_col: str | None) -> Any:
    """``lsn`` as a long (from 'X/Y' text if need be), ``xid`` as a long, ``data`` binary and a
    tie-breaker column ``_tb`` (Spark expressions: these run in the JVM, before any row
    reaches Python)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    lsn = F.col("lsn")
    if isinstance(df.schema["lsn"].dataType, StringType):
        hi = F.conv(F.substring_index(lsn, "/", 1), 16, 10).cast("bigint")
        lo = F.conv(F.substring_index(lsn, "/", -1), 16, 10).cast("bigint")
        lsn = F.shiftleft(hi, 32) + lo
    tb = F.col(order_col).cast("bigint") if order_col else F.lit(0).cast("bigint")
    return df.select(lsn.cast("bigint").alias("lsn"), F.col("xid").cast("bigint").alias("xid"),
                     F.col("data").cast("binary").alias("data"), tb.alias("_tb"))


def collect_catalog(ndf: Any) -> pa.Table:
    """The first, small pass (one scan): every Relation, Type, Stream Start, Stream Abort and
    Rollback Prepared row of the capture and the ends of transactions (Commit, Prepare, …),
    collected to the driver as ``lsn``, ``xid``, ``data``; the ends are then kept only for the
    transactions that sent a Relation or Type message (they place them). The first Inserts are
    added (they tell the binary mode): reading them stops at the first few."""
    cols = ["lsn", "xid", "data"]
    table: pa.Table = ndf.where(_kind_is(_internal.CATALOG_KINDS)).select(*cols).toArrow()
    kinds = pa.table(_internal.describe_messages(table.select(["data"]))).column("kind")
    is_end = pc.is_in(kinds, pa.array(["commit", "stream_commit", "prepare", "stream_prepare"]))
    senders = table.filter(pc.is_in(kinds, pa.array(["relation", "type"]))).column("xid").unique()
    table = table.filter(pc.or_(pc.invert(is_end), pc.is_in(table.column("xid"), senders)))
    inserts: pa.Table = ndf.where(_kind_is(b"I")).select(*cols).limit(_BINARY_SAMPLE).toArrow()
    return pa.concat_tables([table.select(cols), inserts.select(cols)]).combine_chunks()


def _is_binary(catalog: pa.Table) -> bool:
    """Whether the capture was taken with ``binary 'true'``, from the Inserts in ``catalog``."""
    told = pa.table(_internal.describe_messages(catalog.select(["data"]))).column("binary").drop_null()
    return bool(told[0].as_py()) if len(told) else False


def table_schemas(catalog: pa.Table, options: dict[str, Any]) -> dict[str, pa.Schema]:
    """Each table's unified schema as the decoder makes it (not yet mapped for Spark)."""
    type_options = {k: options[k] for k in ("special_values", "views", "interval", "uuid", "time", "binary", "array_ndims") if k in options}
    return {name: pa.table(t).schema for name, t in _internal.relation_schemas(catalog, **type_options).items()}


def _ranked_seq(tables: dict[str, pa.Table], truncates: pa.Table) -> dict[str, np.ndarray]:
    """Each row's rank within its transaction across tables (and TRUNCATEs, key ``""``), in
    the decoder's order: Spark's ``_seq``."""
    parts = [(name, t) for name, t in sorted(tables.items()) if t.num_rows]
    if truncates.num_rows:
        parts.append(("", truncates))
    if not parts:
        return {}
    commit = np.concatenate([t.column("_commit_lsn").to_numpy() for _, t in parts])
    seq = np.concatenate([t.column("_seq").to_numpy() for _, t in parts])
    rank = rank_within_commit(commit, seq)
    out: dict[str, np.ndarray] = {}
    offset = 0
    for name, t in parts:
        out[name] = rank[offset:offset + t.num_rows]
        offset += t.num_rows
    return out


def _with_seq(table: pa.Table, seq: np.ndarray) -> pa.Table:
    i = table.schema.get_field_index("_seq")
    return table.set_column(i, table.schema.field(i), pa.array(seq, pa.int64()))


def _decode_partition_fn(catalog: pa.Table, schemas: dict[str, pa.Schema], truncates: pa.Schema,
                         options: dict[str, Any], time_type: bool
                         ) -> tuple[Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], pa.Schema]:
    """The executors' step: rebuild the partition's transactions, decode them, and hand every
    table's rows back in one wide batch: ``_t`` (the table's number) and one struct column
    per table (``_truncates`` last), the others null. ``time_type``: the driver's session
    handles TIME (decided there, carried here in the targets)."""
    import pgoutput_arrow

    names = sorted(schemas)
    targets = [to_spark_arrow_schema(schemas[n], time_type) for n in names] + [truncates]
    wide = pa.schema([pa.field("_t", pa.int32(), False)]
                     + [pa.field(f"_t{i}", pa.struct(list(t)), True) for i, t in enumerate(targets)])

    def rows_of(i: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        cols = [pa.array(np.full(n, i, np.int32))]
        for j, f in enumerate(wide):
            if j == 0:
                continue
            if j - 1 == i:
                cols.append(pa.StructArray.from_arrays(batch.columns, fields=list(f.type)))
            else:
                cols.append(pa.nulls(n, f.type))
        return pa.RecordBatch.from_arrays(cols, schema=wide)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        # The catalog's history first: the decoder then numbers each table's versions and
        # columns as the driver's schemas do.
        stream = canonical_stream(pa.Table.from_batches(received), catalog, history=True)
        del received
        decoder = _decoder(options)
        decoder.feed_batch(stream)
        del stream
        changes = decoder.finish()
        seqs = _ranked_seq(changes.tables, changes.truncates)
        for i, name in enumerate(names):
            table = changes.tables.get(name)
            if table is None or table.num_rows == 0:
                continue
            # Columns by pg.column_id (a renamed column under its newest name), then by name.
            table = _with_seq(pgoutput_arrow.conform(table, schemas[name]), seqs[name])
            for chunk in table.to_batches(max_chunksize=65536):
                yield rows_of(i, cast_for_spark(chunk, targets[i]))
        if changes.truncates.num_rows:
            table = _with_seq(changes.truncates, seqs[""])
            for chunk in table.to_batches(max_chunksize=65536):
                yield rows_of(len(names), cast_for_spark(chunk, truncates))

    return run, wide


def decode(df: Any, *, order_col: str | None = None, num_partitions: int | None = None,
           with_truncates: bool = False, **options: Any) -> dict[str, Any]:
    """Decode a capture DataFrame (``lsn`` text or long, ``xid``, ``data`` binary) on the
    executors into ``{"schema.table": DataFrame}`` with the decoder's columns.

    The result does not depend on how ``df`` is partitioned or ordered. ``_seq`` is the row's
    rank within its transaction, across every table and the TRUNCATEs: ordering by
    ``(_commit_lsn, _seq)`` is the server's order (as for the streaming source; a single-process
    ``decode()`` numbers the whole stream instead). ``order_col`` (a capture-time row number, if
    the capture has one) only breaks ties among messages that share an LSN, which otherwise
    only decides ``_seq`` among them. ``options`` go to the decoder. The decoded rows are cached
    (``persist``) so that the per-table DataFrames share one decoding pass.
    ``with_truncates=True`` adds ``result["_truncates"]`` (:data:`TRUNCATES`): the decoder's
    TRUNCATEs (``relations``, ``cascade``, ``restart_identity`` and the transaction columns),
    for :func:`apply_changes`.
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
    ndf = normalized(df, order_col)
    catalog = collect_catalog(ndf)
    if options.get("binary") is None:
        # Every partition's decoder must type enum/composite columns alike, and the
        # schemas are made before any data is seen: the catalog pass sampled Inserts.
        options["binary"] = _is_binary(catalog)
    schemas = table_schemas(catalog, options)
    truncates = to_spark_arrow_schema(_decoder(options).finish().truncates.schema)
    n = num_partitions or max(spark.sparkContext.defaultParallelism, 1)
    fn, wide = _decode_partition_fn(catalog, schemas, truncates, options, time_type_enabled(spark))
    inter = ndf.repartition(n, "xid").mapInArrow(fn, spark_schema(wide)).persist()
    out: dict[str, Any] = {}
    for i, name in enumerate(sorted(schemas)):
        out[name] = inter.where(F.col("_t") == i).select(f"_t{i}.*")
    if with_truncates:
        out[TRUNCATES] = inter.where(F.col("_t") == len(schemas)).select(f"_t{len(schemas)}.*")
    return out
