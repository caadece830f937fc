"""The live source across reconnections: what it drops as already handled, a slot dropped
while streaming, and the native frame reader's transaction tracking, on real PostgreSQL 18
and 15 (the ``pg`` fixture)."""

from __future__ import annotations

import dataclasses
from typing import Any
import time

import pyarrow as pa
import pytest

import pgoutput_arrow
from pgoutput_arrow import exceptions as exc
from pgoutput_arrow._internal import TxnTracker
from pgoutput_arrow.live.batches import drop_handled
from pg_harness import PgServer
from threads import CheckedThread


def test_rows_handled_before_a_resume_are_dropped_from_view_columns(
        pg: PgServer, unique_name: str) -> None:
    """After a reconnection that resumed below what was handed out (an unresolved PREPARE
    holds the resume point back), rows of transactions committed before are dropped again:
    with text and bytea columns too, which decode to view arrays (pyarrow cannot filter them)."""
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, note text, raw bytea)")
    pg.execute(f"CREATE PUBLICATION {unique_name} FOR TABLE {t}")
    pg.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (unique_name,))
    for i in (1, 2, 3):
        pg.execute(f"INSERT INTO {t} VALUES (%s, %s, %s)", (i, f"text number {i}, over twelve bytes", b"\0\xff"))
    rows = pg.query("SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_get_binary_changes("
                    "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)",
                    (unique_name, unique_name))
    pg.execute("SELECT pg_drop_replication_slot(%s)", (unique_name,))
    batch = pgoutput_arrow.decode([(lsn, bytes(data)) for lsn, _, data in rows], views=True).tables[
        f"public.{t}"].combine_chunks().to_batches()[0]
    assert pa.types.is_string_view(batch.schema.field("note").type)
    assert pa.types.is_binary_view(batch.schema.field("raw").type)
    commits = batch.column("_commit_lsn").to_pylist()
    assert len(set(commits)) == 3
    # As after resuming where the first transaction was handled already:
    kept = drop_handled(batch, commits[1])
    assert kept.column("id").to_pylist() == [2, 3]
    assert kept.column("note").to_pylist() == batch.column("note").to_pylist()[1:]
    assert drop_handled(batch, commits[2] + 1).num_rows == 0
    assert drop_handled(batch, commits[0]).num_rows == 3


def test_a_slot_dropped_while_streaming_is_an_error_not_a_new_slot(
        pg: PgServer, unique_name: str) -> None:
    """Created anew at the current WAL position, the slot would lose the changes between:
    a reconnection that finds its permanent slot gone stops with SlotNotFound."""
    t = f"{unique_name}_t"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY)")
    s = pgoutput_arrow.stream(pg.dsn, slot=unique_name, create_slot=True, create_publication=[t],
                              reconnect_initial_delay=1.0, reconnect_attempts=3, stop_after=60)
    errors: list[BaseException] = []
    received: list[Any] = []

    def consume() -> None:
        try:
            for item in s:
                if item.kind == "table":
                    received.append(item)
                s.ack(item.ack_lsn)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            errors.append(e)

    s.open()
    runner = CheckedThread(target=consume)
    runner.start()
    try:
        pg.execute(f"INSERT INTO {t} VALUES (1)")
        # Until the consumer has the insert (not a fixed sleep).
        deadline = time.monotonic() + 30
        while not received:
            assert time.monotonic() < deadline and runner.is_alive(), f"nothing streamed: {errors}"
            time.sleep(0.02)
        # End the walsender, then drop its slot before the consumer reconnects.
        deadline = time.monotonic() + 10
        while True:
            rows = pg.query("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                            (unique_name,))
            if rows and rows[0][0]:
                pg.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
            try:
                pg.execute("SELECT pg_drop_replication_slot(%s)", (unique_name,))
                break
            except Exception:  # still active for a moment
                assert time.monotonic() < deadline
                time.sleep(0.05)
        runner.join(timeout=30)
        assert not runner.is_alive()
    finally:
        s.stop()
        runner.join(timeout=30)
        s.close()
    assert len(errors) == 1 and isinstance(errors[0], exc.SlotNotFound), errors
    assert "dropped while streaming" in str(errors[0])
    assert not pg.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (unique_name,))


@pytest.mark.parametrize("kinds, idle, floor", [
    ([b"B" + bytes(20)], False, None),
    ([b"B" + bytes(20), b"C" + bytes(25)], True, None),
    # Prepare: flags, prepare LSN 0x10, end LSN, timestamp, xid, gid
    ([b"b" + bytes(28) + b"g\0", b"P\0" + (16).to_bytes(8, "big") + bytes(20) + b"g\0"],
     False, 16),
    ([b"P\0" + (16).to_bytes(8, "big") + bytes(20) + b"g\0",
      b"K\0" + bytes(28) + b"g\0"], True, None),
    ([b"S" + (7).to_bytes(4, "big") + b"\1"], False, None),
    ([b"S" + (7).to_bytes(4, "big") + b"\1", b"A" + (7).to_bytes(4, "big") + (8).to_bytes(4, "big")],
     False, None),
    ([b"S" + (7).to_bytes(4, "big") + b"\1", b"A" + (7).to_bytes(4, "big") * 2], True, None),
])
def test_txn_tracker(kinds: list[bytes], idle: bool, floor: int | None) -> None:
    tracker = TxnTracker()
    for message in kinds:
        tracker.see(message)
    assert (tracker.idle, tracker.prepared_floor()) == (idle, floor)


def test_stream_options_group_the_keyword_options() -> None:
    """``stream(dsn, slot=..., **options)`` checks its options once into a frozen
    StreamOptions; what is not an option of the stream goes to the decoder."""
    from pgoutput_arrow.live import LiveStream, StreamOptions

    o = StreamOptions.of(slot="s", publication="a, b", start_lsn="0/10", temporary_slot=True,
                         flush_interval=2.0, batch_size=7)
    assert o.publications == ("a", "b") and o.start_lsn == 16 and o.create_slot
    assert o.flush_interval == 2.0 and dict(o.decoder_options) == {"batch_size": 7}
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.slot = "t"  # type: ignore[misc]
    s = pgoutput_arrow.stream("host=nowhere", slot="s", publication="a, b", start_lsn="0/10",
                              temporary_slot=True, flush_interval=2.0, batch_size=7)  # not opened
    assert s.options == o and (s.slot, s.publications, s.flush_interval) == ("s", ["a", "b"], 2.0)
    assert LiveStream("host=nowhere", o).options is o
    with pytest.raises(ValueError, match="publication is required"):
        StreamOptions.of(slot="s")
    with pytest.raises(ValueError, match="streaming must be"):
        pgoutput_arrow.stream("host=nowhere", slot="s", publication="p", streaming="maybe")
    # A count or a duration below 0 fails before anything is opened, naming it.
    for name in ("flush_linger", "flush_interval", "flush_messages", "status_interval", "idle_timeout"):
        with pytest.raises(ValueError, match=f"{name} must not be negative, not -1"):
            pgoutput_arrow.stream("host=nowhere", slot="s", publication="p", **{name: -1})
    assert StreamOptions.of(slot="s", publication="p", flush_linger=0).flush_linger == 0
