"""pgoutput-dump's jsonl and pretty output of every golden capture, byte for byte as
recorded in tests/golden/dump.sha256 (the jsonl hashes are those of the Python renderer
the crates replaced), and the pretty format's cut of long values on a real server."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dump_workload import dump_command
from pg_harness import PgServer

GOLDEN = Path(__file__).parent / "golden"
sys.path.insert(0, str(GOLDEN))

from kinds_coverage import read_frames  # noqa: E402


def _recorded() -> dict[str, str]:
    lines = (GOLDEN / "dump.sha256").read_text().splitlines()
    return {name: digest for digest, name in (line.split() for line in lines
                                              if line and not line.startswith("#"))}


def _as_arrow_file(capture: Path, path: Path) -> Path:
    """The capture as an Arrow IPC file of 7 messages per batch: several groups per capture,
    so transactions and the pretty format's column width span groups."""
    frames = read_frames(capture)
    table = pa.table({"lsn": pa.array([f[0] for f in frames], pa.uint64()),
                      "data": pa.array([f[2] for f in frames], pa.binary())})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=7)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "pretty"])
def test_golden_captures_print_as_recorded(fmt: str, tmp_path: Path) -> None:
    from pgoutput_arrow.cli import build_parser, run

    recorded = _recorded()
    captures = sorted((GOLDEN / "captures").glob("*.bin"))
    assert len([n for n in recorded if n.endswith(f".{fmt}")]) == len(captures) > 0
    differ = []
    for capture in captures:
        path = _as_arrow_file(capture, tmp_path / f"{capture.stem}.arrow")
        out = io.StringIO()
        # The typed forms (time64, every date32), as recorded: the rendering of each type is
        # what is pinned here; the defaults' special values are tested in test_cli.py.
        args = [str(path), "--format", fmt, "--time", "time64", "--datetime-range", "arrow"]
        assert run(build_parser().parse_args(args), out) == 0
        digest = hashlib.sha256(out.getvalue().encode()).hexdigest()
        if digest != recorded[f"{capture.stem}.{fmt}"]:
            differ.append(capture.stem)
    assert not differ, f"{fmt} output changed for {differ}"


def test_pretty_cuts_long_values_jsonl_keeps_them(pg18: PgServer, tmp_path: Path) -> None:
    """A 10 kB TOAST text and a 4 kB bytea: jsonl prints them whole, pretty their first 64
    characters (32 bytes) and how long they were; short values are untouched."""
    pg18.execute("CREATE TABLE render_long (id int PRIMARY KEY, body text, blob bytea, s text)")
    pg18.execute("CREATE PUBLICATION render_long FOR TABLE render_long")
    pg18.create_slot("render_long")
    pg18.execute("INSERT INTO render_long SELECT 1, repeat('é''b', 5120), "
                 "decode(repeat('0a', 4096), 'hex'), 'it''s short'")
    rows = pg18.get_binary_changes("render_long", {"proto_version": "1",
                                                   "publication_names": "render_long"})
    pg18.drop_slot("render_long")
    capture = tmp_path / "capture.parquet"
    pq.write_table(pa.table({"lsn": [r[0] for r in rows], "data": [r[2] for r in rows]}), capture)

    def dump(fmt: str) -> str:
        proc = subprocess.run([dump_command(), str(capture), "--format", fmt],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    (obj,) = [json.loads(line) for line in dump("jsonl").splitlines()]
    assert obj["new"] == {"id": 1, "body": "é'b" * 5120,
                          "blob": "0a" * 4096, "s": "it's short"}
    (line,) = [x for x in dump("pretty").splitlines() if "insert" in x]
    body = "é''b" * 21 + "é"  # 64 characters: 21 times "é'b", then "é", quotes doubled
    assert f"body='{body}…' (15360 chars)" in line, line
    assert f"blob=\\x{'0a' * 32}… (4096 bytes)" in line, line
    assert line.endswith("s='it''s short'"), line
