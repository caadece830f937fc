"""Run seeds: write each workload into a fresh database, capture it through every option
set and test_decoding, decode it by every path, compare with PostgreSQL, shrink failures.

    python tests/torture/run.py --seed 7                 # one seed, PostgreSQL 18 and 15
    python tests/torture/run.py --count 20 --start 100   # seeds 100..119
    python tests/torture/run.py --duration 1800          # seeds until 30 minutes are up

``make torture SEED=... COUNT=... DURATION=...`` calls this. A failure prints the seed, the
command that reproduces it, and the workload shrunk to the transactions it needs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import pgoutput_arrow  # noqa: E402
from pgoutput_arrow._files import without_column_ids  # noqa: E402
from generator import MARKER, PRELUDE, Step, Workload, generate  # noqa: E402
import consumers_adapter  # noqa: E402
import shapes  # noqa: E402
import types_adapter  # noqa: E402
from oracle import (  # noqa: E402
    compare_changes, compare_final, compare_message_places, compare_messages, decoded_changes, decoded_from, filter_expected,
    parse_test_decoding, raw_text_columns, renames_of, server_columns, unified_raw_columns, unify_batches, unify_outputs)
from paths import DUMP, delta_change_log, jsonl_changes, parquet_output, run_dump, typed_changes  # noqa: E402
from pg_harness import PgServer  # noqa: E402
from settings import (  # noqa: E402
    CODECS, apply as apply_settings, capture_session, database_encoding, draw as draw_settings, pin,
    spark_settings, streams_every_transaction)

#: (name, pgoutput options, slot made with two_phase, minimum server version)
OPTION_SETS = [
    ("v1-text", {"proto_version": "1"}, False, 15),
    ("v2-stream", {"proto_version": "2", "streaming": "on"}, False, 15),
    ("v3-twophase-binary", {"proto_version": "3", "streaming": "on", "two_phase": "on", "binary": "true"}, True, 15),
    ("v4-parallel-binary", {"proto_version": "4", "streaming": "parallel", "binary": "true"}, False, 16),
]


@dataclasses.dataclass
class Result:
    seed: int
    version: int
    statements: int = 0
    runs: int = 0  # option sets × paths
    values: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)
    paths: set[str] = dataclasses.field(default_factory=set)


#: What the oracle's session sets: test_decoding prints values, and psycopg2 reads the final
#: rows, in the calling session's settings, whatever postgresql.conf says (a seed's server
#: may have other DateStyle, IntervalStyle, TimeZone, ... drawn: settings.py). Float text is
#: exact (extra_float_digits >= 1), money in the C locale's notation.
@dataclasses.dataclass
class Heavy:
    """Which heavy paths run for a seed (each every Nth seed, see main)."""

    live: bool = False
    spark: Any = None
    cli: bool = False
    delta: bool = False
    restart: bool = False


def _execute(conns: list[Any], step: Step) -> None:
    a, b = conns
    with a.cursor() as ca, b.cursor() as cb:
        if step.kind in ("ddl", "finish", "message"):
            for sql in step.sql:
                ca.execute(sql)
            return
        if step.kind == "interleaved":
            ca.execute("BEGIN")
            cb.execute("BEGIN")
            for i in range(max(len(step.sql), len(step.other))):
                if i < len(step.sql):
                    ca.execute(step.sql[i])
                if i < len(step.other):
                    cb.execute(step.other[i])
            for c in ((cb, ca) if step.other_first else (ca, cb)):
                c.execute("COMMIT")
            return
        if step.kind == "origin":
            ca.execute("SELECT pg_replication_origin_session_setup('torture_origin')")
            ca.execute("BEGIN")
            ca.execute("SELECT pg_replication_origin_xact_setup('0/1234', now())")
            for sql in step.sql:
                ca.execute(sql)
            ca.execute("COMMIT")
            ca.execute("SELECT pg_replication_origin_session_reset()")
            return
        ca.execute("BEGIN")
        for sql in step.sql:
            ca.execute(sql)
        ca.execute({"commit": "COMMIT", "abort": "ROLLBACK"}.get(step.kind, f"PREPARE TRANSACTION '{step.gid}'"))


def missing_types(pg: PgServer) -> frozenset[str]:
    """The optional types (generator.OPTIONAL_TYPES) ``pg`` lacks: xml without libxml."""
    try:
        pg.query("SELECT '<a/>'::xml")
        return frozenset()
    except Exception:  # noqa: BLE001  (psycopg2's error: "unsupported XML feature")
        return frozenset({"xml"})


def _sets(pg: PgServer) -> list[tuple[str, dict[str, str], bool]]:
    return [(n, o, tp) for n, o, tp, v in OPTION_SETS if pg.version >= v]


def run_workload(pg: PgServer, workload: Workload, *, live: bool = False, spark: Any = None,
                 keep: bool = False, heavy: Heavy | None = None) -> Result:
    """Runs ``workload`` in a fresh database of ``pg`` and checks every path."""
    heavy = heavy or Heavy(live=live, spark=spark)
    result = Result(workload.seed, pg.version, workload.statements())
    db = f"torture_{workload.seed}_{os.getpid()}"
    _drop(pg)  # whatever an interrupted run left (a prepared transaction blocks slot creation)
    # The server's output settings of this seed, until the workload is checked: then back to
    # what they were, for whatever runs on this server next (the test suite shares it).
    settings = apply_settings(pg, draw_settings(workload.seed))
    encoding = database_encoding(workload.seed)
    pg.create_database(db, encoding)
    conns = [pg.connect(pg.dsn_for(db)) for _ in range(2)]
    oracle = pg.connect(pg.dsn_for(db))
    try:
        with oracle.cursor() as cur:
            pin(cur)  # test_decoding and the final SELECTs print under the calling session's settings
        with conns[0].cursor() as cur:
            # A wait for a lock (a slot waits for running transactions) is an error, not a hang.
            cur.execute("SET lock_timeout = '120s'")
            for sql in PRELUDE:
                cur.execute(sql)
            cur.execute(workload.publication.create())
            for name, _, two_phase in _sets(pg):
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                            (_slot(db, name), two_phase))
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (_slot(db, "td"),))
            if heavy.live:
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (_slot(db, "live"),))
            if heavy.restart:
                cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (_slot(db, "cli"),))
        creates = 0
        while creates < len(workload.steps) and workload.steps[creates].sql[0].startswith("CREATE TABLE"):
            creates += 1
        filtered = workload.filtered if pg.version >= 15 else None
        for i, step in enumerate(workload.steps):
            if i == creates and filtered is not None:
                # The second publication needs its table: made right after the tables, with
                # its own slot (no change of the table happened before).
                with conns[0].cursor() as cur:
                    cur.execute(filtered.create())
                    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (_slot(db, "filter"),))
            _execute(conns, step)
        with oracle.cursor() as cur:
            cur.execute("SELECT pg_switch_wal()")
            # Which transactions were replayed under a replication origin: those only-local
            # leaves out (peeked first, then read whole).
            td = "'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1'"
            cur.execute(f"SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, {td}, 'only-local', '1')",
                        (_slot(db, "td"),))
            # Local: a transaction with a change printed (PostgreSQL 15 does not filter
            # logical messages by origin: a message-only transaction says nothing).
            local, xid = set(), None
            for (line,) in cur.fetchall():
                if line.startswith("BEGIN "):
                    xid = int(line.split()[1])
                elif line.startswith("table ") and xid is not None:
                    local.add(xid)
            cur.execute(f"SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, {td})", (_slot(db, "td"),))
            lines = [r[0] for r in cur.fetchall()]
            # Messages of rolled-back savepoints that pgoutput may have streamed: their content
            # as PostgreSQL computes it.
            may_add = []
            for content in workload.rolled_back_messages():
                cur.execute(f"SELECT convert_to(({content})::text, current_setting('server_encoding'))")
                may_add.append(("torture", bytes(cur.fetchone()[0])))
            codec = CODECS[encoding]
            expected = dataclasses.replace(parse_test_decoding(lines, workload.publication, codec), may_add=may_add)
            origins = {x for x in expected.commits if x not in local}
        captures = {}
        with conns[0].cursor() as cur:
            # The capture is taken as the docs say (settings.capture_session): the server's
            # IntervalStyle and bytea_output, which the decoder reads in any form, and the
            # rest pinned (floats exact; DateStyles are covered by test_server_settings.py).
            capture_session(cur)
            for name, options, _ in _sets(pg):
                flat: list[str] = []
                for k, v in {**options, "publication_names": "torture", "messages": "true"}.items():
                    flat += [k, v]
                cur.execute("SELECT (lsn - '0/0'::pg_lsn)::int8, xid::text::int8, data FROM "
                            "pg_logical_slot_get_binary_changes(%s, NULL, NULL, VARIADIC %s)", (_slot(db, name), flat))
                rows = cur.fetchall()
                captures[name] = pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                                           "xid": pa.array([r[1] for r in rows], pa.int64()),
                                           "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
            if filtered is not None:
                cur.execute("SELECT (lsn - '0/0'::pg_lsn)::int8, xid::text::int8, data FROM "
                            "pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'proto_version', '2', 'streaming', "
                            "'on', 'messages', 'true', 'publication_names', 'torture_f')", (_slot(db, "filter"),))
                rows = cur.fetchall()
                fcapture = pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                                     "xid": pa.array([r[1] for r in rows], pa.int64()),
                                     "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
                _check_filtered(result, fcapture,
                                filter_expected(dataclasses.replace(parse_test_decoding(lines, codec=codec), may_add=may_add),
                                                filtered),
                                f"PG{pg.version} v2-filter", origins)
        for problem in shapes.check_kinds(workload, captures, pg.version, streams_every_transaction(settings)):
            result.problems.append(f"PG{pg.version} {problem}")
        for name, capture in captures.items():
            _check_paths(result, oracle, expected, capture, f"PG{pg.version} {name}", workload, origins)
        if heavy.live:
            _check_live(result, pg, db, oracle, expected, workload, restart=heavy.restart)
        if heavy.restart:
            _check_cli_live(result, pg, db, oracle, expected, workload)
        if heavy.spark is not None:
            _check_spark(result, heavy.spark, oracle, expected, captures, workload)
        if heavy.cli or heavy.delta:
            _check_cli(result, oracle, expected, captures, workload, pg.version, delta=heavy.delta)
    finally:
        for c in [*conns, oracle]:
            c.close()
        if not keep:
            _drop(pg, db)
        pg.configure(dict.fromkeys(settings))
    return result


def _slot(db: str, name: str) -> str:
    return f"{db}_{name.replace('-', '_')}"


def _drop(pg: PgServer, db: str | None = None) -> None:
    """Removes a seed's database with its prepared transactions and slots (``db`` None: every
    torture database). A prepared transaction left behind would make every later slot
    creation on the server wait for it."""
    like = db if db is not None else "torture\\_%"
    for gid, name in pg.query("SELECT gid, database FROM pg_prepared_xacts WHERE database LIKE %s", (like,)):
        try:
            # Not `with conn`: psycopg2 runs its block in a transaction, which ROLLBACK
            # PREPARED refuses.
            c = pg.connect(pg.dsn_for(name))
            try:
                c.autocommit = True
                c.cursor().execute(f"ROLLBACK PREPARED '{gid}'")
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001  (reported, the rest still cleaned)
            print(f"torture: could not roll back prepared {gid} in {name}: {e}", file=sys.stderr)
    for slot, active in pg.query("SELECT slot_name, active_pid FROM pg_replication_slots WHERE database LIKE %s",
                                 (like,)):
        try:
            if active:
                pg.execute("SELECT pg_terminate_backend(%s)", (active,))
            pg.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        except Exception as e:  # noqa: BLE001
            print(f"torture: could not drop slot {slot}: {e}", file=sys.stderr)
    for (name,) in pg.query("SELECT datname FROM pg_database WHERE datname LIKE %s", (like,)):
        pg.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    if pg.query("SELECT 1 FROM pg_replication_origin WHERE roname = 'torture_origin'"):
        pg.execute("SELECT pg_replication_origin_drop('torture_origin')")


def _add(result: Result, path: str, n: int, problems: list[str]) -> None:
    result.values += n
    result.runs += 1
    result.problems += problems
    result.paths.add(path)


def _check(result: Result, conn: Any, expected: Any, changes: Any, tables: dict[str, pa.Table],
           label: str, workload: Workload, origins: set[int]) -> None:
    n, problems = compare_changes(expected, decoded_changes(changes), label)
    k, more = compare_messages(expected, _messages(changes.messages), label, ordered=True)
    o, most = compare_transactions(changes.transactions, expected, origins, label)
    m, rest = compare_final(conn, tables, changes.truncates, label, expected, skip=raw_text_columns(changes),
                            publication=workload.publication)
    _add(result, "decode()", n + k + o + m, problems + more + most + rest)
    result.problems += types_adapter.check(changes.tables, conn, "binary" in label, label)
    result.problems += consumers_adapter.check(changes.tables, label)


def _check_filtered(result: Result, capture: pa.Table, expected: Any, label: str, origins: set[int]) -> None:
    """The column-list and row-filter publication's capture, per change (its final rows are
    a filtered projection of the table's: the per-change comparison covers them)."""
    try:
        changes = pgoutput_arrow.decode(capture)
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label} decode(): {type(e).__name__}: {e}")
        return
    n, problems = compare_changes(expected, decoded_changes(changes), f"{label} decode()")
    # Its slot was made after the tables, and their markers: those are left out.
    marked = dataclasses.replace(expected, messages=[m for m in expected.messages if m.prefix != MARKER])
    k, more = compare_messages(marked, [m for m in _messages(changes.messages) if m[1] != MARKER],
                               f"{label} decode()")
    _add(result, "filtered publication", n + k, problems + more)


