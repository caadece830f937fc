"""The initial snapshot handed over to the change stream (pgoutput_arrow.live.snapshot,
``stream(..., snapshot=True)``, ``pgoutput-dump --snapshot``) on real PostgreSQL 18 and 15:
the replica built from the snapshot's rows and the changes equals PostgreSQL's final rows,
value by value, with writes running while the snapshot is read."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pgoutput_arrow import _internal
from pgoutput_arrow.exceptions import CopyDataError, ReplicationError
from pgoutput_arrow.live import LiveStream
from pg_harness import PgServer
from threads import CheckedThread
from replay import compare_state, replay, server_rows

DUMP = [sys.executable, "-m", "pgoutput_arrow.cli"]
LONG = "a value long enough to be toasted " * 200


def changes_of(batches: dict[str, list[pa.RecordBatch]], truncates: list[pa.RecordBatch]) -> Any:
    """What :func:`replay.replay` takes, from the batches a stream handed out."""
    tables = {}
    for name, bs in batches.items():
        unified = pgoutput_arrow.unify_schemas([b.schema for b in bs])
        tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, unified) for b in bs])
    trunc = (pa.Table.from_batches(truncates) if truncates
             else pa.table({"relations": pa.array([], pa.list_(pa.string())),
                            "_commit_lsn": pa.array([], pa.int64()), "_seq": pa.array([], pa.int64())}))
    return types.SimpleNamespace(tables=tables, truncates=trunc)


def assert_replica_equals_server(pg: PgServer, changes: Any, tables: list[str]) -> None:
    states = replay(changes, {t: ["id"] for t in tables})
    conn = pg.connect()
    try:
        for t in tables:
            name = f"public.{t}"
            table = changes.tables[name]
            compare_state(states[name], server_rows(conn, name, table), name)
    finally:
        conn.close()


def make_tables(pg: PgServer, p: str, rows: int) -> list[str]:
    main, toast, trunc, grow = f"{p}_main", f"{p}_toast", f"{p}_trunc", f"{p}_grow"
    pg.execute(f"CREATE TABLE {main} (id int PRIMARY KEY, name text, n numeric(12,3), "
               "at timestamptz, tags int[], raw bytea, mood text)")
    pg.execute(f"INSERT INTO {main} SELECT i, 'name ' || i, i / 7.0, "
               "'2024-01-01'::timestamptz + i * interval '1 minute', ARRAY[i, i * 2], "
               f"decode(md5(i::text), 'hex'), CASE WHEN i % 3 = 0 THEN NULL ELSE 'ok' END "
               f"FROM generate_series(1, {rows}) i")
    pg.execute(f"CREATE TABLE {toast} (id int PRIMARY KEY, doc text, other int)")
    pg.execute(f"ALTER TABLE {toast} ALTER COLUMN doc SET STORAGE EXTERNAL")
    pg.execute(f"INSERT INTO {toast} SELECT i, %s || i, i FROM generate_series(1, 40) i", (LONG,))
    pg.execute(f"CREATE TABLE {trunc} (id int PRIMARY KEY, v text)")
    pg.execute(f"INSERT INTO {trunc} SELECT i, 'v' || i FROM generate_series(1, 500) i")
    pg.execute(f"CREATE TABLE {grow} (id int PRIMARY KEY, v int)")
    pg.execute(f"INSERT INTO {grow} SELECT i, i FROM generate_series(1, 300) i")
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {main}, {toast}, {trunc}, {grow}")
    return [main, toast, trunc, grow]


def write_during_snapshot(pg: PgServer, tables: list[str], rows: int, step: int) -> None:
    """Updates and deletes of rows being snapshotted, TOAST updates (of the toasted column
    and of another one, which leaves it unchanged), a TRUNCATE, an added column."""
    main, toast, trunc, grow = tables
    conn = pg.connect()
    with conn.cursor() as cur:
        lo, hi = step * 50 + 1, step * 50 + 50
        cur.execute(f"UPDATE {main} SET name = name || ' upd', n = n + 1 WHERE id BETWEEN %s AND %s", (lo, hi))
        cur.execute(f"DELETE FROM {main} WHERE id BETWEEN %s AND %s", (rows - hi, rows - lo))
        cur.execute(f"UPDATE {main} SET id = id + %s WHERE id = %s", (10 * rows, rows // 2 + step))
        cur.execute(f"INSERT INTO {main} (id, name) VALUES (%s, 'new')", (rows + 1 + step,))
        cur.execute(f"UPDATE {toast} SET other = other + 1 WHERE id %% 3 = %s", (step % 3,))
        cur.execute(f"UPDATE {toast} SET doc = doc || 'x' WHERE id = %s", (step + 1,))
        if step == 1:
            cur.execute(f"TRUNCATE {trunc}")
            cur.execute(f"INSERT INTO {trunc} VALUES (1, 'after the truncate')")
            cur.execute(f"ALTER TABLE {grow} ADD COLUMN w text")
            cur.execute(f"UPDATE {grow} SET w = 'w' || id WHERE id % 10 = 0")
    conn.close()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_snapshot_then_changes_equal_the_final_select(pg: PgServer, unique_name: str, binary: bool) -> None:
    """The stream hands out the snapshot's rows, then the changes from the slot's consistent
    point: with writes committed right after the slot was created (before any row is read:
    they must be in the changes and not in the snapshot) and others while chunks are read
    on two connections, the replica equals PostgreSQL's rows value by value."""
    rows = 3000
    tables = make_tables(pg, unique_name, rows)
    step = [0]
    consistent: list[int] = []

    def on_snapshot(slot: str, lsn: int) -> None:
        consistent.append(lsn)
        write_during_snapshot(pg, tables, rows, 0)

    errors: list[BaseException] = []

    def writer() -> None:
        # In a thread of its own: the TRUNCATE and ALTER TABLE wait for the locks of the
        # snapshot's transactions, which end once the consumer took every chunk.
        try:
            for step in (1, 2, 3):
                write_during_snapshot(pg, tables, rows, step)
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    writes = CheckedThread(target=writer)
    s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, snapshot=True,
                              snapshot_connections=2, snapshot_chunk_bytes=8 * 8192, binary=binary,
                              on_snapshot=on_snapshot, idle_timeout=3.0)
    batches: dict[str, list[pa.RecordBatch]] = {}
    truncates: list[pa.RecordBatch] = []
    snapshot_rows = 0
    seen_change = False
    with s:
        for item in s:
            if item.snapshot:
                assert not seen_change, "a snapshot row after a change"
                snapshot_rows += item.num_rows
                ops = set(item.batch.column("_op").to_pylist())
                assert ops == {"snapshot"}
                assert set(item.batch.column("_commit_lsn").to_pylist()) == set(consistent)
                assert max(item.batch.column("_seq").to_pylist()) < 0
                if not writes.is_alive() and not step[0]:  # writes while the snapshot is read
                    step[0] = 1
                    writes.start()
            elif item.kind == "table":
                seen_change = True
                assert min(item.batch.column("_commit_lsn").to_pylist()) >= consistent[0]
            if item.kind == "table" and item.table:
                batches.setdefault(item.table, []).append(item.batch)
            elif item.kind == "truncates":
                truncates.append(item.batch)
            s.ack(item.ack_lsn)
        assert s.acked_lsn >= consistent[0]
    writes.join(timeout=60)
    assert not errors, errors
    assert snapshot_rows >= rows + 40 + 300
    assert seen_change
    assert_replica_equals_server(pg, changes_of(batches, truncates), tables)
    # The slot went on from the consistent point: nothing was confirmed before.
    confirmed = pg.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                          (unique_name,))
    assert pgoutput_arrow.lsn_to_int(confirmed) >= consistent[0]


