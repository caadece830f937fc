"""``make wheel``: an abi3 manylinux wheel that auditwheel accepts and that installs and
decodes on a machine without Rust.

The wheel is built once per source tree (tests/spark_cluster.py caches it under
build/spark-deploy/ keyed by the sources' hash; the Spark deployment tests ship the same one).
A fresh venv (no system site-packages), with a PATH that has no cargo or rustc, installs it
with ``pip install --no-index --find-links`` from the wheel and a wheelhouse of the runtime
dependencies (pip download, served from pip's cache), then decodes a golden capture; the
result must equal what the development build (.venv) decodes from the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pgoutput_arrow
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from spark_cluster import ROOT, ShippedEnv  # noqa: E402

# 1500 s: the first test to need the shipped environment builds the wheel cold (zig, a release
# build of its own) when test_demo.py has not already.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

CAPTURE = ROOT / "tests" / "golden" / "captures" / "types-pg18-v2-stream.bin"

#: Run inside the fresh venv: decode the capture, print where the package came from and the
#: decoded tables as JSON (values through str, so types compare as text).
PROBE = r"""
import json, struct, sys
import pgoutput_arrow

def frames(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        lsn, _xid, n = struct.unpack_from(">QII", data, pos)
        yield lsn, data[pos + 16:pos + 16 + n]
        pos += 16 + n

changes = pgoutput_arrow.decode(list(frames(sys.argv[1])))
tables = {name: [{k: str(v) for k, v in row.items()} for row in t.to_pylist()]
          for name, t in changes.tables.items()}
print(json.dumps({"file": pgoutput_arrow.__file__, "tables": tables}))
"""


@pytest.fixture(scope="module")
def wheel() -> Path:
    shipped = ShippedEnv.build(ROOT / "build" / "spark-deploy")
    assert shipped.wheel is not None
    return shipped.wheel


def test_wheel_is_abi3_manylinux_and_auditwheel_accepts_it(wheel: Path) -> None:
    name = wheel.name
    assert "-abi3-" in name and "manylinux_2_17_x86_64" in name, name
    report = subprocess.run([str(Path(sys.executable).parent / "auditwheel"), "show", str(wheel)],
                            capture_output=True, text=True, check=True).stdout
    assert '"manylinux_2_17_x86_64"' in " ".join(report.split()), report
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    # The native module, the Python package, its typing marker; no Rust sources, no tests.
    assert any(n.startswith("pgoutput_arrow/_internal.") and n.endswith(".so") for n in names)
    assert "pgoutput_arrow/py.typed" in names and "pgoutput_arrow/spark/__init__.py" in names
    assert not any(n.endswith(".rs") or n.startswith("tests/") for n in names), names


def test_wheel_installs_and_decodes_without_rust(wheel: Path, tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                    "--only-binary=:all:", "--dest", str(wheelhouse), "pyarrow>=16",
                    "psycopg2-binary>=2.9"], check=True, timeout=600)
    venv = tmp_path / "venv"
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True)
    # No Rust anywhere the install could look: cargo/rustc off PATH, no CARGO_HOME/RUSTUP_HOME.
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin")
                           if not (Path(p) / "cargo").exists())
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-index", "--find-links", str(wheelhouse), str(wheel)],
                   check=True, env=env, cwd=tmp_path, timeout=600)
    proc = subprocess.run([python, "-c", PROBE, str(CAPTURE)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert Path(got["file"]).resolve().is_relative_to(venv.resolve()), got["file"]
    frames = []
    data, pos = CAPTURE.read_bytes(), 0
    while pos < len(data):
        lsn, _xid, n = struct.unpack_from(">QII", data, pos)
        frames.append((lsn, data[pos + 16:pos + 16 + n]))
        pos += 16 + n
    want = {name: [{k: str(v) for k, v in row.items()} for row in t.to_pylist()]
            for name, t in pgoutput_arrow.decode(frames).tables.items()}
    assert sum(len(rows) for rows in want.values()) > 0
    assert got["tables"] == want
