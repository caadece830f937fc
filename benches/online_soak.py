"""The online snapshot's soak: a large table read by ``pgoutput-dump --online-snapshot`` while
random writes run, the process killed (-9) at random points of the snapshot and of the
stream, then the same command to the end; every replica equals PostgreSQL's SELECT value by
value, and the rows read stay within one chunk per kill of the table's size.

Per server version (``--versions 18,15``), one table ``soak`` of ``--rows`` rows (bigint key,
int, text, numeric(12,3), timestamptz, and a text column stored EXTERNAL whose value is
TOASTed in one row of ``--toast-every``), published; per output format (``--formats
parquet,delta``) a slot and an output directory of its own, the formats one after the other.
A writer runs through every run: small transactions of inserts, updates, deletes, key changes
(into the part read and the part not read), updates that leave the TOASTed value unsent and
updates of it, ``--writes-per-s`` a second, half of them (while the snapshot runs) at keys of
the chunk being read (just past the last key the output holds), and once, a third of the way through the kills,
``ALTER TABLE soak ADD COLUMN extra int`` (set by later updates).

Kills: ``--kills`` runs of the same command line, each killed (SIGKILL) once its output stored
progress of its own (in the snapshot: the snapshot's stored state moved; in the stream, the last
``--stream-kills`` once the snapshot is done: the state or the slot's confirmed position) and a
random 0 to ``--max-kill-delay`` seconds more (4 times that once the snapshot is done); then the writer stops and the same command
runs with ``--idle-timeout`` to the end.

Checked and reported:

* the replica equals the table (with ``--spark`` also the Parquet output's replica built by
  Spark's :func:`pgoutput_arrow.spark.apply_changes`): the table ``COPY``'d as CSV from PostgreSQL (the key, every
  column as PostgreSQL's text, the timestamp as epoch microseconds, the TOASTed text as its
  md5) against the replica projected the same way in DuckDB, ``EXCEPT ALL`` both ways
  (Parquet: the changes of every file applied per key in commit order, snapshot rows as
  upserts, with :func:`pgoutput_arrow.sinks.collapse.collapse_keyed`; Delta: the table as
  deltalake reads it);
* the rows the snapshot read over all runs (the sum of the ``-v`` lines each run logs per
  chunk, killed runs included) against the table's largest size: the excess in chunks per
  kill, at most 1 expected;
* sampled every 100 ms from ``pg_stat_activity``: the oldest open transaction that holds an
  xmin among the runs' sessions (``PGAPPNAME=pgoutput-soak``; the harness's own queries, a
  ``count(*)`` of the table among them, left out) against the longest chunk read, and
  the slot's lag (``pg_current_wal_lsn() - confirmed_flush_lsn``) while a run streams.

Usage: ``python benches/online_soak.py [--versions 18,15] [--formats parquet,delta]
[--rows 5000000] [--kills 20] [--chunk-rows 50000] [--writes-per-s 200]
[--out bench-data/online_soak.json]`` (about 15 minutes per version and format at 5 M rows
on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benches"))

from online_snapshot import xmin_holders  # noqa: E402  (beside this file)

SERVER_SETTINGS = {"shared_buffers": "'1GB'", "max_wal_size": "'8GB'", "checkpoint_timeout": "'30min'",
                   "max_replication_slots": "20", "max_wal_senders": "20", "wal_sender_timeout": "'0'"}
LONG = "a value long enough to be stored out of line " * 150
#: The application_name of the runs' sessions (PGAPPNAME): the xmin holders sampled are theirs.
APPLICATION = "pgoutput-soak"
CHUNK_LINE = re.compile(r"online snapshot of (\S+): read (\d+) rows after key .*?"
                        r"(?: and (\d+) rows read again)? in ([0-9.]+) s")
#: Spark's executors read the chunks' parts (the driver reads only their keys' bounds): each
#: part is counted at its most rows when it starts (a kill may cut it short), timed when done.
PART_START_LINE = re.compile(r"online snapshot of (\S+): reading part \d+/\d+ of the chunk at \S+ on an "
                             r"executor, at most (\d+) rows")
PART_DONE_LINE = re.compile(r"online snapshot of (\S+): part \d+/\d+ of the chunk at \S+ read on an executor: "
                            r"\d+ rows in ([0-9.]+) s")


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Writer(threading.Thread):
    """Random small transactions on ``soak`` until stopped; ``add_column`` once asked."""

    def __init__(self, pg: Any, rows: int, rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.pg, self.rows, self.rate = pg, rows, rate
        self.rnd = random.Random(seed)
        self.stop = threading.Event()
        self.add_column = threading.Event()
        self.added = False
        self.pid = 0
        self.transactions = 0
        self.error: BaseException | None = None
        self.next_id = rows * 4
        #: The last key of the chunks stored so far (None: none, or the snapshot is done):
        #: half the writes go to the chunk being read, just past it.
        self.hot_after: int | None = None
        self.chunk_rows = 1

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001  (reported by the main thread)
            self.error = e

    def _run(self) -> None:
        conn = self.pg.connect()
        conn.autocommit = False
        rnd = self.rnd
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), EXISTS (SELECT FROM information_schema.columns "
                        "WHERE table_name = 'soak' AND column_name = 'extra')")
            self.pid, self.added = cur.fetchone()
            conn.commit()
            while not self.stop.is_set():
                t0 = time.perf_counter()
                if self.add_column.is_set() and not self.added:
                    cur.execute("ALTER TABLE soak ADD COLUMN extra int")
                    conn.commit()
                    self.added = True
                for _ in range(rnd.randint(1, 4)):
                    self._one(cur, rnd)
                conn.commit()
                self.transactions += 1
                time.sleep(max(0.0, 1 / self.rate - (time.perf_counter() - t0)))
        conn.close()

    def _one(self, cur: Any, rnd: random.Random) -> None:
        hot = self.hot_after
        if hot is not None and rnd.random() < 0.5:
            i = hot + rnd.randint(1, self.chunk_rows)
        else:
            i = rnd.randint(1, self.rows + 1000)
        r = rnd.random()
        if r < 0.25:  # the TOASTed value (where there is one) left unsent
            extra = ", extra = coalesce(extra, 0) + 1" if self.added else ""
            cur.execute(f"UPDATE soak SET name = name || '+', n = n + 1{extra} WHERE id = %s", (i,))
        elif r < 0.35:
            cur.execute("UPDATE soak SET doc = %s WHERE id = %s", (LONG + str(rnd.random()), i))
        elif r < 0.5:
            cur.execute("DELETE FROM soak WHERE id = %s", (i,))
        elif r < 0.7:
            self.next_id += 1
            cur.execute("INSERT INTO soak (id, k, name, n, at, doc) VALUES (%s, %s, 'new', 1.5, now(), %s) "
                        "ON CONFLICT DO NOTHING",
                        (rnd.choice([self.next_id, i]), i, LONG if rnd.random() < 0.2 else "short"))
        elif r < 0.85:  # a key change, the TOASTed value unsent; into the part read or not
            to = rnd.randint(1, self.rows * 2)
            cur.execute("UPDATE soak SET id = %s WHERE id = %s AND NOT EXISTS (SELECT FROM soak WHERE id = %s)",
                        (to, i, to))
        else:
            cur.execute("UPDATE soak SET k = k + 1, at = at + interval '1 second' WHERE id BETWEEN %s AND %s",
                        (i, i + 3))


class Sampler(threading.Thread):
    """Every 100 ms: each open transaction of the runs holding an xmin (sessions other than
    ``exclude`` and its own), and the slot's lag while it is active."""

    def __init__(self, pg: Any, exclude: list[int], slot: str) -> None:
        super().__init__(daemon=True)
        self.pg, self.exclude, self.slot = pg, exclude, slot
        self.stop = threading.Event()
        self.lags: list[tuple[bool, int]] = []  # (the snapshot unfinished, bytes)
        self.snapshot_running = True
        #: Which run is going, and since when (set by the loop that starts them).
        self.run_name, self.run_started = "", time.monotonic()
        #: Each xmin-holding transaction seen, (pid, its start) → (its oldest age seen, the run,
        #: seconds from the run's start to the transaction's, its state and query then).
        self.holders: dict[tuple[int, float], tuple[float, str, float, str]] = {}

    def run(self) -> None:
        conn = self.pg.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            while not self.stop.is_set():
                for pid, start, age, what in xmin_holders(cur, self.exclude, APPLICATION):
                    seen = self.holders.get((pid, start))
                    into_run = seen[2] if seen else max(0.0, time.monotonic() - self.run_started - age)
                    self.holders[(pid, start)] = (max(age, seen[0] if seen else 0.0), self.run_name, into_run, what)
                cur.execute("SELECT active, (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint "
                            "FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
                row = cur.fetchone()
                if row is not None and row[0] and row[1] is not None:
                    self.lags.append((self.snapshot_running, int(row[1])))
                time.sleep(0.1)
        conn.close()


def read_state(out: Path, fmt: str) -> Any:
    try:
        if fmt == "spark":  # the latest offset Spark logged
            logged = [f for f in (out / "_checkpoint" / "offsets").iterdir() if f.name.isdigit()]
            latest = max(logged, key=lambda f: int(f.name)) if logged else None
            return json.loads(latest.read_text().splitlines()[-1]) if latest else None
        if fmt == "delta":
            return json.loads((out / "_online_snapshot.json").read_text())
        return json.loads((out / "_checkpoint.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError, IndexError):
        return None


def _holders(holders: dict[tuple[int, float], tuple[float, str, float, str]]) -> dict[str, Any]:
    """The xmin-holding transactions sampled: how many, their ages (median, 95th percentile,
    largest), and the five oldest with their run, how far into it they began, and what they
    were doing when last seen (state and query)."""
    ages = sorted(h[0] for h in holders.values())
    if not ages:
        return {"count": 0}
    top = sorted(holders.values(), reverse=True)[:5]
    return {"count": len(ages), "median_s": round(ages[len(ages) // 2], 3),
            "p95_s": round(ages[int(len(ages) * 0.95)], 3), "max_s": round(ages[-1], 3),
            "oldest": [{"age_s": round(a, 2), "run": r, "began_into_run_s": round(t, 1), "doing": w}
                       for a, r, t, w in top]}


def progress(pg: Any, out: Path, fmt: str, slot: str) -> tuple[Any, Any]:
    """What a run stored: the output's state, and the position the slot confirmed."""
    rows = pg.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    return read_state(out, fmt), rows[0][0] if rows else None


def _online(state: Any, fmt: str) -> Any:
    if fmt == "spark":
        return state.get("online") if state else None
    return state.get("online_snapshot") if fmt != "delta" and state else state


def finished(state: Any, fmt: str) -> bool:
    online = _online(state, fmt)
    return bool(online) and all(t["done"] and not t["again"] for t in online["tables"].values())


def last_key(state: Any, fmt: str) -> int | None:
    """The last key of the chunks the output holds (None: none yet, or the table is done)."""
    table = (_online(state, fmt) or {}).get("tables", {}).get("public.soak")
    if not table or table["done"] or table["after"] is None:
        return None
    return int(table["after"][0])


def chunk_reads(stderr: str) -> tuple[int, int, list[float]]:
    """(rows read in key ranges, rows read again, each chunk's read time) from ``-v`` lines."""
    rows = again = 0
    times = []
    for m in CHUNK_LINE.finditer(stderr):
        rows += int(m.group(2))
        again += int(m.group(3) or 0)
        times.append(float(m.group(4)))
    rows += sum(int(m.group(2)) for m in PART_START_LINE.finditer(stderr))
    times += [float(m.group(2)) for m in PART_DONE_LINE.finditer(stderr)]
    return rows, again, times


SERVER_SQL = ("COPY (SELECT id::text, k::text, name, n::text, (extract(epoch FROM at) * 1000000)::bigint::text, "
              "md5(doc), extra::text FROM soak) TO STDOUT (FORMAT csv)")
REPLICA_SQL = ("SELECT id::varchar, k::varchar, name, n::varchar, epoch_us(\"at\")::varchar, md5(doc), "
               "extra::varchar FROM replica")


def server_table(pg: Any, csv_path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    env = {**os.environ, "PGPASSWORD": pg.password, "LD_LIBRARY_PATH": pg._env["LD_LIBRARY_PATH"]}
    with open(csv_path, "wb") as f:
        subprocess.run([str(pg.bin_dir / "psql"), "-h", pg.host, "-p", str(pg.port), "-U", pg.user, "-d",
                        pg.dbname, "-c", SERVER_SQL], check=True, env=env, stdout=f)
    names = ["id", "k", "name", "n", "at", "doc", "extra"]
    return pacsv.read_csv(csv_path, read_options=pacsv.ReadOptions(column_names=names),
                          convert_options=pacsv.ConvertOptions(
                              column_types={c: pa.string() for c in names}, strings_can_be_null=True,
                              quoted_strings_can_be_null=False))


def parquet_replica(out: Path) -> Any:
    """The changes of every file of ``soak`` applied per key in commit order (snapshot rows as
    upserts), as a table of its columns; a value no change sent is a marker never equal to
    PostgreSQL's."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import pgoutput_arrow
    from pgoutput_arrow._files import decoded
    from pgoutput_arrow.sinks.collapse import DELETED, SENT_PREFIX, collapse_keyed, in_commit_order

    files = sorted((out / "public.soak").glob("*.parquet"))
    tables = [decoded(pq.read_table(f)) for f in files]
    unified = pgoutput_arrow.unify_schemas([t.schema for t in tables])
    changes = in_commit_order(pa.concat_tables([pgoutput_arrow.conform(t, unified) for t in tables]))
    columns = [c for c in ["id", "k", "name", "n", "at", "doc", "extra"] if c in changes.column_names]
    collapsed = collapse_keyed(changes, columns, ["id"])
    rows = collapsed.rows
    for c in collapsed.partial_columns:
        never = pc.invert(rows.column(SENT_PREFIX + c))
        value = rows.column(c)
        marker = pa.scalar("<never sent>") if pa.types.is_string(value.type) else None
        if marker is not None:
            rows = rows.set_column(rows.column_names.index(c), c, pc.if_else(never, marker, value))
        elif pc.any(never).as_py():
            raise AssertionError(f"column {c}: a row's value was never sent")
    rows = rows.filter(pc.invert(rows.column(DELETED)))
    return rows.select(columns), changes.num_rows


def spark_replica(out: Path) -> Any:
    """The Parquet output read by Spark (local[2]) and applied by
    :func:`pgoutput_arrow.spark.apply_changes` (a snapshot row is an upsert of its key)."""
    from pyspark.sql import SparkSession

    from pgoutput_arrow.spark import apply_changes

    spark = (SparkSession.builder.master("local[2]").appName("online-soak")
             .config("spark.driver.memory", "6g").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.maxResultSize", "0")  # the replica (over 1 GiB) comes back whole
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        changes = spark.read.option("mergeSchema", "true").parquet(str(out / "public.soak"))
        replica = apply_changes(changes, ["id"])
        return replica.toArrow(), changes.count()
    finally:
        spark.stop()


def delta_replica(out: Path) -> Any:
    from deltalake import DeltaTable

    table = DeltaTable(str(out / "public.soak")).to_pyarrow_table()
    return table, table.num_rows


def compare(server: Any, replica: Any) -> tuple[int, int, list[Any], list[Any]]:
    """(rows only PostgreSQL has, rows only the replica has, samples of each)."""
    import duckdb

    if "extra" not in replica.column_names:
        import pyarrow as pa
        replica = replica.append_column("extra", pa.nulls(replica.num_rows, pa.int32()))
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("server_rows", server)
    con.register("replica", replica)
    con.execute(f"CREATE TEMP TABLE r AS {REPLICA_SQL}")
    missing = con.execute("SELECT count(*) FROM (SELECT * FROM server_rows EXCEPT ALL SELECT * FROM r)").fetchone()[0]
    extra = con.execute("SELECT count(*) FROM (SELECT * FROM r EXCEPT ALL SELECT * FROM server_rows)").fetchone()[0]
    samples_m = con.execute("SELECT * FROM (SELECT * FROM server_rows EXCEPT ALL SELECT * FROM r) LIMIT 3").fetchall()
    samples_e = con.execute("SELECT * FROM (SELECT * FROM r EXCEPT ALL SELECT * FROM server_rows) LIMIT 3").fetchall()
    return missing, extra, samples_m, samples_e


def soak_one(pg: Any, version: int, fmt: str, args: argparse.Namespace, work: Path, seed: int) -> dict[str, Any]:
    slot = f"soak_{fmt}"
    out = work / f"pg{version}_{fmt}"
    if fmt == "spark":  # Spark's streaming source, its progress in the query's checkpoint
        cmd = [sys.executable, str(Path(__file__).with_name("spark_online_job.py")), "--dsn", pg.dsn,
               "--slot", slot, "--out", str(out), "--chunk-rows", str(args.chunk_rows)]
        if args.spark_chunks_on_driver:
            cmd.append("--chunks-on-driver")
        last_cmd = [*cmd, "--trigger", "available-now"]
    else:
        cmd = [sys.executable, "-m", "pgoutput_arrow.cli", "-v", "--dsn", pg.dsn, "--slot", slot, "--create-slot",
               "--publication", "soak", "--online-snapshot", "--snapshot-chunk-rows", str(args.chunk_rows),
               "--format", fmt, "--output", str(out), "--commit-interval", "0.5"]
        last_cmd = [*cmd, "--idle-timeout", "5"]
    rng = random.Random(seed)
    writer = Writer(pg, args.rows, args.writes_per_s, seed)
    writer.chunk_rows = args.chunk_rows
    writer.start()
    while not writer.pid and writer.error is None:
        time.sleep(0.01)
    sampler = Sampler(pg, [writer.pid], slot)
    sampler.start()
    stderr_all: list[str] = []
    kills = {"snapshot": 0, "stream": 0}
    most_rows = int(pg.scalar("SELECT count(*) FROM soak"))
    t0 = time.monotonic()
    try:
        for i in range(args.kills):
            if i == args.kills // 3:
                writer.add_column.set()
            before = progress(pg, out, fmt, slot)
            in_snapshot = not (before[0] and finished(before[0], fmt))
            err_path = work / f"pg{version}_{fmt}_run{i}.err"
            sampler.run_name, sampler.run_started = f"run {i}", time.monotonic()
            with open(err_path, "w") as err:
                # A session of its own: the kill takes the whole run (Spark's JVM and its
                # Python workers too), as a node's death would.
                proc = subprocess.Popen(cmd, stderr=err, stdout=subprocess.DEVNULL, start_new_session=True,
                                        env={**os.environ, "PGAPPNAME": APPLICATION})
                deadline = time.monotonic() + 600
                stream_kill = i >= args.kills - args.stream_kills
                while time.monotonic() < deadline and proc.poll() is None:
                    now = progress(pg, out, fmt, slot)
                    writer.hot_after = last_key(now[0], fmt)
                    # In the snapshot: once the snapshot's stored progress moved (a slot
                    # confirmed further by changes alone would kill Spark's runs before any
                    # chunk is claimed: every run would read the same first chunk).
                    moved = _online(now[0], fmt) != _online(before[0], fmt) if in_snapshot and not stream_kill \
                        else now != before
                    if moved and (not stream_kill or (now[0] and finished(now[0], fmt))):
                        break
                    time.sleep(0.05)
                if proc.poll() is not None:
                    raise AssertionError(f"run {i} ended with {proc.returncode}: {err_path.read_text()[-2000:]}")
                time.sleep(rng.uniform(0.0, args.max_kill_delay if in_snapshot else 4 * args.max_kill_delay))
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
            stderr_all.append(err_path.read_text())
            in_snapshot = in_snapshot and not stream_kill
            kills["snapshot" if in_snapshot else "stream"] += 1
            most_rows = max(most_rows, int(pg.scalar("SELECT count(*) FROM soak")))
            deadline = time.monotonic() + 30
            while pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)):
                assert time.monotonic() < deadline, "the killed run's walsender stayed"
                time.sleep(0.1)
            state = read_state(out, fmt)
            sampler.snapshot_running = not (state and finished(state, fmt))
            log(f"pg{version} {fmt}: kill {i + 1}/{args.kills} ({'snapshot' if in_snapshot else 'stream'}), "
                f"{chunk_reads(stderr_all[-1])[0]} rows read by that run")
        if writer.error is not None:
            raise writer.error
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    sampler.run_name, sampler.run_started = "last run", time.monotonic()
    last = subprocess.run(last_cmd, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PGAPPNAME": APPLICATION})
    sampler.stop.set()
    sampler.join()
    stderr_all.append(last.stderr)
    if last.returncode != 0:
        raise AssertionError(f"the last run failed ({last.returncode}): {last.stderr[-3000:]}")
    seconds = time.monotonic() - t0
    state = read_state(out, fmt)
    assert finished(state, fmt), state
    size = int(pg.scalar("SELECT count(*) FROM soak"))
    most_rows = max(most_rows, size)
    log(f"pg{version} {fmt}: comparing {size} rows with the replica")
    server = server_table(pg, work / f"pg{version}_{fmt}_server.csv")
    replica, changes = (parquet_replica(out) if fmt == "parquet" else spark_replica(out) if fmt == "spark"
                        else delta_replica(out))
    missing, extra, s_missing, s_extra = compare(server, replica)
    spark_equal = None
    if fmt == "parquet" and args.spark:
        log(f"pg{version} parquet: the same output through Spark's apply_changes")
        spark_rows, _ = spark_replica(out)
        s_m, s_e, _, _ = compare(server, spark_rows)
        spark_equal = {"equal": s_m == 0 and s_e == 0, "rows_only_in_postgres": s_m, "rows_only_in_replica": s_e}
    read_rows = again_rows = 0
    chunk_times: list[float] = []
    for text in stderr_all:
        r, a, t = chunk_reads(text)
        read_rows, again_rows = read_rows + r, again_rows + a
        chunk_times += t
    excess_chunks = (read_rows - most_rows) / args.chunk_rows
    lag_snapshot = [b for running, b in sampler.lags if running]
    lag_stream = [b for running, b in sampler.lags if not running]
    result = {
        "version": version, "format": fmt, "rows_at_start": args.rows, "rows_at_end": size,
        "largest_rows": most_rows, "chunk_rows": args.chunk_rows, "kills": kills,
        "writer_transactions": writer.transactions, "seconds": round(seconds, 1),
        "equal": missing == 0 and extra == 0, "rows_only_in_postgres": missing, "rows_only_in_replica": extra,
        "samples_only_in_postgres": [list(map(str, r)) for r in s_missing],
        "samples_only_in_replica": [list(map(str, r)) for r in s_extra],
        "changes_in_output": changes, "spark_apply_changes": spark_equal,
        "rows_read": read_rows, "rows_read_again": again_rows,
        "excess_chunks": round(excess_chunks, 2), "excess_chunks_per_kill": round(excess_chunks / args.kills, 3),
        "chunks_read": len(chunk_times), "longest_chunk_read_s": max(chunk_times, default=0.0),
        "median_chunk_read_s": statistics.median(chunk_times) if chunk_times else 0.0,
        "oldest_xmin_holder_s": round(max((h[0] for h in sampler.holders.values()), default=0.0), 3),
        "xmin_holders": _holders(sampler.holders),
        "lag_bytes_during_snapshot": {"median": statistics.median(lag_snapshot) if lag_snapshot else None,
                                      "max": max(lag_snapshot, default=None)},
        "lag_bytes_after_snapshot": {"median": statistics.median(lag_stream) if lag_stream else None,
                                     "max": max(lag_stream, default=None)},
    }
    log(f"pg{version} {fmt}: " + json.dumps(result))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", default="18,15")
    p.add_argument("--formats", default="parquet,delta",
                   help="parquet, delta (pgoutput-dump's outputs), spark (Spark's streaming source, "
                        "benches/spark_online_job.py, its replica by pgspark.apply_changes)")
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--toast-every", type=int, default=500)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--stream-kills", type=int, default=5,
                   help="of the kills, the last N wait for the snapshot to finish: kills of the stream")
    p.add_argument("--max-kill-delay", type=float, default=0.5,
                   help="seconds after a run stored progress it is killed, at most (in the stream: 4 times that)")
    p.add_argument("--chunk-rows", type=int, default=50_000)
    p.add_argument("--spark-chunks-on-driver", action="store_true",
                   help="--formats spark: the streaming source's chunksOnDriver option (every chunk read by the driver)")
    p.add_argument("--writes-per-s", type=float, default=200.0)
    p.add_argument("--spark", action="store_true",
                   help="also build the Parquet output's replica with Spark (pgspark.apply_changes) and compare it")
    p.add_argument("--seed", type=int, default=int(os.environ.get("PGOUTPUT_SOAK_SEED", time.time_ns() % 2**31)))
    p.add_argument("--work", type=Path, default=None, help="where the outputs go (default: a temporary directory)")
    p.add_argument("--out", type=Path,
                   default=Path(os.environ.get("PGOUTPUT_BENCH_DATA", "bench-data")) / "online_soak.json")
    args = p.parse_args()
    import tempfile

    from pg_harness import PgServer

    log(f"seed {args.seed}")
    results = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        for version in [int(v) for v in args.versions.split(",")]:
            with PgServer(version=version, settings=SERVER_SETTINGS) as pg:
                log(f"pg{version}: {args.rows} rows")
                pg.execute("CREATE TABLE soak (id bigint PRIMARY KEY, k int, name text, n numeric(12,3), "
                           "at timestamptz, doc text)")
                pg.execute("ALTER TABLE soak ALTER COLUMN doc SET STORAGE EXTERNAL")
                pg.execute(f"INSERT INTO soak SELECT i, i %% 1000, 'name ' || i, i / 7.0, '2024-01-01'::timestamptz "
                           f"+ i * interval '1 second', CASE WHEN i %% {args.toast_every} = 0 THEN %s || i "
                           f"ELSE 'short ' || i END FROM generate_series(1, {args.rows}) i", (LONG,))
                pg.execute("VACUUM ANALYZE soak")
                pg.execute("CREATE PUBLICATION soak FOR TABLE soak")
                log(f"pg{version}: table {int(pg.scalar('SELECT pg_table_size(%s)', ('soak',))) / 1e6:.0f} MB")
                for fmt in args.formats.split(","):
                    results.append(soak_one(pg, version, fmt, args, work, args.seed + version))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"{'server':>6} {'format':>7} {'kills':>12} {'equal':>5} {'rows read':>10} {'largest':>9} "
          f"{'excess/kill':>11} {'oldest xmin':>11} {'longest chunk':>13} {'lag (snapshot)':>16}")
    for r in results:
        lag = r["lag_bytes_during_snapshot"]
        print(f"{'PG' + str(r['version']):>6} {r['format']:>7} "
              f"{r['kills']['snapshot']:>3} + {r['kills']['stream']:>2} str {str(r['equal']):>5} "
              f"{r['rows_read']:>10} {r['largest_rows']:>9} {r['excess_chunks_per_kill']:>11} "
              f"{r['oldest_xmin_holder_s']:>10.2f}s {r['longest_chunk_read_s']:>12.2f}s "
              f"{(lag['median'] or 0) / 1e6:>7.1f}/{(lag['max'] or 0) / 1e6:.1f} MB")
    return 0 if all(r["equal"] and (r["spark_apply_changes"] or {"equal": True})["equal"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
