"""The Delta Lake sink (``--format delta``, ``pgoutput_arrow.sinks.DeltaSink``) on real
PostgreSQL 18 and 15: replicas equal PostgreSQL's SELECT value by value (read with deltalake
and polars), change logs hold every change once, and kill -9 (also between a Delta commit and
the slot's acknowledgement) neither loses nor repeats a change.

The tests of the rules both lake sinks share (``sinks/replica.py``: keyless tables, identical
rows of ``REPLICA IDENTITY FULL``, dropped and retyped columns, a TRUNCATE alone, keys swapped
with unchanged TOAST values) run for Delta and Iceberg (``fmt``); tests/test_iceberg.py has
Iceberg's own."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

# The Delta suite runs or fails: deltalake and polars are in requirements-dev.txt, and a
# missing one must not turn the suite into skips that pass.
import deltalake  # noqa: F401
import polars  # noqa: F401

import pgoutput_arrow
from delta_workload import (FORMATS, check_change_log, check_replicas, drain, dump_lake,
                            iceberg_table, setup, workload_round)
from dump_workload import dump_command
from pg_harness import PgServer
from pgoutput_arrow.sinks import DeltaSink, IcebergSink, LakeSinkError

ROUNDS = 9


def test_capture_into_delta_equals_select_and_a_rerun_applies_nothing_twice(
        pg: PgServer, unique_name: str, tmp_path: Path) -> None:
    p, slot = unique_name, unique_name
    setup(pg, p, slot)
    rng = random.Random(1)
    for r in range(ROUNDS):
        workload_round(pg, p, r, rng, ROUNDS)
    rows = pg.get_binary_changes(slot, {"proto_version": "1", "publication_names": p})
    # An Arrow IPC capture of 300-message batches: each is decoded and flushed apart, so
    # the rows of a key arrive over many Delta commits (unchanged TOAST values are then
    # taken from the Delta table, not from the same commit).
    capture = tmp_path / "capture.arrow"
    table = pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                      "data": [bytes(r[2]) for r in rows]})
    with pa.ipc.new_file(capture, table.schema) as w:
        for b in table.to_batches(max_chunksize=300):
            w.write_batch(b)
    out = tmp_path / "lake"
    for _ in range(2):  # the second run finds everything applied (each table's txn)
        # A small --rows-per-file: many Delta commits, each with its own txn.
        proc = subprocess.run([dump_command(), str(capture), "--format", "delta", "--output",
                               str(out), "--change-log", "--rows-per-file", "100"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        check_replicas(pg, p, out)
        check_change_log(pg, p, slot, out)


def _sink(fmt: str, out: Path, **options: Any) -> DeltaSink | IcebergSink:
    """The lake sink of format ``fmt`` at ``out``."""
    return DeltaSink(out, **options) if fmt == "delta" else IcebergSink(out, **options)


def _read(out: Path, name: str, fmt: str, change_log: bool = False) -> pa.Table:
    """The replica (or change log) of ``name`` in the lake ``out`` of format ``fmt``."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(out / ("_changes" if change_log else "") / name)).to_pyarrow_table()
    return iceberg_table(out, name, change_log).scan().to_arrow()


def _sink_parts(out: Path, parts: list[list[tuple[int, int, bytes]]], fmt: str = "delta",
                **options: Any) -> None:
    """Decodes ``parts`` (slot contents) in order into a lake sink, one commit each."""
    decoder = pgoutput_arrow.Decoder()
    with _sink(fmt, out, **options) as sink:
        for part in parts:
            for lsn, _, data in part:
                decoder.feed(bytes(data), lsn)
            decoder.flush()
            sink.write(decoder.take())
            sink.commit()