def test_column_lists_row_filters_and_partitions(pg: PgServer, unique_name: str) -> None:
    """The snapshot reads what the publication publishes: its column list and row filter
    (15+), a partitioned table as its root (publish_via_partition_root) or as its leaves."""
    p = unique_name
    pg.execute(f"CREATE TABLE {p}_cols (id int PRIMARY KEY, secret text, shown int)")
    pg.execute(f"INSERT INTO {p}_cols SELECT i, 's' || i, i FROM generate_series(1, 100) i")
    pg.execute(f"CREATE TABLE {p}_part (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)")
    pg.execute(f"CREATE TABLE {p}_part_a PARTITION OF {p}_part FOR VALUES FROM (0) TO (50)")
    pg.execute(f"CREATE TABLE {p}_part_b PARTITION OF {p}_part FOR VALUES FROM (50) TO (1000)")
    pg.execute(f"INSERT INTO {p}_part SELECT i, i FROM generate_series(1, 99) i")
    pg.execute(f"CREATE PUBLICATION {p}_root FOR TABLE {p}_cols (id, shown) WHERE (id % 4 = 0), "
               f"{p}_part WITH (publish_via_partition_root = true)")
    pg.execute(f"CREATE PUBLICATION {p}_leaf FOR TABLE {p}_part")
    for pub, expect_tables in [(f"{p}_root", {f"public.{p}_cols", f"public.{p}_part"}),
                               (f"{p}_leaf", {f"public.{p}_part_a", f"public.{p}_part_b"})]:
        slot = f"{pub}_slot"
        got: dict[str, list[pa.RecordBatch]] = {}
        with pgoutput_arrow.stream(pg.dsn, slot=slot, publication=pub, temporary_slot=True, snapshot=True,
                                   idle_timeout=1.0) as s:
            for item in s:
                if item.snapshot:
                    got.setdefault(item.table or "", []).append(item.batch)
        assert set(got) == expect_tables
        if pub.endswith("_root"):
            cols = pa.Table.from_batches(got[f"public.{p}_cols"])
            assert [c for c in cols.column_names if not c.startswith("_")] == ["id", "shown"]
            assert sorted(cols.column("id").to_pylist()) == list(range(4, 101, 4))
            part = pa.Table.from_batches(got[f"public.{p}_part"])
            assert sorted(part.column("id").to_pylist()) == list(range(1, 100))
            assert part.schema.metadata[b"pg.table"] == f"public.{p}_part".encode()
        else:
            assert sorted(pa.Table.from_batches(got[f"public.{p}_part_a"]).column("id").to_pylist()) == \
                list(range(1, 50))


