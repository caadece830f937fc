"""A failover slot (PostgreSQL 17+) survives a failover: a primary and a physical standby
from the same PostgreSQL 18 binaries (``pg_basebackup``, a physical slot, ``hot_standby_feedback``,
``sync_replication_slots`` on the standby, ``synchronized_standby_slots`` on the primary);
``pgoutput-dump --failover`` (or ``stream(failover=True)``) streams a workload to Parquet
(or memory) through a multi-host DSN
(``target_session_attrs=read-write``); the primary is killed mid-workload, the standby
promoted, and the stream resumes on it from the synchronized slot. The output must equal
the new primary's rows, nothing lost, nothing twice."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest

import pgoutput_arrow

from pg_harness import PgServer, lsn_to_int
from test_live import DUMP, alive, caught_up_lsn, read_output, slot_state, wait_until
from threads import CheckedThread


def synced_slot(standby: PgServer, slot: str) -> tuple[bool, int]:
    """(the standby holds ``slot`` as a synchronized, persistent slot; its confirmed LSN)."""
    rows = standby.query("SELECT synced AND NOT temporary, confirmed_flush_lsn::text "
                         "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    if not rows or rows[0][1] is None:
        return False, 0
    return bool(rows[0][0]), lsn_to_int(rows[0][1])


class DumpConsumer:
    """``pgoutput-dump --failover`` writing Parquet."""

    FORMAT = ["--format", "parquet"]

    def __init__(self, dsn: str, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [*DUMP, "--dsn", dsn, "--slot", "s", "--create-slot", "--failover", "--publication",
             "p", *self.FORMAT, "--output", str(out), "--commit-interval", "0.2",
             "--status-interval", "0.3", "--reconnect-attempts", "60", "--reconnect-timeout", "120"],
            stderr=subprocess.PIPE, text=True)

    def alive(self) -> bool:
        return alive(self.proc)

    def finish(self) -> list[dict[str, Any]]:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read() if self.proc.stderr else ""
        return read_output(self.out, "public.t")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class DeltaConsumer(DumpConsumer):
    """``pgoutput-dump --failover`` keeping a Delta replica and change log; the change log's
    rows, in commit order, are what it wrote."""

    FORMAT = ["--format", "delta", "--change-log"]

    def finish(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read() if self.proc.stderr else ""
        log = DeltaTable(str(self.out / "_changes" / "public.t")).to_pyarrow_table()
        return log.sort_by([("_commit_lsn", "ascending"), ("_seq", "ascending")]) \
            .select(["_op", "id"]).to_pylist()


class StreamConsumer:
    """``pgoutput_arrow.stream(failover=True)`` in a thread, keeping the rows it acknowledges."""

    def __init__(self, dsn: str, out: Path) -> None:
        self.rows: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.stream = pgoutput_arrow.stream(
            dsn, slot="s", publication="p", create_slot=True, failover=True, status_interval=0.3,
            reconnect_attempts=60, reconnect_timeout=120, stop_after=200)
        self.thread = CheckedThread(target=self._consume)
        self.thread.start()

    def _consume(self) -> None:
        try:
            with self.stream as s:
                for batches, ack in s.groups():
                    for b in batches:
                        if b.kind == "table":
                            self.rows += b.batch.select(["_op", "id"]).to_pylist()
                    s.ack(ack)
        except BaseException as e:  # noqa: BLE001
            self.errors.append(e)

    def alive(self) -> bool:
        assert self.thread.is_alive(), self.errors
        return True

    def finish(self) -> list[dict[str, Any]]:
        self.stream.stop()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive() and not self.errors, self.errors
        assert self.stream.stats().reconnects >= 1
        return self.rows

    def kill(self) -> None:
        self.stream.stop()
        self.thread.join(timeout=60)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how,consumer", [("immediate", DumpConsumer), ("kill", StreamConsumer),
                                          ("kill", DeltaConsumer)],
                         ids=["immediate-dump", "kill-stream", "kill-delta"])
def test_failover_slot_resumes_on_the_promoted_standby(
        how: str, consumer: type[DumpConsumer | DeltaConsumer | StreamConsumer], tmp_path: Path) -> None:
    servers: list[PgServer] = []
    c: DumpConsumer | StreamConsumer | None = None
    try:
        primary = PgServer(version=18)
        servers.append(primary)
        primary.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        primary.execute("CREATE PUBLICATION p FOR TABLE t")
        standby = PgServer(version=18, standby_of=primary)
        servers.append(standby)
        # The primary's logical walsenders send nothing the standby has not flushed: what
        # the consumer stores is on the standby when the primary dies.
        primary.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{standby.physical_slot}'")
        primary.execute("SELECT pg_reload_conf()")
        wait_until(lambda: primary.query("SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'"),
                   30, "the standby to stream from the primary")
        dsn = (f"host={primary.host},{standby.host} port={primary.port},{standby.port} "
               f"user={primary.user} password={primary.password} dbname=postgres "
               f"target_session_attrs=read-write")
        c = consumer(dsn, tmp_path / "out")
        wait_until(lambda: c.alive() and slot_state(primary, "s")[1] is not None, 30,
                   "the stream on the primary")
        assert primary.scalar("SELECT failover FROM pg_replication_slots WHERE slot_name = 's'")

        total, kill_at = 600, 250
        written = threading.Event()
        killed = threading.Event()
        errors: list[BaseException] = []

        def workload() -> None:
            """Single-row and multi-statement transactions through the multi-host DSN,
            retried across the failover (ON CONFLICT: a commit whose answer was lost)."""
            conn = None
            i = 0
            deadline = time.monotonic() + 150
            try:
                while i < total and time.monotonic() < deadline:
                    if i == kill_at:
                        written.set()
                        killed.wait(timeout=120)
                    try:
                        if conn is None:
                            conn = psycopg2.connect(dsn, connect_timeout=3)
                            conn.autocommit = True
                        with conn.cursor() as cur:
                            cur.execute("BEGIN; INSERT INTO t VALUES (%s, 'a') ON CONFLICT DO NOTHING; "
                                        "UPDATE t SET v = 'b' WHERE id = %s; COMMIT", (i, i))
                        i += 1
                    except psycopg2.Error:
                        conn = None
                        time.sleep(0.2)
                    time.sleep(0.002)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
            finally:
                written.set()
                if conn is not None:
                    conn.close()

        worker = CheckedThread(target=workload)
        worker.start()
        assert written.wait(timeout=120)
        # The slot is synchronized (persistent on the standby) and has moved with the stream.
        wait_until(lambda: synced_slot(standby, "s")[0], 60,
                   lambda: f"the slot to be synchronized: "
                   f"{standby.query('SELECT * FROM pg_replication_slots')}")
        before = slot_state(primary, "s")[0] or 0
        wait_until(lambda: synced_slot(standby, "s")[1] >= before, 60,
                   "the synchronized slot to reach the primary's position")
        primary.crash(how)
        standby.execute("SELECT pg_promote()")
        killed.set()
        worker.join(timeout=200)
        assert not worker.is_alive() and not errors, errors
        end = caught_up_lsn(standby)
        wait_until(lambda: c.alive() and (slot_state(standby, "s")[0] or 0) >= end, 120,
                   lambda: f"the stream to catch up on the new primary to {end}: "
                   f"{slot_state(standby, 's')}")
        rows = c.finish()
        inserted = [r["id"] for r in rows if r["_op"] == "insert"]
        assert len(inserted) == len(set(inserted)), "a change was written twice"
        final = {r[0]: r[1] for r in standby.query("SELECT id, v FROM t")}
        assert set(inserted) == set(final), (
            f"lost: {sorted(set(final) - set(inserted))[:10]}, "
            f"not on the new primary: {sorted(set(inserted) - set(final))[:10]}")
        assert len(final) >= total - 20  # at most the last commits before the kill are gone
        updated = {r["id"] for r in rows if r["_op"] == "update"}
        assert updated == set(final) and all(v == "b" for v in final.values())
    finally:
        if c is not None:
            c.kill()
        for server in reversed(servers):
            server.stop()
