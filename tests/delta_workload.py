"""The lake sinks' workload and its checks (``--format delta`` and ``--format iceberg``),
shared by tests/test_delta.py, tests/test_iceberg.py and the kill -9 script
tests/delta_kill.py.

Four tables under a prefix: ``P_toast`` (a primary key, a TOAST column stored out of line
and uncompressed so that updates leave it unchanged, key changes, deletes, a column added
and another dropped midway), ``P_full`` (``REPLICA IDENTITY FULL``, no key), ``P_acc``
(pgbench-like balance updates, a retype and a ``TRUNCATE`` midway) and ``P_hist`` (no key:
inserts only, appended). With ``rename``, one column of each table is renamed later on (the
TOAST column among them); only Iceberg keeps a rename as one (Delta sees the old column
dropped and the new one added, docs/delta.md). An ``audit`` slot created with the sink's
slot sees the same changes, decoded at the end to check the change log.

A lake is read back with both readers of its format: deltalake and polars for Delta,
pyiceberg and polars for Iceberg (the tables of ``pgoutput_arrow.sinks.iceberg_catalog``).
"""

from __future__ import annotations

import os
import random
import subprocess
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pgoutput_arrow
from pg_harness import PgServer


def workload_tables(p: str) -> list[str]:
    """The workload's tables."""
    return [f"{p}_toast", f"{p}_full", f"{p}_acc", f"{p}_hist"]


def setup(pg: PgServer, p: str, slot: str | None, prefill: int = 0) -> None:
    """The tables and their publication ``p``; the sink's slot ``slot`` and its audit slot
    (None: none, the sink creates its own); ``prefill`` accounts (and identical rows in the
    keyless tables) before the slots, for a snapshot to take."""
    pg.execute(f"CREATE TABLE {p}_toast (id int PRIMARY KEY, big text, n int, "
               "amount numeric(10,2), ts timestamptz)")
    pg.execute(f"ALTER TABLE {p}_toast ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(f"CREATE TABLE {p}_full (a int, b text, c int)")
    pg.execute(f"ALTER TABLE {p}_full REPLICA IDENTITY FULL")
    pg.execute(f"CREATE TABLE {p}_acc (aid int PRIMARY KEY, abalance int, filler text)")
    pg.execute(f"CREATE TABLE {p}_hist (aid int, delta int, mtime timestamp)")
    if prefill:
        pg.execute(f"INSERT INTO {p}_acc SELECT g, g % 100, repeat('f', 40) "
                   f"FROM generate_series(1000000, 1000000 + {prefill - 1}) g")
        pg.execute(f"INSERT INTO {p}_full VALUES (-1, 'same', 0), (-1, 'same', 0), (-2, 'x', 1)")
        pg.execute(f"INSERT INTO {p}_hist VALUES (1, 1, '2026-01-01'), (1, 1, '2026-01-01')")
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {p}_toast, {p}_full, {p}_acc, {p}_hist")
    if slot is not None:
        pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{slot}_audit",))


#: The lake formats the workload's checks read.
FORMATS = ("delta", "iceberg")

#: ``table suffix: (old name, new name)`` of the columns ``workload_round(rename=True)``
#: renames at the end of round ``rename_round(rounds)``.
RENAMES = {"toast": ("big", "body"), "full": ("b", "label"), "acc": ("filler", "note"),
           "hist": ("mtime", "at")}


def rename_round(rounds: int) -> int:
    """The round at whose end ``workload_round(rename=True)`` renames columns: after the
    TRUNCATE and the retype, so that rows written before the rename outlive it."""
    return (3 * rounds) // 5


def _big(rng: random.Random, tag: int) -> str:
    return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=3000)) + f"#{tag}"


