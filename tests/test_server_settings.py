"""Server output settings (issue 21): with DateStyle, IntervalStyle, TimeZone,
extra_float_digits, bytea_output and lc_monetary written into the server's configuration
(so that walsenders and ``pg_logical_slot_*`` sessions print under them), every way out gives
PostgreSQL's values as read in a session with ISO settings, value by value:

* live text and live binary (``stream()``), whose connections pin the output settings;
* ``pgoutput-dump --dsn`` in every output format (jsonl, parquet, arrow, delta);
* a capture taken in a session under the server's settings, through ``decode()`` with the
  date order and time zone it was printed under, through ``pgoutput-dump`` on the capture
  file, and through Spark's ``pgspark.decode``.

A capture printed with too few float digits (extra_float_digits <= 0) is lossy by nature
(docs/python.md): its floats are compared only where the group prints them exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pgoutput_arrow._pg import output_options
from pg_harness import PgServer, int_to_lsn

#: Setting groups: each is written into the configuration once per server.
GROUPS: dict[str, dict[str, str]] = {
    "sql-dmy": {"DateStyle": "'SQL, DMY'", "IntervalStyle": "sql_standard",
                "extra_float_digits": "0", "TimeZone": "'Asia/Kolkata'"},
    "sql-mdy": {"DateStyle": "'SQL, MDY'", "IntervalStyle": "iso_8601",
                "extra_float_digits": "-15", "TimeZone": "'America/St_Johns'",
                "bytea_output": "escape"},
    "german": {"DateStyle": "'German, DMY'", "IntervalStyle": "postgres_verbose",
               "TimeZone": "'Africa/Abidjan'", "lc_monetary": "'C.utf8'"},
    "postgres-dmy": {"DateStyle": "'Postgres, DMY'", "IntervalStyle": "sql_standard",
                     "TimeZone": "'America/New_York'", "extra_float_digits": "1"},
    "postgres-mdy": {"DateStyle": "'Postgres, MDY'", "IntervalStyle": "postgres",
                     "TimeZone": "'Europe/Paris'", "bytea_output": "escape"},
    "iso-ymd": {"DateStyle": "'ISO, YMD'", "IntervalStyle": "iso_8601",
                "TimeZone": "'Pacific/Chatham'", "extra_float_digits": "0"},
}
#: PostgreSQL's defaults (the harness's TimeZone), written back after each group.
RESET = {"DateStyle": "'ISO, MDY'", "IntervalStyle": "postgres", "extra_float_digits": "1",
         "TimeZone": "'UTC'", "bytea_output": "hex", "lc_monetary": "'C'"}

COLUMNS = ("id int PRIMARY KEY, d date, ts timestamp, tstz timestamptz, iv interval, "
           "f8 float8, f4 float4, b bytea, m money, n numeric(14,4), da date[], "
           "tsa timestamptz[], fa float8[], tr tstzrange")

ROWS = [
    "(1, '2026-11-25', '2026-11-25 10:00:00', '2026-11-25 10:00:00+00', "
    " '1 year 2 mons 3 days 04:05:06.789', 0.30000000000000004, 0.1, '\\x00ff5c27', 1234.56, "
    " 123456789.1234, '{2026-01-02,2026-12-31}', '{\"2026-01-02 03:04:05.123456+00\"}', "
    " '{0.30000000000000004,123456789.12345678}', '[2026-01-01 00:00+00,2026-02-01 00:00+00)')",
    "(2, '0044-03-15 BC', '0044-03-15 12:00:00 BC', '0044-03-15 12:00:00+00 BC', "
    " '-1 year -2 mons +3 days -04:05:06', 123456789.12345678, 3.4028235e38, 'plain', -99.99, "
    " -0.0001, '{\"0001-01-01 BC\",10000-01-01}', '{\"1850-06-01 12:00:00+00\"}', "
    " '{1e-300,-2.5e-10}', '(,2026-01-01 00:00+00]')",
    "(3, '10000-01-01', '10000-01-01 00:00:00.000001', '1850-06-01 12:00:00+00', "
    " '-00:00:00.5', 1e-300, -2.5e-10, '', 0, 0, '{}', '{}', '{}', 'empty')",
    "(4, 'infinity', '-infinity', 'infinity', '1 mon -1 days', '-0', 1.17549435e-38, "
    " '\\x5c5c', 0.01, 99999999.9999, '{infinity}', '{-infinity}', '{NaN,Infinity}', NULL)",
    "(5, '2024-11-03', '2024-11-03 01:30:00', '2024-11-03 05:30:00+00', '0', 'NaN', '-Infinity', "
    " NULL, NULL, NULL, NULL, NULL, NULL, '[2024-11-03 05:30+00,2024-11-03 06:30+00)')",
    "(6, '2000-02-29', '1900-01-01 00:00:00', '2024-11-03 06:30:00+00', '100:00:00', "
    " 1.7976931348623157e308, 1e6, '\\xdeadbeef', 92233720368547758.07, 1, "
    " '{1970-01-01}', '{\"0001-01-01 00:00:00+00\"}', '{5e-324}', NULL)",
]

#: Each column as a comparable value, computed by PostgreSQL in a session with ISO settings
#: (-infinity as the decoder's sentinel under datetime_range "arrow": the type's minimum plus
#: one, DuckDB's -infinity).
EXPECT_SQL = """
SELECT id,
  CASE WHEN d = 'infinity' THEN 2147483647 WHEN d = '-infinity' THEN -2147483647
       ELSE d - date '1970-01-01' END,
  CASE WHEN ts = 'infinity' THEN 9223372036854775807 WHEN ts = '-infinity'
       THEN -9223372036854775807 ELSE (extract(epoch FROM ts) * 1000000)::int8 END,
  CASE WHEN tstz = 'infinity' THEN 9223372036854775807 WHEN tstz = '-infinity'
       THEN -9223372036854775807 ELSE (extract(epoch FROM tstz) * 1000000)::int8 END,
  (extract(year FROM iv) * 12 + extract(month FROM iv))::int, extract(day FROM iv)::int,
  (extract(hour FROM iv) * 3600000000 + extract(minute FROM iv) * 60000000
   + extract(microseconds FROM iv))::int8,
  f8, f4::float8, b, m::text, n,
  (SELECT array_agg(CASE WHEN x = 'infinity' THEN 2147483647 WHEN x = '-infinity'
                         THEN -2147483647 ELSE x - date '1970-01-01' END ORDER BY o)
     FROM unnest(da) WITH ORDINALITY u(x, o)),
  (SELECT array_agg(CASE WHEN x = 'infinity' THEN 9223372036854775807 WHEN x = '-infinity'
                         THEN -9223372036854775807 ELSE (extract(epoch FROM x) * 1000000)::int8
                    END ORDER BY o) FROM unnest(tsa) WITH ORDINALITY u(x, o)),
  fa, tr::text, da IS NULL, tsa IS NULL
