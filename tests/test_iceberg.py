"""The Iceberg sink (``--format iceberg``, ``pgoutput_arrow.sinks.IcebergSink``) on real
PostgreSQL 18 and 15: replicas equal PostgreSQL's SELECT value by value (read with pyiceberg
and polars), change logs hold every change once, kill -9 (also between an Iceberg commit and
the slot's acknowledgement) neither loses nor repeats a change, and a renamed column stays
one column: its older rows keep their values under the new name.

The workload is tests/delta_workload.py's, with its renames; the long kill -9 soak is
``tests/delta_kill.py --format iceberg``.
"""

from __future__ import annotations

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

# The Iceberg suite runs or fails: a missing pyiceberg (with its SQLite catalog) or polars
# must not turn the suite into skips that pass.
import polars  # noqa: F401
import pyiceberg  # noqa: F401

import pgoutput_arrow
from delta_workload import (check_change_log, check_replicas, drain, dump_lake, iceberg_table,
                            read_lake, setup, short_rows, workload_round, workload_tables)
from dump_workload import dump_command
from pg_harness import PgServer
from pgoutput_arrow.sinks import IcebergSink, iceberg_catalog

ROUNDS = 9

#: The snapshot summary property that says which source commit an Iceberg snapshot holds.
COMMIT_LSN = "pgoutput.commit-lsn."


def _write_capture(rows: list[tuple[Any, Any, Any]], path: Path,
                   max_chunksize: int | None = None) -> None:
    """Slot contents as an Arrow IPC capture, in batches of ``max_chunksize`` messages."""
    table = pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                      "data": [bytes(r[2]) for r in rows]})
    with pa.ipc.new_file(path, table.schema) as w:
        for b in table.to_batches(max_chunksize=max_chunksize):
            w.write_batch(b)


def _check_commit_lsns(out: Path, name: str, app_id: str, change_log: bool = False) -> int:
    """Every snapshot of the table says which commit it holds, never going back, and the
    newest holds the newest row's commit. Returns the newest."""
    table = iceberg_table(out, name, change_log)
    summaries = [s.summary for s in table.snapshots()]
    assert summaries and all(COMMIT_LSN + app_id in s for s in summaries), \
        (name, change_log, summaries)
    lsns = [int(s[COMMIT_LSN + app_id]) for s in summaries]
    assert lsns == sorted(lsns), (name, change_log, lsns)
    rows = table.scan(selected_fields=("_commit_lsn",)).to_arrow().column("_commit_lsn")
    assert lsns[-1] >= max(rows.to_pylist(), default=0), (name, change_log, lsns[-1])
    return lsns[-1]