def workload_round(pg: PgServer, p: str, r: int, rng: random.Random, rounds: int,
                   rename: bool = False) -> None:
    """One round of changes; the DDL happens at fixed fractions of ``rounds``. With
    ``rename``, the columns of ``RENAMES`` are renamed at the end of ``rename_round(rounds)``."""
    base = r * 100
    has_n = r <= (2 * rounds) // 3  # n is dropped at the end of that round
    n_col, n_val = (", n", ", 0") if has_n else ("", "")
    renamed = rename and r > rename_round(rounds)
    big, b = (RENAMES["toast"][1], RENAMES["full"][1]) if renamed else ("big", "b")
    with pg.connect() as conn:
        cur = conn.cursor()
        for i in range(base, base + 8):
            cur.execute(f"INSERT INTO {p}_toast (id, {big}{n_col}, amount, ts) VALUES "
                        f"(%s, %s{n_val}, %s, now())", (i, _big(rng, i), f"{i}.25"))
        cur.execute(f"INSERT INTO {p}_acc SELECT g, 0, 'f' FROM generate_series(%s, %s) g",
                    (base, base + 19))
        cur.execute(f"INSERT INTO {p}_full VALUES (%s, 'x', 1), (%s, 'y', 2)", (base, base + 1))
        # Three identical rows: one is updated and one deleted (in this round or the next,
        # so within one Delta commit and across two); PostgreSQL changes one of them each.
        cur.execute(f"INSERT INTO {p}_full VALUES (%s, 'dup', 0), (%s, 'dup', 0), (%s, 'dup', 0)",
                    (base + 2, base + 2, base + 2))
        # This round's: one updated (c 1), one deleted, one left (c 0); the last round's
        # left one updated to equal the updated one, then one of those two deleted.
        for a, c in ((base + 2, 0), (base - 98, 1)):
            cur.execute(f"UPDATE {p}_full SET c = c + 1 WHERE ctid = (SELECT ctid FROM {p}_full "
                        f"WHERE a = %s AND c = 0 LIMIT 1)", (a,))
            cur.execute(f"DELETE FROM {p}_full WHERE ctid = (SELECT ctid FROM {p}_full "
                        f"WHERE a = %s AND c = %s LIMIT 1)", (a, c))
        # Unchanged TOAST: only n moves.
        if not has_n:
            cur.execute(f"UPDATE {p}_toast SET amount = amount + 1 WHERE id %% 3 = %s", (r % 3,))
        else:
            cur.execute(f"UPDATE {p}_toast SET n = n + 1 WHERE id %% 3 = %s", (r % 3,))
        # A key change with the TOAST value unchanged, and one after an update in one txn.
        ids = [x[0] for x in pg.query(f"SELECT id FROM {p}_toast WHERE id < 1000000 ORDER BY id")]
        if ids:
            k = rng.choice(ids)
            cur.execute(f"UPDATE {p}_toast SET id = id + 1000000 WHERE id = %s", (k,))
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {p}_toast (id, {big}{n_col}) VALUES (%s, %s{n_val})",
                    (base + 50, _big(rng, base + 50)))
        cur.execute(f"UPDATE {p}_toast SET amount = 7 WHERE id = %s", (base + 50,))
        cur.execute(f"UPDATE {p}_toast SET id = %s WHERE id = %s", (base + 60, base + 50))
        cur.execute("COMMIT")
        if len(ids) > 4:
            cur.execute(f"DELETE FROM {p}_toast WHERE id = %s", (rng.choice(ids[:-1]),))
            cur.execute(f"UPDATE {p}_toast SET {big} = %s WHERE id = %s",
                        (_big(rng, -r), rng.choice(ids[-3:])))
        for _ in range(10):  # pgbench-like
            aid, delta = rng.randint(0, base + 19), rng.randint(-5000, 5000)
            cur.execute(f"UPDATE {p}_acc SET abalance = abalance + %s WHERE aid = %s",
                        (delta, aid))
            cur.execute(f"INSERT INTO {p}_hist VALUES (%s, %s, now())", (aid, delta))
        cur.execute(f"UPDATE {p}_full SET {b} = {b} || 'u', c = c + 1 WHERE a = %s", (base,))
        cur.execute(f"DELETE FROM {p}_full WHERE a = %s", (base - 99,))
        if r == rounds // 3:
            cur.execute(f"ALTER TABLE {p}_toast ADD COLUMN extra text")
        if r >= rounds // 3:
            cur.execute(f"UPDATE {p}_toast SET extra = 'e' || id WHERE id %% 4 = %s", (r % 4,))
        if r == (2 * rounds) // 3:
            cur.execute(f"ALTER TABLE {p}_toast DROP COLUMN n")
        if r == rounds // 4:  # widened in Delta: int -> long, the table rewritten
            cur.execute(f"ALTER TABLE {p}_acc ALTER COLUMN abalance TYPE bigint")
        if r == 1:  # a value numeric(10,2) cannot hold in Arrow: kept in _special
            cur.execute(f"INSERT INTO {p}_toast (id, {big}, amount) VALUES (5000000, %s, 'NaN')",
                        (_big(rng, 5000000),))
        if r == rounds // 2:
            cur.execute(f"TRUNCATE {p}_acc")
            cur.execute(f"INSERT INTO {p}_acc VALUES (-1, 42, 'after truncate')")
        if rename and r == rename_round(rounds):
            for suffix, (old, new) in RENAMES.items():
                cur.execute(f"ALTER TABLE {p}_{suffix} RENAME COLUMN {old} TO {new}")


