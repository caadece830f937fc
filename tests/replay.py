"""Replay decoded changes into table state, and read the same state back from PostgreSQL.

:func:`replay` applies every change of a :class:`pgoutput_arrow.Changes` (the rows of each
per-table Arrow table and the TRUNCATEs) in commit order (``_commit_lsn``, then ``_seq``) to
an in-memory state per table, keyed by the table's key columns:

* insert (and a snapshot's row, ``_op = 'snapshot'``) adds the row;
* update removes the row under its old key (``_before`` when the message carried one,
  else the new row's key) and adds the new row; a column listed in ``_unchanged`` (an
  unchanged TOAST value, sent as nothing) keeps the previous row's value;
* delete removes the row under its old key (``_before``);
* truncate clears every listed table.

A table without key columns (REPLICA IDENTITY FULL with no primary key) is a multiset:
delete and update remove one row equal to ``_before``.

:func:`server_rows` reads a table from PostgreSQL with one SQL expression per column,
chosen from the decoded column's Arrow type, so that both sides become the same Python
values (:func:`client_value`). Nothing here trusts the decoder's rendering of a value
when PostgreSQL can give a typed one: dates, times, timestamps and intervals are compared
as their integer fields (which also covers ±infinity and BC), uuid as its 16 bytes,
numeric(p,s) as Decimal, undecodable binary values as the type's send bytes, and only the
columns that the decoder documents as "PostgreSQL's text output" as ``col::text``.
"""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from typing import Any, Iterable, Sequence

import pyarrow as pa

import pgoutput_arrow
from pgoutput_arrow._internal import pg_text

META = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special")

# The decoder's ±infinity dates and timestamps (DuckDB's sentinels: -infinity is one above
# the type's minimum, which pandas reads as NaT).
I32_MAX, I32_MIN = 2**31 - 1, -(2**31 - 1)
I64_MAX, I64_MIN = 2**63 - 1, -(2**63 - 1)


# --------------------------------------------------------------------------- replay


def data_columns(table: pa.Table) -> list[str]:
    return [n for n in table.schema.names if n not in META and not n.startswith("_status")
            and n != "_subxid"]


def key_columns(table: pa.Table) -> list[str]:
    """The columns the Relation message flagged as key (``pg.key`` field metadata)."""
    keys = []
    for name in data_columns(table):
        md = table.schema.field(name).metadata or {}
        if md.get(b"pg.key") in (b"true", b"1", b"t"):
            keys.append(name)
    return keys


#: The value of a column an online snapshot's replica never received (an UPDATE left it
#: unsent and no row of the snapshot gave it): never equal to a server value.
NEVER_SENT = object()


