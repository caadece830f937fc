"""Real Spark deployments on this machine, started from pyspark's own distribution, for the
tests (tests/test_spark_deploy.py, tests/test_wheel.py) and ``make demo``: a standalone
cluster (a master and workers, each its own process) and a Spark Connect server, all on
127.0.0.1 and on free ports; and the package shipped to them as PySpark's packaging guide says
(the wheel of ``make wheel`` in a venv-pack'ed environment given as ``spark.archives``).
It is not part of the wheel: a cluster of one's own comes from one's own Spark distribution.

::

    env = ShippedEnv.build(build_dir)  # the wheel, venv-pack'ed (cached by source hash)
    with StandaloneCluster(workers=2) as cluster:
        # classic: spark.archives and spark.pyspark.python (env.spark_conf()), the driver
        # run in env.driver_dir (PYSPARK_PYTHON=./environment/bin/python, env.driver_env())
        SparkSession.builder.master(cluster.master_url) ...
        with ConnectServer(cluster.master_url, env.spark_conf(), cwd=env.driver_dir,
                           env=env.driver_env()) as server:
            # and each session adds env.archive as an artifact (docs/spark.md)
            SparkSession.builder.remote(server.url).getOrCreate()

From the command line, ``submit`` runs an application on a fresh cluster of this machine with
the package shipped, and stops the cluster (``make demo`` ends with it)::

    python tools/spark_cluster.py submit -- examples/spark_pipeline.py capture.parquet out/

Every daemon runs in a process group of its own, logs to a file under ``log_dir`` (a temp dir
unless given), and is stopped (the whole group) when its block ends. A daemon that does not
come up in time fails with the tail of its log. Nothing large outlives a cluster: the
executors' unpacked copies of the shipped environment go when it stops, a temp log dir too
when its block ends without an error, and an older shipped environment when a newer is built
(each is some hundreds of MB; a disk filled by them failed a CI run).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Callable

ROOT = Path(__file__).resolve().parent.parent

#: The environment's directory name inside ``spark.archives`` (``env.tar.gz#environment``),
#: so ``./environment/bin/python`` in an executor's (and the driver's) working directory.
ENV_NAME = "environment"

#: What the executors need besides the wheel: its dependencies and pandas (``mapInArrow``
#: imports it). pyspark itself comes from the cluster's Spark (``python/lib/pyspark.zip``).
RUNTIME_REQUIREMENTS = ("pyarrow>=16", "psycopg2-binary>=2.9", "pandas>=2.2,<3", "numpy")

READY_TIMEOUT_S = 180.0


class SparkDeploymentError(RuntimeError):
    """A Spark daemon, or the shipped environment, could not be made ready."""


def spark_home() -> Path:
    """pyspark's own distribution (bin/, sbin/, jars/), as pip installed it."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without anything that would let a Spark process import
    Python packages from the repository or from .venv (PYTHONPATH, VIRTUAL_ENV, .venv/bin on
    PATH, an inherited PYSPARK_PYTHON), plus Spark's own settings for 127.0.0.1."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYO3_PYTHON",
            "SPARK_CONF_DIR", "SPARK_HOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(venv_bin).resolve())
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1", "SPARK_DAEMON_MEMORY": "512m"})
    env.update(extra or {})
    return env


