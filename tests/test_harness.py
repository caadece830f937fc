"""The test harness itself: real servers of the versions asked for, set up for pgoutput."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg2
import pytest

from pg_harness import PgServer, PgServerError, int_to_lsn, lsn_to_int

TESTS_DIR = Path(__file__).resolve().parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not a running server.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def _processes_using(path: Path) -> list[int]:
    """Pids whose command line mentions ``path`` (a server's data directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        if str(path) in cmdline and _alive(int(entry)):
            found.append(int(entry))
    return found


def _wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


# ------------------------------------------------------------------ LSN helpers


@pytest.mark.parametrize("text,value", [
    ("0/0", 0),
    ("0/16B3748", 0x16B3748),
    ("16/B374D848", 0x16B374D848),
    ("FFFFFFFF/FFFFFFFF", 0xFFFFFFFFFFFFFFFF),
])
def test_lsn_round_trip(text: str, value: int) -> None:
    assert lsn_to_int(text) == value
    assert int_to_lsn(value) == text


@pytest.mark.parametrize("bad", ["", "16", "/1", "1/", "G/0", "100000000/0"])
def test_lsn_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        lsn_to_int(bad)


def test_lsn_matches_server_arithmetic(pg: PgServer) -> None:
    text, numeric = pg.query("SELECT pg_current_wal_lsn()::text, pg_current_wal_lsn() - '0/0'")[0]
    assert lsn_to_int(text) == int(numeric)
    assert int_to_lsn(int(numeric)) == text


# ------------------------------------------------------------------ the servers


def test_version_is_the_one_asked_for(pg18: PgServer, pg15: PgServer) -> None:
    assert pg18.server_version_num // 10000 == 18
    assert pg15.server_version_num // 10000 == 15
    assert pg18.version == 18 and pg15.version == 15


def test_configured_for_logical_decoding(pg: PgServer) -> None:
    settings = dict(pg.query(
        "SELECT name, setting FROM pg_settings WHERE name IN ('wal_level', "
        "'max_replication_slots', 'max_wal_senders', 'logical_decoding_work_mem', "
        "'max_prepared_transactions', 'listen_addresses', 'unix_socket_directories', 'port')"))
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) >= 20
    assert int(settings["max_wal_senders"]) >= 20
    assert settings["logical_decoding_work_mem"] == "64"  # kB
    assert int(settings["max_prepared_transactions"]) >= 10
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["unix_socket_directories"] == str(pg.socket_dir)
    assert int(settings["port"]) == pg.port


def test_server_does_not_run_as_root(pg: PgServer) -> None:
    assert pg.pid is not None
    uid = os.stat(f"/proc/{pg.pid}").st_uid
    assert uid != 0


def test_insert_yields_pgoutput_transaction(pg: PgServer, unique_name: str) -> None:
    table, slot = f"t_{unique_name}", f"s_{unique_name}"
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
    pg.execute(f"CREATE PUBLICATION p_{unique_name} FOR TABLE {table}")
    start = pg.create_slot(slot)
    try:
        pg.execute(f"INSERT INTO {table} VALUES (1, 'one'), (2, 'two')")
        options = {"proto_version": "1", "publication_names": f"p_{unique_name}"}

        peeked = pg.get_binary_changes(slot, options, peek=True)
        rows = pg.get_binary_changes(slot, options)
        assert peeked == rows, "peek must return what get then consumes"
        assert pg.get_binary_changes(slot, options) == [], "get consumes the changes"

        kinds = [data[:1] for _, _, data in rows]
        assert kinds == [b"B", b"R", b"I", b"I", b"C"]
        lsns = [lsn for lsn, _, _ in rows]
        assert all(lsn >= start for lsn in lsns)
        xids = {xid for _, xid, _ in rows}
        assert len(xids) == 1 and xids.pop() > 0
        # Begin's final LSN (bytes 1..9) is where the commit record starts: after every
        # change, and equal to Commit's commit LSN (bytes 2..10, after the flags byte).
        final_lsn = int.from_bytes(rows[0][2][1:9], "big")
        assert final_lsn > max(lsns[:-1])
        assert int.from_bytes(rows[-1][2][2:10], "big") == final_lsn
        assert lsns[-1] > final_lsn  # the Commit row carries the commit record's end
        # Insert: 'I', relation oid, 'N', then the tuple: its text values are there.
        assert b"one" in rows[2][2] and b"two" in rows[3][2]
        relid = pg.scalar("SELECT %s::regclass::oid", (table,))
        assert int.from_bytes(rows[1][2][1:5], "big") == int(relid)
    finally:
        pg.drop_slot(slot)


