"""pgoutput-dump, run as the installed console script on captures taken from real servers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from dump_workload import LONG, Workload, capture_workload, comparable, dump_command
from pg_harness import PgServer, int_to_lsn


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Polls ``condition`` until it holds; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def dump(*args: str | os.PathLike[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([dump_command(), *map(os.fspath, args)], capture_output=True,
                          text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def workload(pg18: PgServer) -> Workload:
    return capture_workload(pg18, "cli")


@pytest.fixture(scope="module")
def capture(workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return workload.write_parquet(tmp_path_factory.mktemp("cli") / "capture.parquet")


def _key(obj: dict[str, Any]) -> tuple[str, str, object]:
    name = f"{obj['schema']}.{obj['table']}" if obj["table"] else ""
    if obj["op"] == "message":
        return ("message", "", obj["prefix"])
    if obj["op"] == "truncate":
        return ("truncate", name, None)
    row = obj["new"] if obj["new"] is not None else obj["old"]
    return (obj["op"], name, row.get("id", row.get("k")))


def test_jsonl_one_line_per_change(capture: Path, workload: Workload) -> None:
    lines = dump(capture, "--format", "jsonl").stdout.splitlines()
    objs = [json.loads(line) for line in lines]
    assert [_key(o) for o in objs] == workload.expected
    for o in objs:
        assert set(o) >= {"op", "schema", "table", "lsn", "commit_lsn", "commit_ts", "xid",
                          "new", "old", "unchanged"}
    # Commit order: commit LSNs never go back, and LSNs are X/Y.
    commits = [pgoutput_arrow.lsn_to_int(o["commit_lsn"]) for o in objs]
    assert commits == sorted(commits)
    first = objs[0]
    assert first["new"] == {
        "id": 1, "name": LONG + "1", "amount": "12.50", "big": "9007199254740993",
        "ts": "2024-02-29T12:34:56.789012Z", "d": "2024-02-29", "payload": "deadbeef",
        "tags": ["x", None, "it's"], "f": "NaN", "doc": '{"a": [1, 2.5]}',
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    }
    assert first["commit_ts"].endswith("Z") and first["xid"] > 0 and first["old"] is None
    second = objs[1]["new"]
    # A BC date is beyond Python's datetime: by default it is a special value, printed as
    # PostgreSQL's text in the value's place; --datetime-range arrow types it (astronomical
    # year -43, ISO 8601).
    assert second["d"] == "0044-03-15 BC"
    assert second["f"] == "Infinity" and second["amount"] == "-0.01" and second["big"] == "-1"
    assert second["payload"] == "" and second["tags"] == []
    typed = [json.loads(line) for line in dump(capture, "--format", "jsonl", "--datetime-range", "arrow").stdout.splitlines()]
    assert typed[1]["new"]["d"] == "-0043-03-15"  # 44 BC is astronomical year -43
    update = objs[3]
    assert update["op"] == "update" and update["new"]["name"] == "renamed"
    assert update["new"]["f"] == -0.5
    delete = objs[4]
    assert delete["new"] is None and delete["old"]["id"] == 3
    pk_change = objs[7]
    assert pk_change["new"]["id"] == 20 and pk_change["old"]["id"] == 2
    # The two-table transaction: one xid, one commit LSN.
    txn = objs[5:9]
    assert len({o["xid"] for o in txn}) == 1 and len({o["commit_lsn"] for o in txn}) == 1
    assert objs[8]["content"] == b"in a transaction".hex()


def test_pretty_shows_transactions(capture: Path, workload: Workload) -> None:
    out = dump(capture, "--format", "pretty").stdout.splitlines()
    begins = [line for line in out if line.startswith("BEGIN ")]
    commits = [line for line in out if line.startswith("COMMIT ")]
    changes = [line for line in out if line.startswith("  ")]
    assert len(begins) == len(commits) == 6
    assert len(changes) == len(workload.expected)
    assert "insert" in changes[0] and f"name='{LONG}1'" in changes[0] and "big=9007199254740993" in changes[0]
    # Aligned: every change line has the operation and the table at the same columns.
    table_cols = {line.index("public.") for line in changes if "public." in line}
    assert len(table_cols) == 1


def test_parquet_output_reads_back(capture: Path, workload: Workload, tmp_path: Path) -> None:
    out = tmp_path / "out"
    dump(capture, "--format", "parquet", "--output", out)
    changes = pgoutput_arrow.decode(capture)
    for name in (workload.main, workload.other):
        files = sorted((out / name).iterdir())
        assert files and all(f.suffix == ".parquet" and not f.name.startswith(".") for f in files)
        for f in files:
            first, last = f.stem.split("-")[:2]
            assert len(first) == len(last) == 16
        back = pa.concat_tables(pq.read_table(f) for f in files)
        assert back.num_rows == changes.tables[name].num_rows
        assert comparable(back) == comparable(changes.tables[name])
    assert (out / "_transactions").is_dir() and (out / "_truncates").is_dir()
    assert not list(out.rglob(".*.tmp"))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    # timeType: Spark 4 reads Parquet TIME columns only with it (docs/cli.md says so).
    session = (SparkSession.builder.master("local[2]").appName("pgoutput-arrow-tests")
               .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
               .config("spark.sql.timeType.enabled", "true").getOrCreate())
    yield session
    session.stop()  # getOrCreate in a later module would hand back this one, tuned as here


@pytest.mark.slow
def test_parquet_output_reads_back_in_spark(capture: Path, workload: Workload, tmp_path: Path,
                                            spark: Any) -> None:
    dump(capture, "--format", "parquet", "--output", tmp_path)
    decoded = comparable(pgoutput_arrow.decode(capture).tables[workload.main])
    df = spark.read.parquet(str(tmp_path / workload.main))
    got = df.selectExpr("id", "name", "cast(amount as string)", "cast(big as string)",
                        "cast(d as string)", "lower(hex(payload))", "u", "tags",
                        "doc", "_op", "_commit_lsn", "_seq").orderBy("_commit_lsn", "_seq").collect()
    expected = [(r["id"], r["name"], r["amount"], r["big"], r["d"], r["payload"],
                 r["u"], r["tags"], r["doc"],
                 r["_op"], int(r["_commit_lsn"]), int(r["_seq"])) for r in decoded]
    assert [tuple(row) for row in got] == expected
    # Every table and the side tables are readable.
    for name in (workload.other, "_transactions", "_truncates", "_messages"):
        assert spark.read.parquet(str(tmp_path / name)).count() > 0


def test_parquet_output_of_large_transactions(pg18: PgServer, tmp_path: Path) -> None:
    """Two transactions of 100,000 rows with long text and bytea (view columns in the
    decoder): with --rows-per-file 100000 one file each, never a transaction split."""
    pg18.execute("CREATE TABLE cli_big (id int PRIMARY KEY, body text, blob bytea)")
    pg18.execute("CREATE PUBLICATION cli_big_pub FOR TABLE cli_big")
    pg18.create_slot("cli_big_slot")
    for lo in (1, 100001):
        pg18.execute(f"INSERT INTO cli_big SELECT g, repeat(md5(g::text), 3), "
                     f"decode(md5(g::text), 'hex') FROM generate_series({lo}, {lo + 99999}) g")
    rows = pg18.get_binary_changes("cli_big_slot", {"proto_version": "1", "binary": "true",
                                                    "publication_names": "cli_big_pub"})
    pg18.drop_slot("cli_big_slot")
    cap = tmp_path / "big.parquet"
    pq.write_table(pa.table({"lsn": [r[0] for r in rows], "data": [r[2] for r in rows]}), cap)
    dump(cap, "--format", "parquet", "--output", tmp_path / "out", "--rows-per-file", "100000")
    files = sorted((tmp_path / "out" / "public.cli_big").iterdir())
    assert len(files) == 2
    ranges = [tuple(int(x, 16) for x in f.stem.split("-")) for f in files]
    assert ranges[0][0] == ranges[0][1] < ranges[1][0] == ranges[1][1]
    back = pa.concat_tables(pq.read_table(f) for f in files)
    assert back.num_rows == 200000
    assert back.column("id").to_pylist() == list(range(1, 200001))
    expected = pg18.scalar("SELECT md5(string_agg(body, ',' ORDER BY id)) FROM cli_big")
    assert hashlib.md5(",".join(back.column("body").to_pylist()).encode()).hexdigest() == expected


#: A table's history through every kind of schema change, with intervals (stored as
#: structs in Parquet), uuids and arrays; the second table never changes.
HISTORY_SQL = [
    "CREATE TABLE cli_hist (id int PRIMARY KEY, a int, b text, c int, i interval, "
    "ia interval[], u uuid, tags text[])",
    "CREATE TABLE cli_hist_still (k int PRIMARY KEY, v text)",
    "INSERT INTO cli_hist VALUES (1, 10, 'b1', 100, '1 day 02:00', ARRAY['3 mons'::interval, NULL], "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', ARRAY['x', NULL])",
    "INSERT INTO cli_hist_still VALUES (1, 'one')",
    "ALTER TABLE cli_hist ADD COLUMN d numeric(5,2)",
    "INSERT INTO cli_hist VALUES (2, 20, 'b2', 200, NULL, NULL, NULL, '{}', 1.25)",
    "UPDATE cli_hist SET d = 9.99, i = '-1 day' WHERE id = 1",
    "ALTER TABLE cli_hist DROP COLUMN b",
    "INSERT INTO cli_hist (id, a, c, d) VALUES (3, 30, 300, 3.5)",
    "ALTER TABLE cli_hist RENAME COLUMN a TO a_renamed",
    "INSERT INTO cli_hist (id, a_renamed, c) VALUES (4, 40, 400)",
    "UPDATE cli_hist SET a_renamed = a_renamed + 1 WHERE id = 1",
    "INSERT INTO cli_hist_still VALUES (2, 'two')",
    "ALTER TABLE cli_hist ALTER COLUMN c TYPE bigint",
    "INSERT INTO cli_hist (id, a_renamed, c) VALUES (5, 50, 5000000000)",
    # numeric(5,2) and text hold each other's values only as text: the column becomes text.
    "ALTER TABLE cli_hist ALTER COLUMN d TYPE text",
    "INSERT INTO cli_hist (id, c, d) VALUES (6, 6, 'six')",
    "DELETE FROM cli_hist WHERE id = 2",
    "ALTER TABLE cli_hist REPLICA IDENTITY FULL",
    "UPDATE cli_hist SET c = c + 1 WHERE id = 3",
]
HIST, STILL = "public.cli_hist", "public.cli_hist_still"
#: Every column the history's table had, under its last name.
HIST_COLUMNS = ["id", "a_renamed", "c", "i", "ia", "u", "tags", "d", "b"]


@pytest.fixture(scope="module")
def history(pg18: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The history's capture as an Arrow IPC file of one message per batch: pgoutput-dump
    then decodes and writes one transaction at a time (with --rows-per-file 1, a file per
    transaction, each schema change rewriting the files before it)."""
    # Set up again when pytest-xdist ran another module's tests in between: afresh.
    pg18.execute("DROP PUBLICATION IF EXISTS cli_hist_pub; DROP TABLE IF EXISTS cli_hist, cli_hist_still")
    for sql in HISTORY_SQL[:2]:
        pg18.execute(sql)
    pg18.execute("CREATE PUBLICATION cli_hist_pub FOR TABLE cli_hist, cli_hist_still")
    pg18.create_slot("cli_hist_slot")
    for sql in HISTORY_SQL[2:]:
        pg18.execute(sql)
    rows = pg18.get_binary_changes("cli_hist_slot", {"proto_version": "1",
                                                     "publication_names": "cli_hist_pub"})
    pg18.drop_slot("cli_hist_slot")
    return _capture_file(rows, tmp_path_factory.mktemp("history") / "capture.arrow")


