"""The executors' side of the Spark streaming source: a micro-batch's decoded rows (a
:class:`~.stream_held.RangeChanges`) as Spark's Arrow batches, in ``(_commit_lsn, _seq)``
order: one table's rows with its TRUNCATEs as rows of their own (:func:`table_batches`), or
every table's changes in the generic change schema (:func:`generic_batches`).

Public names of a private module: :mod:`.stream` uses them."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from ..exceptions import ReplicationError
from ._common import from_executor, is_table_column
from .generic import changes_to_generic
from .stream_held import RangeChanges
from .stream_source import StreamSource
from .types import cast_for_spark

__all__ = ["table_batches", "generic_batches"]


def table_batches(source: StreamSource, changes: RangeChanges,
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
    out = pa.concat_tables(parts)
    if len(parts) > 1 or table is None or not _in_order(table):
        out = out.sort_by([("_commit_lsn", "ascending"), ("_seq", "ascending")]).combine_chunks()
    yield from out.to_batches(max_chunksize=65536)


def _in_order(table: pa.Table) -> bool:
    """Whether ``table``'s rows are in ``(_commit_lsn, _seq)`` order already (a table's rows
    come in commit order, each transaction's in ``_seq`` order: sorting is for TRUNCATEs)."""
    commit, seq = table.column("_commit_lsn"), table.column("_seq")
    if commit.null_count or seq.null_count or not pa.types.is_integer(commit.type):
        return False
    c = np.asarray(commit.to_numpy(), dtype=np.int64)
    q = np.asarray(seq.to_numpy(), dtype=np.int64)
    return bool(np.all((c[1:] > c[:-1]) | ((c[1:] == c[:-1]) & (q[1:] >= q[:-1]))))


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


def generic_batches(changes: RangeChanges, target: pa.Schema) -> Iterator[pa.RecordBatch]:
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
