"""The ordinary operations a user applies to one of our tables, in the libraries that consume
Arrow: pyarrow compute, pandas, polars, DuckDB and Spark (``createDataFrame``).

Each operation is applied to a decoded table (a change table of ``decode()``, ``Decoder``,
``stream()``, or a ``pgoutput-dump`` file read back) and fails when the library raises, or
when it turns a value into a missing one (a non-null value read back as null, NaT or NaN is
a silent loss). Used by ``test_consumers.py`` (operation x path x column) and by the
randomized tester on each seed's default output::

    failures = run_all(table, key="id")                # [] when every operation works
    failures = run_all(table, key="id", spark=spark)   # Spark's createDataFrame + count too
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Failure", "run_all", "operations", "LIBRARIES"]

#: The libraries covered, in report order.
LIBRARIES = ("pyarrow", "pandas", "polars", "duckdb", "spark")

#: Metadata columns every change table has besides the table's own.
_META = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special")


@dataclasses.dataclass(frozen=True)
class Failure:
    """One operation that failed: the library, the operation, the column it was applied to
    (None: the whole table) and what went wrong (the exception's type and first line)."""

    library: str
    operation: str
    column: str | None
    error: str

    def __str__(self) -> str:
        where = f"[{self.column}]" if self.column else ""
        return f"{self.library}.{self.operation}{where}: {self.error}"


@dataclasses.dataclass(frozen=True)
class Operation:
    library: str
    name: str
    column: str | None
    run: Callable[[], object]


class Lost(AssertionError):
    """A library read a non-null value as missing."""


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def sortable(t: pa.DataType) -> bool:
    """Whether a user expects to sort by a column of type ``t``: numbers, text, bytes,
    decimals, dates and times, uuids (not lists, structs, maps, intervals, nor json, which
    PostgreSQL does not order either)."""
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.json":
        return False
    t = _storage(t)
    return (pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
            or pa.types.is_decimal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_string_view(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_temporal(t) and not pa.types.is_interval(t))


def nested(t: pa.DataType) -> bool:
    """Lists, structs and maps: what pyarrow's hash join cannot carry as a non-key column
    (Acero: "Data type ... is not supported in join non-key field"), whoever made them."""
    return bool(pa.types.is_nested(_storage(t)))


def to_text(t: pa.DataType) -> bool:
    """Whether casting a column of type ``t`` to ``pa.string()`` is meaningful: numbers,
    decimals, text, dates and times (not bytes, uuids, nested types, intervals)."""
    t = _storage(t)
    return sortable(t) and not (pa.types.is_binary(t) or pa.types.is_large_binary(t)
                                or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t))


def _non_null(col: pa.ChunkedArray | pa.Array, nan_missing: bool = False) -> int:
    """Values that are not null (``nan_missing``: nor NaN, which pandas reads as missing:
    that is its float semantics, not a lost value)."""
    n = len(col) - col.null_count
    t = _storage(col.type)
    if nan_missing and pa.types.is_floating(t):
        n -= int(pc.sum(pc.is_nan(col)).as_py() or 0)
    return int(n)


def _check_kept(library: str, name: str, expected: int, found: int) -> None:
    if found != expected:
        raise Lost(f"{expected - found} of {expected} non-null values of {name} read as missing by {library}")


def _group_count(table: pa.Table, by: str, column: str) -> pa.Table:
    return table.group_by(by).aggregate([(column, "count")])


def _filter_not_deleted(table: pa.Table, columns: list[str]) -> pa.Table:
    return table.select(columns).filter(pc.field("_op") != "delete")


def _pyarrow(table: pa.Table, key: str | None) -> Iterator[Operation]:
    lib = "pyarrow"
    n = table.num_rows
    columns = [f for f in table.schema]

    def filter_op() -> None:
        out = table.filter(pc.field("_op") == "insert")
        expected = pc.sum(pc.equal(table["_op"], "insert")).as_py() or 0
        assert out.num_rows == expected, (out.num_rows, expected)

    yield Operation(lib, "filter(_op)", None, filter_op)
    yield Operation(lib, "sort_by(_commit_lsn)", None, lambda: table.sort_by([("_commit_lsn", "ascending"),
                                                                               ("_seq", "ascending")]))
    yield Operation(lib, "take", None, lambda: table.take(pa.array(range(n - 1, -1, -1), pa.int64())))
    yield Operation(lib, "cast(schema)", None, lambda: table.cast(table.schema))
    yield Operation(lib, "concat_tables", None, lambda: pa.concat_tables([table, table]).combine_chunks())
    if key is not None:
        def join(cols: list[str]) -> Callable[[], None]:
            def run() -> None:
                keys = table.select([key]).group_by(key).aggregate([])
                out = table.select(cols).join(keys, keys=key)
                assert out.num_rows == table.num_rows - table[key].null_count
            return run

        # The whole table's columns that a hash join can carry (not the nested ones).
        yield Operation(lib, "join", None, join([f.name for f in columns if not nested(f.type) or f.name == key]))
    for f in columns:
        c = f.name
        with_op = list(dict.fromkeys([c, "_op"]))
        yield Operation(lib, "group_by(_op).count", c, functools.partial(_group_count, table, "_op", c))
        yield Operation(lib, "take", c, functools.partial(table[c].take, pa.array([n - 1, 0] if n else [], pa.int64())))
        yield Operation(lib, "filter", c, functools.partial(_filter_not_deleted, table, with_op))
        if key is not None and c != key and not nested(f.type):
            yield Operation(lib, "join", c, join([key, c]))
        if sortable(f.type):
            yield Operation(lib, "sort_by", c, functools.partial(table.sort_by, c))
            yield Operation(lib, "group_by", c, functools.partial(_group_count, table, c, "_seq"))
        if to_text(f.type):
            def cast(c: str = c) -> None:
                out = pc.cast(table[c], pa.string())
                _check_kept(lib, c, _non_null(table[c]), _non_null(out))
            yield Operation(lib, "cast(string)", c, cast)


def _pandas(table: pa.Table) -> Iterator[Operation]:
    lib = "pandas"
    yield Operation(lib, "to_pandas", None, lambda: table.to_pandas())
    for f in table.schema:
        c = f.name

        def one(c: str = c) -> None:
            df = table.select([c]).to_pandas()
            _check_kept(lib, c, _non_null(table[c], nan_missing=True), int(df[c].notna().sum()))
        yield Operation(lib, "to_pandas", c, one)


def _polars(table: pa.Table) -> Iterator[Operation]:
    import polars as pl

    lib = "polars"

    def whole() -> None:
        df = pl.from_arrow(table)
        assert isinstance(df, pl.DataFrame)
        df.filter(pl.col("_op") == "insert")
        df.sort("_commit_lsn", "_seq")

    yield Operation(lib, "from_arrow+filter+sort", None, whole)
    for f in table.schema:
        c = f.name

        def one(c: str = c, f: pa.Field = f) -> None:
            df = pl.from_arrow(table.select(list(dict.fromkeys([c, "_op"]))))
            assert isinstance(df, pl.DataFrame)
            _check_kept(lib, c, _non_null(table[c]), df.height - df[c].null_count())
            df.filter(pl.col("_op") != "delete")
            if sortable(f.type):
                df.sort(c)
        yield Operation(lib, "from_arrow+filter+sort", c, one)


def _duckdb(table: pa.Table, key: str | None) -> Iterator[Operation]:
    import duckdb

    lib = "duckdb"

    def sql(query: str, **tables: pa.Table) -> Any:
        con = duckdb.connect()
        try:
            for name, t in tables.items():
                con.register(name, t)
            return con.sql(query).fetchall()
        finally:
            con.close()

    yield Operation(lib, "select *", None, lambda: sql("SELECT * FROM t", t=table))
    yield Operation(lib, "where _op", None,
                    lambda: sql("SELECT * FROM t WHERE _op = 'insert' ORDER BY _commit_lsn, _seq", t=table))
    if key is not None:
        yield Operation(lib, "join", None, lambda: sql(
            f'SELECT * FROM t JOIN (SELECT DISTINCT "{key}" FROM t) k USING ("{key}")', t=table))
    for f in table.schema:
        c = f.name
        q = '"' + c.replace('"', '""') + '"'

        def count(c: str = c, q: str = q) -> None:
            rows = sql(f"SELECT _op, count({q}) FROM t GROUP BY _op", t=table.select(list(dict.fromkeys([c, "_op"]))))
            _check_kept(lib, c, _non_null(table[c]), sum(r[1] for r in rows))
        yield Operation(lib, "group by _op count", c, count)
        yield Operation(lib, "select", c, functools.partial(sql, f"SELECT {q} FROM t", t=table.select([c])))
        if sortable(f.type):
            yield Operation(lib, "order by", c, functools.partial(
                sql, f"SELECT {q} FROM t ORDER BY {q}", t=table.select([c])))


def _spark(table: pa.Table, spark: Any) -> Iterator[Operation]:
    lib = "spark"

    def count(t: pa.Table) -> Callable[[], None]:
        def run() -> None:
            assert spark.createDataFrame(t).count() == t.num_rows
        return run

    yield Operation(lib, "createDataFrame+count", None, count(table))


def operations(table: pa.Table, key: str | None = None, spark: Any = None,
               libraries: tuple[str, ...] = LIBRARIES) -> list[Operation]:
    """Every operation of ``libraries`` on ``table`` (``key``: the column to join on; Spark's
    only with a ``spark`` session)."""
    ops: list[Operation] = []
    if "pyarrow" in libraries:
        ops += _pyarrow(table, key)
    if "pandas" in libraries:
        ops += _pandas(table)
    if "polars" in libraries:
        ops += _polars(table)
    if "duckdb" in libraries:
        ops += _duckdb(table, key)
    if "spark" in libraries and spark is not None:
        ops += _spark(table, spark)
    return ops


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def run_all(table: pa.Table, key: str | None = None, spark: Any = None,
            libraries: tuple[str, ...] = LIBRARIES) -> list[Failure]:
    """Runs every operation on ``table``; the ones that failed. A whole-table Spark failure
    is narrowed to the columns that cause it (one ``createDataFrame`` per column)."""
    failures = []
    for op in operations(table, key, spark, libraries):
        try:
            op.run()
        except BaseException as e:  # polars panics are BaseException (PanicException)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            failures.append(Failure(op.library, op.name, op.column, _error(e)))
            if op.library == "spark" and op.column is None:
                for c in table.column_names:
                    t = table.select([c])
                    try:
                        assert spark.createDataFrame(t).count() == t.num_rows
                    except Exception as e2:
                        failures.append(Failure("spark", op.name, c, _error(e2)))
    return failures