def _by_commit(table: pa.Table) -> list[dict[str, object]]:
    """The rows as pgoutput-dump prints them (intervals stored as structs made intervals
    again), in commit order."""
    from pgoutput_arrow._files import decoded

    rows = comparable(decoded(table))
    return sorted(rows, key=lambda r: (int(str(r["_commit_lsn"])), int(str(r["_seq"]))))


def _same_schema_everywhere(directory: Path) -> pa.Schema:
    files = sorted(directory.glob("*.parquet"))
    assert files and not list(directory.glob(".*"))
    first = pq.read_schema(files[0])
    for f in files[1:]:
        assert pq.read_schema(f).equals(first), f"{f.name} differs from {files[0].name}"
    return first


@pytest.mark.parametrize("rows_per_file", [1, 1_000_000])
def test_parquet_directory_of_a_changing_table_reads_back_whole(
        history: Path, tmp_path: Path, rows_per_file: int) -> None:
    """ADD, DROP, RENAME and ALTER TYPE of columns: every file of the table's directory has
    the same schema (one file per transaction, rewritten at each change; or one file of
    every version), so pq.read_table(dir), pyarrow.dataset and polars read every row with
    every column, equal to what decode() makes of the capture."""
    import polars as pl
    import pyarrow.dataset as ds

    out = tmp_path / "out"
    dump(history, "--format", "parquet", "--output", out, "--rows-per-file", str(rows_per_file))
    changes = pgoutput_arrow.decode(history)
    for name in (HIST, STILL):
        want = changes.tables[name]
        directory = out / name
        schema = _same_schema_everywhere(directory)
        files = sorted(directory.glob("*.parquet"))
        assert len(files) == ((10 if name == HIST else 2) if rows_per_file == 1 else 1)
        assert schema.names == want.schema.names
        assert schema.metadata[b"pg.table"] == name.encode()  # the decoder's metadata, as before
        whole = pq.read_table(directory)
        assert whole.num_rows == want.num_rows
        assert _by_commit(whole) == _by_commit(want), name
        assert ds.dataset(directory, format="parquet").to_table().equals(whole)
        frame = pl.scan_parquet(f"{directory}/*.parquet").collect()
        assert frame.columns == whole.column_names and frame.height == whole.num_rows
        plain = [c for c in whole.column_names if c not in ("i", "ia", "u", "_before")]
        assert _by_commit(frame.select(plain).to_arrow()) == _by_commit(whole.select(plain))
    assert [c for c in changes.tables[HIST].column_names if not c.startswith("_")] == HIST_COLUMNS
    hist = {r["id"]: r for r in _by_commit(pq.read_table(out / HIST)) if r["_op"] == "insert"}
    assert hist[1]["a_renamed"] == 10 and hist[1]["b"] == "b1" and hist[1]["d"] is None
    assert hist[2]["d"] == "1.25" and hist[5]["c"] == "5000000000" and hist[6]["d"] == "six"
    assert hist[1]["i"] == {"months": 0, "days": 1, "nanoseconds": str(2 * 3600 * 10**9)}


