"""Every Spark API of pgoutput_arrow.spark through Spark Connect, against PostgreSQL 18.

A Spark Connect server is started from pyspark's own distribution as a separate process
(``spark-submit --class ...SparkConnectServer``, ``local[2]``, on 127.0.0.1 and a free port);
the tests hold only a Connect client session, so any classic-only API (``sparkContext``,
``.rdd``, ``_jvm``) fails here. Each API's result is compared with PostgreSQL's ``SELECT``.
The batch source is read through ``file://`` and ``s3a://`` (moto's S3 server, a real HTTP
S3 endpoint on 127.0.0.1).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pyspark
from pgoutput_arrow import spark as sp
from pgoutput_arrow.exceptions import ConnectionFailed
from pgoutput_arrow.live.snapshot import SnapshotChunk
from pgoutput_arrow.spark.snapshot import read_chunk_batches

COLUMNS = ("id", "v", "n", "big")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: Any) -> Iterator[Any]:
    """A Spark Connect client session to a Connect server of its own (local[2])."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    home = Path(pyspark.__file__).parent
    port = _free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    # The server's Python workers (mapInArrow, UDTFs, data sources) run this interpreter.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1"}
    setpriv = shutil.which("setpriv")
    cmd = ([setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []) + [
        str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]", "--driver-memory", "1g",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.sql.execution.arrow.pyspark.validateSchema.enabled=true",
        "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.session.timeZone=UTC", "spark-internal"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    # One Spark per process: a classic session an earlier module left running would make
    # the builder refuse (SESSION_ALREADY_EXIST). The builder marks the process as a Connect
    # client through the environment; the modules after this one are classic again.
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    marks = {key: os.environ.get(key) for key in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    try:
        _wait_for_port(port, proc, log, 180)
        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        yield session
        session.stop()
    finally:
        for key, value in marks.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def workload(pg18: Any, tmp_path_factory: Any) -> dict[str, Any]:
    """Two tables written after two slots were made (one captured into Parquet, one left for
    the streaming source): inserts, updates (one leaving a TOAST value unchanged), deletes, a
    key change, a rolled-back transaction."""
    name = f"cn{os.getpid()}"
    t, u, pub = f"{name}_t", f"{name}_u", f"{name}_pub"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int, big text); "
                 f"CREATE TABLE {u} (id int PRIMARY KEY, v text, n int, big text); "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}, {u}")
    cap_slot, stream_slot = f"{name}_cap", f"{name}_stream"
    for slot in (cap_slot, stream_slot):
        pg18.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    for table in (t, u):
        pg18.execute(f"INSERT INTO {table} SELECT g, 'v' || g, g, CASE WHEN g % 40 = 7 THEN repeat('x', 5000) END "
                     "FROM generate_series(1, 400) g")
        pg18.execute(f"UPDATE {table} SET v = v || '-u' WHERE id % 5 = 0")
        pg18.execute(f"UPDATE {table} SET n = n + 1000 WHERE id % 40 = 7")  # big unchanged: not sent
        pg18.execute(f"DELETE FROM {table} WHERE id % 11 = 0")
        pg18.execute(f"UPDATE {table} SET id = id + 10000 WHERE id % 37 = 1")
        pg18.execute(f"BEGIN; INSERT INTO {table} VALUES (99999, 'gone', 0, NULL); ROLLBACK")
    rows = pg18.query("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_binary_changes("
                      "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)", (cap_slot, pub))
    capture = pa.table({"lsn": [r[0] for r in rows], "xid": pa.array([r[1] for r in rows], pa.int64()),
                        "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
    path = tmp_path_factory.mktemp("capture") / "capture.parquet"
    pq.write_table(capture, path)
    return {"tables": [f"public.{t}", f"public.{u}"], "publication": pub, "stream_slot": stream_slot,
            "capture": capture, "path": path, "name": name}


def _postgres(pg: Any, table: str) -> list[tuple]:
    return [tuple(r) for r in pg.query(f"SELECT {', '.join(COLUMNS)} FROM {table} ORDER BY id")]


def _replica(changes: Any) -> list[tuple]:
    state = sp.apply_changes(changes, ["id"]).orderBy("id").collect()
    return [tuple(r[c] for c in COLUMNS) for r in state]


def _capture_df(spark: Any, workload: dict[str, Any]) -> Any:
    return spark.createDataFrame(workload["capture"].to_pandas()).repartition(3)


def test_the_session_is_a_connect_client(spark: Any) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(spark, ConnectSession)
    with pytest.raises(Exception, match="sparkContext|JVM_ATTRIBUTE_NOT_SUPPORTED"):
        spark.sparkContext  # noqa: B018  (what classic-only code would have hit)


def test_decode_and_apply_changes_through_connect(spark: Any, pg18: Any, workload: dict[str, Any]) -> None:
    decoded = sp.decode(_capture_df(spark, workload), num_partitions=2)
    for table in workload["tables"]:
        assert _replica(decoded[table]) == _postgres(pg18, table), table


def test_decode_default_partitions_through_connect(spark: Any, pg18: Any, workload: dict[str, Any]) -> None:
    decoded = sp.decode(_capture_df(spark, workload))
    table = workload["tables"][0]
    assert _replica(decoded[table]) == _postgres(pg18, table)


def test_decode_of_parquet_files_read_by_the_tasks_through_connect(spark: Any, pg18: Any,
                                                                   workload: dict[str, Any]) -> None:
    """``decode(spark.read.parquet(path))`` through Connect: the plan read from the server
    shows a bare scan, the tasks read the file themselves; a filtered capture does not."""
    from pgoutput_arrow.spark._pieces import plain_parquet_capture

    df = spark.read.parquet(str(workload["path"]))
    pieces = plain_parquet_capture(df, None)
    assert pieces is not None and pieces.files == (str(workload["path"]),)
    assert plain_parquet_capture(df.where("xid > 0"), None) is None
    decoded = sp.decode(df)
    for table in workload["tables"]:
        assert _replica(decoded[table]) == _postgres(pg18, table), table


def _replay_generic(rows: list[Any]) -> dict[str, list[tuple]]:
    """The UDTF's generic rows replayed in commit order: each table's state, as text."""
    state: dict[str, dict[str, dict[str, str | None]]] = {}
    for r in sorted(rows, key=lambda r: (r.commit_lsn, r.seq)):
        table = state.setdefault(r.table, {})
        if r.op == "delete":
            del table[dict(r.old)["id"]]
            continue
        new = dict(r.new)
        if r.op == "update":
            old_key = dict(r.old)["id"] if r.old else new["id"]
            previous = table.pop(old_key)
            for c in r.unchanged or ():
                new[c] = previous[c]
        table[new["id"]] = new
    return {name: sorted((int(row["id"]), row["v"], row["n"], row["big"]) for row in t.values())
            for name, t in state.items()}


def _postgres_text(pg: Any, table: str) -> list[tuple]:
    return [tuple(r) for r in pg.query(f"SELECT id, v, n::text, big FROM {table} ORDER BY id")]


def test_sql_udtf_and_udfs_through_connect(spark: Any, pg18: Any, workload: dict[str, Any]) -> None:
    sp.register(spark)
    _capture_df(spark, workload).createOrReplaceTempView("cn_capture")
    rows = spark.sql("SELECT * FROM pgoutput_changes(TABLE(SELECT lsn, xid, data FROM cn_capture) "
                     "WITH SINGLE PARTITION)").collect()
    replayed = _replay_generic(rows)
    for table in workload["tables"]:
        assert replayed[table] == _postgres_text(pg18, table), table
    kinds = dict(spark.sql("SELECT pgoutput_kind(data) AS k, count(*) AS c FROM cn_capture GROUP BY k").collect())
    first = collections_counter(bytes(d[:1]) for d in workload["capture"].column("data").to_pylist())
    assert kinds["insert"] == first[b"I"] and kinds["commit"] == first[b"C"] and kinds["relation"] == first[b"R"]
    back = spark.sql("SELECT lsn, lsn_to_text(lsn_to_int(lsn)) AS again FROM cn_capture").collect()
    assert back and all(r.lsn == r.again for r in back)


def collections_counter(items: Iterator[bytes]) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def test_batch_source_from_a_file_uri_through_connect(spark: Any, pg18: Any, workload: dict[str, Any]) -> None:
    sp.register(spark)
    uri = workload["path"].as_uri()
    assert uri.startswith("file://")
    for table in workload["tables"]:
        df = spark.read.format("pgoutput").option("table", table).load(uri)
        assert _replica(df) == _postgres(pg18, table), table
    generic = spark.read.format("pgoutput").load(str(workload["path"]))
    assert generic.count() == sum(spark.read.format("pgoutput").option("table", t).load(uri).count()
                                  for t in workload["tables"])


@pytest.fixture(scope="module")
def s3(workload: dict[str, Any]) -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1 holding the capture cut in two files under one prefix,
    beside a ``_SUCCESS`` marker and a non-Parquet file."""
    from moto.server import ThreadedMotoServer
    from pyarrow import fs as pafs

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"fs.s3a.endpoint": f"http://127.0.0.1:{port}", "fs.s3a.access.key": "testing",
               "fs.s3a.secret.key": "testing", "fs.s3a.endpoint.region": "us-east-1"}
    s3fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True)
    s3fs.create_dir("captures")
    capture = workload["capture"]
    commits = [i for i, d in enumerate(capture.column("data").to_pylist()) if d[:1] == b"C"]
    assert len(commits) > 6
    # shop/: cut inside a transaction (two rows after a Commit: its Begin and a change);
    # whole/: cut after Commits, each file holding whole transactions.
    layouts = {"shop": [commits[len(commits) // 2] + 3],
               "whole": [commits[len(commits) // 3] + 1, commits[2 * len(commits) // 3] + 1]}
    for prefix, cuts in layouts.items():
        bounds = [0, *cuts, capture.num_rows]
        for i in range(len(bounds) - 1):
            with s3fs.open_output_stream(f"captures/{prefix}/part-{i}.parquet") as out:
                pq.write_table(capture.slice(bounds[i], bounds[i + 1] - bounds[i]), out)
        for extra in (f"captures/{prefix}/_SUCCESS", f"captures/{prefix}/notes.txt"):
            with s3fs.open_output_stream(extra) as out:
                out.write(b"not a capture")
    yield options
    server.stop()


def test_batch_source_from_s3a_through_connect(spark: Any, pg18: Any, workload: dict[str, Any],
                                               s3: dict[str, str]) -> None:
    """A capture cut inside a transaction is read in one task; one whose files hold whole
    transactions in one task per file; both equal PostgreSQL's tables, with the same rows
    and ``_seq``."""
    from pyspark.sql import functions as F

    sp.register(spark)
    for prefix, tasks in (("shop", 1), ("whole", 3)):
        every = spark.read.format("pgoutput").options(**s3).load(f"s3a://captures/{prefix}/")
        assert every.select(F.spark_partition_id()).distinct().count() == tasks, prefix
        for table in workload["tables"]:
            df = spark.read.format("pgoutput").options(**s3).option("table", table).load(f"s3a://captures/{prefix}/")
            assert _replica(df) == _postgres(pg18, table), (prefix, table)
    for table in workload["tables"]:
        frames = [spark.read.format("pgoutput").options(**s3).option("table", table).load(f"s3a://captures/{p}/")
                  .orderBy("_commit_lsn", "_seq").toArrow() for p in ("shop", "whole")]
        assert frames[0].num_rows > 0 and frames[0].equals(frames[1]), table


def test_batch_source_errors_name_the_path(spark: Any, workload: dict[str, Any], s3: dict[str, str]) -> None:
    sp.register(spark)
    table = workload["tables"][0]
    cases = [("s3a://captures/nothing-here/", s3, "s3a://captures/nothing-here/ does not exist"),
             ("s3a://no-such-bucket/x/", s3, "s3a://no-such-bucket/x/"),
             (str(workload["path"]) + ".missing", {}, "capture.parquet.missing does not exist"),
             ("zz://somewhere/capture", {}, "zz://somewhere/capture: unknown scheme zz://"),
             ("s3a://captures/shop/", {**s3, "fs.s3a.secret.key": ""}, "need both an access key and a secret key")]
    for path, options, message in cases:
        # Spark wraps a data source's error in its own (PYTHON_DATA_SOURCE_ERROR, with the
        # worker's traceback); the package's one line is in it.
        with pytest.raises(Exception, match=re.escape(message)):
            spark.read.format("pgoutput").options(**options).option("table", table).load(path).schema  # noqa: B018


def test_stream_through_connect(spark: Any, pg18: Any, workload: dict[str, Any], tmp_path: Path) -> None:
    sp.register(spark)
    table = workload["tables"][1]
    stream = (spark.readStream.format("pgoutput").option("dsn", pg18.dsn)
              .option("slot", workload["stream_slot"]).option("publication", workload["publication"])
              .option("table", table).option("maxChangesPerTrigger", "300").load())
    out = tmp_path / "out"
    q = (stream.writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    assert _replica(spark.read.parquet(str(out))) == _postgres(pg18, table)


def test_snapshot_through_connect(spark: Any, pg18: Any, workload: dict[str, Any]) -> None:
    name = workload["name"]
    t, pub = f"{name}_snap", f"{name}_snap_pub"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n int, big text); "
                 f"INSERT INTO {t} SELECT g, 'v' || g, g, repeat('y', g % 3000) FROM generate_series(1, 3000) g; "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    want = _postgres(pg18, t)
    with sp.snapshot(spark, pg18.dsn, slot=f"{name}_snap_slot", publication=pub, chunk_bytes=8 * 8192) as snap:
        pg18.execute(f"UPDATE {t} SET v = 'later'")  # after the consistent point: not in the snapshot
        assert len(snap.chunks(f"public.{t}")) > 2
        got = _replica(snap.read(f"public.{t}"))
    assert got == want


def test_executor_connection_errors_name_the_server() -> None:
    """What an executor's connection (a snapshot chunk here) says when it cannot reach the
    server: the DSN's host:port (not its password) and that executors must reach it."""
    port = _free_port()  # nothing listens there
    dsn = f"host=127.0.0.1 port={port} user=x password=hunter2 dbname=x"
    chunk = SnapshotChunk(index=0, table="public.t", relation=None, source="public.t", first_block=0,
                          end_block=None, row_filter=None, lsn=0, time_us=0)
    with pytest.raises(ConnectionFailed) as info:
        list(read_chunk_batches(dsn, "00000003-00000002-1", chunk, None, 2))
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "every executor must reach the server" in text
    assert "hunter2" not in text
