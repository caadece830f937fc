"""The online snapshot (``stream(..., online_snapshot=True)``, pgoutput_arrow.live.online_snapshot)
on real PostgreSQL 18 and 15: tables read in key order, chunk by chunk, while random writes
run (inserts, updates, deletes, key changes, TOAST updates that leave the value unsent, into
the chunk being read), resumed from its stored state after the consumer stopped at random
points; the replica built from everything handed out equals PostgreSQL's rows value by value,
applied in commit order and in the order handed out."""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pgoutput_arrow._files import decoded
from pg_harness import PgServer
from delta_workload import check_replicas
from replay import compare_state, replay, server_rows
from threads import CheckedThread

LONG = "a value long enough to be toasted " * 200


def make_tables(pg: PgServer, p: str, rows: int, keyless: bool = False) -> dict[str, list[str]]:
    """The tables and their keys: an int key with a TOASTed column, a uuid key, a two-column
    key with text under the C collation, and with ``keyless`` a table without a key (taken
    by an exported snapshot instead)."""
    pg.execute(f"CREATE TABLE {p}_main (id int PRIMARY KEY, name text, n numeric(12,3), at timestamptz, doc text)")
    pg.execute(f"ALTER TABLE {p}_main ALTER COLUMN doc SET STORAGE EXTERNAL")
    pg.execute(f"INSERT INTO {p}_main SELECT i, 'name ' || i, i / 7.0, '2024-01-01'::timestamptz + i * "
               f"interval '1 minute', CASE WHEN i %% 5 = 0 THEN %s || i END FROM generate_series(1, {rows}) i",
               (LONG,))
    pg.execute(f"CREATE TABLE {p}_uuid (id uuid PRIMARY KEY, v int)")
    pg.execute(f"INSERT INTO {p}_uuid SELECT md5(i::text)::uuid, i FROM generate_series(1, {rows // 4}) i")
    pg.execute(f'CREATE TABLE {p}_comp (a int, b text COLLATE "C", v int, PRIMARY KEY (a, b))')
    pg.execute(f"INSERT INTO {p}_comp SELECT i % 17, 'b' || i, i FROM generate_series(1, {rows // 4}) i")
    tables = {f"{p}_main": ["id"], f"{p}_uuid": ["id"], f"{p}_comp": ["a", "b"]}
    if keyless:
        pg.execute(f"CREATE TABLE {p}_nokey (v int, w text)")
        pg.execute(f"ALTER TABLE {p}_nokey REPLICA IDENTITY FULL")
        pg.execute(f"INSERT INTO {p}_nokey SELECT i, 'w' || i FROM generate_series(1, 50) i")
        tables[f"{p}_nokey"] = []
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {', '.join(tables)}")
    return tables


def random_writes(pg: PgServer, p: str, rows: int, stop: threading.Event, seed: int,
                  keyless: bool = False) -> None:
    """Small transactions of random writes until ``stop``."""
    rnd = random.Random(seed)
    conn = pg.connect()
    conn.autocommit = False
    next_id = [rows * 10]
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                for _ in range(rnd.randint(1, 4)):
                    i = rnd.randint(1, rows + 200)
                    r = rnd.random()
                    if keyless and r < 0.05:
                        cur.execute(f"UPDATE {p}_nokey SET w = w || '+' WHERE v = %s", (i % 50,))
                    elif r < 0.3:  # leaves doc unsent (an unchanged TOAST value)
                        cur.execute(f"UPDATE {p}_main SET name = name || '+', n = n + 1 WHERE id = %s", (i,))
                    elif r < 0.4:
                        cur.execute(f"UPDATE {p}_main SET doc = %s WHERE id = %s", (LONG + str(rnd.random()), i))
                    elif r < 0.5:
                        cur.execute(f"DELETE FROM {p}_main WHERE id = %s", (i,))
                    elif r < 0.6:
                        next_id[0] += 1
                        cur.execute(f"INSERT INTO {p}_main (id, name, doc) VALUES (%s, 'new', %s) "
                                    "ON CONFLICT DO NOTHING", (rnd.choice([next_id[0], i]), LONG))
                    elif r < 0.7:  # a key change, TOAST value unsent; into the part read or not
                        to = rnd.randint(1, rows * 2)
                        cur.execute(f"UPDATE {p}_main SET id = %s WHERE id = %s AND NOT EXISTS "
                                    f"(SELECT FROM {p}_main WHERE id = %s)", (to, i, to))
                    elif r < 0.8:
                        cur.execute(f"UPDATE {p}_uuid SET v = v + 1 WHERE id = md5(%s::text)::uuid", (i,))
                    elif r < 0.85:
                        cur.execute(f"DELETE FROM {p}_uuid WHERE id = md5(%s::text)::uuid", (i,))
                    elif r < 0.9:
                        cur.execute(f"INSERT INTO {p}_uuid VALUES (%s, 0)", (str(uuid.UUID(int=rnd.getrandbits(128))),))
                    elif r < 0.95:
                        cur.execute(f"UPDATE {p}_comp SET v = v + 1 WHERE a = %s", (i % 17,))
                    else:
                        cur.execute(f"UPDATE {p}_comp SET b = b || 'x' WHERE a = %s AND b = %s", (i % 17, f"b{i}"))
                conn.commit()
                time.sleep(rnd.random() * 0.004)
    finally:
        conn.close()


