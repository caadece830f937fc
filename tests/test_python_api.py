"""The Python API (decode, Decoder, Changes, exceptions) on captures from real servers."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pgoutput_arrow
from pgoutput_arrow import _internal
from dump_workload import LONG, Workload, capture_workload, comparable
from pg_harness import PgServer, int_to_lsn
from threads import CheckedThread


@pytest.fixture(scope="module")
def workload(pg: PgServer) -> Workload:
    return capture_workload(pg, f"api{pg.version}")


@pytest.fixture(scope="module")
def text_workload(pg18: PgServer) -> Workload:
    return capture_workload(pg18, "apitext")


@pytest.fixture(scope="module")
def binary_workload(pg18: PgServer) -> Workload:
    return capture_workload(pg18, "apibin", binary=True, proto=4)


def _rows(changes: pgoutput_arrow.Changes, name: str) -> list[dict[str, object]]:
    return comparable(changes.tables[name])


def test_decode_every_source_gives_the_same(workload: Workload, tmp_path: Path) -> None:
    reference = pgoutput_arrow.decode(workload.table())
    assert set(reference.tables) == {workload.main, workload.other}
    assert reference.tables[workload.main].num_rows == 6
    assert reference.tables[workload.other].num_rows == 3
    csv = tmp_path / "c.csv"
    with csv.open("w") as f:  # as COPY ... TO (FORMAT csv) writes it: no header, bytea hex
        for lsn, xid, data in workload.rows:
            f.write(f"{int_to_lsn(lsn)},{xid},\\x{data.hex()}\n")
    sources: list[object] = [
        workload.write_parquet(tmp_path / "c.parquet"),
        str(workload.write_arrow_file(tmp_path / "c.arrow")),
        workload.write_arrow_stream(tmp_path / "c.arrows"),
        csv,
        workload.table(lsn_as_text=False),
        workload.table().to_batches()[0],
        pa.RecordBatchReader.from_batches(workload.table().schema, workload.table().to_batches()),
        [(lsn, data) for lsn, _, data in workload.rows],
        [(int_to_lsn(lsn), data) for lsn, _, data in workload.rows],
    ]
    for source in sources:
        changes = pgoutput_arrow.decode(source)
        for name in reference.tables:
            assert _rows(changes, name) == _rows(reference, name), source
        assert changes.transactions.num_rows == reference.transactions.num_rows
    # Bare messages: same rows, LSN 0.
    bare = pgoutput_arrow.decode([data for _, _, data in workload.rows])
    t = bare.tables[workload.main]
    assert comparable(t.drop_columns(["_lsn"])) == \
        comparable(reference.tables[workload.main].drop_columns(["_lsn"]))
    assert set(t.column("_lsn").to_pylist()) == {0}


def test_tables_follow_the_model(workload: Workload) -> None:
    changes = pgoutput_arrow.decode(workload.table())
    t = changes.tables[workload.main]
    names = t.schema.names
    assert names[:11] == ["id", "name", "amount", "big", "ts", "d", "payload", "tags", "f",
                          "doc", "u"]
    for meta in ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before",
                 "_unchanged"):
        assert meta in names
    assert t.column("_op").to_pylist() == ["insert", "insert", "insert", "update", "delete",
                                           "update"]
    assert t.schema.field("amount").type == pa.decimal128(12, 2)
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    first = t.slice(0, 1).to_pylist()[0]
    assert first["name"] == LONG + "1" and first["big"] == 9007199254740993
    assert changes.truncates.num_rows == 1
    assert changes.truncates.column("relations").to_pylist() == [[workload.other]]
    assert changes.messages.column("prefix").to_pylist() == ["dump-test"]
    assert changes.transactions.num_rows == 6
    assert repr(changes).startswith("Changes(tables={")
    assert changes[workload.other].num_rows == 3


def test_text_and_binary_mode_agree(text_workload: Workload, binary_workload: Workload) -> None:
    text = pgoutput_arrow.decode(text_workload.table()).tables[text_workload.main]
    binary = pgoutput_arrow.decode(binary_workload.table()).tables[binary_workload.main]
    data = [n for n in text.schema.names if not n.startswith("_")]
    assert comparable(text.select(data)) == comparable(binary.select(data))


def test_incremental_decoder_matches_decode(workload: Workload) -> None:
    reference = pgoutput_arrow.decode(workload.table())
    dec = pgoutput_arrow.Decoder(batch_size=2)
    got: dict[str, list[pa.RecordBatch]] = {}
    kinds = set()
    for lsn, _, data in workload.rows:
        dec.feed(data, lsn)
        for out in dec.take():
            assert isinstance(out, pgoutput_arrow.Output) and isinstance(out.batch, pa.RecordBatch)
            # The one batch type: the live stream's is the same class, and it unpacks as the
            # decoder decided it (a decoder's has nothing to acknowledge).
            assert pgoutput_arrow.LiveBatch is pgoutput_arrow.Output and out.ack_lsn == 0
            kind, table, version, batch = out
            assert (kind, table, version, batch) == (out.kind, out.table, out.version, out.batch)
            kinds.add(out.kind)
            if out.kind == "table":
                got.setdefault(out.table, []).append(out.batch)
    dec.flush()
    for out in dec.take():
        kinds.add(out.kind)
        if out.kind == "table":
            got.setdefault(out.table, []).append(out.batch)
    # Everything committed was handed out: safe_lsn is at least the last commit's LSN.
    assert dec.safe_lsn >= max(reference.transactions.column("commit_lsn").to_pylist())
    rest = dec.finish()
    for name in reference.tables:
        rows = [r for b in got.get(name, []) for r in comparable(pa.Table.from_batches([b]))]
        rows += comparable(rest.tables[name]) if name in rest.tables else []
        assert rows == _rows(reference, name)
    assert "table" in kinds
    with pytest.raises(RuntimeError, match="finish"):
        dec.feed(workload.rows[0][2], 0)


def test_feed_batch(workload: Workload) -> None:
    dec = pgoutput_arrow.Decoder()
    assert dec.feed_batch(workload.table()) == len(workload.rows)
    assert dec.finish().tables[workload.main].num_rows == 6


def test_zero_copy_text_views_point_into_the_capture(binary_workload: Workload) -> None:
    """With views, the bytes of text values are not copied: every data buffer of a
    string_view column lies inside the capture's own data buffer."""
    capture = binary_workload.table()
    data = capture.column("data")
    inputs = []
    for chunk in data.chunks:
        values = chunk.buffers()[2]
        inputs.append((values.address, values.address + values.size))
    changes = pgoutput_arrow.decode(capture, views=True)
    t = changes.tables[binary_workload.main]
    col = t.column("name")
    assert pa.types.is_string_view(col.type)
    long_bytes = sum(len(v.encode()) for v in col.to_pylist() if v and len(v.encode()) > 12)
    assert long_bytes > 0
    inside = outside = 0
    for chunk in col.chunks:
        for buf in chunk.buffers()[2:]:  # [validity, views, data buffers...]
            if buf is None or buf.size == 0:
                continue
            if any(lo <= buf.address and buf.address + buf.size <= hi for lo, hi in inputs):
                inside += buf.size
            else:
                outside += buf.size
    assert outside == 0, f"{outside} bytes of text values were copied"
    assert inside > 0
    # Without views, values are copied into a contiguous string column.
    copied = pgoutput_arrow.decode(capture, views=False).tables[binary_workload.main]
    assert not pa.types.is_string_view(copied.schema.field("name").type)
    assert copied.column("name").to_pylist() == col.to_pylist()
    print(f"text values: {long_bytes} bytes in values longer than 12 bytes; data buffers of "
          f"the string_view column: {inside} bytes inside the capture's buffer, {outside} "
          f"outside")


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_zero_copy_for_every_view_column_type(pg18: PgServer, binary: bool) -> None:
    """Values whose bytes are already what Arrow stores are not copied: text, varchar,
    json and jsonb in both modes (jsonb after its version byte in binary mode), and bytea
    in binary mode: every data buffer of those view columns lies inside the capture's own
    data buffer. (bytea in text mode is hex, decoded, so copied.)"""
    name = f"zc_{'bin' if binary else 'txt'}"
    pg18.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, t text, v varchar(200), "
                 "b bytea, j json, jb jsonb)")
    pg18.execute(f"CREATE PUBLICATION {name}_pub FOR TABLE {name}")
    pg18.create_slot(f"{name}_slot")
    pg18.execute(f"""INSERT INTO {name} SELECT i, repeat('text ', 10) || i,
        repeat('varchar ', 5) || i, decode(repeat('deadbeef', 8) || lpad(i::text, 8, '0'), 'hex'),
        json_build_object('key', repeat('x', 30), 'i', i), jsonb_build_object('key', repeat('y', 30), 'i', i)
        FROM generate_series(1, 500) i""")
    options = {"proto_version": "4", "publication_names": f"{name}_pub"}
    if binary:
        options["binary"] = "true"
    rows = pg18.get_binary_changes(f"{name}_slot", options)
    pg18.drop_slot(f"{name}_slot")
    capture = pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                        "xid": pa.array([r[1] for r in rows], pa.int64()),
                        "data": pa.array([r[2] for r in rows], pa.binary())})
    lo_hi = [(c.buffers()[2].address, c.buffers()[2].address + c.buffers()[2].size)
             for c in capture.column("data").chunks]
    table = pgoutput_arrow.decode(capture, views=True).tables[f"public.{name}"]
    zero_copy = ["t", "v", "j", "jb"] + (["b"] if binary else [])
    measured = {}
    for column in zero_copy:
        col = table.column(column)
        storage = getattr(col.type, "storage_type", col.type)
        assert pa.types.is_string_view(storage) or pa.types.is_binary_view(storage), column
        inside = outside = 0
        for chunk in col.chunks:
            chunk = getattr(chunk, "storage", chunk)  # arrow.json: its string_view storage
            for buf in chunk.buffers()[2:]:
                if buf is None or buf.size == 0:
                    continue
                if any(lo <= buf.address and buf.address + buf.size <= hi for lo, hi in lo_hi):
                    inside += buf.size
                else:
                    outside += buf.size
        assert outside == 0, f"{column}: {outside} bytes of values copied"
        assert inside > 0, column
        measured[column] = inside
    # The values are the server's.
    rows = {r["id"]: r for r in table.select(["id", "t", "b", "jb"]).to_pylist()}
    assert len(rows) == 500
    assert rows[1]["b"] == bytes.fromhex("deadbeef" * 8 + "00000001")
    assert rows[1]["jb"] == '{"i": 1, "key": "' + "y" * 30 + '"}'
    assert rows[500]["t"] == "text " * 10 + "500"
    print(f"{'binary' if binary else 'text'} mode: data buffers inside the capture: {measured}")


