"""Streaming source throughput: ``spark.readStream.format("pgoutput")`` draining a backlog, against
``pgoutput_arrow.stream()`` draining the same slot contents, in the same run.

    .venv/bin/python benches/spark_stream_throughput.py [--rows 1000000] [--txns 1000]
        [--master local[2]] [--runs 3] [--per-trigger ROWS]

Starts its own PostgreSQL 18 (tests/pg_harness.py), creates ``2 * runs`` slots at one position,
then writes the backlog: ``--rows`` inserts, updates and deletes in ``--txns`` transactions into
a published table (a third of each: inserts, then updates of them, then deletes). Each run
drains one slot with ``stream()`` (every group acknowledged, as a consumer would) and another
with a Trigger.AvailableNow query into the ``noop`` sink (a checkpoint of its own; the session
is warmed by a small query first), alternating which goes first. Wall clock per drain; medians
and the ratio of the medians. The Spark figure includes the query's start and every
micro-batch's commit (the slot moves when Spark commits).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


class TreeCpu:
    """CPU seconds (user + system) of the processes under ``roots`` (this process: Spark's JVM
    and its Python workers; the postmaster: the walsenders), by kind (java, postgres, python),
    sampled every 50 ms so that processes that exit meanwhile (a walsender, the streaming
    source's Python runner) are counted up to their last sample."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        parent, stat = {}, {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    raw = open(f"/proc/{d}/stat").read()
                except OSError:
                    continue
                comm = raw[raw.index("(") + 1:raw.rindex(")")]
                f = raw[raw.rindex(")") + 2:].split()
                parent[int(d)] = int(f[1])
                stat[int(d)] = (comm, (int(f[11]) + int(f[12])) / _TICK)
        for pid, (comm, cpu) in stat.items():
            p = pid
            while p > 1 and p not in self.roots:
                p = parent.get(p, 0)
            if p > 1:
                kind = "java" if "java" in comm else "postgres" if "postgres" in comm else "python"
                self.seen[pid] = (kind, cpu)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def totals(self) -> dict[str, float]:
        self._sample()
        out: dict[str, float] = {}
        for kind, cpu in self.seen.values():
            out[kind] = out.get(kind, 0.0) + cpu
        return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    kinds = sorted(set(before) | set(after))
    return ", ".join(f"{k} {after.get(k, 0) - before.get(k, 0):.2f}" for k in kinds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--txns", type=int, default=1000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-trigger", type=int, default=None, help="maxChangesPerTrigger (default: none)")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

    from pg_harness import PgServer
    from pyspark.sql import SparkSession

    import pgoutput_arrow
    from pgoutput_arrow import spark as sp

    spark = (SparkSession.builder.master(args.master).appName("pgoutput-stream-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sp.register(spark)
    with PgServer(version=18) as pg:
        pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount numeric(10,2), "
                   "status text, placed_at timestamptz DEFAULT now()); "
                   "CREATE PUBLICATION pub FOR TABLE orders")
        base = {"dsn": pg.dsn, "publication": "pub", "table": "public.orders"}
        if args.per_trigger:
            base["maxChangesPerTrigger"] = str(args.per_trigger)

        def spark_drain(slot: str, checkpoint: str) -> tuple[float, int, int]:
            t0 = time.perf_counter()
            df = spark.readStream.format("pgoutput").options(**base, slot=slot).load()
            query = (df.writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", checkpoint).start())
            query.awaitTermination()
            seconds = time.perf_counter() - t0
            progress = query.recentProgress
            if os.environ.get("BENCH_VERBOSE"):
                for p in progress:
                    print("   ", p["batchId"], p["numInputRows"], p["durationMs"], flush=True)
            return seconds, sum(p["numInputRows"] for p in progress), sum(1 for p in progress if p["numInputRows"])

        def live_drain(slot: str, end: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            rows = 0
            with pgoutput_arrow.stream(pg.dsn, slot=slot, publication="pub", stop_at_lsn=end,
                                       binary=False, views=False, array_ndims=1,
                                       datetime_range="pandas", time="time64") as s:
                for batches, ack in s.groups():
                    rows += sum(b.num_rows for b in batches if b.kind == "table")
                    s.ack(ack)
            return time.perf_counter() - t0, rows

        # Warm the session: one small query end to end.
        pg.create_slot("warm")
        pg.execute("INSERT INTO orders (id, customer, amount, status) SELECT -g, 0, 0, 'warm' "
                   "FROM generate_series(1, 1000) g")
        spark_drain("warm", f"{pg.base_dir}/checkpoint-warm")
        # The query's walsender may still be letting the slot go.
        pg.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                   "WHERE slot_name = 'warm' AND active_pid IS NOT NULL")
        pg.execute("DO $$ BEGIN WHILE EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'warm' "
                   "AND active) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$")
        pg.execute("SELECT pg_drop_replication_slot('warm')")

        for r in range(args.runs):
            pg.create_slot(f"spark{r}")
            pg.create_slot(f"live{r}")
        third = args.rows // 3
        per = max(1, third // max(1, args.txns // 3))
        t0 = time.perf_counter()
        for lo in range(0, third, per):
            hi = min(third, lo + per) - 1
            pg.execute(f"INSERT INTO orders (id, customer, amount, status) SELECT g, g % 1000, "
                       f"(g % 5000) / 4.0, 'new' FROM generate_series({lo}, {hi}) g")
        for lo in range(0, third, per):
            pg.execute(f"UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id BETWEEN {lo} AND {lo + per - 1}")
        for lo in range(0, third, per):
            pg.execute(f"DELETE FROM orders WHERE id BETWEEN {lo} AND {lo + per - 1}")
        end = pg.current_wal_lsn()
        wal_mb = pg.scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) / 1e6 "
                           "FROM pg_replication_slots WHERE slot_name = 'spark0'")
        print(f"backlog: {3 * third} changes in {args.txns} transactions, {float(wal_mb):.1f} MB of WAL "
              f"(written in {time.perf_counter() - t0:.1f} s); Spark {args.master}", flush=True)

        cpu = TreeCpu([os.getpid(), *([pg.pid] if pg.pid else [])])
        spark_s, live_s = [], []
        for r in range(args.runs):
            order = ("spark", "live") if r % 2 == 0 else ("live", "spark")
            for which in order:
                before = cpu.totals() if cpu else {}
                if which == "spark":
                    seconds, rows, batches = spark_drain(f"spark{r}", f"{pg.base_dir}/checkpoint{r}")
                    spark_s.append(seconds)
                    print(f"  run {r + 1}: readStream -> noop  {seconds:6.2f} s  {rows / seconds / 1e3:7.1f} k changes/s"
                          f"  ({rows} rows, {batches} micro-batches)", flush=True)
                else:
                    seconds, rows = live_drain(f"live{r}", end)
                    live_s.append(seconds)
                    print(f"  run {r + 1}: stream() drain     {seconds:6.2f} s  {rows / seconds / 1e3:7.1f} k changes/s"
                          f"  ({rows} rows)", flush=True)
                if cpu:
                    print(f"    CPU s: {cpu_delta(before, cpu.totals())}", flush=True)
        s, l = statistics.median(spark_s), statistics.median(live_s)
        print(f"medians of {args.runs}: readStream {s:.2f} s, stream() {l:.2f} s: "
              f"the Spark source at {l / s:.0%} of stream()'s drain")
    spark.stop()


if __name__ == "__main__":
    main()