def stop_after_the_writes(pg: PgServer, s: Any, stop: threading.Event, writer: threading.Thread) -> None:
    """Ends the writes, then the stream ``s`` once it reached the server's WAL end of that
    moment."""
    stop.set()
    writer.join(timeout=60)
    s.stop_at_lsn = pgoutput_arrow.lsn_to_int(str(pg.scalar("SELECT pg_current_wal_lsn()::text")))


class Replica:
    """What a consumer stored: every batch of each group it stored, its last ack and the
    online snapshot's last state."""

    def __init__(self) -> None:
        self.batches: dict[str, list[pa.RecordBatch]] = {}
        self.ack = 0
        self.state: Any = None
        self.chunks = 0

    def store(self, group: list[Any], ack: int) -> None:
        for item in group:
            if item.kind == "table" and item.table:
                self.batches.setdefault(item.table, []).append(item.batch)
            if item.snapshot_state is not None:
                self.state = item.snapshot_state
        self.chunks += any(item.snapshot for item in group)
        self.ack = ack

    def finished(self) -> bool:
        return bool(self.state) and all(t["done"] and not t["again"] for t in self.state["tables"].values())

    def changes(self) -> Any:
        tables = {}
        for name, bs in self.batches.items():
            unified = pgoutput_arrow.unify_schemas([b.schema for b in bs])
            tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, unified) for b in bs])
        return types.SimpleNamespace(tables=tables, truncates=pa.table({
            "relations": pa.array([], pa.list_(pa.string())), "_commit_lsn": pa.array([], pa.int64()),
            "_seq": pa.array([], pa.int64())}))


def run_until(pg: PgServer, p: str, replica: Replica, *, stop_after_groups: int | None,
              writes_done: threading.Event, **options: Any) -> bool:
    """Streams into ``replica`` from where it stands; True when the snapshot finished and the
    stream caught up with the end of the writes, False when stopped after that many groups
    (a consumer killed: the group in hand is not stored)."""
    s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, snapshot_chunk_rows=97,
                              snapshot_state=replica.state, start_lsn=replica.ack or None,
                              flush_interval=0.2, **options)
    n = 0
    with s:
        for group, ack in s.groups():
            n += 1
            if stop_after_groups is not None and n > stop_after_groups:
                return False
            replica.store(group, ack)
            s.ack(ack)
            if replica.finished() and writes_done.is_set() and s.stop_at_lsn is None:
                s.stop_at_lsn = pgoutput_arrow.lsn_to_int(str(pg.scalar("SELECT pg_current_wal_lsn()::text")))
    return True


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_online_snapshot_with_random_writes_and_stops_equals_the_table(
        pg: PgServer, unique_name: str, binary: bool) -> None:
    p, rows = unique_name, 2500
    keys = make_tables(pg, p, rows)
    pg.create_slot(p)
    stop, done = threading.Event(), threading.Event()
    writer = CheckedThread(target=random_writes, args=(pg, p, rows, stop, 7 + binary))
    writer.start()
    replica = Replica()
    rnd = random.Random(11)
    stops = 0
    try:
        # Stopped at random points (a group handed out but not stored) while chunks are read.
        while stops < 6 and not replica.finished():
            run_until(pg, p, replica, stop_after_groups=rnd.randint(2, 12), writes_done=done, binary=binary)
            stops += 1
    finally:
        stop.set()
        writer.join(timeout=60)
    done.set()
    assert run_until(pg, p, replica, stop_after_groups=None, writes_done=done, binary=binary)
    assert replica.chunks > 10 and stops >= 3, (replica.chunks, stops)
    assert_replica_equals_server(pg, replica, keys)


