"""Any history of a table and any value PostgreSQL accepts decode with the default options
(issue 13's two reproductions and the histories around them), on PostgreSQL 18 and 15,
text and binary, whole and streamed transactions; the result, replayed, equals PostgreSQL's
own final rows.

Histories: a column added then dropped; added, another retyped, then dropped; renamed (in
the middle and at the end); dropped and re-added under its name with another type; replica
identity changed. Values: time 24:00:00, NaN and Infinity in numeric(p,s), a timestamp after
294247 AD, an array with a lower bound other than 1, in inserts, updates and deletes.
"""

from __future__ import annotations

import types
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import pgoutput_arrow
from pg_harness import PgServer
from threads import CheckedThread
from replay import data_columns, replay, server_rows, compare_state

HISTORY_SQL = [
    # Issue 13, reproduction 1.
    "CREATE TABLE h1 (id int PRIMARY KEY, a int)",
    "INSERT INTO h1 VALUES (1, 1)",
    "ALTER TABLE h1 ADD COLUMN b text",
    "INSERT INTO h1 VALUES (2, 2, 'x')",
    "ALTER TABLE h1 DROP COLUMN b",
    "INSERT INTO h1 VALUES (3, 3)",
    # Its second shape: add, retype another, insert, drop.
    "CREATE TABLE h2 (id int PRIMARY KEY, a int)",
    "INSERT INTO h2 VALUES (1, 1)",
    "ALTER TABLE h2 ADD COLUMN b text",
    "ALTER TABLE h2 ALTER COLUMN a TYPE bigint",
    "INSERT INTO h2 VALUES (2, 5000000000, 'y')",
    "ALTER TABLE h2 DROP COLUMN b",
    "INSERT INTO h2 VALUES (3, 3)",
    "UPDATE h2 SET a = a + 1",
    # Renames: before a kept column, and at the end.
    "CREATE TABLE h3 (id int PRIMARY KEY, a int, z text)",
    "INSERT INTO h3 VALUES (1, 10, 'p')",
    "ALTER TABLE h3 RENAME COLUMN a TO a_renamed",
    "INSERT INTO h3 VALUES (2, 20, 'q')",
    "UPDATE h3 SET a_renamed = a_renamed + 1 WHERE id = 1",
    "ALTER TABLE h3 RENAME COLUMN z TO z2",
    "INSERT INTO h3 VALUES (3, 30, 'r')",
    # A column dropped and re-added under its name with another type, then retyped again.
    "CREATE TABLE h4 (id int PRIMARY KEY, b text)",
    "INSERT INTO h4 VALUES (1, 'x')",
    "ALTER TABLE h4 DROP COLUMN b",
    "ALTER TABLE h4 ADD COLUMN b int",
    "INSERT INTO h4 VALUES (2, 5)",
    "ALTER TABLE h4 ALTER COLUMN b TYPE int[] USING ARRAY[b]",
    "INSERT INTO h4 VALUES (3, '{7,8}')",
    # DDL rewrites rows without publishing them (row 1's new b is NULL, row 2's became {5}):
    # an update publishes what the rows hold now.
    "UPDATE h4 SET b = b",
    # Replica identity changes.
    "CREATE TABLE h5 (id int PRIMARY KEY, v text)",
    "INSERT INTO h5 VALUES (1, 'a'), (2, 'b')",
    "UPDATE h5 SET v = 'a2' WHERE id = 1",
    "ALTER TABLE h5 REPLICA IDENTITY FULL",
    "UPDATE h5 SET v = 'b2' WHERE id = 2",
    "DELETE FROM h5 WHERE id = 1",
    # Torture seed 558: two columns renamed, then a column before them dropped and re-added
    # under its name with another type: the renamed ones stay themselves (an unchanged TOAST
    # value of a renamed column kept), the re-added one is a new column.
    "CREATE TABLE h6 (id int PRIMARY KEY, c int, t text, bb bytea)",
    "INSERT INTO h6 VALUES (1, 1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g), '\\x00ff')",
    "INSERT INTO h6 VALUES (2, 2, 'short', NULL)",
    "ALTER TABLE h6 RENAME COLUMN t TO t_r",
    "ALTER TABLE h6 RENAME COLUMN bb TO bb_r",
    "ALTER TABLE h6 DROP COLUMN c",
    "ALTER TABLE h6 ADD COLUMN c text",
    "UPDATE h6 SET id = id",
    "UPDATE h6 SET c = 'new' WHERE id = 2",
    # Torture seed 2019: a timestamp[] column dropped and re-added under its name as date[];
    # the unified column is timestamp[] (a date is its midnight), in every way of decoding,
    # the live stream's as it goes included.
    "CREATE TABLE h7 (id int PRIMARY KEY, c timestamp[])",
    "INSERT INTO h7 VALUES (1, '{\"2001-02-03 04:05:06\"}')",
    "ALTER TABLE h7 DROP COLUMN c",
    "ALTER TABLE h7 ADD COLUMN c date[]",
    "INSERT INTO h7 VALUES (2, '{2000-02-29,NULL}')",
    "UPDATE h7 SET c = '{2091-08-25}' WHERE id = 1",
    # Issue 13, reproduction 2: values no Arrow value of the column's type holds.
    "CREATE TABLE sv (id int PRIMARY KEY, t time, n numeric(5,2), ts timestamp, arr int[], ok text)",
    "INSERT INTO sv VALUES (1, '24:00:00', 'NaN', '294276-01-01 00:00:00', '[0:1]={1,2}', 'a')",
    "INSERT INTO sv VALUES (2, '12:00', 'NaN', '2024-01-01', '{3}', 'b')",
    "INSERT INTO sv VALUES (3, '13:00', 1.5, '2024-01-02', '{4}', 'c')",
    "UPDATE sv SET t = '24:00:00', ok = 'c2' WHERE id = 3",
    "DELETE FROM sv WHERE id = 2",
]

