"""Changes per second from a live slot into Delta Lake and Apache Iceberg, beside the Parquet
change files and ``pg_recvlogical``, on the same slot contents, in one run.

A pgbench-shaped table (``accounts``: a primary key, three ints and char(84)) gets
``--changes`` changes: half inserts (10,000 per transaction), half pgbench-like balance
updates of random accounts (100 per transaction). Every consumer, and every repetition, drains
a slot of its own created before the workload, so all see the same changes:

* ``delta_replica``: ``pgoutput-dump --format delta`` (MERGE into one replica per table);
* ``delta_changelog``: ``pgoutput-dump --format delta --change-log-only`` (appends only);
* ``iceberg_replica``: ``pgoutput-dump --format iceberg`` (the same replica in Iceberg, its
  catalog the default SQLite one in the output directory);
* ``iceberg_changelog``: ``pgoutput-dump --format iceberg --change-log-only``;
* ``parquet``: ``pgoutput-dump --format parquet`` (the change files, exactly once too);
* ``pg_recvlogical``: PostgreSQL's client writing to /dev/null (the server's limit).

The ``pgoutput-dump`` runs use ``--commit-interval 1`` (one Delta or Iceberg commit, or one
file, per table per second of changes) and stop at ``--to-lsn`` once a marker transaction after the
workload arrives; each is timed as a whole process (Python's start-up included).
pg_recvlogical stops at ``--endpos``. Repetitions rotate the order; medians are reported,
with the ratios to pg_recvlogical.

Usage: ``python benches/delta_sink.py [--changes 300000] [--reps 3] [--out bench-data/delta.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benches"))

from live import SERVER_SETTINGS, log, run_recvlogical  # noqa: E402

CONSUMERS = ("delta_replica", "delta_changelog", "iceberg_replica", "iceberg_changelog",
             "parquet", "pg_recvlogical")
DUMP = str(Path(sys.executable).parent / "pgoutput-dump")


def run_dump(pg: Any, slot: str, end_lsn: int, consumer: str) -> dict[str, Any]:
    from pg_harness import int_to_lsn

    with tempfile.TemporaryDirectory(dir=os.environ.get("PGOUTPUT_BENCH_DATA")) as tmp:
        fmt = ["--format", consumer.split("_")[0]]  # parquet, delta or iceberg
        if consumer.endswith("_changelog"):
            fmt.append("--change-log-only")
        cmd = [DUMP, "--dsn", pg.dsn_for(dbname="bench_live"), "--slot", slot,
               "--publication", "pub", "--proto-version", "1", *fmt, "--output",
               str(Path(tmp) / "out"), "--commit-interval", "1", "--to-lsn", int_to_lsn(end_lsn)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{consumer}: exit {proc.returncode}: {proc.stderr[-1500:]}")
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        rows = _rows_written(Path(tmp) / "out", consumer)
    return {"seconds": elapsed, "output_bytes": size, "rows": rows}


def _rows_written(out: Path, consumer: str) -> int:
    """What the run left: the replica's rows, the change log's, or the change files'."""
    import pyarrow.parquet as pq

    if consumer == "parquet":
        return sum(pq.ParquetFile(f).metadata.num_rows
                   for f in (out / "public.accounts").glob("*.parquet"))
    change_log = consumer.endswith("_changelog")
    if consumer.startswith("iceberg"):
        from pgoutput_arrow.sinks import iceberg_catalog

        schema = "public__changes" if change_log else "public"
        return int(iceberg_catalog(out).load_table((schema, "accounts")).scan().count())
    from deltalake import DeltaTable

    sub = "_changes/public.accounts" if change_log else "public.accounts"
    return int(DeltaTable(str(out / sub)).count())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int,
                    default=int(os.environ.get("PGOUTPUT_DELTA_CHANGES", "300000")))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("PGOUTPUT_DELTA_REPS", "3")))
    ap.add_argument("--consumers", default=",".join(CONSUMERS))
    ap.add_argument("--out", default=str(ROOT / "bench-data" / "delta.json"))
    args = ap.parse_args()

    import random

    from pg_harness import PgServer, lsn_to_int

    consumers = args.consumers.split(",")
    inserts = args.changes // 2
    updates = args.changes - inserts
    with PgServer(version=18, settings=SERVER_SETTINGS) as pg:
        pg.execute("CREATE DATABASE bench_live")
        conn = pg.connect(pg.dsn_for(dbname="bench_live"))
        cur = conn.cursor()
        cur.execute("CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, "
                    "filler char(84))")
        cur.execute("CREATE TABLE marker (id int PRIMARY KEY)")
        cur.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        slots = {(c, r): f"bench_{c}_{r}" for r in range(args.reps) for c in consumers}
        for slot in slots.values():
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        t0 = time.time()
        for lo in range(1, inserts + 1, 10_000):
            hi = min(inserts, lo + 9_999)
            cur.execute("INSERT INTO accounts SELECT i, i / 100000 + 1, 0, '' "
                        "FROM generate_series(%s, %s) AS i", (lo, hi))
        rng = random.Random(1)
        done = 0
        while done < updates:
            n = min(100, updates - done)
            aids = rng.sample(range(1, inserts + 1), n)  # distinct: n rows updated
            cur.execute("BEGIN")
            cur.execute("UPDATE accounts SET abalance = abalance + d FROM "
                        "unnest(%s::int[], %s::int[]) AS u(a, d) WHERE aid = a",
                        (aids, [rng.randint(-5000, 5000) for _ in aids]))
            assert cur.rowcount == n, (cur.rowcount, n)
            cur.execute("COMMIT")
            done += n
        cur.execute("SELECT pg_current_wal_lsn()::text")
        end_lsn = lsn_to_int(cur.fetchone()[0])
        cur.execute("INSERT INTO marker VALUES (1)")  # what makes --to-lsn stop
        log(f"workload: {inserts} inserts + {updates} updates in {time.time() - t0:.1f}s; "
            f"{len(slots)} slots; end LSN {end_lsn:X}")
        results: list[dict[str, Any]] = []
        for r in range(args.reps):
            for c in consumers[r % len(consumers):] + consumers[:r % len(consumers)]:
                slot = slots[(c, r)]
                try:
                    res = run_recvlogical(pg, slot, end_lsn) if c == "pg_recvlogical" else \
                        run_dump(pg, slot, end_lsn, c)
                except Exception as e:  # noqa: BLE001 - reported, the others still run
                    log(f"{c} rep {r}: {e}")
                    results.append({"consumer": c, "rep": r, "error": str(e)[-1500:]})
                    continue
                res.update(consumer=c, rep=r, changes_per_s=args.changes / res["seconds"])
                # All of it: the replica holds every account, the others every change.
                want = inserts if c.endswith("_replica") else args.changes
                if res.get("rows", want) != want:
                    res["error"] = f"{res['rows']} rows written, expected {want}"
                    log(f"{c} rep {r}: {res['error']}")
                log(f"{c:16s} rep {r}: {res['seconds']:.2f}s "
                    f"({res['changes_per_s'] / 1e3:.1f}k changes/s)")
                results.append(res)
    medians: dict[str, Any] = {}
    for c in consumers:
        runs = [r for r in results if r["consumer"] == c and "error" not in r]
        if runs:
            median = statistics.median(r["seconds"] for r in runs)
            medians[c] = {"median_s": median, "changes_per_s": args.changes / median,
                          "runs": len(runs)}
    base = medians.get("pg_recvlogical", {}).get("median_s")
    for c, m in medians.items():
        if base:
            m["time_vs_pg_recvlogical"] = m["median_s"] / base
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"changes": args.changes, "reps": args.reps, "medians": medians,
                               "results": results}, indent=2) + "\n")
    for c, m in medians.items():
        log(f"{c:16s} median {m['median_s']:.2f}s  {m['changes_per_s'] / 1e3:.1f}k changes/s"
            + (f"  {m['time_vs_pg_recvlogical']:.1f}x pg_recvlogical's time" if base else ""))
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
