"""Spark's own cost of handing out decode()'s *result*, beside the floor of its input (issue 22).

    .venv/bin/python benches/spark_output_floor.py [--data bench-data/spark] [--capture tables]
        [--runs 4] [--warmup 1]

``spark_throughput.py`` compares decode with Spark's floor for its *input*: the capture's
bytes through an identity ``mapInArrow`` into ``noop``, one DataFrame. decode hands out one
DataFrame per table, and a user writes each; this measures, in one local[2] session, with
each round interleaved and ``clearCache()`` between timings:

* **capture floor**: as in ``spark_throughput.py``;
* **output floor**: the tables decode returns, written once as Parquet by Spark (before the
  rounds, not timed), each read back and sent through an identity ``mapInArrow`` into
  ``noop``, one DataFrame per table: Spark moving the decoded rows through Python and back;
* **small tables, plain**: the same Parquet tables but the largest, each written to ``noop``
  with no Python at all: what Spark's cost per DataFrame (a job each) alone comes to;
* **decode**: ``spark_throughput.run_decode`` (every table written to ``noop``).

Medians of the measured rounds, and the bound they set (benches/findings.md, "Spark's cost of
the result").
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_throughput as st  # noqa: E402


def write_each(spark: Any, tables: Path, names: list[str], through_python: bool) -> float:
    frames = [spark.read.parquet(str(tables / n)) for n in names]
    t0 = time.perf_counter()
    for df in frames:
        if through_python:
            df = df.mapInArrow(lambda it: it, df.schema)
        df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.environ.get(
        "PGOUTPUT_BENCH_DATA", str(st.ROOT / "bench-data")), "spark"))
    ap.add_argument("--capture", default="tables")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--driver-memory", default="4g")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pgoutput_arrow import spark as sp

    capture = Path(args.data) / args.capture
    tables = Path(args.data).parent / "spark-output" / args.capture
    spark = st.session("local[2]", args.driver_memory)
    if not tables.is_dir():
        # Written aside and renamed: an interrupted run leaves no half-written tables behind.
        partial = tables.with_name(tables.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for name, df in sp.decode(spark.read.parquet(str(capture))).items():
            df.write.parquet(str(partial / name))
        partial.rename(tables)
        st.clear(spark)
    names = sorted(p.name for p in tables.iterdir())
    sizes = {n: sum(f.stat().st_size for f in (tables / n).rglob("*.parquet")) for n in names}
    largest = max(names, key=lambda n: sizes[n])
    small = [n for n in names if n != largest]
    st.log(f"{args.capture}: {len(names)} tables; the largest, {largest}, {sizes[largest] / 1e6:.0f} MB of Parquet")
    rounds: list[tuple[float, ...]] = []
    for r in range(args.warmup + args.runs):
        times = []
        for step in ("floor", "output", "small", "decode"):
            st.clear(spark)
            if step == "floor":
                times.append(st.run_floor(spark, capture))
            elif step == "output":
                times.append(write_each(spark, tables, names, through_python=True))
            elif step == "small":
                times.append(write_each(spark, tables, small, through_python=False))
            else:
                times.append(st.run_decode(spark, capture)[0])
        st.log(f"round {r + 1}{' (warm-up)' if r < args.warmup else ''}: capture floor {times[0]:.2f} s, "
               f"output floor {times[1]:.2f} s, {len(small)} small tables plain {times[2]:.2f} s, "
               f"decode {times[3]:.2f} s")
        if r >= args.warmup:
            rounds.append(tuple(times))
    floor, output, plain, decode = (statistics.median(t[i] for t in rounds) for i in range(4))
    print(f"medians of {len(rounds)}: capture floor {floor:.2f} s, output floor {output:.2f} s "
          f"({output / floor:.1f}x the capture floor), {len(small)} small tables plain {plain:.2f} s "
          f"({plain / floor:.0%} of the capture floor), decode {decode:.2f} s "
          f"({floor / decode:.0%} of the capture floor's speed, {output / decode:.1f}x the output floor's)")
    spark.stop()


if __name__ == "__main__":
    main()
