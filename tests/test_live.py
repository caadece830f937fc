"""The live source (pgoutput_arrow.stream, pgoutput-dump --dsn) on real PostgreSQL 18 and 15.

Every test streams from a real server over the walsender protocol; nothing is mocked. Each
test has a timeout and every loop is bounded.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pgoutput_arrow import exceptions as exc
from pgoutput_arrow.live import LiveStream, lsn_to_str, parse_lsn
from dump_workload import dump_command
from pg_harness import PgServer, PgServerError, lsn_to_int
from threads import CheckedThread

DUMP = [sys.executable, "-m", "pgoutput_arrow.cli"]


# --------------------------------------------------------------------------- helpers


def wait_until(condition: Callable[[], object], timeout: float,
               what: str | Callable[[], str], interval: float = 0.05) -> None:
    """Polls ``condition`` until it holds. After ``timeout`` seconds, fails saying what was
    awaited (``what``, or what it returns then: the state worth seeing). ``condition`` may
    fail by itself, as when the process it waits on died."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for "
                        f"{what() if callable(what) else what}")
        time.sleep(interval)


def alive(proc: subprocess.Popen[str]) -> bool:
    """True, or fails with the process's stderr if it exited."""
    assert proc.poll() is None, f"exited {proc.returncode}: " + (
        proc.stderr.read() if proc.stderr else "")
    return True


