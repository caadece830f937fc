"""A fixed handful of seeds of the randomized differential tester (tests/torture/), on
PostgreSQL 18 (every option set, decode(), the Decoder with tiny batches and memory, the
live stream) and 15. ``make torture`` runs many more; a failure here prints the seed and
``make torture SEED=<n>`` reproduces it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "torture"))

from generator import generate  # noqa: E402
from pg_harness import PgServer  # noqa: E402
from run import run_workload  # noqa: E402

SEEDS = [11, 12, 13]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", SEEDS)
def test_seed_pg18(pg18: PgServer, seed: int) -> None:
    r = run_workload(pg18, generate(seed, 40), live=seed == SEEDS[0])
    assert r.values > 1000 and r.runs >= 8, (r.values, r.runs)
    assert not r.problems, f"seed {seed} (make torture SEED={seed}):\n" + "\n".join(r.problems[:20])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_seed_pg15(pg15: PgServer, seed: int) -> None:
    r = run_workload(pg15, generate(seed, 40))
    assert r.values > 1000 and r.runs >= 6, (r.values, r.runs)
    assert not r.problems, f"seed {seed} (make torture SEED={seed}):\n" + "\n".join(r.problems[:20])