#: Option sets of the captures: (name, pgoutput options, minimum server version).
OPTION_SETS = [
    ("v1-text", {"proto_version": "1"}, 15),
    ("v1-binary", {"proto_version": "1", "binary": "true"}, 15),
    ("v2-stream", {"proto_version": "2", "streaming": "on"}, 15),
    ("v4-parallel-binary", {"proto_version": "4", "streaming": "parallel", "binary": "true"}, 16),
]

SPECIAL_COLUMNS = ("t", "n", "ts", "arr")


@pytest.fixture(scope="module", params=[18, 15], ids=["pg18", "pg15"])
def captures(request: pytest.FixtureRequest, pg18: PgServer, pg15: PgServer) -> tuple[PgServer, dict[str, Any]]:
    pg = pg18 if request.param == 18 else pg15
    pg.execute("CREATE SCHEMA IF NOT EXISTS hist")
    pg.execute("CREATE PUBLICATION hist_pub FOR TABLES IN SCHEMA hist")
    sets = [(n, o) for n, o, v in OPTION_SETS if pg.version >= v]
    for name, _ in sets:
        pg.create_slot(f"hist_{name.replace('-', '_')}")
    with pg.connect() as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET search_path = hist")
            for sql in HISTORY_SQL:
                cur.execute(sql)
    out = {}
    for name, options in sets:
        slot = f"hist_{name.replace('-', '_')}"
        rows = pg.get_binary_changes(slot, {**options, "publication_names": "hist_pub"})
        pg.drop_slot(slot)
        out[name] = pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                              "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
    return pg, out


def _check_against_server(pg: PgServer, tables: dict[str, pa.Table], truncates: pa.Table,
                          schema: str = "hist") -> None:
    changes = types.SimpleNamespace(tables=tables, truncates=truncates)
    # The primary key: under REPLICA IDENTITY FULL every column is flagged as key.
    keys = {**{f"{schema}.h{i}": ["id"] for i in range(1, 8)}, f"{schema}.sv": ["id"]}
    states = replay(changes, keys)  # type: ignore[arg-type]
    with pg.connect() as conn:
        for rel in ("h1", "h2", "h3", "h4", "h5", "h6", "h7"):
            name = f"{schema}.{rel}"
            table = tables[name]
            with conn.cursor() as cur:
                cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                            "AND attnum > 0 AND NOT attisdropped", (name,))
                server_cols = {r[0] for r in cur.fetchall()}
            missing = server_cols - set(data_columns(table))
            assert not missing, f"{name}: PostgreSQL has columns the output lacks: {missing}"
            compare_state(states[name], server_rows(conn, name, table), name)


