"""Decoding a capture on Spark's executors (:func:`decode`), and in one process the same way
(:func:`decode_table_locally`, for the UDTF and the batch data source).

How it is distributed (docs/spark.md, "How decoding is distributed"): each partition of the
capture is decoded where it is. One scan first (:func:`capture_index`, grouped in the JVM)
finds the transactions split across partitions and collects a small catalog: the Relation and
Type messages, and the framing of the split transactions. There each partition's rows are
rebuilt by the crates (``_internal.canonical_stream``) into a self-contained stream, a part of
a split transaction framed by its real Begin and end, and decoded; ``_seq`` continues across
the parts. A capture whose split transactions' parts overlap is shuffled by xid first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ._common import is_binary_capture, narrow_catalog, ranked_seq, spark_schema, with_seq
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


def canonical_stream(rows: Any, catalog: Any, history: bool = False, pieces: Sequence[int] = ()) -> pa.RecordBatch:
    """The whole transactions of ``rows`` (a capture: ``lsn``, ``xid``, ``data``, optionally a
    tie-breaker ``_tb``; any order) rebuilt into one self-contained stream (``lsn``,
    ``data``), with the Relation and Type messages they need from ``catalog`` (the capture,
    or its rows of the kinds ``_internal.CATALOG_KINDS``) injected. ``pieces``: the
    transactions ``rows`` hold only a part of, framed from ``catalog`` (:func:`capture_index`)."""
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
        decoder.feed_batch(canonical_stream(table, table))
    return decoder.finish()


def decode_rows_locally(rows: Sequence[tuple[int, int, bytes, int]], options: dict[str, Any]) -> Any:
    """:func:`decode_table_locally` of ``(lsn, xid, data, tie-breaker)`` rows."""
    lsn, xid, data, tb = zip(*rows) if rows else ((), (), (), ())
    return decode_table_locally(pa.table({"lsn": pa.array(lsn, pa.int64()), "xid": pa.array(xid, pa.int64()),
                                          "data": pa.array(data, pa.binary()), "_tb": pa.array(tb, pa.int64())}),
                                options)


def normalized(df: Any, order_col: str | None, lsn_text: bool = False) -> Any:
    """``lsn`` as a long (from 'X/Y' text if need be, unless ``lsn_text``: rows for the
    crates, which read either), ``xid`` as a long, ``data`` binary and a tie-breaker column
    ``_tb`` (Spark expressions: these run in the JVM, before any row reaches Python)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    lsn = F.col("lsn")
    text = isinstance(df.schema["lsn"].dataType, StringType)
    if text and not lsn_text:
        hi = F.conv(F.substring_index(lsn, "/", 1), 16, 10).cast("bigint")
        lo = F.conv(F.substring_index(lsn, "/", -1), 16, 10).cast("bigint")
        lsn = F.shiftleft(hi, 32) + lo
    if not (text and lsn_text):
        lsn = lsn.cast("bigint")
    tb = F.col(order_col).cast("bigint") if order_col else F.lit(0).cast("bigint")
    return df.select(lsn.alias("lsn"), F.col("xid").cast("bigint").alias("xid"),
                     F.col("data").cast("binary").alias("data"), tb.alias("_tb"))


def collect_catalog(ndf: Any) -> pa.Table:
    """The first, small pass (one scan): every Relation, Type, Stream Start, Stream Abort and
    Rollback Prepared row of the capture and the ends of transactions (Commit, Prepare, …),
    collected to the driver as ``lsn``, ``xid``, ``data``; the ends are then kept only for the
    transactions that sent a Relation or Type message (they place them). The first Inserts are
    added (they tell the binary mode): reading them stops at the first few."""
    cols = ["lsn", "xid", "data"]
    table: pa.Table = ndf.where(_kind_is(_internal.CATALOG_KINDS)).select(*cols).toArrow()
    return pa.concat_tables([narrow_catalog(table).select(cols), _sample_inserts(ndf)]).combine_chunks()


def _sample_inserts(ndf: Any) -> pa.Table:
    """The capture's first few Inserts (``lsn``, ``xid``, ``data``): they tell the binary
    mode; reading them stops at the first few."""
    return ndf.where(_kind_is(b"I")).select("lsn", "xid", "data").limit(_BINARY_SAMPLE).toArrow()


