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

``--spark`` makes the Spark benchmark's captures instead (``benches/spark_throughput.py``),
each a directory ``<out>/spark/<shape>/`` of Parquet files (``part-NNNNN.parquet``, rolled
every ``SPARK_FILE_BYTES`` of payload, row groups of ``SPARK_ROW_GROUP`` rows, snappy, as a
capture job would write them; columns ``lsn`` text, ``xid`` int64, ``data`` binary, in
capture order) and ``_capture.json`` (its parameters, message count, payload bytes, kinds,
files; a leading ``_`` so that Spark skips it when it reads the directory). A directory whose
``_capture.json`` has the same parameters is kept, not made again.
The shapes (issue 22):

* ``pgbench``: ``pgbench -i -s 20`` (one transaction of 2 M inserts) then 71,000 ``pgbench``
  transactions (what 30 s made in issue 22's capture); protocol 1, text;
* ``streamed``: protocol 2 with ``streaming 'on'`` and ``logical_decoding_work_mem`` 64 kB:
  large transactions of two sessions interleaved, each with subtransactions, some rolled
  back to their savepoint, some whole transactions rolled back;
* ``toast``: a 40-column table with three out-of-line (TOAST) values per row, inserted, then
  updated without touching them (unchanged-TOAST cells), partly rewritten and deleted;
  protocol 1, ``binary 'true'``;
* ``tables``: 60 tables, one of them (``big``) at least ``--big-mb`` MB of payload (1 GB by
  default), the other 59 of varied types touched in between; protocol 1, text. The slot is
  drained in batches (``upto_nchanges``) so that neither side holds the capture in memory.

Usage: ``python benches/gen_captures.py --spark [--only pgbench,streamed,toast,tables]``
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
from typing import Any

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


# --------------------------------------------------------------------------- Spark captures

SPARK_SHAPES = ("pgbench", "streamed", "toast", "tables")
#: A new Parquet file after this many bytes of payload; row groups of this many rows.
SPARK_FILE_BYTES = 128_000_000
SPARK_ROW_GROUP = 65_536
#: Rows per ``pg_logical_slot_get_binary_changes`` call when the slot is drained in batches.
DRAIN_BATCH = 200_000
SPARK_SCHEMA = pa.schema([("lsn", pa.string()), ("xid", pa.int64()), ("data", pa.binary())])


def spark_params(shape: str, big_mb: float) -> dict[str, object]:
    """What a capture is made from: a directory made with other parameters is made again."""
    plugin = {"proto_version": "1", "publication_names": "pub"}
    p: dict[str, object] = {
        # Issue 22's capture: 30 s of pgbench made 71 k transactions; a count, not a
        # duration, so that the capture does not depend on the load of the machine.
        "pgbench": {"scale": 20, "transactions": 71_000, "clients": 4, "options": plugin},
        "streamed": {"transactions": 40, "savepoints": 8, "rows": 2500, "rollback_every": 4,
                     "abort_every": 7, "work_mem": "64kB",
                     "options": {**plugin, "proto_version": "2", "streaming": "on"}},
        "toast": {"rows": 15_000, "body": 4096, "options": {**plugin, "binary": "true"}},
        "tables": {"tables": 60, "big_mb": big_mb, "txn_rows": 20_000, "options": plugin},
    }[shape]
    return {"shape": shape, "version": 1, **p}


class CaptureWriter:
    """Parquet files in capture order, a new one every SPARK_FILE_BYTES of payload."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.files: list[str] = []
        self.writer: pq.ParquetWriter | None = None
        self.in_file = 0
        self.messages = 0
        self.payload = 0
        self.kinds: Counter[str] = Counter()

    def write(self, rows: list[tuple[str, int, bytes]]) -> None:
        if not rows:
            return
        if self.writer is None or self.in_file >= SPARK_FILE_BYTES:
            self.close()
            name = f"part-{len(self.files):05d}.parquet"
            self.files.append(name)
            self.writer = pq.ParquetWriter(self.out / name, SPARK_SCHEMA, compression="snappy")
            self.in_file = 0
        batch = pa.record_batch([pa.array([r[0] for r in rows], pa.string()),
                                 pa.array([r[1] for r in rows], pa.int64()),
                                 pa.array([r[2] for r in rows], pa.binary())], schema=SPARK_SCHEMA)
        self.writer.write_batch(batch, row_group_size=SPARK_ROW_GROUP)
        size = sum(len(r[2]) for r in rows)
        self.in_file += size
        self.payload += size
        self.messages += len(rows)
        self.kinds.update(chr(r[2][0]) for r in rows if r[2])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def drain(pg: PgServer, db: str, slot: str, options: dict[str, str], writer: CaptureWriter,
          batched: bool, work_mem: str | None = None) -> None:
    """Consume the slot into ``writer``. ``batched``: ``upto_nchanges`` calls of DRAIN_BATCH
    rows each, which end at a transaction's end, until one returns nothing. Otherwise one
    call read through a server-side cursor: a streamed (protocol 2) transaction must not be
    cut, as the next call would stream its first part again."""
    conn = pg.connect(pg.dsn_for(dbname=db), autocommit=False)
    flat: list[str] = []
    for k, v in options.items():
        flat += [k, v]
    try:
        if work_mem:
            with conn.cursor() as cur:
                cur.execute(f"SET logical_decoding_work_mem = '{work_mem}'")
        while True:
            got = 0
            with conn.cursor(name="drain") as cur:
                cur.itersize = 50_000
                cur.execute("SELECT lsn::text, xid::text::bigint, data FROM "
                            "pg_logical_slot_get_binary_changes(%s, NULL, %s, VARIADIC %s::text[])",
                            (slot, DRAIN_BATCH if batched else None, flat))
                while chunk := cur.fetchmany(50_000):
                    writer.write([(lsn, xid, bytes(data)) for lsn, xid, data in chunk])
                    got += len(chunk)
            conn.commit()
            if not batched or got == 0:
                return
            log(f"  drained {writer.messages:,} messages, {writer.payload / 1e6:.0f} MB")
    finally:
        conn.close()


def spark_pgbench(pg: PgServer, w: Workload, p: dict[str, Any]) -> None:
    env = {**os.environ, "PGPASSWORD": pg.password, "LD_LIBRARY_PATH": pg._env["LD_LIBRARY_PATH"]}
    pgbench = str(pg.bin_dir / "pgbench")
    conn_args = ["-h", pg.host, "-p", str(pg.port), "-U", pg.user]
    w.start_capture()
    per_client = int(p["transactions"]) // int(p["clients"])
    log(f"pgbench -i -s {p['scale']}, then pgbench -c {p['clients']} -t {per_client}")
    subprocess.run([pgbench, "-i", "-q", "-s", str(p["scale"]), "--no-vacuum", *conn_args, w.db],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([pgbench, "-n", "-c", str(p["clients"]), "-j", "2", "-t", str(per_client),
                    *conn_args, w.db], env=env, check=True, stdout=subprocess.DEVNULL)


def spark_streamed(pg: PgServer, w: Workload, p: dict[str, Any]) -> None:
    """Two sessions, each running its share of the large transactions, a statement at a time
    in turn, so that their streamed chunks interleave in the capture."""
    w.execute("CREATE TABLE events (id int8 PRIMARY KEY, txn int4, sub int4, at timestamptz, "
              "amount numeric(12,2), note text)")
    w.execute("CREATE TABLE totals (txn int4 PRIMARY KEY, n int8, last_sub int4)")
    w.start_capture()
    sessions = [pg.connect(pg.dsn_for(dbname=w.db)) for _ in range(2)]

    def script(t: int) -> list[str]:
        rows, base = int(p["rows"]), t * int(p["savepoints"]) * int(p["rows"])
        sql = ["BEGIN", f"INSERT INTO totals VALUES ({t}, 0, 0)"]
        for s in range(int(p["savepoints"])):
            lo = base + s * rows
            sql += [f"SAVEPOINT s{s}",
                    f"INSERT INTO events SELECT i, {t}, {s}, timestamptz '2025-01-01 00:00:00+00' "
                    f"+ i * interval '1 second', (i % 100000) / 100.0, 'event ' || i || ' ' || "
                    f"md5(i::text) FROM generate_series({lo}, {lo + rows - 1}) AS i",
                    f"UPDATE events SET amount = amount + 1 WHERE id BETWEEN {lo} AND {lo + rows // 10}",
                    f"DELETE FROM events WHERE id BETWEEN {lo + rows - rows // 20} AND {lo + rows - 1}",
                    f"UPDATE totals SET n = n + {rows}, last_sub = {s} WHERE txn = {t}"]
            if (t + s) % int(p["rollback_every"]) == 0:
                sql.append(f"ROLLBACK TO SAVEPOINT s{s}")
        sql.append("ROLLBACK" if t % int(p["abort_every"]) == int(p["abort_every"]) - 1 else "COMMIT")
        return sql

    for t0 in range(0, int(p["transactions"]), 2):
        scripts = [script(t) for t in (t0, t0 + 1) if t < int(p["transactions"])]
        for i in range(max(len(sc) for sc in scripts)):
            for conn, sc in zip(sessions, scripts):
                if i < len(sc):
                    with conn.cursor() as cur:
                        cur.execute(sc[i])
    for conn in sessions:
        conn.close()


def spark_toast(pg: PgServer, w: Workload, p: dict[str, Any]) -> None:
    cols = [(f"c{n:02d}_{t.split('(')[0]}", t, expr)
            for n, (t, expr) in enumerate((WIDE_COLUMN_TYPES * 3)[:36])]
    ddl = ", ".join(f"{name} {t}" for name, t, _ in cols)
    w.execute(f"CREATE TABLE docs (id int8 PRIMARY KEY, {ddl}, body text, blob bytea, meta jsonb)")
    # Out of line and uncompressed: every row carries three TOAST values.
    for c in ("body", "blob", "meta"):
        w.execute(f"ALTER TABLE docs ALTER COLUMN {c} SET STORAGE EXTERNAL")
    w.start_capture()
    names = ", ".join(name for name, _, _ in cols)
    exprs = ", ".join(expr for _, _, expr in cols)
    reps = int(p["body"]) // 32
    rows, step = int(p["rows"]), 500
    for lo in range(1, rows + 1, step):
        w.execute(f"INSERT INTO docs (id, {names}, body, blob, meta) SELECT i, {exprs}, "
                  f"repeat(md5(i::text), {reps}), decode(repeat(md5((i + 1)::text), {reps // 2}), 'hex'), "
                  f"jsonb_build_object('i', i, 'tags', repeat(md5((i + 2)::text), {reps // 3})) "
                  f"FROM generate_series({lo}, {min(rows, lo + step - 1)}) AS i")
    for lo in range(1, rows + 1, step):
        hi = min(rows, lo + step - 1)
        # Half the rows: small columns only, so body/blob/meta are sent as unchanged TOAST.
        w.execute(f"UPDATE docs SET c01_int4 = c01_int4 + 1, c06_text = c06_text || '!' "
                  f"WHERE id BETWEEN {lo} AND {hi} AND id % 2 = 0")
        # A tenth: the body rewritten; a twentieth deleted.
        w.execute(f"UPDATE docs SET body = body || 'x' WHERE id BETWEEN {lo} AND {hi} AND id % 10 = 1")
        w.execute(f"DELETE FROM docs WHERE id BETWEEN {lo} AND {hi} AND id % 20 = 3")


def spark_tables(pg: PgServer, w: Workload, p: dict[str, Any]) -> None:
    """``big`` (about 400 payload bytes a row) filled in transactions of ``txn_rows`` until
    it holds ``big_mb``; after each, a transaction touching ten of the small tables."""
    small = int(p["tables"]) - 1
    w.execute("CREATE TABLE big (id int8 PRIMARY KEY, k int4, at timestamptz, v numeric(14,3), "
              "payload text)")
    for n in range(small):
        picks = [WIDE_COLUMN_TYPES[(n + j) % len(WIDE_COLUMN_TYPES)] for j in range(2 + n % 6)]
        ddl = ", ".join(f"c{j} {t}" for j, (t, _) in enumerate(picks))
        w.execute(f"CREATE TABLE t{n:02d} (i int8 PRIMARY KEY, {ddl})")
    w.start_capture()
    per_row = 400
    rows = int(float(p["big_mb"]) * 1e6 / per_row)
    txn = int(p["txn_rows"])
    for b, lo in enumerate(range(0, rows, txn)):
        w.execute(f"INSERT INTO big SELECT i, i % 1000, timestamptz '2025-01-01 00:00:00+00' + "
                  f"i * interval '1 ms', i * 1.001, repeat(md5(i::text), 10) || ' ' || i "
                  f"FROM generate_series({lo}, {min(rows, lo + txn) - 1}) AS i")
        stmts = ["BEGIN"]
        for j in range(10):
            n = (b * 10 + j) % small
            picks = [WIDE_COLUMN_TYPES[(n + c) % len(WIDE_COLUMN_TYPES)] for c in range(2 + n % 6)]
            exprs = ", ".join(e for _, e in picks)
            base = (b // max(1, small // 10)) * 200
            stmts.append(f"INSERT INTO t{n:02d} SELECT i, {exprs} "
                         f"FROM generate_series({base}, {base + 199}) AS i ON CONFLICT (i) DO NOTHING")
            stmts.append(f"UPDATE t{n:02d} SET c0 = c0 WHERE i % 7 = {b % 7}")
        stmts.append("COMMIT")
        w.execute(";".join(stmts))
        # A running-xacts record, so that each drain call restarts decoding near where the
        # previous one stopped rather than at the capture's start.
        w.execute("SELECT pg_log_standby_snapshot()")
        if b % 20 == 0:
            log(f"  big: {min(rows, lo + txn):,} of {rows:,} rows")


SPARK_RUNNERS = {"pgbench": spark_pgbench, "streamed": spark_streamed, "toast": spark_toast,
                 "tables": spark_tables}


def make_spark_capture(pg: PgServer, root: Path, shape: str, big_mb: float) -> dict[str, Any]:
    params = spark_params(shape, big_mb)
    out = root / shape
    info_path = out / "_capture.json"
    if info_path.is_file():
        info = json.loads(info_path.read_text())
        if info.get("params") == params:
            log(f"spark/{shape}: kept ({info['messages']:,} messages, {info['payload_bytes'] / 1e6:.0f} MB)")
            return dict(info)
    if out.exists():
        for f in out.iterdir():
            f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    w = Workload(pg, f"spark_{shape}")
    SPARK_RUNNERS[shape](pg, w, params)
    t1 = time.time()
    pg.flush_wal()  # a ROLLBACK as the last thing written is not flushed by itself
    writer = CaptureWriter(out)
    options = dict(params["options"])  # type: ignore[call-overload]
    drain(pg, w.db, w.slot, options, writer, batched=options["proto_version"] == "1",
          work_mem=params.get("work_mem"))  # type: ignore[arg-type]
    writer.close()
    w.close()
    info = {"params": params, "messages": writer.messages, "payload_bytes": writer.payload,
            "kinds": dict(sorted(writer.kinds.items())), "files": writer.files,
            "workload_s": round(t1 - t0, 1), "drain_s": round(time.time() - t1, 1),
            "server_version": pg.scalar("SHOW server_version")}
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    log(f"spark/{shape}: {writer.messages:,} messages, {writer.payload / 1e6:.0f} MB in "
        f"{len(writer.files)} files; workload {info['workload_s']} s, drain {info['drain_s']} s; "
        f"kinds {info['kinds']}")
    return info


def main_spark(out: Path, only: list[str], big_mb: float) -> None:
    root = out / "spark"
    root.mkdir(parents=True, exist_ok=True)
    with PgServer(version=18, settings=SERVER_SETTINGS) as pg:
        for shape in only:
            make_spark_capture(pg, root, shape, big_mb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=float(os.environ.get("PGOUTPUT_BENCH_MB", "30")),
                    help="text-mode payload per workload, in MB (env PGOUTPUT_BENCH_MB)")
    ap.add_argument("--out", default=os.environ.get("PGOUTPUT_BENCH_DATA", str(ROOT / "bench-data")))
    ap.add_argument("--only", default=None)
    ap.add_argument("--spark", action="store_true", help="the Spark benchmark's captures")
    ap.add_argument("--big-mb", type=float, default=float(os.environ.get("PGOUTPUT_SPARK_BIG_MB", "1050")),
                    help="payload of the 'tables' capture's big table, in MB (env PGOUTPUT_SPARK_BIG_MB)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.spark:
        only = args.only.split(",") if args.only else list(SPARK_SHAPES)
        unknown = sorted(set(only) - set(SPARK_SHAPES))
        if unknown:
            ap.error(f"unknown Spark capture shape(s) {unknown}: choose from {SPARK_SHAPES}")
        main_spark(out, only, args.big_mb)
        return
    args.only = args.only or ",".join(WORKLOADS)
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
