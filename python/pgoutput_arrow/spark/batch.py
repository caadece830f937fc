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
Small tables are handed out from the driver. A capture not in the server's order (parts that
overlap, a part of a transaction not found split) is decoded again, shuffled by xid.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ._common import is_binary_capture, narrow_catalog, ranked_seq, spark_schema, with_seq
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["decode", "table_schemas", "decode_table_locally", "decode_rows_locally", "canonical_stream",
           "collect_catalog", "capture_catalog", "placement", "normalized", "TRUNCATES"]

_log = logging.getLogger(__name__)

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
class CaptureCatalog:
    """What the driver learns of a capture in one filtering scan before decoding it
    (:func:`capture_catalog`).

    ``catalog``: the rows every partition's rebuild needs (``lsn``, ``xid``, ``data``): the
    Relation, Type and stream-edge messages, the ends of the transactions that sent a
    definition, and every framing message of the ``split`` transactions. ``split``: the
    transactions whose framing messages (Begin, the ends, the stream blocks' edges, …) are in
    more than one partition: in a capture in its order, exactly those a partition holds only
    a part of (a bulk load cut by the ends of Spark's file splits, a streamed transaction).
    ``sampled``: the count and bytes of a sample of the changes (about one in
    :data:`_SAMPLE_EVERY`), by relation id: which table is largest, and how wide its rows.
    """

    catalog: pa.Table
    split: list[int]
    sampled: dict[int, tuple[int, int]]


#: One in this many changes of each partition is sampled by the catalog scan, as its first 9
#: bytes (the kind, and the relation id at either place: after the kind, or after a streamed
#: change's xid) and its size.
_SAMPLE_EVERY = 64


def capture_catalog(ndf: Any) -> CaptureCatalog:
    """One Spark job over a :func:`normalized` capture: a filter of the messages of the kinds
    :data:`~pgoutput_arrow._internal.CATALOG_KINDS` and ``FRAMING_KINDS``, collected to the
    driver with their partition (a few per transaction; no aggregation, no shuffle), and the
    heads of a sample of the changes."""
    from pyspark.sql import functions as F

    # The partition is taken before the filter: spark_partition_id() is not deterministic, so
    # the optimizer cannot push the filter below a repartition in ``ndf`` (a round-robin one
    # would then deal out the kept rows alone, not every row as the decoding pass sees them).
    whole = _kind_is(_internal.CATALOG_KINDS + _internal.FRAMING_KINDS)
    sampled = _kind_is(b"IUD") & (F.monotonically_increasing_id() % _SAMPLE_EVERY == 0)
    kept = (ndf.select(F.spark_partition_id().alias("p"), "xid", "lsn", "data")
            .where(whole | sampled)
            .select("p", "xid", "lsn", F.when(whole, F.col("data")).otherwise(F.substring("data", 1, 9)).alias("data"),
                    F.when(whole, F.lit(None)).otherwise(F.length("data")).alias("bytes")))
    table = _on_partitions(kept)
    is_sample = table.column("bytes").is_valid()
    samples, table = table.filter(is_sample), table.filter(pc.invert(is_sample))
    split = _split(table.column("xid").to_numpy().astype(np.int64), table.column("p").to_numpy().astype(np.int64))
    return CaptureCatalog(narrow_catalog(table.select(["lsn", "xid", "data"]), split), split,
                          _sample_sizes(samples))


def _split(xid: np.ndarray, p: np.ndarray) -> list[int]:
    """The transactions (not 0) whose rows (``xid``) are in more than one partition (``p``)."""
    if not len(xid):
        return []
    order = np.lexsort((p, xid))
    xid, p = xid[order], p[order]
    starts = np.r_[0, np.flatnonzero(np.diff(xid)) + 1]
    ends = np.r_[starts[1:], len(xid)] - 1
    many = p[starts] != p[ends]
    return sorted(int(x) for x in xid[starts][many] if x != 0)