def test_native_objects_export_arrow_streams(workload: Workload) -> None:
    dec = _internal.Decoder()
    dec.push_stream(workload.table())
    native = dec.finish()
    table = native["tables"][workload.main]
    assert hasattr(table, "__arrow_c_stream__") and hasattr(table, "__arrow_c_schema__")
    reader = pa.RecordBatchReader.from_stream(table)
    assert reader.read_all().num_rows == 6
    assert pa.schema(table).names == reader.schema.names


def test_parse_error(workload: Workload) -> None:
    rows = list(workload.rows)
    i = next(i for i, r in enumerate(rows) if r[2][:1] == b"I")
    rows[i] = (rows[i][0], rows[i][1], rows[i][2][:7])
    with pytest.raises(pgoutput_arrow.ParseError) as e:
        pgoutput_arrow.decode([(lsn, data) for lsn, _, data in rows])
    assert e.value.lsn == rows[i][0] and e.value.index == i and e.value.offset is not None
    assert int_to_lsn(rows[i][0]) in str(e.value) and "truncated" in str(e.value).lower()
    assert isinstance(e.value, pgoutput_arrow.PgoutputError)


def test_unknown_relation(workload: Workload) -> None:
    rows = [(lsn, data) for lsn, _, data in workload.rows if data[:1] != b"R"]
    with pytest.raises(pgoutput_arrow.UnknownRelationError) as e:
        pgoutput_arrow.decode(rows)
    assert e.value.relation_id is not None and e.value.lsn is not None