class TableState:
    def __init__(self, keys: Sequence[str], online: bool = False) -> None:
        self.keys = list(keys)
        #: Under an online snapshot the stream runs before the rows are read: a snapshot row
        #: replaces the row of its key, an UPDATE or DELETE may find no row.
        self.online = online
        self.rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.bag: list[dict[str, Any]] = []  # keyless tables

    def _key(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(_hashable(row[k]) for k in self.keys)

    def _find_bag(self, old: dict[str, Any]) -> int:
        target = {k: _hashable(v) for k, v in old.items() if v is not None}
        for i, row in enumerate(self.bag):
            if all(_hashable(row.get(k)) == v for k, v in target.items()):
                return i
        raise AssertionError(f"replay: no row equal to {old} to update or delete")

    def insert(self, row: dict[str, Any]) -> None:
        if not self.keys:
            self.bag.append(row)
            return
        key = self._key(row)
        assert key not in self.rows, f"replay: insert of an existing key {key}"
        self.rows[key] = row

    def update(self, row: dict[str, Any], before: dict[str, Any] | None,
               unchanged: Sequence[str]) -> None:
        if not self.keys:
            assert before is not None, "replay: update of a keyless table without an old row"
            old = self.bag.pop(self._find_bag(before))
        else:
            key = self._key(before if before is not None else row)
            if self.online and key not in self.rows:
                old = {c: NEVER_SENT for c in row}
            else:
                assert key in self.rows, f"replay: update of a missing key {key}"
                old = self.rows.pop(key)
        new = dict(row)
        for col in unchanged:
            assert new.get(col) is None, f"replay: unchanged TOAST column {col} is not null"
            new[col] = old.get(col)
        self.insert(new)

    def delete(self, before: dict[str, Any]) -> None:
        if not self.keys:
            self.bag.pop(self._find_bag(before))
            return
        key = self._key(before)
        if self.online and key not in self.rows:
            return
        assert key in self.rows, f"replay: delete of a missing key {key}"
        del self.rows[key]

    def truncate(self) -> None:
        self.rows.clear()
        self.bag.clear()

    def values(self) -> list[dict[str, Any]]:
        return list(self.rows.values()) if self.keys else list(self.bag)


def replay(changes: pgoutput_arrow.Changes,
           keys: dict[str, Sequence[str]] | None = None, *, online: bool = False,
           arrival: bool = False) -> dict[str, TableState]:
    """Table states after applying every change in commit order (``arrival``: in the order
    of each table's rows, as they were handed out; no TRUNCATEs then).

    ``keys`` overrides the key columns of a table ("schema.table" → names); by default
    they are those flagged in the newest schema. ``online``: the rows of an online snapshot,
    which replace their key's row, among changes that may find no row."""
    keys = keys or {}
    events: list[tuple[int, int, str, Any]] = []
    states: dict[str, TableState] = {}
    for name, table in changes.tables.items():
        states[name] = TableState(keys.get(name, key_columns(table)), online)
        cols = data_columns(table)
        converted = {c: column_values(table.column(c)) for c in cols}
        ops = table.column("_op").to_pylist()
        commit = table.column("_commit_lsn").to_pylist()
        seq = table.column("_seq").to_pylist()
        before_col = table.column("_before")
        before_fields = [f.name for f in before_col.type]
        before_conv = {f: column_values(pa.chunked_array(
            [c.field(f) for c in before_col.chunks], type=before_col.type.field(f).type))
            for f in before_fields}
        before_valid = before_col.is_valid().to_pylist()
        unchanged = table.column("_unchanged").to_pylist()
        for i in range(table.num_rows):
            row = {c: converted[c][i] for c in cols}
            before = ({f: before_conv[f][i] for f in before_fields}
                      if before_valid[i] else None)
            position = (i, 0) if arrival else (commit[i], seq[i])
            events.append((*position, name, (ops[i], row, before, unchanged[i] or [])))
    trunc = changes.truncates
    if trunc.num_rows and not arrival:
        for rels, commit, seq in zip(trunc.column("relations").to_pylist(),
                                     trunc.column("_commit_lsn").to_pylist(),
                                     trunc.column("_seq").to_pylist()):
            events.append((commit, seq, "", ("truncate", rels)))
    events.sort(key=lambda e: (e[0], e[1]))
    for _, _, name, ev in events:
        if ev[0] == "truncate":
            for rel in ev[1]:
                if rel in states:
                    states[rel].truncate()
            continue
        op, row, before, unch = ev
        state = states[name]
        if op == "snapshot" and online:
            if state.keys:
                state.rows.pop(state._key(row), None)
            state.insert(row)
        elif op in ("insert", "snapshot"):  # a snapshot's row: an insert before every change
            state.insert(row)
        elif op == "update":
            state.update(row, before, unch)
        elif op == "delete":
            assert before is not None, f"replay: delete without an old key in {name}"
            state.delete(before)
        else:
            raise AssertionError(f"unknown _op {op!r}")
    return states


# --------------------------------------------------------------------------- values


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, Decimal) and v.is_nan():
        return "NaN"
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def _base_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _is_interval(t: pa.DataType) -> bool:
    """An interval column: Arrow's month_day_nano, or the decoder's default struct of
    PostgreSQL's fields (months, days, microseconds)."""
    return pa.types.is_interval(t) or (pa.types.is_struct(t) and [f.name for f in t]
                                       == ["months", "days", "microseconds"])


