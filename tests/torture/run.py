"""Run seeds: write each workload into a fresh database, capture it through every option
set and test_decoding, decode it by every path, compare with PostgreSQL, shrink failures.

    python tests/torture/run.py --seed 7                 # one seed, PostgreSQL 18 and 15
    python tests/torture/run.py --count 20 --start 100   # seeds 100..119
    python tests/torture/run.py --duration 1800          # seeds until 30 minutes are up

``make torture SEED=... COUNT=... DURATION=...`` calls this. A failure prints the seed, the
command that reproduces it, and the workload shrunk to the transactions it needs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import pyarrow as pa  # noqa: E402

import pgoutput_arrow  # noqa: E402
from generator import PRELUDE, Step, Workload, generate  # noqa: E402
from oracle import (  # noqa: E402
    compare_changes, compare_final, decoded_changes, parse_test_decoding, raw_text_columns, unify_outputs)
from pg_harness import PgServer  # noqa: E402
from settings import apply as apply_settings, capture_session, draw as draw_settings, pin  # noqa: E402

#: (name, pgoutput options, slot made with two_phase, minimum server version)
OPTION_SETS = [
    ("v1-text", {"proto_version": "1"}, False, 15),
    ("v2-stream", {"proto_version": "2", "streaming": "on"}, False, 15),
    ("v3-twophase-binary", {"proto_version": "3", "streaming": "on", "two_phase": "on", "binary": "true"}, True, 15),
    ("v4-parallel-binary", {"proto_version": "4", "streaming": "parallel", "binary": "true"}, False, 16),
]


@dataclasses.dataclass
class Result:
    seed: int
    version: int
    statements: int = 0
    runs: int = 0  # option sets × paths
    values: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)


def _execute(conns: list[Any], step: Step) -> None:
    a, b = conns
    with a.cursor() as ca, b.cursor() as cb:
        if step.kind in ("ddl", "finish", "message"):
            for sql in step.sql:
                ca.execute(sql)
            return
        if step.kind == "interleaved":
            ca.execute("BEGIN")
            cb.execute("BEGIN")
            for i in range(max(len(step.sql), len(step.other))):
                if i < len(step.sql):
                    ca.execute(step.sql[i])
                if i < len(step.other):
                    cb.execute(step.other[i])
            for c in ((cb, ca) if step.other_first else (ca, cb)):
                c.execute("COMMIT")
            return
        if step.kind == "origin":
            ca.execute("SELECT pg_replication_origin_session_setup('torture_origin')")
            ca.execute("BEGIN")
            ca.execute("SELECT pg_replication_origin_xact_setup('0/1234', now())")
            for sql in step.sql:
                ca.execute(sql)
            ca.execute("COMMIT")
            ca.execute("SELECT pg_replication_origin_session_reset()")
            return
        ca.execute("BEGIN")
        for sql in step.sql:
            ca.execute(sql)
        ca.execute({"commit": "COMMIT", "abort": "ROLLBACK"}.get(step.kind, f"PREPARE TRANSACTION '{step.gid}'"))


def _sets(pg: PgServer) -> list[tuple[str, dict[str, str], bool]]:
    return [(n, o, tp) for n, o, tp, v in OPTION_SETS if pg.version >= v]


def run_workload(pg: PgServer, workload: Workload, *, live: bool = False, spark: Any = None,
                 keep: bool = False) -> Result:
    """Runs ``workload`` in a fresh database of ``pg`` and checks every path."""
    result = Result(workload.seed, pg.version, workload.statements())
    db = f"torture_{workload.seed}_{os.getpid()}"
    _drop(pg)  # whatever an interrupted run left (a prepared transaction blocks slot creation)
    apply_settings(pg, draw_settings(workload.seed))  # the server's output settings of this seed
    pg.execute(f"CREATE DATABASE {db}")
    conns = [pg.connect(pg.dsn_for(db)) for _ in range(2)]
    try:
        with conns[0].cursor() as cur:
            # A wait for a lock (a slot waits for running transactions) is an error, not a hang.
            cur.execute("SET lock_timeout = '120s'")
            for sql in PRELUDE:
                cur.execute(sql)
            cur.execute(workload.publication.create())
            for name, _, two_phase in _sets(pg):
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                            (_slot(db, name), two_phase))
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (_slot(db, "td"),))
            if live:
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (_slot(db, "live"),))
        for step in workload.steps:
            _execute(conns, step)
        with conns[0].cursor() as cur:
            cur.execute("SELECT pg_switch_wal()")
            pin(cur)  # test_decoding prints under the calling session's settings
            cur.execute("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'include-xids', '0', "
                        "'skip-empty-xacts', '1')", (_slot(db, "td"),))
            expected = parse_test_decoding((r[0] for r in cur.fetchall()), workload.publication)
            captures = {}
            capture_session(cur)
            for name, options, _ in _sets(pg):
                flat: list[str] = []
                for k, v in {**options, "publication_names": "torture", "messages": "true"}.items():
                    flat += [k, v]
                cur.execute("SELECT (lsn - '0/0'::pg_lsn)::int8, xid::text::int8, data FROM "
                            "pg_logical_slot_get_binary_changes(%s, NULL, NULL, VARIADIC %s)", (_slot(db, name), flat))
                rows = cur.fetchall()
                captures[name] = pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                                           "xid": pa.array([r[1] for r in rows], pa.int64()),
                                           "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
            pin(cur)
        for name, capture in captures.items():
            _check_paths(result, conns[0], expected, capture, f"PG{pg.version} {name}", workload)
        if live:
            _check_live(result, pg, db, conns[0], expected, workload)
        if spark is not None:
            _check_spark(result, spark, conns[0], expected, captures, workload)
    finally:
        for c in conns:
            c.close()
        if not keep:
            _drop(pg, db)
    return result


def _slot(db: str, name: str) -> str:
    return f"{db}_{name.replace('-', '_')}"


def _drop(pg: PgServer, db: str | None = None) -> None:
    """Removes a seed's database with its prepared transactions and slots (``db`` None: every
    torture database). A prepared transaction left behind would make every later slot
    creation on the server wait for it."""
    like = db if db is not None else "torture\\_%"
    for gid, name in pg.query("SELECT gid, database FROM pg_prepared_xacts WHERE database LIKE %s", (like,)):
        try:
            # Not `with conn`: psycopg2 runs its block in a transaction, which ROLLBACK
            # PREPARED refuses.
            c = pg.connect(pg.dsn_for(name))
            try:
                c.autocommit = True
                c.cursor().execute(f"ROLLBACK PREPARED '{gid}'")
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001  (reported, the rest still cleaned)
            print(f"torture: could not roll back prepared {gid} in {name}: {e}", file=sys.stderr)
    for slot, active in pg.query("SELECT slot_name, active_pid FROM pg_replication_slots WHERE database LIKE %s",
                                 (like,)):
        try:
            if active:
                pg.execute("SELECT pg_terminate_backend(%s)", (active,))
            pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        except Exception as e:  # noqa: BLE001
            print(f"torture: could not drop slot {slot}: {e}", file=sys.stderr)
    for (name,) in pg.query("SELECT datname FROM pg_database WHERE datname LIKE %s", (like,)):
        pg.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    if pg.query("SELECT 1 FROM pg_replication_origin WHERE roname = 'torture_origin'"):
        pg.execute("SELECT pg_replication_origin_drop('torture_origin')")


def _check(result: Result, conn: Any, expected: list[Any], changes: Any, tables: dict[str, pa.Table],
           label: str, workload: Workload) -> None:
    n, problems = compare_changes(expected, decoded_changes(changes), label)
    m, more = compare_final(conn, tables, changes.truncates, label, expected, skip=raw_text_columns(changes),
                            publication=workload.publication)
    result.values += n + m
    result.runs += 1
    result.problems += problems + more


def _check_paths(result: Result, conn: Any, expected: list[Any], capture: pa.Table, label: str,
                 workload: Workload) -> None:
    seed = workload.seed
    try:
        changes = pgoutput_arrow.decode(capture)
    except Exception as e:  # noqa: BLE001  (any failure of a path is a finding)
        result.problems.append(f"{label} decode(): {type(e).__name__}: {e}")
        return
    _check(result, conn, expected, changes, changes.tables, f"{label} decode()", workload)
    batch_size, memory = 2 + seed % 6, 500 + (seed * 7919) % 20000
    try:
        dec = pgoutput_arrow.Decoder(batch_size=batch_size, memory_limit=memory)
        outputs: list[pgoutput_arrow.Output] = []
        for lsn, data in zip(capture.column("lsn").to_pylist(), capture.column("data").to_pylist()):
            dec.feed(data, lsn)
            outputs.extend(dec.take())
        rest = dec.finish()
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label} Decoder(batch_size={batch_size}, memory_limit={memory}): "
                               f"{type(e).__name__}: {e}")
        return
    truncates = [o.batch for o in outputs if o.kind == "truncates"]
    all_trunc = pa.concat_tables([pa.Table.from_batches(truncates, rest.truncates.schema), rest.truncates]) \
        if truncates else rest.truncates
    tables = unify_outputs(outputs, rest)
    m, more = compare_final(conn, tables, all_trunc, f"{label} Decoder(batch_size={batch_size})", expected,
                            skip=raw_text_columns(changes), publication=workload.publication)
    result.values += m
    result.runs += 1
    result.problems += more


def _check_live(result: Result, pg: PgServer, db: str, conn: Any, expected: list[Any], workload: Workload) -> None:
    label = f"PG{pg.version} live stream()"
    with conn.cursor() as cur:
        cur.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8")
        end = cur.fetchone()[0]
    got: dict[str, list[pa.RecordBatch]] = {}
    truncates: list[pa.RecordBatch] = []
    try:
        with pgoutput_arrow.stream(pg.dsn_for(db), slot=_slot(db, "live"), publication="torture",
                                   stop_at_lsn=end, stop_after=120) as s:
            for item in s:
                if item.kind == "table" and item.table:
                    got.setdefault(item.table, []).append(item.batch)
                elif item.kind == "truncates":
                    truncates.append(item.batch)
                s.ack(item.ack_lsn)
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label}: {type(e).__name__}: {e}")
        return
    tables = {}
    for name, batches in got.items():
        last = batches[-1].schema
        tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, last) for b in batches])
    empty = pgoutput_arrow.decode([]).truncates
    trunc = pa.concat_tables([pa.Table.from_batches(truncates), ]) if truncates else empty
    m, more = compare_final(conn, tables, trunc, label, expected, publication=workload.publication)
    result.values += m
    result.runs += 1
    result.problems += more


def _check_spark(result: Result, spark: Any, conn: Any, expected: list[Any], captures: dict[str, pa.Table],
                 workload: Workload) -> None:
    seed = workload.seed
    from pyspark.sql import functions as F

    from pgoutput_arrow import spark as sp

    name, capture = next(iter(captures.items()))
    label = f"spark.decode {name} shuffled"
    df = spark.createDataFrame(capture.to_pandas()).select(
        F.col("lsn").cast("long").alias("lsn"), F.col("xid").cast("long").alias("xid"), F.col("data"))
    try:
        decoded = sp.decode(df.repartition(3).sortWithinPartitions(F.rand(seed)), num_partitions=3,
                            with_truncates=True)
        trunc = decoded.pop(sp.TRUNCATES).toArrow()
        tables = {n: d.toArrow() for n, d in decoded.items()}
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label}: {type(e).__name__}: {e}")
        return
    # Spark's own types (interval as a struct, time in ns) are not the decoder's: compared
    # are the columns whose type Spark keeps.
    def comparable(t: pa.DataType) -> bool:
        return not (pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_time(t))

    m, more = compare_final(conn, tables, trunc, label, expected, comparable, publication=workload.publication)
    result.values += m
    result.runs += 1
    result.problems += more


def shrink(pg: PgServer, workload: Workload, budget: float = 120.0, *, live: bool = False,
           spark: Any = None) -> Workload:
    """Drops steps (halves, then quarters, ... then one at a time) while the workload still
    fails, within ``budget`` seconds; CREATE TABLE steps are kept."""
    deadline = time.monotonic() + budget
    steps = list(workload.steps)

    def fails(candidate: list[Step]) -> bool:
        try:
            return bool(run_workload(pg, dataclasses.replace(workload, steps=candidate), live=live,
                                     spark=spark).problems)
        except Exception:  # noqa: BLE001  (a candidate that cannot run, e.g. a missing gid)
            return False

    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i, removed = 0, False
        while i < len(steps) and time.monotonic() < deadline:
            part = steps[i:i + chunk]
            if any(s.kind == "ddl" and s.sql[0].startswith("CREATE TABLE") for s in part):
                i += chunk
                continue
            candidate = steps[:i] + steps[i + chunk:]
            if fails(candidate):
                steps, removed = candidate, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    return dataclasses.replace(workload, steps=steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="run this one seed")
    ap.add_argument("--start", type=int, default=1, help="first seed (default 1)")
    ap.add_argument("--count", type=int, default=10, help="seeds to run (default 10)")
    ap.add_argument("--duration", type=float, default=0, help="run seeds until this many seconds passed")
    ap.add_argument("--transactions", type=int, default=40, help="transactions per workload (default 40)")
    ap.add_argument("--versions", default="18,15", help="PostgreSQL versions (default 18,15)")
    ap.add_argument("--live-every", type=int, default=3, help="also stream live every Nth seed (0: never)")
    ap.add_argument("--spark-every", type=int, default=5, help="also decode on Spark every Nth seed (0: never)")
    ap.add_argument("--no-shrink", action="store_true")
    args = ap.parse_args(argv)

    seeds: Any
    if args.seed is not None:
        seeds = [args.seed]
    elif args.duration:
        seeds = iter(range(args.start, 10**9))
    else:
        seeds = range(args.start, args.start + args.count)
    versions = [int(v) for v in args.versions.split(",")]
    servers = [PgServer(version=v) for v in versions]
    for s in servers:
        s.start()
    spark = None
    started = time.monotonic()
    totals = {"seeds": 0, "runs": 0, "statements": 0, "values": 0}
    failures: list[tuple[int, int, list[str]]] = []
    try:
        for seed in seeds:
            if args.duration and time.monotonic() - started > args.duration:
                break
            workload = generate(seed, args.transactions)
            use_spark = args.spark_every and seed % args.spark_every == 0
            if use_spark and spark is None:
                from pyspark.sql import SparkSession

                # The workers must run this interpreter (the .venv with the built decoder).
                os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
                spark = (SparkSession.builder.master("local[2]").appName("pgoutput-torture")
                         .config("spark.sql.execution.arrow.pyspark.validateSchema.enabled", "true")
                         .config("spark.sql.session.timeZone", "UTC")
                         .config("spark.sql.shuffle.partitions", "3").config("spark.ui.enabled", "false")
                         .config("spark.ui.showConsoleProgress", "false")
                         .getOrCreate())
            for pg in servers:
                live = bool(args.live_every and seed % args.live_every == 0)
                on_spark = spark if use_spark and pg is servers[0] else None
                r = run_workload(pg, workload, live=live, spark=on_spark)
                totals["runs"] += r.runs
                totals["statements"] += r.statements
                totals["values"] += r.values
                status = "ok" if not r.problems else f"{len(r.problems)} MISMATCHES"
                print(f"seed {seed} PG{pg.version}: {r.statements} statements, {r.runs} option sets × paths, "
                      f"{r.values} values compared: {status}", flush=True)
                if r.problems:
                    failures.append((seed, pg.version, r.problems))
                    for p in r.problems[:10]:
                        print("   ", p, flush=True)
                    print(f"    reproduce: make torture SEED={seed}", flush=True)
                    if not args.no_shrink:
                        small = shrink(pg, workload, live=live, spark=on_spark)
                        path = Path(f"/tmp/torture-{seed}-pg{pg.version}.sql")
                        path.write_text(small.script() + "\n")
                        print(f"    shrunk to {len(small.steps)} of {len(workload.steps)} steps: {path}", flush=True)
            totals["seeds"] += 1
    finally:
        if spark is not None:
            spark.stop()
        for s in servers:
            s.stop()
    mins = (time.monotonic() - started) / 60
    print(f"\n{totals['seeds']} seeds × PostgreSQL {args.versions} in {mins:.1f} min: {totals['runs']} "
          f"option sets × paths, {totals['statements']} statements, {totals['values']} values compared, "
          f"{sum(len(p) for _, _, p in failures)} mismatches in {len(failures)} seed runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
