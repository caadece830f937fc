"""The consumer matrix: every ordinary operation of pyarrow, pandas, polars, DuckDB and Spark
(``tests/consumers.py``) x every way out of the decoder (``decode()``, ``Decoder`` batches
unified, live ``stream()`` batches, ``pgoutput-dump --format parquet`` and ``arrow`` files
read back) x every column of a table holding each type of README's type table, on real
PostgreSQL 18 and 15, in text and binary mode, with the default options. Every cell must
pass; the types are pinned by ``tests/type_table.py`` on every path too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from consumers import Failure, run_all
from dump_workload import dump_command
from pg_harness import PgServer
from type_table import check_types

#: (column, PostgreSQL type as in DDL, the type table's name for it).
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("b", "bool", "bool"), ("i2", "int2", "int2"), ("i4", "int4", "int4"), ("i8", "int8", "int8"),
    ("o", "oid", "oid"), ("f4", "float4", "float4"), ("f8", "float8", "float8"),
    ("n", "numeric(10,2)", "numeric(10,2)"), ("nfree", "numeric", "numeric"),
    ("n50", "numeric(50,5)", "numeric(50,5)"), ("t", "text", "text"), ("vc", "varchar(20)", "varchar(20)"),
    ("bp", "char(6)", "char(6)"), ("ch", '"char"', '"char"'), ("nm", "name", "name"),
    ("ba", "bytea", "bytea"), ("d", "date", "date"), ("tm", "time", "time"), ("ts", "timestamp", "timestamp"),
    ("tz", "timestamptz", "timestamptz"), ("iv", "interval", "interval"), ("u", "uuid", "uuid"),
    ("js", "json", "json"), ("jb", "jsonb", "jsonb"), ("ip", "inet", "inet"), ("ci", "cidr", "cidr"),
    ("mac", "macaddr", "macaddr"), ("mo", "money", "money"), ("bi", "bit(4)", "bit(4)"),
    ("vb", "varbit", "varbit"), ("pt", "point", "point"), ("rg", "int4range", "int4range"),
    ("mr", "int4multirange", "int4multirange"), ("ttz", "timetz", "timetz"), ("pl", "pg_lsn", "pg_lsn"),
    ("tv", "tsvector", "tsvector"), ("tq", "tsquery", "tsquery"), ("en", "{enum}", "enum"),
    ("co", "{composite}", "composite"), ("dm", "{domain}", "int4"),
    ("ai", "int4[]", "int4[]"), ("at", "text[]", "text[]"), ("ad", "date[]", "date[]"),
    ("ats", "timestamp[]", "timestamp[]"), ("an", "numeric(10,2)[]", "numeric(10,2)[]"),
    ("au", "uuid[]", "uuid[]"), ("av", "interval[]", "interval[]"), ("aby", "bytea[]", "bytea[]"),
)

#: Rows of values (SQL literals) for COLUMNS, after ``id``: ordinary values, extremes and
#: special ones (NaN, ±Infinity, ±infinity dates and timestamps, BC dates, 24:00:00, NULL
#: elements), and a row of NULLs.
ROWS: tuple[tuple[str, ...], ...] = (
    ("true", "1", "2", "3", "4", "1.5", "2.25", "12345.67", "1e-20", "'1.5'", "'hello'", "'varchar'",
     "'ab'", "'x'", "'a_name'", "'\\x0001ff'", "'2024-02-29'", "'12:34:56.789'",
     "'2024-02-29 12:34:56.123456'", "'2024-02-29 12:34:56.123456+05:30'", "'1 year 2 mons 3 days 04:05:06.7'",
     "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'{\"a\": [1, 2.5, null]}'", "'{\"b\": {\"c\": true}}'",
     "'192.168.0.1/24'", "'10.0.0.0/8'", "'08:00:2b:01:02:03'", "1234.56", "B'1010'", "B'101'",
     "'(1.5,-2)'", "'[1,10)'", "'{[1,3), [5,7)}'", "'01:02:03+05:30'", "'16/B374D848'",
     "'a fat cat'", "'fat & cat'", "'happy'", "ROW('Main St', 7)", "5",
     "'{1,NULL,3}'", "'{\"x\",\"y z\",NULL}'", "'{2024-02-29,infinity}'",
     "'{\"2024-02-29 12:34:56\",NULL}'", "'{1.5,NULL}'", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'",
     "'{\"1 day 00:00:01\",NULL}'", "'{\"\\\\x00ff\",NULL}'"),
    ("false", "-32768", "-2147483648", "-9223372036854775808", "4294967295", "'NaN'", "'-Infinity'",
     "'NaN'", "'NaN'", "'12345678901234567890123456789012345678901234.12345'", "''", "''", "''", "''", "''", "'\\x'", "'0001-01-01 BC'", "'24:00:00'",
     "'4713-01-01 00:00:00 BC'", "'-infinity'", "'-178000000 years'", "'00000000-0000-0000-0000-000000000000'",
     "'[]'", "'null'", "'::1'", "'::/0'", "'ff:ff:ff:ff:ff:ff'", "-92233720368547758.08", "B'0000'", "B''",
     "'(0,-0)'", "'empty'", "'{}'", "'24:00:00-12'", "'0/0'", "''", "'!a'", "'sad'", "ROW(NULL, NULL)", "1",
     "'{}'", "'{}'", "'{-infinity}'", "'{infinity}'", "'{}'", "'{}'", "'{}'", "'{}'"),
    ("NULL", "32767", "2147483647", "9223372036854775807", "0", "'Infinity'", "'NaN'", "-0.01",
     "'-0.000000000000000000000000000001'", "'-1.5'", "repeat('long ', 200)", "'ελληνικά'", "'é'",
     "'\\001'", "'n'", "'\\x00000000'", "'infinity'", "'00:00:00'", "'infinity'", "'infinity'",
     "'-1 mons -2 days -00:00:00.000001'", "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'\"s\"'", "'3'",
     "'2001:db8::1/64'", "'2001:db8::/32'", "'00:00:00:00:00:00'", "0", "B'1111'", "B'1'", "'(-1e300,1e-300)'",
     "'(,5]'", "'{(,5]}'", "'00:00:00+14'", "'FFFFFFFF/FFFFFFFF'", "'ü'", "'a'", "'ok'",
     "ROW('x', -1)", "2147483647",
     "'{{1,2},{3,4}}'", "'{\"with,comma\",\"q\\\"t\"}'", "'{0001-01-01 BC}'", "'{-infinity}'",
     "'{-0.01}'", "'{NULL}'", "'{\"-1 mons\"}'", "'{NULL}'"),
    tuple(["NULL"] * len(COLUMNS)),
)

PATHS = ("decode", "decoder", "live", "cli-parquet", "cli-arrow")


def _create(pg: PgServer, name: str) -> tuple[str, dict[str, str]]:
    """The table (REPLICA IDENTITY FULL: ``_before`` holds every column), its user types and
    publication; returns the table's name and each column's type table name."""
    table, enum, comp, dom = f"{name}_t", f"{name}_mood", f"{name}_addr", f"{name}_pos"
    pg.execute(f"CREATE TYPE {enum} AS ENUM ('sad', 'ok', 'happy')")
    pg.execute(f"CREATE TYPE {comp} AS (street text, number int)")
    pg.execute(f"CREATE DOMAIN {dom} AS int CHECK (VALUE > 0)")
    cols = ", ".join(f"{c} {t.format(enum=enum, composite=comp, domain=dom)}" for c, t, _ in COLUMNS)
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, {cols})")
    pg.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    pg.execute(f"CREATE PUBLICATION {name}_pub FOR TABLE {table}")
    return table, {c: kind for c, _, kind in COLUMNS}


def _workload(pg: PgServer, table: str) -> None:
    names = [c for c, _, _ in COLUMNS]
    values = ", ".join(f"({i}, {', '.join(r)})" for i, r in enumerate(ROWS, 1))
    pg.execute(f"INSERT INTO {table} (id, {', '.join(names)}) VALUES {values}")
    sets = ", ".join(f"{n} = s.{n}" for n in names)
    # Old and new values of every type: row 1 takes row 2's values, row 4 (NULLs) row 3's.
    pg.execute(f"UPDATE {table} t SET {sets} FROM {table} s WHERE t.id = 1 AND s.id = 2")
    pg.execute(f"UPDATE {table} t SET {sets} FROM {table} s WHERE t.id = 4 AND s.id = 3")
    pg.execute(f"DELETE FROM {table} WHERE id = 3")
    pg.execute(f"INSERT INTO {table} (id, {', '.join(names)}) VALUES (5, {', '.join(ROWS[0])})")


def _unified(batches: list[pa.RecordBatch]) -> pa.Table:
    schema = pgoutput_arrow.unify_schemas([b.schema for b in batches])
    return pa.concat_tables([pgoutput_arrow.conform(b, schema) for b in batches])


def _cli(capture: Path, fmt: str, out: Path, name: str) -> pa.Table:
    proc = subprocess.run([dump_command(), os.fspath(capture), "--format", fmt, "--output", os.fspath(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = sorted((out / name).glob(f"*.{fmt}"))
    assert files, list(out.rglob("*"))
    if fmt == "parquet":
        return pa.concat_tables([pq.read_table(f) for f in files])
    tables = []
    for f in files:
        with pa.memory_map(os.fspath(f)) as source:
            tables.append(pa.ipc.open_file(source).read_all())
    return pa.concat_tables(tables)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A default SparkSession: only what the test machine needs (local, one interpreter)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[1]").appName("pgoutput-arrow-consumers")
               .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g").getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="module", params=[18, 15], ids=["pg18", "pg15"])
def outputs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[tuple[str, str], pa.Table]:
    """The table on every path, in text and binary mode, from one workload: (mode, path) →
    table."""
    pg: PgServer = request.getfixturevalue(f"pg{request.param}")
    name = f"consumers_{os.getpid()}_{request.param}"
    table, _ = _create(pg, name)
    pub = f"{name}_pub"
    slots = {(mode, kind): f"{name}_{mode}_{kind}" for mode in ("text", "binary") for kind in ("sql", "live")}
    for slot in slots.values():
        pg.create_slot(slot)
    _workload(pg, table)
    pg.flush_wal()
    end = pg.current_wal_lsn()
    full = f"public.{table}"
    out: dict[tuple[str, str], pa.Table] = {}
    tmp = tmp_path_factory.mktemp(name)
    for mode in ("text", "binary"):
        options = {"proto_version": "1", "publication_names": pub}
        if mode == "binary":
            options["binary"] = "true"
        rows = pg.get_binary_changes(slots[(mode, "sql")], options)
        pairs = [(lsn, data) for lsn, _, data in rows]
        out[(mode, "decode")] = pgoutput_arrow.decode(pairs).tables[full]
        dec = pgoutput_arrow.Decoder(batch_size=2)
        batches = []
        for lsn, data in pairs:
            dec.feed(data, lsn)
            batches += [o.batch for o in dec.take() if o.kind == "table" and o.table == full]
        dec.finish()
        out[(mode, "decoder")] = _unified(batches)
        live: list[pa.RecordBatch] = []
        with pgoutput_arrow.stream(pg.dsn, slot=slots[(mode, "live")], publication=pub,
                                   binary=mode == "binary", stop_at_lsn=end, stop_after=60) as s:
            for item in s:
                if item.kind == "table" and item.table == full:
                    live.append(item.batch)
                s.ack(item.ack_lsn)
        out[(mode, "live")] = _unified(live)
        capture = tmp / f"{mode}.parquet"
        pq.write_table(pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                                 "data": [r[2] for r in rows]}), capture)
        for fmt in ("parquet", "arrow"):
            out[(mode, f"cli-{fmt}")] = _cli(capture, fmt, tmp / f"{mode}-{fmt}", full)
    for slot in slots.values():
        if pg.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)):
            pg.drop_slot(slot)
    return out


TYPES = {c: kind for c, _, kind in COLUMNS}

#: Cells known to fail, each with why; every one is asserted to fail still, so that the day it
#: passes its entry goes. (library, operation, column or None for the whole table).
OPEN: dict[tuple[str, str, str | None], str] = {}


def _report(failures: list[Failure]) -> str:
    return "\n".join(str(f) for f in failures)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.parametrize("path", PATHS)
def test_every_consumer_takes_the_default_output(outputs: dict[tuple[str, str], pa.Table], mode: str,
                                                  path: str, spark: Any) -> None:
    table = outputs[(mode, path)]
    assert table.num_rows == 8  # 5 inserts, 2 updates, 1 delete
    problems = check_types(table, TYPES, binary=mode == "binary")
    failures = run_all(table, key="id", spark=spark)
    cells = {(f.library, f.operation, f.column) for f in failures}
    unexpected = [f for f in failures if (f.library, f.operation, f.column) not in OPEN]
    fixed = [k for k in OPEN if k not in cells]
    assert not problems and not unexpected and not fixed, (
        f"{len(unexpected)} failing cells, {len(problems)} types off the table, "
        f"{len(fixed)} open cells that pass now (drop them from OPEN: {fixed}):\n"
        + _report(unexpected) + "\n" + "\n".join(problems))