def _innermost(t: pa.DataType) -> pa.DataType:
    """The element type below every list level of ``t``."""
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        t = _base_type(t.value_type)
    return t


def _text_list(t: pa.DataType) -> bool:
    """A list of dates, times, timestamps, intervals, uuids or text: compared as PostgreSQL's
    array text (Python's datetime holds neither ±infinity nor BC nor years past 9999)."""
    t = _innermost(t)
    # Text elements too: a numeric[] without typmod holds PostgreSQL's text of each
    # element, which psycopg2 reads as Decimal.
    return (pa.types.is_date32(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t)
            or _is_interval(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_string(t)
            or pa.types.is_string_view(t) or pa.types.is_large_string(t))


def column_values(col: pa.ChunkedArray | pa.Array) -> list[Any]:
    """The column's values as the Python values that :func:`server_rows` produces."""
    t = col.type
    if isinstance(t, pa.BaseExtensionType):
        col = col.cast(t.storage_type) if not isinstance(col, pa.ChunkedArray) else \
            pa.chunked_array([c.storage for c in col.chunks], type=t.storage_type)
        t = t.storage_type
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return col.cast(pa.int64()).to_pylist()
    if pa.types.is_interval(t):
        return [None if v is None else (v.months, v.days, v.nanoseconds // 1000)
                for v in col.to_pylist()]
    if _is_interval(t):
        return [None if v is None else (v["months"], v["days"], v["microseconds"])
                for v in col.to_pylist()]
    if pa.types.is_float32(t):
        return col.cast(pa.float64()).to_pylist()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        if _text_list(t):
            return pa.table(pg_text(pa.table({"v": col}))).column(0).to_pylist()
        return col.to_pylist()
    if pa.types.is_binary_view(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) \
            or pa.types.is_fixed_size_binary(t):
        return col.to_pylist()
    return col.to_pylist()


def server_expression(column: str, arrow_type: pa.DataType, pg_type: str, send_fn: str) -> str:
    """SQL giving column ``column`` as the Python value that :func:`column_values` gives
    for a decoded column of ``arrow_type``."""
    c = '"' + column.replace('"', '""') + '"'
    t = _base_type(arrow_type)
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)) and _text_list(t):
        if pg_type == "_date" and _innermost(t) == pa.timestamp("us"):
            # A date[] column unified with a timestamp[] version of it: PostgreSQL's own
            # cast says what each date is there (its midnight).
            c = f"{c}::timestamp[]"
        return f"CASE WHEN {c} IS NULL THEN NULL ELSE concat({c}, '') END"  # array_out's text: its elements have no Python value (±infinity)
    if pa.types.is_date32(t):
        return (f"CASE WHEN {c} = 'infinity' THEN {I32_MAX} WHEN {c} = '-infinity' THEN {I32_MIN}"
                f" ELSE {c} - date '1970-01-01' END")
    if pa.types.is_timestamp(t):
        return (f"CASE WHEN {c} = 'infinity' THEN '{I64_MAX}'::int8 WHEN {c} = '-infinity'"
                f" THEN '{I64_MIN}'::int8 ELSE (extract(epoch FROM {c}) * 1000000)::int8 END")
    if pa.types.is_time64(t):
        return f"(extract(epoch FROM {c}) * 1000000)::int8"
    if _is_interval(t):
        return (f"CASE WHEN {c} IS NULL THEN NULL ELSE ARRAY["
                f"(extract(year FROM {c}) * 12 + extract(month FROM {c}))::int8,"
                f" extract(day FROM {c})::int8,"
                f" (extract(hour FROM {c}) * 3600000000 + extract(minute FROM {c}) * 60000000"
                f" + extract(microseconds FROM {c}))::int8] END")
    if pa.types.is_float32(t):
        return f"{c}::float8"
    if pa.types.is_fixed_size_binary(t):  # uuid
        return f"uuid_send({c})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        # The type's output function (concat calls it): casts to text differ from it for
        # some types (bpchar::text strips the padding, inet::text always shows the mask).
        # num_nulls, not IS NULL: a composite whose fields are all NULL IS NULL.
        return f"CASE WHEN num_nulls({c}) = 1 THEN NULL ELSE concat({c}, '') END"
    if pa.types.is_binary(t) or pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        if pg_type == "bytea":
            return c
        return f"{send_fn}({c})"  # an undecodable type sent in binary: its send bytes
    return c