class Daemon:
    """One Spark process (and its children) in a process group of its own, logging to ``log``."""

    def __init__(self, name: str, command: list[str], log: Path, env: dict[str, str],
                 cwd: Path | None = None) -> None:
        self.name, self.command, self.log = name, command, log
        self._out: IO[bytes] = open(log, "wb")
        self.proc = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                     start_new_session=True)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text[-lines:])

    def fail(self, why: str) -> SparkDeploymentError:
        return SparkDeploymentError(f"{self.name} {why}; its log {self.log} ends:\n{self.tail()}")

    def wait_until(self, ready: Callable[[], bool], what: str,
                   timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise self.fail(f"exited with {self.proc.returncode} before {what}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise self.fail(f"not ready after {timeout:.0f} s (waiting for {what})")
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after 20 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)
            except ProcessLookupError:
                pass
        # Children that outlived the group leader (executors of a killed worker) go too.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._out.close()


def _log_dir(given: Path | None, prefix: str) -> Path:
    path = given or Path(tempfile.mkdtemp(prefix=prefix))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _remove_executor_copies(work_dir: Path) -> None:
    """Each executor's working directory under a worker's ``work_dir`` (``app-*/N/``) without
    what it fetched (the unpacked environment, archives, jars): its stdout and stderr stay."""
    for executor in work_dir.glob("app-*/*"):
        for item in executor.iterdir() if executor.is_dir() else ():
            if item.name not in ("stdout", "stderr"):
                if item.is_dir() and not item.is_symlink():
                    shutil.rmtree(item, ignore_errors=True)
                else:
                    item.unlink(missing_ok=True)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers (``cores`` cores, ``memory`` each),
    separate processes from ``spark-class``. ``master_url`` is ``spark://127.0.0.1:PORT``."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1536m",
                 log_dir: Path | None = None) -> None:
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.log_dir = _log_dir(log_dir, "spark-cluster-")
        #: Remove ``log_dir`` when the block ends without an error (only a temp dir of its own).
        self.remove_log_dir = log_dir is None
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.ui_url = f"http://127.0.0.1:{self.ui_port}"
        self.daemons: list[Daemon] = []

    def status(self) -> dict[str, object]:
        """The master's JSON status (its web UI's /json/), or {} while it is not serving."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as r:
                status: dict[str, object] = json.load(r)
                return status
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        workers = self.status().get("workers")
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE") \
            if isinstance(workers, list) else 0

    def __enter__(self) -> StandaloneCluster:
        spark_class = str(spark_home() / "bin" / "spark-class")
        conf_dir = self.log_dir / "conf"  # empty: no spark-defaults.conf from elsewhere
        conf_dir.mkdir(exist_ok=True)
        env = clean_env({"SPARK_CONF_DIR": str(conf_dir), "SPARK_LOG_DIR": str(self.log_dir)})
        try:
            master = Daemon("the Spark master", [
                spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(self.port), "--webui-port", str(self.ui_port)],
                self.log_dir / "master.log", env)
            self.daemons.append(master)
            master.wait_until(lambda: self.status().get("status") == "ALIVE",
                              f"its status ALIVE at {self.ui_url}/json/")
            for i in range(self.n_workers):
                work = self.log_dir / f"worker-{i}"
                (work / "local").mkdir(parents=True, exist_ok=True)
                # The executors' scratch space (their fetched-file caches, blocks) in the
                # cluster's own directory, not /tmp: removed with it, and between applications.
                self.daemons.append(Daemon(f"Spark worker {i}", [
                    spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--webui-port", str(free_port()), "--cores", str(self.cores),
                    "--memory", self.memory, "--work-dir", str(work), self.master_url],
                    self.log_dir / f"worker-{i}.log",
                    {**env, "SPARK_LOCAL_DIRS": str(work / "local")}))
            master.wait_until(lambda: self.alive_workers() == self.n_workers,
                              f"{self.n_workers} workers registered")
        except BaseException:
            self.stop()
            raise
        return self

    def remove_executor_copies(self) -> None:
        """What the executors of finished applications fetched and unpacked (a shipped
        environment is hundreds of MB per executor), their logs kept; call it between
        applications, when none runs."""
        for i in range(self.n_workers):
            work = self.log_dir / f"worker-{i}"
            _remove_executor_copies(work)
            for scratch in (work / "local").glob("*/executor-*"):
                shutil.rmtree(scratch, ignore_errors=True)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.daemons.clear()
        self.remove_executor_copies()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if self.remove_log_dir and exc_type is None:
            shutil.rmtree(self.log_dir, ignore_errors=True)


class ConnectServer:
    """A Spark Connect server (``SparkConnectServer`` through ``spark-submit``, as
    ``sbin/start-connect-server.sh`` starts it) on ``master``, with the Spark settings
    ``conf``, run in ``cwd`` (the server's working directory) with ``env`` added to its
    environment. To ship the package, give it a classic driver's settings (``spark_conf()``,
    ``driver_env()``, ``cwd=driver_dir`` of :class:`ShippedEnv`) and have each session add
    the archive as an artifact too (docs/spark.md, "Spark Connect"). ``url`` is
    ``sc://127.0.0.1:PORT``."""

    CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

    def __init__(self, master: str, conf: dict[str, str] | None = None, cwd: Path | None = None,
                 env: dict[str, str] | None = None, log_dir: Path | None = None) -> None:
        self.master, self.conf, self.cwd, self.extra_env = master, dict(conf or {}), cwd, env or {}
        self.log_dir = _log_dir(log_dir, "spark-connect-")
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.daemon: Daemon | None = None

    def __enter__(self) -> ConnectServer:
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.ui.enabled": "false", "spark.driver.memory": "1g",
                "spark.sql.session.timeZone": "UTC", **self.conf}
        command = [str(spark_home() / "bin" / "spark-submit"), "--class", self.CLASS,
                   "--name", "Spark Connect server", "--master", self.master]
        for k, v in conf.items():
            command += ["--conf", f"{k}={v}"]
        conf_dir = self.log_dir / "conf"
        conf_dir.mkdir(exist_ok=True)
        env = clean_env({"SPARK_CONF_DIR": str(conf_dir), **self.extra_env})
        self.daemon = Daemon("the Spark Connect server", command, self.log_dir / "connect.log",
                             env, cwd=self.cwd)
        try:
            self.daemon.wait_until(lambda: _port_open(self.port),
                                   f"its port {self.port} accepting connections")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