FROM {table} ORDER BY id"""

NAMES = ["id", "d", "ts", "tstz", "iv", "f8", "f4", "b", "m", "n", "da", "tsa", "fa", "tr"]
FLOATS = ("f8", "f4", "fa")


def expected(pg: PgServer, table: str) -> list[dict[str, Any]]:
    conn = pg.connect(options=output_options())
    try:
        with conn.cursor() as cur:
            cur.execute(EXPECT_SQL.format(table=table))
            out = []
            for r in cur.fetchall():
                (rid, d, ts, tstz, months, days, micros, f8, f4, b, m, n, da, tsa, fa, tr,
                 da_null, tsa_null) = r
                iv = None if months is None else (months, days, micros * 1000)
                out.append(dict(zip(NAMES, [rid, d, ts, tstz, iv, f8, f4,
                                            None if b is None else bytes(b), m, n,
                                            da if da_null or da is not None else [],
                                            tsa if tsa_null or tsa is not None else [],
                                            fa, tr])))
            return out
    finally:
        conn.close()


def _float_key(v: Any) -> Any:
    """Floats compared by their value and sign, NaN equal to NaN."""
    if isinstance(v, float):
        return "nan" if v != v else (v, str(v).startswith("-"))
    if isinstance(v, list):
        return [_float_key(x) for x in v]
    return v


def comparable(table: pa.Table) -> list[dict[str, Any]]:
    """The decoder's rows as EXPECT_SQL gives them: days, microseconds, (months, days,
    nanoseconds), floats widened to float64."""
    cols: dict[str, list[Any]] = {}
    for name in NAMES:
        if name not in table.column_names:
            continue
        col = table.column(name)
        t = col.type
        if pa.types.is_date32(t):
            col = col.cast(pa.int32())
        elif pa.types.is_timestamp(t):
            col = col.cast(pa.int64())
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            value = t.value_type
            if pa.types.is_date32(value):
                col = col.cast(pa.list_(pa.int32()))
            elif pa.types.is_timestamp(value):
                col = col.cast(pa.list_(pa.int64()))
        elif pa.types.is_string_view(t) or pa.types.is_large_string(t):
            col = col.cast(pa.string())
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            col = col.cast(pa.binary())
        values = col.to_pylist()
        if pa.types.is_interval(t):
            values = [None if v is None else (v.months, v.days, v.nanoseconds) for v in values]
        if pa.types.is_struct(t) and t.get_field_index("microseconds") >= 0:
            # The decoder's default: struct<months, days, microseconds>.
            values = [None if v is None else (v["months"], v["days"], v["microseconds"] * 1000)
                      for v in values]
        elif pa.types.is_struct(t):  # struct<months, days, nanoseconds>
            values = [None if v is None else tuple(v.values()) for v in values]
        cols[name] = values
    rows = [{k: cols[k][i] for k in cols} for i in range(table.num_rows)]
    return sorted(rows, key=lambda r: r["id"])


def assert_equal(got: list[dict[str, Any]], want: list[dict[str, Any]], what: str,
                 skip: tuple[str, ...] = ()) -> int:
    """Every value of ``got`` equals ``want``'s (columns in ``skip`` left out); the number
    of values compared."""
    assert [r["id"] for r in got] == [r["id"] for r in want], what
    n = 0
    for g, w in zip(got, want):
        for name, value in g.items():
            if name in skip:
                continue
            assert _float_key(value) == _float_key(w[name]), (
                f"{what}: row {g['id']} column {name}: got {value!r}, PostgreSQL has {w[name]!r}")
            n += 1
    return n


def capture_in_server_settings(pg: PgServer, slot: str, publication: str) -> pa.Table:
    """pg_logical_slot_get_binary_changes in a session under the server's settings (psycopg2
    sets DateStyle ISO on its sessions: reset it to the configuration's)."""
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("RESET DateStyle")
            cur.execute("SELECT lsn::text, xid::text::int8, data FROM "
                        "pg_logical_slot_get_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                        "'publication_names', %s)", (slot, publication))
            rows = cur.fetchall()
    finally:
        conn.close()
    return pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                     "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})