def _kill(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_live_into_delta_survives_kill_9(pg: PgServer, unique_name: str,
                                         tmp_path: Path) -> None:
    """The live CLI killed twice while the workload runs, at random points of its loop."""
    p, slot = unique_name, unique_name
    setup(pg, p, slot)
    out = tmp_path / "lake"
    rng = random.Random(7)
    from test_live import wait_slot_active, wait_slot_inactive

    def start() -> subprocess.Popen[str]:
        # Streaming before the workload goes on (a loaded machine starts Python slowly).
        proc = subprocess.Popen(dump_lake(pg, p, slot, out), stderr=subprocess.PIPE, text=True)
        wait_slot_active(pg, slot, proc)
        return proc

    proc = start()
    kills = 0
    try:
        for r in range(ROUNDS):
            workload_round(pg, p, r, rng, ROUNDS)
            if r in (3, 6):
                time.sleep(rng.uniform(0.5, 2.5))  # within a commit, or between two
                _kill(proc)
                kills += 1
                wait_slot_inactive(pg, slot)
                proc = start()
    finally:
        _kill(proc)
    assert kills == 2
    # The killed runs wrote (the last one's commits are checked by the drain's).
    from deltalake import DeltaTable
    assert DeltaTable(str(out / f"public.{p}_toast")).version() > 0
    drain(pg, p, slot, out)
    check_replicas(pg, p, out)
    check_change_log(pg, p, slot, out)


_COMMIT_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    import pgoutput_arrow
    from pgoutput_arrow.sinks import DeltaSink
    dsn, slot, pub, out = sys.argv[1:5]
    with pgoutput_arrow.stream(dsn, slot=slot, publication=pub, idle_timeout=5) as changes, \\
            DeltaSink(out, app_id=slot, change_log=True) as sink:
        for batches, ack_lsn in changes.groups(linger=0.2):
            sink.write(batches)
            sink.commit()
            if sink.commits:
                print(sink.commits, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # committed, never acknowledged
            changes.ack(ack_lsn)
""")


def test_kill_between_delta_commit_and_ack_applies_nothing_twice(
        pg18: PgServer, unique_name: str, tmp_path: Path) -> None:
    """A stream() loop with DeltaSink dies right after its first Delta commits: the slot
    sends those transactions again, and the tables' txn versions make the sink skip them."""
    pg, p, slot = pg18, unique_name, unique_name
    setup(pg, p, slot)
    rng = random.Random(3)
    for r in range(4):
        workload_round(pg, p, r, rng, 6)
    out = tmp_path / "lake"
    script = tmp_path / "commit_then_die.py"
    script.write_text(_COMMIT_THEN_DIE)
    proc = subprocess.run([sys.executable, str(script), pg.dsn, slot, p, str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert int(proc.stdout.split()[0]) > 0
    # The slot did not move: everything comes again, and what was committed is skipped.
    assert pg.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))[0][0] is not None
    for r in range(4, 6):
        workload_round(pg, p, r, rng, 6)
    drain(pg, p, slot, out)
    check_replicas(pg, p, out)
    check_change_log(pg, p, slot, out)


def test_a_table_without_a_key_is_appended_by_default(pg: PgServer, unique_name: str,
                                                     tmp_path: Path) -> None:
    """pgbench_history's shape: PostgreSQL refuses UPDATE and DELETE on a keyless table
    (DEFAULT without a primary key, or NOTHING) while it is published for them, and a
    publication of inserts only does not send them: only inserts arrive, and the replica is
    their rows, appended, said once on stderr."""
    import psycopg2
    from deltalake import DeltaTable

    t, t2 = f"{unique_name}_log", f"{unique_name}_nothing"
    pg.execute(f"CREATE TABLE {t} (msg text); CREATE TABLE {t2} (id int PRIMARY KEY, msg text); "
               f"ALTER TABLE {t2} REPLICA IDENTITY NOTHING")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}, {t2}")
    pg.execute(f"CREATE PUBLICATION {unique_name}_ins FOR TABLE {t2} WITH (publish = 'insert')")
    pg.create_slot(unique_name)
    pg.execute(f"INSERT INTO {t} VALUES ('a'), ('b'), ('b'); INSERT INTO {t2} VALUES (1, 'x')")
    for table in (t, t2):
        with pytest.raises(psycopg2.Error, match="does not have a replica identity"):
            pg.execute(f"UPDATE {table} SET msg = 'no' WHERE msg = 'a'")
        with pytest.raises(psycopg2.Error, match="does not have a replica identity"):
            pg.execute(f"DELETE FROM {table}")
    pg.execute(f"ALTER PUBLICATION {unique_name} DROP TABLE {t2}")
    pg.execute(f"UPDATE {t2} SET msg = 'y'")  # published for inserts only: not sent
    pg.execute(f"INSERT INTO {t} VALUES ('c')")
    capture = tmp_path / "capture.arrow"
    rows = pg.get_binary_changes(unique_name, {"proto_version": "1", "publication_names":
                                               f"{unique_name},{unique_name}_ins"})
    table = pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                      "data": [bytes(r[2]) for r in rows]})
    with pa.ipc.new_file(capture, table.schema) as w:
        w.write_table(table)
    out = tmp_path / "lake"
    proc = subprocess.run([dump_command(), str(capture), "--format", "delta", "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "no replica identity key" in line]
    assert len(said) == 2 and all("appended" in line for line in said), proc.stderr
    got = DeltaTable(str(out / f"public.{t}")).to_pyarrow_table()
    assert sorted(got.column("msg").to_pylist()) == sorted(r[0] for r in pg.query(f"SELECT msg FROM {t}"))
    got = DeltaTable(str(out / f"public.{t2}")).to_pyarrow_table()
    assert got.select(["id", "msg"]).to_pylist() == [{"id": 1, "msg": "x"}]


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_update_of_a_table_that_lost_its_key_is_an_error_not_a_silent_drop(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    """The one way an update of a keyless table arrives: made while it had an identity, in
    the same commit as a change to NOTHING. The sink names it, unless append_only."""
    pg, t = pg18, f"{unique_name}_k"
    pg.execute(f"CREATE TABLE {t} (id int, v text); ALTER TABLE {t} REPLICA IDENTITY FULL")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    pg.execute(f"INSERT INTO {t} VALUES (1, 'a'); UPDATE {t} SET v = 'b'; "
               f"ALTER TABLE {t} REPLICA IDENTITY NOTHING; ALTER PUBLICATION {unique_name} "
               f"SET (publish = 'insert'); INSERT INTO {t} VALUES (2, 'c')")
    rows = pg.get_binary_changes(unique_name, {"proto_version": "1",
                                               "publication_names": unique_name})
    outputs = pgoutput_arrow.decode([(lsn, bytes(d)) for lsn, _, d in rows])
    batches = outputs.tables[f"public.{t}"].to_batches()
    sink = _sink(fmt, tmp_path / "refused")
    for b in batches:
        sink.add("table", f"public.{t}", b)
    with pytest.raises(LakeSinkError, match=f"public.{t} has no replica identity key .* 1 updates"):
        sink.commit()
    sink = _sink(fmt, tmp_path / "appended", append_only=True)
    for b in batches:
        sink.add("table", f"public.{t}", b)
    sink.commit()
    got = _read(tmp_path / "appended", f"public.{t}", fmt)
    assert sorted(got.column("v").to_pylist()) == ["a", "c"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_full_identity_duplicates_lose_one_row_per_change(pg: PgServer, unique_name: str,
                                                          tmp_path: Path, fmt: str) -> None:
    """REPLICA IDENTITY FULL, identical rows: PostgreSQL deletes or updates one of them per
    change, and so does the replica, within a commit and across commits (a TOAST value, sent
    whole in the old row, among the columns)."""
    t = f"{unique_name}_f"
    pg.execute(f"CREATE TABLE {t} (a int, b text, big text, f float8); "
               f"ALTER TABLE {t} REPLICA IDENTITY FULL; "
               f"ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    one = f"ctid = (SELECT ctid FROM {t} WHERE a = %s AND b = %s LIMIT 1)"
    steps = [
        [(f"INSERT INTO {t} SELECT 1, 'x', repeat('t', 5000), 0.5 FROM generate_series(1, 4)", ()),
         (f"INSERT INTO {t} VALUES (2, NULL, NULL, NULL), (2, NULL, NULL, NULL)", ()),
         (f"DELETE FROM {t} WHERE {one}", (1, "x"))],                      # in the same commit
        [(f"DELETE FROM {t} WHERE {one}", (1, "x")),                       # across commits
         (f"DELETE FROM {t} WHERE ctid = (SELECT ctid FROM {t} WHERE a = 2 LIMIT 1)", ())],
        [(f"UPDATE {t} SET b = 'y' WHERE {one}", (1, "x")),                # one of two updated
         (f"INSERT INTO {t} VALUES (2, NULL, NULL, NULL)", ()),
         (f"UPDATE {t} SET a = 3 WHERE ctid = (SELECT ctid FROM {t} WHERE a = 2 LIMIT 1)", ())],
        [(f"UPDATE {t} SET b = 'x' WHERE {one}", (1, "y")),                # equal again
         (f"DELETE FROM {t} WHERE {one}", (1, "x"))],
    ]
    out = tmp_path / "lake"
    decoder = pgoutput_arrow.Decoder()
    with _sink(fmt, out) as sink:
        for step in steps:
            for sql, params in step:
                pg.execute(sql, params or None)
            for lsn, _, data in pg.get_binary_changes(unique_name, options):
                decoder.feed(bytes(data), lsn)
            decoder.flush()
            sink.write(decoder.take())
            sink.commit()
            got = _read(out, f"public.{t}", fmt).select(["a", "b", "big", "f"])
            want = sorted(pg.query(f"SELECT a, b, big, f FROM {t}"), key=repr)
            assert sorted((tuple(r.values()) for r in got.to_pylist()), key=repr) == want


def test_cli_delta_options_need_format_delta(tmp_path: Path) -> None:
    proc = subprocess.run([dump_command(), "x.parquet", "--format", "jsonl", "--change-log"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--format delta" in proc.stderr
    proc = subprocess.run([dump_command(), "x.parquet", "--format", "delta"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--output" in proc.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_dropped_column_stays_null_from_the_drop_on_or_is_dropped(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    pg, t = pg18, f"{unique_name}_d"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, a int, b text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    pg.execute(f"INSERT INTO {t} VALUES (1, 10, 'x'), (2, 20, 'y')")
    first = pg.get_binary_changes(unique_name, options)
    pg.execute(f"ALTER TABLE {t} DROP COLUMN b")
    pg.execute(f"UPDATE {t} SET a = 11 WHERE id = 1")
    pg.execute(f"INSERT INTO {t} VALUES (3, 30)")
    second = pg.get_binary_changes(unique_name, options)
    for drop in (False, True):
        out = tmp_path / f"drop_{drop}"
        _sink_parts(out, [first, second], fmt, drop_columns=drop)  # two lake commits
        got = _read(out, f"public.{t}", fmt)
        rows = {r["id"]: r for r in got.to_pylist()}
        assert {k: r["a"] for k, r in rows.items()} == {1: 11, 2: 20, 3: 30}
        if drop:
            assert "b" not in got.column_names
        else:  # kept; null in the rows changed since the drop
            assert {k: r["b"] for k, r in rows.items()} == {1: None, 2: "y", 3: None}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_commit_of_only_a_truncate_empties_the_replica(pg18: PgServer, unique_name: str,
                                                         tmp_path: Path, fmt: str) -> None:
    pg, t = pg18, f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    pg.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    first = pg.get_binary_changes(unique_name, options)
    pg.execute(f"TRUNCATE {t}")
    second = pg.get_binary_changes(unique_name, options)
    out = tmp_path / "lake"
    _sink_parts(out, [first, second], fmt, app_id="a", change_log=True)
    assert _read(out, f"public.{t}", fmt).num_rows == 0
    log = _read(out, f"public.{t}", fmt, change_log=True).sort_by("_commit_lsn")
    assert log.column("_op").to_pylist() == ["insert", "insert", "truncate"]
    # The replica's position: the commit LSN of the TRUNCATE's transaction.
    if fmt == "delta":
        from deltalake import DeltaTable

        held = DeltaTable(str(out / f"public.{t}")).transaction_version(f"a:public.{t}")
    else:
        held = int(iceberg_table(out, f"public.{t}").properties["pgoutput.commit-lsn.a"])
    assert held == log.column("_commit_lsn")[2].as_py()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_retype_without_a_lossless_common_type_makes_the_column_text(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    """text -> int cannot widen either way: the Delta column stays a string column and the
    new values arrive as their text; int -> bigint widens the Delta column."""
    pg, t = pg18, f"{unique_name}_r"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, w text, n int)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    pg.execute(f"INSERT INTO {t} VALUES (1, '10', 1), (2, '20', 2)")
    first = pg.get_binary_changes(unique_name, options)
    pg.execute(f"ALTER TABLE {t} ALTER COLUMN w TYPE int USING w::int, "
               "ALTER COLUMN n TYPE bigint")
    pg.execute(f"UPDATE {t} SET w = 11, n = 5000000000 WHERE id = 1")
    second = pg.get_binary_changes(unique_name, options)
    out = tmp_path / "lake"
    _sink_parts(out, [first, second], fmt)
    got = _read(out, f"public.{t}", fmt)
    assert got.schema.field("w").type == pa.string()
    assert got.schema.field("n").type == pa.int64()
    assert {r["id"]: (r["w"], r["n"]) for r in got.to_pylist()} == {
        1: ("11", 5000000000), 2: ("20", 2)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_keys_swapped_and_reused_in_one_commit_keep_their_toast_values(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    """Rows 1 and 2 swap keys through 3 (unchanged TOAST values follow their rows), row 5
    moves to 6 and a new row takes key 5, row 7 is deleted and inserted again: one commit,
    against rows an earlier commit wrote."""
    pg, t = pg18, f"{unique_name}_k"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, big text, n int)")
    pg.execute(f"ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    big = {i: f"{i}" * 3000 for i in (1, 2, 5, 7)}
    for i, v in big.items():
        pg.execute(f"INSERT INTO {t} VALUES (%s, %s, 0)", (i, v))
    first = pg.get_binary_changes(unique_name, options)
    with pg.connect() as conn:
        cur = conn.cursor()
        cur.execute("BEGIN")
        cur.execute(f"UPDATE {t} SET id = 3, n = 1 WHERE id = 1")
        cur.execute(f"UPDATE {t} SET id = 1, n = 2 WHERE id = 2")
        cur.execute(f"UPDATE {t} SET id = 2 WHERE id = 3")
        cur.execute(f"UPDATE {t} SET id = 6 WHERE id = 5")
        cur.execute(f"INSERT INTO {t} VALUES (5, 'new five', 5)")
        cur.execute(f"DELETE FROM {t} WHERE id = 7")
        cur.execute(f"INSERT INTO {t} VALUES (7, 'new seven', 7)")
        cur.execute("COMMIT")
    second = pg.get_binary_changes(unique_name, options)
    out = tmp_path / "lake"
    _sink_parts(out, [first, second], fmt)
    got = {r["id"]: (r["big"], r["n"]) for r in _read(out, f"public.{t}", fmt).to_pylist()}
    assert got == {r[0]: (r[1], r[2]) for r in pg.query(f"SELECT id, big, n FROM {t}")}
    assert got[2] == (big[1], 1) and got[1] == (big[2], 2) and got[6] == (big[5], 0)


def test_live_snapshot_then_changes_into_delta(pg: PgServer, unique_name: str, tmp_path: Path) -> None:
    """pgoutput-dump --create-slot --snapshot --format delta: the rows that existed before the
    slot land in the replica as inserts (``_op = "snapshot"`` in the change log), then the
    changes (updates, a key change, deletes, an insert; a TOAST value left unchanged):
    the replica equals the table, the change log holds each snapshot row once."""
    from deltalake import DeltaTable

    from test_live import DUMP, caught_up_lsn, slot_state, wait_until

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, big text); INSERT INTO {t} SELECT g, "
               f"'v' || g, CASE WHEN g % 10 = 0 THEN repeat('x', 4000) END FROM generate_series(1, 2000) g; "
               f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    out = tmp_path / "lake"
    proc = subprocess.Popen([*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot", "--snapshot",
                             "--publication", pub, "--format", "delta", "--output", str(out),
                             "--change-log", "--commit-interval", "0.2", "--status-interval", "0.3"],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: proc.poll() is None and (slot_state(pg, slot)[0] or 0) > 0, 60,
                   "the snapshot and the stream")
        pg.execute(f"UPDATE {t} SET v = 'u' WHERE id % 7 = 0; UPDATE {t} SET id = id + 10000 WHERE id = 10; "
                   f"DELETE FROM {t} WHERE id % 11 = 0; INSERT INTO {t} VALUES (5000, 'new', NULL)")
        end = caught_up_lsn(pg)
        wait_until(lambda: proc.poll() is None and (slot_state(pg, slot)[0] or 0) >= end, 60,
                   lambda: f"the sink to confirm {end}: {slot_state(pg, slot)}")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    replica = DeltaTable(str(out / f"public.{t}")).to_pyarrow_table().sort_by("id")
    assert [tuple(r.values()) for r in replica.select(["id", "v", "big"]).to_pylist()] == \
        [tuple(r) for r in pg.query(f"SELECT id, v, big FROM {t} ORDER BY id")]
    log = DeltaTable(str(out / "_changes" / f"public.{t}")).to_pyarrow_table()
    snapshot_ids = [r["id"] for r in log.to_pylist() if r["_op"] == "snapshot"]
    assert sorted(snapshot_ids) == list(range(1, 2001))
