"""Streaming source throughput: spark.readStream.format("pgoutput") on a live slot.

    .venv/bin/python benches/spark_stream_throughput.py [--rows 200000] [--txns 200] [--master local[2]]
        [--per-trigger ROWS]

Starts its own PostgreSQL 18 (tests/pg_harness.py), inserts ``--rows`` rows in ``--txns``
transactions into a published table, then drains the slot with a Trigger.AvailableNow query
(``maxChangesPerTrigger`` = ``--per-trigger``, default a quarter of the rows, so several
micro-batches) into the ``noop`` sink; wall clock from start() to the end of the query, session
start excluded, and the steady state: the rows of the micro-batches after the first over their
``triggerExecution`` time (the first pays for the query's start). For reference,
the same ranges read in this process with the source's own peek-and-decode
(``spark.stream.read_range``) on a second slot, without Spark.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--txns", type=int, default=200)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--per-trigger", type=int, default=None)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

    from pg_harness import PgServer
    from pyspark.sql import SparkSession

    from pgoutput_arrow import spark as sp
    from pgoutput_arrow.spark.stream import StreamSource, read_range

    spark = (SparkSession.builder.master(args.master).appName("pgoutput-stream-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sp.register(spark)
    with PgServer(version=18) as pg:
        pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount numeric(10,2), "
                   "status text, placed_at timestamptz DEFAULT now()); "
                   "CREATE PUBLICATION pub FOR TABLE orders")
        start = pg.create_slot("bench")
        local_start = pg.create_slot("local")  # the same changes, for the in-process reference
        per = args.rows // args.txns
        for t in range(args.txns):
            pg.execute(f"INSERT INTO orders (id, customer, amount, status) SELECT g, g % 1000, "
                       f"(g % 5000) / 4.0, 'new' FROM generate_series({t * per}, {(t + 1) * per - 1}) g")
        wal = pg.current_wal_lsn() - start
        options = {"dsn": pg.dsn, "slot": "bench", "publication": "pub", "table": "public.orders",
                   "maxChangesPerTrigger": str(args.per_trigger or max(1, args.rows // 4))}

        t0 = time.perf_counter()
        stream = spark.readStream.format("pgoutput").options(**options).load()
        query = (stream.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", f"{pg.base_dir}/checkpoint").start())
        query.awaitTermination()
        spark_s = time.perf_counter() - t0
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        later = [p for p in query.recentProgress if p["numInputRows"]][1:]
        steady_ms = sum(p["durationMs"]["triggerExecution"] for p in later)
        steady_rows = sum(p["numInputRows"] for p in later)
        if os.environ.get("BENCH_VERBOSE"):
            for p in query.recentProgress:
                print(p["batchId"], p["numInputRows"], p["durationMs"])

        end = pg.current_wal_lsn()
        t0 = time.perf_counter()
        local = read_range(StreamSource.from_options({**options, "slot": "local"}), local_start, end)
        local_s = time.perf_counter() - t0
        local_rows = local.tables["public.orders"].num_rows

    print(f"{args.rows} rows in {args.txns} transactions, {wal / 1e6:.1f} MB of WAL, Spark {args.master}")
    print(f"readStream -> noop, AvailableNow:  {spark_s:6.2f} s  {rows / spark_s / 1e3:7.1f} k rows/s "
          f"({rows} rows, {batches} micro-batches)")
    if steady_ms:
        print(f"  steady state (batches 2..{batches}):  {steady_rows / steady_ms:7.1f} k rows/s")
    print(f"peek + decode in one process:     {local_s:6.2f} s  {local_rows / local_s / 1e3:7.1f} k rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