def _sample_sizes(samples: pa.Table) -> dict[int, tuple[int, int]]:
    """The sampled changes' count and bytes by relation id, read after the kind and after a
    streamed change's xid (the caller looks up the relations' ids: the other reading is a
    number no relation has, but by chance)."""
    if not samples.num_rows:
        return {}
    heads = samples.column("data").combine_chunks()
    whole = pc.equal(pc.binary_length(heads), 9)
    heads = heads.filter(whole)
    sizes = samples.column("bytes").combine_chunks().filter(whole).to_numpy(zero_copy_only=False).astype(np.int64)
    if not len(heads):
        return {}
    first = int(np.frombuffer(heads.buffers()[1], np.int32)[heads.offset])
    raw = np.frombuffer(heads.buffers()[2], np.uint8)[first:first + 9 * len(heads)].reshape(-1, 9)
    out: dict[int, tuple[int, int]] = {}
    for at in (1, 5):
        ids = raw[:, at:at + 4].copy().view(">u4").ravel().astype(np.int64)
        found, where = np.unique(ids, return_inverse=True)
        counts = np.bincount(where, minlength=len(found))
        total = np.bincount(where, weights=sizes, minlength=len(found))
        for relid, n, b in zip(found.tolist(), counts.tolist(), total.tolist()):
            c, t = out.get(relid, (0, 0))
            out[relid] = (c + n, t + int(b))
    return out


@dataclass(frozen=True)
class Placement:
    """Where the parts of the split transactions fall, from the decoding pass's summaries
    (:func:`placement`). ``offsets``: per partition, each split transaction's rows decoded in
    the parts before the partition's (its rows' first ``_seq``). ``ordered``: every split
    transaction's parts follow one another, and no partition holds a part of a transaction
    the catalog scan did not find split; else the capture is decoded again, shuffled by xid."""

    offsets: dict[int, dict[int, int]]
    ordered: bool


def placement(summaries: pa.Table) -> Placement:
    """:class:`Placement` of the decoding pass's :data:`SUMMARY` rows (every partition's)."""
    if summaries.num_rows and pc.any(summaries.column("incomplete")).as_py():
        return Placement({}, False)
    by_xid: dict[int, list[tuple[int, int, int, int, int, int]]] = {}
    for p, x, n, first, low, last, high in zip(*(summaries.column(c).to_pylist() for c in (
            "p", "xid", "rows", "first_lsn", "first_tb", "last_lsn", "last_tb"))):
        if n:
            by_xid.setdefault(x, []).append((first, low, p, n, last, high))
    offsets: dict[int, dict[int, int]] = {}
    for x, parts in by_xid.items():
        # The parts in (lsn, _tb) order. They follow one another when each one's last change
        # is below the next one's first; parts that meet at one lsn (a multi-insert's rows, cut
        # by a partition's end) must not overlap in _tb, and otherwise follow the partitions'
        # order.
        parts.sort()
        before = 0
        for i, (first, low, p, n, _, _) in enumerate(parts):
            if i:
                _, _, _, _, last, high = parts[i - 1]
                if last > first or (last == first and high > low):
                    return Placement({}, False)
            if before:
                offsets.setdefault(p, {})[x] = before
            before += n
    return Placement(offsets, True)


#: The SQL setting under which Spark plans a cached query adaptively, as any other (off by
#: default: then a cached plan's shuffles are not coalesced where a plain query's are).
_CACHED_AQE = "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning"

#: Spark caches a plan in a clone of the session while this is on (turned off in the clone), and
#: a clone of a Spark Connect session adds the session's artifacts again: every archive it added
#: (a shipped environment, hundreds of MB) is unpacked once more on the server, per ``persist``.
#: Off while the decoding pass is cached, the session itself plans it, as the clone would have.
_CACHED_BUCKETED_SCAN = "spark.sql.sources.bucketing.autoBucketedScan.enabled"


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


def _on_partitions(df: Any) -> pa.Table:
    """``df.toArrow()`` with every ``spark_partition_id()`` of it evaluated on the partitions
    the decoding pass reads: local relations are not folded on the driver."""
    table: pa.Table = _with_setting(df.sparkSession, "spark.sql.optimizer.excludedRules", "",
                                    lambda rules: ",".join(r for r in (rules, _FOLDS_LOCAL) if r), df.toArrow)
    return table


