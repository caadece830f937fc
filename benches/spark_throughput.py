"""Spark decode against Spark's own floor, on every capture shape (issue 22).

    .venv/bin/python benches/spark_throughput.py [--data bench-data/spark]
        [--captures pgbench,streamed,toast,tables] [--masters local[2],local[1]]
        [--runs 3] [--warmup 1] [--out bench-data/spark.json] [--conf KEY=VALUE]
    .venv/bin/python benches/spark_throughput.py --profile pgbench   # where decode's time goes

The captures are the directories ``benches/gen_captures.py --spark`` makes. For each master,
one SparkSession (``PYSPARK_PYTHON`` = this interpreter, UI off); for each capture, ``--warmup``
rounds and then ``--runs`` measured rounds, each round timing

* **floor**: ``spark.read.parquet(dir).mapInArrow(lambda it: it, schema)`` written to the
  ``noop`` sink: Spark's own cost of moving the capture's bytes through a Python worker and
  back, the least any decode in ``mapInArrow`` can cost;
* **decode**: ``pgoutput_arrow.spark.decode(spark.read.parquet(dir))`` with every table it
  returns written to the ``noop`` sink (every row decoded, cast and handed to the JVM); the
  capture being a bare scan of local Parquet files, decode's tasks read its row groups
  themselves (``spark/_pieces.py``);
* **through Spark's reader**: the same decode with that turned off, as for any capture that
  is not a bare scan of local files (a filter, a Delta table, ``s3a://``): Spark reads the
  files and ships every row to the Python workers, as in the floor,

each timed from a DataFrame made beforehand (``spark.read.parquet(dir)``: listing the files and
reading their schema is the same for all three), interleaved (floor, decode, through Spark's
reader, floor, ...) so that the load of this shared machine hits
both alike, with ``spark.catalog.clearCache()`` after each (and any RDD still persisted
unpersisted). The load average is recorded before each timing. Reported per capture and
master: medians with min-max, MB/s of capture payload, messages/s, floor ÷ decode (the share
of the floor decode reaches) and, for reference, ``pgoutput_arrow.decode()`` of the same files
in this one process. Written to ``--out`` (JSON; ``benches/report.py`` makes the Spark section
of BENCHMARKS.md from it) and printed as a table.

A timed run that takes longer than ``--run-timeout`` seconds has its Spark jobs cancelled and
its round repeated (``--retries`` times at most): Spark's own floor once stalled for minutes on
loopback TCP (benches/findings.md, "Spark's own floor stalled once"). Each stall is logged
and counted in the results (``stalls``), and the report says so.

``--profile CAPTURE`` instead runs decode once warm and once measured on ``--masters``' first
master with Spark's UI on, and prints where the measured run spent its time: each phase's wall
time, then each stage's (from the UI's REST API: duration, tasks, executor run and CPU time,
input, shuffle). Written to ``<data>/profile-<capture>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("pgbench", "streamed", "toast", "tables")


def log(msg: str) -> None:
    print(f"[spark_throughput {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def capture_files(path: Path) -> list[str]:
    return [str(path / f) for f in json.loads((path / "_capture.json").read_text())["files"]]


def single_process(path: Path, runs: int) -> dict[str, Any]:
    """``pgoutput_arrow.decode()`` of the capture's files, read in order, in this process."""
    import pgoutput_arrow

    times, loads, rows = [], [], 0
    for _ in range(runs):
        reader = ds.dataset(capture_files(path), format="parquet").scanner(
            columns=["lsn", "xid", "data"]).to_reader()
        loads.append(load())
        t0 = time.perf_counter()
        ch = pgoutput_arrow.decode(reader)
        times.append(time.perf_counter() - t0)
        rows = sum(t.num_rows for t in ch.tables.values())
        del ch
    return {"times": times, "loads": loads, "change_rows": rows}


def conf_setting(text: str) -> tuple[str, str]:
    """``--conf``'s ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--conf wants KEY=VALUE, not {text!r}")
    return key, value


def session(master: str, driver_memory: str, ui: bool = False, conf: Sequence[tuple[str, str]] = ()) -> Any:
    """A session for the benchmark; ``conf``: more settings (``--conf KEY=VALUE``)."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(f"pgoutput-arrow-bench {master}")
               .config("spark.ui.enabled", "true" if ui else "false")
               .config("spark.driver.memory", driver_memory)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def clear(spark: Any) -> None:
    """Drop everything the last run cached: the Datasets decode persisted and any RDD left."""
    spark.catalog.clearCache()
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(True)