def slot_state(pg: PgServer, slot: str) -> tuple[int | None, int | None]:
    """(confirmed_flush_lsn, active_pid) of a slot."""
    rows = pg.query("SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))
    if not rows:
        return None, None
    lsn, pid = rows[0]
    return (lsn_to_int(lsn) if lsn else None), pid


def wait_slot_inactive(pg: PgServer, slot: str, timeout: float = 20.0) -> None:
    wait_until(lambda: slot_state(pg, slot)[1] is None, timeout, f"slot {slot} to be released")


def reported_write_lsn(pg: PgServer, slot: str) -> int:
    """The write position the consumer of ``slot`` last reported (0: none yet)."""
    rows = pg.query("SELECT r.write_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s "
                    "ON s.active_pid = r.pid WHERE s.slot_name = %s", (slot,))
    return lsn_to_int(rows[0][0]) if rows and rows[0][0] else 0


def wait_slot_active(pg: PgServer, slot: str, proc: subprocess.Popen[str],
                     timeout: float = 60.0) -> None:
    """Until ``proc`` streams from ``slot`` (it may have to create it first)."""
    wait_until(lambda: alive(proc) and slot_state(pg, slot)[1] is not None, timeout,
               f"{proc.args!r} to stream from slot {slot}")


def caught_up_lsn(pg: PgServer) -> int:
    """An LSN that the walsender will have sent once it sent everything written so far."""
    pg.flush_wal()
    return pg.current_wal_lsn()


def collect(s: LiveStream) -> dict[str, list[pa.RecordBatch]]:
    out: dict[str, list[pa.RecordBatch]] = {}
    for item in s:
        out.setdefault(item.name, []).append(item.batch)
        s.ack(item.ack_lsn)
    return out


def as_table(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches)


def replay(rows: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    """Apply inserts, updates and deletes by primary key, in commit order."""
    state: dict[Any, dict[str, Any]] = {}
    rows = sorted(rows, key=lambda r: (r["_commit_lsn"], r["_seq"]))
    for r in rows:
        before = r.get("_before")
        if r["_op"] == "delete":
            state.pop(before[key], None)
            continue
        if r["_op"] == "update" and before is not None and before.get(key) is not None:
            state.pop(before[key], None)
        state[r[key]] = {k: v for k, v in r.items() if not k.startswith("_")}
    return state


def free_closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dump(*args: str, env: dict[str, str] | None = None, timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DUMP, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


# --------------------------------------------------------------------------- (a) live = SQL


WORKLOAD = """
INSERT INTO {t} (id, name, amount, at, tags, payload)
  SELECT g, 'n' || g, g * 1.25, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1 hour',
         ARRAY['a' || g, NULL], repeat('x', 10)
  FROM generate_series(1, 200) g;
UPDATE {t} SET amount = amount + 1, name = NULL WHERE id % 7 = 0;
DELETE FROM {t} WHERE id % 11 = 0;
BEGIN; INSERT INTO {t} (id, name) VALUES (1001, 'kept');
  SAVEPOINT sp; INSERT INTO {t} (id, name) VALUES (1002, 'rolled back'); ROLLBACK TO sp;
  UPDATE {t} SET payload = repeat('y', 20) WHERE id = 1; COMMIT;
BEGIN; INSERT INTO {t} (id, name) SELECT g, 'big' FROM generate_series(2000, 4999) g; COMMIT;
BEGIN; INSERT INTO {t} (id, name) VALUES (9999, 'aborted'); ROLLBACK;
UPDATE {t} SET id = id + 100000 WHERE id = 5;
TRUNCATE {u};
INSERT INTO {u} VALUES (1, 'after truncate');
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_live_stream_equals_sql_interface(pg: PgServer, unique_name: str, binary: bool) -> None:
    t, u = f"{unique_name}_t", f"{unique_name}_u"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, name text, amount numeric(12,2), "
               f"at timestamptz, tags text[], payload text)")
    pg.execute(f"CREATE TABLE {u} (id int PRIMARY KEY, v text)")
    pub, live_slot, sql_slot = f"{unique_name}_pub", f"{unique_name}_live", f"{unique_name}_sql"
    pg.execute(f"CREATE PUBLICATION {pub} FOR TABLE {t}, {u}")
    pg.create_slot(live_slot)
    pg.create_slot(sql_slot)
    pg.execute(WORKLOAD.format(t=t, u=u))
    end = caught_up_lsn(pg)

    with pgoutput_arrow.stream(pg.dsn, slot=live_slot, publication=pub, binary=binary,
                               stop_at_lsn=end, stop_after=90) as s:
        live = collect(s)
        proto = s.proto_version
        assert s.stats().messages > 0
    assert proto == (4 if pg.version >= 16 else 3)

    options = {"proto_version": str(proto), "publication_names": pub, "streaming": "on",
               "binary": "true" if binary else "false"}
    rows = pg.get_binary_changes(sql_slot, options, peek=True)
    sql = pgoutput_arrow.decode([(lsn, data) for lsn, _xid, data in rows])

    names = {f"public.{t}", f"public.{u}"}
    assert names <= set(live), sorted(live)
    for name in names:
        got = as_table(live[name])
        want = sql.tables[name]
        assert got.num_rows == want.num_rows, name
        # _lsn: the walsender and the SQL functions may attribute a message to different
        # records; _seq counts messages of each session. Everything else must be equal.
        cols = [c for c in want.schema.names if c not in ("_lsn", "_seq")]
        assert got.schema.names == want.schema.names, name

        def rows(table: pa.Table) -> list[dict[str, Any]]:
            # (pyarrow cannot sort_by tables with view columns: sort in Python)
            ordered = sorted(table.to_pylist(), key=lambda r: (r["_commit_lsn"], r["_seq"]))
            return [{c: r[c] for c in cols} for r in ordered]

        assert rows(got) == rows(want), name
    truncates = as_table(live["truncates"]) if "truncates" in live else None
    assert truncates is not None and truncates.num_rows == sql.truncates.num_rows == 1
    # The streamed transaction of 3000 rows and the rolled-back savepoint came through right.
    ids = set(as_table(live[f"public.{t}"]).column("id").to_pylist())
    assert 1001 in ids and 1002 not in ids and 9999 not in ids and 4999 in ids


# --------------------------------------------------------------------------- (b) kill -9


def read_output(root: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted((root / table).glob("*.parquet")) if (root / table).exists() else []:
        rows += pq.read_table(f).to_pylist()
    return rows


@pytest.mark.timeout(300)
def test_cli_killed_with_sigkill_resumes_exactly_once(pg: PgServer, unique_name: str,
                                                      tmp_path: Path) -> None:
    a, b = f"{unique_name}_a", f"{unique_name}_b"
    pg.execute(f"CREATE TABLE {a} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE TABLE {b} (id int PRIMARY KEY, n int)")
    slot = f"{unique_name}_s"
    out = tmp_path / "out"
    cmd = [*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot", "--create-publication",
           a, b, "--format", "parquet", "--output", str(out), "--commit-interval", "0.3",
           "--status-interval", "1"]
    iterations = 2500
    done = threading.Event()
    errors: list[BaseException] = []

    def workload() -> None:
        try:
            conn = pg.connect()
            with conn.cursor() as cur:
                for i in range(iterations):
                    cur.execute(
                        f"BEGIN; INSERT INTO {a} VALUES (%s, 'x'); "
                        f"INSERT INTO {b} VALUES (%s, 0) ON CONFLICT (id) DO UPDATE "
                        f"SET n = {b}.n + 1; DELETE FROM {a} WHERE id = %s; COMMIT",
                        (i, i % 37, i - 5))
                    time.sleep(0.002)
            conn.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    # Start once so that the slot exists before the workload: every change is in it.
    first = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    wait_slot_active(pg, slot, first)
    worker = CheckedThread(target=workload)
    worker.start()
    # New kill points every run; the seed is printed (shown when the test fails) and
    # PGOUTPUT_KILL_SEED replays a run.
    seed = int(os.environ.get("PGOUTPUT_KILL_SEED", time.time_ns() % 2**32))
    print(f"kill points: PGOUTPUT_KILL_SEED={seed}")
    rng = random.Random(seed)
    proc = first
    kills = 0
    while kills < 5:
        time.sleep(rng.uniform(0.3, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
        wait_slot_inactive(pg, slot)
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    worker.join(timeout=200)
    assert not worker.is_alive() and not errors, errors
    end = caught_up_lsn(pg)
    # Let the last run catch up, then stop it cleanly with SIGTERM.
    wait_until(lambda: alive(proc) and (slot_state(pg, slot)[0] or 0) >= end, 90,
               lambda: f"the consumer to catch up: slot at {slot_state(pg, slot)}, server at "
               f"{lsn_to_str(end)}, output: {sorted(p.name for p in out.rglob('*'))[-5:]}",
               interval=0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    assert not list(out.rglob("*.tmp"))
    rows_a = read_output(out, f"public.{a}")
    rows_b = read_output(out, f"public.{b}")
    inserts_a = [r["id"] for r in rows_a if r["_op"] == "insert"]
    assert sorted(inserts_a) == list(range(iterations)), "a change was lost or duplicated"
    assert len([r for r in rows_a if r["_op"] == "delete"]) == iterations - 5
    assert len(rows_b) == iterations
    want_a = {r[0]: {"id": r[0], "v": r[1]} for r in pg.query(f"SELECT id, v FROM {a}")}
    want_b = {r[0]: {"id": r[0], "n": r[1]} for r in pg.query(f"SELECT id, n FROM {b}")}
    assert replay(rows_a) == want_a
    assert replay(rows_b) == want_b
    checkpoint = parse_lsn(json.loads((out / "_checkpoint.json").read_text())["lsn"])
    assert checkpoint <= (slot_state(pg, slot)[0] or 0)


def file_schemas(directory: Path) -> list[pa.Schema]:
    """The distinct schemas of a table directory's files (one, for the output to read back
    whole with any reader)."""
    distinct: list[pa.Schema] = []
    for f in sorted(directory.glob("*.parquet")):
        s = pq.read_schema(f)
        if not any(s.equals(d) for d in distinct):
            distinct.append(s)
    return distinct


@pytest.mark.timeout(180)
def test_cli_parquet_schema_changes_in_a_group_and_across_runs(pg18: PgServer, unique_name: str,
                                                               tmp_path: Path) -> None:
    """Live Parquet output of a table whose columns are added, renamed, retyped and dropped,
    within one group and between runs: every file of its directory has the same schema,
    pq.read_table(dir) and polars get every row and column, the rename is one column; a
    run without a schema change rewrites no file."""
    import polars as pl

    pg = pg18
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int)")
    out = tmp_path / "out"
    cmd = [*DUMP, "--dsn", pg.dsn, "--slot", unique_name, "--create-slot",
           "--create-publication", t, "--format", "parquet", "--output", str(out),
           "--commit-interval", "5", "--idle-timeout", "1.5"]
    directory = out / f"public.{t}"

    def run(*sql: str) -> None:
        for statement in sql:
            pg.execute(statement)
        proc = dump(*cmd[len(DUMP):])
        assert proc.returncode == 0, proc.stderr
        assert len(file_schemas(directory)) == (1 if sql else 0), \
            [s.names for s in file_schemas(directory)]

    run()  # creates the slot and the publication
    run(f"INSERT INTO {t} VALUES (1, 'x1', 1)")
    # Already in the slot when the run starts: gathered into one group of 5 s.
    run(f"INSERT INTO {t} VALUES (2, 'x2', 2)",
        f"ALTER TABLE {t} ADD COLUMN extra text",
        f"INSERT INTO {t} VALUES (3, 'x3', 3, 'e3')",
        f"ALTER TABLE {t} RENAME COLUMN v TO v2",
        f"INSERT INTO {t} VALUES (4, 'x4', 4, 'e4')")
    run(f"ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
        f"INSERT INTO {t} VALUES (5, 'x5', 5000000000, 'e5')",
        f"ALTER TABLE {t} DROP COLUMN extra",
        f"INSERT INTO {t} VALUES (6, 'x6', 6)")
    before = {f.name: f.stat().st_mtime_ns for f in directory.glob("*.parquet")}
    run(f"INSERT INTO {t} VALUES (7, 'x7', 7)")
    after = {f.name: f.stat().st_mtime_ns for f in directory.glob("*.parquet")}
    assert len(after) == len(before) + 1 and all(after[n] == m for n, m in before.items())

    whole = pq.read_table(directory)
    rows = sorted(whole.to_pylist(), key=lambda r: r["id"])
    assert [c for c in whole.column_names if not c.startswith("_")] == ["id", "v2", "n", "extra"]
    assert [(r["id"], r["v2"], r["n"], r["extra"]) for r in rows] == [
        (1, "x1", 1, None), (2, "x2", 2, None), (3, "x3", 3, "e3"), (4, "x4", 4, "e4"),
        (5, "x5", 5000000000, "e5"), (6, "x6", 6, None), (7, "x7", 7, None)]
    frame = pl.scan_parquet(f"{directory}/*.parquet").collect()
    assert frame.columns == whole.column_names
    assert sorted(frame.select("id", "v2", "n", "extra").rows()) == \
        [(r["id"], r["v2"], r["n"], r["extra"]) for r in rows]


@pytest.mark.timeout(300)
def test_cli_killed_during_schema_changes_loses_nothing(pg18: PgServer, unique_name: str,
                                                        tmp_path: Path) -> None:
    """kill -9 at random points of a workload that adds, renames, retypes and drops columns
    (each schema change rewrites the table's files): every run's output has one schema per
    table directory, and the last reads back every change once, every value in its column.
    (A rename that falls between two runs, when the new run's first message for the table
    already has the new name, is two columns: the rows' values are then in one of them.)"""
    pg = pg18
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int)")
    slot = f"{unique_name}_s"
    out = tmp_path / "out"
    directory = out / f"public.{t}"
    cmd = [*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot", "--create-publication", t,
           "--format", "parquet", "--output", str(out), "--commit-interval", "0.2",
           "--status-interval", "1"]
    changes = [f"ALTER TABLE {t} ADD COLUMN extra text",
               f"ALTER TABLE {t} RENAME COLUMN v TO v2",
               f"ALTER TABLE {t} ALTER COLUMN n TYPE bigint",
               f"ALTER TABLE {t} DROP COLUMN extra",
               f"ALTER TABLE {t} ADD COLUMN later int"]
    iterations = 1500
    done = threading.Event()
    errors: list[BaseException] = []

    def workload() -> None:
        try:
            conn = pg.connect()
            value = "v"
            with conn.cursor() as cur:
                for i in range(iterations):
                    if i and i % (iterations // (len(changes) + 1)) == 0 and changes:
                        cur.execute(changes[0])
                        value = "v2" if "RENAME" in changes.pop(0) else value
                    cur.execute(f"INSERT INTO {t} (id, {value}, n) VALUES (%s, %s, %s)",
                                (i, f"x{i}", i))
                    time.sleep(0.002)
            conn.close()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            done.set()

    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    wait_slot_active(pg, slot, proc)
    worker = CheckedThread(target=workload)
    worker.start()
    seed = int(os.environ.get("PGOUTPUT_KILL_SEED", time.time_ns() % 2**32))
    print(f"kill points: PGOUTPUT_KILL_SEED={seed}")
    rng = random.Random(seed)
    for _ in range(4):
        time.sleep(rng.uniform(0.3, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if directory.exists():
            assert len(file_schemas(directory)) <= 2  # a rewrite may be half done ...
        wait_slot_inactive(pg, slot)
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        wait_slot_active(pg, slot, proc)
        assert len(file_schemas(directory)) <= 1  # ... and is finished (or dropped) on start
    worker.join(timeout=200)
    assert not worker.is_alive() and not errors, errors
    end = caught_up_lsn(pg)
    wait_until(lambda: alive(proc) and (slot_state(pg, slot)[0] or 0) >= end, 90,
               lambda: f"the consumer to catch up: slot at {slot_state(pg, slot)}, server at "
               f"{lsn_to_str(end)}", interval=0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""

    assert len(file_schemas(directory)) == 1 and not list(out.rglob(".*.tmp"))
    assert not list(out.rglob(".schema-rewrite.json"))
    whole = pq.read_table(directory)
    names = [c for c in whole.column_names if not c.startswith("_")]
    assert {"id", "v2", "n", "later"} <= set(names), names
    rows = whole.to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(iterations)), "a change lost or doubled"
    for r in rows:
        values = [r[c] for c in ("v", "v2") if c in r and r[c] is not None]
        assert values == [f"x{r['id']}"] and r["n"] == r["id"], r


# --------------------------------------------------------------------------- (c) restart


@pytest.mark.timeout(240)
def test_server_restart_mid_stream_is_survived(pg: PgServer, unique_name: str) -> None:
    server = PgServer(version=pg.version)  # restarted below: not the shared one
    try:
        t = f"{unique_name}_t"
        server.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
        server.execute(f"CREATE PUBLICATION p FOR TABLE {t}")
        server.create_slot("s")
        total = 600
        done = threading.Event()
        errors: list[BaseException] = []

        def workload() -> None:
            try:
                i = 0
                restarted = False
                deadline = time.monotonic() + 120
                while i < total and time.monotonic() < deadline:
                    if i == total // 2 and not restarted:
                        server.restart()
                        restarted = True
                    try:
                        server.execute(f"INSERT INTO {t} VALUES (%s, %s)", (i, i))
                        i += 1
                    except Exception:  # the server is restarting: try again
                        time.sleep(0.1)
                    time.sleep(0.003)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            finally:
                done.set()

        got: list[int] = []
        worker = CheckedThread(target=workload)
        with pgoutput_arrow.stream(server.dsn, slot="s", publication="p", stop_after=150,
                                   reconnect_initial_delay=0.2, reconnect_attempts=30) as s:

            def stop_when_done() -> None:
                done.wait(timeout=140)
                s.stop_at_lsn = caught_up_lsn(server)

            stopper = CheckedThread(target=stop_when_done)
            worker.start()
            stopper.start()
            try:
                for item in s:
                    if item.kind == "table":
                        got += item.batch.column("id").to_pylist()
                    s.ack(item.ack_lsn)
            except exc.ReplicationError as e:
                raise AssertionError(f"{e}; workload errors: {errors!r}; server log:\n"
                                     f"{server.log_tail(15)}") from e
            reconnects = s.stats().reconnects
            # It ended at the stop_at_lsn set while it ran, not at stop_after's 150 s.
            assert s.stats().elapsed_s < 140
        stopper.join(timeout=30)
        worker.join(timeout=60)
        assert not errors, errors
        assert reconnects >= 1
        assert sorted(got) == list(range(total)), "lost or duplicated across the restart"
    finally:
        server.stop()


# --------------------------------------------------------------------------- (d) auth, TLS


@pytest.mark.timeout(120)
def test_scram_password_auth_and_wrong_password(pg: PgServer, unique_name: str,
                                                tmp_path: Path) -> None:
    assert pg.scalar("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid "
                     "WHERE rolname = current_user")
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    pg.execute(f"INSERT INTO {t} VALUES (1)")
    end = caught_up_lsn(pg)
    # Password in the DSN (SCRAM over TCP, as pg_hba.conf says).
    with pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name,
                               stop_at_lsn=end, stop_after=30) as s:
        ids = [i for item in s if item.kind == "table"
               for i in item.batch.column("id").to_pylist()]
    assert ids == [1]
    # Password from a passfile (libpq's PGPASSFILE), through the CLI.
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg.port}:*:{pg.user}:{pg.password}\n")
    passfile.chmod(0o600)
    nopw = f"host=127.0.0.1 port={pg.port} user={pg.user} dbname={pg.dbname}"
    proc = dump("--dsn", nopw, "--slot", unique_name, "--publication", unique_name,
                "--format", "jsonl", "--idle-timeout", "1", env={"PGPASSFILE": str(passfile)})
    assert proc.returncode == 0, proc.stderr
    # Wrong password: the right exception, and exit 1 with one line from the CLI.
    bad = pg.dsn_for(password="not-the-password")
    with pytest.raises(exc.AuthenticationFailed, match="password authentication failed"):
        pgoutput_arrow.stream(bad, slot=unique_name, publication=unique_name).open()
    t0 = time.monotonic()
    proc = dump("--dsn", bad, "--slot", unique_name, "--publication", unique_name)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0], proc.stderr
    assert time.monotonic() - t0 < 30


def _make_certs(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for localhost / 127.0.0.1."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory,
                       timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        "/CN=pgoutput-arrow test CA", "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout",
        "server.key", "-out", "server.csr")
    (directory / "san.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
    return directory / "ca.crt", directory / "server.crt", directory / "server.key"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("version", [18, 15])
def test_tls_verify_full(version: int, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    ca, crt, key = _make_certs(certs)
    other_ca, _, _ = _make_certs(_mkdir(tmp_path / "other"))
    server = PgServer(version=version, start=False,
                      settings={"ssl": "on", "ssl_cert_file": "'server.crt'",
                                "ssl_key_file": "'server.key'"})
    try:
        for src in (crt, key):
            dst = server.data_dir / src.name
            shutil.copy(src, dst)
            dst.chmod(0o600)
            server._chown(dst)  # the server's own user must read them
        try:
            server.start()
        except PgServerError as e:
            if "SSL is not supported by this build" in str(e):
                pytest.skip(f"PostgreSQL {version} here is built without SSL support")
            raise
        server.execute("CREATE TABLE t (id int PRIMARY KEY)")
        server.execute("CREATE PUBLICATION p FOR TABLE t")
        server.create_slot("s")
        server.execute("INSERT INTO t VALUES (42)")
        end = caught_up_lsn(server)
        dsn = (f"host=localhost port={server.port} user={server.user} dbname={server.dbname} "
               f"password={server.password} sslmode=verify-full sslrootcert={ca}")
        with pgoutput_arrow.stream(dsn, slot="s", publication="p", stop_at_lsn=end,
                                   stop_after=30) as s:
            ssl_rows = server.query("SELECT l.ssl, l.version FROM pg_stat_ssl l JOIN "
                                    "pg_stat_replication r USING (pid)")
            ids = [i for item in s if item.kind == "table"
                   for i in item.batch.column("id").to_pylist()]
        assert ids == [42]
        assert ssl_rows and ssl_rows[0][0] is True, ssl_rows
        # A certificate from a CA we do not trust is refused, with a clear error.
        wrong = dsn.replace(str(ca), str(other_ca))
        with pytest.raises(exc.ConnectionFailed, match="certificate verify failed"):
            pgoutput_arrow.stream(wrong, slot="s", publication="p").open()
    finally:
        server.stop()


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


# --------------------------------------------------------------------------- (e) idle slot


@pytest.mark.timeout(120)
def test_idle_slot_advances_while_only_unpublished_tables_change(pg: PgServer,
                                                                 unique_name: str) -> None:
    published, other = f"{unique_name}_pub", f"{unique_name}_other"
    pg.execute(f"CREATE TABLE {published} (id int PRIMARY KEY)")
    pg.execute(f"CREATE TABLE {other} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {published}")
    pg.create_slot(unique_name)
    start, _ = slot_state(pg, unique_name)
    items: list[Any] = []
    s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name,
                              status_interval=0.5, stop_after=60)
    runner = CheckedThread(target=lambda: items.extend(s))
    s.open()
    runner.start()
    try:
        for i in range(20):
            pg.execute(f"INSERT INTO {other} SELECT g, repeat('x', 100) "
                       f"FROM generate_series({i * 100}, {i * 100 + 99}) g")
        target = caught_up_lsn(pg)
        wait_until(lambda: (slot_state(pg, unique_name)[0] or 0) >= target, 30,
                   lambda: f"confirmed_flush_lsn to pass {lsn_to_str(target)}: it is at "
                   f"{lsn_to_str(slot_state(pg, unique_name)[0] or 0)}", interval=0.1)
    finally:
        s.stop()
        runner.join(timeout=30)
        s.close()
    assert start is not None and (slot_state(pg, unique_name)[0] or 0) > start
    assert [i for i in items if i.kind == "table"] == []
    # The lag counts from the confirmed position, which passed the target: what is left is
    # only WAL written after it.
    st = s.stats()
    assert st.confirmed_lsn >= target
    assert s.lag_bytes == st.lag_bytes == max(0, st.server_wal_end - st.confirmed_lsn)
    assert s.lag_bytes <= max(0, st.server_wal_end - target)


@pytest.mark.timeout(120)
def test_lag_bytes_until_acknowledged(pg: PgServer, unique_name: str) -> None:
    """lag_bytes is the WAL the server holds for the consumer: above zero while a workload is
    received but not acknowledged, down to what follows the confirmed position once it is."""
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    start = pg.create_slot(unique_name)
    for lo in range(0, 1000, 200):
        pg.execute(f"INSERT INTO {t} SELECT g, repeat('x', 200) "
                   f"FROM generate_series({lo}, {lo + 199}) g")
    target = caught_up_lsn(pg)
    s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name,
                              status_interval=0.2, stop_after=60)
    with s:
        received: list[Any] = []
        rows = 0
        for item in s:  # every row of the workload, none acknowledged
            received.append(item)
            if item.kind == "table":
                rows += item.num_rows
            if rows == 1000:
                break
        ranges = [r for item in received if item.kind == "table"
                  for r in [item.commit_lsn_range()] if r is not None]
        first_commit = min(lo for lo, _ in ranges)
        last_commit = max(hi for _, hi in ranges)
        before = s.stats()
        assert before.acked_lsn < first_commit
        assert before.confirmed_lsn < first_commit
        assert (slot_state(pg, unique_name)[0] or 0) < first_commit
        assert before.server_wal_end > first_commit
        assert before.lag_bytes == before.server_wal_end - before.confirmed_lsn
        assert before.lag_bytes > before.server_wal_end - first_commit > 0
        s.ack(received[-1].ack_lsn)
        s.stop_at_lsn = target  # read on until the server is known to be past the workload
        for item in s:
            s.ack(item.ack_lsn)
    after = s.stats()
    wait_slot_inactive(pg, unique_name)
    confirmed = slot_state(pg, unique_name)[0] or 0
    # Past the last commit: the server will not send the workload again.
    assert confirmed > last_commit >= first_commit > start
    assert after.confirmed_lsn >= confirmed
    assert after.lag_bytes == max(0, after.server_wal_end - after.confirmed_lsn)
    assert after.lag_bytes < after.server_wal_end - last_commit
    assert after.lag_bytes < before.lag_bytes


def test_a_busy_stream_flushes_once_per_linger(pg: PgServer, unique_name: str) -> None:
    """A stream that keeps receiving hands out one decoder flush per ``flush_linger`` at most,
    not one each time it catches up with the server (a backlog of 200 transactions, read in
    many short reads): its batches stay under one per linger of the drain's time, plus the
    ones ``batch_size`` cuts, and every row comes out once."""
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    for lo in range(0, 200_000, 1000):
        pg.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series({lo}, {lo + 999}) g")
    target = caught_up_lsn(pg)
    linger, batch_size = 0.1, 65536
    started = time.monotonic()
    batches, ids = 0, []
    with pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, flush_linger=linger,
                               batch_size=batch_size, stop_at_lsn=target, stop_after=120) as s:
        for item in s:
            if item.kind == "table":
                batches += 1
                ids += item.batch.column("id").to_pylist()
            s.ack(item.ack_lsn)
    drained = time.monotonic() - started
    assert sorted(ids) == list(range(200_000))
    assert batches <= drained / linger + 200_000 / batch_size + 3, (batches, drained)


# --------------------------------------------------------------------------- (f) errors


@pytest.mark.timeout(60)
def test_unreachable_host_fails_fast() -> None:
    port = free_closed_port()
    t0 = time.monotonic()
    with pytest.raises(exc.ConnectionFailed, match="Connection refused"):
        pgoutput_arrow.stream(f"host=127.0.0.1 port={port} user=x password=y dbname=z",
                              slot="s", publication="p").open()
    assert time.monotonic() - t0 < 10
    proc = dump("--dsn", f"host=127.0.0.1 port={port} user=x", "--slot", "s",
                "--publication", "p")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.timeout(60)
def test_server_that_never_answers_times_out() -> None:
    """A listening socket that never speaks: connect_timeout ends the wait (no hang)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(exc.ConnectionFailed, match="timed out|timeout"):
            pgoutput_arrow.stream(f"host=127.0.0.1 port={port} user=x password=y",
                                  slot="s", publication="p", connect_timeout=2).open()
        assert time.monotonic() - t0 < 15


@pytest.mark.timeout(60)
def test_missing_slot_and_missing_publication(pg: PgServer, unique_name: str) -> None:
    # An empty publication: one FOR ALL TABLES would publish the keyless tables of tests
    # running beside this one, and PostgreSQL would refuse their UPDATEs.
    pg.execute(f"CREATE PUBLICATION {unique_name}")
    with pytest.raises(exc.SlotNotFound, match=f'"{unique_name}_nope" does not exist'):
        pgoutput_arrow.stream(pg.dsn, slot=f"{unique_name}_nope",
                              publication=unique_name).open()
    pg.create_slot(unique_name)
    with pytest.raises(exc.PublicationNotFound, match="nopub_x does not exist"):
        pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication="nopub_x").open()
    proc = dump("--dsn", pg.dsn, "--slot", f"{unique_name}_nope", "--publication", unique_name)
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.timeout(60)
def test_misspelt_or_wrong_option_fails_before_the_slot_is_created(pg: PgServer, unique_name: str) -> None:
    """An option neither stream() nor the decoder knows, or a decoder option of a wrong
    value, is refused when stream() is called: nothing is created on the server."""
    pg.execute(f"CREATE PUBLICATION {unique_name}")
    with pytest.raises(TypeError, match="unknown option 'bnary' \\(did you mean 'binary'\\?\\)"):
        pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, create_slot=True, bnary=True)
    with pytest.raises(TypeError, match="'stop_afterr' \\(did you mean 'stop_after'\\?\\)"):
        pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, create_slot=True, stop_afterr=1)
    with pytest.raises(ValueError, match="special_values must be"):
        pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, create_slot=True,
                              special_values="drop")
    assert not pg.query(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{unique_name}'")


@pytest.mark.timeout(60)
def test_slot_in_use_by_another_connection(pg: PgServer, unique_name: str) -> None:
    pg.execute(f"CREATE PUBLICATION {unique_name}")
    pg.create_slot(unique_name)
    with pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name) as first:
        assert slot_state(pg, unique_name)[1] is not None
        with pytest.raises(exc.SlotInUse, match="active for PID"):
            pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name).open()
        first.stop()
    wait_slot_inactive(pg, unique_name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [18, 15])
def test_wal_level_replica_is_refused(version: int) -> None:
    with PgServer(version=version, settings={"wal_level": "replica"}) as server:
        with pytest.raises(exc.WalLevelNotLogical, match="wal_level"):
            pgoutput_arrow.stream(server.dsn, slot="s", create_slot=True,
                                  create_publication="ALL").open()
        proc = dump("--dsn", server.dsn, "--slot", "s", "--create-slot", "--all-tables")
        assert proc.returncode == 1 and "wal_level" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- CLI and API


@pytest.mark.timeout(120)
def test_cli_jsonl_and_pretty_live_with_created_slot_and_publication(
        pg: PgServer, unique_name: str) -> None:
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    slot = f"{unique_name}_s"
    # Create slot and publication, stop at once (no changes yet).
    proc = dump("--dsn", pg.dsn, "--slot", slot, "--create-slot", "--create-publication",
                f"public.{t}", "--format", "jsonl", "--idle-timeout", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    pg.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two'); UPDATE {t} SET v = 'uno' "
               f"WHERE id = 1; DELETE FROM {t} WHERE id = 2")
    proc = dump("--dsn", pg.dsn, "--slot", slot, "--publication", slot, "--format", "jsonl",
                "--idle-timeout", "1")
    assert proc.returncode == 0, proc.stderr
    objs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [o["op"] for o in objs] == ["insert", "insert", "update", "delete"]
    assert objs[2]["new"] == {"id": 1, "v": "uno"}
    # Acknowledged after writing: a second run sees nothing again.
    proc = dump("--dsn", pg.dsn, "--slot", slot, "--publication", slot, "--format", "pretty",
                "--idle-timeout", "1")
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout
    pg.execute(f"INSERT INTO {t} VALUES (3, 'three')")
    proc = dump("--dsn", pg.dsn, "--slot", slot, "--publication", slot, "--format", "pretty",
                "--idle-timeout", "1")
    assert proc.returncode == 0, proc.stderr
    assert "BEGIN" in proc.stdout and "three" in proc.stdout and "COMMIT" in proc.stdout


@pytest.mark.timeout(120)
def test_cli_sigterm_stops_cleanly_after_acknowledging(pg: PgServer, unique_name: str,
                                                       tmp_path: Path) -> None:
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    slot = f"{unique_name}_s"
    out = tmp_path / "out"
    proc = subprocess.Popen([*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot",
                             "--create-publication", t, "--format", "arrow", "--output",
                             str(out), "--commit-interval", "0.1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_slot_active(pg, slot, proc)
        pg.execute(f"INSERT INTO {t} SELECT generate_series(1, 100)")
        end = caught_up_lsn(pg)
        wait_until(lambda: alive(proc) and list(out.glob(f"public.{t}/*.arrow")), 30,
                   "the insert's file")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    confirmed, active = slot_state(pg, slot)
    checkpoint = parse_lsn(json.loads((out / "_checkpoint.json").read_text())["lsn"])
    assert active is None
    assert confirmed is not None and checkpoint <= confirmed and confirmed >= end - 1024 * 1024
    ids = [i for f in out.glob(f"public.{t}/*.arrow")
           for i in ipc.open_file(f).read_all().column("id").to_pylist()]
    assert sorted(ids) == list(range(1, 101))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_cli_ctrl_c_stops_cleanly_after_acknowledging(pg18: PgServer, unique_name: str,
                                                      tmp_path: Path, fmt: str) -> None:
    """SIGINT (Ctrl-C) ends the run like SIGTERM: exit 0, and the slot confirmed up to what
    was written, so that nothing written is streamed again."""
    pg = pg18
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    slot = f"{unique_name}_s"
    out = tmp_path / "out"
    jsonl = tmp_path / "changes.jsonl"
    cmd = [*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot", "--create-publication", t,
           "--format", fmt, "--commit-interval", "0.1"]
    with jsonl.open("w") as stdout:
        proc = subprocess.Popen([*cmd, "--output", str(out)] if fmt == "parquet" else cmd,
                                stdout=stdout, stderr=subprocess.PIPE, text=True)

    def written() -> list[dict[str, Any]]:
        if fmt == "jsonl":  # whole lines only: the last one may be half written
            return [{"id": o["new"]["id"], "commit_lsn": parse_lsn(o["commit_lsn"])}
                    for o in map(json.loads, jsonl.read_text().split("\n")[:-1])]
        return [{"id": r["id"], "commit_lsn": r["_commit_lsn"]}
                for f in sorted(out.glob(f"public.{t}/*.parquet"))
                for r in pq.read_table(f).to_pylist()]

    try:
        wait_slot_active(pg, slot, proc)
        for lo in (1, 51):  # two transactions
            pg.execute(f"INSERT INTO {t} SELECT generate_series({lo}, {lo + 49})")
        wait_until(lambda: alive(proc) and len(written()) >= 100, 30,
                   lambda: f"100 rows written: {written()}")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        assert proc.stderr is not None and "interrupted" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = written()
    assert sorted(r["id"] for r in rows) == list(range(1, 101))
    wait_slot_inactive(pg, slot)
    confirmed, _ = slot_state(pg, slot)
    # A transaction whose commit record starts before the confirmed position is not sent
    # again: the confirmed position is past the last commit written.
    last_commit = max(r["commit_lsn"] for r in rows)
    assert confirmed is not None and confirmed > last_commit
    if fmt == "parquet":
        checkpoint = parse_lsn(json.loads((out / "_checkpoint.json").read_text())["lsn"])
        assert last_commit < checkpoint <= confirmed
    else:  # nothing the file holds comes again
        proc2 = dump("--dsn", pg.dsn, "--slot", slot, "--publication", slot, "--format",
                     "jsonl", "--idle-timeout", "1")
        assert proc2.returncode == 0 and proc2.stdout == "", (proc2.stdout, proc2.stderr)


@pytest.mark.timeout(120)
def test_cli_jsonl_to_a_file_is_fsynced_before_acknowledging(
        pg18: PgServer, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stdout a regular file, each group is written, flushed and fsynced before its end
    is acknowledged: the flushed position the server is told is on disk."""
    from pgoutput_arrow.cli import build_parser, run

    pg = pg18
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    for i in range(3):
        pg.execute(f"INSERT INTO {t} VALUES ({i})")
    path = tmp_path / "changes.jsonl"
    events: list[tuple[str, int]] = []
    real_fsync, real_ack = os.fsync, LiveStream.ack

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", os.fstat(fd).st_size))

    def ack(self: LiveStream, lsn: int | str | None = None) -> None:
        events.append(("ack", path.stat().st_size))
        real_ack(self, lsn)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(LiveStream, "ack", ack)
    args = build_parser().parse_args(["--dsn", pg.dsn, "--slot", unique_name, "--publication",
                                      unique_name, "--format", "jsonl", "--idle-timeout", "1"])
    with path.open("w") as out:
        assert run(args, out) == 0
    assert len(path.read_text().splitlines()) == 3
    acks = [i for i, (what, _) in enumerate(events) if what == "ack"]
    assert acks, events
    previous = -1
    for i in acks:
        # Since the previous acknowledgement, the file was fsynced with all it holds now.
        synced = [size for what, size in events[previous + 1:i] if what == "fsync"]
        assert synced and synced[-1] == events[i][1], events
        previous = i


@pytest.mark.timeout(60)
def test_temporary_slot_and_stats(pg: PgServer, unique_name: str) -> None:
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    with pgoutput_arrow.stream(pg.dsn, slot=unique_name, temporary_slot=True,
                               create_publication=[t], stop_after=20) as s:
        assert slot_state(pg, unique_name)[1] is not None
        pg.execute(f"INSERT INTO {t} SELECT generate_series(1, 10)")
        end = caught_up_lsn(pg)
        s.stop_at_lsn = end
        rows = sum(item.num_rows for item in s if item.kind == "table")
        st = s.stats()
    assert rows == 10
    assert st.messages >= 12 and st.bytes > 0 and st.server_wal_end >= end
    wait_until(lambda: slot_state(pg, unique_name) == (None, None), 20,  # gone with its connection
               lambda: f"the temporary slot to go: {slot_state(pg, unique_name)}")


@pytest.mark.timeout(120)
def test_two_phase_prepared_transaction_survives_a_consumer_restart(
        pg: PgServer, unique_name: str) -> None:
    """The slot must not be confirmed past an unresolved PREPARE: the server would not send
    its changes again, and a consumer restarted before COMMIT PREPARED would lose them."""
    t, other = f"{unique_name}_t", f"{unique_name}_o"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY); CREATE TABLE {other} (id int)")
    opts: dict[str, Any] = dict(slot=unique_name, two_phase=True, create_publication=[t],
                                status_interval=0.3, stop_after=60)
    items: list[Any] = []

    def consume(s: LiveStream) -> None:
        for item in s:
            if item.kind == "table":
                items.extend(item.batch.column("id").to_pylist())
            s.ack(item.ack_lsn)

    s = pgoutput_arrow.stream(pg.dsn, create_slot=True, **opts)
    s.open()
    runner = CheckedThread(target=consume, args=(s,))
    runner.start()
    pg.execute(f"BEGIN; INSERT INTO {t} VALUES (1); PREPARE TRANSACTION '{unique_name}'")
    after_prepare = pg.current_wal_lsn()
    for i in range(10):  # only unpublished changes: keepalives keep coming
        pg.execute(f"INSERT INTO {other} VALUES ({i})")
        time.sleep(0.1)
    caught = caught_up_lsn(pg)
    # Until the walsender has had a status update from the consumer saying it received
    # everything (write position): the flush position in that same update is what the
    # slot is confirmed to.
    wait_until(lambda: reported_write_lsn(pg, unique_name) >= caught, 30,
               lambda: f"the consumer to report {lsn_to_str(caught)} received: it reported "
               f"{lsn_to_str(reported_write_lsn(pg, unique_name))}")
    confirmed = slot_state(pg, unique_name)[0] or 0
    assert confirmed < after_prepare, "confirmed past an unresolved prepared transaction"
    s.stop()
    runner.join(timeout=30)
    s.close()
    wait_slot_inactive(pg, unique_name)
    assert items == []  # prepared, not committed: nothing comes out yet
    # A new consumer (as after a crash) gets the prepared changes again, then the commit.
    s = pgoutput_arrow.stream(pg.dsn, **opts)
    s.open()
    runner = CheckedThread(target=consume, args=(s,))
    runner.start()
    try:
        pg.execute(f"COMMIT PREPARED '{unique_name}'")
        end = caught_up_lsn(pg)
        wait_until(lambda: items == [1] and (slot_state(pg, unique_name)[0] or 0) >= end, 30,
                   lambda: f"the commit and the slot past it: {items}, "
                   f"{slot_state(pg, unique_name)}", interval=0.1)
    finally:
        s.stop()
        runner.join(timeout=30)
        s.close()
    assert items == [1]


@pytest.mark.timeout(60)
def test_publication_created_by_another_client_meanwhile(pg: PgServer, unique_name: str) -> None:
    """Two streams started together with create_publication (make demo's two consumers): the
    second CREATE PUBLICATION waits on the first's uncommitted one and then fails on the
    catalog's unique index; the stream takes the publication the other one made."""
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    pg.create_slot(unique_name)
    other = pg.connect()
    try:
        other.autocommit = False
        with other.cursor() as cur:
            cur.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")  # not committed yet
        opened: list[BaseException | None] = []

        def start() -> None:
            try:
                s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name,
                                          create_publication=[t])
                s.open()
                s.close()
                opened.append(None)
            except BaseException as e:  # noqa: BLE001  (reported below)
                opened.append(e)

        thread = CheckedThread(target=start)
        thread.start()
        # The stream's CREATE PUBLICATION is waiting for this transaction's.
        deadline = time.monotonic() + 20
        while not pg.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND query LIKE 'CREATE PUBLICATION%%'"):
            assert time.monotonic() < deadline, "the stream's CREATE PUBLICATION never waited"
            time.sleep(0.05)
        other.commit()
        thread.join(30)
        assert opened == [None], opened
    finally:
        other.close()
    wait_slot_inactive(pg, unique_name)


