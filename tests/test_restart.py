"""The restart matrix: ``pgoutput-dump --dsn ... --create-slot [--snapshot] --format F --output
DIR`` stopped (SIGINT) or killed (kill -9) at each point of its life and started again with
the same command line, as a supervisor (systemd, Kubernetes) restarts a job: during the
snapshot, right after it, while changes stream, and during the shutdown that a SIGINT starts.
At the end every output equals PostgreSQL's ``SELECT`` value by value, and holds every change
once.

Per cell (format × snapshot or not × which signal lands where) one sequence of runs of the
same command, with tests/delta_workload.py's rounds (TOAST updates, key changes, identical
rows of a ``REPLICA IDENTITY FULL`` table, a keyless append-only table, a TRUNCATE, added,
dropped and retyped columns) committed in between and during the runs:

1. (with ``--snapshot``) killed while the snapshot is written: the next run discards it
   and its slot and takes it again;
2. (with ``--snapshot``) stopped as soon as the snapshot is complete: the next run does not
   take it again, and reuses the slot;
3. killed while changes stream;
4. stopped with SIGINT and, 0.1 s later, killed: during the shutdown;
5. drained with ``--idle-timeout``.

Checked: Delta replicas (deltalake and polars) and Parquet/Arrow files replayed against
``SELECT`` (tests/replay.py); Delta change logs and files hold each change of the slot once;
jsonl (stdout appended over the runs) holds every change, a change printed before a kill
and not yet acknowledged printed again after it (stdout cannot be written and acknowledged
atomically: a consumer drops a line whose ``(commit_lsn, lsn)`` it has).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from delta_workload import FORMATS, check_change_log, check_replicas, setup, workload_round
from pg_harness import PgServer
from replay import compare_state, replay, server_rows
from test_live import DUMP, slot_state, wait_until

ROUNDS = 9
#: Rows in the accounts table before the slot: the snapshot takes a few seconds.
PREFILL = 30000
KILL, STOP = signal.SIGKILL, signal.SIGINT


class Runs:
    """The one command, run again and again into one output."""

    def __init__(self, pg: PgServer, p: str, fmt: str, snapshot: bool, tmp: Path) -> None:
        self.pg, self.p, self.fmt, self.snapshot = pg, p, fmt, snapshot
        self.out = tmp / "out"
        self.stdout = tmp / "stdout.jsonl"
        self.cmd = [*DUMP, "--dsn", pg.dsn, "--slot", p, "--create-slot", "--publication", p,
                    "--format", fmt, "--commit-interval", "0.2", "--status-interval", "0.3"]
        if fmt != "jsonl":
            self.cmd += ["--output", str(self.out)]
        if fmt == "delta":
            self.cmd.append("--change-log")
        if snapshot:
            # Chunks small enough that the snapshot spans many groups (a Delta group is a
            # commit per table, slower than a file): a kill lands inside it.
            chunk = (256 if fmt == "delta" else 32) << 10
            self.cmd += ["--snapshot", "--snapshot-connections", "1",
                         "--snapshot-chunk-bytes", str(chunk)]
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: list[str] = []

    def start(self, *extra: str) -> None:
        with open(self.stdout, "a") as f:
            self.proc = subprocess.Popen([*self.cmd, *extra], stdout=f, stderr=subprocess.PIPE,
                                         text=True)

    def alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"pgoutput-dump exited {self.proc.returncode}: "
                                 f"{self.proc.stderr.read() if self.proc.stderr else ''}")
        return True

    def signal(self, sig: int, then_kill_after: float | None = None) -> None:
        """Sends ``sig`` (and kill -9 ``then_kill_after`` seconds later, if still running);
        waits for the end, and for the server to see the slot inactive."""
        proc = self.proc
        assert proc is not None
        proc.send_signal(sig)
        if then_kill_after is not None:
            try:
                proc.wait(timeout=then_kill_after)
            except subprocess.TimeoutExpired:
                proc.send_signal(KILL)
        code = proc.wait(timeout=60)
        err = proc.stderr.read() if proc.stderr else ""
        self.stderr.append(err)
        if sig == STOP and then_kill_after is None:
            assert code == 0, f"stopped with SIGINT: exit {code}: {err}"
        wait_until(lambda: not self.pg.query(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (self.p,)), 20,
            "the slot to be released")

    # -- where a run is

    def snapshot_record(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.out / "_snapshot.json").read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def snapshot_written(self) -> bool:
        """Some of the snapshot is in the output (the run is in the middle of it)."""
        if self.fmt == "delta":
            return any(self.out.glob("*/_delta_log/*.json"))
        return any(self.out.glob("*/snapshot-*"))

    def snapshot_done(self) -> bool:
        record = self.snapshot_record()
        if record is None or record.get("lsn") is None:
            return False
        if self.fmt == "delta":
            return bool(record.get("done"))
        checkpoint = json.loads((self.out / "_checkpoint.json").read_text())["lsn"]
        return pgoutput_arrow.lsn_to_int(checkpoint) >= pgoutput_arrow.lsn_to_int(record["lsn"])

    def streaming(self) -> bool:
        return self.alive() and slot_state(self.pg, self.p)[1] is not None


def _sequence(runs: Runs, pg: PgServer, p: str, first: int, second: int, rng: random.Random) -> None:
    """The runs of one cell; ``first`` and ``second`` are the signals of the kill points."""
    rounds = iter(range(ROUNDS))

    def workload(n: int) -> None:
        for _ in range(n):
            workload_round(pg, p, next(rounds), rng, ROUNDS)

    if runs.snapshot:
        # 1. During the snapshot.
        runs.start()
        wait_until(lambda: runs.alive() and runs.snapshot_written(), 60, "the snapshot to start",
                   interval=0.01)
        time.sleep(rng.uniform(0.0, 0.1))
        runs.signal(first)
        assert first == STOP or not runs.snapshot_done(), "the snapshot ended before the kill"
        # 2. Right after it: the next run neither takes it again nor refuses the slot.
        runs.start()
        wait_until(lambda: runs.alive() and runs.snapshot_done(), 120, "the snapshot to end")
        runs.signal(second)
    else:
        runs.start()
        wait_until(runs.streaming, 60, "the stream to start")
    # The audit slot sees the changes from here on, as the sink's slot does.
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{p}_audit",))
    # 3. While changes stream.
    if runs.snapshot:
        runs.start()
        wait_until(runs.streaming, 60, "the stream to start again")
    workload(3)
    time.sleep(rng.uniform(0.1, 1.0))
    runs.signal(first)
    # 4. During the shutdown.
    runs.start()
    wait_until(runs.streaming, 60, "the stream to start again")
    workload(3)
    time.sleep(rng.uniform(0.0, 0.5))
    runs.signal(STOP, then_kill_after=0.1)
    workload(ROUNDS - 6)
    # 5. To the end.
    runs.start("--idle-timeout", "3")
    assert runs.proc is not None
    code = runs.proc.wait(timeout=300)
    err = runs.proc.stderr.read() if runs.proc.stderr else ""
    assert code == 0, err
    runs.stderr.append(err)


def _read_files(out: Path, fmt: str, name: str) -> pa.Table | None:
    directory = out / name
    if not directory.is_dir():
        return None
    tables = []
    for f in sorted(directory.glob(f"*.{fmt}")):
        tables.append(pq.read_table(f) if fmt == "parquet"
                      else ipc.open_file(pa.OSFile(str(f))).read_all())
    if not tables:
        return None
    from pgoutput_arrow._files import decoded
    return decoded(pa.concat_tables(tables, promote_options="permissive"))


def _with_specials(table: pa.Table) -> pa.Table:
    """A column that holds a special value (``_special``: NaN in numeric(10,2)) as text, the
    special value's text in place of its null, as PostgreSQL's ``::text`` gives it."""
    specials = table.column("_special").to_pylist()
    columns = {k for entry in specials if entry for k, _ in entry}
    for c in sorted(columns):
        texts = pc.cast(table.column(c), pa.string()).to_pylist()
        merged = [dict(entry or []).get(c, text) for entry, text in zip(specials, texts)]
        i = table.column_names.index(c)
        field = table.schema.field(c)
        table = table.set_column(i, pa.field(c, pa.string(), True, field.metadata),
                                 pa.array(merged, pa.string()))
    return table


def _check_files(pg: PgServer, p: str, out: Path, fmt: str) -> None:
    """The files, replayed, equal SELECT value by value; no change is in two files."""
    import types

    keys = {f"public.{p}_toast": ["id"], f"public.{p}_acc": ["aid"], f"public.{p}_full": [],
            f"public.{p}_hist": []}
    tables = {}
    for name in keys:
        t = _read_files(out, fmt, name)
        assert t is not None, f"no files for {name}"
        t = tables[name] = _with_specials(t)
        changes = [(c, lsn, s) for c, lsn, s, op in zip(
            t.column("_commit_lsn").to_pylist(), t.column("_lsn").to_pylist(),
            t.column("_seq").to_pylist(), t.column("_op").to_pylist()) if op != "snapshot"]
        twice = [k for k, n in Counter(changes).items() if n > 1]
        assert not twice, f"{name}: changes written twice: {twice[:3]}"
    trunc_dir = out / "_truncates"
    truncs = [pq.read_table(f) if fmt == "parquet" else ipc.open_file(pa.OSFile(str(f))).read_all()
              for f in sorted(trunc_dir.glob(f"*.{fmt}"))] if trunc_dir.is_dir() else []
    truncates = pa.concat_tables(truncs) if truncs else pa.table({
        "relations": pa.array([], pa.list_(pa.string())), "_commit_lsn": pa.array([], pa.int64()),
        "_seq": pa.array([], pa.int64())})
    states = replay(types.SimpleNamespace(tables=tables, truncates=truncates), keys)  # type: ignore[arg-type]
    conn = pg.connect()
    try:
        for name, table in tables.items():
            compare_state(states[name], server_rows(conn, name, table), name)
    finally:
        conn.close()


def _check_jsonl(pg: PgServer, p: str, stdout: Path) -> None:
    """Every change of the audit slot is in the output; a change printed twice was printed
    again by the run after a kill (the same line)."""
    lines = [json.loads(line) for line in stdout.read_text().splitlines() if line.strip()]
    got = Counter((o["commit_lsn"], o["lsn"], o["op"], o["table"]) for o in lines
                  if o["op"] in ("insert", "update", "delete"))
    rows = pg.query("SELECT lsn::text, xid::text::bigint, data FROM "
                    "pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                    "'publication_names', %s)", (f"{p}_audit", p))
    changes = pgoutput_arrow.decode([(lsn, bytes(d)) for lsn, _, d in rows])
    want: Counter[tuple[str, str, str, str]] = Counter()
    for name, t in changes.tables.items():
        for c, lsn, op in zip(t.column("_commit_lsn").to_pylist(), t.column("_lsn").to_pylist(),
                              t.column("_op").to_pylist()):
            want[(pgoutput_arrow.lsn_to_str(c), pgoutput_arrow.lsn_to_str(lsn), op,
                  name.split(".", 1)[1])] += 1
    assert set(got) == set(want), (f"missing {list((want - got).elements())[:3]}, "
                                   f"not in the slot {list(set(got) - set(want))[:3]}")
    # The accounts, replayed from the lines (a line printed again applies again: the same
    # result), equal SELECT value by value (int8 is printed as a string).
    acc: dict[int, tuple[str, str]] = {}
    for o in lines:
        if o["table"] != f"{p}_acc":
            continue
        if o["op"] == "truncate":
            acc.clear()
        elif o["op"] == "delete":
            acc.pop(o["old"]["aid"], None)
        elif o["op"] in ("insert", "update"):
            if o["op"] == "update" and o["old"]:
                acc.pop(o["old"]["aid"], None)
            acc[o["new"]["aid"]] = (str(o["new"]["abalance"]), o["new"]["filler"])
    server = {r[0]: (str(r[1]), r[2]) for r in pg.query(f"SELECT aid, abalance, filler FROM {p}_acc")}
    assert acc == server


# format, --snapshot, the signals of the first and second kill points
CELLS = [
    ("delta", True, KILL, STOP),
    ("delta", True, STOP, KILL),
    ("delta", False, KILL, KILL),
    ("parquet", True, KILL, STOP),
    ("parquet", False, STOP, KILL),
    ("arrow", True, STOP, KILL),
    ("jsonl", False, KILL, KILL),
]


def _ids(cell: tuple[str, bool, int, int]) -> str:
    fmt, snap, a, b = cell
    name = {KILL: "kill9", STOP: "sigint"}
    return f"{fmt}-{'snapshot' if snap else 'nosnapshot'}-{name[a]}-{name[b]}"


def _run_cell(pg: PgServer, unique_name: str, tmp_path: Path,
              cell: tuple[str, bool, int, int]) -> None:
    fmt, snapshot, first, second = cell
    p = unique_name
    setup(pg, p, None, prefill=PREFILL if snapshot else 0)
    runs = Runs(pg, p, fmt, snapshot, tmp_path)
    rng = random.Random(zlib.crc32(_ids(cell).encode()))
    _sequence(runs, pg, p, first, second, rng)
    said = "".join(runs.stderr)
    if snapshot and first == KILL:
        assert "was interrupted" in said and "starting it over" in said, said
    if fmt == "delta":
        check_replicas(pg, p, runs.out)
        check_change_log(pg, p, p, runs.out)
    elif fmt in ("parquet", "arrow"):
        _check_files(pg, p, runs.out, fmt)
    else:
        _check_jsonl(pg, p, runs.stdout)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cell", CELLS, ids=_ids)
def test_same_command_resumes_after_each_stop_pg18(pg18: PgServer, unique_name: str,
                                                   tmp_path: Path,
                                                   cell: tuple[str, bool, int, int]) -> None:
    _run_cell(pg18, unique_name, tmp_path, cell)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cell", [CELLS[0], CELLS[3]], ids=_ids)
def test_same_command_resumes_after_each_stop_pg15(pg15: PgServer, unique_name: str,
                                                   tmp_path: Path,
                                                   cell: tuple[str, bool, int, int]) -> None:
    _run_cell(pg15, unique_name, tmp_path, cell)


def _read_only(directory: Path) -> Any:
    """A context in which ``directory`` cannot be written: a read-only bind mount over it
    (the tests run as root, which permissions do not stop), or mode 0555 for another user;
    skips where neither is possible."""
    import contextlib
    import os

    @contextlib.contextmanager
    def ro() -> Any:
        directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            directory.chmod(0o555)
            try:
                yield
            finally:
                directory.chmod(0o755)
            return
        mounted = subprocess.run(["mount", "--bind", str(directory), str(directory)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot make a read-only bind mount here: {mounted.stderr.strip()}")
        try:
            # A file open for writing under it (a run writing its lake) makes the remount
            # fail ("mount point is busy"): again until a moment between two files.
            _until_done(["mount", "-o", "remount,bind,ro", str(directory)], 60)
            yield
        finally:
            if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
                _until_done(["umount", "--lazy", str(directory)], 10)
    return ro()


def _until_done(command: list[str], seconds: float) -> None:
    """``command`` run again every 10 ms until it succeeds; its last error after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{' '.join(command)}: {done.stderr.strip()} (for {seconds:.0f} s)")
        time.sleep(0.01)


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "delta"])
def test_an_output_that_cannot_be_written_fails_in_one_line_before_a_slot(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    """A file, a path under a file, a read-only directory: exit 1 with one line naming the
    path, and neither the slot nor the publication was created."""
    pg, p = pg18, unique_name
    pg.execute(f"CREATE TABLE {p} (id int PRIMARY KEY); INSERT INTO {p} VALUES (1)")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    read_only = tmp_path / "read_only"

    def run(output: Path) -> None:
        proc = subprocess.run(
            [*DUMP, "--dsn", pg.dsn, "--slot", p, "--create-slot", "--snapshot",
             "--create-publication", p, "--format", fmt, "--output", str(output)],
            capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and str(output) in lines[0], proc.stderr
        assert not pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (p,))
        assert not pg.query("SELECT 1 FROM pg_publication WHERE pubname = %s", (p,))

    run(a_file)
    run(a_file / "under")
    with _read_only(read_only):
        run(read_only)
        run(read_only / "new")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lake_that_turns_read_only_is_the_sinks_error_naming_the_table(
        pg18: PgServer, unique_name: str, tmp_path: Path, fmt: str) -> None:
    """A lake directory that cannot be written at a run's first commit (its change log's
    table to be made, the replica's new files): the sink raises its own error (a
    LakeSinkError, which pgoutput-dump prints in one line) naming the source table, not the
    format library's exception; the replica keeps what it held."""
    from pgoutput_arrow.sinks import DeltaSink, IcebergSink, LakeSinkError, iceberg_catalog

    pg, t = pg18, f"{unique_name}_ro"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    options = {"proto_version": "1", "publication_names": unique_name}
    decoder = pgoutput_arrow.Decoder()

    def changes() -> list[Any]:
        for lsn, _, data in pg.get_binary_changes(unique_name, options):
            decoder.feed(bytes(data), lsn)
        decoder.flush()
        return decoder.take()

    out = tmp_path / "lake"
    sink_type = DeltaSink if fmt == "delta" else IcebergSink
    pg.execute(f"INSERT INTO {t} VALUES (1, 'a')")
    first = sink_type(out)
    first.write(changes())
    first.commit()
    pg.execute(f"INSERT INTO {t} VALUES (2, 'b'); UPDATE {t} SET v = 'c' WHERE id = 1")
    second = sink_type(out, change_log=True)  # a new run, which also keeps a change log
    second.write(changes())
    with _read_only(out), pytest.raises(LakeSinkError, match=f"public.{t}") as raised:
        second.commit()
    assert type(raised.value).__name__ == f"{sink_type.FORMAT}SinkError", raised.value
    if fmt == "delta":
        from deltalake import DeltaTable

        held = DeltaTable(str(out / f"public.{t}")).to_pyarrow_table()
    else:
        held = iceberg_catalog(out).load_table(("public", t)).scan().to_arrow()
    assert held.select(["id", "v"]).to_pylist() == [{"id": 1, "v": "a"}]


def test_a_slot_created_by_a_run_that_fails_is_dropped(pg18: PgServer, unique_name: str,
                                                      tmp_path: Path) -> None:
    """--create-slot --snapshot --format delta whose lake becomes read-only during the
    snapshot: the run fails in one line and drops the slot it created (it would hold WAL);
    once the lake is writable again the same command takes the snapshot and streams."""
    pg, p = pg18, unique_name
    setup(pg, p, None, prefill=PREFILL)
    runs = Runs(pg, p, "delta", True, tmp_path)
    runs.out.mkdir()
    runs.start()
    wait_until(lambda: runs.alive() and runs.snapshot_written(), 60, "the snapshot to start")
    assert runs.proc is not None
    try:
        with _read_only(runs.out):
            code = runs.proc.wait(timeout=60)
            err = runs.proc.stderr.read() if runs.proc.stderr else ""
    finally:
        if runs.proc.poll() is None:  # the lake never became read-only: the run must not outlive the test
            runs.proc.kill()
            runs.proc.wait()
    assert code == 1, err
    assert "dropped replication slot" in err and "error:" in err, err
    assert not pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (p,))
    workload_round(pg, p, 0, random.Random(1), ROUNDS)  # the next snapshot takes these
    runs.start("--idle-timeout", "3")
    assert runs.proc is not None
    code = runs.proc.wait(timeout=300)
    assert code == 0, runs.proc.stderr.read() if runs.proc.stderr else ""
    check_replicas(pg, p, runs.out)