def assert_replica_equals_server(pg: PgServer, replica: Replica, keys: dict[str, list[str]]) -> None:
    changes = replica.changes()
    conn = pg.connect()
    try:
        for arrival in (False, True):
            states = replay(changes, {f"public.{t}": k for t, k in keys.items()}, online=True, arrival=arrival)
            for t in keys:
                name = f"public.{t}"
                compare_state(states[name], server_rows(conn, name, changes.tables[name]),
                              f"{name} ({'in the order handed out' if arrival else 'in commit order'})")
    finally:
        conn.close()
    for t in keys:
        ops = set(changes.tables[f"public.{t}"].column("_op").to_pylist())
        assert "snapshot" in ops, (t, ops)


def test_a_table_without_a_key_is_taken_by_an_exported_snapshot(pg: PgServer, unique_name: str) -> None:
    """A table the online snapshot cannot chunk in key order is said in one line and taken
    by an exported snapshot of its own, the others online, writes running."""
    p, rows = unique_name, 600
    keys = make_tables(pg, p, rows, keyless=True)
    pg.create_slot(p)
    stop, done = threading.Event(), threading.Event()
    writer = CheckedThread(target=random_writes, args=(pg, p, rows, stop, 3, True))
    writer.start()
    replica = Replica()
    try:
        with pytest.warns(RuntimeWarning, match=rf"public.{p}_nokey is taken by an exported snapshot, not "
                                                r"online: no primary key or replica identity index"):
            s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True,
                                      snapshot_chunk_rows=200, flush_interval=0.2)
            s.open()
        with s:
            for group, ack in s.groups():
                replica.store(group, ack)
                s.ack(ack)
                if replica.finished() and not stop.is_set():
                    stop_after_the_writes(pg, s, stop, writer)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert f"public.{p}_nokey" in replica.state["exported"]
    assert_replica_equals_server(pg, replica, keys)