def dump_start(*args: str) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("pgoutput-dump")
    return subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def dump_wait(proc: subprocess.Popen[str]) -> str:
    """The stdout of a finished pgoutput-dump, which must have exited 0."""
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, f"pgoutput-dump {proc.args!r}: exit {proc.returncode}: {err[-2000:]}"
    return out


def dump(*args: str) -> str:
    return dump_wait(dump_start(*args))


def read_output(directory: Path, fmt: str, table: str) -> pa.Table:
    if fmt == "delta":
        import deltalake

        # The table's live files, read as Parquet: deltalake's own reader fails on the file
        # statistics of BC dates ("Invalid isoformat string: '-0043-03-15'").
        uris = deltalake.DeltaTable(str(directory / table)).file_uris()
        return pa.concat_tables([pq.read_table(u.removeprefix("file://")) for u in uris])
    files = sorted((directory / table).glob(f"*.{'parquet' if fmt == 'parquet' else 'arrow'}"))
    assert files, f"no {fmt} files under {directory / table}"
    if fmt == "parquet":
        return pa.concat_tables([pq.read_table(f) for f in files])
    tables = []
    for f in files:
        with pa.ipc.open_file(pa.memory_map(str(f))) as r:
            tables.append(r.read_all())
    return pa.concat_tables(tables)