def _capture_file(rows: list[tuple[int, int, bytes]], path: Path) -> Path:
    """An Arrow IPC capture of one message per batch: pgoutput-dump decodes and writes it
    one transaction at a time."""
    schema = pa.schema([("lsn", pa.int64()), ("data", pa.binary())])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, schema) as w:
        for lsn, _, data in rows:
            w.write_batch(pa.record_batch([pa.array([lsn], pa.int64()), pa.array([data])],
                                          schema=schema))
    return path


@pytest.mark.timeout(300)
def test_parquet_rewrite_killed_midway_is_finished_by_the_next_run(pg18: PgServer,
                                                                   tmp_path: Path) -> None:
    """kill -9 while a schema change (a rename and an added column) rewrites 800 files:
    the next pgoutput-dump into the directory, even one that writes nothing to the table,
    finishes the rewrite from its journal first; the renamed column stays one column."""
    pg18.execute("CREATE TABLE cli_kill (id int PRIMARY KEY, a int)")
    pg18.execute("CREATE PUBLICATION cli_kill_pub FOR TABLE cli_kill")
    pg18.create_slot("cli_kill_slot")
    pg18.execute("DO $$ BEGIN FOR i IN 1..800 LOOP INSERT INTO cli_kill VALUES (i, i); COMMIT; "
                 "END LOOP; END $$")
    pg18.execute("ALTER TABLE cli_kill RENAME COLUMN a TO a2")
    pg18.execute("ALTER TABLE cli_kill ADD COLUMN b text")
    pg18.execute("INSERT INTO cli_kill VALUES (0, 0, 'after')")
    rows = pg18.get_binary_changes("cli_kill_slot", {"proto_version": "1",
                                                     "publication_names": "cli_kill_pub"})
    pg18.drop_slot("cli_kill_slot")
    capture = _capture_file(rows, tmp_path / "capture.arrow")
    want = pgoutput_arrow.decode(capture, views=False).tables["public.cli_kill"]
    commits = sorted(set(want.column("_commit_lsn").to_pylist()))
    out = tmp_path / "out"
    directory = out / "public.cli_kill"
    dump(capture, "--format", "parquet", "--output", out, "--rows-per-file", "1",
         "--to-lsn", str(commits[-2]))
    assert len(list(directory.glob("*.parquet"))) == 800
    journal = directory / ".schema-rewrite.json"
    proc = subprocess.Popen([dump_command(), capture, "--format", "parquet", "--output", out,
                             "--rows-per-file", "1"], stderr=subprocess.PIPE)
    try:
        # Rewrites go newest file first: killed once the newest is done.
        newest = sorted(directory.glob("*.parquet"))[-1]
        wait_until(lambda: proc.poll() is not None or (
            journal.exists() and "a2" in pq.read_schema(newest).names), 120,
            "the rewrite to start")
        proc.kill()
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert journal.exists(), "the run ended before it could be killed in its rewrite"
    columns = {tuple(pq.read_schema(f).names[:3]) for f in directory.glob("*.parquet")}
    assert columns == {("id", "a", "_op"), ("id", "a2", "b")}, columns

    dump(capture, "--format", "parquet", "--output", out, "--from-lsn", str(commits[-1] + 1))
    assert not journal.exists() and not list(directory.glob(".*"))
    schema = _same_schema_everywhere(directory)
    assert [n for n in schema.names if not n.startswith("_")] == ["id", "a2", "b"]
    written = want.filter(pc.less(want.column("_commit_lsn"), commits[-1]))
    assert _by_commit(pq.read_table(directory)) == _by_commit(written.select(schema.names))


