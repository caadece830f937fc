"""Where the pinned type table (``tests/type_table.py``: ``check_types(table, pg_types,
binary) -> list[str]``, another part of issue 21) is called from the tester: every table of
every path, with the expected type taken from PostgreSQL's type of each column as
test_decoding names it, never from the output."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from type_table import check_types as _check_types

CheckTypes = Callable[[pa.Table, dict[str, str], bool], list[str]]


def pg_types(expected: Any) -> dict[str, dict[str, str]]:
    """Per table, each column's PostgreSQL type (format_type) as of its last printed change."""
    out: dict[str, dict[str, str]] = {}
    for c in expected:
        if c.types:
            out.setdefault(c.table, {}).update(c.types)
    return out


def check(tables: dict[str, pa.Table], expected: Any, binary: bool, label: str,
          checker: CheckTypes | None = None) -> list[str]:
    """Problems of every column of ``tables`` whose PostgreSQL type is known, by the type
    table (``checker`` for a test of this adapter)."""
    fn = checker or _check_types
    want = pg_types(expected)
    problems = []
    for name, table in tables.items():
        types = {c: t for c, t in want.get(name, {}).items() if c in table.column_names}
        problems += [f"{label}: {name}: {p}" for p in fn(table, types, binary)]
    return problems