def _check_date_widened(table: pa.Table) -> None:
    """h7's c: timestamp[] dropped, date[] added under its name. One column of the type
    that holds both (a date is its midnight), each row's value in it."""
    import datetime as dt
    assert table.schema.field("c").type == pa.list_(pa.timestamp("us")), table.schema.field("c")
    rows = [(r["id"], r["_op"], r["c"]) for r in table.to_pylist()]
    assert rows == [(1, "insert", [dt.datetime(2001, 2, 3, 4, 5, 6)]),
                    (2, "insert", [dt.datetime(2000, 2, 29), None]),
                    (1, "update", [dt.datetime(2091, 8, 25)])], rows


def _check_specials(pg: PgServer, table: pa.Table, schema: str = "hist") -> None:
    """The last change of each id of sv: every value PostgreSQL has is in its column or,
    when the column cannot hold it, exactly PostgreSQL's text in _special."""
    last: dict[int, dict[str, Any]] = {}
    for row in table.to_pylist():
        last[row["id"]] = row
    with pg.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, t::text, n::text, ts::text, arr::text FROM {schema}.sv ORDER BY id")
        server = {r[0]: dict(zip(SPECIAL_COLUMNS, r[1:])) for r in cur.fetchall()}
    assert sorted(k for k, r in last.items() if r["_op"] != "delete") == sorted(server)
    expected_special = {1: {"t": "24:00:00", "n": "NaN", "ts": "294276-01-01 00:00:00", "arr": "[0:1]={1,2}"},
                        3: {"t": "24:00:00"}}
    if pa.types.is_string(table.schema.field("t").type):
        # time as PostgreSQL's text (the default) holds 24:00:00 itself.
        expected_special = {1: {k: v for k, v in expected_special[1].items() if k != "t"}, 3: {}}
    for id_, texts in server.items():
        special = dict(last[id_]["_special"] or [])
        assert special == expected_special[id_], (id_, special)
        for col, text in special.items():
            assert texts[col] == text and last[id_][col] is None
        for col in SPECIAL_COLUMNS:
            if col not in special:
                assert last[id_][col] is not None, (id_, col)
        if pa.types.is_string(table.schema.field("t").type):
            assert last[id_]["t"] == texts["t"], (id_, last[id_]["t"])


def test_decode_with_defaults(captures: tuple[PgServer, dict[str, Any]]) -> None:
    pg, caps = captures
    for name, capture in caps.items():
        changes = pgoutput_arrow.decode(capture)
        _check_against_server(pg, changes.tables, changes.truncates)
        _check_specials(pg, changes.tables["hist.sv"])
        h3 = changes.tables["hist.h3"].schema.names
        assert "a" not in h3 and "z" not in h3 and {"a_renamed", "z2"} <= set(h3), (name, h3)
        b = changes.tables["hist.h4"].schema.field("b")
        assert b.type == pa.string() and b.metadata[b"pg.unified"] == b"text"
        assert changes.tables["hist.h4"].column("b").to_pylist()[:3] == ["x", "5", "{7,8}"]
        _check_date_widened(changes.tables["hist.h7"])


def test_decoder_small_batches_unified_by_the_caller(captures: tuple[PgServer, dict[str, Any]]) -> None:
    """Decoder fed message by message with tiny batches and memory: its batches, brought to
    one schema per table with unify_schemas/conform (what a sink does), replay to the same
    rows as PostgreSQL's."""
    pg, caps = captures
    for _, capture in caps.items():
        dec = pgoutput_arrow.Decoder(batch_size=2, memory_limit=2000)
        outputs: list[pgoutput_arrow.Output] = []
        for lsn, data in zip(capture.column("lsn").to_pylist(), capture.column("data").to_pylist()):
            dec.feed(data, lsn)
            outputs.extend(dec.take())
        rest = dec.finish()
        by_table: dict[str, list[pa.RecordBatch]] = defaultdict(list)
        truncates = [o.batch for o in outputs if o.kind == "truncates"]
        for o in outputs:
            if o.kind == "table" and o.table is not None:
                by_table[o.table].append(o.batch)
        tables = {}
        for name in set(by_table) | set(rest.tables):
            batches = by_table[name] + (rest.tables[name].to_batches() if name in rest.tables else [])
            # Each version's schema once, in the order the versions were last in force.
            schemas: dict[str, pa.Schema] = {}
            for b in batches:
                key = b.schema.metadata[b"pg.version"].decode()
                schemas.pop(key, None)
                schemas[key] = b.schema
            unified = pgoutput_arrow.unify_schemas(list(schemas.values()))
            tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, unified) for b in batches])
        all_truncates = pa.concat_tables([pa.Table.from_batches(truncates, rest.truncates.schema), rest.truncates]) \
            if truncates else rest.truncates
        _check_against_server(pg, tables, all_truncates)
        _check_specials(pg, tables["hist.sv"])
        _check_date_widened(tables["hist.h7"])