def _messages(table: pa.Table) -> list[tuple[bool, str, bytes, int | None]]:
    rows = table.select(["transactional", "prefix", "content", "_xid"]).to_pylist() if table.num_rows else []
    return [(r["transactional"], r["prefix"], bytes(r["content"]), r["_xid"]) for r in rows]


def origins_sent(capture: pa.Table, origins: set[int]) -> set[int]:
    """The transactions of ``origins`` (replayed under an origin, by test_decoding) whose origin
    the server's pgoutput stream carries: an Origin message (kind ``O``) among the capture's
    rows of the transaction. PostgreSQL 15 and 18 send none for a transaction streamed before
    its commit whose first streamed change is a transactional logical message (its stream
    reads ``S M ... E c``; one of inserts reads ``S O R I ...``): the decoder cannot report
    an origin the stream does not hold."""
    if not origins or not capture.num_rows:
        return set()
    is_origin = pc.equal(pc.binary_slice(capture.column("data"), 0, 1), b"O")
    return origins & set(capture.column("xid").filter(is_origin).to_pylist())


def compare_transactions(transactions: pa.Table, expected: Any, origins: set[int],
                         label: str) -> tuple[int, list[str]]:
    """Each committed transaction's origin as pgoutput sent it (``transactions.origin``)
    against PostgreSQL's (the xids test_decoding's ``only-local`` left out)."""
    problems = []
    rows = transactions.select(["xid", "origin", "outcome"]).to_pylist() if transactions.num_rows else []
    seen = set()
    changed = {c.xid for c in expected if c.xid is not None}
    for r in rows:
        if r["outcome"] not in ("committed", "commit") or r["xid"] not in changed:
            continue  # only transactions with a change say whether they are local
        seen.add(r["xid"])
        want = "torture_origin" if r["xid"] in origins else None
        if r["origin"] != want:
            problems.append(f"{label}: transaction {r['xid']} has origin {r['origin']!r}, PostgreSQL's is {want!r}")
    missing = {x for x in origins if x in {c.xid for c in expected}} - seen
    if missing:
        problems.append(f"{label}: transactions {sorted(missing)[:5]} replayed under an origin are missing "
                        "from transactions")
    return len(rows), problems[:10]


