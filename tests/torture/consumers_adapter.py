"""Where the consumer operations (``tests/consumers.py``: ``run_all(table, key) ->
list[Failure]``, another part of issue 21: pyarrow compute, pandas, polars, DuckDB on a
table) are called from the tester: on each seed's default output (``decode()``'s tables).
Off (no problems) until that module exists; the lead wires it when merging."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

try:  # tests/consumers.py, on branch consumers until merged
    from consumers import run_all as _run_all
except ImportError:  # pragma: no cover - the other part not merged yet
    _run_all = None


def enabled() -> bool:
    return _run_all is not None


def check(tables: dict[str, pa.Table], label: str, run_all: Any = None) -> list[str]:
    """One line per failed operation on any table (keyed by ``id`` where it has one)."""
    fn = run_all or _run_all
    if fn is None:
        return []
    problems = []
    for name, table in tables.items():
        key = ["id"] if "id" in table.column_names else []
        problems += [f"{label}: {name}: consumer {f}" for f in fn(table, key)]
    return problems
