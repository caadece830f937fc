"""The changes of one table within a commit collapsed to what a MERGE applies: one row per row
of the table they touched, computed with Arrow and numpy kernels (no Python object per change).

With a replica identity key (a primary key or an index), :func:`collapse_keyed` follows each
row of the table through the changes, also across key changes (an update whose ``_before``
holds another key moves the row): the result has, per row, the key it has in the target now
(``MATCH_PREFIX`` columns, null for a row the target cannot hold yet), whether it ends
deleted, its last values, and for every column some change left unsent (an unchanged TOAST
value, listed in ``_unchanged``) whether any change sent it (``SENT_PREFIX`` columns): a
column no change sent keeps the target's value.

With ``REPLICA IDENTITY FULL`` there is no key, only whole rows: :func:`collapse_full` turns
each change into the removal of its old row and the addition of its new one (an unchanged
TOAST value taken from the old row, which PostgreSQL sends whole for such tables), and keeps
per distinct row the net count, so a row added and removed within the commit cancels out;
a removed row carries how many of its equal rows the commit removes (``REMOVED``), since
PostgreSQL removes one row of identical duplicates per change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._internal import rows_json

__all__ = ["MATCH_PREFIX", "SENT_PREFIX", "DELETED", "PARTIAL", "REMOVED", "Collapsed",
           "collapse_keyed", "row_ids", "removed_duplicates", "collapse_full", "in_commit_order",
           "json_lines"]

#: Column name prefixes and columns of the collapsed rows that are not the table's.
MATCH_PREFIX = "_pgo_match_"
SENT_PREFIX = "_pgo_sent_"
DELETED = "_pgo_deleted"
PARTIAL = "_pgo_partial"
#: Of a removed row of a ``REPLICA IDENTITY FULL`` table: how many equal rows go.
REMOVED = "_pgo_removed"


@dataclass
class Collapsed:
    """The rows a MERGE applies: ``rows`` (the table's columns, ``_special``, ``_commit_lsn``,
    ``_commit_ts``, then the control columns), and the columns that have ``SENT_PREFIX``
    flags (some change left them unsent)."""

    rows: pa.Table
    partial_columns: list[str]


def in_commit_order(table: pa.Table) -> pa.Table:
    """``table``'s rows ordered by ``_commit_lsn`` then ``_seq`` (a no-op when they are)."""
    if table.num_rows < 2:
        return table
    commit = table.column("_commit_lsn").to_numpy()
    seq = table.column("_seq").to_numpy()
    if np.all((commit[1:] > commit[:-1]) | ((commit[1:] == commit[:-1]) & (seq[1:] >= seq[:-1]))):
        return table
    return table.take(np.lexsort((seq, commit)))


