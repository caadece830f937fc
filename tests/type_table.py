"""The pinned type table: which Arrow type each PostgreSQL type decodes to by default, in text
and in binary mode. README's "Supported types" table is made from it (``python
tests/type_table.py`` prints it; ``test_type_table.py`` fails when they differ), and
:func:`check_types` asserts it on any decoded table, so that a type degraded to text or to
raw bytes fails every test that checks it.

The table is written here, by hand, on purpose: it is what we promise users, not what the
decoder happens to do (the decoder's choices live in ``crates/pgoutput-arrow/src/types/``).
"""

from __future__ import annotations

import dataclasses
import re
import sys

import pyarrow as pa

__all__ = ["ROWS", "Row", "check_types", "expected_type", "readme_table", "normalize"]

#: The interval struct: PostgreSQL's own fields (months, days, microseconds), exact.
INTERVAL = "struct<months: int32, days: int32, microseconds: int64>"


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: PostgreSQL types (names as :func:`normalize` gives them), how
    README names them, the Arrow type by default in text and in binary mode (a notation
    :func:`arrow_type` reads), Spark's type (what ``pgoutput_arrow.spark`` hands to Spark)
    and a note for README."""

    pg: tuple[str, ...]
    label: str
    text: str
    binary: str
    spark: str
    note: str = ""


_UTF8_RENDERED = (
    "inet", "cidr", "macaddr", "macaddr8", "money", "bit", "varbit", "point", "line", "lseg",
    "box", "path", "polygon", "circle", "int4range", "int8range", "numrange", "daterange",
    "tsrange", "tstzrange", "int4multirange", "int8multirange", "nummultirange",
    "datemultirange", "tsmultirange", "tstzmultirange", "timetz", "pg_lsn", "xid", "xid8",
    "cid", "tid", "int2vector", "oidvector", "txid_snapshot", "pg_snapshot", "tsvector",
    "jsonpath", "xml", "aclitem")
_UNRENDERED = ("tsquery", "regproc", "regprocedure", "regoper", "regoperator", "regclass",
               "regtype", "regconfig", "regdictionary", "regnamespace", "regrole",
               "regcollation", "pg_node_tree")

ROWS: tuple[Row, ...] = (
    Row(("bool",), "bool", "bool", "bool", "boolean"),
    Row(("int2",), "int2", "int16", "int16", "short"),
    Row(("int4",), "int4", "int32", "int32", "int"),
    Row(("int8",), "int8", "int64", "int64", "long"),
    Row(("oid",), "oid", "int64", "int64", "long", "every oid fits; Spark has no unsigned types"),
    Row(("float4",), "float4", "float32", "float32", "float", "NaN, ±Infinity kept"),
    Row(("float8",), "float8", "float64", "float64", "double", "NaN, ±Infinity kept"),
    Row(("numeric(p,s)",), "numeric(p,s), p ≤ 38", "decimal128(p,s)", "decimal128(p,s)", "decimal(p,s)"),
    Row(("numeric",), "numeric without typmod, or p > 38", "utf8", "utf8", "string",
        "PostgreSQL's exact text"),
    Row(("text", "varchar", "bpchar", "name", "char", "refcursor"),
        'text, varchar, bpchar (padding kept), name, "char"', "utf8", "utf8", "string",
        "string_view with `views=True` (zero copy)"),
    Row(("bytea",), "bytea", "binary", "binary", "binary", "binary_view with `views=True`"),
    Row(("date",), "date", "date32", "date32", "date; outside 0001–9999 and ±infinity: `_special`",
        "outside 0001–9999 and ±infinity: `_special` (Python's `datetime`); with "
        "`datetime_range=\"arrow\"` infinity → 2³¹-1, -infinity → -(2³¹-1) (DuckDB's ±infinity)"),
    Row(("time",), "time", "utf8", "utf8",
        "string, PostgreSQL's text; time with `spark.sql.timeType.enabled`",
        "PostgreSQL's `HH:MM:SS[.ffffff]` (Spark's default session refuses TIME); time64[us] with `time=\"time64\"`"),
    Row(("timestamp",), "timestamp", "timestamp[us]", "timestamp[us]",
        "timestamp_ntz; outside 1677-09-22–2262-04-10 and ±infinity: `_special`",
        "as date; with `datetime_range=\"arrow\"` infinity → 2⁶³-1, -infinity → -(2⁶³-1) "
        "(DuckDB's ±infinity; i64 min is pandas' NaT)"),
    Row(("timestamptz",), "timestamptz", "timestamp[us, UTC]", "timestamp[us, UTC]",
        "timestamp; as timestamp_ntz",
        "as timestamp"),
    Row(("interval",), "interval", INTERVAL, INTERVAL, "struct<months, days, microseconds>",
        "PostgreSQL's fields, exact; month_day_nano with `interval=\"month_day_nano\"`"),
    Row(("uuid",), "uuid", "utf8", "utf8", "string",
        "canonical text; 16 bytes, `arrow.uuid`, with `uuid=\"fixed_size_binary\"`"),
    Row(("json", "jsonb"), "json, jsonb", "utf8", "utf8", "string",
        "`pg.type_name` says json (pyspark refuses the `arrow.json` extension type)"),
    Row(_UTF8_RENDERED, "inet, cidr, macaddr, money, bit, varbit, geometric types, ranges, "
        "multiranges, timetz, pg_lsn, xml, tsvector, …", "utf8", "utf8", "string",
        "PostgreSQL's exact text output, in binary mode too"),
    Row(("enum", "composite") + _UNRENDERED, "enums, composites, extension types, tsquery, reg*",
        "utf8", "binary", "string / binary",
        "text mode: PostgreSQL's text; binary mode: the raw send bytes, `pg.type_name` in the "
        "field metadata"),
    Row(("T[]",), "arrays of the above", "list<T>", "list<T>", "array",
        "NULL elements kept; n-dimensional: n nested lists"),
)

_ALIASES = {
    "integer": "int4", "int": "int4", "smallint": "int2", "bigint": "int8", "real": "float4",
    "double precision": "float8", "float": "float8", "boolean": "bool", "decimal": "numeric",
    "character varying": "varchar", "character": "bpchar", "char": "bpchar",
    '"char"': "char", "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz", "time without time zone": "time",
    "time with time zone": "timetz", "bit varying": "varbit", "serial": "int4",
    "bigserial": "int8", "smallserial": "int2", "json": "json",
}


def normalize(pg_type: str) -> tuple[str, tuple[int, ...], int]:
    """A PostgreSQL type name as written in DDL or by ``format_type`` → (name, typmod
    arguments, array dimensions): ``'numeric(10, 2)[]'`` → ``('numeric', (10, 2), 1)``."""
    t = pg_type.strip().lower()
    dims = 0
    while True:
        m = re.search(r"\s*\[\d*\]$", t)
        if not m:
            break
        t, dims = t[:m.start()], dims + 1
    if t.startswith("_"):  # the catalog's name of an array type
        t, dims = t[1:], max(dims, 1)
    args: tuple[int, ...] = ()
    m = re.match(r"^(.*?)\s*\(([-\d,\s]*)\)(.*)$", t)
    if m:
        args = tuple(int(a) for a in m.group(2).split(",") if a.strip())
        t = (m.group(1) + m.group(3)).strip()
    t = t.removeprefix("pg_catalog.")
    t = _ALIASES.get(t, t)
    return t, args, dims


def _row(name: str) -> Row | None:
    for row in ROWS:
        if name in row.pg:
            return row
    return None


def arrow_type(notation: str, args: tuple[int, ...] = ()) -> tuple[pa.DataType, str | None]:
    """A notation of the table → (Arrow storage type, extension name or None)."""
    parts = notation.split(" ")
    ext = parts[-1] if parts[-1].startswith("arrow.") else None
    base = notation[: -len(ext) - 1] if ext else notation
    if base == "decimal128(p,s)":
        p, s = (args + (0, 0))[:2] if args else (0, 0)
        return pa.decimal128(max(p, s), s), ext
    simple = {
        "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
        "uint32": pa.uint32(), "float32": pa.float32(), "float64": pa.float64(),
        "utf8": pa.string(), "binary": pa.binary(), "date32": pa.date32(),
        "time64[us]": pa.time64("us"), "timestamp[us]": pa.timestamp("us"),
        "timestamp[us, UTC]": pa.timestamp("us", "UTC"),
        "fixed_size_binary(16)": pa.binary(16),
        INTERVAL: pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]),
    }
    return simple[base], ext


def expected_type(pg_type: str, binary: bool) -> tuple[pa.DataType, str | None, int]:
    """The Arrow type a column of ``pg_type`` has by default, without its lists: (element
    storage type, extension name, array dimensions). Raises KeyError for a type the table
    does not name."""
    name, args, dims = normalize(pg_type)
    if name == "numeric":
        ok = len(args) >= 1 and args[0] <= 38
        row = _row("numeric(p,s)" if ok else "numeric")
    else:
        row = _row(name)
    if row is None:
        raise KeyError(f"no row of the type table names {pg_type!r}")
    t, ext = arrow_type(row.binary if binary else row.text, args)
    return t, ext, dims


def _ext_name(f: pa.Field) -> str | None:
    if isinstance(f.type, pa.BaseExtensionType):
        return str(f.type.extension_name)
    md = f.metadata or {}
    name = md.get(b"ARROW:extension:name")
    return name.decode() if name else None


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def check_field(f: pa.Field, pg_type: str, binary: bool) -> str | None:
    """What is wrong with field ``f`` as the column of ``pg_type`` (None: nothing)."""
    want, ext, dims = expected_type(pg_type, binary)
    t, depth = f, 0
    while pa.types.is_list(_storage(t.type)) or pa.types.is_large_list(_storage(t.type)):
        t, depth = _storage(t.type).value_field, depth + 1
    found = _storage(t.type)
    problems = []
    if dims and depth < 1 or not dims and depth:
        problems.append(f"{depth} list levels where {pg_type} has {dims} array dimensions")
    if found != want:
        problems.append(f"{found} where the type table says {want}")
    if _ext_name(t) != ext:
        problems.append(f"extension {_ext_name(t)} where the type table says {ext}")
    if not problems:
        return None
    return f"column {f.name!r} ({pg_type}, {'binary' if binary else 'text'} mode): {'; '.join(problems)}"


def check_types(table: pa.Table | pa.Schema, pg_types: dict[str, str], binary: bool) -> list[str]:
    """Each column of ``pg_types`` (name → PostgreSQL type as in DDL or ``format_type``; a
    user type as ``enum`` or ``composite``, a domain as its base type) checked against the
    table: what differs, one line per column (empty when all agree). A column missing from
    ``table`` is reported too. ``_before`` (the old row) is checked the same way where it has
    the columns."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    problems = []
    for name, pg_type in pg_types.items():
        if name not in schema.names:
            problems.append(f"column {name!r} ({pg_type}) is missing")
            continue
        p = check_field(schema.field(name), pg_type, binary)
        if p:
            problems.append(p)
    if "_before" in schema.names and pa.types.is_struct(schema.field("_before").type):
        before = schema.field("_before").type
        for name, pg_type in pg_types.items():
            i = before.get_field_index(name)
            if i >= 0:
                p = check_field(before.field(i), pg_type, binary)
                if p:
                    problems.append("_before." + p)
    return problems


def readme_table() -> str:
    """README's "Supported types" table, made from :data:`ROWS`."""
    lines = ["| PostgreSQL | Arrow (text mode) | Arrow (binary mode) | Spark | |", "|---|---|---|---|---|"]
    for r in ROWS:
        lines.append(f"| {r.label} | {_show(r.text)} | {_show(r.binary)} | {r.spark} | {r.note} |")
    return "\n".join(lines) + "\n"


def _show(notation: str) -> str:
    parts = notation.split(" ")
    if parts[-1].startswith("arrow."):
        return f"{' '.join(parts[:-1])}, `{parts[-1]}`"
    return notation


if __name__ == "__main__":
    sys.stdout.write(readme_table())