def test_close_while_the_server_sends_keeps_the_last_acknowledgement(pg18: PgServer, unique_name: str) -> None:
    """A consumer that acknowledges two groups and stops while the walsender is still busy
    sending: the slot must be confirmed up to the acknowledgement, or a restart gets those
    changes again. Closing the socket lost the last status update (the walsender died on
    the broken pipe without reading it; found by tests/torture's live restarts); the
    stream now ends with CopyDone, as pg_recvlogical does."""
    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_s"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg18.execute(f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    pg18.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    for i in range(200):  # a few MB of WAL: more than the socket buffers hold
        pg18.execute(f"INSERT INTO {t} SELECT g, repeat('x', 100) FROM generate_series({i * 1000}, {i * 1000 + 999}) g")
    acked = 0
    with pgoutput_arrow.stream(pg18.dsn, slot=slot, publication=pub, flush_messages=300, stop_after=60) as s:
        for n, (_, ack) in enumerate(s.groups()):
            if n == 2:
                break
            s.ack(ack)
            acked = ack
    assert acked
    confirmed = pg18.query("SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::int8 FROM pg_replication_slots "
                           "WHERE slot_name = %s", (slot,))[0][0]
    assert confirmed >= acked, (lsn_to_str(confirmed), lsn_to_str(acked))
    pg18.drop_slot(slot)


