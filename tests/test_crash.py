"""The server crashes while transactions are open: ``pg_ctl stop -m immediate`` (SIGQUIT)
and a killed postmaster (SIGKILL), each while a multi-statement transaction and a large one
that pgoutput streams in progress (``logical_decoding_work_mem`` is 64kB in the harness) are
open, with committed ones before and after. The consumer (``stream()``, or ``pgoutput-dump
--dsn`` in each output format) reconnects by itself; its output must hold every committed
change once and nothing of the transactions the crash aborted.

tests/crash_loop.py runs the same scenario with many crashes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pg_harness import PgServer
from test_live import DUMP, alive, caught_up_lsn, free_closed_port, slot_state, wait_until
from threads import CheckedThread
from test_operations import scrape

#: Rows of the large transactions: well beyond 64kB of changes, so they are streamed.
BIG = 1500


class CrashScenario:
    """Table ``t`` (id, v) with publication ``p`` and slot ``s`` on a server of its own.
    :meth:`run` writes, crashes and restarts the server ``crashes`` times; the ids of the
    transactions that the crashes aborted are in :attr:`aborted`."""

    def __init__(self, server: PgServer) -> None:
        self.server = server
        server.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        server.execute("CREATE PUBLICATION p FOR TABLE t")
        server.create_slot("s")
        self.next_id = 0
        self.aborted: list[int] = []

    def ids(self, n: int) -> list[int]:
        first = self.next_id
        self.next_id += n
        return list(range(first, first + n))

    def committed(self) -> None:
        """Multi-statement transactions and a streamed one, committed."""
        with self.server.connect() as conn, conn.cursor() as cur:
            for _ in range(5):
                a, b, c = self.ids(3)
                cur.execute("BEGIN; INSERT INTO t VALUES (%s, 'a'), (%s, 'b'); "
                            "UPDATE t SET v = 'a2' WHERE id = %s; INSERT INTO t VALUES (%s, 'c'); "
                            "DELETE FROM t WHERE id = %s; COMMIT", (a, b, a, c, b))
            ids = self.ids(BIG)
            cur.execute("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(%s, %s) g",
                        (ids[0], ids[-1]))
        conn.close()

    def open_transactions(self) -> list[Any]:
        """A multi-statement transaction and a large (streamed) one, left open."""
        conns = [self.server.connect(autocommit=False) for _ in range(2)]
        small, big = self.ids(4), self.ids(BIG)
        with conns[0].cursor() as cur:
            cur.execute("INSERT INTO t VALUES (%s, 'open'), (%s, 'open')", small[:2])
            cur.execute("UPDATE t SET v = 'open' WHERE id = %s", (small[0],))
            cur.execute("INSERT INTO t VALUES (%s, 'open'), (%s, 'open')", small[2:])
        with conns[1].cursor() as cur:
            cur.execute("INSERT INTO t SELECT g, repeat('y', 100) FROM generate_series(%s, %s) g",
                        (big[0], big[-1]))
        self.aborted += small + big
        return conns

    def open_on_server(self, conns: list[Any]) -> None:
        """The left-open transactions are open on the server, holding xids (so the crash
        aborts them in flight)."""
        pids = [c.get_backend_pid() for c in conns]
        rows = self.server.query("SELECT pid, state, backend_xid IS NOT NULL FROM pg_stat_activity "
                                 "WHERE pid = ANY(%s)", (pids,))
        assert sorted(rows) == sorted((p, "idle in transaction", True) for p in pids), rows

    def run(self, crashes: list[str], consumer_alive: Any) -> None:
        for how in crashes:
            self.committed()
            conns = self.open_transactions()
            self.committed()  # committed while the others are open
            time.sleep(0.7)  # the walsender streams the open large transaction meanwhile
            consumer_alive()  # checks that the consumer holds a transaction in flight
            self.open_on_server(conns)
            self.server.crash(how)
            for c in conns:
                try:
                    c.close()
                except Exception:
                    pass
            time.sleep(0.3)
            self.server.start()
        self.committed()

    def check(self, changes: list[tuple[str, int]]) -> None:
        """``changes``: (op, id) of every row change the consumer wrote, in its order."""
        inserted = Counter(i for op, i in changes if op == "insert")
        twice = [i for i, n in inserted.items() if n > 1]
        assert not twice, f"inserted twice: {twice[:10]}"
        leaked = sorted(set(self.aborted) & {i for _, i in changes})
        assert not leaked, f"changes of aborted transactions were written: {leaked[:10]}"
        # Every committed row (the server's final state) was inserted once; the deleted
        # ones too, and deleted.
        final = {r[0] for r in self.server.query("SELECT id FROM t")}
        deleted = {i for op, i in changes if op == "delete"}
        assert set(inserted) == final | deleted, (
            f"lost: {sorted(final - set(inserted))[:10]}, "
            f"not in the table: {sorted(set(inserted) - final - deleted)[:10]}")
        assert not final & deleted
        assert len(final) == self.next_id - len(self.aborted) - len(deleted)


def crash_under_stream(server: PgServer, crashes: list[str]) -> None:
    """The scenario with ``stream()`` consuming (and acknowledging) in a thread."""
    scenario = CrashScenario(server)
    changes: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    s = pgoutput_arrow.stream(server.dsn, slot="s", publication="p", stop_after=60 + 10 * len(crashes),
                              reconnect_initial_delay=0.1, reconnect_attempts=40,
                              status_interval=0.5)

    def consume() -> None:
        try:
            with s:
                for item in s:
                    if item.kind == "table":
                        b = item.batch
                        ids = [r["id"] if r["id"] is not None else r["_before"]["id"]
                               for r in b.select(["id", "_before"]).to_pylist()]
                        changes.extend(zip(b.column("_op").to_pylist(), ids))
                    s.ack(item.ack_lsn)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    consumer = CheckedThread(target=consume)
    consumer.start()

    def consumer_alive() -> None:
        # The open large transaction reached the consumer in progress (streamed).
        wait_until(lambda: s.stats().in_flight_transactions >= 1, 10,
                   lambda: f"a transaction in flight at the consumer: {s.stats()}, {errors}")
        assert consumer.is_alive(), errors

    scenario.run(crashes, consumer_alive)
    s.stop_at_lsn = caught_up_lsn(server)
    consumer.join(timeout=120)
    assert not consumer.is_alive() and not errors, errors
    assert s.stats().reconnects >= len(crashes)
    scenario.check(changes)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("version,crashes", [(18, ["immediate", "kill"]), (15, ["kill", "immediate"])],
                         ids=["pg18", "pg15"])
def test_stream_survives_server_crashes_mid_transaction(version: int, crashes: list[str]) -> None:
    with PgServer(version=version) as server:
        crash_under_stream(server, crashes)


def read_cli_output(fmt: str, stdout: Path, out: Path) -> list[tuple[str, int]]:
    """(op, id) of each change in pgoutput-dump's output, in order."""
    changes: list[tuple[str, int]] = []
    if fmt == "jsonl":
        for line in stdout.read_text().splitlines():
            o = json.loads(line)
            changes.append((o["op"], (o["new"] or o["old"])["id"]))
    elif fmt == "pretty":
        for line in stdout.read_text().splitlines():
            m = re.match(r"\s*\S+\s+(insert|update|delete)\s+public\.t\s+id=(\d+)", line)
            if m:
                changes.append((m.group(1), int(m.group(2))))
    elif fmt == "delta":
        from deltalake import DeltaTable

        log = DeltaTable(str(out / "_changes" / "public.t")).to_pyarrow_table()
        log = log.sort_by([("_commit_lsn", "ascending"), ("_seq", "ascending")])
        for r in log.select(["_op", "id", "_before"]).to_pylist():
            changes.append((r["_op"], r["id"] if r["id"] is not None else r["_before"]["id"]))
    else:
        files = sorted((out / "public.t").glob(f"*.{fmt}"))
        tables = [pq.read_table(f) if fmt == "parquet" else ipc.open_file(pa.OSFile(str(f))).read_all()
                  for f in files]
        for table in tables:
            for r in table.select(["_op", "id", "_before"]).to_pylist():
                changes.append((r["_op"], r["id"] if r["id"] is not None else r["_before"]["id"]))
    return changes


