#!/usr/bin/env python3
"""Check that the committed golden captures, together, hold every pgoutput message kind.

Reads ``captures/*.bin`` (frames: u64 BE lsn, u32 BE xid, u32 BE length, message) and
looks at each message's first byte. Prints which captures hold each kind; exits 1 if a
kind is missing or a file is malformed. Run: ``.venv/bin/python tests/golden/kinds_coverage.py``.
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from pathlib import Path

CAPTURES_DIR = Path(__file__).resolve().parent / "captures"
FRAME = struct.Struct(">QII")

#: Every message kind of pgoutput protocol versions 1 to 4, by its letter.
REQUIRED_KINDS = {
    "B": "Begin",
    "M": "Message",
    "C": "Commit",
    "O": "Origin",
    "R": "Relation",
    "Y": "Type",
    "I": "Insert",
    "U": "Update",
    "D": "Delete",
    "T": "Truncate",
    "S": "Stream Start",
    "E": "Stream Stop",
    "c": "Stream Commit",
    "A": "Stream Abort",
    "b": "Begin Prepare",
    "P": "Prepare",
    "K": "Commit Prepared",
    "r": "Rollback Prepared",
    "p": "Stream Prepare",
}


def read_frames(path: Path) -> list[tuple[int, int, bytes]]:
    """The rows of one capture; ValueError names the offset of a malformed frame."""
    blob = path.read_bytes()
    rows, pos = [], 0
    while pos < len(blob):
        if pos + FRAME.size > len(blob):
            raise ValueError(f"{path.name}: truncated frame header at offset {pos}")
        lsn, xid, length = FRAME.unpack_from(blob, pos)
        pos += FRAME.size
        if length == 0 or pos + length > len(blob):
            raise ValueError(f"{path.name}: bad message length {length} at offset {pos - 4}")
        rows.append((lsn, xid, blob[pos:pos + length]))
        pos += length
    return rows


def kinds_by_capture(directory: Path = CAPTURES_DIR) -> dict[str, Counter[str]]:
    return {p.stem: Counter(chr(data[0]) for _, _, data in read_frames(p))
            for p in sorted(directory.glob("*.bin"))}


def missing_kinds(by_capture: dict[str, Counter[str]]) -> list[str]:
    seen: set[str] = set()
    for kinds in by_capture.values():
        seen.update(kinds)
    return [k for k in REQUIRED_KINDS if k not in seen]


def main() -> int:
    try:
        by_capture = kinds_by_capture()
    except ValueError as e:
        print(f"malformed capture: {e}", file=sys.stderr)
        return 1
    if not by_capture:
        print(f"no captures in {CAPTURES_DIR}", file=sys.stderr)
        return 1
    for kind, name in REQUIRED_KINDS.items():
        holders = [stem for stem, kinds in by_capture.items() if kinds[kind]]
        shown = ", ".join(holders[:4]) + (f" (+{len(holders) - 4} more)" if len(holders) > 4 else "")
        print(f"{kind}  {name:<18} {len(holders):3d} captures  {shown}")
    unknown = sorted({k for kinds in by_capture.values() for k in kinds} - set(REQUIRED_KINDS))
    if unknown:
        print(f"unknown message kinds: {unknown}", file=sys.stderr)
        return 1
    missing = missing_kinds(by_capture)
    if missing:
        print("missing kinds: " + ", ".join(f"{k} ({REQUIRED_KINDS[k]})" for k in missing),
              file=sys.stderr)
        return 1
    print(f"all {len(REQUIRED_KINDS)} kinds present in {len(by_capture)} captures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