def _columns(pg: PgServer, table: str) -> list[str]:
    return [r[0] for r in pg.query(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", (table,))]


def _pg_value(v: Any) -> Any:
    """NaN as its text (the replica keeps it in ``_special``; NaN equals nothing)."""
    return "NaN" if isinstance(v, Decimal) and v.is_nan() else v


def _lake_row(r: dict[str, Any], cols: list[str]) -> tuple[Any, ...]:
    """A replica's row, a special value (null in its column) as its text in ``_special``."""
    special = r.get("_special") or {}
    if isinstance(special, list):  # pyarrow: (key, value) pairs; polars: key/value structs
        special = dict((e["key"], e["value"]) if isinstance(e, dict) else e for e in special)
    return tuple(special.get(c, r[c]) if r[c] is None else r[c] for c in cols)


def iceberg_table(out: Path, name: str, change_log: bool = False) -> Any:
    """The pyiceberg table of ``name`` (``schema.table``) in the default catalog of the lake
    ``out``: its replica ``(schema, table)`` or its change log ``(schema__changes, table)``."""
    from pgoutput_arrow.sinks import iceberg_catalog

    schema, table = name.split(".", 1)
    return iceberg_catalog(out).load_table((f"{schema}__changes" if change_log else schema, table))


def read_lake(out: Path, name: str, fmt: str, columns: list[str],
              change_log: bool = False) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``name``'s replica (or change log) in the lake ``out`` of format ``fmt``,
    ``columns`` only, as each reader of the format reads them: ``{reader: rows}``."""
    import polars as pl

    # polars plans an Iceberg scan with pyiceberg without its optional planner plugin, and
    # warns about it on every scan; this says that is the planner wanted.
    os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")
    if fmt == "delta":
        from deltalake import DeltaTable

        path = str(out / "_changes" / name if change_log else out / name)
        return {"deltalake": DeltaTable(path).to_pyarrow_table(columns=columns).to_pylist(),
                "polars": pl.read_delta(path).select(columns).to_dicts()}
    if fmt == "iceberg":
        table = iceberg_table(out, name, change_log)
        return {"pyiceberg": table.scan(selected_fields=tuple(columns)).to_arrow().to_pylist(),
                "polars": pl.scan_iceberg(table).select(columns).collect().to_dicts()}
    raise ValueError(f"format {fmt!r}: expected one of {FORMATS}")


def check_replicas(pg: PgServer, p: str, out: Path, fmt: str = "delta",
                   tables: list[str] | None = None) -> dict[str, int]:
    """Every replica (of the workload's tables, or of ``tables``), read with both readers of
    ``fmt``, equals PostgreSQL's SELECT value by value (as multisets of rows of PostgreSQL's
    columns, under their current names; a special value as its text in ``_special``).
    Returns the rows per table."""
    counts = {}
    for t in tables if tables is not None else workload_tables(p):
        cols = _columns(pg, t)
        want = Counter(tuple(_pg_value(v) for v in r)
                       for r in pg.query(f"SELECT {', '.join(cols)} FROM {t}"))
        for reader, rows in read_lake(out, f"public.{t}", fmt, cols + ["_special"]).items():
            got = Counter(_lake_row(r, cols) for r in rows)
            if got != want:
                missing = list((want - got).elements())[:3]
                extra = list((got - want).elements())[:3]
                raise AssertionError(
                    f"{t} ({fmt}) read with {reader}: {sum(got.values())} rows, PostgreSQL has "
                    f"{sum(want.values())}; columns {cols}; missing {short_rows(missing)}, "
                    f"extra {short_rows(extra)}")
        counts[t] = sum(want.values())
    return counts


def short_rows(rows: list[Any]) -> str:
    """Rows for a failure message, long strings cut."""
    return repr([tuple(v[:12] + "..." if isinstance(v, str) and len(v) > 15 else v for v in r)
                 for r in rows])


def check_change_log(pg: PgServer, p: str, slot: str, out: Path, fmt: str = "delta") -> int:
    """The change log of each table, read with both readers of ``fmt``, holds every change
    of the audit slot exactly once (a change is its commit LSN, its own LSN and its
    operation; rows of an initial snapshot aside). Returns how many."""
    rows = pg.query("SELECT lsn::text, xid::text::bigint, data FROM "
                    "pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                    "'publication_names', %s)", (f"{slot}_audit", p))
    changes = pgoutput_arrow.decode([(lsn, bytes(d)) for lsn, _, d in rows])
    total = 0
    for t in workload_tables(p):
        name = f"public.{t}"
        want = Counter(zip(changes.tables[name].column("_commit_lsn").to_pylist(),
                           changes.tables[name].column("_lsn").to_pylist(),
                           changes.tables[name].column("_op").to_pylist()))
        tr = changes.truncates
        for rels, c, lsn in zip(tr.column("relations").to_pylist(),
                                tr.column("_commit_lsn").to_pylist(), tr.column("_lsn").to_pylist()):
            if name in rels:
                want[(c, lsn, "truncate")] += 1
        logs = read_lake(out, name, fmt, ["_commit_lsn", "_lsn", "_op"], change_log=True)
        for reader, log in logs.items():
            # The rows of an initial snapshot are not changes of the slot.
            got = Counter((r["_commit_lsn"], r["_lsn"], r["_op"]) for r in log
                          if r["_op"] != "snapshot")
            if got != want:
                dup = [k for k, v in got.items() if v > 1][:3]
                raise AssertionError(
                    f"change log of {name} ({fmt}) read with {reader}: {sum(got.values())} "
                    f"rows, the slot has {sum(want.values())} changes; missing "
                    f"{list((want - got).elements())[:3]}, twice {dup}")
        total += sum(want.values())
    return total


def dump_lake(pg: PgServer, p: str, slot: str, out: Path, *extra: str,
              fmt: str = "delta") -> list[str]:
    """The ``pgoutput-dump`` command that streams the slot into the lake ``out``."""
    from dump_workload import dump_command

    return [dump_command(), "--dsn", pg.dsn, "--slot", slot, "--publication", p,
            "--format", fmt, "--output", str(out), "--change-log",
            "--commit-interval", "0.2", *extra]


def drain(pg: PgServer, p: str, slot: str, out: Path, *extra: str, fmt: str = "delta") -> None:
    """Streams the slot into ``out`` until it is idle for 3 seconds."""
    proc = subprocess.run(dump_lake(pg, p, slot, out, *extra, "--idle-timeout", "3", fmt=fmt),
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"pgoutput-dump exit {proc.returncode}: {proc.stderr}")