def crash_under_cli(server: PgServer, crashes: list[str], fmt: str, tmp_path: Path) -> None:
    """The scenario with ``pgoutput-dump --dsn --format fmt`` consuming."""
    scenario = CrashScenario(server)
    out, stdout = tmp_path / "out", tmp_path / "stdout"
    args = ["--output", str(out)] if fmt in ("parquet", "arrow", "delta") else []
    if fmt == "delta":
        args.append("--change-log")  # every change, besides the replica
    port = free_closed_port()
    with open(stdout, "w") as f:
        proc = subprocess.Popen(
            [*DUMP, "--dsn", server.dsn, "--slot", "s", "--publication", "p", "--format", fmt,
             *args, "--commit-interval", "0.2", "--status-interval", "0.5",
             "--reconnect-attempts", "40", "--metrics-port", str(port)],
            stdout=f, stderr=subprocess.PIPE, text=True)

    def in_flight() -> float:
        try:
            return scrape(port).get('pgoutput_transactions_in_flight{slot="s"}', 0.0)
        except OSError:
            return 0.0

    def consumer_alive() -> None:
        # The open large transaction reached the CLI in progress (streamed), as its
        # metrics endpoint says.
        wait_until(lambda: alive(proc) and in_flight() >= 1, 10,
                   lambda: f"a transaction in flight at pgoutput-dump: {in_flight()}")

    try:
        wait_until(lambda: alive(proc) and slot_state(server, "s")[1] is not None, 30, "stream")
        scenario.run(crashes, consumer_alive)
        end = caught_up_lsn(server)
        wait_until(lambda: alive(proc) and (slot_state(server, "s")[0] or 0) >= end, 60,
                   lambda: f"the consumer to catch up to {end}: {slot_state(server, 's')}")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    scenario.check(read_cli_output(fmt, stdout, out))
    if fmt == "delta":
        from deltalake import DeltaTable

        replica = DeltaTable(str(out / "public.t")).to_pyarrow_table().sort_by("id")
        assert [(r["id"], r["v"]) for r in replica.select(["id", "v"]).to_pylist()] == \
            [tuple(r) for r in server.query("SELECT id, v FROM t ORDER BY id")]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fmt,crashes", [("jsonl", ["immediate"]), ("pretty", ["kill"]),
                                         ("parquet", ["immediate", "kill"]), ("arrow", ["kill"]),
                                         ("delta", ["immediate", "kill"])])
def test_cli_survives_server_crashes_mid_transaction(fmt: str, crashes: list[str],
                                                     tmp_path: Path) -> None:
    with PgServer(version=18) as server:
        crash_under_cli(server, crashes, fmt, tmp_path)