def test_special_values(pg18: PgServer) -> None:
    pg18.execute("CREATE TABLE api_special (id int PRIMARY KEY, t time, d date)")
    pg18.execute("CREATE PUBLICATION api_special_pub FOR TABLE api_special")
    pg18.create_slot("api_special_slot")
    pg18.execute("INSERT INTO api_special VALUES (1, '24:00:00', 'infinity'), (2, '12:00', '2020-01-01')")
    rows = pg18.get_binary_changes("api_special_slot", {"proto_version": "1",
                                                         "publication_names": "api_special_pub"})
    pg18.drop_slot("api_special_slot")
    messages = [(lsn, data) for lsn, _, data in rows]
    # The default: time is PostgreSQL's text (24:00:00 too); a date Python's datetime cannot
    # hold (infinity) is null in the column and PostgreSQL's text in _special.
    default = pgoutput_arrow.decode(messages).tables["public.api_special"]
    assert default.column("t").to_pylist() == ["24:00:00", "12:00:00"]
    assert default.column("d").to_pylist() == [None, dt.date(2020, 1, 1)]
    assert default.column("_special").to_pylist() == [[("d", "infinity")], None]
    assert default.to_pandas()["d"].tolist() == [None, dt.date(2020, 1, 1)]
    # time64 keeps the value as a special one: null in the column, the text in _special.
    kept = pgoutput_arrow.decode(messages, time="time64", datetime_range="arrow").tables["public.api_special"]
    assert kept.column("t").to_pylist() == [None, dt.time(12)]
    assert kept.column("_special").to_pylist() == [[("t", "24:00:00")], None]
    # Under datetime_range="arrow" infinity is the type's largest value, as under "error".
    assert kept.column("d").cast(pa.int32()).to_pylist() == [2**31 - 1, 18262]
    with pytest.raises(pgoutput_arrow.DecodeValueError) as e:
        pgoutput_arrow.decode(messages, special_values="error", time="time64")
    assert e.value.table == "public.api_special" and e.value.column == "t"
    assert "24:00:00" in str(e.value) and int_to_lsn(e.value.lsn or 0) in str(e.value)
    assert e.value.index is not None and e.value.offset is not None
    nulls = pgoutput_arrow.decode(messages, special_values="null", time="time64").tables["public.api_special"]
    assert nulls.column("t").to_pylist() == [None, dt.time(12)]
    assert nulls.column("d").to_pylist() == [None, dt.date(2020, 1, 1)]
    text = pgoutput_arrow.decode(messages, special_values="text").tables["public.api_special"]
    assert text.column("t").to_pylist() == ["24:00:00", "12:00:00"]
    assert text.column("d").to_pylist() == ["infinity", "2020-01-01"]


