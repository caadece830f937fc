"""A fixed handful of seeds of the randomized differential tester (tests/torture/), on
PostgreSQL 18 and 15: every option set through decode() and the Decoder with tiny batches
and memory, compared per change with test_decoding (values, xids, commit times, origins,
messages) and by final rows; and between them every heavy path once: the live stream
(stopped and restarted with the same arguments), pgoutput-dump's jsonl, Parquet and Delta
change log, Spark. ``make torture`` runs many more; a failure here prints the seed and
``make torture SEED=<n>`` reproduces it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "torture"))

from generator import generate  # noqa: E402
from pg_harness import PgServer  # noqa: E402
from run import Heavy, missing_types, run_workload  # noqa: E402

SEEDS = [11, 12, 13]


@pytest.fixture(scope="module")
def torture_spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("pgoutput-torture-tests")
               .config("spark.sql.execution.arrow.pyspark.validateSchema.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "3").config("spark.ui.enabled", "false")
               .getOrCreate())
    yield session
    session.stop()  # getOrCreate in a later module would hand back this one, tuned as here


def _assert(r: Any, seed: int, runs: int, paths: set[str]) -> None:
    assert r.values > 1000 and r.runs >= runs, (r.values, r.runs)
    assert paths <= r.paths, f"paths not run: {paths - r.paths}"
    assert not r.problems, f"seed {seed} (make torture SEED={seed}):\n" + "\n".join(r.problems[:20])


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", SEEDS)
def test_seed_pg18(pg18: PgServer, seed: int) -> None:
    heavy = Heavy(live=seed == SEEDS[0], restart=seed == SEEDS[0], cli=seed == SEEDS[1])
    r = run_workload(pg18, generate(seed, 40, exclude=missing_types(pg18), filtered=True), heavy=heavy)
    paths = {"decode()", "Decoder"} | ({"live restarted", "cli live parquet restarted"} if heavy.live else set()) \
        | ({"cli jsonl", "cli parquet"} if heavy.cli else set())
    _assert(r, seed, 8, paths)


@pytest.mark.timeout(400)
def test_seed_delta_pg18(pg18: PgServer) -> None:
    seed = SEEDS[1]  # its tables hold ±infinity dates
    r = run_workload(pg18, generate(seed, 40, exclude=missing_types(pg18), filtered=True),
                     heavy=Heavy(delta=True, live=True, restart=True))
    _assert(r, seed, 8, {"delta change log", "cli live delta restarted"})


@pytest.mark.timeout(400)
def test_seed_pg15(pg15: PgServer) -> None:
    seed = SEEDS[0]
    r = run_workload(pg15, generate(seed, 40, exclude=missing_types(pg15), filtered=True))
    _assert(r, seed, 6, {"decode()", "Decoder"})


@pytest.mark.timeout(600)
def test_seed_spark_pg18(pg18: PgServer, torture_spark: Any) -> None:
    seed = SEEDS[2]
    r = run_workload(pg18, generate(seed, 40, exclude=missing_types(pg18), filtered=True),
                     heavy=Heavy(spark=torture_spark))
    _assert(r, seed, 9, {"spark.decode"})
