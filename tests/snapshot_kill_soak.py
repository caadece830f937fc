"""kill -9 ``pgoutput-dump --snapshot`` many times (default 12): 10 in the middle of
the snapshot, the others at random points of the snapshot or of the stream after it, with writes running, then check that the output equals
PostgreSQL's final rows value by value (the long version of
``test_snapshot.py::test_cli_snapshot_exactly_once_across_kill_9``).

    .venv/bin/python tests/snapshot_kill_soak.py [--kills 12] [--version 18] [--seed N]
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
from test_snapshot import check_dump, run_dump_with_kills  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=12)
    p.add_argument("--snapshot-kills", type=int, default=10,
                   help="how many of the kills land in the middle of a snapshot")
    p.add_argument("--version", type=int, default=18, choices=(15, 18))
    p.add_argument("--seed", type=int, default=time.time_ns() % 2**32)
    args = p.parse_args()
    with PgServer(version=args.version) as pg, tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        tables, stderr = run_dump_with_kills(pg, "soak", Path(tmp) / "out", args.kills, args.seed,
                                             args.snapshot_kills)
        restarts = stderr.count("starting it over")
        check_dump(pg, Path(tmp) / "out", tables)
        print(f"PostgreSQL {args.version}, seed {args.seed}: {args.kills} kill -9s ({args.snapshot_kills} "
              f"aimed at the middle of the snapshot); {restarts} runs found a snapshot cut short and "
              f"started it over; output equals the final SELECT value by value "
              f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