def table_schemas(catalog: pa.Table, options: dict[str, Any]) -> dict[str, pa.Schema]:
    """Each table's unified schema as the decoder makes it (not yet mapped for Spark)."""
    type_options = {k: options[k] for k in ("special_values", "views", "interval", "uuid", "time", "binary", "array_ndims") if k in options}
    return {name: pa.table(t).schema for name, t in _internal.relation_schemas(catalog, **type_options).items()}


@dataclass(frozen=True)
class CaptureIndex:
    """What the driver learns of a capture in one scan before decoding it (:func:`capture_index`).

    ``catalog``: the rows every partition's rebuild needs (``lsn``, ``xid``, ``data``): the
    Relation, Type and stream-edge messages, the ends of the transactions that sent a
    definition, and every framing message of the transactions split across partitions.
    ``rows``: the number of rows of each partition (a check that the partitions did not change
    between this scan and the decode). ``pieces``: for each partition, the transactions it holds
    only a part of, each with the changes before its part (its rows' first ``_seq``) and the
    changes in it. ``ordered``: whether every split transaction's parts follow one another
    (a capture in its order, however Spark split its files); else :func:`decode` shuffles.
    """

    catalog: pa.Table
    rows: dict[int, int]
    pieces: dict[int, dict[int, tuple[int, int]]]
    ordered: bool


def capture_index(ndf: Any) -> CaptureIndex:
    """One Spark job over a :func:`normalized` capture, two kinds of rows collected to the
    driver: per partition and transaction, fixed-width aggregates grouped in the JVM (a hash
    aggregation: rows, changes (Insert, Update, Delete, Truncate), the lowest and highest
    ``lsn`` and ``_tb`` of the changes); and every message of the kinds
    :data:`~pgoutput_arrow._internal.CATALOG_KINDS` and ``FRAMING_KINDS`` with its partition."""
    from pyspark.sql import functions as F

    change = F.col("change")
    per = (ndf.select(F.spark_partition_id().alias("p"), "xid", "lsn", "_tb",
                      _kind_is(_internal.CHANGE_KINDS).alias("change"))
           .groupBy("p", "xid")
           .agg(F.count(F.lit(1)).alias("rows"), F.sum(change.cast("long")).alias("changes"),
                F.min(F.when(change, F.col("lsn"))).alias("first_lsn"),
                F.max(F.when(change, F.col("lsn"))).alias("last_lsn"),
                F.min(F.when(change, F.col("_tb"))).alias("low_tb"),
                F.max(F.when(change, F.col("_tb"))).alias("high_tb")))
    kept = (ndf.where(_kind_is(_internal.CATALOG_KINDS + _internal.FRAMING_KINDS))
            .select(F.spark_partition_id().alias("p"), "xid", "lsn", "data"))
    both = _on_partitions(per.unionByName(kept, allowMissingColumns=True))
    is_message = both.column("data").is_valid()
    all_messages = both.filter(is_message).select(["lsn", "xid", "data"])
    table = both.filter(pc.invert(is_message))
    xid = table.column("xid").to_numpy().astype(np.int64)
    rows: dict[int, int] = {}
    for k, n in zip(table.column("p").to_pylist(), table.column("rows").to_pylist()):
        rows[k] = rows.get(k, 0) + n
    # Transactions in more than one partition (xid 0: messages outside any transaction).
    pairs = np.stack([table.column("p").to_numpy().astype(np.int64), xid])
    xs, counts = np.unique(pairs[1], return_counts=True)
    split = set(xs[(counts > 1) & (xs != 0)].tolist())
    catalog = narrow_catalog(all_messages, split)
    pieces: dict[int, dict[int, tuple[int, int]]] = {}
    for part, x in pairs.T.tolist():
        if x in split:
            # Every part, even one of framing messages only (a Commit cut off from its changes).
            pieces.setdefault(part, {})[x] = (0, 0)
    ordered = True
    if split:
        sub = table.filter(pa.array(np.isin(xid, np.fromiter(split, np.int64, len(split)))))
        rolled_back = _rolled_back_changes(ndf, all_messages, split)
        by_xid: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
        for part, x, n, first, last, low, high in zip(
                sub.column("p").to_pylist(), sub.column("xid").to_pylist(), sub.column("changes").to_pylist(),
                sub.column("first_lsn").to_pylist(), sub.column("last_lsn").to_pylist(),
                sub.column("low_tb").to_pylist(), sub.column("high_tb").to_pylist()):
            n -= rolled_back.get((part, x), 0)
            if n:
                by_xid.setdefault(x, []).append((first, low, part, n, last, high))
        for x, parts in by_xid.items():
            # The parts in (lsn, _tb) order. They follow one another when each one's last
            # change is below the next one's first; parts that meet at one lsn (a
            # multi-insert's rows, cut by a partition's end) must not overlap in _tb, and
            # otherwise follow the partitions' order.
            parts.sort()
            before = 0
            for i, (first, low, part, n, _, _) in enumerate(parts):
                if i:
                    _, _, _, _, last, high = parts[i - 1]
                    if last > first or (last == first and high > low):
                        ordered = False
                pieces.setdefault(part, {})[x] = (before, n)
                before += n
    return CaptureIndex(catalog, rows, pieces, ordered)