def test_capture_errors(tmp_path: Path) -> None:
    with pytest.raises(pgoutput_arrow.CaptureError, match="no such file"):
        pgoutput_arrow.decode(tmp_path / "missing.parquet")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "x.parquet")
    with pytest.raises(pgoutput_arrow.CaptureError, match="lsn"):
        pgoutput_arrow.decode(tmp_path / "x.parquet")
    bad_lsn = pa.table({"lsn": ["nope"], "data": [b"B"]})
    with pytest.raises(pgoutput_arrow.CaptureError, match="'nope'|\"nope\""):
        pgoutput_arrow.decode(bad_lsn)
    with pytest.raises(TypeError):
        pgoutput_arrow.decode(b"B...")
    with pytest.raises(ValueError, match="special_values"):
        pgoutput_arrow.Decoder(special_values="maybe")  # type: ignore[arg-type]


def test_gil_is_released_while_decoding(workload: Workload) -> None:
    """Another Python thread runs while a large capture decodes. Deterministic, not timed:
    with a switch interval of minutes Python never takes the GIL from the main thread, so
    the other thread (woken just before the native call) can run before the call returns
    only if the call released the GIL."""
    body = [r[2] for r in workload.rows]
    big = pa.table({"lsn": pa.array([0] * (len(body) * 20000), pa.int64()),
                    "data": pa.array(body * 20000, pa.binary())})
    decoding = False
    seen: list[bool] = []
    go = threading.Event()

    def observe() -> None:
        go.wait()
        seen.append(decoding)  # needs the GIL: True only if it ran inside the native call

    native = pgoutput_arrow.Decoder()._native
    thread = CheckedThread(target=observe)
    thread.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(300.0)
    try:
        go.set()
        decoding = True
        native.push_stream(big)  # one native call
        decoding = False
    finally:
        sys.setswitchinterval(interval)
    thread.join()
    assert seen == [True], "the other thread could not run while the capture decoded"


