"""A replica of a source table from its decoded changes: the latest state per key."""

from __future__ import annotations

from typing import Any, Sequence

from ._common import META_COLUMNS

__all__ = ["apply_changes"]


def apply_changes(changes: Any, keys: Sequence[str], *, truncates: Any = None,
                  table: str | None = None) -> Any:
    """The latest state per key of one table's changes (as :func:`decode` returns them).

    Changes are applied in commit order (``_commit_lsn``, ``_seq``). Deleted rows are removed.
    A column listed in ``_unchanged`` (an unchanged TOAST value) keeps the value of the
    previous version of the row, also across a key change. An update that changed the key
    (``_before`` carries the old key) removes the old key's row. With ``truncates`` (the
    ``"_truncates"`` DataFrame of ``decode(..., with_truncates=True)``) and ``table`` (this
    table's ``"schema.table"`` name), changes before the table's last TRUNCATE are dropped.
    ``_special`` (PostgreSQL's text of values the columns cannot hold) stays with the row:
    the state's ``_special`` is that of the row's latest change.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if truncates is not None:
        if table is None:
            raise ValueError("apply_changes: truncates= needs table= (the table's schema.table name)")
        last_trunc = (truncates.where(F.array_contains(F.col("relations"), table))
                      .select(F.max(F.struct("_commit_lsn", "_seq")).alias("m")).collect()[0].m)
        if last_trunc is not None:
            # The order changes are applied in (a TRUNCATE's _seq ranks it among its
            # transaction's changes), as the lake sinks cut.
            changes = changes.where(F.struct("_commit_lsn", "_seq")
                                    > F.struct(F.lit(last_trunc[0]).alias("_commit_lsn"),
                                               F.lit(last_trunc[1]).alias("_seq")))

    # _special is carried as a column: it is never listed in _unchanged, so each row state
    # takes its latest change's.
    meta = set(META_COLUMNS) - {"_special"}
    cols = [c for c in changes.columns if c not in meta]
    before_fields = set()
    before_type = changes.schema["_before"].dataType
    if hasattr(before_type, "fieldNames"):
        before_fields = set(before_type.fieldNames())
    new_key = F.struct(*[F.col(k).alias(k) for k in keys])
    if all(k in before_fields for k in keys):
        old_key = F.when(F.col("_before").isNotNull(),
                         F.struct(*[F.col("_before")[k].alias(k) for k in keys])).otherwise(new_key)
    else:
        old_key = new_key
    unchanged = F.coalesce(F.col("_unchanged"), F.array().cast("array<string>"))
    # A value is wrapped in a struct so that "set to NULL" and "not sent" stay apart.
    vals = [F.when(F.array_contains(unchanged, c), F.lit(None)).otherwise(F.struct(F.col(c).alias("v"))).alias(c)
            for c in cols]
    base = changes.select(F.col("_op"), F.col("_commit_lsn"), F.col("_seq"),
                          new_key.alias("_nk"), old_key.alias("_ok"), *vals)
    key_changed = (F.col("_op") == "update") & (F.col("_ok") != F.col("_nk"))
    deletes = base.where((F.col("_op") == "delete") | key_changed).select(
        F.col("_ok").alias("_k"), "_commit_lsn", "_seq", F.lit(True).alias("_del"),
        F.lit(None).cast(base.schema["_ok"].dataType).alias("_src"),
        *[F.lit(None).cast(base.schema[c].dataType).alias(c) for c in cols])
    upserts = base.where(F.col("_op") != "delete").select(
        F.col("_nk").alias("_k"), "_commit_lsn", "_seq", F.lit(False).alias("_del"),
        F.when(key_changed, F.col("_ok")).alias("_src"), *cols)
    events = deletes.unionByName(upserts)
    w = (Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))

    def carried(ev: Any) -> Any:
        # After a delete the row starts afresh: a segment id restarts the carry-over.
        seg = F.sum(F.col("_del").cast("int")).over(
            Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
            .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        ev = ev.withColumn("_segment", F.when(F.col("_del"), F.lit(-1)).otherwise(seg))
        ws = (Window.partitionBy("_k", "_segment").orderBy("_commit_lsn", "_seq")
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        prev = (Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
                .rowsBetween(Window.unboundedPreceding, -1))
        out = ev
        for c in cols:
            out = out.withColumn(c, F.when(F.col("_del"), F.last(F.col(c), True).over(prev))
                                 .otherwise(F.last(F.col(c), True).over(ws)))
        return out.drop("_segment")

    # First pass: the state of every key; then an upsert that moved a row from another key
    # takes its unchanged columns from that key's state at the move, and the state is redone.
    state = carried(events)
    moved_from = state.where("_del").select(
        F.col("_k").alias("_src"), F.col("_commit_lsn").alias("_m_commit"), F.col("_seq").alias("_m_seq"),
        *[F.col(c).alias(f"_m_{c}") for c in cols])
    joined = events.join(moved_from, (events["_src"] == moved_from["_src"])
                         & (events["_commit_lsn"] == moved_from["_m_commit"])
                         & (events["_seq"] == moved_from["_m_seq"]) & ~events["_del"], "left")
    events2 = joined.select(events["_k"], events["_commit_lsn"], events["_seq"], events["_del"],
                            events["_src"], *[F.coalesce(events[c], F.col(f"_m_{c}")).alias(c) for c in cols])
    final = carried(events2)
    last = Window.partitionBy("_k").orderBy(F.col("_commit_lsn").desc(), F.col("_seq").desc(), F.col("_del").asc())
    latest = final.withColumn("_rn", F.row_number().over(last)).where("_rn = 1 AND NOT _del")
    return latest.select(*[F.col(c)["v"].alias(c) for c in cols])
