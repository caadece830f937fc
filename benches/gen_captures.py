"""Generate the benchmark captures from real PostgreSQL 18 workloads.

Each workload runs in a database of its own, with ``CREATE PUBLICATION pub FOR ALL TABLES``
and a pgoutput slot created before the workload starts. The slot is then peeked twice, once
with ``binary 'true'`` and once without (protocol version 1, which every decoder in the
comparison understands), and each result is written to ``bench-data/`` twice:

* ``<workload>-<mode>.pgo``: records of u64 BE lsn, u32 BE xid, u32 BE length, message bytes
  (what the criterion benchmarks read);
* ``<workload>-<mode>.parquet``: columns ``lsn`` (text ``X/Y``), ``xid`` (int64), ``data``
  (binary), the capture format ``pgoutput_arrow.decode`` reads.

``bench-data/manifest.json`` lists every capture with its message count, payload bytes and
message kinds. Captures are made when the benchmark runs and are never committed.

Workloads (each sized to about ``PGOUTPUT_BENCH_MB`` megabytes of text-mode payload):

* ``pgbench``: ``pgbench -i`` then ``pgbench -t N`` (pgbench's tables; inserts and updates);
* ``wide``: a 60-column table of mixed types, inserted then partly updated;
* ``text``: a table whose rows are mostly text of a few hundred bytes;
* ``numts``: numerics and timestamps.

Usage: ``python benches/gen_captures.py [--mb 30] [--out bench-data] [--only pgbench,wide]``
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pg_harness import PgServer, lsn_to_int  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

WORKLOADS = ("pgbench", "wide", "text", "numts")
MODES = {"binary": {"binary": "true"}, "text": {}}

#: Settings for a server that produces tens of MB of changes quickly: large transactions
#: are decoded in memory instead of spilling to disk every 64 kB.
SERVER_SETTINGS = {
    "logical_decoding_work_mem": "'256MB'",
    "shared_buffers": "'128MB'",
    "max_wal_size": "'2GB'",
    "checkpoint_timeout": "'30min'",
    "autovacuum": "off",
}


def log(msg: str) -> None:
    print(f"[gen_captures {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Workload:
    """One database with a publication of all its tables and one slot made before any data."""

    def __init__(self, pg: PgServer, name: str) -> None:
        self.pg = pg
        self.name = name
        self.db = f"bench_{name}"
        pg.execute(f"DROP DATABASE IF EXISTS {self.db}")
        pg.execute(f"CREATE DATABASE {self.db}")
        self.conn = pg.connect(pg.dsn_for(dbname=self.db))
        self.slot = f"bench_{name}"

    def execute(self, sql: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql)

    def start_capture(self) -> None:
        """Publication and slot after the DDL of the tables, before any row is written."""
        self.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        self.execute(f"SELECT pg_create_logical_replication_slot('{self.slot}', 'pgoutput')")

    def peek(self, extra: dict[str, str], upto_nchanges: int | None = None
             ) -> list[tuple[str, int, bytes]]:
        opts = {"proto_version": "1", "publication_names": "pub", **extra}
        flat: list[str] = []
        for k, v in opts.items():
            flat += [k, v]
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT lsn::text, xid::text::bigint, data "
                "FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, VARIADIC %s::text[])",
                (self.slot, upto_nchanges, flat))
            return [(lsn, xid, bytes(data)) for lsn, xid, data in cur.fetchall()]

    def text_bytes(self) -> int:
        """Text-mode payload bytes the slot holds so far (measured on the server)."""
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT coalesce(sum(length(data)), 0) FROM pg_logical_slot_peek_binary_changes("
                "%s, NULL, NULL, 'proto_version', '1', 'publication_names', 'pub')", (self.slot,))
            return int(cur.fetchone()[0])

    def fill(self, target: int, batch_sql: str, rows_per_batch: int) -> int:
        """Run ``batch_sql`` (formatted with ``lo`` and ``hi``) in transactions of
        ``rows_per_batch`` rows until the slot holds about ``target`` text bytes. The first
        batch calibrates the bytes per row. Returns the number of rows inserted."""
        lo = 1
        self.execute(batch_sql.format(lo=lo, hi=lo + rows_per_batch - 1))
        lo += rows_per_batch
        per_row = max(1.0, self.text_bytes() / rows_per_batch)
        total_rows = max(rows_per_batch, int(target / per_row))
        while lo <= total_rows:
            hi = min(total_rows, lo + rows_per_batch - 1)
            self.execute(batch_sql.format(lo=lo, hi=hi))
            lo = hi + 1
        return total_rows

    def close(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT pg_drop_replication_slot('{self.slot}')")
        self.conn.close()


# --------------------------------------------------------------------------- workloads


def run_pgbench(pg: PgServer, w: Workload, target: int) -> None:
    """``pgbench -i`` (COPY of the accounts) for about half the bytes, then ``pgbench -t``
    (transactions of 3 updates and 1 insert) for the rest."""
    env = {**os.environ, "PGPASSWORD": pg.password, "LD_LIBRARY_PATH": pg._env["LD_LIBRARY_PATH"]}
    pgbench = str(pg.bin_dir / "pgbench")
    conn_args = ["-h", pg.host, "-p", str(pg.port), "-U", pg.user]
    # pgbench -i creates its tables itself, so the publication is FOR ALL TABLES, created first.
    w.start_capture()
    # Text-mode bytes: about 130 per pgbench_accounts row, 100 000 rows per scale unit.
    scale = max(1, round(target * 0.5 / (130 * 100_000)))
    log(f"pgbench -i -s {scale}")
    subprocess.run([pgbench, "-i", "-q", "-s", str(scale), "--no-vacuum", *conn_args, w.db],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    have = w.text_bytes()
    # About 300 text bytes per pgbench transaction (Begin, 3 Updates, 1 Insert, Commit).
    txns = max(100, int((target - have) / 300))
    log(f"pgbench -t {txns} (slot holds {have / 1e6:.1f} MB)")
    clients = 4
    subprocess.run([pgbench, "-n", "-c", str(clients), "-j", "2", "-t", str(max(1, txns // clients)),
                    *conn_args, w.db], env=env, check=True, stdout=subprocess.DEVNULL)


WIDE_COLUMN_TYPES = [
    ("int2", "(i % 30000)::int2"),
    ("int4", "i"),
    ("int8", "i::int8 * 1000003"),
    ("float4", "(i * 0.5)::float4"),
    ("float8", "i * 1.000001"),
    ("bool", "i % 2 = 0"),
    ("text", "'row-' || i"),
    ("varchar(40)", "md5(i::text)"),
    ("numeric(12,2)", "(i * 1.25)::numeric(12,2)"),
    ("timestamp", "timestamp '2024-01-01' + i * interval '1 second'"),
    ("timestamptz", "timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute'"),
    ("date", "date '2020-01-01' + (i % 3000)"),
    ("uuid", "md5(i::text)::uuid"),
    ("jsonb", "jsonb_build_object('i', i, 'k', 'v')"),
    ("bytea", "decode(md5(i::text), 'hex')"),
]


def run_wide(pg: PgServer, w: Workload, target: int) -> None:
    """60 columns: four of each type in WIDE_COLUMN_TYPES; inserts, then 10% updated."""
    cols = [(f"c{n:02d}_{t.split('(')[0]}", t, expr)
            for n, (t, expr) in enumerate(WIDE_COLUMN_TYPES * 4)]
    ddl = ", ".join(f"{name} {t}" for name, t, _ in cols)
    w.execute(f"CREATE TABLE wide (id int8 PRIMARY KEY, {ddl})")
    w.start_capture()
    names = ", ".join(name for name, _, _ in cols)
    exprs = ", ".join(expr for _, _, expr in cols)
    # Insert about 90% of the target; updates of a tenth of the rows make the rest.
    rows = w.fill(int(target * 0.9),
                  f"INSERT INTO wide (id, {names}) SELECT i, {exprs} "
                  "FROM generate_series({lo}, {hi}) AS i", 500)
    step = 500
    for lo in range(1, rows + 1, step * 10):
        w.execute(f"UPDATE wide SET c01_int4 = c01_int4 + 1, c06_text = c06_text || '!' "
                  f"WHERE id BETWEEN {lo} AND {lo + step - 1}")


def run_text(pg: PgServer, w: Workload, target: int) -> None:
    """Mostly text: a title, a body of about 600 bytes and a short tag per row."""
    w.execute("CREATE TABLE docs (id int8 PRIMARY KEY, title text, body text, tag varchar(16))")
    w.start_capture()
    w.fill(target,
           "INSERT INTO docs SELECT i, 'Document number ' || i || ' about ' || md5(i::text), "
           "repeat(md5(i::text) || ' lorem ipsum dolor sit amet ', 12 + i % 8), "
           "'tag' || (i % 100) FROM generate_series({lo}, {hi}) AS i", 1000)


def run_numts(pg: PgServer, w: Workload, target: int) -> None:
    """Numerics of several scales and every timestamp-like type."""
    w.execute("CREATE TABLE ticks (id int8 PRIMARY KEY, price numeric(18,4), qty numeric, "
              "amount numeric(24,8), ratio numeric, ts timestamp, tstz timestamptz, "
              "d date, t time, recv timestamptz)")
    w.start_capture()
    w.fill(target,
           "INSERT INTO ticks SELECT i, (i % 100000) / 7.0, i * 3, (i::numeric * 12345.6789) / 13, "
           "(i % 1000)::numeric / 997, timestamp '2024-01-01' + i * interval '1 ms', "
           "timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second', "
           "date '2000-01-01' + (i % 10000), time '00:00' + (i % 86400) * interval '1 second', "
           "timestamptz '2025-06-01 00:00:00+00' + i * interval '17 ms' "
           "FROM generate_series({lo}, {hi}) AS i", 2000)


RUNNERS = {"pgbench": run_pgbench, "wide": run_wide, "text": run_text, "numts": run_numts}


# --------------------------------------------------------------------------- output


def write_capture(out: Path, stem: str, rows: list[tuple[str, int, bytes]]) -> dict[str, object]:
    pgo = out / f"{stem}.pgo"
    with open(pgo, "wb") as f:
        pack = struct.Struct(">QII").pack
        for lsn, xid, data in rows:
            f.write(pack(lsn_to_int(lsn), xid & 0xFFFFFFFF, len(data)))
            f.write(data)
    table = pa.table({
        "lsn": pa.array([r[0] for r in rows], pa.string()),
        "xid": pa.array([r[1] for r in rows], pa.int64()),
        "data": pa.array([r[2] for r in rows], pa.binary()),
    })
    pq.write_table(table, out / f"{stem}.parquet", compression="none")
    kinds = Counter(chr(r[2][0]) for r in rows if r[2])
    return {"stem": stem, "messages": len(rows), "payload_bytes": sum(len(r[2]) for r in rows),
            "kinds": dict(sorted(kinds.items()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=float(os.environ.get("PGOUTPUT_BENCH_MB", "30")),
                    help="text-mode payload per workload, in MB (env PGOUTPUT_BENCH_MB)")
    ap.add_argument("--out", default=os.environ.get("PGOUTPUT_BENCH_DATA", str(ROOT / "bench-data")))
    ap.add_argument("--only", default=",".join(WORKLOADS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = int(args.mb * 1e6)
    manifest: dict[str, object] = {"target_mb": args.mb, "captures": []}
    started = time.time()
    with PgServer(version=18, settings=SERVER_SETTINGS) as pg:
        manifest["server_version"] = pg.scalar("SHOW server_version")
        for name in args.only.split(","):
            t0 = time.time()
            w = Workload(pg, name)
            RUNNERS[name](pg, w, target)
            for mode, extra in MODES.items():
                rows = w.peek(extra)
                info = write_capture(out, f"{name}-{mode}", rows)
                info.update(workload=name, mode=mode)
                manifest["captures"].append(info)  # type: ignore[union-attr]
                log(f"{name}-{mode}: {info['messages']} messages, "
                    f"{info['payload_bytes'] / 1e6:.1f} MB, kinds {info['kinds']}")
            w.close()
            log(f"{name} done in {time.time() - t0:.1f}s")
    manifest["seconds"] = round(time.time() - started, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"wrote {out}/manifest.json")


if __name__ == "__main__":
    main()