def test_opt_in_policies_stay(captures: tuple[PgServer, dict[str, Any]]) -> None:
    _, caps = captures
    capture = caps["v1-text"]
    with pytest.raises(pgoutput_arrow.DecodeValueError, match="24:00:00"):
        pgoutput_arrow.decode(capture, special_values="error", time="time64")
    nulls = pgoutput_arrow.decode(capture, special_values="null").tables["hist.sv"]
    assert nulls.column("_special").null_count == nulls.num_rows
    # "text" makes the scalar columns utf8; an array with other bounds still stops it
    # (types/README.md): the reason "keep" is the default.
    with pytest.raises(pgoutput_arrow.DecodeValueError, match="lower bound"):
        pgoutput_arrow.decode(capture, special_values="text")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_live_stream_with_defaults(pg18: PgServer, binary: bool) -> None:
    """The live stream: every batch of a table under the unified schema of the versions seen
    so far (so they concatenate), replayed equal to PostgreSQL's rows; specials kept."""
    schema = f"histlive_{'b' if binary else 't'}"
    pg18.execute(f"CREATE SCHEMA {schema}")
    pg18.execute(f"CREATE PUBLICATION {schema} FOR TABLES IN SCHEMA {schema}")
    pg18.create_slot(schema)
    with pg18.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SET search_path = {schema}")
        for sql in HISTORY_SQL:
            cur.execute(sql)
    pg18.flush_wal()
    end = pg18.current_wal_lsn()
    got: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    with pgoutput_arrow.stream(pg18.dsn, slot=schema, publication=schema, binary=binary,
                               stop_at_lsn=end, stop_after=90) as s:
        for item in s:
            got[item.name].append(item.batch)
            s.ack(item.ack_lsn)
    tables = {}
    for name, batches in got.items():
        if name.startswith(schema + "."):
            last = batches[-1].schema
            # The schema only grows: each batch's columns are among the last one's, by
            # pg.column_id (a rename changes the name) or, for a column dropped and re-added
            # under its name (merged into one column), by name.
            last_ids = {f.metadata.get(b"pg.column_id") for f in last if f.metadata}
            for b in batches:
                for f in b.schema:
                    if f.metadata and b"pg.column_id" in f.metadata:
                        assert f.metadata[b"pg.column_id"] in last_ids or f.name in last.names, \
                            (name, f.name, b.schema.names, last.names)
            tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, last) for b in batches])
    empty = pgoutput_arrow.decode([]).truncates
    _check_against_server(pg18, tables, empty, schema)
    _check_specials(pg18, tables[f"{schema}.sv"], schema)
    assert "a" not in tables[f"{schema}.h3"].column_names
    _check_date_widened(tables[f"{schema}.h7"])


