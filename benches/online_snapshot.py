"""The online snapshot against the COPY drain and the exported snapshot, same table, same run,
with writes running: read time, the oldest transaction a snapshot holds open, and the stream's
lag while it reads.

``pgbench_accounts`` of ``pgbench -i -s SCALE`` on PostgreSQL 18, in interleaved repetitions,
while a writer updates random accounts (``--writes-per-s`` small transactions):

* ``copy_drain``: ``psql -c "COPY pgbench_accounts TO STDOUT (FORMAT binary)" > /dev/null``;
* ``exported_N``: the exported snapshot of the table read by N connections (1, 2) in ctid
  chunks (``SnapshotReader``), timed from the plan to the last batch;
* ``online``: ``stream(online_snapshot=True)`` on a temporary slot, every batch handed out
  acknowledged, timed from the stream's start to the chunk that finishes the table (the
  online snapshot reads one chunk at a time: one connection).

Sampled every 20 ms during each read (from ``pg_stat_activity``, the writer's and the
sampler's own sessions left out): the oldest open transaction of the snapshot's sessions
(``now() - xact_start`` where ``backend_xmin`` is set): what holds the server's xmin horizon
back. For ``online`` also the stream's lag (server WAL end minus the position confirmed).

Reports medians of the runs and ratios to the COPY drain.

Usage: ``python benches/online_snapshot.py [--scale 20] [--runs 3] [--chunk-rows 20000]
[--writes-per-s 200] [--out bench-data/online_snapshot.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

SERVER_SETTINGS = {"shared_buffers": "'1GB'", "max_wal_size": "'8GB'", "checkpoint_timeout": "'30min'",
                   "autovacuum": "off", "max_replication_slots": "40", "max_wal_senders": "40"}
TABLE = "public.pgbench_accounts"


def log(msg: str) -> None:
    print(f"[online {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Writer(threading.Thread):
    """Updates random accounts, ``rate`` small transactions a second, until stopped."""

    def __init__(self, pg: Any, accounts: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.pg, self.accounts, self.rate = pg, accounts, rate
        self.stop = threading.Event()
        self.done = 0
        self.pid = 0

    def run(self) -> None:
        conn = self.pg.connect()
        rnd = random.Random(1)
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            self.pid = cur.fetchone()[0]
            while not self.stop.is_set():
                t0 = time.perf_counter()
                cur.execute("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = %s",
                            (rnd.randint(1, self.accounts),))
                self.done += 1
                time.sleep(max(0.0, 1 / self.rate - (time.perf_counter() - t0)))
        conn.close()


def xmin_holders(cur: Any, exclude: list[int], application: str | None = None
                 ) -> list[tuple[int, float, float, str]]:
    """(pid, its transaction's start as epoch seconds, seconds it has been open, its state
    and the head of its last query) of each open transaction that holds an xmin (client
    sessions other than ``exclude`` and the caller's own; with ``application``, only sessions
    of that application_name)."""
    cur.execute("SELECT pid, extract(epoch FROM xact_start)::float8, "
                "extract(epoch FROM clock_timestamp() - xact_start)::float8, "
                "state || ': ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 50) FROM pg_stat_activity "
                "WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() AND pid <> ALL(%s) "
                "AND backend_type = 'client backend' AND (%s::text IS NULL OR application_name = %s)",
                (exclude, application, application))
    return [(int(pid), float(start), float(age), str(what)) for pid, start, age, what in cur.fetchall()]


def oldest_xmin_holder(cur: Any, exclude: list[int], application: str | None = None) -> float:
    """Seconds the oldest open transaction that holds an xmin has been open (see
    :func:`xmin_holders`), 0 if none."""
    return max((h[2] for h in xmin_holders(cur, exclude, application)), default=0.0)


class Sampler(threading.Thread):
    """Every 20 ms: the oldest open transaction holding an xmin, of sessions other than
    ``exclude`` and its own; and ``lag()`` if given."""

    def __init__(self, pg: Any, exclude: list[int], lag: Any = None) -> None:
        super().__init__(daemon=True)
        self.pg, self.exclude, self.lag = pg, exclude, lag
        self.stop = threading.Event()
        self.oldest = 0.0
        self.max_lag = 0

    def run(self) -> None:
        conn = self.pg.connect()
        with conn.cursor() as cur:
            while not self.stop.is_set():
                self.oldest = max(self.oldest, oldest_xmin_holder(cur, self.exclude))
                if self.lag is not None:
                    self.max_lag = max(self.max_lag, int(self.lag()))
                time.sleep(0.02)
        conn.close()


def run_timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def exported_once(pg: Any, connections: int, slot: str) -> tuple[float, int]:
    from pgoutput_arrow.live import StreamOptions
    from pgoutput_arrow.live.snapshot import SnapshotReader, export_snapshot, plan_snapshot

    exported = export_snapshot(pg.dsn, StreamOptions.of(slot=slot, publication="bench", temporary_slot=True))
    try:
        t0 = time.perf_counter()
        plan = plan_snapshot(pg.dsn, exported, ["bench"], tables=[TABLE])
        rows = sum(b.num_rows for _, batches in SnapshotReader(pg.dsn, plan, connections) for b in batches)
        return time.perf_counter() - t0, rows
    finally:
        exported.close()


def online_once(pg: Any, slot: str, chunk_rows: int, sampler_lag: list[Any]) -> tuple[float, int, int]:
    """(seconds, rows read: handed out or dropped for a change of the stream, chunks)."""
    import pgoutput_arrow

    s = pgoutput_arrow.stream(pg.dsn, slot=slot, publication="bench", temporary_slot=True, online_snapshot=True,
                              snapshot_chunk_rows=chunk_rows)
    rows = chunks = 0
    with s:
        sampler_lag.append(lambda: s.lag_bytes)
        t0 = time.perf_counter()
        for group, ack in s.groups():
            for item in group:
                if item.snapshot:
                    rows += item.num_rows
                if item.snapshot_state is not None:
                    chunks += 1
                    if all(t["done"] and not t["again"] for t in item.snapshot_state["tables"].values()):
                        s.stop()
            s.ack(ack)
        seconds = time.perf_counter() - t0
        # A row a concurrent write changed is dropped from its chunk: the stream has it.
        dropped = s.online.current.dropped if s.online.current is not None else 0
    return seconds, rows + dropped, chunks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=int, default=int(os.environ.get("PGOUTPUT_SNAPSHOT_SCALE", "20")))
    p.add_argument("--runs", type=int, default=int(os.environ.get("PGOUTPUT_BENCH_RUNS", "3")))
    p.add_argument("--chunk-rows", type=int, default=20_000)
    p.add_argument("--writes-per-s", type=float, default=200.0)
    p.add_argument("--out", type=Path,
                   default=Path(os.environ.get("PGOUTPUT_BENCH_DATA", "bench-data")) / "online_snapshot.json")
    args = p.parse_args()

    from pg_harness import PgServer

    with PgServer(version=18, settings=SERVER_SETTINGS) as pg:
        env = {**os.environ, "PGPASSWORD": pg.password, "LD_LIBRARY_PATH": pg._env["LD_LIBRARY_PATH"]}
        conn_args = ["-h", pg.host, "-p", str(pg.port), "-U", pg.user]
        log(f"pgbench -i -s {args.scale}")
        subprocess.run([str(pg.bin_dir / "pgbench"), "-i", "-q", "-s", str(args.scale), *conn_args, pg.dbname],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pg.execute("VACUUM ANALYZE")
        pg.execute(f"CREATE PUBLICATION bench FOR TABLE {TABLE}")
        size = int(pg.scalar("SELECT pg_relation_size(%s)", (TABLE,)))
        accounts = int(pg.scalar(f"SELECT count(*) FROM {TABLE}"))
        ways = ["copy_drain", "exported_1", "exported_2", "online"]
        times: dict[str, list[float]] = {w: [] for w in ways}
        oldest: dict[str, list[float]] = {w: [] for w in ways}
        lags: list[int] = []
        chunks = 0
        for run in range(args.runs):
            for way in ways:
                writer = Writer(pg, accounts, args.writes_per_s)
                writer.start()
                while not writer.pid:
                    time.sleep(0.01)
                lag: list[Any] = []
                sampler = Sampler(pg, [writer.pid], (lambda: lag[0]() if lag else 0) if way == "online" else None)
                sampler.start()
                try:
                    if way == "copy_drain":
                        seconds = run_timed([str(pg.bin_dir / "psql"), *conn_args, "-d", pg.dbname, "-c",
                                             f"COPY {TABLE} TO STDOUT (FORMAT binary)"], env)
                        rows = accounts
                    elif way.startswith("exported"):
                        seconds, rows = exported_once(pg, int(way[-1]), f"bench_{run}_{way}")
                    else:
                        seconds, rows, chunks = online_once(pg, f"bench_{run}_online", args.chunk_rows, lag)
                finally:
                    sampler.stop.set()
                    sampler.join()
                    writer.stop.set()
                    writer.join()
                assert rows >= accounts, (way, rows, accounts)
                times[way].append(seconds)
                oldest[way].append(sampler.oldest)
                if way == "online":
                    lags.append(sampler.max_lag)
                log(f"run {run + 1} {way}: {seconds:.2f} s, {rows} rows, oldest transaction {sampler.oldest:.2f} s"
                    + (f", max lag {sampler.max_lag / 1e6:.1f} MB, {chunks} chunks" if way == "online" else ""))
        med = {w: statistics.median(v) for w, v in times.items()}
        results = {"table": TABLE, "scale": args.scale, "bytes": size, "rows": accounts, "runs": args.runs,
                   "chunk_rows": args.chunk_rows, "writes_per_s": args.writes_per_s, "seconds": times,
                   "median_s": med, "mb_per_s": {w: size / 1e6 / v for w, v in med.items()},
                   "vs_copy_drain": {w: v / med["copy_drain"] for w, v in med.items()},
                   "oldest_transaction_s": {w: statistics.median(v) for w, v in oldest.items()},
                   "online_max_lag_bytes": statistics.median(lags), "online_chunks": chunks}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"{TABLE}: {size / 1e6:.0f} MB, {accounts} rows, {args.writes_per_s:.0f} writes/s during each read; "
          f"medians of {args.runs} runs")
    for w in ways:
        print(f"  {w:12s} {med[w]:7.2f} s  {results['mb_per_s'][w]:7.1f} MB/s  x{results['vs_copy_drain'][w]:.2f} "
              f"of COPY drain  oldest open transaction {results['oldest_transaction_s'][w]:.2f} s")
    print(f"  online: {chunks} chunks of {args.chunk_rows} rows, stream lag at most "
          f"{results['online_max_lag_bytes'] / 1e6:.2f} MB while it read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