def _check_paths(result: Result, conn: Any, expected: Any, capture: pa.Table, label: str,
                 workload: Workload, origins: set[int]) -> None:
    seed = workload.seed
    origins = origins_sent(capture, origins)
    try:
        changes = pgoutput_arrow.decode(capture)
    except Exception as e:  # noqa: BLE001  (any failure of a path is a finding)
        result.problems.append(f"{label} decode(): {type(e).__name__}: {e}")
        return
    _check(result, conn, expected, changes, changes.tables, f"{label} decode()", workload, origins)
    # The capture's rows shuffled (as a capture read back through Spark may be), decoded in
    # any order: whole transactions rebuilt in commit order.
    alabel = f"{label} decode(any_order=True) of the rows shuffled"
    try:
        shuffled = capture.take(random.Random(seed).sample(range(capture.num_rows), capture.num_rows))
        anyway = pgoutput_arrow.decode(shuffled, any_order=True)
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{alabel}: {type(e).__name__}: {e}")
    else:
        n, problems = compare_changes(expected, decoded_changes(anyway), alabel)
        k, more = compare_messages(expected, _messages(anyway.messages), alabel, ordered=True)
        _add(result, "decode(any_order)", n + k, problems + more)
    batch_size, memory = 2 + seed % 6, 500 + (seed * 7919) % 20000
    dlabel = f"{label} Decoder(batch_size={batch_size}, memory_limit={memory})"
    try:
        dec = pgoutput_arrow.Decoder(batch_size=batch_size, memory_limit=memory)
        outputs: list[pgoutput_arrow.Output] = []
        for lsn, data in zip(capture.column("lsn").to_pylist(), capture.column("data").to_pylist()):
            dec.feed(data, lsn)
            outputs.extend(dec.take())
        rest = dec.finish()
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{dlabel}: {type(e).__name__}: {e}")
        return
    truncates = [o.batch for o in outputs if o.kind == "truncates"]
    all_trunc = pa.concat_tables([pa.Table.from_batches(truncates, rest.truncates.schema), rest.truncates]) \
        if truncates else rest.truncates
    # Every batch as it came out (each of one table version), for the per-change comparison.
    batches: dict[str, list[Any]] = {}
    for o in outputs:
        if o.kind == "table" and o.table is not None:
            batches.setdefault(o.table, []).append(o.batch)
    for name, versions in rest.table_versions.items():
        batches.setdefault(name, []).extend(versions)
    n, problems = compare_changes(expected, decoded_from(batches, all_trunc), dlabel)
    msgs = [o.batch for o in outputs if o.kind == "messages"]
    msg_table = pa.concat_tables([*(pa.Table.from_batches([b]) for b in msgs), rest.messages]) \
        if msgs else rest.messages
    k, more = compare_messages(expected, _messages(msg_table), dlabel, ordered=True)
    tables = unify_outputs(outputs, rest)
    m, most = compare_final(conn, tables, all_trunc, dlabel, expected,
                            skip=raw_text_columns(changes), publication=workload.publication)
    _add(result, "Decoder", n + k + m, problems + more + most)
    result.problems += types_adapter.check(tables, conn, "binary" in label, dlabel)


