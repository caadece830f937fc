#!/usr/bin/env python3
"""Writes the seeds of the ``copy`` fuzz target: real ``COPY ... TO STDOUT (FORMAT binary)``
output of a real PostgreSQL (tests/pg_harness.py starts one), one file per column layout
the target can pick, under ``fuzz/seeds/copy/`` (committed: a few KB). Usage::

    .venv/bin/python fuzz/copy_seeds.py [--version 18]

A layout with the unknown type has a ``-text`` twin where that column holds text, for the
target's options without binary values. ``fuzz/seed.py fuzz/corpus/copy`` puts each behind the target's two leading bytes (options
and columns; where the data is cut). The layouts follow ``TYPES`` in
``fuzz_targets/copy.rs``: column ``i`` of layout ``(n, k)`` has type ``TYPES[(i + k) % 10]``.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
OUT = ROOT / "fuzz" / "seeds" / "copy"

#: copy.rs' TYPES as SQL types and values that reach their edges; the unknown type (oid
#: 70000 in the target) is read as bytes: a bytea's are used.
TYPES = ["int4", "text", "int8", "int4[]", "timestamptz", "numeric(10,2)", "uuid", "jsonb",
         "interval", "bytea"]
VALUES = {
    "int4": ["0", "-2147483648", "2147483647", "NULL"],
    "text": ["''", "'plain'", "'ünïcödé ✓'", "repeat('x', 300)"],
    "int8": ["-9223372036854775808", "9223372036854775807", "NULL", "42"],
    "int4[]": ["'{}'", "'{1,NULL,3}'", "'{{1,2},{3,4}}'", "'[0:1]={7,8}'"],
    "timestamptz": ["'infinity'", "'-infinity'", "'4713-01-01 BC'", "'2026-11-25 12:34:56.789+05:30'"],
    "numeric(10,2)": ["'NaN'", "'-12345678.99'", "0", "NULL"],
    "uuid": ["'00000000-0000-0000-0000-000000000000'", "gen_random_uuid()", "NULL",
             "'ffffffff-ffff-ffff-ffff-ffffffffffff'"],
    "jsonb": ["'{}'", "'[1, \"a\", null, {\"b\": 2.5}]'", "'\"s\"'", "NULL"],
    "interval": ["'-178000000 years'", "'1 mon 2 days 03:04:05.678901'", "'0'", "NULL"],
    "bytea": ["''", "'\\x00ff'", "NULL", "decode(repeat('ab', 100), 'hex')"],
}
#: (columns n, type offset k): every type at every position, and the widest layouts.
LAYOUTS = [(8, 0), (8, 2), (8, 4), (1, 8), (1, 9), (3, 7), (2, 0)]


def main() -> int:
    from pg_harness import PgServer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", type=int, choices=(18, 15), default=18)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with PgServer(version=args.version) as pg:
        conn = pg.connect()
        cur = conn.cursor()
        for n, k in LAYOUTS:
            types = [TYPES[(i + k) % len(TYPES)] for i in range(n)]
            # Without binary values the snapshot reads a type it cannot decode as its text
            # (``::text``): the unknown type's column then holds text.
            for suffix, unknown in (("", "bytea"), ("-text", "text")):
                if suffix and "bytea" not in types:
                    continue
                rows = [", ".join(f"({VALUES[t][r]})::{t}" + ("::text" if t == "bytea" and suffix else "")
                                  for t in types) for r in range(4)]
                query = " UNION ALL ".join(f"SELECT {r}" for r in rows)
                buf = io.BytesIO()
                cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT binary)", buf)
                path = OUT / f"n{n}-k{k}{suffix}.copy"
                path.write_bytes(buf.getvalue())
                print(f"{path.relative_to(ROOT)}: {len(buf.getvalue())} bytes, "
                      f"{', '.join(types).replace('bytea', unknown)}")
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
