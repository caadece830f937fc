"""kill -9 the live Delta or Iceberg sink many times while a workload runs, then check that
every replica equals PostgreSQL's SELECT (read with deltalake and polars, or with pyiceberg
and polars) and that the change logs hold every change exactly once.

The workload is tests/delta_workload.py's rounds (TOAST updates, key changes, deletes, an
added and a dropped column, a retype, a TRUNCATE, a REPLICA IDENTITY FULL table, a keyless
table; with ``--format iceberg`` also a column of each table renamed) plus pgbench upserting
balances from two clients at 500 transactions/s, all the while. ``pgoutput-dump --format
FORMAT --change-log`` is killed with SIGKILL at random points (uniform over 1..5 s of its
life: mid-commit, between commits, between a commit and its acknowledgement) and restarted.

With ``--snapshot N`` the command is ``--create-slot --snapshot`` (the same command line
every time, as a supervisor restarts it) over 50,000 accounts that exist before the slot:
the first N runs are killed during the snapshot (each next run discards it and takes it
again), one more right after the snapshot is complete, then the kills above.

    .venv/bin/python tests/delta_kill.py --kills 12 --pg 18 --seed 1
    .venv/bin/python tests/delta_kill.py --kills 12 --snapshot 5
    .venv/bin/python tests/delta_kill.py --format iceberg --kills 20 --snapshot 5
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from delta_workload import (FORMATS, check_change_log, check_replicas, drain, dump_lake,
                            iceberg_table, setup, workload_round)
from pg_harness import PgServer, bin_dir_for
from threads import CheckedThread


#: A commit of a table of the format, as a file (Iceberg: a new metadata file per commit).
COMMIT_FILES = {"delta": "**/_delta_log/*.json", "iceberg": "**/metadata/*.metadata.json"}


def _commits(out: Path, fmt: str) -> int:
    """Commits under ``out`` (every table's, its creation included)."""
    return sum(1 for _ in out.glob(COMMIT_FILES[fmt]))


def _versions(out: Path, fmt: str, tables: list[str]) -> dict[str, int]:
    """Each replica's Delta version, or its number of Iceberg snapshots."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return {t: DeltaTable(str(out / f"public.{t}")).version() for t in tables}
    return {t: len(iceberg_table(out, f"public.{t}").snapshots()) for t in tables}


def _snapshot_kills(pg: PgServer, p: str, slot: str, out: Path, extra: list[str], n: int,
                    rng: random.Random, fmt: str) -> None:
    """``n`` runs killed during the snapshot, one right after it; then the audit slot."""
    import json

    def record() -> dict[str, object]:
        try:
            return dict(json.loads((out / "_snapshot.json").read_text()))
        except (OSError, ValueError):
            return {}

    def wrote_since(t: float) -> bool:  # a commit of this run (the last run's are discarded)
        for f in out.glob(COMMIT_FILES[fmt]):
            try:
                if f.stat().st_mtime > t:
                    return True
            except FileNotFoundError:
                continue
        return False

    for k in range(n + 1):
        started, wall = time.monotonic(), time.time()
        proc = subprocess.Popen(dump_lake(pg, p, slot, out, *extra, fmt=fmt),
                                stderr=subprocess.PIPE, text=True)
        while not (record().get("done") if k == n else wrote_since(wall)):
            if proc.poll() is not None or time.monotonic() - started > 120:
                raise AssertionError(f"run {k}: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.01)
        if k < n:
            time.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        said = proc.stderr.read() if proc.stderr else ""
        print(f"snapshot run {k} killed {'after' if k == n else 'during'} the snapshot; "
              f"{said.strip()[:200]}", flush=True)
        while pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,)):
            time.sleep(0.05)
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{slot}_audit",))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", choices=FORMATS, default="delta")
    ap.add_argument("--kills", type=int, default=12)
    ap.add_argument("--pg", type=int, default=18, choices=(18, 15))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--snapshot", metavar="N", type=int, default=None,
                    help="--create-slot --snapshot, killed N times during the snapshot")
    ap.add_argument("--keep", metavar="DIR", type=Path, default=None,
                    help="write the lake to DIR/lake and keep it (a failure can be looked at)")
    args = ap.parse_args()
    if args.keep and (args.keep / "lake").exists():
        ap.error(f"--keep {args.keep}: {args.keep / 'lake'} exists (the sink would resume it)")
    rng = random.Random(args.seed)
    fmt = args.format
    # Delta sees a rename as a drop and an add (docs/delta.md): the renamed column's older
    # rows would be null there. Iceberg keeps a rename as one.
    rename = fmt == "iceberg"
    p = slot = "dk"
    extra = ([] if args.snapshot is None else
             ["--create-slot", "--snapshot", "--snapshot-connections", "2",
              "--snapshot-chunk-bytes", str(256 << 10)])
    with PgServer(version=args.pg) as pg, tempfile.TemporaryDirectory() as tmp:
        out = (args.keep or Path(tmp)) / "lake"
        if args.snapshot is None:
            setup(pg, p, slot)
        else:
            setup(pg, p, None, prefill=50000)
            _snapshot_kills(pg, p, slot, out, extra, args.snapshot, rng, fmt)
        pg.execute(f"INSERT INTO {p}_acc SELECT g, 0, 'pgbench' FROM generate_series(100000, 101999) g")
        script = Path(tmp) / "bench.sql"
        script.write_text("\\set aid random(100000, 101999)\n\\set delta random(-5000, 5000)\n"
                          f"INSERT INTO {p}_acc VALUES (:aid, :delta, 'pgbench') ON CONFLICT (aid) "
                          f"DO UPDATE SET abalance = {p}_acc.abalance + :delta;\n")
        stop = threading.Event()
        rounds_done = [0]

        def workload() -> None:
            wl_rng = random.Random(args.seed + 1)
            for r in range(args.rounds):
                workload_round(pg, p, r, wl_rng, args.rounds, rename=rename)
                rounds_done[0] += 1
                if stop.wait(1.2):
                    return

        pgbench = subprocess.Popen(
            [str(bin_dir_for(args.pg) / "pgbench"), "-n", "-c", "2", "-R", "500", "-T", "3600", "-f",
             str(script), pg.dsn], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        worker = CheckedThread(target=workload)
        t0 = time.monotonic()
        worker.start()
        kills = 0
        try:
            while kills < args.kills:
                proc = subprocess.Popen(dump_lake(pg, p, slot, out, *extra, fmt=fmt),
                                        stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(1.0, 5.0))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                print(f"kill {kills} at {time.monotonic() - t0:.1f} s (workload round "
                      f"{rounds_done[0]}); {fmt} commits so far: {_commits(out, fmt)}",
                      flush=True)
        finally:
            # SIGTERM, not SIGINT: a soak started in the background (nohup, `&` in a script)
            # hands its children SIGINT ignored, and pgbench would run its hour out.
            pgbench.terminate()
            pgbench.wait()
            worker.join()
        drain(pg, p, slot, out, *extra, fmt=fmt)
        counts = check_replicas(pg, p, out, fmt)
        changes = check_change_log(pg, p, slot, out, fmt)
        readers = "deltalake and polars" if fmt == "delta" else "pyiceberg and polars"
        what = "Delta versions" if fmt == "delta" else "Iceberg snapshots"
        print(f"{kills} kills over {time.monotonic() - t0:.0f} s, {args.rounds} workload rounds "
              f"+ pgbench: replicas equal SELECT by {readers} ({counts}); change logs hold all "
              f"{changes} changes exactly once; {what} {_versions(out, fmt, list(counts))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
