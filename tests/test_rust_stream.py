"""A slot streamed from Rust alone (crates/pgoutput-arrow/examples/stream_slot.rs: its own
connection, SCRAM over TCP or trust over the Unix socket, pgoutput_arrow::Decoder and
pgoutput_proto::SessionPositions) on real PostgreSQL 18 and 15: every change arrives once,
the slot is confirmed past the last commit, a second run gets nothing again, and a wrong
password or slot is one clear line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pg_harness import PgServer, lsn_to_int

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ["cargo", "run", "-q", "-p", "pgoutput-arrow", "--example", "stream_slot", "--"]


def stream_slot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXAMPLE, *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def rows_by_table(stdout: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in stdout.splitlines():
        m = re.match(r"table (.+): (\d+) rows", line)
        assert m, line
        counts[m[1]] = counts.get(m[1], 0) + int(m[2])
    return counts


@pytest.mark.parametrize("version", [18, 15])
def test_a_slot_streamed_from_rust_delivers_every_change_once_and_confirms_it(
        version: int, request: pytest.FixtureRequest, unique_name: str) -> None:
    pg: PgServer = request.getfixturevalue(f"pg{version}")
    t, slot = f"{unique_name}_t", unique_name
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, note text, at timestamptz)")
    pg.execute(f"CREATE PUBLICATION {slot} FOR TABLE {t}")
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    pg.execute(f"INSERT INTO {t} SELECT g, repeat('x', g % 50), now() FROM generate_series(1, 3000) g")
    pg.execute(f"UPDATE {t} SET note = 'changed' WHERE id % 3 = 0")
    pg.execute(f"DELETE FROM {t} WHERE id % 7 = 0")
    last = lsn_to_int(pg.scalar("SELECT pg_current_wal_lsn()::text"))

    first = stream_slot(pg.dsn, slot, slot, "1")
    assert first.returncode == 0, first.stderr
    assert rows_by_table(first.stdout) == {f"public.{t}": 3000 + 1000 + 428}, first.stdout
    confirmed = lsn_to_int(pg.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)))
    assert confirmed >= last

    pg.execute(f"INSERT INTO {t} VALUES (5000, 'late', now())")
    again = stream_slot(pg.socket_dsn, slot, slot, "1")  # trust over the Unix socket
    assert again.returncode == 0, again.stderr
    assert rows_by_table(again.stdout) == {f"public.{t}": 1}, again.stdout

    wrong = stream_slot(pg.dsn_for(password="not-it"), slot, slot, "1")
    assert wrong.returncode == 1 and len(wrong.stderr.splitlines()) == 1, wrong.stderr
    assert "password authentication failed" in wrong.stderr, wrong.stderr
    missing = stream_slot(pg.dsn, f"{slot}_absent", slot, "1")
    assert missing.returncode == 1 and "does not exist" in missing.stderr, missing.stderr
    pg.drop_slot(slot)


def test_a_database_in_another_encoding_streams_from_rust(pg18: PgServer, unique_name: str) -> None:
    """The example sends the output settings (pgoutput_proto::OUTPUT_SETTINGS) at startup:
    a WIN1252 database's names and text arrive in UTF-8."""
    db = f"{unique_name}_win"
    pg18.create_database(db, "WIN1252")
    conn = pg18.connect(pg18.dsn_for(db))
    conn.set_client_encoding("UTF8")
    with conn.cursor() as cur:
        cur.execute('CREATE TABLE "tablé €" (id int PRIMARY KEY, note text)')
        cur.execute('CREATE PUBLICATION p FOR TABLE "tablé €"')
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (db,))
        cur.execute("""INSERT INTO "tablé €" VALUES (1, 'café ß €')""")
    conn.close()
    try:
        run = stream_slot(pg18.dsn_for(db), db, "p", "1")
        assert run.returncode == 0, run.stderr
        assert rows_by_table(run.stdout) == {"public.tablé €": 1}, run.stdout
    finally:
        pg18.drop_slot(db)