def test_a_table_added_later_is_snapshotted_without_gap_or_duplicate(pg18: PgServer, unique_name: str) -> None:
    """A table added to the publication while the stream runs: its snapshot at a temporary
    slot's consistent point, then only its changes that commit from there."""
    pg, p = pg18, unique_name
    pg.execute(f"CREATE TABLE {p}_a (id int PRIMARY KEY, v int)")
    pg.execute(f"CREATE TABLE {p}_late (id int PRIMARY KEY, v int)")
    pg.execute(f"INSERT INTO {p}_late SELECT i, i FROM generate_series(1, 200) i")
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {p}_a")
    s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, create_slot=True, temporary_slot=True,
                              idle_timeout=1.5)
    late: list[pa.RecordBatch] = []
    with s:
        pg.execute(f"INSERT INTO {p}_a VALUES (1, 1)")
        pg.execute(f"ALTER PUBLICATION {p} ADD TABLE {p}_late")
        # Changes after the ALTER and before the snapshot: in both, dropped from the stream.
        pg.execute(f"UPDATE {p}_late SET v = v + 1000 WHERE id <= 10")
        lsn = s.snapshot_table(f"public.{p}_late")
        pg.execute(f"UPDATE {p}_late SET v = -v WHERE id BETWEEN 5 AND 15")
        pg.execute(f"DELETE FROM {p}_late WHERE id > 190")
        for item in s:
            if item.table == f"public.{p}_late":
                late.append(item.batch)
                assert item.snapshot or min(item.batch.column("_commit_lsn").to_pylist()) >= lsn
            s.ack(item.ack_lsn)
    changes = changes_of({f"public.{p}_late": late}, [])
    state = replay(changes, {f"public.{p}_late": ["id"]})[f"public.{p}_late"]
    conn = pg.connect()
    compare_state(state, server_rows(conn, f"public.{p}_late", changes.tables[f"public.{p}_late"]), "late")
    conn.close()


