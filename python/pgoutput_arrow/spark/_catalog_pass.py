"""What the driver learns of a capture around the decoding pass of :func:`.batch.decode`:
the catalog scan before it (:func:`capture_catalog`: the Relation and Type messages, the
framing of the transactions split across partitions, a sample of the changes' sizes), and,
from the pass's summaries, where the parts of each split transaction fall (:func:`placement`).

Public names of a private module: :mod:`.batch` and :mod:`.source` use them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ._common import narrow_catalog, spark_schema, with_setting
from ._pieces import SAMPLE_EVERY, CapturePieces, catalog_rows_fn, catalog_rows_here, catalog_schema, pieces_frame

__all__ = ["kind_is", "BINARY_SAMPLE", "normalized", "lsn_as_long", "collect_catalog", "sample_inserts", "table_schemas",
           "CaptureCatalog", "SAMPLE_EVERY", "capture_catalog", "capture_catalog_of_pieces", "catalog_of_rows", "split_transactions", "sample_sizes",
           "Placement", "placement"]


def kind_is(kinds: bytes) -> Any:
    """A Spark condition: the message's first byte (its kind) is one of ``kinds``."""
    from pyspark.sql import functions as F

    return F.expr("substring(data, 1, 1) IN (" + ", ".join(f"X'{k:02X}'" for k in kinds) + ")")


#: Inserts sampled to tell whether the capture was taken with ``binary 'true'``.
BINARY_SAMPLE = 100


#: The optimizer rule that evaluates a projection of a local relation (``createDataFrame``)
#: on the driver, once: ``spark_partition_id()`` would be 0 for every row there, where the
#: decoding pass sees the relation's partitions.
_FOLDS_LOCAL = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"


def _on_partitions(df: Any) -> pa.Table:
    """``df.toArrow()`` with every ``spark_partition_id()`` of it evaluated on the partitions
    the decoding pass reads: local relations are not folded on the driver."""
    table: pa.Table = with_setting(df.sparkSession, "spark.sql.optimizer.excludedRules", "",
                                    lambda rules: ",".join(r for r in (rules, _FOLDS_LOCAL) if r), df.toArrow)
    return table


def normalized(df: Any, order_col: str | None, lsn_text: bool = False) -> Any:
    """``lsn`` as a long (from 'X/Y' text if need be, unless ``lsn_text``: rows for the
    crates, which read either), ``xid`` as a long, ``data`` binary and, given ``order_col``,
    a tie-breaker column ``_tb`` (Spark expressions: these run in the JVM, before any row
    reaches Python). Without one the crates break ties by the messages' bytes alone, and no
    column of zeros is shipped to the Python workers (pgbench's decode 3.91 -> 3.83 s:
    benches/findings.md, "The pass's cache uncompressed")."""
    from pyspark.sql import functions as F

    lsn = F.col("lsn") if lsn_text and _lsn_is_text(df) else lsn_as_long(df)
    tb = [F.col(order_col).cast("bigint").alias("_tb")] if order_col else []
    return df.select(lsn.alias("lsn"), F.col("xid").cast("bigint").alias("xid"),
                     F.col("data").cast("binary").alias("data"), *tb)


def _lsn_is_text(df: Any) -> bool:
    from pyspark.sql.types import StringType

    return isinstance(df.schema["lsn"].dataType, StringType)


def lsn_as_long(df: Any) -> Any:
    """``df``'s ``lsn`` column as a long (a Spark expression), from 'X/Y' text if need be:
    the JVM's ``conv`` costs about a microsecond a row, so it is taken after any filter."""
    from pyspark.sql import functions as F

    lsn = F.col("lsn")
    if _lsn_is_text(df):
        hi = F.conv(F.substring_index(lsn, "/", 1), 16, 10).cast("bigint")
        lo = F.conv(F.substring_index(lsn, "/", -1), 16, 10).cast("bigint")
        lsn = F.shiftleft(hi, 32) + lo
    return lsn.cast("bigint")


def collect_catalog(ndf: Any) -> pa.Table:
    """The first, small pass (one scan): every Relation, Type, Stream Start, Stream Abort and
    Rollback Prepared row of the capture and the ends of transactions (Commit, Prepare, …),
    collected to the driver as ``lsn``, ``xid``, ``data``; the ends are then kept only for the
    transactions that sent a Relation or Type message (they place them). The first Inserts are
    added (they tell the binary mode): reading them stops at the first few."""
    cols = ["lsn", "xid", "data"]
    table: pa.Table = ndf.where(kind_is(_internal.CATALOG_KINDS)).select(*cols).toArrow()
    return pa.concat_tables([narrow_catalog(table).select(cols), sample_inserts(ndf)]).combine_chunks()