def test_cli_with_defaults(captures: tuple[PgServer, dict[str, Any]], tmp_path: Any) -> None:
    """pgoutput-dump on the histories' capture with the default options: exit 0 in every
    format; jsonl and pretty print PostgreSQL's text of a special value in its place."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow.parquet as pq

    dump = str(Path(sys.executable).parent / "pgoutput-dump")
    _, caps = captures
    for name, capture in caps.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(capture, path)
        out = subprocess.run([dump, str(path), "--format", "jsonl", "--table", "hist.sv"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        first = json.loads(out.stdout.splitlines()[0])
        assert (first["new"]["t"], first["new"]["n"], first["new"]["arr"]) == ("24:00:00", "NaN", "[0:1]={1,2}")
        assert first["new"]["ts"] == "294276-01-01 00:00:00"
        pretty = subprocess.run([dump, str(path), "--format", "pretty"], capture_output=True, text=True,
                                timeout=120)
        assert pretty.returncode == 0 and "24:00:00" in pretty.stdout, pretty.stderr
        parquet = subprocess.run([dump, str(path), "--format", "parquet", "--output", str(tmp_path / name)],
                                 capture_output=True, text=True, timeout=120)
        assert parquet.returncode == 0, parquet.stderr


def test_cli_parquet_directories_read_back_whole(captures: tuple[PgServer, dict[str, Any]], tmp_path: Any) -> None:
    """pgoutput-dump --format parquet (and arrow) writes each table directory under one
    schema: pyarrow.parquet.read_table(dir) and pyarrow.dataset get every row and every
    column (added, dropped, renamed, retyped), replayed equal to PostgreSQL's rows."""
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    dump = str(Path(sys.executable).parent / "pgoutput-dump")
    pg, caps = captures
    for name, capture in caps.items():
        path = tmp_path / f"{name}.parquet"
        pq.write_table(capture, path)
        for fmt in ("parquet", "arrow"):
            out = tmp_path / f"{name}-{fmt}"
            proc = subprocess.run([dump, str(path), "--format", fmt, "--output", str(out), "--rows-per-file", "1"],
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            tables = {}
            for rel in ("h1", "h2", "h3", "h4", "h5", "h6", "h7"):
                directory = out / f"hist.{rel}"
                # (One file per transaction that touched the table: a file holds rows of
                # any versions, all under the directory's schema.)
                files = sorted(directory.iterdir())
                schemas = {str(ds.dataset(f, format="parquet" if fmt == "parquet" else "ipc").schema) for f in files}
                assert len(schemas) == 1, (rel, schemas)
                if fmt == "parquet":
                    whole = pq.read_table(directory)
                    assert whole.equals(ds.dataset(directory, format="parquet").to_table())
                else:
                    whole = ds.dataset(directory, format="ipc").to_table()
                tables[f"hist.{rel}"] = whole
            assert "a_renamed" in tables["hist.h3"].column_names and "a" not in tables["hist.h3"].column_names
            assert "b" in tables["hist.h1"].column_names  # dropped, kept: null from the drop on
            empty = pgoutput_arrow.decode([]).truncates
            _check_against_server(pg, tables, empty)


@pytest.mark.timeout(120)
def test_live_stream_unifies_across_a_reconnect(pg18: PgServer) -> None:
    """Column ids are one decoder's own: after the walsender is killed and the stream
    reconnects with a new decoder, its batches still land in the columns they belong to (a
    value of a column added before the reconnect was lost, its column split in two)."""
    import time

    pg18.execute("CREATE TABLE reconn (id int PRIMARY KEY, a int, b int)")
    pg18.execute("CREATE PUBLICATION reconn FOR TABLE reconn")
    pg18.create_slot("reconn")
    got: list[pa.RecordBatch] = []
    s = pgoutput_arrow.stream(pg18.dsn, slot="reconn", publication="reconn", stop_after=60,
                              reconnect_initial_delay=0.2)

    def consume() -> None:
        for item in s:
            if item.kind == "table":
                got.append(item.batch)
            s.ack(item.ack_lsn)

    def wait(what: str, cond: Any) -> None:
        deadline = time.monotonic() + 30
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    s.open()
    runner = CheckedThread(target=consume)
    runner.start()
    try:
        pg18.execute("INSERT INTO reconn VALUES (1, 10, 100)")
        pg18.execute("ALTER TABLE reconn DROP COLUMN a")
        pg18.execute("ALTER TABLE reconn ADD COLUMN c int")
        pg18.execute("INSERT INTO reconn VALUES (2, 200, 2000)")
        wait("the first rows", lambda: sum(b.num_rows for b in got) >= 2)
        pid = pg18.scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'reconn'")
        pg18.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait("a reconnect", lambda: s.stats().reconnects >= 1)
        pg18.execute("INSERT INTO reconn VALUES (3, 300, 3000)")
        wait("the row after the reconnect", lambda: sum(b.num_rows for b in got) >= 3)
    finally:
        s.stop()
        runner.join(timeout=30)
        s.close()
    last = got[-1].schema
    assert [n for n in last.names if not n.startswith("_")] == ["id", "b", "c", "a"]
    # Ids restart with the new decoder: batches from before the reconnect are read by name.
    rows = [{c: (r[c] if c in r else None) for c in ("id", "a", "b", "c")}
            for b in got for r in b.to_pylist()]
    assert rows == [{"id": 1, "a": 10, "b": 100, "c": None}, {"id": 2, "a": None, "b": 200, "c": 2000},
                    {"id": 3, "a": None, "b": 300, "c": 3000}]


@pytest.mark.timeout(120)
def test_live_stream_learns_renames_from_the_catalog(pg18: PgServer) -> None:
    """A column dropped and another of the same type added at the end, with no change in
    between: a capture cannot tell it from a rename (README, known limits), the live source
    can (it asks pg_attribute for the attnums): `a` and `b` stay two columns, and `b`
    renamed to `c` stays one."""
    schema = "histattn"
    pg18.execute(f"CREATE SCHEMA {schema}")
    pg18.execute(f"CREATE PUBLICATION {schema} FOR TABLES IN SCHEMA {schema}")
    pg18.create_slot(schema)
    pg18.create_slot(f"{schema}_capture")
    pg18.execute(f"CREATE TABLE {schema}.t (id int PRIMARY KEY, a int)")
    pg18.execute(f"INSERT INTO {schema}.t VALUES (1, 10)")
    got: list[pa.RecordBatch] = []
    with pgoutput_arrow.stream(pg18.dsn, slot=schema, publication=schema, stop_after=90) as s:
        # Each step once the stream has read the definition before it (the catalog is read
        # when a Relation message arrives: it must still name that definition's columns).
        steps = {1: [f"ALTER TABLE {schema}.t DROP COLUMN a", f"ALTER TABLE {schema}.t ADD COLUMN b int",
                     f"INSERT INTO {schema}.t VALUES (2, 20)"],
                 2: [f"ALTER TABLE {schema}.t RENAME COLUMN b TO c", f"INSERT INTO {schema}.t VALUES (3, 30)"]}
        for item in s:
            if item.name == f"{schema}.t":
                got.append(item.batch)
                for id_ in item.batch.column("id").to_pylist():
                    for sql in steps.pop(id_, []):
                        pg18.execute(sql)
            s.ack(item.ack_lsn)
            if not steps and 3 in {i for b in got for i in b.column("id").to_pylist()}:
                break
    last = got[-1].schema
    table = pa.concat_tables([pgoutput_arrow.conform(b, last) for b in got])
    rows = {r["id"]: (r.get("a"), r.get("c")) for r in table.select(["id", "a", "c"]).to_pylist()}
    assert rows == {1: (10, None), 2: (None, 20), 3: (None, 30)}, (last.names, rows)
    # The same history from a capture: the order rule reads the drop and the add as a rename.
    rows_capture = pg18.get_binary_changes(f"{schema}_capture", {"proto_version": "1", "publication_names": schema})
    capture = pa.table({"lsn": pa.array([r[0] for r in rows_capture], pa.int64()),
                        "data": pa.array([bytes(r[2]) for r in rows_capture], pa.binary())})
    decoded = pgoutput_arrow.decode(capture).tables[f"{schema}.t"]
    assert "a" not in decoded.column_names and decoded.column("c").to_pylist() == [10, 20, 30]


def test_column_added_after_the_table_moved_gets_its_own_id(pg18: PgServer) -> None:
    """A table moved to another schema keeps its columns' ids under the new name; a column
    added there took id 0, the id of its first column, and the unified table showed the
    first column's values in it (found by tests/torture through pgoutput-dump's Parquet)."""
    db = "moved_add_column"
    pg18.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    pg18.execute(f"CREATE DATABASE {db}")
    conn = pg18.connect(pg18.dsn_for(db))
    try:
        cur = conn.cursor()
        cur.execute("CREATE SCHEMA s2")
        cur.execute("CREATE TABLE t1 (id int, c1 text, c2 float4)")
        cur.execute("CREATE PUBLICATION p FOR ALL TABLES")
        cur.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        cur.execute("INSERT INTO t1 VALUES (1, 'a', 1.5)")
        cur.execute("ALTER TABLE t1 SET SCHEMA s2")
        cur.execute("ALTER TABLE s2.t1 DROP COLUMN c2")
        cur.execute("INSERT INTO s2.t1 VALUES (2, 'b')")
        cur.execute("ALTER TABLE s2.t1 ADD COLUMN c16 json")
        cur.execute("""INSERT INTO s2.t1 VALUES (3, 'c', '{"k": 1}')""")
        cur.execute("SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
                    "'proto_version', '1', 'publication_names', 'p')")
        rows = cur.fetchall()
    finally:
        conn.close()
        pg18.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    changes = pgoutput_arrow.decode([(r[0], bytes(r[2])) for r in rows])
    moved = changes.tables["s2.t1"]
    got = dict(zip(moved.column("id").to_pylist(), moved.column("c16").cast(pa.string()).to_pylist()))
    assert got == {2: None, 3: '{"k": 1}'}, got
