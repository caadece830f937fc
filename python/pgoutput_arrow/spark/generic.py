"""The generic change schema of the ``pgoutput_changes`` UDTF and of the data sources
without ``table``: one row per change of any table, its values as text maps (PostgreSQL's text of each value)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._internal import pg_text
from ._common import table_columns
from .types import cast_column, spark_arrow_type

__all__ = ["UDTF_SCHEMA", "changes_to_generic"]

UDTF_SCHEMA = ("table string, op string, lsn bigint, commit_lsn bigint, commit_ts timestamp, "
               "xid bigint, seq bigint, new map<string,string>, old map<string,string>, "
               "unchanged array<string>")

def _text_map(table: pa.Table, names: list[str]) -> pa.Array:
    """Rows as map<string,string> of each column's text (NULLs kept as NULL values)."""
    n = table.num_rows
    if not names:
        return pa.array([[] for _ in range(n)], pa.map_(pa.string(), pa.string()))
    texts = []
    for c in names:
        texts.append(_column_text(table.column(c)))
    keys = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    items = pa.array(np.stack([t.to_numpy(zero_copy_only=False) for t in texts], axis=1).reshape(-1), pa.string())
    offsets = pa.array(np.arange(0, len(names) * (n + 1), len(names), dtype=np.int32))
    return pa.MapArray.from_arrays(offsets, keys, items)


def _column_text(column: pa.ChunkedArray) -> pa.Array:
    """PostgreSQL's text of each value (the crates render it); a type without one (none
    the decoder makes today) as JSON of its Spark value."""
    try:
        return pa.table(pg_text(pa.table({"c": column}))).column(0).combine_chunks()
    except ValueError:
        col = cast_column(column, spark_arrow_type(column.type))
        if pa.types.is_struct(col.type) or pa.types.is_list(col.type) or pa.types.is_binary(col.type):
            return pa.array([None if v is None else (v.hex() if isinstance(v, bytes) else json.dumps(v, default=str))
                             for v in col.to_pylist()], pa.string())
        return pc.cast(col, pa.string())


def _with_special(texts: pa.Array, table: pa.Table, prefix: str) -> pa.Array:
    """``texts`` (a map of column texts per row) with each special value's text (the row's
    ``_special`` entries whose key starts with ``prefix``) in its column's place."""
    if "_special" not in table.column_names:
        return texts
    special = table.column("_special").combine_chunks()
    if special.null_count == len(special):
        return texts
    rows = texts.to_pylist()
    for i, entries in enumerate(special.to_pylist()):
        if not entries or rows[i] is None:
            continue
        extra = {k[len(prefix):]: v for k, v in entries
                 if k.startswith(prefix) and (prefix or not k.startswith("_before."))}
        rows[i] = [(k, extra.get(k, v)) for k, v in rows[i]]
    return pa.array(rows, texts.type)


def changes_to_generic(changes: Any) -> Iterator[pa.RecordBatch]:
    """Every table of a decoder result in the UDTF's one generic schema."""
    ts = pa.timestamp("us", tz="UTC")
    for name, table in sorted(changes.tables.items()):
        if table.num_rows == 0:
            continue
        cols = table_columns(table.schema)
        before = table.column("_before").combine_chunks()
        if before.null_count == len(before):
            old = pa.nulls(table.num_rows, pa.map_(pa.string(), pa.string()))
        else:
            flat = pa.table({f.name: before.field(i) for i, f in enumerate(before.type)})
            old = pc.if_else(before.is_null(), pa.nulls(table.num_rows, pa.map_(pa.string(), pa.string())),
                             _text_map(flat, flat.column_names))
        yield pa.record_batch({
            "table": pa.array([name] * table.num_rows, pa.string()),
            "op": cast_column(table.column("_op"), pa.string()),
            "lsn": cast_column(table.column("_lsn"), pa.int64()),
            "commit_lsn": cast_column(table.column("_commit_lsn"), pa.int64()),
            "commit_ts": cast_column(table.column("_commit_ts"), ts),
            "xid": cast_column(table.column("_xid"), pa.int64()),
            "seq": cast_column(table.column("_seq"), pa.int64()),
            "new": _with_special(_text_map(table, cols), table, ""),
            "old": _with_special(old, table, "_before."),
            "unchanged": cast_column(table.column("_unchanged"), pa.list_(pa.field("element", pa.string()))),
        })