def test_a_chunk_is_exported_only_while_the_stream_keeps_up(pg: PgServer, unique_name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With exported chunks (Spark's executors read them), a chunk is exported only once the
    consumer committed a batch (its readers run), and only while the slot's walsender is close
    to the server's flushed WAL: its snapshot would otherwise be held while the readers start,
    or while the stream reads its way to the watermark. Before the first commit, or with a
    walsender "behind" (CATCH_UP_BYTES = -1), the chunk's rows are read on the stream's side at
    once instead; the snapshot goes on either way, and its rows are the table's."""
    from pgoutput_arrow.live import online_feed
    from pgoutput_arrow.live.snapshot import open_snapshot_connection

    p, rows = unique_name, 400
    make_tables(pg, p, rows)
    pg.create_slot(p)
    s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, snapshot_chunk_rows=100,
                              flush_interval=0.1, snapshot_tables=[f"public.{p}_main"])
    s.online.export_chunks = True
    kinds: list[str] = []
    keys: list[int] = []
    try:
        s.open()
        # What it looks at: the slot's walsender, seen by the stream's own user.
        assert pg.query("SELECT r.sent_lsn IS NOT NULL FROM pg_replication_slots s JOIN pg_stat_replication r "
                        "ON r.pid = s.active_pid WHERE s.slot_name = %s", (p,)) == [(True,)]
        started = time.monotonic()
        while s.snapshot_pending:
            # The first chunk: nothing committed yet. The third: the walsender "behind". Else
            # "keeping up" whatever WAL the other tests write on this server meanwhile.
            monkeypatch.setattr(online_feed, "CATCH_UP_BYTES", -1 if len(kinds) == 2 else 1 << 62)
            group = s.poll(wait=False)
            for b in group[0] if group else []:
                if b.read_elsewhere is not None and b.read_elsewhere.parts:  # (past the last key: none)
                    kinds.append("exported")
                    conn = open_snapshot_connection(pg.dsn, b.read_elsewhere.snapshot_name)
                    keys += [k for part in range(len(b.read_elsewhere.parts))
                             for batch in b.read_elsewhere.read(conn, part) for k in batch.column("id").to_pylist()]
                    conn.close()
                elif b.snapshot and b.batch.num_rows:
                    kinds.append("read here")
                    keys += b.batch.column("id").to_pylist()
            if group:  # the consumer committed what it took (as Spark commits, up to its ack_lsn)
                s.online.release_exported(group[1])
            assert time.monotonic() - started < 120
    finally:
        s.close()
    assert kinds == ["read here", "exported", "read here", "exported"], kinds
    assert sorted(keys) == [r[0] for r in pg.query(f"SELECT id FROM {p}_main ORDER BY id")]


def test_snapshot_tables_takes_only_the_tables_named(pg: PgServer, unique_name: str) -> None:
    """``snapshot_tables``: the online snapshot (and the exported one) reads only the tables
    named, while every published table's changes stream; a table not published, or the
    option without a snapshot, fails before anything is created on the server."""
    p, rows = unique_name, 300
    make_tables(pg, p, rows)
    pg.create_slot(p)
    pg.execute(f"INSERT INTO {p}_uuid VALUES (gen_random_uuid(), -1)")
    replica = Replica()
    s = stream_until_finished(pg, p, replica, snapshot_tables=f"public.{p}_main", snapshot_chunk_rows=100)
    changes = replica.changes()
    main = changes.tables[f"public.{p}_main"]
    assert main.filter(pa.compute.equal(main.column("_op"), "snapshot")).num_rows == rows
    uuid_ops = changes.tables[f"public.{p}_uuid"].column("_op").to_pylist()
    assert uuid_ops == ["insert"], uuid_ops  # its change, none of its rows
    assert f"public.{p}_comp" not in changes.tables
    assert list(replica.state["tables"]) == [f"public.{p}_main"], replica.state
    assert s.snapshot_tables == (f"public.{p}_main",)

    slot = f"{p}_x"
    with pytest.raises(pgoutput_arrow.ReplicationError, match=rf"public.nope not published by {p}"):
        pgoutput_arrow.stream(pg.dsn, slot=slot, publication=p, create_slot=True, online_snapshot=True,
                              snapshot_tables=["public.nope"]).open()
    with pytest.raises(ValueError, match="snapshot_tables names the tables of a snapshot"):
        pgoutput_arrow.stream(pg.dsn, slot=slot, publication=p, snapshot_tables=[f"public.{p}_main"])
    with pytest.raises(ValueError, match=r"tables as \"schema.table\", not 'main'"):
        pgoutput_arrow.stream(pg.dsn, slot=slot, publication=p, online_snapshot=True, snapshot_tables="main")

    got: dict[str, int] = {}
    with pgoutput_arrow.stream(pg.dsn, slot=slot, publication=p, create_slot=True, snapshot=True,
                               snapshot_tables=[f"public.{p}_comp"], idle_timeout=1) as s:
        for batch in s:
            if batch.kind == "table" and batch.snapshot:
                got[batch.table] = got.get(batch.table, 0) + batch.num_rows
            s.ack(batch.ack_lsn)
    assert got == {f"public.{p}_comp": rows // 4}, got
    pg.drop_slot(slot)


def stream_until_finished(pg: PgServer, p: str, replica: Replica, on_group: Any = None, **options: Any) -> Any:
    """Streams the online snapshot of publication ``p`` into ``replica`` until it finished
    and the stream reached the server's WAL end of that moment; ``on_group(replica)`` after
    each stored group. Returns the stream (closed)."""
    s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, flush_interval=0.2,
                              **options)
    with s:
        for group, ack in s.groups():
            replica.store(group, ack)
            s.ack(ack)
            if on_group is not None:
                on_group(replica)
            if replica.finished() and s.stop_at_lsn is None:
                s.stop_at_lsn = pgoutput_arrow.lsn_to_int(str(pg.scalar("SELECT pg_current_wal_lsn()::text")))
    return s


def test_columns_added_with_defaults_and_dropped_during_the_snapshot(pg: PgServer, unique_name: str) -> None:
    """``ADD COLUMN ... DEFAULT`` (a value every row has without a change to carry it) and
    ``DROP COLUMN`` between two chunks: each chunk reads the table's columns as they are when
    it is read, so every row read after the ADD has the default, and the chunks after the
    DROP are read at all. (Rows handed out before the ADD keep null there, as in any change
    stream: the ADD is no change of theirs.) The replica equals the table on every other
    column."""
    p, rows = unique_name, 600
    make_tables(pg, p, rows)
    pg.create_slot(p)
    altered: list[int] = []

    def alter(replica: Replica) -> None:
        if replica.chunks == 2 and not altered:
            pg.execute(f"ALTER TABLE {p}_main ADD COLUMN flag text DEFAULT 'new', ADD COLUMN w int DEFAULT 5")
            altered.append(pgoutput_arrow.lsn_to_int(str(pg.scalar("SELECT pg_current_wal_lsn()::text"))))
        elif replica.chunks == 4 and len(altered) == 1:
            pg.execute(f"ALTER TABLE {p}_main DROP COLUMN n")
            pg.execute(f"UPDATE {p}_main SET w = 6 WHERE id % 50 = 0")
            altered.append(0)

    replica = Replica()
    stream_until_finished(pg, p, replica, on_group=alter, snapshot_chunk_rows=100,
                          snapshot_tables=f"public.{p}_main")
    assert len(altered) == 2
    name = f"public.{p}_main"
    changes = replica.changes()
    main = changes.tables[name]
    snap = main.filter(pa.compute.equal(main.column("_op"), "snapshot")).to_pylist()
    after = [r for r in snap if r["_lsn"] > altered[0]]
    assert len(after) >= 300 and all(r["flag"] == "new" and r["w"] in (5, 6) for r in after), [(r["id"], r["flag"], r["w"]) for r in after if r["flag"] != "new" or r["w"] not in (5, 6)][:5]
    assert all(r["flag"] is None for r in snap if r["_lsn"] < altered[0])
    states = replay(changes, {name: ["id"]}, online=True)
    conn = pg.connect()
    try:
        compare_state(states[name], server_rows(conn, name, main, columns=["id", "name", "at", "doc"]), name)
    finally:
        conn.close()


@pytest.mark.parametrize("stop", [False, True], ids=["through", "stopped-after-the-change"])
def test_a_row_moved_into_the_part_read_with_its_toast_value_unsent_is_read_again(
        pg: PgServer, unique_name: str, stop: bool) -> None:
    """A key change of a row not read yet into the part already read, its TOAST value unsent
    (the replica never held the row): the row is read again, and the replica has its value;
    also when the consumer stops right after storing the group of that change, before the
    next chunk (the key to read again is in the state that group carries)."""
    p = unique_name
    pg.execute(f"CREATE TABLE {p} (id int PRIMARY KEY, v int, doc text)")
    pg.execute(f"ALTER TABLE {p} ALTER COLUMN doc SET STORAGE EXTERNAL")
    pg.execute(f"INSERT INTO {p} SELECT i, i, %s || i FROM generate_series(1, 1000) i", (LONG,))
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {p}")
    pg.create_slot(p)
    replica = Replica()
    moved: list[int] = []

    def move(r: Replica) -> None:
        if r.chunks == 1 and not moved:
            moved.append(1)
            pg.execute(f"UPDATE {p} SET id = 0, v = -1 WHERE id = 900")  # doc unsent
            pg.execute(f"UPDATE {p} SET v = -2 WHERE id = 0")  # and again, on a row not held whole

    if stop:
        with pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, flush_interval=0.2,
                                   snapshot_chunk_rows=100) as s:
            for group, ack in s.groups():
                replica.store(group, ack)
                s.ack(ack)
                move(replica)
                if any(i.kind == "table" and not i.snapshot and 0 in i.batch.column("id").to_pylist()
                       for i in group):
                    break  # the consumer stops: the next chunk is not stored
        assert ["0"] in replica.state["tables"][f"public.{p}"]["again"]
    s = stream_until_finished(pg, p, replica, on_group=move, snapshot_chunk_rows=100,
                              snapshot_state=replica.state, start_lsn=replica.ack or None)
    assert moved and (stop or s.online.current.reread >= 1)
    assert_replica_equals_server(pg, replica, {p: ["id"]})