def test_snapshot_needs_a_new_slot_and_a_gone_snapshot_says_so(pg18: PgServer, unique_name: str) -> None:
    pg = pg18
    pg.execute(f"CREATE TABLE {unique_name}_t (id int PRIMARY KEY)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {unique_name}_t")
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (unique_name,))
    with pytest.raises(ReplicationError, match="already exists: a snapshot is taken as its slot is created"):
        pgoutput_arrow.stream(pg.dsn, slot=unique_name, publication=unique_name, snapshot=True).open()
    from pgoutput_arrow.live.snapshot import SnapshotGone, open_snapshot_connection
    with pytest.raises(SnapshotGone, match="is gone"):
        open_snapshot_connection(pg.dsn, "00000003-00000002-1")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_copy_rows_decode_as_the_stream_decodes_them(pg18: PgServer, unique_name: str, binary: bool) -> None:
    """The COPY bytes PostgreSQL sends decode to the values the stream gives the same rows
    (special values included); every truncation of them is a CopyDataError naming the table
    and the byte offset."""
    pg = pg18
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TYPE {t}_mood AS ENUM ('sad', 'ok')")
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, s text, d date, i interval, j jsonb, u uuid, "
               f"f float8, a text[], n numeric(8,2), m {t}_mood, ip inet, r int4range)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.create_slot(unique_name)
    pg.execute(f"INSERT INTO {t} VALUES (1, 'x', 'infinity', '1 day', '{{\"k\": 1}}', "
               "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'NaN', ARRAY['a', NULL], 'NaN', 'ok', '10.0.0.1/8', "
               "'[1,5)'), (2, NULL, '2024-02-29', NULL, NULL, NULL, -0.5, '{}', 12.5, NULL, NULL, 'empty')")
    rows = pg.get_binary_changes(unique_name, {"proto_version": "1", "publication_names": unique_name,
                                               "binary": "true" if binary else "false"})
    pg.drop_slot(unique_name)
    stream = pgoutput_arrow.decode([(lsn, bytes(data)) for lsn, _, data in rows], binary=binary).tables[f"public.{t}"]
    conn = pg.connect()
    from pgoutput_arrow._catalog import relation_definition
    with conn.cursor() as cur:
        rel = relation_definition(cur, f"public.{t}", [unique_name])
    d = _internal.CopyDecoder(*rel.native_args(), lsn=7, commit_ts=0, first_seq=-5, binary=binary)
    cols = ", ".join(c[0] + ("::text" if text else "") for c, text in zip(rel.columns, d.text_columns))
    import io
    buf = io.BytesIO()
    with conn.cursor() as cur:
        cur.copy_expert(f"COPY (SELECT {cols} FROM {t}) TO STDOUT (FORMAT binary)", buf)
    conn.close()
    data = buf.getvalue()

    def decode(part: bytes) -> pa.Table:
        d = _internal.CopyDecoder(*rel.native_args(), lsn=7, commit_ts=0, first_seq=-5, binary=binary)
        d.push(part)
        return pa.Table.from_batches([pa.record_batch(b) for b in d.finish()])

    whole = decode(data)
    for c in [c[0] for c in rel.columns] + ["_special"]:
        assert whole.schema.field(c).type == stream.schema.field(c).type, c
        ours, theirs = whole.column(c).combine_chunks(), stream.column(c).combine_chunks()
        if pa.types.is_floating(ours.type):  # NaN equals NaN, bit for bit
            ours, theirs = ours.view(pa.int64()), theirs.view(pa.int64())
        assert ours.equals(theirs), (c, ours, theirs)
    assert whole.column("_op").to_pylist() == ["snapshot"] * 2
    assert whole.column("_seq").to_pylist() == [-5, -4]
    for end in range(len(data)):
        with pytest.raises(CopyDataError, match=f"COPY data of public.{t}.*truncated") as e:
            decode(data[:end])
        assert e.value.table == f"public.{t}" and e.value.offset is not None


# --------------------------------------------------------------------------- the CLI