def sample_inserts(ndf: Any) -> pa.Table:
    """The capture's first few Inserts (``lsn``, ``xid``, ``data``): they tell the binary
    mode; reading them stops at the first few."""
    return ndf.where(kind_is(b"I")).select("lsn", "xid", "data").limit(BINARY_SAMPLE).toArrow()


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
    :data:`SAMPLE_EVERY`), by relation id: which table is largest, and how wide its rows.
    """

    catalog: pa.Table
    split: list[int]
    sampled: dict[int, tuple[int, int]]


def capture_catalog(ndf: Any) -> CaptureCatalog:
    """One Spark job over a :func:`normalized` capture (its ``lsn`` text or long): a filter
    of the messages of the kinds :data:`~pgoutput_arrow._internal.CATALOG_KINDS` and
    ``FRAMING_KINDS``, collected to the driver with their partition (a few per transaction; no
    aggregation, no shuffle), and the heads of a sample of the changes."""
    from pyspark.sql import functions as F

    # The partition is taken before the filter: spark_partition_id() is not deterministic, so
    # the optimizer cannot push the filter below a repartition in ``ndf`` (a round-robin one
    # would then deal out the kept rows alone, not every row as the decoding pass sees them).
    # So nothing costly is computed before the filter: a text lsn is converted after it.
    whole = kind_is(_internal.CATALOG_KINDS + _internal.FRAMING_KINDS)
    # At random, not every n-th row (a workload's repeated pattern of changes would be
    # sampled one table of; :func:`._pieces.catalog_rows`).
    sampled = kind_is(b"IUD") & (F.rand(SAMPLE_EVERY) < 1 / SAMPLE_EVERY)
    filtered = ndf.select(F.spark_partition_id().alias("p"), "xid", "lsn", "data").where(whole | sampled)
    kept = filtered.select("p", "xid", lsn_as_long(filtered).alias("lsn"),
                           F.when(whole, F.col("data")).otherwise(F.substring("data", 1, 9)).alias("data"),
                           F.when(whole, F.lit(None)).otherwise(F.length("data")).alias("bytes"))
    return catalog_of_rows(_on_partitions(kept))


def capture_catalog_of_pieces(spark: Any, pieces: CapturePieces) -> CaptureCatalog:
    """:func:`capture_catalog` of a capture its tasks read themselves (:mod:`._pieces`), the
    piece's number as the partition: one Spark job, a task per piece; or, for a capture of no
    more bytes than one of Spark's splits, read here (a job would cost more)."""
    if pieces.stored_bytes <= pieces.split_bytes:
        return catalog_of_rows(catalog_rows_here(pieces))
    frame = pieces_frame(spark, pieces).mapInArrow(catalog_rows_fn(pieces), spark_schema(catalog_schema(pieces)))
    return catalog_of_rows(frame.toArrow())


def catalog_of_rows(table: pa.Table) -> CaptureCatalog:
    """The :class:`CaptureCatalog` of a catalog scan's rows (``p``, ``xid``, ``lsn``,
    ``data``, ``bytes``: null, or a sampled change's size beside its first 9 bytes)."""
    is_sample = table.column("bytes").is_valid()
    samples, table = table.filter(is_sample), table.filter(pc.invert(is_sample))
    split = split_transactions(table.column("xid").to_numpy().astype(np.int64), table.column("p").to_numpy().astype(np.int64))
    return CaptureCatalog(narrow_catalog(table.select(["lsn", "xid", "data"]), split), split,
                          sample_sizes(samples))


def split_transactions(xid: np.ndarray, p: np.ndarray) -> list[int]:
    """The transactions (not 0) whose rows (``xid``) are in more than one partition (``p``)."""
    if not len(xid):
        return []
    order = np.lexsort((p, xid))
    xid, p = xid[order], p[order]
    starts = np.r_[0, np.flatnonzero(np.diff(xid)) + 1]
    ends = np.r_[starts[1:], len(xid)] - 1
    many = p[starts] != p[ends]
    return sorted(int(x) for x in xid[starts][many] if x != 0)


def sample_sizes(samples: pa.Table) -> dict[int, tuple[int, int]]:
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
    """:class:`Placement` of the decoding pass's :data:`._packing.SUMMARY` rows (every partition's)."""
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