@pytest.mark.parametrize("version", [18, 15])
def test_a_change_committed_but_not_yet_visible_wins_over_the_chunk(version: int, unique_name: str) -> None:
    """PostgreSQL writes a commit before it makes it visible; a synchronous standby that does
    not answer holds it there. The stream hands out such a change (its commit is in the WAL)
    while a chunk's snapshot does not see it: the chunk's stale rows of those keys are
    dropped (the whole UPDATE wins) or read again once visible (an UPDATE that left a TOAST
    value unsent); the replica ends equal to the table."""
    p = unique_name
    with PgServer(version=version) as pg:
        pg.execute(f"CREATE TABLE {p} (id int PRIMARY KEY, v text, doc text)")
        pg.execute(f"ALTER TABLE {p} ALTER COLUMN doc SET STORAGE EXTERNAL")
        pg.execute(f"INSERT INTO {p} SELECT i, 'old', %s || i FROM generate_series(1, 300) i", (LONG,))
        pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {p}")
        pg.create_slot(p)
        pg.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        pg.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)
        held = pg.connect()
        pids: list[int] = []

        def commit_and_wait() -> None:
            with held.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                pids.append(cur.fetchone()[0])
                # Committed in the WAL, waiting for the standby: invisible to everyone else.
                cur.execute(f"UPDATE {p} SET v = 'new', doc = 'short' WHERE id = 10; "
                            f"UPDATE {p} SET v = 'new' WHERE id = 40")  # doc unsent

        waiter = threading.Thread(target=commit_and_wait)
        waiter.start()
        deadline = time.time() + 30
        while time.time() < deadline and not pg.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"):
            time.sleep(0.05)
        assert pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == 1
        replica = Replica()
        released: list[int] = []

        def release(r: Replica) -> None:
            if r.chunks >= 4 and not released:
                released.append(1)
                pg.execute("ALTER SYSTEM RESET synchronous_standby_names")
                pg.execute("SELECT pg_reload_conf()")

        with pg.connect() as other, other.cursor() as cur:
            cur.execute(f"SELECT v FROM {p} WHERE id = 10")
            assert cur.fetchone()[0] == "old"  # not visible yet
        s = stream_until_finished(pg, p, replica, on_group=release, snapshot_chunk_rows=50)
        waiter.join(timeout=30)
        held.close()
        assert released and s.online.current.dropped >= 2, (s.online.current.dropped, s.online.current.reread)
        assert s.online.current.reread >= 1
        assert pg.scalar(f"SELECT v FROM {p} WHERE id = 40") == "new"
        assert_replica_equals_server(pg, replica, {p: ["id"]})


