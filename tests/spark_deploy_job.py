"""The driver program of tests/test_spark_deploy.py: every Spark API of pgoutput_arrow on one
deployment, as a user's driver runs it.

    python tests/spark_deploy_job.py (--master URL | --remote sc://HOST:PORT) SPEC.json OUT.pickle

It runs each API on the capture and the PostgreSQL objects SPEC names and pickles, per API,
either what the API gave (rows as tuples; the test compares them with PostgreSQL) or the
error it raised (``{"error": "..."}``), so one failing API does not hide the others. It runs
in a process of its own because a process holds one classic SparkContext, and the test
session's other Spark tests keep theirs on local[2].
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
import traceback
from typing import Any, Callable, Iterator

import pyarrow as pa


def _session(args: argparse.Namespace, conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    if args.remote:
        # Through Connect the server's settings hold (shipping included); only SQL settings
        # can be changed per session.
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        # A Connect session runs its Python workers (executors' and the driver's) in a
        # directory of its own: the environment is shipped per session, as an artifact
        # unpacked there, and the workers' interpreter named in the session's settings.
        archive = conf["spark.archives"]
        spark.addArtifacts(archive, archive=True)
        spark.conf.set("spark.sql.execution.pyspark.python", conf["spark.pyspark.python"])
        return spark
    builder = SparkSession.builder.master(args.master).appName("pgoutput-arrow-deploy-tests")
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in df.collect()]


def _own_columns(df: Any) -> list[str]:
    return [c for c in df.columns if not c.startswith("_")]


def probe(spark: Any) -> dict[str, Any]:
    """Where the executors' Python and pgoutput_arrow come from."""
    def where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import socket
        import sys as wsys

        import pgoutput_arrow
        from pgoutput_arrow import _internal

        for _ in batches:
            yield pa.record_batch({"package": [pgoutput_arrow.__file__],
                                   "native": [_internal.__file__], "exe": [wsys.executable],
                                   "host": [socket.gethostname()]})

    got = spark.range(0, 4, 1, 2).mapInArrow(where, "package string, native string, exe string, "
                                             "host string").collect()
    return {"workers": [r.asDict() for r in got]}


def decode_apply(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """pgspark.decode of the capture (its files read by decode's tasks), then apply_changes per
    table (TRUNCATEs honoured)."""
    from pgoutput_arrow import spark as pgspark

    from pgoutput_arrow.spark._pieces import plain_parquet_capture

    capture = spark.read.parquet(spec["capture"])
    tables = pgspark.decode(capture, with_truncates=True)
    truncates = tables.pop(pgspark.TRUNCATES)
    # The capture is local Parquet files: decode's tasks read them themselves.
    out: dict[str, Any] = {"_read_by_tasks": plain_parquet_capture(capture, None) is not None}
    for name, keys in spec["tables"].items():
        state = pgspark.apply_changes(tables[name], keys, truncates=truncates, table=name)
        out[name] = {"columns": _own_columns(state),
                     "rows": _rows(state.select(*_own_columns(state)).orderBy(*keys))}
    return out


def udtf(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """register(spark), then the SQL UDTF over the capture (read by Spark's own Parquet)."""
    from pgoutput_arrow import spark as pgspark

    pgspark.register(spark)
    spark.read.parquet(spec["capture"]).createOrReplaceTempView("deploy_capture")
    got = spark.sql("SELECT `table`, op, commit_lsn, seq, new, old, unchanged FROM pgoutput_changes("
                    "TABLE(SELECT lsn, xid, data FROM deploy_capture) WITH SINGLE PARTITION)")
    return {"rows": [(r.table, r.op, r.commit_lsn, r.seq, dict(r.new or {}),
                      dict(r.old or {}), list(r.unchanged or [])) for r in got.collect()]}


def batch_source(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """spark.read.format("pgoutput").option("table", ...).load(capture), then apply_changes."""
    from pgoutput_arrow import spark as pgspark

    pgspark.register(spark)
    out = {}
    for name in spec["source_tables"]:
        keys = spec["tables"][name]
        df = spark.read.format("pgoutput").option("table", name).load(spec["capture"])
        state = pgspark.apply_changes(df, keys)
        out[name] = {"columns": _own_columns(state),
                     "rows": _rows(state.select(*_own_columns(state)).orderBy(*keys))}
    return out


def _input_rows(progress: Any) -> int:
    """A micro-batch's input rows: the progress's attribute (a Connect session's progress
    objects answer None to ``["numInputRows"]``) or key (classic)."""
    rows = getattr(progress, "numInputRows", None)
    if rows is None:
        rows = progress["numInputRows"]
    return int(rows or 0)


def stream_source(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """readStream.format("pgoutput") from a slot, a few micro-batches (maxChangesPerTrigger),
    trigger(availableNow=True) into a memory table; then apply_changes."""
    from pgoutput_arrow import spark as pgspark

    s = spec["stream"]
    pgspark.register(spark)
    df = (spark.readStream.format("pgoutput").option("dsn", s["dsn"]).option("slot", s["slot"])
          .option("publication", s["publication"]).option("table", s["table"])
          .option("maxChangesPerTrigger", str(s["max_changes"])).option("pollInterval", "0.2")
          .load())
    query = (df.writeStream.format("memory").queryName(s["query"])
             .option("checkpointLocation", s["checkpoint"]).trigger(availableNow=True).start())
    query.awaitTermination(300)
    if query.isActive:
        query.stop()
        raise TimeoutError("the availableNow query did not end in 300 s")
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    batches = sum(1 for p in query.recentProgress if _input_rows(p) > 0)
    changes = spark.table(s["query"])
    state = pgspark.apply_changes(changes, s["keys"])
    return {"columns": _own_columns(state), "batches": batches, "changes": changes.count(),
            "rows": _rows(state.select(*_own_columns(state)).orderBy(*s["keys"]))}


def snapshot(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """pgspark.snapshot: a new slot exporting its snapshot, the table read in chunks."""
    from pgoutput_arrow import spark as pgspark

    s = spec["snapshot"]
    with pgspark.snapshot(spark, s["dsn"], slot=s["slot"], publication=s["publication"],
                          chunk_bytes=8 * 8192) as snap:
        df = snap.read(s["table"])
        rows = _rows(df.select(*_own_columns(df)).orderBy(*s["keys"]))
        chunks = len(snap.chunks(s["table"]))
    return {"columns": _own_columns(df), "rows": rows, "chunks": chunks}


APIS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "decode": decode_apply, "udtf": udtf, "batch_source": batch_source,
    "stream_source": stream_source, "snapshot": snapshot,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--master")
    where.add_argument("--remote")
    ap.add_argument("spec")
    ap.add_argument("out")
    args = ap.parse_args()
    spec = json.loads(open(args.spec).read())
    t0 = time.monotonic()
    spark = _session(args, spec["conf"])
    results: dict[str, Any] = {"session_s": time.monotonic() - t0}
    for name, fn in [("probe", lambda s, _: probe(s)), *APIS.items()]:
        t = time.monotonic()
        try:
            results[name] = fn(spark, spec)
        except Exception as e:  # noqa: BLE001  (each API's error is the result of its cell)
            results[name] = {"error": f"{type(e).__name__}: {e}".strip()[:4000],
                             "traceback": traceback.format_exc()[-6000:]}
        results[name]["seconds"] = time.monotonic() - t
        print(f"{name}: {'FAILED' if 'error' in results[name] else 'ok'} "
              f"({results[name]['seconds']:.1f} s)", file=sys.stderr, flush=True)
    with open(args.out, "wb") as f:
        pickle.dump(results, f)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