#: The SQL setting under which Spark plans a cached query adaptively, as any other (off by
#: default: then a cached plan's shuffles are not coalesced where a plain query's are).
_CACHED_AQE = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"


#: The optimizer rule that evaluates a projection of a local relation (``createDataFrame``)
#: on the driver, once: ``spark_partition_id()`` would be 0 for every row there, where the
#: decoding pass sees the relation's partitions.
_FOLDS_LOCAL = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"


def _with_setting(spark: Any, key: str, default: str, value: Callable[[str], str], action: Callable[[], Any]) -> Any:
    """``action()`` with the session's SQL setting ``key`` at ``value(its value, or
    default)``, then the setting as it was (unset if it was empty)."""
    before = spark.conf.get(key, default)
    spark.conf.set(key, value(before))
    try:
        return action()
    finally:
        if before:
            spark.conf.set(key, before)
        else:
            spark.conf.unset(key)


#: At most this many partitions for the index's aggregation: its rows are a few per
#: transaction, and every map task writes a file per shuffle partition (200 by default).
_INDEX_SHUFFLE_PARTITIONS = 8


def _on_partitions(df: Any) -> pa.Table:
    """``df.toArrow()`` with every ``spark_partition_id()`` of it evaluated on the partitions
    the decoding pass reads: local relations are not folded on the driver."""
    spark = df.sparkSession

    def collect() -> pa.Table:
        return _with_setting(spark, "spark.sql.shuffle.partitions", "200",
                             lambda n: str(min(int(n), _INDEX_SHUFFLE_PARTITIONS)), df.toArrow)

    table: pa.Table = _with_setting(spark, "spark.sql.optimizer.excludedRules", "",
                                    lambda rules: ",".join(r for r in (rules, _FOLDS_LOCAL) if r), collect)
    return table


def _persist_adaptively(df: Any) -> Any:
    """``df.persist()``, planned as the index's plain query was (adaptively, if the session
    is): the capture's partitions must be the same in both, and a shuffle in the user's
    DataFrame is coalesced alike only when both are planned alike."""
    return _with_setting(df.sparkSession, _CACHED_AQE, "false", lambda _: "true", df.persist)


def _rolled_back_changes(ndf: Any, messages: pa.Table, split: set[int]) -> dict[tuple[int, int], int]:
    """The changes of rolled-back subtransactions (a streamed transaction's ROLLBACK TO
    SAVEPOINT: no row comes of them) in each partition's part of the ``split`` transactions,
    by (partition, xid): a second, filtered scan, only when there are such subtransactions."""
    from pyspark.sql import functions as F

    aborts = pa.table(_internal.describe_messages(messages.select(["data"])))
    whole, sub = aborts.column("xid").to_pylist(), aborts.column("subxid").to_pylist()
    subxids = {s for x, s in zip(whole, sub) if x is not None and s != x and x in split}
    if not subxids:
        return {}
    # Inside a stream block a change carries its (sub)transaction's xid after its kind.
    in_stream_xid = F.conv(F.hex(F.substring("data", 2, 4)), 16, 10).cast("long")
    query = (ndf.where(_kind_is(_internal.CHANGE_KINDS) & F.col("xid").isin(sorted(split))
                         & in_stream_xid.isin(sorted(subxids)))
               .groupBy(F.spark_partition_id().alias("p"), "xid").count())
    counted = _on_partitions(query)
    return {(p, x): n for p, x, n in zip(counted.column("p").to_pylist(), counted.column("xid").to_pylist(),
                                         counted.column("count").to_pylist())}