def _server_value(v: Any, arrow_type: pa.DataType) -> Any:
    t = _base_type(arrow_type)
    if v is None:
        return None
    if _is_interval(t):
        return tuple(v)
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def server_rows(conn: Any, name: str, table: pa.Table, columns: Sequence[str] | None = None,
                order_by: str | None = None) -> list[dict[str, Any]]:
    """Rows of ``name`` ("schema.table") from PostgreSQL as :func:`column_values` values,
    for the columns of the decoded ``table`` that still exist on the server."""
    schema, rel = name.split(".", 1)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typsend::text,"
            " bt.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
            " JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype"
            " ELSE t.oid END"
            " WHERE a.attrelid = format('%%I.%%I', %s, %s)::regclass AND a.attnum > 0"
            " AND NOT a.attisdropped ORDER BY a.attnum", (schema, rel))
        server_cols = {r[0]: (r[1], r[2], r[3]) for r in cur.fetchall()}
        cols = [c for c in (columns or data_columns(table)) if c in server_cols]
        exprs = [server_expression(c, table.schema.field(c).type, server_cols[c][2],
                                   server_cols[c][1]) for c in cols]
        sql = f'SELECT {", ".join(exprs)} FROM "{schema.replace(chr(34), 2 * chr(34))}"."{rel.replace(chr(34), 2 * chr(34))}"'
        if order_by:
            sql += f" ORDER BY {order_by}"
        cur.execute(sql)
        return [{c: _server_value(v, table.schema.field(c).type) for c, v in zip(cols, r)}
                for r in cur.fetchall()]


def _eq(a: Any, b: Any) -> bool:
    return _hashable(a) == _hashable(b)


def compare_state(state: TableState, server: list[dict[str, Any]], name: str) -> None:
    """Asserts that the replayed state equals the server's rows, value by value
    (as a multiset of rows, over the server's columns)."""
    if not server:
        assert not state.values(), f"{name}: replay has {len(state.values())} rows, server none"
        return
    cols = list(server[0].keys())
    ours = Counter(tuple(_hashable(r.get(c)) for c in cols) for r in state.values())
    theirs = Counter(tuple(_hashable(r[c]) for c in cols) for r in server)
    if ours == theirs:
        return
    only_ours = list((ours - theirs).elements())[:3]
    only_theirs = list((theirs - ours).elements())[:3]
    detail = []
    for a, b in zip(only_ours, only_theirs):
        diffs = [(c, x, y) for c, x, y in zip(cols, a, b) if x != y]
        detail.append(diffs)
    raise AssertionError(
        f"{name}: replayed state differs from PostgreSQL: {sum(ours.values())} rows vs "
        f"{sum(theirs.values())}; only in replay: {only_ours}; only in server: {only_theirs};"
        f" differing columns of the first pairs: {detail}")


# --------------------------------------------------------------------------- test_decoding


def parse_test_decoding(lines: Iterable[str]) -> Counter[tuple[str, str]]:
    """(table, op) → count from test_decoding's text output: ``table public.t: INSERT: ...``,
    ``table public.a, public.b: TRUNCATE: ...`` (one count per listed table)."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in lines:
        if not line.startswith("table "):
            continue
        head, _, rest = line[len("table "):].partition(": ")
        op = rest.split(":", 1)[0].lower()
        for rel in head.split(", "):
            counts[(rel, op)] += 1
    return counts


def decoded_counts(changes: pgoutput_arrow.Changes) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for name, table in changes.tables.items():
        for op, n in Counter(table.column("_op").to_pylist()).items():
            counts[(name, op)] += n
    for rels in changes.truncates.column("relations").to_pylist() if changes.truncates.num_rows \
            else []:
        for rel in rels:
            counts[(rel, "truncate")] += 1
    return counts
