"""Decode the same captures with pgoutput_arrow and with Python peers; report MB/s and ratios.

Every (decoder, capture) pair runs in a process of its own (``--worker``), so that one
decoder's allocations and imports do not slow the next. Each worker loads the capture
before the clock starts, runs the decoder ``--runs`` times (at least 5) and prints the
seconds of each run as JSON; the parent keeps the medians.

Decoders:

* ``pgoutput_arrow``: ``pgoutput_arrow.decode(table)`` on the capture as a pyarrow table
  (columns lsn, xid, data), producing pyarrow tables (the default: plain utf8/binary);
* ``pgoutput_arrow_views``: the same with ``views=True`` (text and bytea as view arrays
  into the capture, zero copy): beside the default, what the default's copy costs;
* ``pypgoutput``: pypgoutput's message classes (``pypgoutput.decoders.Begin``, ``Insert``,
  …) on each message, as its ``LogicalReplicationReader`` calls them. pypgoutput reads only
  text-format values ('t'), so it runs on the text-mode captures only;
* ``kind_byte``: a Python loop that only slices each message's kind byte: the floor of any
  per-message work done in Python.

Throughput counts the message payload bytes (not the lsn/xid columns).

Usage: ``python benches/compare.py [--data bench-data] [--runs 5] [--out bench-data/compare.json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
DECODERS = ("pgoutput_arrow", "pgoutput_arrow_views", "pypgoutput", "kind_byte")


def log(msg: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- workers


def _pypgoutput_runner(messages: list[bytes]) -> Callable[[], int]:
    from pypgoutput import decoders

    by_kind: dict[int, Any] = {
        ord("B"): decoders.Begin, ord("C"): decoders.Commit, ord("R"): decoders.Relation,
        ord("I"): decoders.Insert, ord("U"): decoders.Update, ord("D"): decoders.Delete,
        ord("T"): decoders.Truncate,
    }

    def run() -> int:
        n = 0
        for m in messages:
            cls = by_kind.get(m[0])
            if cls is not None:
                cls(m)
                n += 1
        return n

    return run


def _kind_byte_runner(messages: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        n = 0
        for m in messages:
            if m[0:1] == b"I":
                n += 1
        return n

    return run


def _pgoutput_arrow_runner(table: Any, views: bool = False) -> Callable[[], int]:
    import pgoutput_arrow

    def run() -> int:
        result = pgoutput_arrow.decode(table, views=views)
        return _count_rows(result)

    return run


def _count_rows(result: Any) -> int:
    """Rows in whatever decode() returns (a table, a mapping of tables, or an object
    holding them): touching the result keeps the comparison honest."""
    if hasattr(result, "num_rows"):
        return int(result.num_rows)
    if isinstance(result, dict):
        return sum(_count_rows(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return sum(_count_rows(v) for v in result)
    for attr in ("tables", "changes"):
        if hasattr(result, attr):
            return _count_rows(getattr(result, attr))
    return 0


def worker(decoder: str, capture: Path, runs: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    import pyarrow.compute as pc

    table = pq.read_table(capture)
    payload = int(pc.sum(pc.binary_length(table.column("data"))).as_py())
    if decoder.startswith("pgoutput_arrow"):
        run = _pgoutput_arrow_runner(table, views=decoder == "pgoutput_arrow_views")
    else:
        messages: list[bytes] = table.column("data").to_pylist()
        run = (_pypgoutput_runner if decoder == "pypgoutput" else _kind_byte_runner)(messages)
    run()  # warm-up: imports, first allocations
    times = []
    result = 0
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    return {"decoder": decoder, "capture": capture.stem, "payload_bytes": payload,
            "messages": table.num_rows, "times_s": times, "result": result}


# --------------------------------------------------------------------------- parent


def run_worker(decoder: str, capture: Path, runs: int) -> dict[str, Any] | None:
    cmd = [sys.executable, __file__, "--worker", decoder, "--capture", str(capture),
           "--runs", str(runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"{decoder} on {capture.stem} failed:\n{proc.stderr.strip()[-2000:]}")
        return {"decoder": decoder, "capture": capture.stem, "error": proc.stderr.strip()[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("PGOUTPUT_BENCH_DATA", str(ROOT / "bench-data")))
    ap.add_argument("--runs", type=int, default=int(os.environ.get("PGOUTPUT_BENCH_RUNS", "5")))
    ap.add_argument("--out", default=None)
    ap.add_argument("--decoders", default=",".join(DECODERS))
    ap.add_argument("--only", default="", help="comma list of substrings of capture names")
    ap.add_argument("--worker", choices=DECODERS)
    ap.add_argument("--capture")
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.capture), args.runs)))
        return

    if args.runs < 5:
        log(f"--runs {args.runs} is below 5: medians of fewer runs are noisy")
    data = Path(args.data)
    captures = sorted(data.glob("*.parquet"))
    if args.only:
        captures = [c for c in captures if any(o in c.stem for o in args.only.split(","))]
    if not captures:
        sys.exit(f"no captures in {data}: run benches/gen_captures.py first")
    results: list[dict[str, Any]] = []
    for cap in captures:
        for decoder in args.decoders.split(","):
            if decoder == "pypgoutput" and not cap.stem.endswith("-text"):
                continue  # pypgoutput reads text-format values only
            r = run_worker(decoder, cap, args.runs)
            if r is None:
                continue
            if "times_s" in r:
                med = statistics.median(r["times_s"])
                r["median_s"] = med
                r["mb_per_s"] = r["payload_bytes"] / med / 1e6
                log(f"{cap.stem:16s} {decoder:15s} median {med * 1e3:9.1f} ms "
                    f"{r['mb_per_s']:9.1f} MB/s  ({r['messages']} messages)")
            results.append(r)
    out = Path(args.out) if args.out else data / "compare.json"
    out.write_text(json.dumps({"runs": args.runs, "python": sys.version.split()[0],
                               "results": results}, indent=2) + "\n")
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