def test_lsn_helpers() -> None:
    assert pgoutput_arrow.lsn_to_int("16/B374D848") == 0x16B374D848
    assert pgoutput_arrow.lsn_to_str(0x16B374D848) == "16/B374D848"
    assert pgoutput_arrow.lsn_to_str(0) == "0/0"
    with pytest.raises(ValueError):
        pgoutput_arrow.lsn_to_int("16-B3")


def test_version_is_cargos() -> None:
    cargo = (Path(__file__).parents[1] / "Cargo.toml").read_text()
    assert f'version = "{pgoutput_arrow.__version__}"' in cargo
    assert pgoutput_arrow.__version__ == _internal.__version__


def test_stubs_match_the_extension() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", "pgoutput_arrow._internal"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_replication_origin_is_reported_as_the_stream_carries_it(pg: PgServer, unique_name: str) -> None:
    """Transactions replayed under a replication origin (``pg_replication_origin_session_setup``)
    have its name in ``transactions.origin``, and its LSN in ``origin_lsn`` when sent whole
    (protocol 1; a streamed transaction's Origin message carries none). PostgreSQL sends no
    Origin message for a transaction streamed before its commit whose first change is a
    transactional logical message: none is reported then. The randomized tester's oracle
    expects an origin only where the stream holds one (tests/torture/run.py, ``origins_sent``)."""
    import psycopg2

    t, origin, slot = f"t_{unique_name}", f"o_{unique_name}"[:60], f"s_{unique_name}"[:60]
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, s text); CREATE PUBLICATION {t} FOR TABLE {t}")
    pg.execute(f"SELECT pg_replication_origin_create('{origin}')")
    pg.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    conn = psycopg2.connect(pg.dsn)
    conn.autocommit = True
    xids = []
    try:
        with conn.cursor() as cur:
            # Small and large (streamed: the servers' logical_decoding_work_mem is 64 kB)
            # transactions of inserts, then of one logical message.
            for body in (f"INSERT INTO {t} SELECT g, 'x' FROM generate_series(1, 10) g",
                         f"INSERT INTO {t} SELECT g, repeat('x', 100) FROM generate_series(11, 5000) g",
                         "SELECT pg_logical_emit_message(true, 'p', repeat('m', 100))",
                         "SELECT pg_logical_emit_message(true, 'p', repeat('m', 200000))"):
                cur.execute(f"SELECT pg_replication_origin_session_setup('{origin}')")
                cur.execute("BEGIN")
                cur.execute("SELECT pg_replication_origin_xact_setup('0/1234', now())")
                cur.execute(body)
                cur.execute("SELECT txid_current() & 4294967295")  # the xid, without its epoch
                xids.append(cur.fetchone()[0])
                cur.execute("COMMIT")
                cur.execute("SELECT pg_replication_origin_session_reset()")
            got = {}
            for proto, streaming in (("1", ""), ("2", ", 'streaming', 'on'")):
                cur.execute("SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_peek_binary_changes("
                            f"'{slot}', NULL, NULL, 'proto_version', '{proto}', 'publication_names', '{t}', "
                            f"'messages', 'true'{streaming})")
                rows = cur.fetchall()
                kinds = {x: "".join(chr(bytes(d)[0]) for _, rx, d in rows if rx == x) for x in xids}
                capture = pa.table({"lsn": [r[0] for r in rows], "xid": [r[1] for r in rows],
                                    "data": pa.array([bytes(r[2]) for r in rows], pa.binary())})
                tx = pgoutput_arrow.decode(capture).transactions.to_pylist()
                got[proto] = ([(r["origin"], r["origin_lsn"]) for r in sorted(tx, key=lambda r: xids.index(r["xid"]))],
                              kinds)
    finally:
        conn.close()
        pg.execute(f"SELECT pg_drop_replication_slot('{slot}')")
        pg.execute(f"SELECT pg_replication_origin_drop('{origin}')")
    whole, kinds = got["1"]
    assert whole == [(origin, 0x1234)] * 4 and all(k.startswith("BO") for k in kinds.values()), got
    streamed, kinds = got["2"]
    assert kinds[xids[1]].startswith("SOR") and kinds[xids[3]].startswith("SM"), kinds  # streamed
    assert "O" not in kinds[xids[3]], kinds
    assert streamed == [(origin, 0x1234), (origin, None), (origin, 0x1234), (None, None)], got