#: What a partition that changed between the index's scan and the decoding means, and the cure.
_CHANGED_PARTITIONS = ("the capture DataFrame's partitions must not change between decode()'s index scan and its "
                       "decoding (persist it, or read it from files)")


def _with_offsets(seqs: dict[str, np.ndarray], changes: Any, pieces: dict[int, tuple[int, int]],
                  partition: int) -> dict[str, np.ndarray]:
    """``_seq`` of the rows of this partition's split transactions moved past the changes
    of the parts before it; each part's row count checked against the index (a partition
    that changed between the index scan and now, or a change that gave no row, is an error,
    never a silent renumbering)."""
    if not pieces:
        return seqs
    xs = np.array(sorted(pieces), np.int64)
    before = np.fromiter((pieces[x][0] for x in xs.tolist()), np.int64, len(xs))
    expected = np.fromiter((pieces[x][1] for x in xs.tolist()), np.int64, len(xs))
    got = np.zeros(len(xs), np.int64)
    out: dict[str, np.ndarray] = {}
    for name, seq in seqs.items():
        table = changes.tables.get(name) if name else changes.truncates
        row_xid = table.column("_xid").to_numpy(zero_copy_only=False)
        at = np.clip(np.searchsorted(xs, row_xid), 0, len(xs) - 1)
        hit = xs[at] == row_xid
        np.add.at(got, at[hit], 1)
        out[name] = np.where(hit, seq + before[at], seq)
    if not np.array_equal(got, expected):
        bad = [(int(x), int(e), int(g)) for x, e, g in zip(xs, expected, got) if e != g]
        raise RuntimeError(
            f"spark partition {partition}: the parts of split transactions gave other row counts than the "
            f"capture index counted (xid, expected, got): {bad[:5]}; {_CHANGED_PARTITIONS}")
    return out


#: What the decoding pass hands the JVM: Arrow IPC streams of one table's rows each.
PACKED = pa.schema([pa.field("_t", pa.int32(), False), pa.field("ipc", pa.binary(), False)])


def _unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the IPC streams of :data:`PACKED` batches (one table's)."""
    for batch in batches:
        for ipc in batch.column("ipc"):
            yield from pa.ipc.open_stream(ipc.as_buffer())


def _decode_partition_fn(catalog: pa.Table, schemas: dict[str, pa.Schema], truncates: pa.Schema,
                         options: dict[str, Any], time_type: bool, index: CaptureIndex | None,
                         ) -> tuple[Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], list[pa.Schema]]:
    """The executors' step: rebuild the partition's transactions, decode them, and hand every
    table's rows back as Arrow IPC streams, a row (``_t``: the table's number, ``_truncates``
    last; ``ipc``: the stream) per batch of up to 64 Ki rows, already cast for Spark: the JVM
    moves a few large values, not every row, and each table's DataFrame unpacks its own
    (:func:`_unpack`). ``time_type``: the driver's session handles TIME (decided there,
    carried here in the targets). ``index``: the capture's partitions are decoded where they
    are, split transactions rebuilt from it (:func:`capture_index`); ``None``: the partitions
    hold whole transactions (shuffled by xid)."""
    import pgoutput_arrow

    names = sorted(schemas)
    targets = [to_spark_arrow_schema(schemas[n], time_type) for n in names] + [truncates]
    rows_by_partition = index.rows if index else {}
    pieces_by_partition = index.pieces if index else {}

    def rows_of(i: int, table: pa.Table) -> Iterator[pa.RecordBatch]:
        for chunk in table.to_batches(max_chunksize=65536):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, targets[i]) as writer:
                writer.write_batch(cast_for_spark(chunk, targets[i]))
            ipc = sink.getvalue()
            offsets = pa.py_buffer(np.array([0, ipc.size], np.int32).tobytes())
            yield pa.record_batch([pa.array([i], pa.int32()),
                                   pa.Array.from_buffers(pa.binary(), 1, [None, offsets, ipc])], schema=PACKED)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [b for b in batches if b.num_rows]
        partition = -1
        pieces: dict[int, tuple[int, int]] = {}
        if index is not None:
            from pyspark import TaskContext

            context = TaskContext.get()
            partition = context.partitionId() if context is not None else -1
            pieces = pieces_by_partition.get(partition, {})
            n = sum(b.num_rows for b in received)
            if n != rows_by_partition.get(partition, 0):
                raise RuntimeError(
                    f"spark partition {partition} holds {n} capture rows, the capture index counted "
                    f"{rows_by_partition.get(partition, 0)}: {_CHANGED_PARTITIONS}")
        if not received:
            return
        # The catalog's history first: the decoder then numbers each table's versions and
        # columns as the driver's schemas do.
        stream = canonical_stream(pa.Table.from_batches(received), catalog, history=True, pieces=sorted(pieces))
        del received
        decoder = _decoder(options)
        decoder.feed_batch(stream)
        del stream
        changes = decoder.finish()
        seqs = _with_offsets(ranked_seq(changes.tables, changes.truncates), changes, pieces, partition)
        for i, name in enumerate(names):
            table = changes.tables.get(name)
            if table is None or table.num_rows == 0:
                continue
            # Columns by pg.column_id (a renamed column under its newest name), then by name.
            yield from rows_of(i, with_seq(pgoutput_arrow.conform(table, schemas[name]), seqs[name]))
        if changes.truncates.num_rows:
            yield from rows_of(len(names), with_seq(changes.truncates, seqs[""]))

    return run, targets