def test_live_rewrite_waits_for_its_group_to_count(history: Path, tmp_path: Path) -> None:
    """The live sink's order, on the history's first two versions: the rewrite a group needs
    is journaled before the group is written (prepare) and done after its checkpoint
    (finish). Killed in between, the next start drops it if the checkpoint is still the
    previous group's (the files untouched, under their schema), and finishes it if the
    group was counted."""
    from pgoutput_arrow._files import TableDirectory, write_atomically

    versions = pgoutput_arrow.decode(history).table_versions[HIST]
    directory = tmp_path / HIST
    journal = directory / ".schema-rewrite.json"

    def files() -> dict[str, tuple[int, list[str]]]:
        return {f.name: (f.stat().st_mtime_ns, pq.read_schema(f).names)
                for f in sorted(directory.glob("*.parquet"))}

    sink = TableDirectory(directory, "parquet")
    table = sink.prepare(versions[0].to_batches(), 10)
    sink.finish()
    directory.mkdir()
    write_atomically(table, directory / "000000000000000A-000000000000000A.parquet", "parquet")
    written = files()
    sink.prepare(versions[1].to_batches(), 20)  # a group that adds column d: killed now
    assert journal.exists() and files() == written

    uncounted = TableDirectory(directory, "parquet", counted=10)
    assert not journal.exists() and files() == written
    assert uncounted.unified is not None and "d" not in uncounted.unified.names

    uncounted.prepare(versions[1].to_batches(), 20)  # again, and this time it counts
    assert journal.exists() and files() == written
    TableDirectory(directory, "parquet", counted=20)
    assert not journal.exists()
    ((_, names),) = files().values()
    assert "d" in names
    want = pgoutput_arrow.conform(versions[0], pgoutput_arrow.unify_schemas(
        [versions[0].schema, versions[1].schema]))
    assert _by_commit(pq.read_table(directory)) == _by_commit(want)


@pytest.mark.slow
def test_parquet_directory_of_a_changing_table_in_spark(history: Path, tmp_path: Path,
                                                        spark: Any) -> None:
    """spark.read.parquet(dir) of the history's table: every row, every column."""
    dump(history, "--format", "parquet", "--output", tmp_path, "--rows-per-file", "1")
    want = _by_commit(pgoutput_arrow.decode(history).tables[HIST])
    df = spark.read.parquet(str(tmp_path / HIST))
    assert df.columns == [*HIST_COLUMNS, *[c for c in want[0] if c.startswith("_")]]
    got = df.selectExpr("id", "a_renamed", "cast(c as string)", "d", "b", "tags", "_op",
                        "_commit_lsn", "_seq").orderBy("_commit_lsn", "_seq").collect()
    assert [tuple(r) for r in got] == [
        (r["id"], r["a_renamed"], r["c"], r["d"], r["b"], r["tags"], r["_op"],
         int(str(r["_commit_lsn"])), int(str(r["_seq"]))) for r in want]


def test_arrow_output(capture: Path, workload: Workload, tmp_path: Path) -> None:
    dump(capture, "--format", "arrow", "--output", tmp_path)
    (f,) = (tmp_path / workload.other).iterdir()
    t = pa.ipc.open_file(f).read_all()
    assert sorted(t.column("k").to_pylist()) == ["k1", "k2", "k3"]


def test_filters(capture: Path, workload: Workload) -> None:
    lines = dump(capture, "--format", "jsonl", "--table", "*_other").stdout.splitlines()
    assert [_key(json.loads(x)) for x in lines] == [e for e in workload.expected if e[1] == workload.other]
    lines = dump(capture, "--format", "jsonl", "--limit", "4").stdout.splitlines()
    assert [_key(json.loads(x)) for x in lines] == workload.expected[:4]
    objs = [json.loads(x) for x in dump(capture, "--format", "jsonl").stdout.splitlines()]
    mid = objs[5]["commit_lsn"]
    lines = dump(capture, "--format", "jsonl", "--from-lsn", mid, "--to-lsn", mid).stdout.splitlines()
    assert [_key(json.loads(x)) for x in lines] == workload.expected[5:9]
    lines = dump(capture, "--format", "jsonl",
                 "--from-lsn", str(pgoutput_arrow.lsn_to_int(mid) + 1)).stdout.splitlines()
    assert [_key(json.loads(x)) for x in lines] == workload.expected[9:]


def test_stats(capture: Path, workload: Workload) -> None:
    out = dump(capture, "--stats").stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    # columns: insert update delete truncate message total
    assert rows[workload.main] == ["3", "2", "1", "0", "0", "6"]
    assert rows[workload.other] == ["3", "0", "0", "1", "0", "4"]
    assert rows["total"][-1] == str(len(workload.expected))


