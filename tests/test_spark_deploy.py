"""Every Spark API of pgoutput_arrow on real deployments, against PostgreSQL 18: the matrix
API × {local[2], standalone cluster, Spark Connect}.

The package reaches Spark as a user ships it (PySpark's packaging guide): the wheel of
``make wheel`` installed with its runtime dependencies in a venv, packed with venv-pack, given
as ``spark.archives`` (``env.tar.gz#environment``) with ``spark.pyspark.python`` =
``./environment/bin/python``; the driver's working directory holds the same environment
unpacked (the Python data sources start a Python worker on the driver with that same relative
path). The executors must not import the package from the repository or from .venv.

One standalone cluster (a master and two workers of 1 core, separate processes from
pyspark's ``spark-class``) serves the session; the Spark Connect server runs on it only while
its cell's driver runs (the cluster's two cores are then the server's). Each deployment's
driver is a process of its own (tests/spark_deploy_job.py: a process holds one classic
SparkContext), which runs every API and reports per API; one test runs the three drivers and
checks each cell (an API on a deployment) against PostgreSQL's own SELECT, so that no pytest
process waits for another's driver.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgoutput_arrow import spark as pgspark
from pg_harness import PgServer
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from spark_cluster import ROOT, ConnectServer, ShippedEnv, StandaloneCluster, clean_env  # noqa: E402
from spark_workload import run_workload  # noqa: E402

# 1500 s: the first test to need the shipped environment builds the wheel cold (zig, a release
# build of its own) when test_demo.py has not already.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

DEPLOYMENTS = ("local", "standalone", "connect")
APIS = ("decode", "udtf", "batch_source", "stream_source", "snapshot")
BUILD_DIR = ROOT / "build" / "spark-deploy"

#: The Spark settings of the classic drivers (Connect's server gets the same).
SESSION_CONF = {
    "spark.sql.execution.arrow.pyspark.validateSchema.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.timeType.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.executor.cores": "1",
}


@pytest.fixture(scope="session")
def shipped() -> ShippedEnv:
    return ShippedEnv.build(BUILD_DIR)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(workers=2, cores=1, memory="1536m",
                           log_dir=tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


def _prepare(pg: PgServer, name: str, work: Path) -> dict[str, Any]:
    """The PostgreSQL side of one deployment's run: a capture of the order-sensitive
    workload (tests/spark_workload.py) as Parquet, a table with changes on a slot for the
    streaming source, and a published table for the snapshot."""
    rows, tables, _ = run_workload(pg, name)
    capture = work / "capture.parquet"
    pq.write_table(pa.table({"lsn": pa.array([pgspark.lsn_to_text(l) for l, _, _ in rows]),
                             "xid": pa.array([x for _, x, _ in rows], pa.int64()),
                             "data": pa.array([d for _, _, d in rows], pa.binary())}), capture)
    kv, wide, full = tables

    st, spub, sslot = f"{name}_st", f"{name}_spub", f"{name}_sslot"
    pg.execute(f"CREATE TABLE {st} (id int PRIMARY KEY, v text, n numeric(12,2)); "
               f"CREATE PUBLICATION {spub} FOR TABLE {st}")
    pg.create_slot(sslot)
    pg.execute(f"INSERT INTO {st} SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 300) g")
    for i in range(5):
        pg.execute(f"UPDATE {st} SET v = 'u{i}' || id WHERE id % 7 = {i}")
    pg.execute(f"DELETE FROM {st} WHERE id % 11 = 0")
    pg.execute(f"BEGIN; UPDATE {st} SET id = id + 1000 WHERE id % 13 = 0; "
               f"INSERT INTO {st} VALUES (5000, 'last', 1.25); COMMIT")

    snap, snap_pub = f"{name}_snap", f"{name}_snappub"
    pg.execute(f"CREATE TABLE {snap} (id int PRIMARY KEY, v text, big text); "
               f"INSERT INTO {snap} SELECT g, 'v' || g, CASE WHEN g % 50 = 7 THEN repeat('x', 5000) "
               f"END FROM generate_series(1, 3000) g; CREATE PUBLICATION {snap_pub} FOR TABLE {snap}")
    return {
        "capture": str(capture),
        "tables": {kv: ["id"], wide: ["id"], full: ["a", "b"]},
        "source_tables": [kv, wide],
        "stream": {"dsn": pg.dsn, "slot": sslot, "publication": spub, "table": f"public.{st}",
                   "keys": ["id"], "max_changes": 150, "query": f"{name}_mem",
                   "checkpoint": str(work / "checkpoint")},
        "snapshot": {"dsn": pg.dsn, "slot": f"{name}_snapslot", "publication": snap_pub,
                     "table": f"public.{snap}", "keys": ["id"]},
    }


def _run_driver(where: list[str], spec: dict[str, Any], work: Path, env: dict[str, str],
                cwd: Path) -> dict[str, Any]:
    (work / "spec.json").write_text(json.dumps(spec))
    out, log = work / "result.pickle", work / "driver.log"
    command = [sys.executable, str(ROOT / "tests" / "spark_deploy_job.py"), *where,
               str(work / "spec.json"), str(out)]
    with open(log, "w") as err:
        proc = subprocess.run(command, stdout=err, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                              timeout=600)
    if proc.returncode != 0 or not out.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        raise AssertionError(f"the driver on {where} failed ({proc.returncode}); {log}:\n{tail}")
    with open(out, "rb") as f:
        result: dict[str, Any] = pickle.load(f)
    result["log"] = str(log)
    return result


def _run_deployment(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory,
                    deployment: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One deployment's driver run (every API), and its spec with PostgreSQL's side of the
    comparison: every table's SELECT, read right after the driver ran (nothing writes to
    the tables after that)."""
    shipped: ShippedEnv = request.getfixturevalue("shipped")
    pg: PgServer = request.getfixturevalue("pg18")
    work = tmp.mktemp(f"deploy-{deployment}")
    spec = _prepare(pg, f"deploy_{deployment}_{os.getpid()}", work)
    conf = {**SESSION_CONF, **shipped.spark_conf()}
    spec["conf"] = conf
    # The driver's Python workers run ./environment/bin/python from its working
    # directory: the driver runs where the environment is unpacked.
    env = clean_env(shipped.driver_env())
    t0 = time.monotonic()
    if deployment == "local":
        result = _run_driver(["--master", "local[2]"], spec, work, env, shipped.driver_dir)
    elif deployment == "standalone":
        cluster: StandaloneCluster = request.getfixturevalue("cluster")
        result = _run_driver(["--master", cluster.master_url], spec, work, env, shipped.driver_dir)
    else:
        cluster = request.getfixturevalue("cluster")
        # Both ways (docs/spark.md): the server is deployed as a classic driver
        # (spark.archives, PYSPARK_PYTHON, run where the environment is unpacked), for the
        # streaming source, whose Python runs outside the session's directory on the driver
        # and on the executors; and each session adds the archive as an artifact, for what
        # runs in the session's directory (UDFs, batch source).
        with ConnectServer(cluster.master_url, conf, log_dir=work / "connect",
                           cwd=shipped.driver_dir, env=shipped.driver_env()) as server:
            result = _run_driver(["--remote", server.url], spec, work, clean_env(), work)
    result["total_s"] = time.monotonic() - t0
    if deployment != "local":
        # Its application has ended: the executors' copies of the environment go.
        request.getfixturevalue("cluster").remove_executor_copies()
    tables = {**spec["tables"], **{s["table"]: s["keys"] for s in (spec["stream"], spec["snapshot"])}}
    spec["postgres"] = {table: _postgres_table(pg, table, keys) for table, keys in tables.items()}
    return result, spec