def read_state(out: Path, fmt: str = "parquet") -> Any:
    """The online snapshot's state kept with ``out`` (None: none yet)."""
    try:
        if fmt in ("delta", "iceberg"):
            return json.loads((out / "_online_snapshot.json").read_text())
        return json.loads((out / "_checkpoint.json").read_text()).get("online_snapshot")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_cli_online_snapshot_resumes_after_kill_9(pg: PgServer, unique_name: str, tmp_path: Path,
                                                  fmt: str) -> None:
    """``pgoutput-dump --online-snapshot --format parquet|delta`` killed (-9) at random points
    while random writes run, then the same command to the end: the chunks' progress is kept
    with the output (``_checkpoint.json`` with the files it counts; ``_online_snapshot.json``
    once the Delta tables committed), each restart resumes at the next chunk, and the output
    equals the tables value by value."""
    seed = int(os.environ.get("PGOUTPUT_KILL_SEED", time.time_ns() % 2**32))
    # A longer soak: PGOUTPUT_ONLINE_KILLS=20 PGOUTPUT_ONLINE_ROWS=100000.
    kills = int(os.environ.get("PGOUTPUT_ONLINE_KILLS", "5"))
    print(f"kill points: PGOUTPUT_KILL_SEED={seed}, {kills} kills")
    p, rows = unique_name, int(os.environ.get("PGOUTPUT_ONLINE_ROWS", "3000"))
    keys = make_tables(pg, p, rows)
    out = tmp_path / "out"
    # A chunk is a commit of its own (the chunk's state is stored with it); an Iceberg commit
    # rewrites the files its rows touch and took 0.5 s here, so its chunks are larger: about
    # 25 a table, not 100 (the last run took 68 s of 80 with 100).
    chunk_rows = max(40, rows // (25 if fmt == "iceberg" else 100))
    cmd = [sys.executable, "-m", "pgoutput_arrow.cli", "--dsn", pg.dsn, "--slot", p, "--create-slot",
           "--publication", p, "--online-snapshot", "--snapshot-chunk-rows", str(chunk_rows),
           "--format", fmt,
           "--output", str(out), "--commit-interval", "0.1" if fmt == "parquet" else "0.5"]
    rng = random.Random(seed)
    stop = threading.Event()
    writer = CheckedThread(target=random_writes, args=(pg, p, rows, stop, seed))
    writer.start()
    states: list[Any] = []
    try:
        for _ in range(kills):
            before = states[-1] if states else None
            proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
            # Killed once this run stored a chunk of its own, at a random point after it.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and read_state(out, fmt) == before:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            deadline = time.monotonic() + 20
            while pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (p,)):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            states.append(read_state(out, fmt))
    finally:
        stop.set()
        writer.join(timeout=60)
    last = subprocess.run([*cmd, "--idle-timeout", "3"], capture_output=True, text=True, timeout=600)
    assert last.returncode == 0, last.stderr
    final = read_state(out, fmt)
    assert all(t["done"] and not t["again"] for t in final["tables"].values()), final
    # The kills landed inside the snapshot: each resumed where the one before stood.
    progressed = [s for s in states if s is not None]
    assert len(progressed) >= 3 and any(not all(t["done"] for t in s["tables"].values()) for s in progressed), states
    if fmt != "parquet":
        check_replicas(pg, p, out, fmt, tables=list(keys))
        return
    replica = Replica()
    for t in keys:
        directory = out / f"public.{t}"
        files = sorted(directory.glob("*.parquet"))
        replica.batches[f"public.{t}"] = [b for f in files for b in decoded(pq.read_table(f)).to_batches()]
    assert_replica_equals_server(pg, replica, keys)


