"""Where the pinned type table (``tests/type_table.py``: ``check_types(table, pg_types,
binary) -> list[str]``, another part of issue 21) is called from the tester: every table of
every path, with the expected type taken from PostgreSQL's type of each column as
test_decoding names it, never from the output."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from type_table import check_types as _check_types

CheckTypes = Callable[[pa.Table, dict[str, str], bool], list[str]]


#: PostgreSQL's catalog: each published table's columns as format_type prints them with their
#: typmod (test_decoding prints types without it: numeric, not numeric(10,2)), a user type
#: named by what it is (enum, composite; a domain as its base type with its typmod).
CATALOG = """
SELECT format('%s.%s', n.nspname, c.relname), a.attname,
       CASE WHEN t.typtype = 'e' THEN 'enum'
            WHEN t.typtype = 'c' THEN 'composite'
            WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
            WHEN e.typtype = 'e' THEN 'enum[]'
            WHEN e.typtype = 'c' THEN 'composite[]'
            WHEN e.typtype = 'd' THEN format_type(e.typbasetype, e.typtypmod) || '[]'
            ELSE format_type(a.atttypid, a.atttypmod) END,
       a.atttypid
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
 WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p')
   AND n.nspname NOT IN ('pg_catalog', 'information_schema')"""


def catalog_types(conn: Any) -> dict[str, dict[str, tuple[str, int]]]:
    """Per table (``schema.table``, as the decoder names it), each column's type now and
    its oid."""
    out: dict[str, dict[str, tuple[str, int]]] = {}
    with conn.cursor() as cur:
        cur.execute(CATALOG)
        for table, column, pg_type, oid in cur.fetchall():
            out.setdefault(table, {})[column] = (pg_type, int(oid))
    return out


def check(tables: dict[str, pa.Table], conn: Any, binary: bool, label: str,
          checker: CheckTypes | None = None) -> list[str]:
    """Problems of every column of ``tables`` by the type table (``checker`` for a test of
    this adapter), the expected type taken from PostgreSQL's catalog, never from the output.
    Columns the decoder unified over several PostgreSQL types (``pg.unified`` in the field
    metadata: a retype with no lossless common type) follow that documented rule instead,
    and columns no longer in the catalog (dropped, or of a table dropped or renamed since)
    are left to the per-change comparison, as are columns of the output whose type oid
    (``pg.type_oid``) is not the catalog's: an earlier column of that name, dropped since
    and added again with another type, when the output holds no row of the new one."""
    fn = checker or _check_types
    want = catalog_types(conn)
    problems = []
    for name, table in tables.items():
        unified = {f.name for f in table.schema if (f.metadata or {}).get(b"pg.unified")}
        oids = {f.name: (f.metadata or {}).get(b"pg.type_oid") for f in table.schema}
        types = {c: t for c, (t, oid) in want.get(name, {}).items()
                 if c in table.column_names and c not in unified and oids[c] in (None, str(oid).encode())}
        problems += [f"{label}: {name}: {p}" for p in fn(table, types, binary)]
    return problems