def _ops(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(is a delete, is an update) per row; an insert and a snapshot row are neither."""
    op = table.column("_op")
    return (np.asarray(pc.equal(op, "delete").to_numpy(zero_copy_only=False), dtype=bool),
            np.asarray(pc.equal(op, "update").to_numpy(zero_copy_only=False), dtype=bool))


def _codes(columns: list[pa.ChunkedArray | pa.Array]) -> np.ndarray:
    """One integer per row, equal where every column is equal (nulls equal each other)."""
    parts = []
    for col in columns:
        enc = pc.dictionary_encode(_flat(col), null_encoding="encode")
        parts.append(np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64))
    if len(parts) == 1:
        return parts[0]
    _, inverse = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
    return np.asarray(inverse, dtype=np.int64).reshape(-1)


def _flat(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _unchanged_rows(table: pa.Table) -> dict[str, np.ndarray]:
    """Column name -> the rows that left it unchanged (``_unchanged``)."""
    unchanged = _flat(table.column("_unchanged"))
    values = unchanged.flatten()
    if not len(values):
        return {}
    lengths = np.asarray(pc.fill_null(pc.list_value_length(unchanged), 0).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    rows = np.repeat(np.arange(len(unchanged)), lengths)
    names = values.dictionary_encode()
    codes = np.asarray(names.indices.to_numpy(zero_copy_only=False))
    return {str(name): rows[codes == i] for i, name in enumerate(names.dictionary.to_pylist())}


def _last_per(entity: np.ndarray, mask: np.ndarray, n_entities: int) -> np.ndarray:
    """Per entity, the last row where ``mask`` holds (-1: none)."""
    last = np.full(n_entities, -1, dtype=np.int64)
    rows = np.flatnonzero(mask)
    np.maximum.at(last, entity[rows], rows)
    return last


def _take(col: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``col`` at ``rows``; -1 gives null."""
    idx = pa.array(rows, pa.int64(), mask=rows < 0)
    return pc.take(col, idx)


def collapse_keyed(table: pa.Table, columns: list[str], keys: list[str]) -> Collapsed:
    """One row per row of the table that ``table``'s changes (in commit order) touched.

    An entity is one row of the table as the changes follow it. Without key changes an
    entity is a key. A key change (an update whose ``_before`` key differs from its key)
    moves the entity of the old key to the new one; a later row at the old key is another
    entity, which the target cannot hold yet. Only the changes of keys that take part in a
    key change are walked one by one (they are few); the rest is numpy."""
    n = table.num_rows
    is_delete, is_update = _ops(table)
    new_keys = [table.column(k) for k in keys]
    before = table.column("_before")
    before_fields = {before.type.field(i).name for i in range(before.type.num_fields)}
    moved = np.zeros(n, dtype=bool)
    old_keys: list[pa.Array] = []
    if all(k in before_fields for k in keys):
        has_before = np.asarray(before.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        old_keys = [pc.struct_field(before, k) for k in keys]
        differs = np.zeros(n, dtype=bool)
        for new, old in zip(new_keys, old_keys):
            ne = pc.fill_null(pc.not_equal(new, old), False)
            differs |= np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
        moved = is_update & has_before & differs
    moved_rows = np.flatnonzero(moved)
    if len(moved_rows):
        idx = pa.array(moved_rows, pa.int64())
        both = [pa.concat_arrays([_flat(new), _flat(pc.take(old, idx)).cast(new.type)])
                for new, old in zip(new_keys, old_keys)]
        codes = _codes(list(both))
        key_id, old_id = codes[:n], codes[:n].copy()
        old_id[moved_rows] = codes[n:]
    else:
        key_id = _codes(list(new_keys))
        old_id = key_id
    n_keys = int(key_id.max()) + 1 if n else 0

    entity = key_id.copy()
    # Per entity: the row whose key (its own, or its _before's) the target holds it under.
    match_row: dict[int, int] = {}
    match_before: dict[int, bool] = {}
    if len(moved_rows):
        involved = np.unique(np.concatenate([key_id[moved_rows], old_id[moved_rows]]))
        walk = np.flatnonzero(np.isin(key_id, involved))
        current: dict[int, int] = {}
        vacated: set[int] = set()
        next_entity = n_keys
        for i, k, ko, mv in zip(walk.tolist(), key_id[walk].tolist(), old_id[walk].tolist(),
                                moved[walk].tolist()):
            at = ko if mv else k
            e = current.get(at)
            if e is None:
                e = next_entity
                next_entity += 1
                if at not in vacated:  # the target's row at this key, if it has one
                    match_row[e] = i
                    match_before[e] = mv
            if mv:
                current.pop(at, None)
                vacated.add(at)
            current[k] = e
            entity[i] = e
    uniq, entity = np.unique(entity, return_inverse=True)
    entity = entity.reshape(-1)
    n_entities = len(uniq)
    last = _last_per(entity, np.ones(n, dtype=bool), n_entities)

    # The key the target holds each entity under.
    walked = uniq >= n_keys
    m_rows = last.copy()
    m_before = np.zeros(n_entities, dtype=bool)
    for j in np.flatnonzero(walked).tolist():
        e = int(uniq[j])
        m_rows[j] = match_row.get(e, -1)
        m_before[j] = match_before.get(e, False)
    # An entity of an unwalked key is held under that key (a delete's columns hold it too).
    out: dict[str, pa.Array] = {}
    for k, new, old in zip(keys, new_keys, old_keys or new_keys):
        value = _take(new, m_rows)
        if m_before.any():
            value = pc.if_else(pa.array(m_before), _take(old, m_rows), value)
        out[MATCH_PREFIX + k] = value

    unchanged = _unchanged_rows(table)
    partial = [c for c in columns if c in unchanged and c not in keys]
    sent_any = ~is_delete
    for c in columns:
        if c in partial:
            sent = sent_any.copy()
            sent[unchanged[c]] = False
            src = _last_per(entity, sent, n_entities)
            out[c] = _take(table.column(c), src)
        else:
            out[c] = _take(table.column(c), last)
    for c in ("_special", "_commit_lsn", "_commit_ts"):
        out[c] = _take(table.column(c), last)
    out[DELETED] = pa.array(is_delete[last])
    any_partial = np.zeros(n_entities, dtype=bool)
    for c in partial:
        sent = sent_any.copy()
        sent[unchanged[c]] = False
        flag = _last_per(entity, sent, n_entities) >= 0
        out[SENT_PREFIX + c] = pa.array(flag)
        any_partial |= ~flag
    out[PARTIAL] = pa.array(any_partial)
    return Collapsed(pa.table(out), partial)


def json_lines(table: pa.Table) -> pa.StringArray:
    """Each row of ``table`` as the Rust core's JSON object of its columns (jsonl's value
    rules), without a Python object per row."""
    n = table.num_rows
    if not n:
        return pa.array([], pa.string())
    text = rows_json(table)
    data = np.frombuffer(text, dtype=np.uint8)
    starts = np.concatenate([[0], np.flatnonzero(data == ord("\n")) + 1])[:n]
    ends = np.concatenate([starts[1:] - 1, [len(data) - (1 if data[-1] == ord("\n") else 0)]])
    # Lines without their newline: a view of the text per row, then made plain.
    lengths = ends - starts
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    keep = np.ones(len(data), dtype=bool)
    keep[data == ord("\n")] = False
    body = data[keep]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body.tobytes()))