def run_floor(spark: Any, path: Path) -> float:
    df = spark.read.parquet(str(path))
    t0 = time.perf_counter()
    df.mapInArrow(lambda it: it, df.schema).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def run_decode(spark: Any, path: Path, spark_reader: bool = False) -> tuple[float, list[float], int]:
    """Total time, the phases (``decode()`` itself: the catalog scan, the schemas and the
    decoding pass into the cache; the first table written, from the cache; the other
    tables) and how many tables were written. ``spark_reader``: the capture read through
    Spark's reader, not by decode's tasks."""
    from pgoutput_arrow import spark as sp
    from pgoutput_arrow.spark import batch

    own_reading = batch.plain_parquet_capture
    if spark_reader:
        batch.plain_parquet_capture = lambda df, order_col: None  # type: ignore[assignment]
    try:
        # Made before the clock starts, as the floor's is: reading the files' footers for the
        # schema (a small job) is the same for both.
        df = spark.read.parquet(str(path))
        t0 = time.perf_counter()
        out = sp.decode(df)
        t1 = time.perf_counter()
    finally:
        batch.plain_parquet_capture = own_reading  # type: ignore[assignment]
    frames = list(out.values())
    frames[0].write.format("noop").mode("overwrite").save()
    t2 = time.perf_counter()
    for df in frames[1:]:
        df.write.format("noop").mode("overwrite").save()
    t3 = time.perf_counter()
    return t3 - t0, [t1 - t0, t2 - t1, t3 - t2], len(frames)


def summary(times: list[float], messages: int, payload: int) -> dict[str, float]:
    m = statistics.median(times)
    return {"median_s": m, "min_s": min(times), "max_s": max(times),
            "mb_per_s": payload / m / 1e6, "messages_per_s": messages / m}


class Stalled(RuntimeError):
    """A timed run went past ``--run-timeout``; its Spark jobs were cancelled."""