def test_jsonl_with_a_snapshot_and_an_existing_slot_says_so(pg18: PgServer, unique_name: str,
                                                            tmp_path: Path) -> None:
    """stdout keeps no record of whether the snapshot it printed was complete: a restart of
    --create-slot --snapshot --format jsonl whose slot exists is refused in one line (drop
    the slot to take the snapshot again, or leave --snapshot out to resume from the slot)."""
    pg, p = pg18, unique_name
    setup(pg, p, None, prefill=10)
    runs = Runs(pg, p, "jsonl", True, tmp_path)
    runs.start("--idle-timeout", "1")
    assert runs.proc is not None and runs.proc.wait(timeout=120) == 0
    runs.start()
    assert runs.proc.wait(timeout=60) == 1
    err = runs.proc.stderr.read() if runs.proc.stderr else ""
    assert len(err.splitlines()) == 1 and "already exists" in err, err
    runs.cmd.remove("--snapshot")
    runs.start("--idle-timeout", "1")
    assert runs.proc.wait(timeout=120) == 0


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_slot_gone_under_an_output_is_not_created_again(pg18: PgServer, unique_name: str,
                                                         tmp_path: Path, fmt: str) -> None:
    """The output holds changes and the slot was dropped: --create-slot would make a new slot
    at the current WAL position and skip the changes in between; the run says so in one
    line instead, and creates nothing."""
    pg, p = pg18, unique_name
    setup(pg, p, None)
    runs = Runs(pg, p, fmt, False, tmp_path)
    runs.start()
    wait_until(runs.streaming, 60, "the stream to start")
    workload_round(pg, p, 0, random.Random(0), ROUNDS)
    end = pg.current_wal_lsn()
    wait_until(lambda: (slot_state(pg, p)[0] or 0) >= end, 60, "the changes to be written")
    runs.signal(STOP)
    pg.drop_slot(p)
    workload_round(pg, p, 1, random.Random(1), ROUNDS)  # changes no slot keeps
    runs.start()
    assert runs.proc is not None
    code = runs.proc.wait(timeout=60)
    err = runs.proc.stderr.read() if runs.proc.stderr else ""
    assert code == 1 and len(err.splitlines()) == 1, err
    assert f'replication slot "{p}" does not exist' in err and "lost" in err, err
    assert not pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (p,))
