"""Running the live source in production (docs/operations.md), on real PostgreSQL 18 and 15:
the slot guard (``--slot-status``, ``--drop-slot``, no silent re-creation of a lost slot),
failover slot options, the Prometheus endpoint and heartbeats."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import pgoutput_arrow
from pgoutput_arrow import exceptions as exc
from pgoutput_arrow.live import HEARTBEAT_PREFIX
from pg_harness import PgServer, lsn_to_int
from test_live import DUMP, alive, dump, free_closed_port, slot_state, wait_until
from threads import CheckedThread


def invalidate_slots(server: PgServer) -> None:
    """Writes and switches WAL segments past ``max_slot_wal_keep_size``, then CHECKPOINT:
    the checkpointer removes the old segments and invalidates the slots that needed them
    (as PostgreSQL's own src/test/recovery/t/019_replslot_limit.pl does)."""
    server.execute("CREATE TABLE IF NOT EXISTS filler (v text)")
    for _ in range(4):
        server.execute("INSERT INTO filler SELECT repeat('x', 100) FROM generate_series(1, 2000)")
        server.execute("SELECT pg_switch_wal()")
    server.execute("CHECKPOINT")


def slot_rows(output: str) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in output.splitlines() if line.strip()]
    return {r["slot_name"]: r for r in rows}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [18, 15])