def watched(spark: Any, what: str, limit: float, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, its Spark jobs cancelled if it is still running after ``limit`` seconds,
    which raises :class:`Stalled` (also when it finished only after the cancel)."""
    fired = threading.Event()

    def cancel() -> None:
        fired.set()
        log(f"  {what}: still running after {limit:.0f} s (load {load()}); cancelling its Spark jobs")
        spark.sparkContext.cancelAllJobs()

    timer = threading.Timer(limit, cancel)
    timer.daemon = True
    timer.start()
    try:
        result = fn(*args)
    except Exception as e:
        if fired.is_set():
            raise Stalled(what) from e
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        raise Stalled(what)
    return result


def measure(spark: Any, master: str, path: Path, info: dict[str, Any], runs: int,
            warmup: int, limit: float = 300.0, retries: int = 2) -> dict[str, Any]:
    floor: list[float] = []
    decode: list[float] = []
    via_spark: list[float] = []
    phases: list[list[float]] = []
    loads: list[list[float]] = []
    tables = 0
    stalls: list[str] = []
    r = 0
    while r < warmup + runs:
        what = f"{master} {path.name} round {r + 1}"
        try:
            before_floor = load()
            tf = watched(spark, f"{what}, floor", limit, run_floor, spark, path)
            clear(spark)
            before_decode = load()
            td, ph, tables = watched(spark, f"{what}, decode", limit, run_decode, spark, path)
            clear(spark)
            ts, _, _ = watched(spark, f"{what}, through Spark's reader", limit, run_decode, spark, path, True)
            clear(spark)
        except Stalled as e:
            clear(spark)
            stalls.append(str(e))
            if len(stalls) > retries:
                raise SystemExit(f"{e}: stalled {len(stalls)} times, more than --retries {retries}") from e
            log(f"  {e}: the round is run again")
            continue
        kind = "warm-up" if r < warmup else "run"
        log(f"  {master} {path.name} {kind} {r + 1}: floor {tf:.2f} s (load {before_floor}), "
            f"decode {td:.2f} s (load {before_decode}; phases {', '.join(f'{p:.2f}' for p in ph)}), "
            f"through Spark's reader {ts:.2f} s")
        if r >= warmup:
            floor.append(tf)
            decode.append(td)
            via_spark.append(ts)
            phases.append(ph)
            loads.append([before_floor, before_decode])
        r += 1
    msgs, payload = info["messages"], info["payload_bytes"]
    f, d = summary(floor, msgs, payload), summary(decode, msgs, payload)
    return {"capture": path.name, "master": master, "messages": msgs, "payload_bytes": payload,
            "files": len(info["files"]), "tables": tables,
            "floor": {**f, "times": floor}, "decode": {**d, "times": decode, "phases": phases,
            "phase_medians_s": [statistics.median(p[i] for p in phases) for i in range(3)]},
            "spark_reader": {**summary(via_spark, msgs, payload), "times": via_spark},
            "loads": loads, "stalls": stalls, "share_of_floor": f["median_s"] / d["median_s"]}


def table(results: list[dict[str, Any]], single: dict[str, dict[str, Any]]) -> str:
    head = (f"{'capture':<9} {'master':<9} {'MB':>6} {'floor s':>16} {'MB/s':>6} {'decode s':>18} "
            f"{'MB/s':>6} {'k msg/s':>8} {'of floor':>8} {'Spark reader s':>14} {'decode() s':>10}")
    lines = [head]
    for r in results:
        f, d = r["floor"], r["decode"]
        one = single.get(r["capture"])
        lines.append(
            f"{r['capture']:<9} {r['master']:<9} {r['payload_bytes'] / 1e6:6.0f} "
            f"{f['median_s']:6.2f} ({f['min_s']:.2f}-{f['max_s']:.2f}) {f['mb_per_s']:6.1f} "
            f"{d['median_s']:7.2f} ({d['min_s']:.2f}-{d['max_s']:.2f}) {d['mb_per_s']:6.1f} "
            f"{d['messages_per_s'] / 1e3:8.0f} {r['share_of_floor']:8.0%} "
            f"{r['spark_reader']['median_s']:14.2f} "
            f"{statistics.median(one['times']) if one else float('nan'):10.2f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- profile


def rest(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


def profile(args: argparse.Namespace, data: Path) -> None:
    """One warm-up and one measured decode with the UI on; the measured run's jobs are
    tagged with a job group and their stages read from the REST API."""
    path = data / args.profile
    master = args.masters.split(",")[0]
    spark = session(master, args.driver_memory, ui=True, conf=args.conf)
    sc = spark.sparkContext
    run_decode(spark, path)
    clear(spark)
    sc.setJobGroup("measured", "measured decode")
    total, phases, tables = run_decode(spark, path)
    sc.setJobGroup("after", "after")
    clear(spark)
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    jobs = [j for j in rest(f"{base}/jobs") if j.get("jobGroup") == "measured"]
    stage_ids = sorted({s for j in jobs for s in j["stageIds"]})
    stages = []
    for s in rest(f"{base}/stages?details=false"):
        if s["stageId"] in stage_ids and s["status"] == "COMPLETE":
            t0 = s.get("submissionTime") or s.get("firstTaskLaunchedTime")
            dur = (_ms(s["completionTime"]) - _ms(t0)) / 1e3 if t0 else None
            stages.append({
                "stage": s["stageId"], "name": s["name"][:60], "tasks": s["numTasks"],
                "duration_s": dur, "executor_run_s": s["executorRunTime"] / 1e3,
                "executor_cpu_s": s["executorCpuTime"] / 1e9,
                "input_mb": s["inputBytes"] / 1e6, "shuffle_write_mb": s["shuffleWriteBytes"] / 1e6,
                "shuffle_read_mb": s["shuffleReadBytes"] / 1e6,
                "memory_spilled_mb": s["memoryBytesSpilled"] / 1e6,
                "disk_spilled_mb": s["diskBytesSpilled"] / 1e6,
                "jobs": [j["jobId"] for j in jobs if s["stageId"] in j["stageIds"]],
                # Each task's run time, longest first: how evenly the work was spread.
                "task_run_s": sorted((t["taskMetrics"]["executorRunTime"] / 1e3 for t in rest(
                    f"{base}/stages/{s['stageId']}/{s['attemptId']}/taskList?length=1000")
                    if t.get("taskMetrics")), reverse=True),
            })
    spark.stop()
    out = {"capture": args.profile, "master": master, "total_s": total, "tables": tables,
           "phases_s": dict(zip(["decode() call (catalog scan, decoding pass into the cache)",
                                 "first table written (from the cache)",
                                 "other tables written (from the cache)"], phases)),
           "jobs": [{"job": j["jobId"], "name": j["name"][:60], "stages": j["stageIds"],
                     "duration_s": (_ms(j["completionTime"]) - _ms(j["submissionTime"])) / 1e3}
                    for j in jobs],
           "stages": stages, "load": load()}
    (data / f"profile-{args.profile}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


def _ms(ts: str) -> float:
    """Milliseconds since the epoch of the REST API's ``2026-01-01T00:00:00.000GMT``."""
    from datetime import datetime, timezone

    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f%Z").replace(
        tzinfo=timezone.utc).timestamp() * 1e3


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.environ.get(
        "PGOUTPUT_BENCH_DATA", str(ROOT / "bench-data")), "spark"))
    ap.add_argument("--captures", default=",".join(SHAPES))
    ap.add_argument("--masters", default="local[2],local[1]")
    ap.add_argument("--runs", type=int, default=3, help="measured rounds (floor + decode) per capture")
    ap.add_argument("--warmup", type=int, default=1, help="rounds before the measured ones")
    ap.add_argument("--single-runs", type=int, default=3,
                    help="single-process decode() runs per capture (0: none)")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--run-timeout", type=float, default=300.0, metavar="S",
                    help="cancel a timed run's Spark jobs after S seconds and run its round again")
    ap.add_argument("--retries", type=int, default=2, help="stalled rounds run again, at most")
    ap.add_argument("--out", default=None, help="JSON results (default <data>/../spark.json)")
    ap.add_argument("--merge", action="store_true",
                    help="keep --out's earlier rows of the captures and masters not run now")
    ap.add_argument("--profile", default=None, metavar="CAPTURE",
                    help="profile decode on this capture instead of measuring")
    ap.add_argument("--conf", type=conf_setting, action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the sessions (repeatable), e.g. "
                         "spark.python.unix.domain.socket.enabled=true")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    data = Path(args.data)
    if args.profile:
        profile(args, data)
        return
    started = time.time()
    captures = to_measure = args.captures.split(",")
    masters = args.masters.split(",")
    earlier_s = 0.0
    infos = {c: json.loads((data / c / "_capture.json").read_text()) for c in captures}
    single: dict[str, dict[str, Any]] = {}
    if args.single_runs:
        for c in captures:
            single[c] = single_process(data / c, args.single_runs)
            log(f"decode() {c}: {', '.join(f'{t:.2f}' for t in single[c]['times'])} s")
    results: list[dict[str, Any]] = []
    out_path = Path(args.out) if args.out else data.parent / "spark.json"
    if args.merge and out_path.is_file():
        # Keep an earlier run's rows for the (capture, master) pairs this one does not measure.
        earlier = json.loads(out_path.read_text())
        now = {(c, m) for c in to_measure for m in masters}
        results = [r for r in earlier["results"] if (r["capture"], r["master"]) not in now]
        infos = {**earlier["captures"], **infos}
        captures = [c for c in earlier["captures"] if c not in to_measure] + to_measure
        masters = [m for m in earlier["masters"] if m not in masters] + masters
        single = {**earlier.get("single_process", {}), **single}
        earlier_s = float(earlier["seconds"])

    def save(complete: bool) -> dict[str, Any]:
        """Written after every capture, so that an interrupted run keeps what it measured."""
        out = {"runs": args.runs, "conf": dict(args.conf), "warmup": args.warmup, "masters": masters, "run_timeout_s": args.run_timeout,
               "captures": {c: {k: infos[c][k] for k in ("messages", "payload_bytes", "kinds",
                                                         "files", "params")} for c in captures},
               "single_process": {c: {**v, **summary(v["times"], infos[c]["messages"],
                                                     infos[c]["payload_bytes"])}
                                  for c, v in single.items()},
               "results": results, "complete": complete,
               "seconds": round(earlier_s + time.time() - started, 1),
               "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        out_path.write_text(json.dumps(out, indent=2) + "\n")
        return out

    for master in args.masters.split(","):
        spark = session(master, args.driver_memory, conf=args.conf)
        for c in to_measure:
            results.append(measure(spark, master, data / c, infos[c], args.runs, args.warmup,
                                   args.run_timeout, args.retries))
            save(False)
        spark.stop()
    out = save(True)
    print(table(results, single))
    log(f"wrote {out_path} ({out['seconds']:.0f} s in all)")


if __name__ == "__main__":
    main()