def _ok(result: dict[str, Any], api: str) -> dict[str, Any]:
    got: dict[str, Any] = result[api]
    if "error" in got:
        pytest.fail(f"{api} failed on the driver (log {result['log']}): {got['error']}\n"
                    f"{got.get('traceback', '')}", pytrace=False)
    return got


def _postgres_table(pg: PgServer, table: str, keys: list[str]) -> dict[str, Any]:
    """PostgreSQL's ``table``: its columns, every row ordered by ``keys``, and every row's
    text (the UDTF's check)."""
    schema, name = table.split(".", 1) if "." in table else ("public", table)
    columns = [r[0] for r in pg.query("SELECT column_name FROM information_schema.columns WHERE "
                                      "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                                      (schema, name))]
    texts = ", ".join(f"{c}::text" for c in columns)
    return {"columns": columns,
            "rows": [tuple(r) for r in pg.query(f"SELECT {', '.join(columns)} FROM {table} "
                                                f"ORDER BY {', '.join(keys)}")],
            "texts": [tuple(r) for r in pg.query(f"SELECT {texts} FROM {table}")]}


def _check_state(spec: dict[str, Any], table: str, got: dict[str, Any]) -> None:
    want = spec["postgres"][table]
    assert got["columns"] == want["columns"], table
    assert len(want["rows"]) > 0
    assert got["rows"] == want["rows"], table


def _replay_generic(changes: list[tuple[Any, ...]], table: str,
                    keys: list[str]) -> dict[tuple[str | None, ...], dict[str, str | None]]:
    """The UDTF's generic changes (column texts) of ``table``, applied in commit order."""
    state: dict[tuple[str | None, ...], dict[str, str | None]] = {}
    mine = sorted((c for c in changes if c[0] == table), key=lambda c: (c[2], c[3]))
    for _, op, _, _, new, old, unchanged in mine:
        if op in ("delete", "update") and old:
            previous = state.pop(tuple(old[k] for k in keys), None)
        else:
            previous = state.get(tuple(new[k] for k in keys)) if new else None
        if op == "delete":
            if not old:
                state.pop(tuple(new[k] for k in keys), None)
            continue
        row = dict(new)
        for column in unchanged:
            assert previous is not None, (table, op, new)
            row[column] = previous[column]
        state[tuple(row[k] for k in keys)] = row
    return state


def check_shipped_wheel(result: dict[str, Any], spec: dict[str, Any], deployment: str,
                        shipped: ShippedEnv) -> None:
    """The Python workers run the packed environment's interpreter and import the wheel's
    package from it, not the repository's sources or .venv's build."""
    workers = _ok(result, "probe")["workers"]
    assert len(workers) == 2
    for w in workers:
        for path in (w["package"], w["native"]):
            resolved = Path(path).resolve()
            assert not resolved.is_relative_to(ROOT / "python"), path
            assert not resolved.is_relative_to(ROOT / ".venv"), path
            assert f"/{'site-packages'}/pgoutput_arrow/" in path, path
        # ./environment/bin/python, in the driver's directory (local[2]) or in an executor's.
        assert w["exe"].endswith("environment/bin/python"), w
        if deployment != "local":
            assert not Path(w["exe"]).resolve().is_relative_to(shipped.root), w


def check_decode(result: dict[str, Any], spec: dict[str, Any], deployment: str) -> None:
    """decode (the capture's files read by its tasks), then apply_changes per table."""
    got = _ok(result, "decode")
    assert got["_read_by_tasks"], deployment
    for table in spec["tables"]:
        _check_state(spec, table, got[table])


def check_udtf(result: dict[str, Any], spec: dict[str, Any], deployment: str) -> None:
    """The UDTF's changes of the keyed tables, replayed on their text, equal PostgreSQL's
    text of every column."""
    changes = _ok(result, "udtf")["rows"]
    for table in spec["source_tables"]:
        keys = spec["tables"][table]
        columns = spec["postgres"][table]["columns"]
        want = {tuple(r[columns.index(k)] for k in keys): dict(zip(columns, r))
                for r in spec["postgres"][table]["texts"]}
        assert len(want) > 0
        assert _replay_generic(changes, table, keys) == want, table


def check_batch_source(result: dict[str, Any], spec: dict[str, Any], deployment: str) -> None:
    got = _ok(result, "batch_source")
    for table in spec["source_tables"]:
        _check_state(spec, table, got[table])


def check_stream_source(result: dict[str, Any], spec: dict[str, Any], deployment: str) -> None:
    """readStream.format("pgoutput") in several micro-batches (maxChangesPerTrigger), then
    apply_changes: the table; the slot moved to the end."""
    got = _ok(result, "stream_source")
    assert got["batches"] >= 3, got["batches"]
    _check_state(spec, spec["stream"]["table"], got)


def check_snapshot(result: dict[str, Any], spec: dict[str, Any], deployment: str) -> None:
    got = _ok(result, "snapshot")
    assert got["chunks"] > 2
    _check_state(spec, spec["snapshot"]["table"], got)


CHECKS = {"decode": check_decode, "udtf": check_udtf, "batch_source": check_batch_source,
          "stream_source": check_stream_source, "snapshot": check_snapshot}
assert set(CHECKS) == set(APIS)


def test_every_api_on_every_deployment(request: pytest.FixtureRequest,
                                       tmp_path_factory: pytest.TempPathFactory,
                                       shipped: ShippedEnv) -> None:
    """The matrix, cell by cell: each deployment's driver runs every API (one after the
    other, one cluster at work at a time), then each cell is checked against PostgreSQL and
    the matrix printed; the test fails with every failing cell's reason. One test, so that
    no pytest process waits for another's driver."""
    cells: dict[tuple[str, str], str] = {}
    for deployment in DEPLOYMENTS:
        result, spec = _run_deployment(request, tmp_path_factory, deployment)
        checks: list[tuple[str, Callable[[], None]]] = [
            ("shipped wheel", functools.partial(check_shipped_wheel, result, spec, deployment, shipped)),
            *((api, functools.partial(c, result, spec, deployment)) for api, c in CHECKS.items())]
        for api, check in checks:
            try:
                check()
                cells[(deployment, api)] = "ok"
            except (AssertionError, pytest.fail.Exception) as e:
                cells[(deployment, api)] = f"FAILED: {str(e)[:3000]}"
        seconds = {api: result[api]["seconds"] for api in ("probe", *APIS)}
        print(f"{deployment}: driver {result['total_s']:.0f} s (session {result['session_s']:.0f} s); "
              + ", ".join(f"{api} {cells.get((deployment, api), 'ok')[:6]} {s:.1f} s"
                          for api, s in seconds.items()))
    failed = {k: v for k, v in cells.items() if v != "ok"}
    assert not failed, "\n\n".join(f"{d} × {api}: {why}" for (d, api), why in failed.items())