def test_a_table_added_to_the_publication_and_a_resnapshot_message(
        pg: PgServer, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table added to the publication while the stream runs is read online (the stream
    looks for one every few seconds), and a message ``pgoutput_arrow.resnapshot`` with a
    table's name has it read again; writes run on both; the replica equals the tables."""
    from pgoutput_arrow.live import online_feed

    monkeypatch.setattr(online_feed, "PUBLICATION_POLL_S", 0.3)
    p = unique_name
    a, b = f"{p}_a", f"{p}_b"
    pg.execute(f"CREATE TABLE {a} (id int PRIMARY KEY, v int); "
               f"INSERT INTO {a} SELECT i, i FROM generate_series(1, 300) i")
    pg.execute(f"CREATE TABLE {b} (id bigint PRIMARY KEY, v text); "
               f"INSERT INTO {b} SELECT i, 'v' || i FROM generate_series(1, 500) i")
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {a}")
    pg.create_slot(p)
    replica = Replica()
    steps: list[str] = []
    snapshot_rows: dict[str, int] = {}

    def on_group(r: Replica) -> None:
        tables = r.state["tables"] if r.state else {}
        if not steps and tables.get(f"public.{a}", {}).get("done"):
            steps.append("added")
            pg.execute(f"ALTER PUBLICATION {p} ADD TABLE {b}")
            pg.execute(f"UPDATE {b} SET v = v || '+' WHERE id % 7 = 0")
            pg.execute(f"UPDATE {a} SET v = -v WHERE id % 5 = 0")
        elif steps == ["added"] and tables.get(f"public.{b}", {}).get("done"):
            steps.append("signalled")
            pg.execute("SELECT pg_logical_emit_message(true, 'pgoutput_arrow.resnapshot', %s)", (f"public.{a}",))
            pg.execute(f"DELETE FROM {a} WHERE id % 11 = 0")
        elif steps == ["added", "signalled"] and not tables[f"public.{a}"]["done"]:
            steps.append("reading again")

    s = pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, snapshot_chunk_rows=64,
                              flush_interval=0.2)
    with s:
        for group, ack in s.groups():
            replica.store(group, ack)
            s.ack(ack)
            for item in group:
                if item.snapshot:
                    snapshot_rows[item.table or ""] = snapshot_rows.get(item.table or "", 0) + item.num_rows
            on_group(replica)
            if len(steps) == 3 and replica.finished() and s.stop_at_lsn is None:
                s.stop_at_lsn = pgoutput_arrow.lsn_to_int(str(pg.scalar("SELECT pg_current_wal_lsn()::text")))
    assert steps == ["added", "signalled", "reading again"]
    assert snapshot_rows[f"public.{b}"] == 500
    assert snapshot_rows[f"public.{a}"] >= 300 + 240, snapshot_rows  # read twice
    assert_replica_equals_server(pg, replica, {a: ["id"], b: ["id"]})


