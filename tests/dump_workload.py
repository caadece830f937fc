"""A small workload with every kind of change, captured from a real server into the file
formats that ``pgoutput_arrow.decode`` and ``pgoutput-dump`` read, with the changes it makes
written down, for the Python API and CLI tests.

``capture_workload(pg, name, binary=...)`` runs it and returns a :class:`Workload`: the
capture rows in server order, the tables, and ``expected``: one ``(op, "schema.table", key)``
per change in commit order, as the SQL below makes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pg_harness import PgServer, int_to_lsn

#: A text value long enough (> 12 bytes) that a string_view must point to it, not inline it.
LONG = "a text value longer than twelve bytes, number "


@dataclass
class Workload:
    rows: list[tuple[int, int, bytes]]
    main: str          # "public.<name>_main"
    other: str         # "public.<name>_other"
    expected: list[tuple[str, str, object]]
    options: dict[str, str]

    def table(self, lsn_as_text: bool = True) -> pa.Table:
        """The capture as pg_logical_slot_get_binary_changes returns it: lsn text X/Y (or
        int64), xid int64, data binary."""
        lsn = ([int_to_lsn(r[0]) for r in self.rows] if lsn_as_text
               else [r[0] for r in self.rows])
        return pa.table({
            "lsn": pa.array(lsn, pa.string() if lsn_as_text else pa.int64()),
            "xid": pa.array([r[1] for r in self.rows], pa.int64()),
            "data": pa.array([r[2] for r in self.rows], pa.binary()),
        })

    def write_parquet(self, path: Path) -> Path:
        pq.write_table(self.table(), path)
        return path

    def write_arrow_file(self, path: Path) -> Path:
        t = self.table(lsn_as_text=False)
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
        return path

    def write_arrow_stream(self, path: Path) -> Path:
        t = self.table()
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t)
        return path


def capture_workload(pg: PgServer, name: str, *, binary: bool = False,
                     proto: int = 1) -> Workload:
    main, other = f"{name}_main", f"{name}_other"
    pub, slot = f"{name}_pub", f"{name}_slot"
    # A module fixture can be set up twice on one server (pytest-xdist interleaves modules
    # when it balances its processes): the first one's objects go first.
    pg.execute(f"DROP PUBLICATION IF EXISTS {pub}; DROP TABLE IF EXISTS {main}, {other}")
    pg.execute(f"""CREATE TABLE {main} (
        id int PRIMARY KEY, name text, amount numeric(12,2), big bigint, ts timestamptz,
        d date, payload bytea, tags text[], f float8, doc jsonb, u uuid)""")
    pg.execute(f"CREATE TABLE {other} (k text PRIMARY KEY, v int)")
    pg.execute(f"CREATE PUBLICATION {pub} FOR TABLE {main}, {other}")
    pg.create_slot(slot)

    expected: list[tuple[str, str, object]] = []
    m, o = f"public.{main}", f"public.{other}"
    # One multi-row insert: three rows in one transaction.
    pg.execute(f"""INSERT INTO {main} VALUES
        (1, '{LONG}1', 12.50, 9007199254740993, '2024-02-29 12:34:56.789012+00', '2024-02-29',
         '\\xdeadbeef', ARRAY['x', NULL, 'it''s'], 'NaN', '{{"a": [1, 2.5]}}',
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
        (2, '{LONG}2', -0.01, -1, '1999-12-31 23:59:59+00', '0044-03-15 BC', '', '{{}}',
         'Infinity', 'null', NULL),
        (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""")
    expected += [("insert", m, 1), ("insert", m, 2), ("insert", m, 3)]
    pg.execute(f"UPDATE {main} SET name = 'renamed', f = -0.5 WHERE id = 1")
    expected.append(("update", m, 1))
    pg.execute(f"DELETE FROM {main} WHERE id = 3")
    expected.append(("delete", m, 3))
    # One transaction over both tables.
    with pg.connect(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {other} VALUES ('k1', 1), ('k2', 2)")
        cur.execute(f"UPDATE {main} SET id = 20 WHERE id = 2")
        cur.execute("SELECT pg_logical_emit_message(true, 'dump-test', 'in a transaction')")
        conn.commit()
    conn.close()
    expected += [("insert", o, "k1"), ("insert", o, "k2"), ("update", m, 20),
                 ("message", "", "dump-test")]
    pg.execute(f"TRUNCATE {other}")
    expected.append(("truncate", o, None))
    pg.execute(f"INSERT INTO {other} VALUES ('k3', 3)")
    expected.append(("insert", o, "k3"))

    options = {"proto_version": str(proto), "publication_names": pub, "messages": "true"}
    if binary:
        options["binary"] = "true"
    rows = pg.get_binary_changes(slot, options)
    pg.drop_slot(slot)
    return Workload(rows, m, o, expected, options)


def comparable(table: pa.Table) -> list[dict[str, object]]:
    """The rows of a decoded table as JSON-safe values (as pgoutput-dump prints them), so
    that tables compare value by value whatever their physical types (string_view or
    string) and even where ``to_pylist`` cannot go (dates before year 1)."""
    import json

    from pgoutput_arrow._internal import rows_json

    return [json.loads(line) for line in rows_json(table).splitlines()]


def dump_command() -> str:
    """The installed console script of the interpreter running the tests."""
    import sys

    path = Path(sys.executable).parent / "pgoutput-dump"
    assert path.exists(), f"{path} missing: install the package (make develop)"
    return os.fspath(path)