def _persist_adaptively(df: Any) -> Any:
    """``df.persist()``, planned as the catalog's plain query was (adaptively, if the session
    is): the capture's partitions must be the same in both, and a shuffle in the user's
    DataFrame is coalesced alike only when both are planned alike."""
    spark = df.sparkSession
    return _with_setting(spark, _CACHED_AQE, "false", lambda _: "true",
                         lambda: _with_setting(spark, _CACHED_BUCKETED_SCAN, "true", lambda _: "false",
                                               df.persist))


#: The decoding pass's first columns: ``_t`` is the row's table's number (or
#: :data:`_SUMMARY`), ``_p`` the partition it was decoded in; ``ipc``, when set, an Arrow IPC
#: stream of up to 64 Ki of the table's rows (:func:`layout`).
PACKED = pa.schema([pa.field("_t", pa.int32(), False), pa.field("_p", pa.int32(), False),
                    pa.field("ipc", pa.binary())])


def layout(direct: pa.Schema | None) -> pa.Schema:
    """What the decoding pass hands the JVM: :data:`PACKED`, then the columns of the one
    table decoded *direct* (``direct``, its schema for Spark; ``f0``, ``f1``, … in its
    order). Its rows are rows of the pass (``ipc`` null): the JVM caches them as columns, and
    its DataFrame is a projection of the cache, with no second trip through Python. Every
    other table's rows travel packed, a few large values of ``ipc``; each table's DataFrame
    unpacks its own (:func:`_unpack_fn`). One table only: another's columns would be nulls
    in each of its rows, which cost as much to move as values."""
    direct_fields = [pa.field(f"f{j}", f.type) for j, f in enumerate(direct or [])]
    return pa.schema([*PACKED, *direct_fields])


#: ``_t`` of a partition's summary (:data:`SUMMARY`), beside its tables' rows.
_SUMMARY = -1

#: ``_t`` of a partition's :data:`SIZES`, after its tables' rows.
_SIZES = -2

#: The bytes of each packed table's IPC streams in a partition (``t``: the table's number).
SIZES = pa.schema([pa.field("t", pa.int32()), pa.field("bytes", pa.int64())])

#: A partition's summary (``_p``: the partition): the rows it decoded of each split
#: transaction, the span of that transaction's changes it held, and the transactions it held a
#: part of that the catalog scan did not find split (``incomplete``; see
#: ``_internal.partition_summary``).
SUMMARY = pa.schema([pa.field("p", pa.int32()), pa.field("xid", pa.int64()), pa.field("rows", pa.int64()),
                     pa.field("first_lsn", pa.int64()), pa.field("first_tb", pa.int64()),
                     pa.field("last_lsn", pa.int64()), pa.field("last_tb", pa.int64()),
                     pa.field("incomplete", pa.bool_())])


def _ipc(batch: pa.RecordBatch) -> pa.Array:
    """``batch`` as one Arrow IPC stream, in a binary array of one value (no copy of it)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    ipc = sink.getvalue()
    offsets = pa.py_buffer(np.array([0, ipc.size], np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, ipc])


def _packed(t: int, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """One row of the pass (``schema``: its :func:`layout`) holding ``batch`` packed."""
    head = [pa.array([t], pa.int32()), pa.array([partition], pa.int32()), _ipc(batch)]
    return pa.record_batch(head + [pa.nulls(1, f.type) for f in list(schema)[len(head):]], schema=schema)


def _direct(t: int, partition: int, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (the direct table's rows) as rows of the pass (``schema``: its :func:`layout`)."""
    n = batch.num_rows
    head = [pa.array(np.full(n, t, np.int32)), pa.array(np.full(n, partition, np.int32)), pa.nulls(n, pa.binary())]
    return pa.RecordBatch.from_arrays(head + batch.columns, schema=schema)