def jsonl_rows(text: str, table: str) -> list[dict[str, Any]]:
    """jsonl's new values in EXPECT_SQL's terms, for the columns whose JSON is the value
    itself (the others are PostgreSQL's ISO text, checked through the Arrow formats)."""
    rows = []
    for line in text.splitlines():
        change = json.loads(line)
        if change.get("op") != "insert" or f"{change['schema']}.{change['table']}" != table:
            continue
        new = change["new"]
        iv = new["iv"]
        f4 = _json_float(new["f4"])
        rows.append({"id": new["id"], "f8": _json_float(new["f8"]),
                     "f4": None if f4 is None else float(np.float32(f4)),
                     "m": new["m"], "tr": new["tr"],
                     "iv": None if iv is None else (iv["months"], iv["days"], int(iv["nanoseconds"]))})
    return sorted(rows, key=lambda r: r["id"])


def _json_float(v: Any) -> Any:
    if isinstance(v, str):  # NaN, Infinity, -Infinity
        return float(v)
    return None if v is None else float(v)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[1]").appName("pgoutput-arrow-settings")
               .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
               .getOrCreate())
    yield session
    session.stop()  # getOrCreate in a later module would hand back this one, tuned as here


@pytest.mark.parametrize("group", list(GROUPS))
def test_every_path_gives_postgresql_values(pg: PgServer, group: str, unique_name: str,
                                           tmp_path: Path, spark: Any) -> None:
    settings = GROUPS[group]
    name = unique_name
    table = f"public.{name}"
    # deltalake cannot merge ±infinity dates (a panic: "NaiveDate + TimeDelta overflowed"):
    # the Delta output is checked on a table of the finite rows.
    finite = [1, 2, 3, 6]
    pg.execute(f"CREATE TABLE {name} ({COLUMNS}); CREATE TABLE {name}_finite ({COLUMNS}); "
               f"CREATE PUBLICATION {name} FOR TABLE {name}, {name}_finite")
    formats = ("jsonl", "parquet", "arrow", "delta")
    slots = {kind: f"{name}_{kind}" for kind in ("text", "binary", "capture", *formats)}
    for slot in slots.values():
        pg.create_slot(slot)
    pg.configure(settings)
    try:
        pg.execute(f"INSERT INTO {name} VALUES {', '.join(ROWS)}; "
                   f"INSERT INTO {name}_finite SELECT * FROM {name} WHERE id = ANY(%s)", (finite,))
        pg.flush_wal()
        end = pg.current_wal_lsn()
        want = expected(pg, name)
        compared = 0

        # Live, text and binary: the connection pins the output settings, after (so over)
        # the DSN's own options.
        own = f"{pg.dsn} options='-c DateStyle=German -c extra_float_digits=0'"
        for kind, binary in (("text", False), ("binary", True)):
            # datetime_range="arrow": BC dates and years past 9999 are compared typed (the
            # default keeps them in _special, as Python's datetime cannot hold them).
            with pgoutput_arrow.stream(own, slot=slots[kind], publication=name, binary=binary,
                                       stop_at_lsn=end, stop_after=60, datetime_range="arrow") as s:
                batches = [item.batch for item in s if item.kind == "table" and item.name == table]
                s.ack()
            got = comparable(pa.Table.from_batches(batches))
            compared += assert_equal(got, want, f"{group}: live {kind}")

        # pgoutput-dump --dsn in every format, at once (each stops 3 s after the last data).
        live_args = ["--dsn", pg.dsn, "--publication", name, "--to-lsn", int_to_lsn(end),
                     "--idle-timeout", "3", "--datetime-range", "arrow"]
        procs = {}
        for fmt in formats:
            extra = ["--output", str(tmp_path / fmt)] if fmt != "jsonl" else []
            if fmt == "delta":
                extra += ["--table", f"{table}_finite"]
            procs[fmt] = dump_start(*live_args, "--slot", slots[fmt], "--format", fmt, *extra)
        for fmt, proc in procs.items():
            stdout = dump_wait(proc)
            if fmt == "jsonl":
                compared += assert_equal(jsonl_rows(stdout, table), want,
                                         f"{group}: pgoutput-dump --dsn jsonl")
            elif fmt == "delta":
                got = comparable(read_output(tmp_path / fmt, fmt, f"{table}_finite"))
                compared += assert_equal(got, [r for r in want if r["id"] in finite],
                                         f"{group}: pgoutput-dump --dsn --format delta")
            else:
                got = comparable(read_output(tmp_path / fmt, fmt, table))
                compared += assert_equal(got, want, f"{group}: pgoutput-dump --dsn --format {fmt}")

        # A capture printed under the server's settings.
        order = settings["DateStyle"].strip("'").split(",")[1].strip()
        zone = settings["TimeZone"].strip("'")
        capture = capture_in_server_settings(pg, slots["capture"], name)
        lossy = int(settings.get("extra_float_digits", "1")) <= 0
        # Text types that are printed, not decoded, keep the settings they were printed in.
        skip = ("tr", "m") + (FLOATS if lossy else ())
        decoded = pgoutput_arrow.decode(capture, date_order=order, timezone=zone, datetime_range="arrow")
        compared += assert_equal(comparable(decoded.tables[table]), want,
                                 f"{group}: decode() of a capture", skip)
        path = tmp_path / "capture.parquet"
        pq.write_table(capture, path)
        dump(str(path), "--format", "parquet", "--output", str(tmp_path / "cap"),
             "--date-order", order, "--timezone", zone, "--datetime-range", "arrow")
        compared += assert_equal(comparable(read_output(tmp_path / "cap", "parquet", table)), want,
                                 f"{group}: pgoutput-dump capture --format parquet", skip)

        # Spark: the rows PySpark can hold (rows 2-4 hold BC dates, years past 9999 and
        # ±infinity, which the Spark integration keeps in _special, issue 21 item 3).
        in_spark = [1, 5, 6]
        from pgoutput_arrow import spark as pgspark

        df = spark.createDataFrame(capture.to_pandas())
        frames = pgspark.decode(df, date_order=order, timezone=zone)
        sdf = frames[table].select("id", "d", "ts", "tstz", "iv", "f8", "f4", "b", "n")
        got_spark = comparable(sdf.toArrow())
        compared += assert_equal([r for r in got_spark if r["id"] in in_spark],
                                 [r for r in want if r["id"] in in_spark],
                                 f"{group}: Spark pgspark.decode of a capture", skip)
        specials = {r["id"]: dict(r["_special"] or []) for r in frames[table].select("id", "_special").collect()}
        assert all("d" in specials[i] for i in (2, 3, 4)), specials
        assert compared > 400, compared
    finally:
        pg.configure(RESET)