def _check_live(result: Result, pg: PgServer, db: str, conn: Any, expected: Any, workload: Workload,
                restart: bool = False) -> None:
    """The live stream(), per change and final rows; with ``restart``, stopped after a
    random number of items and started again with the same arguments: acknowledged items
    never come again, unacknowledged ones do, so every change is kept once."""
    binary = workload.seed % 2 == 0
    label = f"PG{pg.version} live stream(binary={binary})" + (" restarted" if restart else "")
    with conn.cursor() as cur:
        cur.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8")
        end = cur.fetchone()[0]
    got: dict[str, list[pa.RecordBatch]] = {}
    truncates: list[pa.RecordBatch] = []
    messages: list[pa.RecordBatch] = []
    import random
    # A consumer keeps a decoder flush whole (groups(): the batches of one flush share their
    # acknowledgement): stopped between two groups, or within one before acknowledging it,
    # it gets that group again after the restart, and nothing it acknowledged.
    stop_after = random.Random(workload.seed).randint(1, 3) if restart else None
    starts = 0
    try:
        while True:
            starts += 1
            taken = 0
            interrupted = False
            with pgoutput_arrow.stream(pg.dsn_for(db), slot=_slot(db, "live"), publication="torture",
                                       messages=True, binary=binary, stop_at_lsn=end, stop_after=120,
                                       flush_messages=300 if restart else 200_000) as s:
                for group, ack in s.groups():
                    taken += 1
                    if stop_after is not None and starts == 1 and taken >= stop_after:
                        interrupted = True
                        break
                    for item in group:
                        if item.kind == "table" and item.table:
                            got.setdefault(item.table, []).append(item.batch)
                        elif item.kind == "truncates":
                            truncates.append(item.batch)
                        elif item.kind == "messages":
                            messages.append(item.batch)
                    s.ack(ack)
            if stop_after is not None and starts == 1 and not interrupted:
                # The stream ended sooner (a small workload makes few flushes): checked as an
                # uninterrupted run, which it was; said, so that the restart is not counted.
                print(f"torture: {label}: the stream ended after {taken} groups, before the stop at "
                      f"{stop_after}: no restart in this run", file=sys.stderr)
                label = label.removesuffix(" restarted")
            if not interrupted:
                break
            # Column ids (pg.column_id) are one decoder's own: a consumer that keeps what a
            # run gave matches it by name to what the next run gives (as the stream itself
            # does across a reconnection).
            got = {name: [_without_column_ids(b) for b in batches] for name, batches in got.items()}
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label}: {type(e).__name__}: {e}")
        return
    try:
        tables = unify_batches(got)
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label}: unify_schemas/conform of its batches: {type(e).__name__}: {e}")
        return
    if starts > 1:
        tables = _renamed_across_the_restart(conn, tables, workload.renames)
    empty = pgoutput_arrow.decode([]).truncates
    trunc = pa.concat_tables([pa.Table.from_batches(truncates), ]) if truncates else empty
    n, problems = compare_changes(expected, decoded_from(got, trunc), label)
    msg_table = pa.concat_tables([pa.Table.from_batches([b]) for b in messages]) if messages else None
    k, more = compare_messages(expected, _messages(msg_table) if msg_table is not None else [], label,
                               ordered=True)
    m, most = compare_final(conn, tables, trunc, label, expected, publication=workload.publication,
                            skip=unified_raw_columns(tables) if binary else set())
    _add(result, "live" + (" restarted" if starts > 1 else ""), n + k + m, problems + more + most)
    result.problems += types_adapter.check(tables, conn, binary, label)