def test_flush_wal_makes_a_trailing_abort_visible(pg: PgServer, unique_name: str) -> None:
    """Decoding reads flushed WAL only, and neither an abort nor a non-transactional
    message is flushed when written: flush_wal() must make them visible."""
    slot, pub = f"s_{unique_name}", f"p_{unique_name}"
    pg.execute(f"CREATE PUBLICATION {pub}")  # no tables: only the message is published
    pg.create_slot(slot)
    try:
        pg.execute("BEGIN; SELECT txid_current(); "
                   f"SELECT pg_logical_emit_message(false, '{unique_name}', 'kept'); ROLLBACK")
        pg.flush_wal()
        assert pg.scalar("SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()")
        rows = pg.get_binary_changes(
            slot, {"proto_version": "2", "publication_names": pub, "messages": True})
        # Message: 'M', flags, Int64 LSN, then the prefix as a C string.
        prefixes = [data[10:].split(b"\0")[0] for _, _, data in rows if data[:1] == b"M"]
        assert prefixes == [unique_name.encode()]
    finally:
        pg.drop_slot(slot)


def test_two_phase_slot(pg: PgServer, unique_name: str) -> None:
    pg.create_slot(f"s_{unique_name}", two_phase=True)
    try:
        assert pg.scalar("SELECT two_phase FROM pg_replication_slots WHERE slot_name = %s",
                         (f"s_{unique_name}",)) is True
    finally:
        pg.drop_slot(f"s_{unique_name}")


def test_scram_password_authentication(pg: PgServer) -> None:
    stored = pg.scalar("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (pg.user,))
    assert stored.startswith("SCRAM-SHA-256$")

    with psycopg2.connect(pg.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_user, inet_server_addr()::text")
        assert cur.fetchone() == (pg.user, "127.0.0.1/32")
    conn.close()

    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(pg.dsn_for(password=pg.password + "-wrong"))
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(pg.dsn_for(password=""))


def test_replication_connection_uses_password(pg: PgServer) -> None:
    import psycopg2.extras

    conn = psycopg2.connect(pg.dsn_for(replication="database"),
                            connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        with conn.cursor() as cur:
            cur.execute("IDENTIFY_SYSTEM")
            systemid, timeline, xlogpos, dbname = cur.fetchone()
            assert timeline == 1 and dbname == pg.dbname
            assert lsn_to_int(xlogpos) > 0
    finally:
        conn.close()
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(pg.dsn_for(replication="database", password="nope"),
                         connection_factory=psycopg2.extras.LogicalReplicationConnection)


# ------------------------------------------------------------------ lifecycle (own servers)


@pytest.mark.parametrize("version", [18, 15])
def test_restart_keeps_data_and_port(version: int) -> None:
    with PgServer(version=version) as pg:
        pg.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
        pg.create_slot("survives")
        port, pid = pg.port, pg.pid
        assert pid is not None
        pg.restart()
        assert pg.running and pg.port == port and pg.pid != pid
        assert _wait_gone(pid)
        assert pg.scalar("SELECT v FROM kept") == 42
        assert pg.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'survives'") == 1


@pytest.mark.parametrize("version", [18, 15])
def test_stop_leaves_no_process_and_no_directory(version: int) -> None:
    pg = PgServer(version=version)
    pid, data_dir, base_dir = pg.pid, pg.data_dir, pg.base_dir
    assert pid is not None and _alive(pid)
    backends = _processes_using(data_dir)
    assert pid in backends
    conn = pg.connect()  # an open client connection must not hold the server up
    pg.stop()
    assert not pg.running
    assert not _alive(pid)
    assert _processes_using(data_dir) == []
    assert not base_dir.exists()
    conn.close()
    pg.stop()  # idempotent
    with pytest.raises(PgServerError, match="not running"):
        pg.execute("SELECT 1")


def _child_script(body: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        from pg_harness import PgServer
        pg = PgServer(version=18)
        print(pg.pid, pg.data_dir, flush=True)
    """) + textwrap.dedent(body)


def test_atexit_stops_a_forgotten_server() -> None:
    out = subprocess.run([sys.executable, "-c", _child_script("")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid_s, data_dir = out.stdout.split()
    assert _wait_gone(int(pid_s), timeout=5)
    assert _processes_using(Path(data_dir)) == []


def test_killed_owner_takes_its_server_down() -> None:
    child = subprocess.Popen([sys.executable, "-c", _child_script("import time; time.sleep(600)")],
                             stdout=subprocess.PIPE, text=True)
    data_dir = ""
    try:
        assert child.stdout is not None
        pid_s, data_dir = child.stdout.readline().split()
        assert _alive(int(pid_s))
        child.send_signal(signal.SIGKILL)  # no atexit: the parent-death signal must act
        child.wait(timeout=10)
        assert _wait_gone(int(pid_s), timeout=30)
        deadline = time.monotonic() + 30
        while _processes_using(Path(data_dir)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_using(Path(data_dir)) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if data_dir:
            shutil.rmtree(Path(data_dir).parent, ignore_errors=True)


def test_start_failure_reports_the_server_log() -> None:
    with pytest.raises(PgServerError, match="shared_buffers"):
        PgServer(version=18, settings={"shared_buffers": "'not-a-size'"})