def test_stdin_arrow_stream(workload: Workload, capture: Path, tmp_path: Path) -> None:
    stream = workload.write_arrow_stream(tmp_path / "c.arrows").read_bytes()
    proc = subprocess.run([dump_command(), "-", "--format", "jsonl"], input=stream,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == subprocess.run([dump_command(), capture, "--format", "jsonl"],
                                         capture_output=True, timeout=120).stdout


def test_pretty_is_the_default_on_a_terminal(capture: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([dump_command(), os.fspath(capture)], stdout=follower,
                            stderr=subprocess.PIPE)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    assert out.startswith(b"BEGIN ") and b"COMMIT " in out


@pytest.mark.parametrize("bytea_output", ["hex", "escape"])
def test_copy_csv_capture_and_special_values(pg18: PgServer, tmp_path: Path, bytea_output: str) -> None:
    """A capture made with COPY ... (FORMAT csv), as the help shows, under either
    bytea_output (a server's setting: escape is read too); infinity dates and a 24:00:00
    time (printed as PostgreSQL's text by default; an error with --special-values error)."""
    name = f"cli_csv_{bytea_output}"
    pg18.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, d date, t time)")
    pg18.execute(f"CREATE PUBLICATION {name}_pub FOR TABLE {name}")
    pg18.create_slot(f"{name}_slot")
    pg18.execute(f"INSERT INTO {name} VALUES (1, 'infinity', '10:00'), (2, '-infinity', '24:00')")
    path = tmp_path / "capture.csv"
    with pg18.connect() as conn, conn.cursor() as cur, path.open("w") as f:
        cur.execute(f"SET bytea_output = {bytea_output}")
        cur.copy_expert(
            f"COPY (SELECT lsn, xid, data FROM pg_logical_slot_get_binary_changes('{name}_slot', "
            f"NULL, NULL, 'proto_version', '1', 'publication_names', '{name}_pub')) "
            "TO STDOUT (FORMAT csv)", f)
    conn.close()
    pg18.drop_slot(f"{name}_slot")
    data = path.read_text().split("\n", 1)[0].split(",", 2)[2].lstrip('"')
    assert data.startswith("\\x42" if bytea_output == "hex" else "B\\000"), data[:20]  # a Begin
    objs = [json.loads(x) for x in dump(path, *TYPED, "--format", "jsonl").stdout.splitlines()]
    assert [(o["new"]["d"], o["new"]["t"]) for o in objs] == [("infinity", "10:00:00"),
                                                              ("-infinity", "24:00:00")]
    line = _one_error_line(dump(path, *TYPED, "--format", "jsonl", "--special-values", "error", check=False))
    assert "public.cli_csv" in line and '"t"' in line and "24:00:00" in line
    objs = [json.loads(x) for x in dump(path, *TYPED, "--format", "jsonl", "--special-values", "text")
            .stdout.splitlines()]
    assert [(o["new"]["d"], o["new"]["t"]) for o in objs] == [("infinity", "10:00:00"),
                                                              ("-infinity", "24:00:00")]
    objs = [json.loads(x) for x in dump(path, *TYPED, "--format", "jsonl", "--special-values", "null")
            .stdout.splitlines()]
    assert [o["new"]["t"] for o in objs] == ["10:00:00", None]


#: time as time64 and dates as every date32 (not the defaults, text and Python's range): the
#: options under which 24:00:00 and ±infinity are special values or sentinels.
TYPED = ("--time", "time64", "--datetime-range", "arrow")

SPECIAL_TEXTS = {"t": "24:00:00", "n": "NaN", "ts": "294276-01-01 00:00:00", "arr": "[0:1]={1,2}"}


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_special_values_print_as_postgresql_text(pg18: PgServer, tmp_path: Path,
                                                 binary: bool) -> None:
    """Values PostgreSQL accepted that no Arrow value of their column's type holds (time
    24:00:00, NaN in numeric(5,2), a timestamp after 294247 AD, an array whose lower bound
    is not 1), with the default options: exit 0, PostgreSQL's exact text in the value's
    place in jsonl and pretty, in the new row and in the old one (REPLICA IDENTITY FULL);
    Parquet keeps them in the _special column, the typed column null."""
    name = f"cli_special_{'b' if binary else 't'}"
    pg18.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, t time, n numeric(5,2), "
                 f"ts timestamp, arr int[], ok text)")
    pg18.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    pg18.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
    pg18.create_slot(name)
    pg18.execute(f"INSERT INTO {name} VALUES (1, '24:00:00', 'NaN', '294276-01-01 00:00:00', "
                 f"'[0:1]={{1,2}}', 'a'), (2, '12:00', 1.5, '2024-01-01', '{{3}}', 'b')")
    pg18.execute(f"UPDATE {name} SET ok = 'a2' WHERE id = 1")
    pg18.execute(f"DELETE FROM {name} WHERE id = 1")
    options = {"proto_version": "1", "publication_names": name, "binary": str(binary).lower()}
    rows = pg18.get_binary_changes(name, options)
    pg18.drop_slot(name)
    capture = tmp_path / "capture.parquet"
    pq.write_table(pa.table({"lsn": [r[0] for r in rows], "data": [r[2] for r in rows]}), capture)

    objs = [json.loads(line) for line in dump(capture, *TYPED, "--format", "jsonl").stdout.splitlines()]
    assert [o["op"] for o in objs] == ["insert", "insert", "update", "delete"]
    special = {"id": 1, **SPECIAL_TEXTS}
    assert objs[0]["new"] == {**special, "ok": "a"}
    assert objs[1]["new"] == {"id": 2, "t": "12:00:00", "n": "1.50", "ts": "2024-01-01T00:00:00",
                              "arr": [3], "ok": "b"}
    assert objs[2]["new"] == {**special, "ok": "a2"} and objs[2]["old"] == {**special, "ok": "a"}
    assert objs[3]["new"] is None and objs[3]["old"] == {**special, "ok": "a2"}
    # The texts are in place: no separate key repeats them.
    assert all(set(o) == set(objs[1]) for o in objs)

    pretty = dump(capture, *TYPED, "--format", "pretty").stdout.splitlines()
    first = next(line for line in pretty if "insert" in line)
    for column, text in SPECIAL_TEXTS.items():
        assert f"{column}='{text}'" in first, first  # quoted: PostgreSQL's text, not a typed value

    out = tmp_path / "out"
    dump(capture, *TYPED, "--format", "parquet", "--output", out)
    table = pq.read_table(out / f"public.{name}")
    assert table.schema.names.index("_special") == table.schema.names.index("_unchanged") + 1
    inserted = table.to_pylist()[0]
    assert dict(inserted["_special"]) == SPECIAL_TEXTS
    assert all(inserted[c] is None for c in SPECIAL_TEXTS)
    deleted = dict(table.to_pylist()[3]["_special"])
    assert {k: v for k, v in deleted.items() if k.startswith("_before.")} == \
        {f"_before.{c}": text for c, text in SPECIAL_TEXTS.items()}

    # Opt-in policies: fail, or lose the value.
    line = _one_error_line(dump(capture, *TYPED, "--format", "jsonl", "--special-values", "error",
                                check=False))
    assert f"public.{name}" in line
    nulls = [json.loads(x) for x in dump(capture, *TYPED, "--format", "jsonl", "--special-values",
                                         "null").stdout.splitlines()]
    assert nulls[0]["new"]["t"] is None and nulls[0]["new"]["n"] is None


def test_columns_named_like_metadata_columns_are_printed(pg18: PgServer, tmp_path: Path) -> None:
    """A table's own _status and _subxid columns (metadata names only in arrived mode) are
    the table's values: printed in jsonl, not taken for the decoder's columns."""
    pg18.execute("CREATE TABLE cli_meta_names (id int PRIMARY KEY, _status text, _subxid int)")
    pg18.execute("CREATE PUBLICATION cli_meta_names FOR TABLE cli_meta_names")
    pg18.create_slot("cli_meta_names")
    pg18.execute("INSERT INTO cli_meta_names VALUES (1, 'shipped', 7)")
    rows = pg18.get_binary_changes("cli_meta_names", {"proto_version": "1",
                                                      "publication_names": "cli_meta_names"})
    pg18.drop_slot("cli_meta_names")
    capture = tmp_path / "capture.parquet"
    pq.write_table(pa.table({"lsn": [r[0] for r in rows], "data": [r[2] for r in rows]}), capture)
    (obj,) = [json.loads(x) for x in dump(capture, "--format", "jsonl").stdout.splitlines()]
    assert obj["new"] == {"id": 1, "_status": "shipped", "_subxid": 7}


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pgoutput-dump: error: ") and "Traceback" not in proc.stderr
    return lines[0]