def _unpack_fn(offsets: dict[int, dict[int, int]]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The rows of the IPC streams of :data:`PACKED` batches (one table's), the ``_seq`` of
    the rows of a split transaction moved past the rows of its parts in partitions before
    (``offsets``: :attr:`Placement.offsets`)."""
    shifts = {p: (np.array(sorted(by_xid), np.int64), np.array([by_xid[x] for x in sorted(by_xid)], np.int64))
              for p, by_xid in offsets.items()}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p, ipc in zip(batch.column("_p").to_pylist(), batch.column("ipc")):
                shift = shifts.get(p)
                for rows in pa.ipc.open_stream(ipc.as_buffer()):
                    yield rows if shift is None else _shifted(rows, *shift)

    return run


def _xid_index(xids: np.ndarray, rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``rows`` (a table or batch with ``_xid``): its transaction's place in
    ``xids`` (sorted, not empty), and whether it is one of them."""
    row_xid = rows.column("_xid").to_numpy(zero_copy_only=False)
    at = np.clip(np.searchsorted(xids, row_xid), 0, len(xids) - 1)
    return at, xids[at] == row_xid


def _shifted(rows: pa.RecordBatch, xids: np.ndarray, before: np.ndarray) -> pa.RecordBatch:
    """``rows`` with ``before[i]`` added to the ``_seq`` of the rows of transaction ``xids[i]``."""
    at, hit = _xid_index(xids, rows)
    add = np.where(hit, before[at], 0)
    if not add.any():
        return rows
    i = rows.schema.get_field_index("_seq")
    seq = pa.array(rows.column(i).to_numpy(zero_copy_only=False) + add, rows.schema.field(i).type)
    return pa.RecordBatch.from_arrays([seq if j == i else c for j, c in enumerate(rows.columns)], schema=rows.schema)


def _decode_partition_fn(catalog: CaptureCatalog, schemas: dict[str, pa.Schema], targets: list[pa.Schema],
                         direct: int, options: dict[str, Any], whole: bool,
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
    transactions (shuffled by xid)."""
    import pgoutput_arrow

    names = sorted(schemas)
    schema = layout(targets[direct] if direct >= 0 else None)
    split = [] if whole else catalog.split

    def rows_of(i: int, partition: int, table: pa.Table, sizes: dict[int, int]) -> Iterator[pa.RecordBatch]:
        for chunk in table.to_batches(max_chunksize=65536):
            cast = cast_for_spark(chunk, targets[i])
            if i == direct:
                yield _direct(i, partition, cast, schema)
            else:
                row = _packed(i, partition, cast, schema)
                sizes[i] = sizes.get(i, 0) + len(row.column(2)[0].as_buffer())
                yield row

    def summary(partition: int, spans: list[tuple[int, int, int, int, int, int]], decoded: list[int],
                incomplete: list[int]) -> pa.RecordBatch:
        rows = [(partition, x, n, first, low, last, high, False)
                for (x, _, first, low, last, high), n in zip(spans, decoded)]
        rows += [(partition, x, 0, 0, 0, 0, 0, True) for x in incomplete]
        return _packed(_SUMMARY, partition, pa.RecordBatch.from_pylist(
            [dict(zip(SUMMARY.names, r)) for r in rows], schema=SUMMARY), schema)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        received = [b for b in batches if b.num_rows]
        if not received:
            return
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else -1
        rows = pa.Table.from_batches(received)
        del received
        spans, incomplete = ([], []) if whole else _internal.partition_summary(rows, split)
        if incomplete:
            # Its rows would decode to less than the transaction holds: the driver decodes
            # the capture again, shuffled by transaction.
            yield summary(partition, [], [], incomplete)
            return
        # The catalog's history first: the decoder then numbers each table's versions and
        # columns as the driver's schemas do.
        stream = canonical_stream(rows, catalog.catalog, history=True, pieces=split)
        del rows
        decoder = _decoder(options)
        decoder.feed_batch(stream)
        del stream
        changes = decoder.finish()
        seqs = ranked_seq(changes.tables, changes.truncates)
        if spans:
            # The rows decoded of each split transaction (spans come sorted by xid).
            pieces = np.array([x for x, *_ in spans], np.int64)
            decoded = np.zeros(len(pieces), np.int64)
            for table in [*changes.tables.values(), changes.truncates]:
                at, hit = _xid_index(pieces, table)
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
            yield _packed(_SIZES, partition, pa.record_batch(
                [pa.array(list(sizes), pa.int32()), pa.array(list(sizes.values()), pa.int64())], schema=SIZES), schema)

    return run


def _summaries(packed: Any) -> tuple[pa.Table, dict[int, int]]:
    """Every partition's :data:`SUMMARY` rows of a persisted decoding pass (the job that
    decodes the capture and fills the cache), and the bytes of each packed table's IPC
    streams (:data:`SIZES`, by ``_t``)."""
    from pyspark.sql import functions as F

    got = packed.where(F.col("_t") < 0).select("_t", "ipc").toArrow()
    batches: dict[int, list[pa.RecordBatch]] = {_SUMMARY: [], _SIZES: []}
    for t, ipc in zip(got.column("_t").to_pylist(), got.column("ipc")):
        batches[t] += pa.ipc.open_stream(ipc.as_buffer())
    sizes: dict[int, int] = {}
    for r in pa.Table.from_batches(batches[_SIZES], schema=SIZES).to_pylist():
        sizes[r["t"]] = sizes.get(r["t"], 0) + r["bytes"]
    return pa.Table.from_batches(batches[_SUMMARY], schema=SUMMARY), sizes


#: A packed table whose IPC streams take at most this many bytes is handed out from the
#: driver (``createDataFrame``), collected with the other small ones in one job: a table's
#: own job over the cache costs about 0.2 s of Spark's overhead, paid by each of a capture's
#: many small tables (BENCHMARKS.md). At most :data:`_SMALL_TOTAL` bytes in all.
_SMALL_TABLE = 4 << 20
_SMALL_TOTAL = 64 << 20


def _small_tables(sizes: dict[int, int], tables: int, direct: int) -> list[int]:
    """The tables (numbers ``0 .. tables - 1``, not the ``direct`` one) handed out from the
    driver, smallest first."""
    chosen, total = [], 0
    for t in sorted((t for t in range(tables) if t != direct), key=lambda t: sizes.get(t, 0)):
        n = sizes.get(t, 0)
        if n > _SMALL_TABLE or total + n > _SMALL_TOTAL:
            break
        chosen.append(t)
        total += n
    return chosen


def _from_driver(packed: Any, small: list[int], targets: list[pa.Schema],
                 unpack: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]) -> dict[int, Any]:
    """The ``small`` tables' DataFrames, made on the driver from their packed rows collected
    in one job (unpacked as the executors would)."""
    from pyspark.sql import functions as F

    if not small:
        return {}
    spark = packed.sparkSession
    got = packed.where(F.col("_t").isin(small)).select("_t", "_p", "ipc").toArrow()
    out = {}
    for t in small:
        mine = got.filter(pc.equal(got.column("_t"), t)).select(["_p", "ipc"])
        # At least one batch: pyspark's createDataFrame fails on a table of no chunks with a
        # nested column ("cannot construct ChunkedArray from empty vector").
        batches = list(unpack(iter(mine.to_batches()))) or [pa.RecordBatch.from_pylist([], schema=targets[t])]
        table = pa.Table.from_batches(batches, schema=targets[t])
        out[t] = spark.createDataFrame(table, schema=spark_schema(targets[t]))
    return out


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
    only decides ``_seq`` among them. ``options`` go to the decoder. The decoding pass runs
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
    ndf = normalized(df, order_col)
    catalog = capture_catalog(ndf)
    if options.get("binary") is None:
        # Every partition's decoder must type enum/composite columns alike, and the
        # schemas are made before any data is seen: a few Inserts tell, when it matters.
        options["binary"], schemas = _binary_mode(catalog.catalog, options, ndf)
    else:
        schemas = table_schemas(catalog.catalog, options)
    names = sorted(schemas)
    time_type = time_type_enabled(spark)
    targets = [to_spark_arrow_schema(schemas[n], time_type) for n in names]
    targets.append(to_spark_arrow_schema(_decoder(options).finish().truncates.schema))
    direct = _largest(names, schemas, catalog.sampled)
    pass_schema = spark_schema(layout(targets[direct] if direct >= 0 else None))
    # The crates read text LSNs faster than the JVM converts them.
    rows = normalized(df, order_col, lsn_text=True)
    fn = _decode_partition_fn(catalog, schemas, targets, direct, options, whole=False)
    packed = _persist_adaptively(rows.mapInArrow(fn, pass_schema))
    summary, sizes = _summaries(packed)
    placed = placement(summary)
    if not placed.ordered:
        _log.info("decode: the capture's rows are not in the server's order across partitions; "
                  "decoding it again, shuffled by transaction")
        packed.unpersist()
        n = num_partitions or int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
        fn = _decode_partition_fn(catalog, schemas, targets, direct, options, whole=True)
        packed = _persist_adaptively(rows.repartition(n, "xid").mapInArrow(fn, pass_schema))
        sizes = _summaries(packed)[1]
    unpack = _unpack_fn(placed.offsets)
    count = len(targets) if with_truncates else len(names)
    small = _from_driver(packed, _small_tables(sizes, count, direct), targets, unpack)
    if len(small) == count:
        packed.unpersist()  # every table came to the driver

    def table(i: int) -> Any:
        if i in small:
            return small[i]
        mine = packed.where(F.col("_t") == i)
        if i == direct:
            return mine.select(*_direct_columns(targets[i], placed.offsets))
        return mine.select("_p", "ipc").mapInArrow(unpack, spark_schema(targets[i]))

    out: dict[str, Any] = {name: table(i) for i, name in enumerate(names)}
    if with_truncates:
        out[TRUNCATES] = table(len(names))
    return out


def _binary_mode(catalog: pa.Table, options: dict[str, Any], ndf: Any) -> tuple[bool, dict[str, pa.Schema]]:
    """Whether the capture was taken with ``binary 'true'``, and the tables' schemas in that
    mode. Its first Inserts are asked (a small job) only when the schemas depend on it (a
    type without a text rendering: an enum, a composite, …); else ``False``, which types
    them alike."""
    by_mode = {b: table_schemas(catalog, {**options, "binary": b}) for b in (False, True)}
    binary = by_mode[False] != by_mode[True] and is_binary_capture(_sample_inserts(ndf))
    return binary, by_mode[binary]


#: The direct table (:func:`layout`) is the largest only if its changes average at least
#: this many bytes: the JVM caches a direct row column by column and reads it back, which costs
#: more than a second trip through Python for narrow rows (a bulk load of pgbench's) and less
#: for wide ones (TOAST values): BENCHMARKS.md.
_DIRECT_ROW_BYTES = 1024


def _largest(names: list[str], schemas: dict[str, pa.Schema], sampled: dict[int, tuple[int, int]]) -> int:
    """The number of the table decoded direct (:func:`layout`): the one with the most bytes
    of sampled changes, when they average :data:`_DIRECT_ROW_BYTES` at least; else -1."""
    def sample(i: int) -> tuple[int, int]:
        relid = (schemas[names[i]].metadata or {}).get(b"pg.relation_id", b"")
        return sampled.get(int(relid), (0, 0)) if relid.isdigit() else (0, 0)

    best = max(range(len(names)), key=lambda i: (sample(i)[1], i), default=-1)
    if best < 0:
        return -1
    count, size = sample(best)
    return best if count and size >= _DIRECT_ROW_BYTES * count else -1


def _direct_columns(target: pa.Schema, offsets: dict[int, dict[int, int]]) -> list[Any]:
    """The direct table's columns, from the pass's ``f0``, ``f1``, … (:func:`layout`), with
    the ``_seq`` of its rows of split transactions moved past the parts before (as
    :func:`_shifted` does to an unpacked table's)."""
    from pyspark.sql import functions as F

    names = target.names
    columns = [F.col(f"f{j}") for j in range(len(names))]
    moved = {(p << 32) + x: before for p, by_xid in offsets.items() for x, before in by_xid.items()}
    if moved:
        # The decoder's columns come after the table's: the last _seq and _xid are its.
        seq, xid = (len(names) - 1 - names[::-1].index(n) for n in ("_seq", "_xid"))
        pairs = [F.lit(v).cast("bigint") for item in sorted(moved.items()) for v in item]
        key = F.col("_p").cast("bigint") * F.lit(1 << 32) + columns[xid]
        columns[seq] = columns[seq] + F.coalesce(F.try_element_at(F.create_map(*pairs), key), F.lit(0).cast("bigint"))
    return [c.alias(n) for c, n in zip(columns, names)]