def test_capture_into_iceberg_equals_select_and_a_rerun_applies_nothing_twice(
        pg: PgServer, unique_name: str, tmp_path: Path) -> None:
    p, slot = unique_name, unique_name
    setup(pg, p, slot)
    rng = random.Random(1)
    for r in range(ROUNDS):
        workload_round(pg, p, r, rng, ROUNDS, rename=True)
    rows = pg.get_binary_changes(slot, {"proto_version": "1", "publication_names": p})
    # 300-message batches, each decoded and flushed apart: the rows of a key arrive over
    # many Iceberg commits (unchanged TOAST values are then taken from the Iceberg table, also
    # after their column was renamed).
    capture = tmp_path / "capture.arrow"
    _write_capture(rows, capture, max_chunksize=300)
    out = tmp_path / "lake"
    snapshots: dict[tuple[str, bool], int] = {}
    for run in range(2):  # the second run finds everything applied (each table's commit LSN)
        proc = subprocess.run([dump_command(), str(capture), "--format", "iceberg", "--output",
                               str(out), "--change-log", "--rows-per-file", "100"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        check_replicas(pg, p, out, "iceberg")
        check_change_log(pg, p, slot, out, "iceberg")
        for t in workload_tables(p):
            for change_log in (False, True):
                _check_commit_lsns(out, f"public.{t}", "capture", change_log)
                n = len(iceberg_table(out, f"public.{t}", change_log).snapshots())
                if run:  # nothing to apply, nothing committed
                    assert n == snapshots[(t, change_log)], (t, change_log)
                snapshots[(t, change_log)] = n


def _kill(proc: subprocess.Popen[Any]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_live_into_iceberg_survives_kill_9(pg: PgServer, unique_name: str,
                                           tmp_path: Path) -> None:
    """The live CLI killed twice while the workload (renames included) runs, at random points
    of its loop."""
    p, slot = unique_name, unique_name
    setup(pg, p, slot)
    out = tmp_path / "lake"
    rng = random.Random(7)
    from test_live import wait_slot_active, wait_slot_inactive

    def start() -> subprocess.Popen[str]:
        # Streaming before the workload goes on (a loaded machine starts Python slowly).
        proc = subprocess.Popen(dump_lake(pg, p, slot, out, fmt="iceberg"),
                                stderr=subprocess.PIPE, text=True)
        wait_slot_active(pg, slot, proc)
        return proc

    proc = start()
    kills = 0
    try:
        for r in range(ROUNDS):
            workload_round(pg, p, r, rng, ROUNDS, rename=True)
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
    assert iceberg_table(out, f"public.{p}_toast").snapshots()
    drain(pg, p, slot, out, fmt="iceberg")
    check_replicas(pg, p, out, "iceberg")
    check_change_log(pg, p, slot, out, "iceberg")


_COMMIT_THEN_DIE = textwrap.dedent("""
    import os, signal, sys
    import pgoutput_arrow
    from pgoutput_arrow.sinks import IcebergSink
    dsn, slot, pub, out = sys.argv[1:5]
    with pgoutput_arrow.stream(dsn, slot=slot, publication=pub, idle_timeout=5) as changes, \\
            IcebergSink(out, app_id=slot, change_log=True) as sink:
        for batches, ack_lsn in changes.groups(linger=0.2):
            sink.write(batches)
            sink.commit()
            if sink.commits:
                print(sink.commits, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)  # committed, never acknowledged
            changes.ack(ack_lsn)
""")


def test_kill_between_iceberg_commit_and_ack_applies_nothing_twice(
        pg18: PgServer, unique_name: str, tmp_path: Path) -> None:
    """A stream() loop with IcebergSink dies right after its first Iceberg commits: the slot
    sends those transactions again, and the snapshots' commit LSNs make the sink skip them."""
    pg, p, slot = pg18, unique_name, unique_name
    setup(pg, p, slot)
    rng = random.Random(3)
    for r in range(4):
        workload_round(pg, p, r, rng, 6, rename=True)
    out = tmp_path / "lake"
    script = tmp_path / "commit_then_die.py"
    script.write_text(_COMMIT_THEN_DIE)
    proc = subprocess.run([sys.executable, str(script), pg.dsn, slot, p, str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert int(proc.stdout.split()[0]) > 0
    for r in range(4, 6):
        workload_round(pg, p, r, rng, 6, rename=True)
    # The CLI's app id is the slot's name, as the script's.
    drain(pg, p, slot, out, fmt="iceberg")
    check_replicas(pg, p, out, "iceberg")
    check_change_log(pg, p, slot, out, "iceberg")


def test_live_snapshot_then_changes_into_iceberg(pg: PgServer, unique_name: str,
                                                 tmp_path: Path) -> None:
    """pgoutput-dump --create-slot --snapshot --format iceberg: the rows that existed before
    the slot land in the replica as inserts (``_op = "snapshot"`` in the change log), then the
    changes (updates, a key change, deletes, an insert; a TOAST value left unchanged): the
    replica equals the table, the change log holds each snapshot row once."""
    from test_live import DUMP, caught_up_lsn, slot_state, wait_until

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, big text); INSERT INTO {t} SELECT g, "
               f"'v' || g, CASE WHEN g % 10 = 0 THEN repeat('x', 4000) END FROM generate_series(1, 2000) g; "
               f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    out = tmp_path / "lake"
    proc = subprocess.Popen([*DUMP, "--dsn", pg.dsn, "--slot", slot, "--create-slot", "--snapshot",
                             "--publication", pub, "--format", "iceberg", "--output", str(out),
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
    want = [tuple(r) for r in pg.query(f"SELECT id, v, big FROM {t} ORDER BY id")]
    for reader, rows in read_lake(out, f"public.{t}", "iceberg", ["id", "v", "big"]).items():
        assert sorted(tuple(r.values()) for r in rows) == want, reader
    for reader, log in read_lake(out, f"public.{t}", "iceberg", ["id", "_op"],
                                 change_log=True).items():
        snapshot_ids = sorted(r["id"] for r in log if r["_op"] == "snapshot")
        assert snapshot_ids == list(range(1, 2001)), reader


def test_a_table_without_a_key_is_appended(pg: PgServer, unique_name: str, tmp_path: Path) -> None:
    """pgbench_history's shape (no key, inserts only; identical rows among them) and a table
    of REPLICA IDENTITY NOTHING published for inserts only: the replica is their rows,
    appended, said once each on stderr."""
    t, t2 = f"{unique_name}_log", f"{unique_name}_nothing"
    pg.execute(f"CREATE TABLE {t} (msg text, at timestamp); "
               f"CREATE TABLE {t2} (id int PRIMARY KEY, msg text); "
               f"ALTER TABLE {t2} REPLICA IDENTITY NOTHING")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.execute(f"CREATE PUBLICATION {unique_name}_ins FOR TABLE {t2} WITH (publish = 'insert')")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": f"{unique_name},{unique_name}_ins"}
    pg.execute(f"INSERT INTO {t} VALUES ('a', '2026-01-01'), ('b', NULL), ('b', NULL); "
               f"INSERT INTO {t2} VALUES (1, 'x')")
    first = pg.get_binary_changes(unique_name, options)
    pg.execute(f"UPDATE {t2} SET msg = 'y'")  # published for inserts only: not sent
    pg.execute(f"INSERT INTO {t} VALUES ('c', '2026-01-02'), ('b', NULL)")
    second = pg.get_binary_changes(unique_name, options)
    out = tmp_path / "lake"
    said = []
    for part, rows in enumerate((first, second)):  # two runs: the second appends to the first
        capture = tmp_path / f"capture{part}.arrow"
        _write_capture(rows, capture)
        proc = subprocess.run([dump_command(), str(capture), "--format", "iceberg", "--output",
                               str(out)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if "no replica identity key" in line]
        assert all("appended" in line for line in lines), proc.stderr
        said.append(len(lines))
    assert said == [2, 1]  # once per table and run: the second run saw only t
    cols = ["msg", "at"]
    want = sorted(pg.query(f"SELECT {', '.join(cols)} FROM {t}"), key=repr)
    for reader, got in read_lake(out, f"public.{t}", "iceberg", cols).items():
        assert sorted((tuple(r[c] for c in cols) for r in got), key=repr) == want, reader
    # PostgreSQL's update of t2 was not sent: the replica has the inserted row.
    for reader, got in read_lake(out, f"public.{t2}", "iceberg", ["id", "msg"]).items():
        assert got == [{"id": 1, "msg": "x"}], reader


def _sink_parts(out: Path, parts: list[list[tuple[int, int, bytes]]], **options: Any) -> int:
    """Decodes ``parts`` (slot contents) in order into an IcebergSink, one commit each;
    returns the sink's commits."""
    decoder = pgoutput_arrow.Decoder()
    with IcebergSink(out, **options) as sink:
        for part in parts:
            for lsn, _, data in part:
                decoder.feed(bytes(data), lsn)
            decoder.flush()
            sink.write(decoder.take())
            sink.commit()
        return int(sink.commits)


def test_a_renamed_column_stays_a_renamed_column(pg18: PgServer, unique_name: str,
                                                 tmp_path: Path) -> None:
    """v renamed to w and a TOAST column big to body, in commits after the rows were written,
    then a new column named v: each renamed Iceberg column keeps its field id and its older
    rows' values under the new name (a TOAST value left unchanged by a later update
    included), the new v is a new field, null in the older rows, in the replica and in the
    change log. A rerun with the same app id applies nothing twice."""
    pg, t = pg18, f"{unique_name}_r"
    name = f"public.{t}"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, big text, n int)")
    pg.execute(f"ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    big = {i: f"{i}" * 3000 for i in (1, 2, 3, 4)}
    for i, value in big.items():
        pg.execute(f"INSERT INTO {t} VALUES (%s, %s, %s, 0)", (i, f"v{i}", value))
    first = pg.get_binary_changes(unique_name, options)
    pg.execute(f"ALTER TABLE {t} RENAME COLUMN v TO w")
    pg.execute(f"ALTER TABLE {t} RENAME COLUMN big TO body")
    pg.execute(f"UPDATE {t} SET n = 1 WHERE id IN (1, 2)")  # body unchanged: not sent
    pg.execute(f"UPDATE {t} SET w = 'w3' WHERE id = 3")
    pg.execute(f"INSERT INTO {t} VALUES (5, 'w5', 'five', 5)")
    second = pg.get_binary_changes(unique_name, options)
    pg.execute(f"ALTER TABLE {t} ADD COLUMN v text")
    pg.execute(f"INSERT INTO {t} VALUES (6, 'w6', 'six', 6, 'new v')")
    pg.execute(f"UPDATE {t} SET n = 2 WHERE id = 1")
    third = pg.get_binary_changes(unique_name, options)

    out = tmp_path / "lake"
    assert _sink_parts(out, [first, second, third], app_id="a", change_log=True) > 0
    cols = ["id", "w", "body", "n", "v"]
    want = sorted(pg.query(f"SELECT {', '.join(cols)} FROM {t}"))
    assert want[0] == (1, "v1", big[1], 2, None) and want[5][4] == "new v"

    def check() -> None:
        for reader, rows in read_lake(out, name, "iceberg", cols).items():
            got = sorted(tuple(r[c] for c in cols) for r in rows)
            assert got == want, f"{reader}: {short_rows(got)}, PostgreSQL: {short_rows(want)}"
        replica = iceberg_table(out, name)
        # Renamed, not dropped and added: no column under an old name but the new v; the
        # field ids of the first schema's v and big are w's and body's now.
        own = [f.name for f in replica.schema().fields if not f.name.startswith("_")]
        assert own == cols, own
        first_schema = replica.schemas()[min(replica.schemas())]
        ids = {f.name: f.field_id for f in first_schema.fields}
        now = {f.name: f.field_id for f in replica.schema().fields}
        assert (now["w"], now["body"]) == (ids["v"], ids["big"]), (ids, now)
        assert now["v"] not in ids.values(), (ids, now)
        # The change log: the first part's inserts under the new names, the new v null there.
        for reader, log in read_lake(out, name, "iceberg", ["id", "_op", "w", "body", "v"],
                                     change_log=True).items():
            inserts = {r["id"]: (r["w"], r["body"], r["v"]) for r in log if r["_op"] == "insert"}
            assert inserts == {1: ("v1", big[1], None), 2: ("v2", big[2], None),
                               3: ("v3", big[3], None), 4: ("v4", big[4], None),
                               5: ("w5", "five", None), 6: ("w6", "six", "new v")}, reader
            assert len(log) == 10, (reader, len(log))  # 6 inserts, 4 updates
        # One table: its last commit holds the last transaction, the last row's.
        last = max(iceberg_table(out, name, change_log=True).scan(selected_fields=(
            "_commit_lsn",)).to_arrow().column("_commit_lsn").to_pylist())
        for change_log in (False, True):
            assert _check_commit_lsns(out, name, "a", change_log) == last

    check()
    snapshots = [len(iceberg_table(out, name, c).snapshots()) for c in (False, True)]
    # Again, from the start (a restart before the slot was acknowledged): all skipped.
    _sink_parts(out, [first, second, third], app_id="a", change_log=True)
    check()
    assert [len(iceberg_table(out, name, c).snapshots()) for c in (False, True)] == snapshots


def test_a_rename_between_a_stop_and_a_restart_stays_a_rename(pg18: PgServer, unique_name: str,
                                                              tmp_path: Path) -> None:
    """The live CLI stops with everything written before the rename confirmed; the columns
    are renamed; the restarted CLI sees only the new definition (the slot sends a Relation
    message of the table as of its first change after the restart). The renamed columns
    still keep their older rows' values and their field ids, an unchanged TOAST value
    included."""
    pg, p = pg18, unique_name
    t, name = f"{p}_r", f"public.{p}_r"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, big text, n int)")
    pg.execute(f"ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {t}")
    pg.create_slot(p)
    pg.execute(f"INSERT INTO {t} SELECT g, 'v' || g, repeat('x', 3000) || g, 0 "
               "FROM generate_series(1, 4) g")
    out = tmp_path / "lake"
    drain(pg, p, p, out, fmt="iceberg")
    pg.execute(f"ALTER TABLE {t} RENAME COLUMN v TO w; ALTER TABLE {t} RENAME COLUMN big TO body")
    pg.execute(f"UPDATE {t} SET n = 1 WHERE id = 1")  # body unchanged: not sent
    pg.execute(f"INSERT INTO {t} VALUES (5, 'w5', 'five', 5)")
    drain(pg, p, p, out, fmt="iceberg")
    cols = ["id", "w", "body", "n"]
    want = sorted(pg.query(f"SELECT {', '.join(cols)} FROM {t}"))
    for reader, rows in read_lake(out, name, "iceberg", cols).items():
        got = sorted(tuple(r[c] for c in cols) for r in rows)
        assert got == want, f"{reader}: {short_rows(got)}, PostgreSQL: {short_rows(want)}"
    replica = iceberg_table(out, name)
    ids = {f.name: f.field_id for f in replica.schemas()[min(replica.schemas())].fields}
    now = {f.name: f.field_id for f in replica.schema().fields}
    assert (now["w"], now["body"]) == (ids["v"], ids["big"]), (ids, now)


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
def test_iceberg_catalog_properties_name_another_catalog(pg18: PgServer, unique_name: str,
                                                         tmp_path: Path, catalog: str) -> None:
    """--iceberg-catalog KEY=VALUE: the catalog and warehouse named there (another SQLite
    file, or a SQL catalog in a PostgreSQL database, as a shared deployment keeps it), read
    back by ``iceberg_catalog(DIR, properties)``."""
    pg, t = pg18, f"{unique_name}_c"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    pg.execute(f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 50) g; "
               f"UPDATE {t} SET v = 'u' WHERE id < 10; DELETE FROM {t} WHERE id > 40")
    capture = tmp_path / "capture.arrow"
    _write_capture(pg.get_binary_changes(unique_name, {"proto_version": "1",
                                                       "publication_names": unique_name}), capture)
    out, warehouse = tmp_path / "lake", tmp_path / "warehouse"
    warehouse.mkdir()
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    if catalog == "postgresql":
        db = f"{unique_name}_catalog"[:63]
        pg.execute(f'CREATE DATABASE "{db}"')
        uri = f"postgresql+psycopg2://{pg.user}:{pg.password}@127.0.0.1:{pg.port}/{db}"
    props = {"type": "sql", "uri": uri, "warehouse": f"file://{warehouse}"}
    flags = [a for k, v in props.items() for a in ("--iceberg-catalog", f"{k}={v}")]
    proc = subprocess.run([dump_command(), str(capture), "--format", "iceberg", "--output",
                           str(out), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = iceberg_catalog(out, props).load_table(("public", t))
    rows = table.scan(selected_fields=("id", "v")).to_arrow().to_pylist()
    got = sorted((r["id"], r["v"]) for r in rows)
    assert got == sorted(pg.query(f"SELECT id, v FROM {t}"))
    assert list(warehouse.rglob("*.parquet")), "no data file in the named warehouse"


def test_cli_iceberg_options_need_format_iceberg() -> None:
    proc = subprocess.run([dump_command(), "x.parquet", "--format", "delta", "--output", "x",
                           "--iceberg-catalog", "uri=sqlite://"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--format iceberg" in proc.stderr, proc.stderr
    proc = subprocess.run([dump_command(), "x.parquet", "--format", "iceberg"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--output" in proc.stderr, proc.stderr


def test_a_commit_that_meets_another_writers_is_done_again(pg18: PgServer, unique_name: str,
                                                           tmp_path: Path, monkeypatch: Any) -> None:
    """Another writer (a compaction rewriting the replica's files in one snapshot, as an
    engine's maintenance does) commits between the sink's read of the rows a merge touches
    and its commit: pyiceberg refuses the sink's commit, and the sink reads the table again
    and commits, so the replica still equals PostgreSQL's SELECT."""
    from pgoutput_arrow.sinks import iceberg as iceberg_sink

    pg, p, slot = pg18, unique_name, unique_name
    setup(pg, p, slot)
    rng = random.Random(11)
    rounds = 4
    for r in range(2):
        workload_round(pg, p, r, rng, rounds)
    out = tmp_path / "lake"

    def stream_into_lake() -> None:
        with pgoutput_arrow.stream(pg.dsn, slot=slot, publication=p, idle_timeout=3) as changes, \
                IcebergSink(out, app_id=slot) as sink:
            for batches, ack_lsn in changes.groups(linger=0.2):
                sink.write(batches)
                sink.commit()
                changes.ack(ack_lsn)

    stream_into_lake()
    compacted: list[str] = []
    read = iceberg_sink._IcebergTable._held

    def read_then_compact(self: Any, row_filter: Any, schema: pa.Schema) -> pa.Table:
        held = read(self, row_filter, schema)
        if not compacted:  # once: the sink's table object is now behind the catalog's
            other = iceberg_catalog(out).load_table(self.identifier)
            other.overwrite(other.scan().to_arrow())
            compacted.append(self.uri)
        return held

    monkeypatch.setattr(iceberg_sink._IcebergTable, "_held", read_then_compact)
    for r in range(2, rounds):
        workload_round(pg, p, r, rng, rounds)
    stream_into_lake()
    assert compacted, "no merge read the table"
    check_replicas(pg, p, out, "iceberg")