@pytest.mark.timeout(300)
def test_on_a_standby_the_online_snapshot_says_it_needs_a_server_that_accepts_writes() -> None:
    """A logical slot on a standby (16+) streams, but the online snapshot's watermarks are
    written: the first chunk fails in one clear line naming the table, not a raw error."""
    primary = PgServer(version=18)
    try:
        primary.execute("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
        primary.execute("CREATE PUBLICATION p FOR TABLE t")
        with PgServer(version=18, standby_of=primary) as standby:
            deadline = time.monotonic() + 60
            while not standby.query("SELECT 1 FROM pg_publication WHERE pubname = 'p'"):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            creating = threading.Thread(target=standby.create_slot, args=("s",))
            creating.start()
            while creating.is_alive():  # a logical slot on a standby waits for a running-xacts record
                primary.execute("SELECT pg_log_standby_snapshot()")
                creating.join(timeout=0.2)
            with pytest.raises(pgoutput_arrow.ReplicationError,
                               match=r"the online snapshot cannot read a chunk of public\.t: .*recovery.*"
                                     r"the server must accept writes, not be a standby"):
                with pgoutput_arrow.stream(standby.dsn, slot="s", publication="p", online_snapshot=True) as s:
                    for _ in s:
                        pass
    finally:
        primary.__exit__(None, None, None)


def _key_text(value: Any, special: Any) -> str:
    """A key as PostgreSQL's text (the special value's own text where the decoder has one)."""
    text = dict(special or []).get("id")
    if text is not None:
        return str(text)
    if hasattr(value, "astimezone"):
        return str(value.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def test_special_key_values_are_chunked_and_a_key_it_cannot_order_falls_back(pg: PgServer, unique_name: str) -> None:
    """Keys of numeric NaN and ±Infinity (unconstrained and with a typmod: the decoder gives
    those as _special text) and timestamptz ±infinity are chunked in PostgreSQL's order, with
    updates and deletes of those rows running; a date key with BC dates (not ordered here) is
    said in one line and taken by an exported snapshot. The replica, keyed by each key's
    text, equals the tables."""
    p = unique_name
    pg.execute(f"CREATE TABLE {p}_num (id numeric PRIMARY KEY, v int); "
               f"INSERT INTO {p}_num SELECT i, 0 FROM generate_series(1, 200) i; "
               f"INSERT INTO {p}_num VALUES ('NaN', 0), ('Infinity', 0), ('-Infinity', 0)")
    pg.execute(f"CREATE TABLE {p}_typ (id numeric(10,2) PRIMARY KEY, v int); "
               f"INSERT INTO {p}_typ SELECT i / 4.0, 0 FROM generate_series(1, 200) i; "
               f"INSERT INTO {p}_typ VALUES ('NaN', 0)")
    pg.execute(f"CREATE TABLE {p}_ts (id timestamptz PRIMARY KEY, v int); "
               f"INSERT INTO {p}_ts SELECT '2024-01-01'::timestamptz + i * interval '1 hour', 0 "
               f"FROM generate_series(1, 200) i; INSERT INTO {p}_ts VALUES ('infinity', 0), ('-infinity', 0)")
    pg.execute(f"CREATE TABLE {p}_bc (id date PRIMARY KEY, v int); "
               f"INSERT INTO {p}_bc SELECT '0044-03-15 BC'::date + i, 0 FROM generate_series(1, 30) i; "
               f"INSERT INTO {p}_bc SELECT '2024-01-01'::date + i, 0 FROM generate_series(1, 100) i")
    tables = [f"{p}_num", f"{p}_typ", f"{p}_ts", f"{p}_bc"]
    pg.execute(f"CREATE PUBLICATION {p} FOR TABLE {', '.join(tables)}")
    pg.create_slot(p)
    stop = threading.Event()

    def writes() -> None:
        rnd = random.Random(5)
        conn = pg.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            while not stop.is_set():
                t = rnd.choice(tables)
                key = rnd.choice(["'NaN'", "'Infinity'", "'-Infinity'", str(rnd.randint(1, 200))]) if t.endswith("_num") \
                    else rnd.choice(["'NaN'", str(rnd.randint(1, 200) / 4)]) if t.endswith("_typ") \
                    else rnd.choice(["'infinity'", "'-infinity'", f"'2024-01-01'::timestamptz + {rnd.randint(1, 200)} "
                                     "* interval '1 hour'"]) if t.endswith("_ts") \
                    else f"'0044-03-15 BC'::date + {rnd.randint(1, 30)}"
                if rnd.random() < 0.9:
                    cur.execute(f"UPDATE {t} SET v = v + 1 WHERE id = {key}")
                else:
                    cur.execute(f"DELETE FROM {t} WHERE id = {key}")
                time.sleep(0.002)
        conn.close()

    writer = CheckedThread(target=writes)
    writer.start()
    replica: dict[str, dict[str, int]] = {f"public.{t}": {} for t in tables}
    state: Any = None
    try:
        with pytest.warns(RuntimeWarning, match=rf"public.{p}_bc is taken by an exported snapshot, not online: "
                                                r"it holds a key value \(id\) that is not ordered here"):
            with pgoutput_arrow.stream(pg.dsn, slot=p, publication=p, online_snapshot=True, snapshot_chunk_rows=17,
                                       flush_interval=0.2) as s:
                for group, ack in s.groups():
                    for item in group:
                        if item.kind != "table":
                            continue
                        rows = replica[item.table or ""]
                        b = item.batch
                        for op, value, special, v in zip(b.column("_op").to_pylist(), b.column("id").to_pylist(),
                                                         b.column("_special").to_pylist(), b.column("v").to_pylist()):
                            if op == "delete":
                                rows.pop(_key_text(value, special), None)
                            else:
                                rows[_key_text(value, special)] = v
                        state = item.snapshot_state or state
                    s.ack(ack)
                    if (state and all(t["done"] and not t["again"] for t in state["tables"].values())
                            and f"public.{p}_bc" in state["exported"] and s.stop_at_lsn is None):
                        stop_after_the_writes(pg, s, stop, writer)
    finally:
        stop.set()
        writer.join(timeout=60)
    for t in tables:
        text = ("CASE WHEN isfinite(id) THEN to_char(id AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') "
                "ELSE id::text END") if t.endswith("_ts") else "id::text"
        want = {str(k): v for k, v in pg.query(f"SELECT {text}, v FROM {t}")}
        assert replica[f"public.{t}"] == want, t
    assert f"public.{p}_bc" not in state["tables"]
