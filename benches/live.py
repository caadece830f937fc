"""Drain a replication slot of at least a million changes, live, with three consumers.

* ``pgoutput_arrow``: our live source, ``pgoutput_arrow.stream(dsn, slot=..., publication=...)``,
  decoding to Arrow;
* ``pg_recvlogical``: PostgreSQL's own client writing to /dev/null: the server's limit
  (the walsender decoding the WAL is the same work for every consumer);
* ``psycopg2+pypgoutput``: psycopg2's ``LogicalReplicationConnection`` feeding each message
  to pypgoutput's message classes;
* ``sql_peek``: no client at all, ``SELECT count(*) FROM pg_logical_slot_peek_binary_changes``
  in one backend: the server's logical decoding and pgoutput alone, without the network.

Beside the wall time, each run records the CPU time of the client process (its rusage) and of
the server process that decoded for it (the walsender, or the backend of ``sql_peek``: its CPU
time reaches the postmaster's ``cutime``/``cstime`` when it exits). A walsender busy close to
100% of the wall time is a run bounded by the server; one well below waited for its client.
After each run the slot is peeked again: a consumer that left a change in it failed.

Every consumer gets a slot of its own, all created before the workload, so each drains the
same changes. Each run is one process; repetitions interleave the consumers, in an order
rotated from one repetition to the next. The clock of a
Python consumer starts before it connects (after its imports) and stops once it has seen
every change; pg_recvlogical is timed as a whole process, stopped by ``--endpos`` at the
WAL position after the workload.

Protocol version 1, text mode (what all three consumers read).

Usage: ``python benches/live.py [--changes 1000000] [--reps 3] [--out bench-data/live.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

CONSUMERS = ("pgoutput_arrow", "pg_recvlogical", "psycopg2_pypgoutput", "sql_peek")
OPTIONS = {"proto_version": "1", "publication_names": "pub"}

SERVER_SETTINGS = {
    "logical_decoding_work_mem": "'256MB'",
    "shared_buffers": "'128MB'",
    "max_wal_size": "'4GB'",
    "checkpoint_timeout": "'30min'",
    "autovacuum": "off",
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "wal_sender_timeout": "'5min'",
}


def log(msg: str) -> None:
    print(f"[live {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- workers


def consume_pgoutput_arrow(dsn: str, slot: str, expected: int, end_lsn: int) -> dict[str, Any]:
    import pgoutput_arrow

    t0 = time.perf_counter()
    rows = 0
    batches = 0
    # The same protocol as the other consumers; acknowledged as consumed, like theirs.
    with pgoutput_arrow.stream(dsn, slot=slot, publication="pub", proto_version=1,
                               stop_at_lsn=end_lsn) as stream:
        # Whole decoder flushes, each confirmed once counted (confirmed at close at the
        # latest), as pg_recvlogical confirms what it wrote.
        for group, ack_lsn in stream.groups():
            rows += sum(b.num_rows for b in group if b.kind == "table")
            batches += len(group)
            stream.ack(ack_lsn)
            if rows >= expected:
                break
    elapsed = time.perf_counter() - t0
    return {"seconds": elapsed, "changes": rows, "batches": batches}


def consume_psycopg2(dsn: str, slot: str, expected: int, end_lsn: int) -> dict[str, Any]:
    import psycopg2
    import psycopg2.extras
    from pypgoutput import decoders

    by_kind: dict[int, Any] = {
        ord("B"): decoders.Begin, ord("C"): decoders.Commit, ord("R"): decoders.Relation,
        ord("I"): decoders.Insert, ord("U"): decoders.Update, ord("D"): decoders.Delete,
        ord("T"): decoders.Truncate,
    }
    t0 = time.perf_counter()
    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False, options=OPTIONS)
    state = {"changes": 0, "bytes": 0, "n": 0}

    def consume(msg: Any) -> None:
        payload = msg.payload
        state["bytes"] += len(payload)
        cls = by_kind.get(payload[0])
        if cls is not None:
            cls(payload)
            if payload[0] in (73, 85, 68):  # I, U, D
                state["changes"] += 1
        state["n"] += 1
        if state["n"] % 10_000 == 0:
            msg.cursor.send_feedback(flush_lsn=msg.data_start)
        # The workload's last Commit: every change has been seen; confirmed up to the
        # Commit's end LSN (bytes 10-18), as pg_recvlogical and pgoutput_arrow confirm.
        if payload[0] == 67 and state["changes"] >= expected:  # C
            msg.cursor.send_feedback(flush_lsn=int.from_bytes(payload[10:18], "big"), force=True)
            raise psycopg2.extras.StopReplication()

    try:
        cur.consume_stream(consume)
    except psycopg2.extras.StopReplication:
        pass
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"seconds": elapsed, "changes": state["changes"], "payload_bytes": state["bytes"]}


# --------------------------------------------------------------------------- parent


def run_recvlogical(pg: Any, slot: str, end_lsn: int) -> dict[str, Any]:
    from pg_harness import int_to_lsn

    env = {**os.environ, "PGPASSWORD": pg.password, "LD_LIBRARY_PATH": pg._env["LD_LIBRARY_PATH"]}
    # Status every 10 s and no fsync (it writes to /dev/null): pg_recvlogical's defaults,
    # spelled out.
    cmd = [str(pg.bin_dir / "pg_recvlogical"), "-h", pg.host, "-p", str(pg.port), "-U", pg.user,
           "-d", "bench_live", "--slot", slot, "--start", "--no-loop",
           "--status-interval", "10", "--fsync-interval", "0",
           "--endpos", int_to_lsn(end_lsn), "-f", "/dev/null",
           "-o", f"proto_version={OPTIONS['proto_version']}",
           "-o", f"publication_names={OPTIONS['publication_names']}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    return {"seconds": time.perf_counter() - t0}


def run_sql_peek(pg: Any, slot: str) -> dict[str, Any]:
    """The server alone: one backend decodes the slot through pgoutput, nothing is sent."""
    options = ", ".join(f"'{k}', '{v}'" for k, v in OPTIONS.items())
    conn = pg.connect(pg.dsn_for(dbname="bench_live"))
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, {options})",
                    (slot,))
        messages = cur.fetchone()[0]
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"seconds": elapsed, "messages": messages}


def postmaster_children_cpu(pg: Any) -> float:
    """CPU seconds of the postmaster's exited children (walsenders, backends) so far."""
    pid = int((pg.data_dir / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # Fields 16 and 17 of proc(5), cutime and cstime; the split starts at field 3.
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def children_waits() -> int:
    """Voluntary context switches of the exited children so far: each is the client waiting
    for the server (an empty socket), which the server's next send must wake."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw


def changes_left(pg: Any, slot: str) -> int:
    """Row changes still in the slot after a consumer ran (0: it drained them all)."""
    options = ", ".join(f"'{k}', '{v}'" for k, v in OPTIONS.items())
    conn = pg.connect(pg.dsn_for(dbname="bench_live"))
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                    f"{options}) WHERE get_byte(data, 0) IN (73, 85, 68)", (slot,))
        left = cur.fetchone()[0]
    conn.close()
    return int(left)


def settled_server_cpu(pg: Any) -> float:
    """The postmaster's children CPU once no child exited for 0.3 s (the backends of the
    previous step have gone)."""
    cpu = postmaster_children_cpu(pg)
    for _ in range(30):
        time.sleep(0.3)
        now = postmaster_children_cpu(pg)
        if now == cpu:
            break
        cpu = now
    return cpu


def server_exited(pg: Any, before: float) -> float:
    """Waits for the server process of the run to exit; its CPU seconds."""
    cpu = postmaster_children_cpu(pg)
    for _ in range(50):
        time.sleep(0.1)
        now = postmaster_children_cpu(pg)
        if now == cpu and now > before:
            break
        cpu = now
    return cpu - before


def run_python(consumer: str, dsn: str, slot: str, expected: int, end_lsn: int
               ) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", consumer, "--dsn", dsn, "--slot", slot,
           "--expected", str(expected), "--end-lsn", str(end_lsn)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{consumer} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int,
                    default=int(os.environ.get("PGOUTPUT_LIVE_CHANGES", "1000000")))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("PGOUTPUT_LIVE_REPS", "3")))
    ap.add_argument("--consumers", default=",".join(CONSUMERS))
    ap.add_argument("--out", default=str(ROOT / "bench-data" / "live.json"))
    ap.add_argument("--worker", choices=("pgoutput_arrow", "psycopg2_pypgoutput"))
    ap.add_argument("--dsn")
    ap.add_argument("--slot")
    ap.add_argument("--expected", type=int)
    ap.add_argument("--end-lsn", type=int)
    args = ap.parse_args()

    if args.worker:
        fn = consume_pgoutput_arrow if args.worker == "pgoutput_arrow" else consume_psycopg2
        print(json.dumps(fn(args.dsn, args.slot, args.expected, args.end_lsn)))
        return

    from pg_harness import PgServer

    consumers = args.consumers.split(",")
    with PgServer(version=18, settings=SERVER_SETTINGS) as pg:
        pg.execute("CREATE DATABASE bench_live")
        conn = pg.connect(pg.dsn_for(dbname="bench_live"))
        cur = conn.cursor()
        # pgbench_accounts' shape: what a pgbench -i load sends.
        cur.execute("CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, "
                    "filler char(84))")
        cur.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        slots = {(c, r): f"live_{c.split('_')[0]}_{r}" for r in range(args.reps) for c in consumers}
        for slot in slots.values():
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        t0 = time.time()
        per_txn = 10_000
        for lo in range(1, args.changes + 1, per_txn):
            hi = min(args.changes, lo + per_txn - 1)
            cur.execute("INSERT INTO accounts SELECT i, i / 100000 + 1, 0, '' "
                        "FROM generate_series(%s, %s) AS i", (lo, hi))
        cur.execute("SELECT pg_current_wal_lsn()::text")
        from pg_harness import lsn_to_int

        end_lsn = lsn_to_int(cur.fetchone()[0])
        log(f"workload: {args.changes} inserts in {time.time() - t0:.1f}s; "
            f"{len(slots)} slots; end LSN {end_lsn:X}")
        dsn = pg.dsn_for(dbname="bench_live")
        results: list[dict[str, Any]] = []
        for r in range(args.reps):
            # Rotated, so that no consumer always runs first (or right after another).
            for c in consumers[r % len(consumers):] + consumers[:r % len(consumers)]:
                slot = slots[(c, r)]
                server_before, client_before, waits_before = settled_server_cpu(pg), children_cpu(), children_waits()
                try:
                    if c == "pg_recvlogical":
                        res = run_recvlogical(pg, slot, end_lsn)
                    elif c == "sql_peek":
                        res = run_sql_peek(pg, slot)
                    else:
                        res = run_python(c, dsn, slot, args.changes, end_lsn)
                except Exception as e:  # noqa: BLE001 - reported, the others still run
                    log(f"{c} rep {r}: {e}")
                    results.append({"consumer": c, "rep": r, "error": str(e)[-1500:]})
                    continue
                res["client_cpu_s"] = children_cpu() - client_before if c != "sql_peek" else 0.0
                res["client_waits"] = children_waits() - waits_before if c != "sql_peek" else 0
                res["server_cpu_s"] = server_exited(pg, server_before)
                res["server_busy"] = res["server_cpu_s"] / res["seconds"]
                res["changes_left"] = changes_left(pg, slot) if c != "sql_peek" else 0
                res.update(consumer=c, rep=r, rate_changes_per_s=args.changes / res["seconds"])
                log(f"{c:20s} rep {r}: {res['seconds']:.2f}s "
                    f"({res['rate_changes_per_s'] / 1e3:.0f}k changes/s); CPU client "
                    f"{res['client_cpu_s']:.2f}s, server {res['server_cpu_s']:.2f}s "
                    f"({res['server_busy']:.0%} busy); client waits {res['client_waits']:,}; "
                    f"{res['changes_left']} changes left in the slot")
                if res["changes_left"]:
                    res["error"] = f"{res['changes_left']} changes left in the slot"
                results.append(res)
    medians = {}
    for c in consumers:
        runs = [r for r in results if r["consumer"] == c and "error" not in r]
        if runs:
            median = statistics.median(r["seconds"] for r in runs)
            medians[c] = {"median_s": median, "changes_per_s": args.changes / median, "runs": len(runs),
                          "client_cpu_s": statistics.median(r["client_cpu_s"] for r in runs),
                          "server_cpu_s": statistics.median(r["server_cpu_s"] for r in runs),
                          "server_busy": statistics.median(r["server_busy"] for r in runs),
                          "client_waits": statistics.median(r.get("client_waits", 0) for r in runs)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"changes": args.changes, "reps": args.reps, "medians": medians,
                               "results": results}, indent=2) + "\n")
    log(f"wrote {out}: {json.dumps(medians)}")


if __name__ == "__main__":
    main()
