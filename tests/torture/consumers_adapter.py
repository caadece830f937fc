"""Where the consumer operations (``tests/consumers.py``: ``run_all(table, key) ->
list[Failure]``, another part of issue 21: pyarrow compute, pandas, polars, DuckDB on a
table) are called from the tester: on each seed's default output (``decode()``'s tables)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from consumers import run_all as _run_all


def check(tables: dict[str, pa.Table], label: str, run_all: Any = None) -> list[str]:
    """One line per failed operation on any table (keyed by ``id`` where it has one)."""
    fn = run_all or _run_all
    problems = []
    for name, table in tables.items():
        key = "id" if "id" in table.column_names else None
        problems += [f"{label}: {name}: consumer {f}" for f in fn(table, key)]
    return problems