def read_dir(out: Path, table: str) -> tuple[pa.Table, list[str]]:
    directory = out / table
    files = sorted(p.name for p in directory.glob("*.parquet"))
    tables = [pq.read_table(directory / f) for f in files]
    return pa.concat_tables(tables), files


def wrote_snapshot_files(out: Path, since: float) -> bool:
    """Whether snapshot files were written after ``since`` (a run deletes those of a
    snapshot cut short while this looks)."""
    for f in out.glob("*/snapshot-*"):
        try:
            if f.stat().st_mtime > since:
                return True
        except FileNotFoundError:
            continue
    return False


def run_dump_with_kills(pg: PgServer, p: str, out: Path, kills: int, seed: int,
                        snapshot_kills: int) -> tuple[list[str], str]:
    """pgoutput-dump --snapshot killed ``kills`` times (-9) while writes run: the first
    ``snapshot_kills`` in the middle of the snapshot (once the run wrote snapshot files of
    its own, plus up to 0.3 s), the others at random points (of the snapshot or of the
    stream after it); then run to the end. Returns the tables and the runs' stderr."""
    rows = 20000
    tables = make_tables(pg, p, rows)
    cmd = [*DUMP, "--dsn", pg.dsn, "--slot", p, "--create-slot", "--publication", p, "--snapshot",
           "--snapshot-connections", "2", "--snapshot-chunk-bytes", str(8192),
           "--format", "parquet", "--output", str(out), "--commit-interval", "0.2"]
    rng = random.Random(seed)
    messages = []
    writers = []
    for k in range(kills):
        started = time.time()
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        writers.append(CheckedThread(target=write_during_snapshot, args=(pg, tables, rows, k + 1),
                                     daemon=True))
        writers[-1].start()
        if k < snapshot_kills:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None and not wrote_snapshot_files(out, started):
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        messages.append(proc.stderr.read() if proc.stderr else "")
        deadline = time.monotonic() + 20
        while pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (p,)):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    for w in writers:  # the writes (a TRUNCATE waits for the snapshot's locks) are committed
        w.join(timeout=60)
    proc = subprocess.run([*cmd, "--idle-timeout", "3"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tables, "".join(messages) + proc.stderr


def check_dump(pg: PgServer, out: Path, tables: list[str]) -> None:
    batches: dict[str, list[pa.RecordBatch]] = {}
    for t in tables:
        table, files = read_dir(out, f"public.{t}")
        # (a table truncated before the snapshot read it has no snapshot rows)
        assert t.endswith("_trunc") or any(f.startswith("snapshot-") for f in files), files
        batches[f"public.{t}"] = table.to_batches()
    trunc_dir = out / "_truncates"
    truncates = [b for f in sorted(trunc_dir.glob("*.parquet")) for b in pq.read_table(f).to_batches()] \
        if trunc_dir.exists() else []
    changes = changes_of({k: v for k, v in batches.items() if v}, truncates)
    from pgoutput_arrow._files import decoded
    changes.tables = {k: decoded(v) for k, v in changes.tables.items()}
    assert_replica_equals_server(pg, changes, tables)
    record = json.loads((out / "_snapshot.json").read_text())
    checkpoint = json.loads((out / "_checkpoint.json").read_text())
    assert pgoutput_arrow.lsn_to_int(checkpoint["lsn"]) >= pgoutput_arrow.lsn_to_int(record["lsn"])


def test_cli_snapshot_exactly_once_across_kill_9(pg: PgServer, unique_name: str, tmp_path: Path) -> None:
    """kill -9 at random points of the snapshot (or of the stream after it): each restart
    either starts the interrupted snapshot over (its exported snapshot died with the
    process) or resumes the stream; the output holds every row once."""
    seed = int(os.environ.get("PGOUTPUT_KILL_SEED", time.time_ns() % 2**32))
    print(f"kill points: PGOUTPUT_KILL_SEED={seed}")
    out = tmp_path / "out"
    tables, stderr = run_dump_with_kills(pg, unique_name, out, kills=3, seed=seed, snapshot_kills=2)
    print(stderr)
    assert stderr.count("was interrupted and its exported snapshot ended with that process: "
                        "starting it over") >= 2
    check_dump(pg, out, tables)
