"""``pgoutput-dump`` drained to /dev/null: wall time and peak memory per output format.

Runs each command on the pgbench capture (made by ``benches/gen_captures.py`` when
missing) with ``--format jsonl``, ``pretty`` and ``parquet`` (into a temporary directory),
``--runs`` times each, and reports the median wall time with its spread (min-max), changes
per second and the peak RSS of the child process (``ru_maxrss`` from ``wait4``).

Several commands can be compared on the same bytes in one run, e.g. the CLI of an earlier
commit against this one::

    python benches/cli_drain.py --capture bench-data/pgbench-binary.parquet \\
        --command before='python -m pgoutput_arrow.cli' --env before=PYTHONPATH=/tmp/old \\
        --command after=.venv/bin/pgoutput-dump

Usage: ``python benches/cli_drain.py [--mb 256] [--runs 3] [--formats jsonl,pretty,parquet]``
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds (user + system), peak RSS in bytes) of one run, stdout
    to /dev/null. CPU time says what the run costs on a busy machine, where wall time
    also counts the waits for a core."""
    with open(os.devnull, "wb") as devnull:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=devnull, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}): {err}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def count_changes(cmd: list[str], env: dict[str, str], capture: Path) -> int:
    out = subprocess.run([*cmd, str(capture), "--stats"], capture_output=True, text=True,
                         env=env, check=True).stdout
    total = next(line for line in out.splitlines() if line.startswith("total"))
    return int(total.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", type=Path, help="a capture file (default: the pgbench "
                    "capture under --data, generated when missing)")
    ap.add_argument("--data", type=Path, default=Path(os.environ.get(
        "PGOUTPUT_BENCH_DATA", ROOT / "bench-data")))
    ap.add_argument("--mb", type=float, default=256, help="size of a generated capture")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--formats", default="jsonl,pretty,parquet")
    ap.add_argument("--command", action="append", default=[], metavar="NAME=CMD",
                    help="a command to time (repeat to compare; default: this checkout's "
                    "pgoutput-dump)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VAR=VALUE",
                    help="an environment variable for the command NAME")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()

    capture = args.capture
    if capture is None:
        capture = args.data / "pgbench-binary.parquet"
        if not capture.exists():
            subprocess.run([sys.executable, str(ROOT / "benches" / "gen_captures.py"), "--mb",
                            str(args.mb), "--only", "pgbench", "--out", str(args.data)],
                           check=True)
    default = str(Path(sys.executable).parent / "pgoutput-dump")
    commands = [c.split("=", 1) for c in args.command] or [["this", default]]
    envs: dict[str, dict[str, str]] = {name: dict(os.environ) for name, _ in commands}
    for item in args.env:
        name, var, value = item.split("=", 2)
        envs[name][var] = value

    name0, cmd0 = commands[0]
    changes = count_changes(shlex.split(cmd0), envs[name0], capture)
    size = capture.stat().st_size
    print(f"capture {capture} ({size / 1e6:.0f} MB, {changes} changes), "
          f"{args.runs} runs each, medians (min-max)")
    print("| command | format | wall s | changes/s (wall) | CPU s | changes/s (CPU) | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    results = []
    for fmt in args.formats.split(","):
        for name, cmd in commands:
            times, cpus, peaks = [], [], []
            for _ in range(args.runs):
                tmp = Path(tempfile.mkdtemp(prefix="cli-drain-"))
                try:
                    extra = ["--output", str(tmp / "out")] if fmt in ("parquet", "arrow") else []
                    t, cpu, rss = run_once([*shlex.split(cmd), str(capture), "--format", fmt,
                                          "--no-progress", *extra], envs[name])
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                times.append(t)
                cpus.append(cpu)
                peaks.append(rss)
            med, cpu_med = statistics.median(times), statistics.median(cpus)
            row = {"command": name, "format": fmt, "seconds": times, "median_s": med,
                   "changes_per_s": changes / med, "cpu_seconds": cpus, "median_cpu_s": cpu_med,
                   "changes_per_cpu_s": changes / cpu_med, "peak_rss_bytes": peaks,
                   "median_peak_rss_bytes": statistics.median(peaks)}
            results.append(row)
            print(f"| {name} | {fmt} | {med:.2f} ({min(times):.2f}-{max(times):.2f}) | "
                  f"{changes / med / 1e3:.0f} k | {cpu_med:.2f} ({min(cpus):.2f}-{max(cpus):.2f}) | "
                  f"{changes / cpu_med / 1e3:.0f} k | {statistics.median(peaks) / 1e6:.0f} "
                  f"({min(peaks) / 1e6:.0f}-{max(peaks) / 1e6:.0f}) |", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"capture": str(capture), "bytes": size,
                                        "changes": changes, "runs": args.runs,
                                        "results": results}, indent=1))


if __name__ == "__main__":
    main()