def test_slot_status_drop_slot_and_an_invalidated_slot_is_never_streamed(version: int) -> None:
    with PgServer(version=version, settings={"max_slot_wal_keep_size": "'1MB'"}) as server:
        server.execute("CREATE TABLE t (id int PRIMARY KEY)")
        server.execute("CREATE PUBLICATION p FOR TABLE t")
        server.create_slot("lost")
        invalidate_slots(server)
        assert server.scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'lost'") \
            == "lost", server.query("SELECT * FROM pg_replication_slots")
        server.create_slot("healthy")
        server.execute("INSERT INTO t SELECT generate_series(1, 100)")

        # JSON, one object per slot: exit status 3 for the invalidated one.
        r = dump("--dsn", server.dsn, "--slot-status", "--format", "jsonl")
        assert r.returncode == 3, r.stderr
        slots = slot_rows(r.stdout)
        assert set(slots) == {"lost", "healthy"}
        lost, healthy = slots["lost"], slots["healthy"]
        assert lost["wal_status"] == "lost" and lost["invalidated"] is True
        assert "invalidated" in str(lost["alarm"])
        assert lost["invalidation_reason"] == ("wal_removed" if version >= 17 else None)
        assert healthy["invalidated"] is False and healthy["alarm"] is None
        assert healthy["wal_status"] in ("reserved", "extended")
        assert 0 < healthy["safe_wal_size"] <= 16 << 20  # max_slot_wal_keep_size is set
        assert healthy["active"] is False
        if version >= 17:
            assert healthy["inactive_since"] is not None and healthy["failover"] is False
        else:
            assert healthy["inactive_since"] is None  # PostgreSQL 15 has no such column
        # The sizes are the server's: retained WAL = position - restart_lsn.
        restart = lsn_to_int(server.scalar(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = 'healthy'"))
        assert healthy["retained_wal_bytes"] == lsn_to_int(str(healthy["server_lsn"])) - restart > 0

        # A threshold: past it (0 bytes) exit 3, under it (1TB) exit 0 for the healthy slot.
        r = dump("--dsn", server.dsn, "--slot", "healthy", "--slot-status", "--format", "jsonl",
                 "--max-retained-wal", "0")
        assert r.returncode == 3 and "retains" in slot_rows(r.stdout)["healthy"]["alarm"]
        r = dump("--dsn", server.dsn, "--slot", "healthy", "--slot-status", "--format", "jsonl",
                 "--max-retained-wal", "1TB")
        assert r.returncode == 0, r.stderr
        # The table for people.
        r = dump("--dsn", server.dsn, "--slot-status", "--format", "pretty")
        assert r.returncode == 3
        head, *lines = r.stdout.splitlines()
        assert head.split()[:4] == ["slot", "database", "active", "wal_status"]
        assert re.match(r"lost\s+postgres\s+no\s+lost\s", lines[1 if lines[0].startswith("healthy") else 0])

        # The live source refuses the invalidated slot in one line, saying what to do.
        with pytest.raises(exc.SlotInvalidated, match=r'"lost" was invalidated.*lost.*--snapshot'):
            with pgoutput_arrow.stream(server.dsn, slot="lost", publication="p") as s:
                next(iter(s))
        r = dump("--dsn", server.dsn, "--slot", "lost", "--publication", "p", "--format", "jsonl",
                 "--idle-timeout", "1")
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
        assert "invalidated" in r.stderr and "new snapshot" in r.stderr

        # --drop-slot: gone; a second time says so.
        r = dump("--dsn", server.dsn, "--slot", "lost", "--drop-slot")
        assert r.returncode == 0, r.stderr
        assert slot_state(server, "lost") == (None, None)
        r = dump("--dsn", server.dsn, "--slot", "lost", "--drop-slot")
        assert r.returncode == 1 and "does not exist" in r.stderr

        # A stream resuming from a position (the CLI's output checkpoint) whose slot is gone
        # is not given a new slot, even with create_slot: that slot would skip the changes.
        with pytest.raises(exc.SlotInvalidated, match=r'"lost" does not exist: the changes since'):
            with pgoutput_arrow.stream(server.dsn, slot="lost", publication="p", create_slot=True,
                                       start_lsn=restart) as s:
                next(iter(s))
        assert slot_state(server, "lost") == (None, None)
        server.drop_slot("healthy")


@pytest.mark.timeout(120)
def test_an_unfinished_snapshots_slot_is_dropped_only_if_nothing_consumed_from_it(
        pg18: PgServer, unique_name: str) -> None:
    """drop_unfinished_slot (a restart after a snapshot cut short): a slot still at the
    consistent point it was created at is dropped, once the walsender of the run that was cut
    short lets it go; one confirmed past it (something consumed from it) or of another plugin
    is refused, and stays; an absent one is no error."""
    from pgoutput_arrow.live.slot_guard import drop_unfinished_slot

    pg, slot = pg18, unique_name
    pg.execute(f"CREATE TABLE {slot} (id int)")
    pg.execute(f"CREATE PUBLICATION {slot} FOR TABLE {slot}")
    created = lsn_to_int(pg.scalar(
        "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)))
    pg.execute(f"INSERT INTO {slot} VALUES (1)")
    pg.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (slot,))
    with pytest.raises(exc.SlotInUse, match="something consumed from it"):
        drop_unfinished_slot(pg.dsn, slot, created)
    assert slot_state(pg, slot) != (None, None)
    moved = lsn_to_int(pg.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (slot,)))
    # Still held by the interrupted run's walsender, going away: waited for, then dropped
    # (--drop-slot, for a person, refuses at once).
    import threading

    import psycopg2.extras

    holder = psycopg2.connect(pg.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    holder.cursor().start_replication(slot_name=slot, decode=False, options={
        "proto_version": "1", "publication_names": slot})  # never confirms anything
    assert pg.scalar("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    r = dump("--dsn", pg.dsn, "--slot", slot, "--drop-slot")
    assert r.returncode == 1 and "is active for PID" in r.stderr, r.stderr
    with pytest.raises(exc.SlotInUse, match="is active for PID"):
        drop_unfinished_slot(pg.dsn, slot, moved, wait=0.5)
    release = threading.Timer(1.0, holder.close)
    release.start()
    t0 = time.monotonic()
    assert drop_unfinished_slot(pg.dsn, slot, moved) is True
    assert time.monotonic() - t0 >= 0.5
    release.join()
    assert slot_state(pg, slot) == (None, None)
    assert drop_unfinished_slot(pg.dsn, slot, moved) is False
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    with pytest.raises(exc.ReplicationError, match="test_decoding"):
        drop_unfinished_slot(pg.dsn, slot, None)
    pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    pg.execute("SELECT pg_create_physical_replication_slot(%s)", (slot,))
    with pytest.raises(exc.ReplicationError, match=f'"{slot}" is a physical slot; expected a logical slot with plugin pgoutput'):
        drop_unfinished_slot(pg.dsn, slot, None)
    pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_drop_slot_refuses_an_active_slot_and_usage_errors(pg18: PgServer, unique_name: str) -> None:
    pg18.execute(f"CREATE TABLE {unique_name} (id int)")
    with pgoutput_arrow.stream(pg18.dsn, slot=unique_name, create_slot=True,
                               create_publication=[unique_name], idle_timeout=0.2) as s:
        r = dump("--dsn", pg18.dsn, "--slot", unique_name, "--drop-slot")
        assert r.returncode == 1 and "is active for PID" in r.stderr
        for _ in s:
            pass
    for args in (["--slot-status"], ["--dsn", pg18.dsn, "--drop-slot"],
                 ["--dsn", pg18.dsn, "--slot-status", "--format", "parquet"],
                 ["--dsn", pg18.dsn, "--max-retained-wal", "1GB", "--drop-slot", "--slot", "x"]):
        r = dump(*args)
        assert r.returncode == 2, (args, r.stderr)
    # A metrics port in use fails before anything is created on the server.
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        r = dump("--dsn", pg18.dsn, "--slot", f"{unique_name}_m", "--create-slot",
                 "--create-publication", unique_name, "--metrics-port", str(busy.getsockname()[1]))
    assert r.returncode == 1 and "in use" in r.stderr, r.stderr
    assert slot_state(pg18, f"{unique_name}_m") == (None, None)
    r = dump("capture.parquet", "--metrics-port", "9187")
    assert r.returncode == 2 and "go with --dsn" in r.stderr
    r = dump("--dsn", pg18.dsn, "--slot-status", "--max-retained-wal", "lots")
    assert r.returncode == 2 and "not a size" in r.stderr


def test_failover_needs_postgresql_17(pg15: PgServer, unique_name: str) -> None:
    pg15.execute(f"CREATE TABLE {unique_name} (id int)")
    with pytest.raises(exc.ReplicationError, match="failover slots need PostgreSQL 17 or later"):
        with pgoutput_arrow.stream(pg15.dsn, slot=unique_name, create_slot=True, failover=True,
                                   create_publication=[unique_name]) as s:
            next(iter(s))
    assert slot_state(pg15, unique_name) == (None, None)


def test_failover_slot_is_created_or_altered(pg18: PgServer, unique_name: str) -> None:
    pg18.execute(f"CREATE TABLE {unique_name} (id int)")
    made, altered = f"{unique_name}_made", f"{unique_name}_altered"
    pg18.create_slot(altered)
    for slot in (made, altered):
        with pgoutput_arrow.stream(pg18.dsn, slot=slot, create_slot=True, failover=True,
                                   create_publication=[unique_name], publication=unique_name,
                                   idle_timeout=0.2) as s:
            for _ in s:
                pass
        assert pg18.scalar("SELECT failover FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)) is True


# --------------------------------------------------------------------------- metrics


def scrape(port: int) -> dict[str, float]:
    """The endpoint's samples: ``name{labels}`` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


@pytest.mark.timeout(120)
def test_metrics_endpoint_lag_matches_pg_replication_slots(pg18: PgServer, unique_name: str) -> None:
    t = unique_name
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    slot = f'slot="{t}"'
    with pgoutput_arrow.stream(pg18.dsn, slot=t, create_slot=True, create_publication=[t],
                               metrics_port=0, status_interval=0.5) as s:
        port = s.metrics_port
        assert port
        # A consumer that acknowledges the first transaction only and keeps reading: the
        # second is received but held, so the server's position moves on past the confirmed.
        groups: list[tuple[int, int]] = []  # (rows, ack_lsn)

        def consume() -> None:
            for batches, ack in s.groups():
                groups.append((sum(b.num_rows for b in batches if b.kind == "table"), ack))
                if len(groups) == 1:
                    s.ack(ack)

        consumer = CheckedThread(target=consume)
        consumer.start()
        pg18.execute(f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 100) g")
        wait_until(lambda: groups, 10, "the first transaction")
        first_ack = groups[0][1]
        wait_until(lambda: (slot_state(pg18, t)[0] or 0) >= first_ack, 10,
                   "the first acknowledgement to reach the server")
        pg18.execute(f"INSERT INTO {t} SELECT g, 'y' FROM generate_series(101, 300) g")
        wait_until(lambda: len(groups) == 2, 10, "the second transaction")
        assert [n for n, _ in groups] == [100, 200]
        confirmed = slot_state(pg18, t)[0] or 0
        before = pg18.current_wal_lsn()
        m = scrape(port)
        after = pg18.current_wal_lsn()

        # Confirmed: the first transaction, and at most what was handed out with nothing to
        # store after it (acknowledged with it); never the second, held.
        assert m[f"pgoutput_confirmed_lsn{{{slot}}}"] == confirmed
        assert first_ack <= confirmed < groups[1][1], (first_ack, confirmed, groups)
        assert m[f'pgoutput_changes_total{{{slot},table="public.{t}"}}'] == 300
        assert m[f'pgoutput_change_bytes_total{{{slot},table="public.{t}"}}'] > 0
        # The stream's lag: its view of the server's WAL end minus what it confirmed.
        wal_end = m[f"pgoutput_server_wal_end_lsn{{{slot}}}"]
        assert m[f"pgoutput_lag_bytes{{{slot}}}"] == wal_end - confirmed > 0
        assert wal_end <= after
        # The server's view, polled from pg_replication_slots on an ordinary connection.
        assert before - confirmed <= m[f"pgoutput_slot_lag_bytes{{{slot}}}"] <= after - confirmed
        restart = lsn_to_int(pg18.scalar(
            "SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (t,)))
        assert before - restart <= m[f"pgoutput_slot_retained_wal_bytes{{{slot}}}"] <= after - restart
        assert m[f'pgoutput_slot_wal_status{{{slot},wal_status="reserved"}}'] == 1
        assert m[f"pgoutput_slot_active{{{slot}}}"] == 1
        assert m[f"pgoutput_transactions_in_flight{{{slot}}}"] == 0
        assert m[f"pgoutput_reconnects_total{{{slot}}}"] == 0
        assert m[f"pgoutput_lag_seconds{{{slot}}}"] > 0  # rows held: not caught up
        assert f"pgoutput_slot_safe_wal_size_bytes{{{slot}}}" not in m  # no limit set
        # Every series the Grafana dashboard shows is served.
        dashboard = (Path(__file__).parent.parent / "docs" / "grafana-dashboard.json").read_text()
        names = set(re.findall(r"pgoutput_[a-z_]+", dashboard)) - {"pgoutput_arrow"}
        served = {key.split("{")[0] for key in m}
        assert names and names <= served | {"pgoutput_slot_safe_wal_size_bytes"}, names - served
        s.stop()
        consumer.join(timeout=30)
    # Closed: the endpoint is gone.
    with pytest.raises(OSError):
        scrape(port)


@pytest.mark.timeout(120)
def test_cli_metrics_port_and_heartbeats_advance_an_idle_slot(pg18: PgServer, unique_name: str,
                                                              tmp_path: Path) -> None:
    """No client writes while the CLI streams with --heartbeat-interval: its heartbeat
    messages are WAL of the slot's database, and the slot moves past each."""
    t = unique_name
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    pg18.execute(f"INSERT INTO {t} VALUES (1)")  # before the slot: not streamed
    port = free_closed_port()
    out = tmp_path / "out.jsonl"
    with open(out, "w") as f:
        proc = subprocess.Popen(
            [*DUMP, "--dsn", pg18.dsn, "--slot", t, "--create-slot", "--create-publication", t,
             "--messages", "--format", "jsonl", "--status-interval", "0.5",
             "--heartbeat-interval", "0.3", "--metrics-port", str(port)],
            stdout=f, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: alive(proc) and slot_state(pg18, t)[1] is not None, 30, "the stream")
        start = pg18.current_wal_lsn()
        wait_until(lambda: alive(proc) and (slot_state(pg18, t)[0] or 0) > start, 20,
                   lambda: f"the idle slot to advance past {start}: {slot_state(pg18, t)}")
        # Several heartbeats, each written out and confirmed in turn. The slot's position
        # alone does not count them: between beats it also moves on keepalives.
        first = slot_state(pg18, t)[0] or 0

        def written() -> list[dict]:
            lines = []
            for line in out.read_text().splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:  # a line still being written
                    break
            return lines
        wait_until(lambda: alive(proc) and len(written()) >= 2, 20,
                   lambda: f"two heartbeats written out: {written()}")
        second = lsn_to_int(written()[1]["lsn"])
        wait_until(lambda: alive(proc) and (slot_state(pg18, t)[0] or 0) > second, 20,
                   lambda: f"the second heartbeat ({written()[1]['lsn']}) to be confirmed: {slot_state(pg18, t)}")

        def scraped() -> dict[str, float]:
            try:
                return scrape(port)
            except OSError:
                return {}
        wait_until(lambda: scraped().get(f'pgoutput_confirmed_lsn{{slot="{t}"}}', 0) > first, 20,
                   "the endpoint to show the confirmed position")
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    beats = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(beats) >= 2 and all(b["op"] == "message" for b in beats), beats[:3]
    assert {b["prefix"] for b in beats} == {HEARTBEAT_PREFIX}