def test_output_settings_join_the_dsn_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned settings come after the DSN's own options (so they win for their names and
    the others stay), after PGOPTIONS when the DSN has none, in keyword DSNs and URIs."""
    import psycopg2.extensions

    from pgoutput_arrow._pg import OUTPUT_SETTINGS, with_output_settings

    ours = [f"-c {k}={v}" for k, v in OUTPUT_SETTINGS.items()]
    monkeypatch.delenv("PGOPTIONS", raising=False)
    for dsn, theirs in [
        ("host=h dbname=d options='-c lock_timeout=5s -c DateStyle=German'",
         "-c lock_timeout=5s -c DateStyle=German"),
        ("postgresql://u@h:5433/d?options=-c%20search_path%3Dapp", "-c search_path=app"),
        ("host=h", ""),
    ]:
        options = psycopg2.extensions.parse_dsn(with_output_settings(dsn))["options"]
        assert options == " ".join(([theirs] if theirs else []) + ours), (dsn, options)
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=64MB")
    options = psycopg2.extensions.parse_dsn(with_output_settings("host=h"))["options"]
    assert options == " ".join(["-c work_mem=64MB", *ours])
    # A DSN's own options replace PGOPTIONS in libpq: they are kept, PGOPTIONS is not added.
    options = psycopg2.extensions.parse_dsn(with_output_settings("host=h options=-cgeqo=off"))["options"]
    assert options == " ".join(["-cgeqo=off", *ours])


def test_unknown_timezone_or_date_order_is_refused(tmp_path: Path) -> None:
    """decode() raises ValueError naming the option; pgoutput-dump exits 2 before reading."""
    for kwargs, word in (({"timezone": "Mars/Olympus"}, "Mars/Olympus"), ({"date_order": "DYM"}, "DYM")):
        with pytest.raises(ValueError, match=word):
            pgoutput_arrow.decode([], **kwargs)
    capture = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"lsn": pa.array([], pa.string()), "data": pa.array([], pa.binary())}), capture)
    exe = Path(sys.executable).with_name("pgoutput-dump")
    proc = subprocess.run([str(exe), str(capture), "--timezone", "Mars/Olympus"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "Mars/Olympus" in proc.stderr.splitlines()[-1], proc.stderr


#: (database encoding, text the encoding holds beyond ASCII): a single-byte one with the
#: euro sign where LATIN1 has none, and a multi-byte one.
ENCODINGS = {"WIN1252": "café ß € ±", "EUC_JP": "データ 東京"}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_database_in_another_encoding(pg18: PgServer, encoding: str, unique_name: str,
                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spark: Any) -> None:
    """Text is sent in the session's client_encoding, converted from the database's: every
    connection the package opens asks for UTF8, over PGCLIENTENCODING (SQL_ASCII here, under
    which the server sends the database's bytes as stored). Names (table, column, enum label,
    message prefix) and values equal PostgreSQL's in the live stream (text and binary), the
    initial snapshot, ``pgoutput-dump --dsn`` and Spark's streaming source; a capture taken in
    a UTF8 session decodes, one taken in the database's encoding fails with an error that says
    client_encoding."""
    import psycopg2

    word = ENCODINGS[encoding]
    db = f"enc_{unique_name}"
    pg18.create_database(db, encoding)
    conn = psycopg2.connect(pg18.dsn_for(db))
    conn.autocommit = True
    conn.set_client_encoding("UTF8")
    table = f"tablé_{word.split()[0]}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TYPE humeur AS ENUM ('gai', '{word.split()[1]}')")
        cur.execute(f'CREATE TABLE "{table}" (id int PRIMARY KEY, "prénom" text, v varchar(20), c char(12), '
                    f'a text[], j jsonb, h humeur)')
        cur.execute(f'INSERT INTO "{table}" VALUES (1, %s, %s, %s, %s, %s, %s)',
                    (word, word[:20], word[:12], [word, "x"], json.dumps({word: word}), word.split()[1]))
        cur.execute("CREATE PUBLICATION p FOR ALL TABLES")
        for slot in ("text", "binary", "cli", "spark", "capture", "wrong"):
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{db}_{slot}",))
        cur.execute(f'UPDATE "{table}" SET "prénom" = "prénom" || \'!\', h = \'gai\'')
        cur.execute("SELECT pg_logical_emit_message(true, %s, 'x')", (f"préfixe {word}",))
        cur.execute(f'SELECT id, "prénom", v, c, a, j::text, h::text FROM "{table}"')
        want = [list(r) for r in cur.fetchall()]
        cur.execute("SELECT pg_current_wal_lsn()::text")
        end = cur.fetchone()[0]
    name = f"public.{table}"
    columns = ["id", "prénom", "v", "c", "a", "j", "h"]

    def value(v: Any, column: str) -> Any:
        if column == "j":
            return json.dumps(json.loads(v))
        # An enum in binary mode is its send bytes (README's known limits): its label, in the
        # client's encoding too.
        return v.decode() if isinstance(v, bytes) else v

    def final(t: pa.Table) -> list[list[Any]]:
        return [[value(r[c], c) for c in columns] for r in t.to_pylist() if r["_op"] == "update"]

    monkeypatch.setenv("PGCLIENTENCODING", "SQL_ASCII")
    want[0][5] = json.dumps(json.loads(want[0][5]))
    for kind, binary in (("text", False), ("binary", True)):
        with pgoutput_arrow.stream(pg18.dsn_for(db), slot=f"{db}_{kind}", publication="p", binary=binary,
                                   messages=True, stop_at_lsn=int(end.split("/")[0], 16) << 32
                                   | int(end.split("/")[1], 16), stop_after=60) as s:
            items = list(s)
            s.ack()
        got = pa.Table.from_batches([i.batch for i in items if i.kind == "table" and i.name == name])
        assert final(got) == want, (kind, got.to_pylist())
        prefixes = [p for i in items if i.kind == "messages" for p in i.batch.column("prefix").to_pylist()]
        assert prefixes == [f"préfixe {word}"], prefixes

    with pgoutput_arrow.stream(pg18.dsn_for(db), slot=f"{db}_snap", publication="p", create_slot=True,
                               snapshot=True, stop_after=20) as s:
        snap = []
        for item in s:
            if item.kind == "table" and item.name == name:
                snap.append(item)
                break  # the table's one row: its snapshot is all there is
        s.ack()
    rows = pa.Table.from_batches([i.batch for i in snap]).to_pylist()
    assert [[value(r[c], c) for c in columns] for r in rows] == want

    out = dump("--dsn", pg18.dsn_for(db), "--slot", f"{db}_cli", "--publication", "p", "--to-lsn", end,
               "--idle-timeout", "3", "--format", "jsonl")
    updates = [json.loads(line) for line in out.splitlines() if json.loads(line).get("op") == "update"]
    assert [u["table"] for u in updates] == [table] and updates[0]["new"]["prénom"] == want[0][1], updates

    # Spark's streaming source: its driver's connection, and the executors' if they read.
    from pgoutput_arrow import spark as pgspark

    pgspark.register(spark)
    query = (spark.readStream.format("pgoutput").option("dsn", pg18.dsn_for(db)).option("slot", f"{db}_spark")
             .option("publication", "p").option("table", name).load()
             .writeStream.format("memory").queryName(f"enc_{unique_name}")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert final(spark.table(f"enc_{unique_name}").toArrow()) == want

    # Captures: the session's client_encoding decides the bytes.
    for slot, client in (("capture", "UTF8"), ("wrong", encoding)):
        with psycopg2.connect(pg18.dsn_for(db)) as c, c.cursor() as cur:
            c.set_client_encoding(client)
            cur.execute("SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_get_binary_changes(%s, NULL, "
                        "NULL, 'proto_version', '1', 'publication_names', 'p')", (f"{db}_{slot}",))
            rows = cur.fetchall()
        capture = pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                            "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
        if client == "UTF8":
            assert final(pgoutput_arrow.decode(capture).tables[name]) == want
        else:
            with pytest.raises(pgoutput_arrow.PgoutputError, match="client_encoding"):
                pgoutput_arrow.decode(capture)
    conn.close()
    pg18.drop_slots_named_like(db)


@pytest.mark.timeout(240)
def test_a_sql_ascii_database_with_text_that_is_not_utf8(pg18: PgServer, unique_name: str) -> None:
    """A SQL_ASCII database stores text as its writers sent it. Text that is not UTF-8 there
    (Latin-1 bytes) cannot be sent in UTF-8: the server stops the stream, and stream() says
    so in one line (a ReplicationError, not a connection failure to retry). A capture taken
    in a SQL_ASCII session holds the bytes as stored: decode() names the column, the LSN and
    client_encoding."""
    import psycopg2

    db = f"ascii_{unique_name}"
    pg18.create_database(db, "SQL_ASCII")
    conn = psycopg2.connect(pg18.dsn_for(db))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id int PRIMARY KEY, s text)")
        cur.execute("CREATE PUBLICATION p FOR TABLE t")
        for slot in ("live", "capture"):
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{db}_{slot}",))
        # E'\xe9': the byte 0xe9 itself (é in Latin-1), which SQL_ASCII stores unchecked.
        cur.execute("INSERT INTO t VALUES (1, E'caf\\xe9')")
    try:
        with pytest.raises(pgoutput_arrow.ReplicationError, match="cannot send this text in UTF-8") as raised:
            with pgoutput_arrow.stream(pg18.dsn_for(db), slot=f"{db}_live", publication="p", stop_after=30) as s:
                list(s)
        assert not isinstance(raised.value, pgoutput_arrow.ConnectionFailed)
        assert "0xe9" in str(raised.value) and len(str(raised.value).splitlines()) == 1, raised.value
        conn.set_client_encoding("SQL_ASCII")
        with conn.cursor() as cur:
            cur.execute("SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_get_binary_changes(%s, NULL, "
                        "NULL, 'proto_version', '1', 'publication_names', 'p')", (f"{db}_capture",))
            captured = cur.fetchall()
        capture = pa.table({"lsn": [r[0] for r in captured], "xid": [r[1] for r in captured],
                            "data": pa.array([bytes(r[2]) for r in captured], pa.binary())})
        with pytest.raises(pgoutput_arrow.DecodeValueError, match=r'column "s" of public\.t .*client_encoding'):
            pgoutput_arrow.decode(capture)
    finally:
        conn.close()
        pg18.drop_slots_named_like(db)