# --------------------------------------------------------------------------- the shipped env

def source_hash() -> str:
    """A hash of everything the wheel is built from (tracked sources of the crates and the
    Python package, Cargo and pyproject files): the build cache's key."""
    h = hashlib.sha256()
    roots = [ROOT / "crates", ROOT / "python"]
    files = [ROOT / "Cargo.toml", ROOT / "Cargo.lock", ROOT / "pyproject.toml"]
    for root in roots:
        files += sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and p.suffix not in (".so", ".pyc"))
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(command: list[str], what: str, **kw: object) -> None:
    proc = subprocess.run(command, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SparkDeploymentError(f"{what} failed ({proc.returncode}): {' '.join(command)}\n"
                                   f"{(proc.stdout + proc.stderr)[-3000:]}")


def build_wheel(out: Path) -> Path:
    """``make wheel`` into ``out`` (the manylinux wheel, checked with auditwheel); its path."""
    out.mkdir(parents=True, exist_ok=True)
    _run(["make", "--no-print-directory", "wheel", f"DIST={out}"], "make wheel", cwd=ROOT)
    wheels = sorted(out.glob("pgoutput_arrow-*.whl"))
    if len(wheels) != 1:
        raise SparkDeploymentError(f"make wheel left {len(wheels)} wheels in {out}: {wheels}")
    return wheels[0]


class ShippedEnv:
    """The package as a user ships it to a cluster: a venv with the wheel and its runtime
    dependencies, packed with venv-pack into ``archive`` (``spark.archives``, or a Connect
    session's artifact); and the same archive unpacked as ``driver_dir/environment`` for a
    classic driver's own Python workers (the Python data sources plan on the driver with the
    executors' ``./environment/bin/python``): such a driver runs in ``driver_dir``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.archive = root / "env.tar.gz"
        self.driver_dir = root / "driver"
        self.wheel = next(iter(sorted((root / "dist").glob("pgoutput_arrow-*.whl"))), None)

    @classmethod
    def build(cls, build_dir: Path) -> ShippedEnv:
        """Build (or reuse: the directory is keyed by :func:`source_hash`) the wheel, the venv,
        its archive and the driver's unpacked copy under ``build_dir``."""
        build_dir.mkdir(parents=True, exist_ok=True)
        # One build at a time: test processes running side by side (pytest -n) wait for the
        # first one's build and then reuse it.
        with open(build_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return cls._build_locked(build_dir)

    @classmethod
    def _build_locked(cls, build_dir: Path) -> ShippedEnv:
        root = build_dir / f"shipped-{source_hash()}"
        done = root / ".done"
        for older in build_dir.glob("shipped-*"):
            if older != root:
                shutil.rmtree(older, ignore_errors=True)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            wheel = build_wheel(root / "dist")
            venv = root / "venv"
            # The interpreter the tests run on (its base, not .venv): the cluster's nodes have it.
            base = Path(getattr(sys, "_base_executable", sys.executable))
            _run([str(base), "-m", "venv", str(venv)], "python -m venv")
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                   "--disable-pip-version-check"]
            _run([*pip, str(wheel), *RUNTIME_REQUIREMENTS], "pip install of the wheel")
            _run([str(Path(sys.executable).parent / "venv-pack"), "--prefix", str(venv),
                  "--output", str(root / "env.tar.gz"), "--quiet"], "venv-pack")
            unpacked = root / "driver" / ENV_NAME
            unpacked.mkdir(parents=True)
            with tarfile.open(root / "env.tar.gz") as tar:
                tar.extractall(unpacked, filter="fully_trusted")
            shutil.rmtree(venv)  # only the archive and its unpacked copy are used
            done.touch()
        return cls(root)

    def spark_conf(self) -> dict[str, str]:
        """The settings that ship the environment: every executor unpacks the archive into
        its working directory as ``environment`` and runs its Python from there."""
        return {"spark.archives": f"{self.archive}#{ENV_NAME}",
                "spark.pyspark.python": f"./{ENV_NAME}/bin/python",
                "spark.executorEnv.PYSPARK_PYTHON": f"./{ENV_NAME}/bin/python"}

    def driver_env(self) -> dict[str, str]:
        """The driver's environment variables: PySpark takes the Python of UDFs and data
        sources from PYSPARK_PYTHON (the client's, or the Connect server's)."""
        return {"PYSPARK_PYTHON": f"./{ENV_NAME}/bin/python"}

    def __enter__(self) -> ShippedEnv:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        pass


# --------------------------------------------------------------------------- command line

def submit(app: list[str], *, workers: int = 2, build_dir: Path = ROOT / "build" / "spark-deploy",
           log_dir: Path | None = None, stdout: IO[str] | None = None,
           stderr: IO[str] | None = None) -> int:
    """Start a standalone cluster, ship the package, ``spark-submit`` ``app`` (the application
    and its arguments; paths absolute, it runs in the driver's directory) in client mode with
    this interpreter as the driver's Python, stop the cluster; spark-submit's exit status."""
    shipped = ShippedEnv.build(build_dir)
    with StandaloneCluster(workers=workers, log_dir=log_dir) as cluster:
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
                   "--conf", f"spark.pyspark.driver.python={sys.executable}",
                   "--conf", "spark.executor.memory=1g", "--conf", "spark.executor.cores=1"]
        for k, v in shipped.spark_conf().items():
            command += ["--conf", f"{k}={v}"]
        print(f"standalone cluster {cluster.master_url} ({workers} workers; logs in "
              f"{cluster.log_dir}), shipping {shipped.archive.name} "
              f"({shipped.archive.stat().st_size / 2**20:.0f} MB, {shipped.wheel and shipped.wheel.name})",
              file=stderr or sys.stderr, flush=True)
        proc = subprocess.run([*command, *app], cwd=shipped.driver_dir, stdout=stdout,
                              stderr=stderr, env=clean_env(shipped.driver_env()))
        if proc.returncode != 0:
            cluster.remove_log_dir = False  # the executors' stderr tells why
        return proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/spark_cluster.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("submit", help="spark-submit an application to a fresh standalone "
                                        "cluster with the package shipped")
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--build-dir", type=Path, default=ROOT / "build" / "spark-deploy",
                     help="where the wheel and the packed environment are cached")
    run.add_argument("--log-dir", type=Path, help="the daemons' logs (default: a temp dir)")
    run.add_argument("app", nargs=argparse.REMAINDER,
                     help="-- the application (a .py file) and its arguments")
    args = ap.parse_args(argv)
    app = args.app[1:] if args.app[:1] == ["--"] else args.app
    if not app:
        ap.error("submit: no application given (after --)")
    return submit(app, workers=args.workers, build_dir=args.build_dir, log_dir=args.log_dir)


if __name__ == "__main__":
    sys.exit(main())
