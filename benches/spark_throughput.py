"""Decode throughput: pgoutput_arrow.spark.decode() on Spark local[N] vs single-process decode().

    .venv/bin/python benches/spark_throughput.py bench-data/pgbench-text.parquet \
        [--master local[2]] [--repeat 3]

Single process: ``pgoutput_arrow.decode(path, views=False)`` (reads the Parquet itself), and the
executors' own work in one process: the capture's rows shuffled, rebuilt by
``spark.canonical_stream`` and decoded.
Spark: ``spark.read.parquet(path)`` -> ``decode()`` -> every table written to the ``noop`` sink
(so every row is decoded, cast and handed to the JVM), session start and ``--warmup`` runs
(the JVM's JIT) excluded. Reported: the
median of ``--repeat`` runs with the spread (min-max), and where the time goes: ``catalog``
(``decode()`` itself: the catalog job and the schemas on the driver), ``decode`` (the first
action: shuffle by transaction, rebuild, decode, hand the rows to the JVM, cache them) and
``tables`` (every table written from the cache).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _fmt(label: str, times: list[float], msgs: int, mb: float) -> str:
    m = statistics.median(times)
    return (f"{label:<28} {m:7.2f} s  ({min(times):.2f}-{max(times):.2f})  {msgs / m / 1e3:7.0f} k msg/s"
            f"  {mb / m:7.1f} MB/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--skip-single", action="store_true", help="only the Spark runs")
    ap.add_argument("--warmup", type=int, default=1, help="Spark runs before the measured ones (JIT)")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    import pgoutput_arrow
    from pgoutput_arrow import spark as sp
    from pyspark.sql import SparkSession

    meta = pq.read_metadata(args.path)
    data = pq.read_table(args.path, columns=["data"]).column("data")
    mb = float(pa.compute.sum(pa.compute.binary_length(data)).as_py()) / 1e6
    del data
    msgs = meta.num_rows

    lines = [f"capture: {args.path}: {msgs} messages, {mb:.1f} MB payload"]
    if not args.skip_single:
        single, rebuilt = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ch = pgoutput_arrow.decode(args.path, views=False)
            single.append(time.perf_counter() - t0)
            rows = sum(t.num_rows for t in ch.tables.values())
            del ch
        capture = pq.read_table(args.path, columns=["lsn", "xid", "data"])
        shuffled = capture.take(pa.array(np.random.default_rng(0).permutation(capture.num_rows)))
        del capture
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            dec = pgoutput_arrow.Decoder(views=False, array_ndims=1)
            dec.feed_batch(sp.canonical_stream(shuffled, shuffled))
            dec.finish()
            rebuilt.append(time.perf_counter() - t0)
        del shuffled, dec
        lines[0] += f", {rows} change rows"
        lines.append(_fmt("single-process decode()", single, msgs, mb))
        lines.append(_fmt("shuffled, rebuilt, decoded", rebuilt, msgs, mb))

    spark = (SparkSession.builder.master(args.master).appName("pgoutput-arrow-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", args.driver_memory)
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    total, phases = [], []
    for run in range(args.warmup + args.repeat):
        t0 = time.perf_counter()
        out = sp.decode(spark.read.parquet(args.path))
        t1 = time.perf_counter()
        frames = list(out.values())
        frames[0].write.format("noop").mode("overwrite").save()  # decodes and caches everything
        t2 = time.perf_counter()
        for df in frames[1:]:
            df.write.format("noop").mode("overwrite").save()
        t3 = time.perf_counter()
        spark.catalog.clearCache()
        if run >= args.warmup:
            total.append(t3 - t0)
            phases.append((t1 - t0, t2 - t1, t3 - t2))
    spark.stop()
    lines.append(_fmt(f"spark decode() {args.master}", total, msgs, mb))
    med = [statistics.median(p[i] for p in phases) for i in range(3)]
    lines.append(f"  where (medians): catalog {med[0]:.2f} s, decode {med[1]:.2f} s, tables {med[2]:.2f} s")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
