#!/usr/bin/env python3
"""Seed the fuzz corpus with every message of the golden captures.

Writes each pgoutput message of ``tests/golden/captures/*.bin`` (framing per row:
u64 BE lsn, u32 BE xid, u32 BE length, bytes) to ``<corpus>/<sha1>``, and the same
message wrapped in a walsender XLogData ('w') frame, so the fuzzer starts from real
server output instead of from nothing. Usage: ``fuzz/seed.py [CORPUS_DIR]``.
"""

import hashlib
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = ROOT / "tests" / "golden" / "captures"
FRAME = struct.Struct(">QII")


def messages(blob: bytes):
    pos = 0
    while pos + FRAME.size <= len(blob):
        lsn, _xid, length = FRAME.unpack_from(blob, pos)
        pos += FRAME.size
        yield lsn, blob[pos:pos + length]
        pos += length


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus" / "parse"
    corpus.mkdir(parents=True, exist_ok=True)
    seen = set()
    for capture in sorted(CAPTURES.glob("*.bin")):
        for lsn, data in messages(capture.read_bytes()):
            frame = b"w" + struct.pack(">QQq", lsn, lsn, 0) + data
            for seed in (data, frame):
                name = hashlib.sha1(seed).hexdigest()
                if name not in seen:
                    seen.add(name)
                    (corpus / name).write_bytes(seed)
    print(f"seeded {corpus} with {len(seen)} inputs from {CAPTURES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
