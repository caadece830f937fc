#!/usr/bin/env python3
"""Seed a fuzz corpus from the golden captures, so the fuzzer starts from real server
output instead of from nothing. Usage: ``fuzz/seed.py [CORPUS_DIR]``.

For the ``parse`` target: each pgoutput message of ``tests/golden/captures/*.bin``
(framing per row: u64 BE lsn, u32 BE xid, u32 BE length, bytes) to ``<corpus>/<sha1>``,
and the same message wrapped in a walsender XLogData ('w') frame.

For the ``decode`` target (a corpus directory named ``decode``): each capture whole, in
that framing, behind a first byte of decoder options (each capture once per option set
of ``OPTION_FLAGS``; see ``fuzz_targets/decode.rs``).

For the ``copy`` target (a corpus directory named ``copy``): the real binary COPY output in
``fuzz/seeds/copy/nN-kK.copy`` (written by ``fuzz/copy_seeds.py`` from a real server: N
columns of copy.rs' ``TYPES`` from offset K), behind the target's first byte (the options
that pick those N columns from K, binary values or not) and second (where the data is cut
into two pushes: not at all, inside the header, inside the first row).
"""

import hashlib
import re
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


#: views, binary, small batches, arrived mode, special values null/text: see decode.rs.
OPTION_FLAGS = (0x00, 0x01, 0x04, 0x08, 0x0D, 0x10, 0x20, 0x42)


def seed_decode(corpus: Path) -> int:
    seen = set()
    for capture in sorted(CAPTURES.glob("*.bin")):
        blob = capture.read_bytes()
        for flags in OPTION_FLAGS:
            seed = bytes([flags]) + blob
            name = hashlib.sha1(seed).hexdigest()
            seen.add(name)
            (corpus / name).write_bytes(seed)
    print(f"seeded {corpus} with {len(seen)} inputs from {CAPTURES.relative_to(ROOT)}")
    return 0


COPY_SEEDS = ROOT / "fuzz" / "seeds" / "copy"
COPY_LAYOUT = re.compile(r"^n(\d+)-k(\d+)(-text)?\.copy$")
#: The number of types in copy.rs' TYPES.
COPY_TYPES = 10


def copy_flags(n: int, k: int, binary: bool) -> int:
    """copy.rs' first byte for N columns from type offset K: ``flags & 7`` is N - 1, the
    offset is ``flags >> 3`` modulo the types (so the binary bit 0x80 counts in it)."""
    high = 0x10 if binary else 0  # 0x80 >> 3
    offset = next(o for o in range(16) if (high + o) % COPY_TYPES == k)
    return (n - 1) | (offset << 3) | (0x80 if binary else 0)


def seed_copy(corpus: Path) -> int:
    seen = set()
    for path in sorted(COPY_SEEDS.glob("*.copy")):
        m = COPY_LAYOUT.match(path.name)
        if m is None:
            continue
        data = path.read_bytes()
        twin = path.with_name(path.name.replace(".copy", "-text.copy"))
        if m.group(3):
            continue  # the -text twin goes with the options without binary values
        for binary in (True, False):
            if not binary and twin.exists():
                data = twin.read_bytes()
            for cut in (255, 5, 25):
                seed = bytes([copy_flags(int(m.group(1)), int(m.group(2)), binary), cut]) + data
                name = hashlib.sha1(seed).hexdigest()
                seen.add(name)
                (corpus / name).write_bytes(seed)
    if not seen:
        raise SystemExit(f"no COPY seeds in {COPY_SEEDS}: run fuzz/copy_seeds.py")
    print(f"seeded {corpus} with {len(seen)} inputs from {COPY_SEEDS.relative_to(ROOT)}")
    return 0


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus" / "parse"
    corpus.mkdir(parents=True, exist_ok=True)
    if corpus.name == "decode":
        return seed_decode(corpus)
    if corpus.name == "copy":
        return seed_copy(corpus)
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