def decode(df: Any, *, order_col: str | None = None, num_partitions: int | None = None,
           with_truncates: bool = False, **options: Any) -> dict[str, Any]:
    """Decode a capture DataFrame (``lsn`` text or long, ``xid``, ``data`` binary) on the
    executors into ``{"schema.table": DataFrame}`` with the decoder's columns.

    Each of ``df``'s partitions is decoded where it is, a transaction split across partitions
    (a bulk load) in parts, in parallel: one scan first (:func:`capture_index`) gives every part
    its transaction's framing and the rank of its first change. Only when the capture's rows
    are not in the server's order within a transaction split across partitions (a shuffled
    capture) are they shuffled by transaction first, into ``num_partitions`` partitions
    (default ``spark.sql.shuffle.partitions``).

    The result does not depend on how ``df`` is partitioned or ordered. ``_seq`` is the row's
    rank within its transaction, across every table and the TRUNCATEs: ordering by
    ``(_commit_lsn, _seq)`` is the server's order (as for the streaming source; a single-process
    ``decode()`` numbers the whole stream instead). ``order_col`` (a capture-time row number, if
    the capture has one) only breaks ties among messages that share an LSN, which otherwise
    only decides ``_seq`` among them. ``options`` go to the decoder. The decoded rows are cached
    (``persist``) so that the per-table DataFrames share one decoding pass.
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
    ndf = normalized(df, order_col)
    index = capture_index(ndf)
    if options.get("binary") is None:
        # Every partition's decoder must type enum/composite columns alike, and the
        # schemas are made before any data is seen: a few Inserts tell.
        options["binary"] = is_binary_capture(_sample_inserts(ndf))
    schemas = table_schemas(index.catalog, options)
    truncates = to_spark_arrow_schema(_decoder(options).finish().truncates.schema)
    time_type = time_type_enabled(spark)
    # The crates read text LSNs faster than the JVM converts them.
    rows = normalized(df, order_col, lsn_text=True)
    if index.ordered:
        fn, targets = _decode_partition_fn(index.catalog, schemas, truncates, options, time_type, index)
        packed = rows.mapInArrow(fn, spark_schema(PACKED))
    else:
        n = num_partitions or int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
        fn, targets = _decode_partition_fn(index.catalog, schemas, truncates, options, time_type, None)
        packed = rows.repartition(n, "xid").mapInArrow(fn, spark_schema(PACKED))
    packed = _persist_adaptively(packed)

    def table(i: int) -> Any:
        return packed.where(F.col("_t") == i).select("ipc").mapInArrow(_unpack, spark_schema(targets[i]))

    out: dict[str, Any] = {name: table(i) for i, name in enumerate(sorted(schemas))}
    if with_truncates:
        out[TRUNCATES] = table(len(schemas))
    return out
