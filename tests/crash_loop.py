"""Many server crashes in a row under one consumer (the long version of tests/test_crash.py,
run by hand; make test runs the short one)::

    .venv/bin/python tests/crash_loop.py --crashes 10 --version 18 --consumer stream
    .venv/bin/python tests/crash_loop.py --crashes 10 --consumer parquet   # or jsonl, arrow, ...

Each round commits transactions, leaves a multi-statement one and a streamed large one open,
crashes the server (alternately ``pg_ctl stop -m immediate`` and a killed postmaster) and
starts it again; at the end the consumer's output must hold every committed change once and
nothing of the aborted ones. Prints the time taken, exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pg_harness import PgServer  # noqa: E402
from test_crash import crash_under_cli, crash_under_stream  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crashes", type=int, default=10)
    p.add_argument("--version", type=int, choices=(18, 15), default=18)
    p.add_argument("--consumer", choices=("stream", "jsonl", "pretty", "parquet", "arrow"),
                   default="stream")
    args = p.parse_args()
    crashes = ["immediate" if i % 2 == 0 else "kill" for i in range(args.crashes)]
    t0 = time.monotonic()
    with PgServer(version=args.version) as server, tempfile.TemporaryDirectory() as tmp:
        try:
            if args.consumer == "stream":
                crash_under_stream(server, crashes)
            else:
                crash_under_cli(server, crashes, args.consumer, Path(tmp))
        except BaseException as e:  # pytest's Failed is a BaseException
            print(f"FAILED after {time.monotonic() - t0:.1f}s: {e}")
            return 1
    print(f"ok: {args.crashes} crashes of PostgreSQL {args.version} under {args.consumer}, "
          f"every committed change once, nothing aborted, in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