def _renamed_across_the_restart(conn: Any, tables: dict[str, pa.Table],
                                renames: dict[str, dict[str, str]]) -> dict[str, pa.Table]:
    """The final state's view of a column renamed after the first run: that run's rows hold
    its values under the name it had then (merged by name, the documented limit of a
    consumer that keeps what each run gave: two columns), the next run's under the new name.
    Each row's value is taken from the old column where the new one is null; a name that is
    a column of the table in PostgreSQL now (dropped and added again) is left alone."""
    out = dict(tables)
    for name, table in tables.items():
        names = renames_of(name, renames)
        pairs = [(old, new) for old, new in names.items() if old in table.column_names and new in table.column_names]
        if not pairs:
            continue
        current = set(server_columns(conn, name))
        for old, new in pairs:
            if old in current:
                continue
            field = table.schema.field(new)
            try:
                merged = pc.coalesce(table.column(new), table.column(old).cast(field.type))
            except pa.ArrowException:
                continue  # retyped as well: left as two columns, compared as they are
            table = table.set_column(table.column_names.index(new), field, merged)
        out[name] = table
    return out


def _without_column_ids(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with no column ids (``pg.column_id``) in its fields' metadata."""
    return pa.RecordBatch.from_arrays(batch.columns, schema=without_column_ids(batch.schema))


def _check_spark(result: Result, spark: Any, conn: Any, expected: Any, captures: dict[str, pa.Table],
                 workload: Workload) -> None:
    seed = workload.seed
    from pyspark.sql import functions as F

    from pgoutput_arrow import spark as sp

    import tempfile

    # Protocol 1, or (every other seed) 2 with its streamed transactions: both text.
    name = "v2-stream" if seed % 2 and "v2-stream" in captures else next(iter(captures))
    capture = captures[name]
    df = spark.createDataFrame(capture.to_pandas()).select(
        F.col("lsn").cast("long").alias("lsn"), F.col("xid").cast("long").alias("xid"), F.col("data"))
    with tempfile.TemporaryDirectory(prefix="torture-spark-") as files:
        # As Parquet files of small row groups, in a few files: the tasks read them in pieces
        # themselves (spark/_pieces.py), a transaction cut across pieces.
        rows = len(capture)
        for i, start in enumerate(range(0, rows, max(1, rows // 3 + 1))):
            pq.write_table(capture.slice(start, rows // 3 + 1), f"{files}/part-{i}.parquet",
                           row_group_size=max(1, rows // 25))
        # In order, in contiguous partitions (transactions cut across them are decoded in parts),
        # shuffled (the parts overlap: decoded whole after a shuffle by xid), and read by the tasks.
        ways = (("in order", df, None), ("shuffled", df.repartition(3).sortWithinPartitions(F.rand(seed)), None),
                ("from Parquet files", spark.read.parquet(files), "4k"))
        # The session's settings as a user's (the values compared are instants).
        drawn = spark_settings(seed)
        for how, ordered, split_bytes in ways:
            label = f"spark.decode {name} {how} ({', '.join(f'{k}={v}' for k, v in drawn.items())})"
            settings = {**drawn, **({"spark.sql.files.maxPartitionBytes": split_bytes} if split_bytes else {})}
            before = {k: spark.conf.get(k) for k in settings}
            try:
                for k, v in settings.items():
                    spark.conf.set(k, v)
                decoded = sp.decode(ordered, num_partitions=3, with_truncates=True)
                trunc = decoded.pop(sp.TRUNCATES).toArrow()
                tables = {n: d.toArrow() for n, d in decoded.items()}
            except Exception as e:  # noqa: BLE001
                result.problems.append(f"{label}: {type(e).__name__}: {e}")
                continue
            finally:
                for k, v in before.items():
                    spark.conf.set(k, v)
            # Every column compared, in Spark's types (interval a struct, time in ns, uuid text):
            # values.py reads them as they are.
            truncs = [(", ".join(r["relations"]), r["_commit_lsn"], r["_seq"], r.get("_xid"))
                      for r in trunc.to_pylist()]
            n, problems = compare_changes(expected, typed_changes(tables, truncs), label, renames=workload.renames)
            _add(result, "spark.decode", n, problems)


def _check_cli(result: Result, conn: Any, expected: Any, captures: dict[str, pa.Table], workload: Workload,
               version: int, delta: bool) -> None:
    """pgoutput-dump on a capture file: jsonl and Parquet per change, and with ``delta`` the
    Delta change log (``--format delta --change-log``) per change and its replica's rows."""
    import tempfile

    name = "v2-stream" if workload.seed % 2 else "v3-twophase-binary"
    capture = captures[name]
    label = f"PG{version} {name} pgoutput-dump"
    renames = workload.renames
    with tempfile.TemporaryDirectory(prefix="torture-cli-") as tmp:
        root = Path(tmp)
        src = root / "capture.parquet"
        pq.write_table(capture, src)
        try:
            out = run_dump([str(src), "--format", "jsonl"]).stdout.decode()
            places: list[tuple[bool, str, bytes, int]] = []
            changes, msgs = jsonl_changes(out, binary="binary" in name, places=places)
            n, problems = compare_changes(expected, changes, f"{label} --format jsonl")
            k, more = compare_messages(expected, msgs, f"{label} --format jsonl", ordered=True)
            p, placed = compare_message_places(expected, places, f"{label} --format jsonl")
            _add(result, "cli jsonl", n + k + p, problems + more + placed)
            _check_cli_limit(result, src, out.splitlines(), random.Random(workload.seed), label)
        except Exception as e:  # noqa: BLE001
            result.problems.append(f"{label} --format jsonl: {type(e).__name__}: {e} (capture kept: "
                                   f"{_keep(src, workload, version)})")
        try:
            run_dump([str(src), "--format", "parquet", "--output", str(root / "pq")])
            tables, truncs = parquet_output(root / "pq")
            n, problems = compare_changes(expected, typed_changes(tables, truncs, binary="binary" in name),
                                          f"{label} --format parquet",
                                          renames=renames)
            _add(result, "cli parquet", n, problems)
        except Exception as e:  # noqa: BLE001
            result.problems.append(f"{label} --format parquet: {type(e).__name__}: {e} (capture kept: "
                                   f"{_keep(src, workload, version)})")
        if not delta:
            return
        try:
            run_dump([str(src), "--format", "delta", "--change-log-only", "--output", str(root / "lake")])
            tables, truncs = delta_change_log(root / "lake")
            n, problems = compare_changes(expected, typed_changes(tables, truncs, before_json=True, binary="binary" in name),
                                          f"{label} --format delta --change-log", renames=renames)
            _add(result, "delta change log", n, problems)
        except Exception as e:  # noqa: BLE001
            result.problems.append(f"{label} --format delta --change-log-only: {type(e).__name__}: {e} (capture "
                                   f"kept: {_keep(src, workload, version)})")


def _check_cli_limit(result: Result, src: Path, full: list[str], rnd: random.Random, label: str) -> None:
    """``--format jsonl --limit N`` at a random N: the first N lines of the whole output,
    which the checks before compared with test_decoding (and a TRUNCATE of several tables,
    one line each, kept whole when the cut falls inside it)."""
    import json

    if not full:
        return
    n = rnd.randint(1, len(full))
    label = f"{label} --format jsonl --limit {n}"
    try:
        got = run_dump([str(src), "--format", "jsonl", "--limit", str(n)]).stdout.decode().splitlines()
    except Exception as e:  # noqa: BLE001
        result.problems.append(f"{label}: {type(e).__name__}: {e}")
        return
    beyond = [json.loads(line) for line in got[n:]]
    last = json.loads(got[n - 1]) if len(got) >= n else None
    whole_truncate = last is not None and all(
        o["op"] == last["op"] == "truncate" and o["lsn"] == last["lsn"] for o in beyond)
    problems = []
    if got != full[:len(got)] or len(got) < n or not (len(got) == n or whole_truncate):
        k = next((k for k, (a, b) in enumerate(zip(got, full)) if a != b), min(len(got), n))
        problems.append(f"{label}: {len(got)} lines, the first differing from the whole output's at "
                        f"#{k}: {got[k][:200] if k < len(got) else None!r}")
    _add(result, "cli jsonl --limit", len(got), problems)


def _keep(capture: Path, workload: Workload, version: int) -> Path:
    """A capture a CLI run failed on, kept for reproducing it by hand."""
    import shutil

    kept = Path(f"/tmp/torture-{workload.seed}-pg{version}-capture.parquet")
    shutil.copyfile(capture, kept)
    return kept


def _check_cli_live(result: Result, pg: PgServer, db: str, conn: Any, expected: Any, workload: Workload) -> None:
    """``pgoutput-dump --dsn ... --format parquet`` or ``--format delta --change-log-only``
    (by seed), killed with SIGKILL or SIGINT at a random moment and started
    again with the same command until it ends on its own (``--idle-timeout``): the output
    holds every change once, compared per change with test_decoding."""
    import random
    import signal
    import subprocess
    import tempfile

    rnd = random.Random(workload.seed * 31337)
    fmt = "parquet" if (workload.seed // 2) % 2 else "delta"
    how = rnd.choice([signal.SIGKILL, signal.SIGINT])
    label = f"PG{pg.version} pgoutput-dump --dsn --format {fmt} restarted after {how.name}"
    with tempfile.TemporaryDirectory(prefix="torture-live-") as tmp:
        out = Path(tmp) / "out"
        cmd = [DUMP, "--dsn", pg.dsn_for(db), "--slot", _slot(db, "cli"), "--publication", "torture", "--messages",
               "--format", fmt, "--output", str(out), "--idle-timeout", "3", "--commit-interval", "0.05"]
        # --change-log-only: a MERGE of a replica holding ±infinity dates panics in delta-rs
        # (reported; the Delta part of issue 21).
        cmd += ["--change-log-only"] if fmt == "delta" else []
        cmd += ["--binary"] if rnd.random() < 0.5 else []
        kills = 0
        try:
            for attempt in range(6):
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                if attempt == 0:
                    try:
                        p.wait(timeout=rnd.uniform(0.5, 4.0))
                    except subprocess.TimeoutExpired:
                        p.send_signal(how)
                        kills += 1
                        p.wait(timeout=60)
                        p.stderr.close()  # type: ignore[union-attr]
                        continue
                _, err = p.communicate(timeout=300)
                if p.returncode != 0:
                    raise RuntimeError(f"exit {p.returncode} (after {kills} stops): {err.decode(errors='replace')[-3000:]}")
                break
            if fmt == "parquet":
                tables, truncs = parquet_output(out)
            else:
                tables, truncs = delta_change_log(out)
            n, problems = compare_changes(expected, typed_changes(tables, truncs, before_json=fmt == "delta",
                                                                  binary="--binary" in cmd),
                                          f"{label} ({kills} stops)", renames=workload.renames)
            _add(result, f"cli live {fmt} restarted", n, problems)
        except Exception as e:  # noqa: BLE001
            result.problems.append(f"{label}: {type(e).__name__}: {e}"[:3000])


def _about(problem: str) -> str:
    """What a problem is about, for :func:`shrink`: the path and option set it names (the text
    before its first ": ", e.g. ``PG15 v2-stream pgoutput-dump --format parquet``)."""
    return problem.split(": ", 1)[0]


def shrink(pg: PgServer, workload: Workload, problems: list[str], budget: float = 120.0, *,
           heavy: Heavy | None = None) -> Workload:
    """Drops steps (halves, then quarters, ... then one at a time) while the workload still
    fails on a path ``problems`` name, within ``budget`` seconds; CREATE TABLE steps are kept.
    Any failure would not do: fewer steps also make fewer of the shapes a seed must show
    (a capture's stream messages), a problem of its own that no longer reproduces the first.
    For the same reason a shape problem (:func:`shapes.is_shape_problem`) is not shrunk: what
    the seed expects is counted over all of its steps. Only shape problems: ``workload`` as it is."""
    deadline = time.monotonic() + budget
    steps = list(workload.steps)
    about = {_about(p) for p in problems if not shapes.is_shape_problem(p)}
    if not about:
        return workload

    def fails(candidate: list[Step]) -> bool:
        try:
            found = run_workload(pg, dataclasses.replace(workload, steps=candidate), heavy=heavy).problems
        except Exception:  # noqa: BLE001  (a candidate that cannot run, e.g. a missing gid)
            return False
        return any(_about(p) in about for p in found)

    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i, removed = 0, False
        while i < len(steps) and time.monotonic() < deadline:
            part = steps[i:i + chunk]
            if any(s.kind == "ddl" and s.sql[0].startswith("CREATE TABLE") for s in part):
                i += chunk
                continue
            candidate = steps[:i] + steps[i + chunk:]
            if fails(candidate):
                steps, removed = candidate, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    return dataclasses.replace(workload, steps=steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="run this one seed")
    ap.add_argument("--start", type=int, default=1, help="first seed (default 1)")
    ap.add_argument("--count", type=int, default=10, help="seeds to run (default 10)")
    ap.add_argument("--duration", type=float, default=0, help="run seeds until this many seconds passed")
    ap.add_argument("--transactions", type=int, default=40, help="transactions per workload (default 40)")
    ap.add_argument("--versions", default="18,15", help="PostgreSQL versions (default 18,15)")
    ap.add_argument("--live-every", type=int, default=3, help="also stream live every Nth seed (0: never)")
    ap.add_argument("--spark-every", type=int, default=5, help="also decode on Spark every Nth seed (0: never)")
    ap.add_argument("--cli-every", type=int, default=2,
                    help="also run pgoutput-dump --format jsonl and parquet every Nth seed (0: never)")
    ap.add_argument("--delta-every", type=int, default=4,
                    help="also run pgoutput-dump --format delta --change-log every Nth seed (0: never)")
    ap.add_argument("--restart-every", type=int, default=2,
                    help="of the live seeds, stop and restart the stream every Nth (0: never)")
    ap.add_argument("--no-shrink", action="store_true")
    args = ap.parse_args(argv)

    seeds: Any
    if args.seed is not None:
        seeds = [args.seed]
    elif args.duration:
        seeds = iter(range(args.start, 10**9))
    else:
        seeds = range(args.start, args.start + args.count)
    versions = [int(v) for v in args.versions.split(",")]
    servers = [PgServer(version=v) for v in versions]
    for s in servers:
        s.start()
    exclude = {s.version: missing_types(s) for s in servers}
    paths_seen: set[str] = set()
    spark = None
    started = time.monotonic()
    totals = {"seeds": 0, "runs": 0, "statements": 0, "values": 0}
    failures: list[tuple[int, int, list[str]]] = []
    try:
        for seed in seeds:
            if args.duration and time.monotonic() - started > args.duration:
                break
            use_spark = args.spark_every and seed % args.spark_every == 0
            if use_spark and spark is None:
                from pyspark.sql import SparkSession

                # The workers must run this interpreter (the .venv with the built decoder).
                os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
                spark = (SparkSession.builder.master("local[2]").appName("pgoutput-torture")
                         .config("spark.sql.execution.arrow.pyspark.validateSchema.enabled", "true")
                         .config("spark.sql.session.timeZone", "UTC")
                         .config("spark.sql.shuffle.partitions", "3").config("spark.ui.enabled", "false")
                         .config("spark.ui.showConsoleProgress", "false")
                         .getOrCreate())
            for pg in servers:
                live = bool(args.live_every and seed % args.live_every == 0)
                heavy = Heavy(live=live, spark=spark if use_spark and pg is servers[0] else None,
                              cli=bool(args.cli_every and seed % args.cli_every == 0),
                              delta=bool(args.delta_every and seed % args.delta_every == 0),
                              restart=live and bool(args.restart_every and (seed // max(1, args.live_every))
                                                    % args.restart_every == 0))
                # The seed's server settings (settings.py's draw/apply, another part of issue 21)
                # are applied here, before the workload; the oracle reads in ISO settings.
                workload = generate(seed, args.transactions, exclude=exclude[pg.version], filtered=True)
                r = run_workload(pg, workload, heavy=heavy)
                paths_seen.update(r.paths)
                totals["runs"] += r.runs
                totals["statements"] += r.statements
                totals["values"] += r.values
                status = "ok" if not r.problems else f"{len(r.problems)} MISMATCHES"
                print(f"seed {seed} PG{pg.version}: {r.statements} statements, {r.runs} option sets × paths, "
                      f"{r.values} values compared: {status}", flush=True)
                if r.problems:
                    failures.append((seed, pg.version, r.problems))
                    for p in r.problems[:10]:
                        print("   ", p, flush=True)
                    print(f"    reproduce: make torture SEED={seed}", flush=True)
                    if not args.no_shrink:
                        small = shrink(pg, workload, r.problems, heavy=heavy)
                        path = Path(f"/tmp/torture-{seed}-pg{pg.version}.sql")
                        path.write_text(small.script() + "\n")
                        print(f"    shrunk to {len(small.steps)} of {len(workload.steps)} steps: {path}"
                              if small is not workload else f"    not shrunk (only shape problems): {path}", flush=True)
            totals["seeds"] += 1
    finally:
        if spark is not None:
            spark.stop()
        for s in servers:
            s.stop()
    mins = (time.monotonic() - started) / 60
    print(f"\n{totals['seeds']} seeds × PostgreSQL {args.versions} in {mins:.1f} min: {totals['runs']} "
          f"option sets × paths, {totals['statements']} statements, {totals['values']} values compared, "
          f"{sum(len(p) for _, _, p in failures)} mismatches in {len(failures)} seed runs; paths: "
          f"{', '.join(sorted(paths_seen))}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