@pytest.mark.timeout(60)
def test_an_existing_publication_that_publishes_less_than_asked_is_named(pg: PgServer, unique_name: str) -> None:
    """``create_publication`` leaves a publication that exists as it is: when it does not
    publish what was asked (a table, or every table), a warning says which changes the stream
    will not have, once (not again on a reconnection); pgoutput-dump prints it as one line."""
    a, b = f"{unique_name}_a", f"{unique_name}_b"
    pg.execute(f"CREATE TABLE {a} (id int PRIMARY KEY); CREATE TABLE {b} (id int PRIMARY KEY); "
               f"CREATE PUBLICATION {unique_name} FOR TABLE {a}")
    for asked, expected in ([a, b], f"does not publish public.{b}"), ("ALL", "is not FOR ALL TABLES"), ([a], None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, temporary_slot=True,
                                      create_publication=asked)
            s.open()
            s.close()
        said = [str(w.message) for w in caught if f"publication {unique_name} exists" in str(w.message)]
        assert said == ([] if expected is None else [said[0]]) and all(expected in m for m in said), said
    proc = subprocess.run([dump_command(), "--dsn", pg.dsn, "--slot", unique_name, "--create-slot", "--temporary",
                           "--publication", unique_name, "--create-publication", b, "--stop-after", "0.5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"pgoutput-dump: warning: publication {unique_name} exists and does not publish public.{b}" \
        in proc.stderr, proc.stderr
