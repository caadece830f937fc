"""The ``copy`` fuzz target starts from real COPY data: every input ``fuzz/seed.py`` makes
for it (from ``fuzz/seeds/copy``, real ``COPY ... (FORMAT binary)`` output of a real server)
is read whole by the COPY decoder under the options and columns its first byte picks, as
``fuzz/fuzz_targets/copy.rs`` does, so the fuzzer mutates data that reaches every column's
decoding instead of stopping at the header."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from pgoutput_arrow import _internal

ROOT = Path(__file__).resolve().parent.parent


def _copy_rs_types() -> list[tuple[int, int]]:
    """``TYPES`` of copy.rs: (type oid, typmod) pairs."""
    text = (ROOT / "fuzz" / "fuzz_targets" / "copy.rs").read_text()
    body = re.search(r"const TYPES: \[\(u32, i32\); \d+\] =\s*\[(.*?)\];", text, re.S)
    assert body is not None
    return [(int(a), int(b)) for a, b in re.findall(r"\((\d+), (-?\d+)\)", body.group(1))]


def test_every_copy_seed_decodes_whole_under_the_layout_its_options_pick(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("fuzz_seed", ROOT / "fuzz" / "seed.py")
    assert spec is not None and spec.loader is not None
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    corpus = tmp_path / "copy"
    corpus.mkdir()
    assert seed.seed_copy(corpus) == 0
    types = _copy_rs_types()
    inputs = sorted(corpus.iterdir())
    assert len(inputs) >= 30
    layouts = set()
    for f in inputs:
        flags, _cut, data = f.read_bytes()[0], f.read_bytes()[1], f.read_bytes()[2:]
        n = (flags & 7) + 1
        chosen = [types[(i + (flags >> 3)) % len(types)] for i in range(n)]
        layouts.add(tuple(chosen))
        columns = [(f"c{i}", oid, typmod, i == 0) for i, (oid, typmod) in enumerate(chosen)]
        decoder = _internal.CopyDecoder(1, "public", "t", "default", columns, [], lsn=1,
                                        commit_ts=0, first_seq=-10, binary=bool(flags & 0x80))
        decoder.push(data)
        decoder.take()
        decoder.finish()
        assert decoder.rows == 4, (f.name, chosen)
    # Every type of the target at least once.
    assert {t for layout in layouts for t in layout} == set(types)