def test_truncated_message(workload: Workload, tmp_path: Path) -> None:
    t = workload.table()
    data = t.column("data").to_pylist()
    i = next(i for i, d in enumerate(data) if d[:1] == b"I")
    data[i] = data[i][: len(data[i]) // 2]
    bad = t.set_column(2, "data", pa.array(data, pa.binary()))
    pq.write_table(bad, tmp_path / "bad.parquet")
    line = _one_error_line(dump(tmp_path / "bad.parquet", "--format", "jsonl", check=False))
    assert "truncated" in line.lower() and int_to_lsn(workload.rows[i][0]) in line
    assert f"offset" in line


def test_corrupted_message(workload: Workload, tmp_path: Path) -> None:
    t = workload.table()
    data = t.column("data").to_pylist()
    data[2] = b"\x01" + data[2][1:]
    pq.write_table(t.set_column(2, "data", pa.array(data, pa.binary())), tmp_path / "bad.parquet")
    line = _one_error_line(dump(tmp_path / "bad.parquet", check=False))
    assert "unknown message kind" in line.lower()


def test_truncated_file(capture: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(capture.read_bytes()[: capture.stat().st_size // 2])
    line = _one_error_line(dump(cut, check=False))
    assert "cut.parquet" in line


def test_not_a_capture(tmp_path: Path) -> None:
    t = pa.table({"a": [1]})
    pq.write_table(t, tmp_path / "x.parquet")
    line = _one_error_line(dump(tmp_path / "x.parquet", check=False))
    assert "lsn" in line and "data" in line


def test_missing_file(tmp_path: Path) -> None:
    line = _one_error_line(dump(tmp_path / "nope.parquet", check=False))
    assert "nope.parquet" in line and "no such file" in line


def _rows_of(changes: Any) -> dict[str, str]:
    """Every table's rows, as text (NaN equals NaN)."""
    return {name: repr(t.to_pylist()) for name, t in changes.tables.items()}


def test_a_capture_directory_and_rows_in_any_order(capture: Path, workload: Workload, tmp_path: Path) -> None:
    """A capture as Spark writes it (a directory of part files in the order of the
    DataFrame's partitions, a _SUCCESS marker, hidden .crc files) reads as the one file; rows
    in another order (as Spark's reader deals files out) fail with one line that names
    --any-order, and with it decode as the rows in order did, in the CLI and in decode()."""
    import pgoutput_arrow

    want = dump(capture, "--format", "jsonl").stdout
    table = workload.table()
    spark_dir = tmp_path / "capture"
    spark_dir.mkdir()
    n = table.num_rows
    cuts = [0, n // 3, 2 * n // 3, n]
    for i in range(3):
        pq.write_table(table.slice(cuts[i], cuts[i + 1] - cuts[i]), spark_dir / f"part-{i:05d}-c000.snappy.parquet")
    (spark_dir / "_SUCCESS").write_bytes(b"")
    (spark_dir / ".part-00000-c000.snappy.parquet.crc").write_bytes(b"crc")
    assert dump(spark_dir, "--format", "jsonl").stdout == want
    in_order = pgoutput_arrow.decode(capture)
    assert _rows_of(pgoutput_arrow.decode(spark_dir)) == _rows_of(in_order)

    # The last part first, then the rows of the others interleaved.
    order = list(range(cuts[2], n)) + list(range(0, cuts[2], 2)) + list(range(1, cuts[2], 2))
    shuffled = table.take(order)
    pq.write_table(shuffled, tmp_path / "shuffled.parquet")
    line = _one_error_line(dump(tmp_path / "shuffled.parquet", check=False))
    assert "--any-order" in line and "server's order" in line, line
    assert dump(tmp_path / "shuffled.parquet", "--any-order", "--format", "jsonl").stdout == want
    # xid as text, as a driver returns PostgreSQL's xid type.
    pq.write_table(shuffled.set_column(1, "xid", shuffled.column("xid").cast(pa.string())), tmp_path / "text.parquet")
    assert dump(tmp_path / "text.parquet", "--any-order", "--format", "jsonl").stdout == want
    with pytest.raises(pgoutput_arrow.PgoutputError, match="any_order=True"):
        pgoutput_arrow.decode(shuffled)
    for source in (shuffled, tmp_path / "shuffled.parquet"):
        got = pgoutput_arrow.decode(source, any_order=True)
        assert _rows_of(got) == _rows_of(in_order)

    # Without xid, rows in any order cannot be told apart: said before anything is read.
    pq.write_table(shuffled.drop(["xid"]), tmp_path / "no_xid.parquet")
    line = _one_error_line(dump(tmp_path / "no_xid.parquet", "--any-order", check=False))
    assert "xid" in line and "no_xid.parquet" in line
    proc = dump("--dsn", "host=nowhere", "--slot", "s", "--publication", "p", "--any-order", check=False)
    assert proc.returncode == 2 and "--any-order" in proc.stderr


def test_a_capture_directory_of_more_parts_than_open_files_allowed(capture: Path, workload: Workload,
                                                                   tmp_path: Path) -> None:
    """Spark writes hundreds of part files: they are read one open file at a time, so a
    directory of more parts than the process may hold open (here 300 under a limit of 64)
    reads as the one file does."""
    import resource

    table = workload.table()
    n = table.num_rows
    parts = 300
    for i in range(parts):
        lo, hi = i * n // parts, (i + 1) * n // parts
        pq.write_table(table.slice(lo, hi - lo), tmp_path / f"part-{i:05d}-c000.snappy.parquet")

    def few_open_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.run([dump_command(), str(tmp_path), "--format", "jsonl"], capture_output=True, text=True,
                          timeout=120, preexec_fn=few_open_files)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == dump(capture, "--format", "jsonl").stdout


def test_usage_errors(capture: Path) -> None:
    proc = dump(capture, "--no-such-option", check=False)
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr
    proc = dump(capture, "--format", "parquet", check=False)
    assert proc.returncode == 2 and "--output" in proc.stderr
    proc = dump(check=False)
    assert proc.returncode == 2


def test_live_usage_errors(tmp_path: Path) -> None:
    """Live option combinations that cannot work are usage errors (exit 2), found before
    connecting: the DSN points at a closed port, and nothing is created under --output."""
    dsn = "host=127.0.0.1 port=1 user=x dbname=x connect_timeout=1"
    for args, says in [
        (["--slot", "s"], "--publication"),
        (["--slot", "s", "--publication", "p", "--temporary"], "--create-slot"),
        (["--slot", "s", "--create-publication", "t", "--temporary"], "--create-slot"),
        (["--publication", "p"], "--slot"),
        (["--slot", "s", "--format", "parquet", "--output", str(tmp_path / "out")],
         "--publication"),
    ]:
        proc = dump("--dsn", dsn, *args, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("usage: ") and "Traceback" not in proc.stderr
        last = proc.stderr.splitlines()[-1]
        assert last.startswith("pgoutput-dump: error: ") and says in last, (args, last)
    assert not (tmp_path / "out").exists()


def test_missing_psycopg2_is_one_line() -> None:
    """Without psycopg2 (installed with --no-deps, say), --dsn fails with one line naming the
    package to install, not a traceback."""
    code = ("import sys; sys.modules['psycopg2'] = None  # as if not installed\n"
            "from pgoutput_arrow.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", code, "--dsn", "host=127.0.0.1 port=1",
                           "--slot", "s", "--publication", "p"],
                          capture_output=True, text=True, timeout=60)
    line = _one_error_line(proc)
    assert "psycopg2-binary" in line and "pip install" in line, line


def test_debug_shows_traceback(tmp_path: Path) -> None:
    proc = dump(tmp_path / "nope.parquet", "--debug", check=False)
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_help_and_version() -> None:
    help_text = dump("--help").stdout
    for option in ("--format", "--output", "--table", "--from-lsn", "--to-lsn", "--limit",
                   "--stats", "--special-values", "--progress", "--debug", "--version",
                   "examples:"):
        assert option in help_text
    examples = help_text[help_text.index("examples:"):help_text.index("capturing with")]
    # A live example, whole: it creates what it needs and says where the output goes.
    live = examples[examples.index("pgoutput-dump --dsn"):]
    for option in ("--slot", "--create-slot", "--create-publication", "--output"):
        assert option in live, examples
    assert dump("--version").stdout.strip() == f"pgoutput-dump {pgoutput_arrow.__version__}"
    cargo = (Path(__file__).parents[1] / "Cargo.toml").read_text()
    assert f'version = "{pgoutput_arrow.__version__}"' in cargo


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_wheel_installs_in_fresh_venv(capture: Path, workload: Workload, pg18: PgServer,
                                      tmp_path: Path) -> None:
    """The wheel of ``make wheel`` (abi3 for CPython 3.11+, manylinux) installs into a new
    virtualenv with the dependencies its metadata declares, and nothing else: its command
    decodes a real capture to jsonl and Parquet as the development install does, and streams
    live (which needs psycopg2)."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from spark_cluster import ROOT, ShippedEnv

    # Built once per source tree and shared with the wheel's and the deployment tests (1500 s:
    # the first of them builds it cold).
    wheel = ShippedEnv.build(ROOT / "build" / "spark-deploy").wheel
    assert wheel is not None
    assert "-cp311-abi3-" in wheel.name, wheel.name

    # The dependencies the wheel declares, as wheels of the versions the tests run with, in
    # a directory that is the only index below: an undeclared dependency stays missing.
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")))
    requires = [Requirement(line.split(":", 1)[1].strip())
                for line in meta.decode().splitlines() if line.startswith("Requires-Dist:")]
    needed = [r.name for r in requires if r.marker is None]
    assert {"pyarrow", "psycopg2-binary"} <= set(needed), needed
    deps = tmp_path / "deps"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--dest", deps, *[f"{n}=={version(n)}" for n in needed]],
                   check=True, capture_output=True, timeout=300)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-index", "--find-links", deps, wheel],
                   check=True, capture_output=True, timeout=300)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def venv_run(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*map(os.fspath, args)], capture_output=True, text=True,
                              env=clean, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc

    where = venv_run(venv / "bin" / "python", "-c",
                     "import pgoutput_arrow; print(pgoutput_arrow.__file__)").stdout
    assert where.startswith(str(venv)), where
    command = venv / "bin" / "pgoutput-dump"
    assert venv_run(command, "--version").stdout.strip() == \
        f"pgoutput-dump {pgoutput_arrow.__version__}"

    lines = venv_run(command, capture, "--format", "jsonl").stdout.splitlines()
    assert len(lines) == len(workload.expected)
    assert lines == dump(capture, "--format", "jsonl").stdout.splitlines()

    out = tmp_path / "out"
    venv_run(command, capture, "--format", "parquet", "--output", out)
    changes = pgoutput_arrow.decode(capture)
    for name in (workload.main, workload.other):
        back = pa.concat_tables(pq.read_table(f) for f in sorted((out / name).iterdir()))
        assert comparable(back) == comparable(changes.tables[name]), name

    # Live, through the psycopg2 the wheel pulled in: a temporary slot and its publication.
    slot = f"cli_wheel_{os.getpid()}"
    proc = venv_run(command, "--dsn", pg18.dsn, "--slot", slot, "--create-slot",
                    "--temporary", "--create-publication", workload.main, "--format", "jsonl",
                    "--idle-timeout", "0.5")
    assert proc.stdout == ""
    pg18.execute(f"DROP PUBLICATION IF EXISTS {slot}")


def test_parquet_storable_takes_json_inside_before(tmp_path: Path) -> None:
    """A json column of a REPLICA IDENTITY FULL table is an arrow.json over a string view
    inside ``_before`` too; pyarrow's Parquet writer cannot slice views ("Slicing not
    implemented for StringView", found by tests/torture on PostgreSQL 15): stored over a
    plain string, read back equal."""
    from pgoutput_arrow._files import storable

    json_view = pa.json_(pa.string_view())
    doc = pa.ExtensionArray.from_storage(json_view, pa.array(['{"a": 1}', None, "[]"], pa.string_view()))
    before = pa.StructArray.from_arrays([pa.array([1, 2, 3], pa.int32()), doc], names=["id", "j"])
    table = pa.table({"id": pa.array([1, 2, 3], pa.int32()), "_before": before})
    path = tmp_path / "t.parquet"
    pq.write_table(storable(table, "parquet"), path, row_group_size=2)  # row groups slice the arrays
    back = pq.read_table(path).column("_before").combine_chunks()
    assert back.field("j").storage.to_pylist() == ['{"a": 1}', None, "[]"]


def test_stream_options_have_one_table() -> None:
    """``stream()``'s documentation and ``pgoutput-dump``'s flags are made from
    ``StreamOptions``' fields: every option but those ``StreamOptions.of`` takes in another
    shape is documented in ``stream()``, and a flag given reaches the option of its name."""
    import dataclasses

    from pgoutput_arrow.cli.arguments import build_parser
    from pgoutput_arrow.live.options import StreamOptions, flagged

    fields = dataclasses.fields(StreamOptions)
    undocumented = {f.name for f in fields if "doc" not in f.metadata}
    assert undocumented == {"slot", "publications", "create_publication", "start_lsn", "stop_at_lsn",
                            "decoder_options"}
    doc = pgoutput_arrow.stream.__doc__ or ""
    assert [f.name for f in fields if f"``{f.name}``" not in doc and f.name not in undocumented] == []
    args = build_parser().parse_args(["--dsn", "x", "--slot", "s", "--publication", "p", "--create-slot",
                                      "--temporary", "--binary", "--reconnect-attempts", "3",
                                      "--snapshot-chunk-bytes", "1MB", "--streaming", "off", "--failover"])
    o = StreamOptions.of(slot="s", publication="p", **{f.name: getattr(args, f.name) for f, _ in flagged()})
    assert (o.temporary_slot, o.binary, o.reconnect_attempts, o.snapshot_chunk_bytes, o.streaming, o.failover,
            o.connect_timeout) == (True, True, 3, 1 << 20, "off", True, StreamOptions.connect_timeout)


def test_a_live_output_directory_loses_only_its_own_leftovers(tmp_path: Path) -> None:
    """Opening ``-o DIR`` for a live run deletes what a killed run of ours left (the hidden
    ``.name.tmp`` of a data file or of the checkpoint), never a file of the user's that
    merely ends in ``.tmp``."""
    from pgoutput_arrow.cli.file_sinks import CHECKPOINT, LiveFileSink

    table = tmp_path / "public.orders"
    table.mkdir()
    theirs = [tmp_path / "notes.tmp", tmp_path / ".editor-swap.tmp", table / "draft.tmp"]
    ours = [table / ".0000000001000000-0000000001000040.parquet.tmp", tmp_path / f".{CHECKPOINT}.tmp"]
    for f in theirs + ours:
        f.write_bytes(b"x")
    sink = LiveFileSink(tmp_path, "parquet")
    try:
        assert [f.name for f in theirs if not f.exists()] == []
        assert [f.name for f in ours if f.exists()] == []
    finally:
        sink.close()


@pytest.mark.timeout(180)
def test_a_message_just_before_a_streamed_commit_keeps_its_place(pg: PgServer, unique_name: str,
                                                                 tmp_path: Path) -> None:
    """One session emits a non-transactional message while another's transaction, streamed
    in progress (protocol 2, over logical_decoding_work_mem), is about to commit. The
    message's LSN (the end of its record) is the commit's LSN, and the streamed changes came
    earlier in the stream: pgoutput-dump still writes the messages and rows in the order
    test_decoding prints them, whole and cut by --limit, and so does decode()."""
    t, slot = f"{unique_name}_t", unique_name
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, pad text); CREATE PUBLICATION {slot} FOR TABLE {t}")
    pg.create_slot(slot)
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (f"{slot}_td",))
    rows = 1500
    big, other = pg.connect(), pg.connect()
    big.autocommit = other.autocommit = True
    with big.cursor() as cur, other.cursor() as cur2:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {t} SELECT g, repeat('x', 100) FROM generate_series(1, {rows}) g")
        cur.execute("SELECT pg_logical_emit_message(true, 'inside', 'in the transaction')")
        cur2.execute("SELECT pg_logical_emit_message(false, 'before', 'just before the commit')")
        cur.execute("COMMIT")
        cur2.execute("SELECT pg_logical_emit_message(false, 'after', 'after the commit')")
    big.close()
    other.close()
    pg.flush_wal()
    options = {"proto_version": "2", "publication_names": slot, "streaming": "on", "messages": "true"}
    captured = pg.get_binary_changes(slot, options)
    assert any(data[:1] == b"S" for _, _, data in captured), "the transaction was not streamed"
    printed = [r[0] for r in pg.query("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)",
                                      (f"{slot}_td",))]
    pg.drop_slot(slot)
    pg.drop_slot(f"{slot}_td")

    # test_decoding's order: a message line names its prefix, a row line its table.
    def kind(line: str) -> str | None:
        if line.startswith("message:"):
            prefix = line.split("prefix: ")[1].split(",")[0]
            return prefix if prefix in ("before", "inside", "after") else None
        return "row" if line.startswith(f"table public.{t}:") else None

    want = [k for k in map(kind, printed) if k]
    assert want.count("row") == rows and want[0] == "before", want[:3]

    def order(lines: str) -> list[str]:
        objs = [json.loads(line) for line in lines.splitlines()]
        return [o["prefix"] if o["op"] == "message" else "row" for o in objs]

    one_batch = tmp_path / "one-batch.arrow"
    schema = pa.schema([("lsn", pa.int64()), ("data", pa.binary())])
    with pa.OSFile(str(one_batch), "wb") as f, pa.ipc.new_file(f, schema) as w:
        w.write_batch(pa.record_batch([pa.array([lsn for lsn, _, _ in captured], pa.int64()),
                                       pa.array([data for _, _, data in captured])], schema=schema))
    for path in (one_batch, _capture_file(captured, tmp_path / "per-message.arrow")):
        assert order(dump(path, "--format", "jsonl").stdout) == want, path.name
        for limit in (1, 2, rows + 1, rows + 2):
            got = order(dump(path, "--format", "jsonl", "--limit", str(limit)).stdout)
            assert got == want[:limit], (path.name, limit, got[:3], got[-3:])

    changes = pgoutput_arrow.decode([(lsn, data) for lsn, _, data in captured])
    assert changes.messages.column("prefix").to_pylist() == [k for k in want if k != "row"]
