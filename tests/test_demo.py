"""`make demo`, the README's first command, as a test: the demo's live workload on an
embedded PostgreSQL, streamed and checked, then examples/spark_pipeline.py on a Spark
standalone cluster (tools/spark_cluster.py: the wheel built and shipped, cached under build/),
whose replicas the demo compares with PostgreSQL's SELECT (exit 1 when they differ)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_demo_runs_and_its_replicas_equal_postgresql() -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--spark-pipeline",
                           str(ROOT / "examples" / "spark_pipeline.py"), "--spark-cluster",
                           str(ROOT / "tools" / "spark_cluster.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1450)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "replica = SELECT: NO" not in proc.stdout
    assert proc.stdout.count("replica = SELECT: yes") == 2, proc.stdout[-2000:]
    assert "on a standalone cluster" in proc.stdout, proc.stdout[-2000:]


def test_demo_keep_never_empties_a_directory_it_did_not_make(tmp_path: Path) -> None:
    """``--keep DIR`` (``make demo KEEP=DIR``) empties only an earlier run's output: a
    directory of the user's is refused before anything starts, its files untouched."""
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--keep", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "is not empty and not the output of an earlier demo run" in proc.stderr
    assert mine.read_text() == "the user's"