def row_ids(table: pa.Table) -> np.ndarray:
    """One integer per row, equal for rows of equal values (compared as their JSON, so any
    column type, lists and maps included, compares)."""
    return _codes([json_lines(table)]) if table.num_rows else np.zeros(0, dtype=np.int64)


def removed_duplicates(removed: pa.Table, counts: list[int], held: pa.Table
                       ) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``held`` (a target's rows): whether it equals one of the ``removed``
    rows of :func:`collapse_full`, and whether it goes, ``counts`` (their ``REMOVED``) of
    each: of ``n`` equal rows the first ``r`` go (PostgreSQL removes one of identical rows
    per change), the others stay. Rows are compared on ``removed``'s columns."""
    ids = row_ids(pa.concat_tables([removed, held.select(removed.column_names)]))
    left = dict(zip(ids[:removed.num_rows].tolist(), counts))
    equal = np.zeros(held.num_rows, dtype=bool)
    gone = np.zeros(held.num_rows, dtype=bool)
    for i, rid in enumerate(ids[removed.num_rows:].tolist()):
        r = left.get(rid)
        if r is not None:
            equal[i] = True
            if r:
                gone[i] = True
                left[rid] = r - 1
    return equal, gone


def collapse_full(table: pa.Table, columns: list[str]) -> pa.Table:
    """For a ``REPLICA IDENTITY FULL`` table: the distinct rows that the changes add (a
    ``DELETED`` False row, repeated as many times as added) or remove (``DELETED`` True, once,
    with ``REMOVED`` saying how many of the target's equal rows go: each change removes one
    of identical duplicates)."""
    n = table.num_rows
    is_delete, is_update = _ops(table)
    before = table.column("_before")
    unchanged = _unchanged_rows(table)
    old_rows = np.flatnonzero(is_delete | is_update)
    new_rows = np.flatnonzero(~is_delete)
    old_cols: dict[str, pa.Array] = {}
    new_cols: dict[str, pa.Array] = {}
    for c in columns:
        col = table.column(c)
        # A delete's columns hold its old row; an update's old row is its _before.
        old_value = pc.if_else(pa.array(is_delete), col, pc.struct_field(before, c)) \
            if len(old_rows) else col
        if c in unchanged:
            mask = np.zeros(n, dtype=bool)
            mask[unchanged[c]] = True
            col = pc.if_else(pa.array(mask), pc.struct_field(before, c), col)
        new_cols[c] = pc.take(col, pa.array(new_rows, pa.int64()))
        old_cols[c] = pc.take(old_value, pa.array(old_rows, pa.int64()))
    # _special and the commit position come along with the added rows.
    for c in ("_special", "_commit_lsn", "_commit_ts"):
        new_cols[c] = pc.take(table.column(c), pa.array(new_rows, pa.int64()))
        old_cols[c] = pa.nulls(len(old_rows), table.schema.field(c).type)
    events = pa.concat_tables([pa.table(old_cols), pa.table(new_cols)])
    sign = np.concatenate([-np.ones(len(old_rows), dtype=np.int64),
                           np.ones(len(new_rows), dtype=np.int64)])
    ids = row_ids(events.select(columns))
    uniq, inverse = np.unique(ids, return_inverse=True)
    inverse = inverse.reshape(-1)
    net = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(net, inverse, sign)
    # A representative per distinct row: its last event (an addition's, when it has one,
    # for its _special and commit position).
    order = np.argsort(sign, kind="stable")  # removals first, so additions win
    rank = np.full(len(uniq), -1, dtype=np.int64)
    np.maximum.at(rank, inverse[order], np.arange(len(order)))
    rep = order[rank]
    adds = np.repeat(rep[net > 0], net[net > 0])
    removes = rep[net < 0]
    take = np.concatenate([removes, adds]).astype(np.int64)
    rows = events.take(pa.array(take, pa.int64()))
    deleted = np.concatenate([np.ones(len(removes), dtype=bool), np.zeros(len(adds), dtype=bool)])
    removed = np.concatenate([-net[net < 0], np.zeros(len(adds), dtype=np.int64)])
    return rows.append_column(DELETED, pa.array(deleted)).append_column(REMOVED, pa.array(removed))
