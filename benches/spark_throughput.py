"""Decode throughput: pgoutput_arrow.spark.decode() on Spark local[N] vs single-process decode().

    .venv/bin/python benches/spark_throughput.py bench-data/pgbench-text.parquet [--master local[2]]

Single process: ``pgoutput_arrow.decode(path, views=False)`` (reads the Parquet itself).
Spark: ``spark.read.parquet(path)`` -> ``decode()`` -> every table written to the ``noop`` sink
(so every row is decoded, cast and handed to the JVM). Both timings are wall clock, best of
``--repeat``; the Spark one includes the catalog pass and the _seq pass, not session start.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pyarrow.parquet as pq


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    import pgoutput_arrow
    from pgoutput_arrow import spark as sp
    from pyspark.sql import SparkSession

    meta = pq.read_metadata(args.path)
    payload = pq.read_table(args.path, columns=["data"]).column("data")
    mb = sum(len(v) for v in payload.to_pylist()) / 1e6
    msgs = meta.num_rows

    single = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ch = pgoutput_arrow.decode(args.path, views=False)
        single.append(time.perf_counter() - t0)
    rows = sum(t.num_rows for t in ch.tables.values())

    spark = (SparkSession.builder.master(args.master).appName("pgoutput-arrow-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    dist = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = sp.decode(spark.read.parquet(args.path))
        for df in out.values():
            df.write.format("noop").mode("overwrite").save()
        dist.append(time.perf_counter() - t0)
        spark.catalog.clearCache()
    spark.stop()

    s, d = min(single), min(dist)
    print(f"capture: {args.path}: {msgs} messages, {mb:.1f} MB payload, {rows} change rows")
    print(f"single-process decode():   {s:7.2f} s  {msgs / s / 1e3:8.0f} k msg/s  {mb / s:7.1f} MB/s")
    print(f"spark decode() {args.master}: {d:7.2f} s  {msgs / d / 1e3:8.0f} k msg/s  {mb / d:7.1f} MB/s")


if __name__ == "__main__":
    main()
