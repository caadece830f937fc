"""Streaming source throughput: ``spark.readStream.format("pgoutput")`` draining a backlog, against
``pgoutput_arrow.stream()`` draining the same slot contents and against Spark's own floor for a
Python streaming source, in the same run.

    .venv/bin/python benches/spark_stream_throughput.py [--rows 1000000] [--txns 1000]
        [--master local[2]] [--runs 3] [--per-trigger ROWS] [--warm-rows N] [--floor-batches N]

Starts its own PostgreSQL 18 (tests/pg_harness.py), creates ``2 * runs + 1`` slots at one
position, then writes the backlog: ``--rows`` inserts, updates and deletes in ``--txns``
transactions into a published table (a third of each: inserts, then updates of them, then
deletes). The session is warmed first by a query of ``--warm-rows`` changes (the JVM compiles
Spark's Arrow and row paths, as it has in a query that runs for long). Each run then times,
in rotated order:

* ``readStream -> noop``: one slot drained by a Trigger.AvailableNow query into the ``noop``
  sink (a checkpoint of its own), from the query's start to its end, every micro-batch's
  commit included (the slot moves when Spark commits);
* ``stream() drain``: another slot drained by ``stream()``, every group acknowledged, decoded
  as the Spark source decodes;
* ``floor -> noop``: Spark's own floor, the same rows (decoded once beforehand from one more
  slot, cast to Spark's Arrow types, kept in an Arrow file) served by a Python streaming
  source that does nothing else, in ``--floor-batches`` micro-batches.

Per drain: wall clock, and the CPU seconds of every process involved by kind (the JVM's
JIT compilers, its GC and the rest; the walsender; the streaming source's Python runner,
Spark's Python workers, this process), sampled from /proc. Medians and their ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_throughput import conf_setting, session  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(path: str) -> tuple[str, int, float] | None:
    """A /proc stat file (a process's or a thread's): its command name, parent pid and CPU
    seconds (user + system); None once it is gone."""
    try:
        raw = open(path).read()
    except OSError:
        return None
    f = raw[raw.rindex(")") + 2:].split()
    return raw[raw.index("(") + 1:raw.rindex(")")], int(f[1]), (int(f[11]) + int(f[12])) / _TICK


class TreeCpu:
    """CPU seconds (user + system) of the processes under ``roots`` (this process: Spark's JVM
    and its Python workers; the postmaster: the walsenders), by kind (java, postgres, python),
    sampled every 50 ms so that processes that exit meanwhile (a walsender, the streaming
    source's Python runner) are counted up to their last sample."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.seen: dict[object, tuple[str, float]] = {}
        self.kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        parent, stat = {}, {}
        for d in os.listdir("/proc"):
            read = proc_stat(f"/proc/{d}/stat") if d.isdigit() else None
            if read is not None:
                comm, ppid, cpu = read
                parent[int(d)] = ppid
                stat[int(d)] = (comm, cpu)
        for pid, (comm, cpu) in stat.items():
            p = pid
            while p > 1 and p not in self.roots:
                p = parent.get(p, 0)
            if p > 1 and "java" in comm:
                for key, cpu in self._jvm_threads(pid).items():
                    self.seen[key] = (f"java {key[1]}", cpu)  # type: ignore[index]
            elif p > 1:
                # A process's kind is read once, while it runs: a process that exited and was
                # not yet reaped has no command line left.
                kind = self.kinds.get(pid) or self._kind(pid, comm)
                if kind:
                    self.kinds[pid] = kind
                self.seen[pid] = (kind or "python", cpu)

    @staticmethod
    def _jvm_threads(pid: int) -> dict[tuple[int, str], float]:
        """The JVM's CPU by its threads' kind: the JIT compilers, the garbage collector, the
        rest (Spark's tasks and scheduling)."""
        out: dict[tuple[int, str], float] = {}
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            read = proc_stat(f"/proc/{pid}/task/{tid}/stat")
            if read is None:
                continue
            comm, _, cpu = read
            kind = "JIT" if "Compiler" in comm else "GC" if ("GC" in comm or "G1" in comm) else "other"
            out[(pid, kind)] = out.get((pid, kind), 0.0) + cpu
        return out

    def _kind(self, pid: int, comm: str) -> str:
        if "postgres" in comm:
            return "postgres"
        if pid == os.getpid():
            return "python (this process)"
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            args = []
        if args in ([], [b""]):
            return ""  # gone: decided at the next sample, if any
        # Spark's Python processes: the streaming source's runner, the daemon and its
        # workers, the planners of a Python data source.
        module = args[args.index(b"-m") + 1].decode() if b"-m" in args else ""
        return f"python {module.rsplit('.', 1)[-1]}" if module else "python"

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def totals(self) -> dict[str, float]:
        self._sample()
        out: dict[str, float] = {}
        for kind, cpu in self.seen.values():
            out[kind] = out.get(kind, 0.0) + cpu
        return out


def floor_source(path: str, schema_json: str, batches: int, parts: int) -> type:
    """Spark's own floor for a Python streaming source: the same rows as the pgoutput source
    gives (already in Spark's Arrow types, in an Arrow IPC file on local disk), served by a
    DataSourceStreamReader that does nothing else, in ``batches`` micro-batches of ``parts``
    partitions each (each an executor reading its row range of the memory-mapped file)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow
    from pyspark.sql.types import StructType

    class RowsRange(InputPartition):
        def __init__(self, lo: int, hi: int) -> None:
            super().__init__((lo, hi))
            self.lo, self.hi = lo, hi

    class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self) -> None:
            import pyarrow as pa

            with pa.memory_map(path) as f:
                self.rows = pa.ipc.open_file(f).read_all().num_rows

        def initialOffset(self) -> dict:
            return {"row": 0}

        def getDefaultReadLimit(self) -> ReadAllAvailable:
            return ReadAllAvailable()

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict, limit: object) -> dict:
            return {"row": min(self.rows, start["row"] + -(-self.rows // batches))}

        def partitions(self, start: dict, end: dict) -> list:
            lo, hi = start["row"], end["row"]
            step = -(-(hi - lo) // parts) if hi > lo else 1
            return [RowsRange(a, min(hi, a + step)) for a in range(lo, hi, step)]

        def read(self, partition: RowsRange):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            with pa.memory_map(path) as f:
                table = pa.ipc.open_file(f).read_all().slice(partition.lo, partition.hi - partition.lo)
                yield from table.to_batches(max_chunksize=65536)

        def commit(self, end: dict) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pgoutput_bench_floor"

        def schema(self) -> StructType:
            return StructType.fromJson(json.loads(schema_json))

        def streamReader(self, schema: StructType) -> FloorReader:
            return FloorReader()

    return FloorSource


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
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--floor-batches", type=int, default=3,
                    help="micro-batches of the floor query (Spark's own floor: the same rows from "
                         "an Arrow file through a Python source that does nothing else)")
    ap.add_argument("--conf", type=conf_setting, action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the session (repeatable), e.g. "
                         "spark.python.unix.domain.socket.enabled=true")
    ap.add_argument("--warm-rows", type=int, default=200_000,
                    help="rows of the warm-up query (default 200000: the JVM compiles Spark's Arrow "
                         "and row paths while it runs, as a long-running query has)")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

    from pg_harness import PgServer

    import pgoutput_arrow
    from pgoutput_arrow import spark as sp
    # What the Spark source decodes with: stream() decodes the same way.
    from pgoutput_arrow.spark.stream import DECODER_OPTIONS as SOURCE_DECODING

    spark = session(args.master, "1g", conf=args.conf)  # 1g: Spark's default driver memory
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
                                       **SOURCE_DECODING) as s:
                for batches, ack in s.groups():
                    rows += sum(b.num_rows for b in batches if b.kind == "table")
                    s.ack(ack)
            return time.perf_counter() - t0, rows

        # Warm the session: one small query end to end.
        pg.create_slot("warm")
        pg.execute("INSERT INTO orders (id, customer, amount, status) SELECT -g, g % 1000, (g % 5000) / 4.0, "
                   f"'warm' FROM generate_series(1, {args.warm_rows}) g")
        pg.execute("DELETE FROM orders WHERE status = 'warm'")
        spark_drain("warm", f"{pg.base_dir}/checkpoint-warm")
        # The query's walsender may still be letting the slot go.
        pg.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                   "WHERE slot_name = 'warm' AND active_pid IS NOT NULL")
        pg.execute("DO $$ BEGIN WHILE EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = 'warm' "
                   "AND active) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$")
        pg.execute("SELECT pg_drop_replication_slot('warm')")

        pg.create_slot("floor")
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

        # The floor's rows: the backlog as the source gives it to Spark, in Spark's Arrow types.
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        from pgoutput_arrow._lake_types import cast_for_spark
        from pgoutput_arrow.spark.stream import stream_schema

        spark_schema = stream_schema({**base, "slot": "floor"})
        target = to_arrow_schema(spark_schema, timezone="UTC")
        floor_rows: list[pa.RecordBatch] = []
        with pgoutput_arrow.stream(pg.dsn, slot="floor", publication="pub", stop_at_lsn=end, **SOURCE_DECODING) as fs:
            for group, _ in fs.groups():
                floor_rows += [cast_for_spark(b.batch, target) for b in group if b.kind == "table" and b.num_rows]
        floor_path = f"{pg.base_dir}/floor.arrow"
        with pa.OSFile(floor_path, "wb") as f, pa.ipc.new_file(f, target) as w:
            for b in floor_rows:
                w.write_batch(b)
        del floor_rows
        spark.dataSource.register(floor_source(floor_path, spark_schema.json(), args.floor_batches,
                                               spark.sparkContext.defaultParallelism))

        def floor_drain(r: int) -> tuple[float, int]:
            t0 = time.perf_counter()
            query = (spark.readStream.format("pgoutput_bench_floor").load().writeStream.format("noop")
                     .trigger(availableNow=True).option("checkpointLocation", f"{pg.base_dir}/floor-cp{r}").start())
            query.awaitTermination()
            return time.perf_counter() - t0, sum(p["numInputRows"] for p in query.recentProgress)

        cpu = TreeCpu([os.getpid(), *([pg.pid] if pg.pid else [])])
        spark_s, live_s, floor_s = [], [], []
        results: list[dict[str, object]] = []
        for r in range(args.runs):
            order = ("spark", "live", "floor") if r % 2 == 0 else ("floor", "live", "spark")
            for which in order:
                before = cpu.totals()
                if which == "spark":
                    seconds, rows, batches = spark_drain(f"spark{r}", f"{pg.base_dir}/checkpoint{r}")
                    spark_s.append(seconds)
                    print(f"  run {r + 1}: readStream -> noop  {seconds:6.2f} s  {rows / seconds / 1e3:7.1f} k changes/s"
                          f"  ({rows} rows, {batches} micro-batches)", flush=True)
                elif which == "floor":
                    seconds, rows = floor_drain(r)
                    floor_s.append(seconds)
                    print(f"  run {r + 1}: floor -> noop      {seconds:6.2f} s  {rows / seconds / 1e3:7.1f} k rows/s"
                          f"  ({rows} rows, {args.floor_batches} micro-batches)", flush=True)
                else:
                    seconds, rows = live_drain(f"live{r}", end)
                    live_s.append(seconds)
                    print(f"  run {r + 1}: stream() drain     {seconds:6.2f} s  {rows / seconds / 1e3:7.1f} k changes/s"
                          f"  ({rows} rows)", flush=True)
                after = cpu.totals()
                print(f"    CPU s: {cpu_delta(before, after)}", flush=True)
                results.append({"run": r + 1, "consumer": which, "seconds": seconds, "rows": rows,
                                "cpu_s": {k: round(after.get(k, 0) - before.get(k, 0), 3)
                                          for k in sorted(set(before) | set(after))}})
        s, l, fl = statistics.median(spark_s), statistics.median(live_s), statistics.median(floor_s)
        print(f"medians of {args.runs}: readStream {s:.2f} s, stream() {l:.2f} s, Spark's floor {fl:.2f} s: "
              f"the Spark source at {l / s:.0%} of stream()'s drain and at {fl / s:.0%} of the floor; "
              f"the floor itself at {l / fl:.0%} of stream()'s drain")
        if args.out:
            medians = {}
            for which, times in (("spark", spark_s), ("live", live_s), ("floor", floor_s)):
                mine = [x for x in results if x["consumer"] == which]
                kinds = sorted({k for x in mine for k in x["cpu_s"]})  # type: ignore[attr-defined]
                medians[which] = {"median_s": statistics.median(times),
                                  "cpu_s": {k: statistics.median(x["cpu_s"].get(k, 0.0) for x in mine)  # type: ignore[attr-defined]
                                            for k in kinds}}
            args.out.write_text(json.dumps({
                "rows": args.rows, "txns": args.txns, "master": args.master, "runs": args.runs, "conf": dict(args.conf),
                "warm_rows": args.warm_rows, "floor_batches": args.floor_batches,
                "per_trigger": args.per_trigger, "wal_mb": float(wal_mb),
                "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "medians": medians, "results": results}, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
