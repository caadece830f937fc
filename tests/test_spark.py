"""pgoutput_arrow.spark on a real local Spark (local[2]) and a real PostgreSQL capture, and
the streaming source (pgoutput_arrow.spark.stream) on live slots of real PostgreSQL 18 and 15.

One SparkSession for the whole test session, with Arrow schema validation on. The package must be
built (``make develop``); the Spark workers run this interpreter, so they import the same build.
"""

from __future__ import annotations

import collections
import math
import os
import random
import re
import sys
import time
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pytest

import pyspark  # noqa: F401  (a dependency: missing it is a failure, not a skip)
import pgoutput_arrow  # noqa: E402
from pgoutput_arrow import _internal as sp_internal  # noqa: E402
from pgoutput_arrow import spark as sp  # noqa: E402  (the built package, native decoder included)
from pgoutput_arrow.spark._common import spark_schema as spark_schema_of  # noqa: E402

from spark_workload import run_workload  # noqa: E402
from threads import CheckedThread


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # The workers must run this interpreter (the .venv, with pyarrow and the built decoder),
    # whatever PYSPARK_PYTHON the environment had.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("pgoutput-arrow-tests")
               .config("spark.sql.execution.arrow.pyspark.validateSchema.enabled", "true")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               # time columns are TIME only with it (without: PostgreSQL's text, which
               # test_spark_default_session.py checks on an untuned session).
               .config("spark.sql.timeType.enabled", "true")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def capture(pg18: Any) -> tuple[list[tuple[int, int, bytes]], list[str], Any]:
    return run_workload(pg18, "spark_cap")


def _capture_df(spark: Any, rows: list[tuple[int, int, bytes]], lsn_text: bool = True) -> Any:
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("lsn", StringType() if lsn_text else LongType()),
                         StructField("xid", LongType()), StructField("data", BinaryType())])
    data = [(sp.lsn_to_text(l) if lsn_text else l, x, bytearray(d)) for l, x, d in rows]
    return spark.createDataFrame(data, schema)


#: The kind names of pgoutput_kind (the test's own table, to check the crates' against).
KIND_NAMES = {
    "B": "begin", "C": "commit", "O": "origin", "R": "relation", "Y": "type", "I": "insert",
    "U": "update", "D": "delete", "T": "truncate", "M": "message", "S": "stream_start",
    "E": "stream_stop", "c": "stream_commit", "A": "stream_abort", "b": "begin_prepare",
    "P": "prepare", "K": "commit_prepared", "r": "rollback_prepared", "p": "stream_prepare",
}


def _u32(data: bytes, pos: int) -> int:
    return int.from_bytes(data[pos:pos + 4], "big")


def _relation(data: bytes, in_stream: bool) -> tuple[int, bytes]:
    """A Relation message's id and body without the in-stream xid (a test-side reading of
    the format, independent of the crates')."""
    pos = 5 if in_stream else 1
    return _u32(data, pos), b"R" + data[pos:]


def _relation_ids(data: bytes, in_stream: bool) -> tuple[int, ...]:
    pos = 5 if in_stream else 1
    if data[:1] in (b"I", b"U", b"D"):
        return (_u32(data, pos),)
    if data[:1] == b"T":
        n = _u32(data, pos)
        return tuple(_u32(data, pos + 5 + 4 * i) for i in range(n))
    return ()


def _effective_relations(stream: list[tuple[int, bytes]]) -> collections.Counter:
    """Each change message with the Relation message in effect for it, as a decoder sees them."""
    in_stream = False
    rel: dict[int, bytes] = {}
    out: collections.Counter = collections.Counter()
    for _, d in stream:
        k = d[:1]
        if k == b"S":
            in_stream = True
        elif k == b"E":
            in_stream = False
        elif k == b"R":
            relid, body = _relation(d, in_stream)
            rel[relid] = body
        elif k in (b"I", b"U", b"D", b"T"):
            out[(d, tuple(rel[i] for i in _relation_ids(d, in_stream)))] += 1
    return out


def _as_table(rows: list[tuple[int, int, bytes, int]]) -> pa.Table:
    lsn, xid, data, tb = zip(*rows) if rows else ((), (), (), ())
    return pa.table({"lsn": pa.array(lsn, pa.int64()), "xid": pa.array(xid, pa.int64()),
                     "data": pa.array(data, pa.binary()), "_tb": pa.array(tb, pa.int64())})


def _rebuilt(rows: list[tuple[int, int, bytes, int]], catalog: pa.Table) -> list[tuple[int, bytes]]:
    out = sp.canonical_stream(_as_table(rows), catalog)
    return list(zip(out.column("lsn").to_pylist(), out.column("data").to_pylist()))


# --------------------------------------------------------------------------- decoder-free

def test_workers_run_this_interpreter_with_the_decoder(spark: Any) -> None:
    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import sys as wsys

        from pgoutput_arrow import _internal

        for _ in batches:
            yield pa.record_batch({"exe": [wsys.executable], "native": [_internal.__file__]})

    got = spark.range(2).repartition(2).mapInArrow(probe, "exe string, native string").collect()
    import pgoutput_arrow._internal as native

    assert {r.exe for r in got} == {sys.executable}
    assert {r.native for r in got} == {native.__file__}


def test_capture_xid_column_is_top_level_xid(capture: Any) -> None:
    """The fact partition independence rests on: every message of a transaction (streamed
    chunks, Stream Commit, Prepare, Commit Prepared, Rollback Prepared) carries its top-level
    xid in the SQL interface's xid column, except a subtransaction's Stream Abort, which carries
    the subtransaction's xid (its body names the top-level one); non-transactional messages
    carry 0."""
    rows, _, _ = capture
    begin_xid: dict[int, int] = {}
    aborts: list[tuple[int, int]] = []
    kinds_by_xid: dict[int, set[str]] = collections.defaultdict(set)
    for _, xid, d in rows:
        kinds_by_xid[xid].add(chr(d[0]))
        if d[:1] in (b"B",):
            begin_xid[xid] = int.from_bytes(d[17:21], "big")
        if d[:1] in (b"S", b"c"):
            assert int.from_bytes(d[1:5], "big") == xid
        if d[:1] == b"A":
            top, sub = int.from_bytes(d[1:5], "big"), int.from_bytes(d[5:9], "big")
            # The xid column names the (sub)transaction aborted; a subtransaction's abort
            # names, in its body, a top-level transaction that was streamed.
            assert xid == sub
            aborts.append((top, sub))
    streamed = {int.from_bytes(d[1:5], "big") for _, _, d in rows if d[:1] == b"S"}
    assert all(top in streamed for top, sub in aborts if top != sub), (aborts, streamed)
    assert all(k == x for k, x in begin_xid.items())
    assert kinds_by_xid[0] <= {"M"}
    assert any(d[:1] == b"A" and d[1:5] != d[5:9] for _, _, d in rows), "no subtransaction abort"
    streamed = [x for x, ks in kinds_by_xid.items() if "S" in ks]
    assert streamed and all({"S", "E", "I"} <= kinds_by_xid[x] for x in streamed)
    assert any({"b", "P", "K"} <= ks for ks in kinds_by_xid.values())
    assert any({"b", "P", "r"} <= ks for ks in kinds_by_xid.values())


def test_canonical_stream_keeps_each_changes_relation(capture: Any) -> None:
    rows, _, _ = capture
    original = _effective_relations([(l, d) for l, _, d in rows])
    catalog = _as_table([(l, x, d, 0) for l, x, d in rows])
    shuffled = [(l, x, d, 0) for l, x, d in rows]
    random.Random(7).shuffle(shuffled)
    assert _effective_relations(_rebuilt(shuffled, catalog)) == original
    # Split into parts that each see only some transactions: still the same.
    xids = sorted({x for _, x, _ in rows})
    parts = [[r for r in shuffled if r[1] in set(xids[i::3])] for i in range(3)]
    split: collections.Counter = collections.Counter()
    for part in parts:
        split += _effective_relations(_rebuilt(part, catalog))
    assert split == original
    # The catalog's own rows are enough (what decode() collects).
    kinds = set(sp_internal.CATALOG_KINDS)
    assert _effective_relations(_rebuilt(shuffled, _as_table([r for r in shuffled if r[2][0] in kinds]))) == original


def _transaction_parts(capture: Any) -> tuple[pa.Table, list[list[tuple[int, int, bytes, int]]]]:
    """The capture as a catalog, and its rows (numbered as a tie-breaker) in parts by
    transaction: all of them, then every third transaction from each of three offsets."""
    rows, _, _ = capture
    catalog = _as_table([(l, x, d, 0) for l, x, d in rows])
    numbered = [(l, x, d, i) for i, (l, x, d) in enumerate(rows)]
    xids = sorted({x for _, x, _ in rows})
    return catalog, [[r for r in numbered if r[1] in set(part)] for part in [xids] + [xids[i::3] for i in range(3)]]


def test_canonical_stream_does_not_depend_on_row_order(capture: Any) -> None:
    """One rebuild: the same messages in the same order, injected Relation and Type messages
    included, whatever order the rows of the same transactions come in."""
    catalog, parts = _transaction_parts(capture)
    injected = 0
    for part in parts:
        expected = _rebuilt(part, catalog)
        for seed in range(3):
            shuffled = list(part)
            random.Random(seed).shuffle(shuffled)
            assert _rebuilt(shuffled, catalog) == expected
        injected += sum(d[:1] in (b"R", b"Y") for _, d in expected) - sum(r[2][:1] in (b"R", b"Y") for r in part)
    assert injected > 0, "no partition needed a Relation message from another transaction"


def test_feed_rebuilt_decodes_as_the_rebuilt_stream(capture: Any) -> None:
    """Decoder.feed_rebuilt (the rebuild fed to the decoder as it is made, the rows' messages
    referenced where they are) gives what the rebuilt stream fed with feed_batch gives: every
    table equal, for the whole capture and for parts of its transactions, shuffled."""
    catalog, parts = _transaction_parts(capture)
    compared = 0
    for part in parts:
        random.Random(len(part)).shuffle(part)
        table = _as_table(part)
        want, got = pgoutput_arrow.Decoder(), pgoutput_arrow.Decoder()
        fed = want.feed_batch(sp.canonical_stream(table, catalog, history=True))
        assert got.feed_rebuilt(table, catalog, history=True) == fed
        a, b = want.finish(), got.finish()
        assert a.tables.keys() == b.tables.keys()
        for name in a.tables:
            assert b.tables[name].equals(a.tables[name]), name
            compared += a.tables[name].num_rows
        assert b.truncates.equals(a.truncates)
    assert compared > 0


def _begin(xid: int, lsn: int) -> bytes:
    return b"B" + lsn.to_bytes(8, "big") + (0).to_bytes(8, "big") + xid.to_bytes(4, "big")


def _commit(lsn: int) -> bytes:
    return b"C\0" + lsn.to_bytes(8, "big") + (lsn + 1).to_bytes(8, "big") + (0).to_bytes(8, "big")


def test_canonical_stream_after_a_rolled_back_definition() -> None:
    """A prepared transaction that changed a table's definition and was rolled back: its
    Relation message is in its body but not in the catalog, so the next transaction, whose
    change has the same catalog version as the changes before, still needs the old definition
    injected. Hand-built messages: PostgreSQL's order of such a capture, in miniature."""
    def relation(type_oid: int) -> bytes:
        return (b"R" + (16384).to_bytes(4, "big") + b"public\0t\0d" + (1).to_bytes(2, "big")
                + b"\x01id\0" + type_oid.to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True))

    def prepared(kind: bytes, xid: int, lsn: int) -> bytes:
        head = b"" if kind == b"b" else b"\0"
        return (kind + head + lsn.to_bytes(8, "big") + (lsn + 1).to_bytes(8, "big") + (0).to_bytes(8, "big")
                + ((0).to_bytes(8, "big") if kind == b"r" else b"") + xid.to_bytes(4, "big") + b"g\0")

    insert = b"I" + (16384).to_bytes(4, "big") + b"N" + (1).to_bytes(2, "big") + b"t" + (1).to_bytes(4, "big") + b"1"
    rows = [(10, 1, _begin(1, 11), 0), (10, 1, relation(23), 0), (10, 1, insert, 0), (11, 1, _commit(11), 0),
            (20, 2, prepared(b"b", 2, 21), 0), (20, 2, relation(20), 0), (20, 2, insert, 0),
            (21, 2, prepared(b"P", 2, 21), 0), (30, 2, prepared(b"r", 2, 30), 0),
            (40, 3, _begin(3, 41), 0), (40, 3, insert, 0), (41, 3, _commit(41), 0)]
    for order in (rows, rows[::-1]):
        got = _rebuilt(order, _as_table(rows))
        assert got.count((40, relation(23))) == 1 and got.count((40, relation(20))) == 0
        assert len(got) == len(rows) + 1


def test_canonical_streams_same_for_any_partitioning(spark: Any, capture: Any) -> None:
    """The executor half of decode(): the rebuilt streams do not depend on partitioning."""
    rows, _, _ = capture
    from pgoutput_arrow.spark._catalog_pass import collect_catalog, normalized
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    df = normalized(_capture_df(spark, rows), None)
    catalog = collect_catalog(df)
    out_schema = StructType([StructField("part", LongType()), StructField("pos", LongType()),
                             StructField("lsn", LongType()), StructField("data", BinaryType())])

    def rebuild(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import uuid

        got = [b for b in batches if b.num_rows]
        if not got:
            return
        out = sp.canonical_stream(pa.Table.from_batches(got), catalog)
        part = uuid.uuid4().int >> 65
        yield pa.record_batch({"part": pa.array([part] * out.num_rows, pa.int64()),
                               "pos": pa.array(range(out.num_rows), pa.int64()),
                               "lsn": out.column("lsn"), "data": out.column("data").cast(pa.binary())})

    def run(frame: Any) -> collections.Counter:
        parts: dict[int, list[tuple[int, int, bytes]]] = collections.defaultdict(list)
        for r in frame.mapInArrow(rebuild, out_schema).collect():
            parts[r.part].append((r.pos, r.lsn, bytes(r.data)))
        total: collections.Counter = collections.Counter()
        for messages in parts.values():
            total += _effective_relations([(l, d) for _, l, d in sorted(messages)])
        return total

    original = _effective_relations([(l, d) for l, _, d in rows])
    assert run(df.coalesce(1)) == original
    assert run(df.repartition(5).repartition(3, "xid")) == original


def test_relation_sent_by_a_transaction_that_committed_first(spark: Any, pg18: Any, unique_name: str) -> None:
    """Torture seed 416: after an ALTER TABLE, transaction A changes the table, then B changes
    it and commits first: the server decodes B first and sends the new Relation message in B,
    at an LSN above A's change. A's change needs that new definition, although its LSN is
    below the Relation's: a Relation message takes its place at its transaction's commit.
    Rebuilt alone, in any partition, A decodes with the new column."""
    name = unique_name
    pg18.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v int)")
    pg18.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
    pg18.create_slot(name)
    pg18.execute(f"INSERT INTO {name} VALUES (1, 1)")
    pg18.execute(f"ALTER TABLE {name} ADD COLUMN w text")
    a = pg18.connect(autocommit=False)
    try:
        a.cursor().execute(f"INSERT INTO {name} VALUES (2, 2, 'from a')")
        pg18.execute(f"INSERT INTO {name} VALUES (3, 3, 'from b')")
        a.commit()
    finally:
        a.close()
    rows = pg18.get_binary_changes(name, {"proto_version": "1", "publication_names": name})
    pg18.drop_slot(name)
    inserts = [(l, x) for l, x, d in rows if d[:1] == b"I"]
    relations = [(l, x) for l, x, d in rows if d[:1] == b"R"]
    a_insert = next((l, x) for l, x in inserts if x not in {rx for _, rx in relations})
    assert len(relations) == 2 and a_insert[0] < relations[1][0], (inserts, relations)
    want = pgoutput_arrow.decode(pa.table({"lsn": pa.array([l for l, _, _ in rows], pa.int64()),
                                           "data": pa.array([d for _, _, d in rows], pa.binary())}))
    want_rows = sorted(want.tables[f"public.{name}"].select(["id", "v", "w"]).to_pylist(), key=lambda r: r["id"])
    assert want_rows[1] == {"id": 2, "v": 2, "w": "from a"}
    # Transaction A alone (a partition without B), and all shuffled.
    catalog = _as_table([(l, x, d, 0) for l, x, d in rows])
    only_a = [(l, x, d, 0) for l, x, d in rows if x == a_insert[1]]
    decoder = pgoutput_arrow.Decoder(views=False)
    decoder.feed_batch(sp.canonical_stream(_as_table(only_a), catalog, history=True))
    got = decoder.finish().tables[f"public.{name}"].select(["id", "v", "w"]).to_pylist()
    assert got == [want_rows[1]]
    shuffled = [(l, x, d, 0) for l, x, d in rows][::-1]
    local = sp.decode_rows_locally(shuffled, {"views": False}).tables[f"public.{name}"]
    assert sorted(local.select(["id", "v", "w"]).to_pylist(), key=lambda r: r["id"]) == want_rows
    # On Spark, one transaction per partition.
    spark_rows = sp.decode(_capture_df(spark, rows).repartition(4), num_partitions=4)[f"public.{name}"]
    assert [r.asDict() for r in spark_rows.select("id", "v", "w").orderBy("id").collect()] == want_rows


def test_types_accepted_by_spark(spark: Any) -> None:
    import datetime
    import uuid

    from pyspark.sql import Row

    u = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    src = pa.table({
        "oid": pa.array([1, 4294967295, None], pa.uint32()),
        "u": pa.array([u.bytes, None, b"\x00" * 16], pa.binary(16)),
        # The decoder's uuid columns: pyarrow's canonical extension type.
        "ux": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([u.bytes, None, b"\x00" * 16], pa.binary(16))),
        "iv": pa.array([pa.scalar((1, 2, 3000), pa.month_day_nano_interval()).as_py(), None,
                        pa.scalar((-1, 0, -5), pa.month_day_nano_interval()).as_py()], pa.month_day_nano_interval()),
        "tm": pa.array([datetime.time(1, 2, 3, 4), None, datetime.time(23, 59, 59, 999999)], pa.time64("us")),
        "sv": pa.array(["a", None, "ccc"], pa.string_view()),
        "bv": pa.array([b"a", None, b"c"], pa.binary_view()),
        "ls": pa.array(["x", "y", None], pa.large_string()),
        "lst": pa.array([[1, None], None, []], pa.list_(pa.uint32())),
        "st": pa.array([{"k": 1, "v": "a"}, None, {"k": None, "v": None}],
                       pa.struct([("k", pa.uint32()), ("v", pa.string_view())])),
        "ts": pa.array([1, None, 2], pa.timestamp("us", tz="UTC")),
    })
    target = sp.to_spark_arrow_schema(src.schema)
    batch = sp.cast_for_spark(src.to_batches()[0], target)
    spark_schema = spark_schema_of(target)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    blob = sink.getvalue().to_pybytes()

    def emit(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            yield pa.ipc.open_stream(blob).read_next_batch()

    rows = spark.range(1).coalesce(1).mapInArrow(emit, spark_schema).collect()
    assert [r.oid for r in rows] == [1, 4294967295, None]
    assert rows[0].u == str(u) and rows[1].u is None and rows[2].u == str(uuid.UUID(int=0))
    assert [r.ux for r in rows] == [r.u for r in rows]
    assert rows[0].iv == Row(months=1, days=2, microseconds=3) and rows[1].iv is None
    assert rows[0].tm == datetime.time(1, 2, 3, 4)
    assert [r.sv for r in rows] == ["a", None, "ccc"]
    assert [r.bv for r in rows] == [bytearray(b"a"), None, bytearray(b"c")]
    assert rows[0].lst == [1, None] and rows[1].lst is None and rows[2].lst == []
    assert rows[0].st == Row(k=1, v="a") and rows[1].st is None


#: The Spark column type of each column of spark_workload.TYPE_COLUMNS: README's types table.
_README_SPARK_TYPES = {
    "id": "int", "o": "bigint", "i2": "smallint", "i4": "int", "i8": "bigint", "f4": "float",
    "f8": "double", "n10": "decimal(10,2)", "nfree": "string", "n50": "string", "t": "string",
    "vc": "string", "bp": "string", "ch": "string", "nm": "string", "ba": "binary",
    "bo": "boolean", "d": "date", "tm": "time", "ts": "timestamp_ntz", "tz": "timestamp",
    "iv": "struct<months:int,days:int,microseconds:bigint>", "u": "string", "js": "string",
    "jb": "string", "ai": "array<int>", "at": "array<string>", "en": "string", "ip": "string",
    "mo": "string", "pt": "string", "rg": "string", "au": "array<string>",
    "av": "array<struct<months:int,days:int,microseconds:bigint>>",
}


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with temporal types as their integers (±infinity dates and timestamps are beyond
    Python's datetime) and large/view strings and binaries as plain ones."""
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _plain_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type)) for f in t])
    return t


def _plain_rows(t: pa.Table) -> list[dict[str, Any]]:
    t = t.combine_chunks()
    plain = pa.schema([pa.field(f.name, _plain_type(f.type)) for f in t.schema])
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(t.columns, plain)], schema=plain).to_pylist()


def _same(a: Any, b: Any) -> bool:
    """Equality with NaN equal to NaN and -0.0 told from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.fixture(scope="session")
def types_capture(pg18: Any) -> dict[str, Any]:
    from spark_workload import run_types_workload

    return run_types_workload(pg18, "spark_types")


def test_every_type_family_decoded_on_spark_equals_single_process(spark: Any, types_capture: Any) -> None:
    """Real PostgreSQL 18 values of every type family of README's types table (oid, ints,
    floats with NaN/±Infinity, numeric with, without and beyond 38 digits of typmod, the text
    types, bytea, bool, date/time/timestamp/timestamptz with ±infinity, interval, uuid,
    json/jsonb, arrays with NULL elements (of int4, text, uuid, interval), an enum, inet, money,
    point, a range; all-NULL rows; REPLICA IDENTITY FULL so ``_before`` holds them all too),
    captured in text and binary mode:
    ``spark.decode`` on the local Spark (validateSchema on) gives, row by row, the values of the
    single-process ``decode()`` after the Arrow→Spark mapping, with README's Spark types; the
    mapped forms (uuid, interval, time, numeric as text, ...) are PostgreSQL's own values; text
    and binary captures give the same rows (the enum aside: its raw bytes in binary mode), the
    binary one decoded with view columns (``views=True``)."""
    import datetime

    import pgoutput_arrow
    from pyspark.sql import Row

    w = types_capture
    name, names = w["table"], w["columns"]
    by_mode: dict[str, list[dict[str, Any]]] = {}
    # Text mode with plain utf8/binary columns, binary mode with view columns (views=True).
    for mode, views in (("text", False), ("binary", True)):
        rows = w[mode]
        local = pgoutput_arrow.decode([(l, d) for l, _, d in rows], views=views,
                                      **sp.SPARK_DECODER_OPTIONS).tables[name]
        assert pa.types.is_string_view(local.schema.field("t").type) == views
        assert local.num_rows == 9, mode  # 6 inserts, 2 updates, 1 delete
        target = sp.to_spark_arrow_schema(local.schema)
        exp = pa.Table.from_batches([sp.cast_for_spark(b, target) for b in local.to_batches()], target)
        # Sliced batches (decode() and the data sources cut tables into 65536-row batches)
        # map to the same rows: list columns whose element type changes (uuid[], interval[],
        # text[] as views) with NULL arrays, inside _before too, once failed with "Null bitmap
        # with offsets slice not supported".
        whole = local.combine_chunks().to_batches()[0]
        for i in range(1, whole.num_rows - 1):
            part = sp.cast_for_spark(whole.slice(i, 2), target)
            assert _same(_plain_rows(pa.table(part)), _plain_rows(exp.slice(i, 2))), (mode, i)
        df = sp.decode(_capture_df(spark, rows).repartition(2), num_partitions=2, views=views)[name]

        # Spark's column types: README's table (the enum: binary, its raw bytes, in binary mode).
        readme = dict(_README_SPARK_TYPES, en="binary" if mode == "binary" else "string")
        types = {f.name: f.dataType.simpleString() for f in df.schema}
        assert [f.name for f in df.schema] == local.column_names, mode
        assert types["tm"].startswith("time") and type(df.schema["tm"].dataType).__name__ == "TimeType"
        types["tm"] = "time"
        assert {c: types[c] for c in readme} == readme, mode
        before = {f.name: f.dataType.simpleString() for f in df.schema["_before"].dataType.fields}
        before["tm"] = "time" if before["tm"].startswith("time") else before["tm"]
        assert before == readme, mode
        assert types["_unchanged"] == "array<string>" and types["_commit_ts"] == "timestamp"

        # Row by row against the single-process decoder, mapped: all columns but _seq (decode()
        # numbers rows, the decoder messages), which must give the same order.
        got_t = df.toArrow()
        key = lambda r: (r["_commit_lsn"], r["_lsn"], r["_op"], repr(r["id"]))  # noqa: E731
        got = sorted(_plain_rows(got_t), key=key)
        want = sorted(_plain_rows(exp), key=key)
        assert len(got) == len(want) == 9, mode
        for g, e in zip(got, want):
            g.pop("_seq"), e.pop("_seq")
            bad = [c for c in e if not _same(g[c], e[c])]
            assert not bad, (mode, e["id"], e["_op"], {c: (g[c], e[c]) for c in bad})
        order = lambda t: [(r["_lsn"], r["id"]) for r in sorted(_plain_rows(t), key=lambda r: (r["_commit_lsn"], r["_seq"]))]  # noqa: E731
        assert order(got_t) == order(exp), mode
        by_mode[mode] = got
        assert collections.Counter(r["_op"] for r in got) == {"insert": 6, "update": 2, "delete": 1}
        for r in got:
            if r["_op"] != "insert":  # REPLICA IDENTITY FULL: the old row whole
                assert list(r["_before"]) == ["id", *names] and r["_before"]["id"] in (1, 4, 5), r

        # The mapped forms are PostgreSQL's values: every string column of each insert is
        # PostgreSQL's text of it (uuid canonical, numeric beyond decimal128 exact, inet, money,
        # point, range, json/jsonb, bpchar padded); through collect(), as Spark users see them.
        text_cols = [c for c in names if readme[c] == "string"]
        inserts = {r.id: r for r in df.where("_op = 'insert'").select(
            "id", *text_cols, "iv", "tm", "n10", "o", "ai", "at", "au", "av").collect()}
        assert sorted(inserts) == [1, 2, 3, 4, 5, 6]
        for i, pg_row in w["pg_text"].items():
            assert {c: inserts[i][c] for c in text_cols} == {c: pg_row[c] for c in text_cols}, (mode, i)
        assert all(v is None for c, v in inserts[4].asDict().items() if c != "id")
        r2 = inserts[2]
        assert r2.iv == Row(months=14, days=3, microseconds=(4 * 3600 + 5 * 60 + 6) * 10**6 + 789 * 10**3)
        assert inserts[3].iv == Row(months=-1, days=-2, microseconds=-1)
        assert inserts[5].iv == Row(months=-178000000 * 12, days=0, microseconds=0)
        assert r2.tm == datetime.time(23, 59, 59, 999999) and inserts[3].tm == datetime.time(0, 0, 0, 1)
        assert str(r2.n10) == "99999999.99" and r2.o == 4294967295
        assert r2.ai == [1, None, -3] and r2.at == ["a b", None, "", 'q"t'] and inserts[1].ai == []
        assert inserts[3].ai == [None] and inserts[3].at == [None]
        assert r2.au == ["12345678-9abc-def0-1234-56789abcdef0", None] and inserts[3].au == [None]
        assert r2.av == [Row(months=0, days=1, microseconds=10**6), None, Row(months=-1, days=0, microseconds=0)]
        assert inserts[5].av == [Row(months=0, days=0, microseconds=1)] and inserts[1].av == []

    # Text and binary captures of the same changes: the same rows, the enum's bytes aside.
    assert len(by_mode["text"]) == len(by_mode["binary"])
    for t, b in zip(by_mode["text"], by_mode["binary"]):
        assert isinstance(b["en"], (bytes, type(None)))
        b = dict(b, en=None if b["en"] is None else b["en"].decode())
        if b["_before"] is not None:
            eb = b["_before"]["en"]
            b["_before"] = dict(b["_before"], en=None if eb is None else eb.decode())
        bad = [c for c in t if not _same(t[c], b[c])]
        assert not bad, (t["id"], t["_op"], {c: (t[c], b[c]) for c in bad})


def test_udfs_from_sql(spark: Any, capture: Any) -> None:
    rows, _, _ = capture
    sp.register(spark)
    _capture_df(spark, rows).createOrReplaceTempView("udf_capture")
    got = {r.kind: r.n for r in spark.sql(
        "SELECT pgoutput_kind(data) AS kind, count(*) AS n FROM udf_capture GROUP BY 1").collect()}
    want = collections.Counter(KIND_NAMES[chr(d[0])] for _, _, d in rows)
    assert got == dict(want)
    back = spark.sql("SELECT lsn, lsn_to_int(lsn) AS i, lsn_to_text(lsn_to_int(lsn)) AS t "
                     "FROM udf_capture").collect()
    assert all(r.t == r.lsn and r.i == sp.lsn_to_int(r.lsn) for r in back)
    relids = {r.rel for r in spark.sql(
        "SELECT DISTINCT pgoutput_relation(data) AS rel FROM udf_capture "
        "WHERE pgoutput_kind(data) = 'relation'").collect()}
    streamed = {x for _, x, d in rows if d[:1] == b"S"}
    assert relids == {_relation(d, x in streamed)[0] for _, x, d in rows if d[:1] == b"R"}
    assert sp.message_kind(b"Iabc") == "insert" and sp.message_kind(b"z") == "unknown"
    assert sp.message_kind(b"") is None


# --------------------------------------------------------------------------- with the decoder

def _normalize_table(t: pa.Table) -> list[tuple]:
    """The rows as a sorted multiset, without _seq (its order is checked separately)."""
    rows = t.to_pylist()
    for r in rows:
        r.pop("_seq", None)
    return sorted((tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows))


def _seq_runs(t: pa.Table) -> list[tuple[int, int, list[tuple]]]:
    """Rows in (_commit_lsn, _seq) order, grouped into runs of one (_commit_lsn, _lsn), each run
    a sorted multiset of the rows without _seq."""
    runs: list[tuple[int, int, list[tuple]]] = []
    for r in sorted(t.to_pylist(), key=lambda r: (r["_commit_lsn"], r["_seq"])):
        r.pop("_seq")
        row = tuple(sorted((k, repr(v)) for k, v in r.items()))
        if runs and runs[-1][:2] == (r["_commit_lsn"], r["_lsn"]):
            runs[-1][2].append(row)
        else:
            runs.append((r["_commit_lsn"], r["_lsn"], [row]))
    return [(c, l, sorted(rs)) for c, l, rs in runs]


def test_decode_partition_independent_equals_single_process(spark: Any, capture: Any, caplog: Any) -> None:
    """One partition, shuffled partitions (decoded again, shuffled by transaction: a log line
    says so) and a random range partitioning all give the single-process rows."""
    import logging

    import pgoutput_arrow

    rows, tables, options = capture
    local = pgoutput_arrow.Decoder(views=False)
    for l, _, d in rows:
        local.feed(d, l)
    expected = local.finish().tables
    df = _capture_df(spark, rows)
    one = sp.decode(df.coalesce(1), num_partitions=1)
    from pyspark.sql import functions as F

    with caplog.at_level(logging.INFO, logger="pgoutput_arrow.spark.batch"):
        many = sp.decode(df.repartition(7).sortWithinPartitions(F.rand(3)), num_partitions=5)
    assert "shuffled by transaction" in caplog.text
    # lsn as a long, range-partitioned in random order.
    third = sp.decode(_capture_df(spark, rows, lsn_text=False).orderBy(F.rand(5)), num_partitions=3)
    for name in tables:
        assert expected[name].num_rows > 0, name
        exp = sp.cast_for_spark(expected[name].combine_chunks().to_batches()[0])
        a = one[name].toArrow()
        b = many[name].toArrow()
        c = third[name].toArrow()
        assert _normalize_table(b) == _normalize_table(c) and _seq_runs(b) == _seq_runs(c), name
        assert _normalize_table(a) == _normalize_table(b) == _normalize_table(pa.table(exp)), name
        # _seq differs only among changes sharing an LSN: ordered by (_commit_lsn, _seq), the
        # rows are the single-process sequence up to permutations within runs of one _lsn.
        # (_seq values themselves differ: the decoder's counts messages, decode()'s counts rows.)
        assert _seq_runs(a) == _seq_runs(b) == _seq_runs(pa.table(exp)), name
    # _seq is the rank of a change within its transaction, across tables (docs/spark.md):
    # (_commit_lsn, _seq) is unique over every table, and _seq counts from 0.
    for result in (one, many):
        pairs = [(r["_commit_lsn"], r["_seq"]) for name in tables
                 for r in result[name].select("_commit_lsn", "_seq").toArrow().to_pylist()]
        assert len(set(pairs)) == len(pairs) and min(s for _, s in pairs) == 0


@pytest.mark.parametrize("handed_out", ["unpacked", "direct and from the driver"])
def test_decode_splits_transactions_across_partitions_without_a_shuffle(spark: Any, capture: Any, caplog: Any,
                                                                       monkeypatch: Any, handed_out: str) -> None:
    """A capture in its order, cut into contiguous partitions (as Spark splits files): every
    partition is decoded where it is, the transactions it holds only a part of (the streamed
    one with its rolled-back savepoint, the prepared ones whose COMMIT PREPARED comes later)
    rebuilt with the framing of the catalog scan, never decoded again shuffled. The rows equal
    a single-process decode, and ``_seq`` is the dense rank within each transaction, as with
    whole transactions: whichever way each table's rows are handed out (every table unpacked
    on the executors; or the largest as rows of the decoding pass, whatever its width, and the
    others from the driver)."""
    import logging

    from pgoutput_arrow.spark import _packing

    if handed_out == "unpacked":
        monkeypatch.setattr(_packing, "DIRECT_ROW_BYTES", 1 << 40)
        monkeypatch.setattr(_packing, "SMALL_TABLE", -1)
    else:
        monkeypatch.setattr(_packing, "DIRECT_ROW_BYTES", 0)

    import pgoutput_arrow
    from pgoutput_arrow.spark._catalog_pass import capture_catalog, normalized
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    rows, tables, _ = capture
    local = pgoutput_arrow.Decoder(views=False)
    for l, _, d in rows:
        local.feed(d, l)
    expected = local.finish().tables
    schema = StructType([StructField("lsn", LongType()), StructField("xid", LongType()),
                         StructField("data", BinaryType())])
    data = [(l, x, bytearray(d)) for l, x, d in rows]
    import pandas as pd

    frames = [spark.sparkContext.parallelize(data, parts).toDF(schema) for parts in (3, 17, 60)]
    # A local relation (createDataFrame of pandas): Spark would evaluate a projection of it on
    # the driver (found by the randomized tester, seed 9100); its partitions are the decode's.
    frames.append(spark.createDataFrame(pd.DataFrame(data, columns=["lsn", "xid", "data"]), schema))
    for parts, df in enumerate(frames):
        # A transaction spans partitions wherever there are several (a local relation has
        # one per core: one on local[1]).
        assert capture_catalog(normalized(df, None)).split or df.rdd.getNumPartitions() == 1, parts
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pgoutput_arrow.spark.batch"):
            decoded = sp.decode(df, with_truncates=True)
        assert "shuffled by transaction" not in caplog.text, parts
        _assert_decoded_as_one_process(decoded, expected, tables, parts)


def _assert_decoded_as_one_process(decoded: dict[str, Any], expected: dict[str, pa.Table], tables: list[str],
                                   label: Any) -> None:
    """``decode(..., with_truncates=True)``'s tables hold the rows of a single-process decode
    (``expected``), in its order within each run of one LSN, and ``_seq`` is dense from 0 within
    each transaction, across the tables and the TRUNCATEs."""
    pairs: list[tuple[int, int]] = []
    for name in tables:
        got = decoded[name].toArrow()
        exp = pa.table(sp.cast_for_spark(expected[name].combine_chunks().to_batches()[0]))
        assert _normalize_table(got) == _normalize_table(exp), (label, name)
        assert _seq_runs(got) == _seq_runs(exp), (label, name)
        pairs += [(r["_commit_lsn"], r["_seq"]) for r in got.select(["_commit_lsn", "_seq"]).to_pylist()]
    pairs += [(r["_commit_lsn"], r["_seq"]) for r in
              decoded[sp.TRUNCATES].select("_commit_lsn", "_seq").toArrow().to_pylist()]
    by_commit: dict[int, list[int]] = collections.defaultdict(list)
    for commit, seq in pairs:
        by_commit[commit].append(seq)
    assert all(sorted(v) == list(range(len(v))) for v in by_commit.values()), label


@pytest.mark.parametrize("lsn_text,one_group", [(True, False), (False, False), (True, True)],
                         ids=["lsn text", "lsn long", "one row group a file, cut in rows"])
def test_decode_of_parquet_files_read_by_the_tasks(spark: Any, capture: Any, caplog: Any, tmp_path: Any,
                                                  lsn_text: bool, one_group: bool) -> None:
    """``decode(spark.read.parquet(dir))``: the tasks read the files' row groups themselves,
    in pieces (here many, a transaction cut across several: the row groups are small and so
    is ``maxPartitionBytes``; or each file one row group, cut in row ranges to give every core
    its pieces), and the rows equal a single-process decode, ``_seq`` the rank within each
    transaction. The same files filtered, or with an order column the files do not hold, go
    through Spark (no log line), with the same rows."""
    import logging

    import pyarrow.parquet as pq
    from pgoutput_arrow.spark._pieces import (catalog_rows_fn, catalog_rows_here, catalog_schema, pieces_frame,
                                              plain_parquet_capture)

    rows, tables, _ = capture
    local = pgoutput_arrow.Decoder(views=False)
    for l, _, d in rows:
        local.feed(d, l)
    expected = local.finish().tables
    lsns = [sp.lsn_to_text(l) for l, _, _ in rows] if lsn_text else [l for l, _, _ in rows]
    files = pa.table({"lsn": lsns, "xid": pa.array([x for _, x, _ in rows], pa.int64()),
                      "data": pa.array([d for _, _, d in rows], pa.binary()),
                      "n": pa.array(range(len(rows)), pa.int64())})
    half = len(rows) // 2
    for i, part in enumerate((files.slice(0, half), files.slice(half))):
        pq.write_table(part, tmp_path / f"part-{i}.parquet",
                       row_group_size=len(rows) if one_group else max(1, len(rows) // 24))
    (tmp_path / "_SUCCESS").write_bytes(b"")
    df = spark.read.parquet(str(tmp_path))
    settings = {"spark.sql.files.maxPartitionBytes": "2k", "spark.sql.files.openCostInBytes": "1k"}
    before = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        pieces = plain_parquet_capture(df.select("lsn", "xid", "data"), None)
        assert pieces is not None and len(pieces.files) == 2 and pieces.lsn_text == lsn_text
        cut = [p for piece in pieces.pieces for p in piece]
        if one_group:
            # Two files of one row group each: cut in row ranges, every core two pieces.
            cores = spark.sparkContext.defaultParallelism
            assert len(pieces.pieces) == 2 * cores and {g for _, g, _, _ in cut} == {0}, pieces.pieces
            assert any(start > 0 for _, _, start, _ in cut)
        else:
            assert len(pieces.pieces) > 8 and all(start == 0 for _, _, start, _ in cut)
        for other in (df.where("xid >= 0"), df.limit(5), spark.createDataFrame(files.to_pandas())):
            assert plain_parquet_capture(other, None) is None
        assert plain_parquet_capture(df, "no_such_column") is None
        # The catalog's rows read by a Spark job (a task per piece) or here (a row group at a
        # time, for a capture of one split's bytes at most) are the same.
        job = pieces_frame(spark, pieces).mapInArrow(catalog_rows_fn(pieces), spark_schema_of(catalog_schema(pieces)))
        whole = [sorted(map(repr, t.filter(t.column("bytes").is_null()).to_pylist()))
                 for t in (job.toArrow(), catalog_rows_here(pieces))]
        assert whole[0] == whole[1] and len(whole[0]) > 10
        results = []
        for how, frame, order, split in (("tasks", df, None, "2k"), ("tasks, ordered", df, "n", "2k"),
                                         ("tasks, catalog read here", df, None, "1g"),
                                         ("spark", df.where("xid >= 0"), None, "2k")):
            spark.conf.set("spark.sql.files.maxPartitionBytes", split)
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="pgoutput_arrow.spark.batch"):
                decoded = sp.decode(frame, order_col=order, with_truncates=True)
            assert ("read the capture's 2 Parquet file(s) themselves" in caplog.text) == (how != "spark"), how
            assert "shuffled by transaction" not in caplog.text, how
            results.append((how, decoded))
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    for how, decoded in results:
        _assert_decoded_as_one_process(decoded, expected, tables, how)


def test_a_piece_of_a_row_group_reads_exactly_its_rows(tmp_path: Any) -> None:
    """A piece holding rows ``start .. end`` of a row group (a capture of fewer row groups
    than pieces) reads them, and only as far as ``end``, whatever the cut's place against the
    reader's batches: random cuts of two row groups, against the whole row group sliced."""
    import pyarrow.parquet as pq
    from pgoutput_arrow.spark import _pieces

    path = tmp_path / "part-0.parquet"
    n = 3 * _pieces._RANGE_BATCH + 17
    table = pa.table({"lsn": pa.array(np.arange(2 * n), pa.int64()), "xid": pa.array(np.arange(2 * n) // 7),
                      "data": pa.array([b"I" * (i % 50) for i in range(2 * n)], pa.binary())})
    pq.write_table(table, path, row_group_size=n)
    rng = random.Random(5)
    cuts = [(0, n), (0, 1), (n - 1, n), (_pieces._RANGE_BATCH - 1, _pieces._RANGE_BATCH + 1)]
    cuts += [tuple(sorted(rng.sample(range(n + 1), 2))) for _ in range(30)]  # type: ignore[misc]
    for g in (0, 1):
        whole = pq.ParquetFile(path).read_row_group(g)
        for start, end in cuts:
            pieces = _pieces.CapturePieces((str(path),), (((0, g, start, end),),), lsn_text=False, order_col=None)
            got = pieces.read(0)
            assert got.column("lsn").to_pylist() == whole.column("lsn").to_pylist()[start:end], (g, start, end)
            assert got.column("data").to_pylist() == whole.column("data").to_pylist()[start:end], (g, start, end)


def test_a_piece_whose_file_was_cut_short_names_it(tmp_path: Any) -> None:
    """A capture file cut short after ``decode()`` planned its pieces: the task's error is a
    CaptureError naming the file and the row group, not pyarrow's bare one."""
    import pyarrow.parquet as pq
    from pgoutput_arrow.spark._pieces import CapturePieces

    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"lsn": ["0/1", "0/2"], "xid": pa.array([1, 1], pa.int64()),
                             "data": pa.array([b"B", b"C"], pa.binary())}), path, row_group_size=1)
    pieces = CapturePieces((str(path),), (((0, 0, 0, 1), (0, 1, 0, 1)),), lsn_text=True, order_col=None)
    assert pieces.read(0).column("xid").to_pylist() == [1, 1]
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(pgoutput_arrow.CaptureError, match=r"row group 0 of .*part-0\.parquet"):
        pieces.read(0)
    with pytest.raises(pgoutput_arrow.CaptureError, match=r"row group 1 of .*part-0\.parquet"):
        list(pieces.read_by_row_group(0, 1, [(0, 0, 1)]))


def test_decode_hands_out_the_largest_table_direct_only_when_its_rows_are_wide() -> None:
    """The catalog scan's sample picks the table decoded direct: the one with the most sampled
    bytes, and only if its changes average 1 KiB (narrow rows are cheaper unpacked)."""
    from pgoutput_arrow.spark._catalog_pass import sample_sizes, split_transactions
    from pgoutput_arrow.spark._packing import largest

    schemas = {name: pa.schema([], metadata={b"pg.relation_id": str(relid).encode()})
               for name, relid in (("a", 10), ("b", 20), ("c", 30))}
    names = sorted(schemas)
    assert largest(names, schemas, {10: (5, 9000), 20: (50, 20000), 30: (1, 100)}) == -1
    assert largest(names, schemas, {10: (5, 9000), 20: (2, 4000), 99: (1, 10**9)}) == 0
    assert largest(names, schemas, {}) == -1 and largest([], {}, {10: (1, 5000)}) == -1
    assert split_transactions(np.array([7, 7, 8, 9, 9, 0, 0]), np.array([0, 1, 1, 2, 2, 0, 3])) == [7]
    heads = pa.table({"data": pa.array([b"I\x00\x00\x00\x0aN\x00\x01t", b"I\x00\x00\x03\xe8\x00\x00\x00\x14"]),
                      "bytes": pa.array([100, 300], pa.int32())})
    sizes = sample_sizes(heads)
    assert sizes[10] == (1, 100) and sizes[1000] == (1, 300) and sizes[20] == (1, 300)


def test_the_direct_table_is_one_projection_keeping_any_column_name(spark: Any) -> None:
    """The direct table's DataFrame is a projection of the pass's ``f0``, ``f1``, … written as
    SQL text: any PostgreSQL column name comes out as it is (backquotes, spaces, dots, case),
    and the ``_seq`` of a split transaction's rows moves past its parts in partitions before,
    by partition and xid, the others' unchanged."""
    from pgoutput_arrow.spark._packing import direct_columns

    names = ["a`b", "x y", "Ünï.col", "SELECT", "_xid", "_seq"]
    target = pa.schema([(n, pa.int64()) for n in names])
    rows = [(0, 1, 10, 20, 30, 40, 7, 0), (0, 2, 11, 21, 31, 41, 7, 0), (0, 2, 12, 22, 32, 42, 8, 1),
            (0, 3, 13, 23, 33, 43, 1 << 40, 2)]
    df = spark.createDataFrame(rows, ["_t", "_p", *[f"f{j}" for j in range(len(names))]])
    got = df.selectExpr(*direct_columns(target, {2: {7: 5, 8: 100}, 3: {1 << 40: 9}}))
    assert got.columns == names
    out = sorted(tuple(r) for r in got.collect())
    assert out == [(10, 20, 30, 40, 7, 0), (11, 21, 31, 41, 7, 5), (12, 22, 32, 42, 8, 101),
                   (13, 23, 33, 43, 1 << 40, 11)]
    assert [tuple(r) for r in df.selectExpr(*direct_columns(target, {})).select("_seq").collect()] == \
        [(0,), (0,), (1,), (2,)]


def test_the_catalog_scan_samples_every_table_of_a_repeated_pattern() -> None:
    """The catalog scan samples changes at random, not every n-th row: a workload whose
    transactions repeat one pattern of changes (pgbench's: Begin, then an Update of each of
    three tables and an Insert, then Commit) has every table sampled in proportion, where a
    fixed stride of 64 rows met the same places of the pattern and never pgbench_branches."""
    from pgoutput_arrow.spark._catalog_pass import sample_sizes
    from pgoutput_arrow.spark._pieces import SAMPLE_EVERY, catalog_rows

    pattern = [b"B"] + [kind + relid.to_bytes(4, "big") + b"N\x00\x01t\x00\x00\x00\x01x"
                        for kind, relid in ((b"U", 10), (b"U", 20), (b"U", 30), (b"I", 40))] + [b"C"]
    txns = 20_000
    data = pattern * txns
    rows = pa.table({"lsn": pa.array([f"0/{i:X}" for i in range(len(data))]),
                     "xid": pa.array(np.repeat(np.arange(txns, dtype=np.int64), len(pattern))),
                     "data": pa.array(data, pa.binary())})
    schema = pa.schema([("p", pa.int32()), ("xid", pa.int64()), ("lsn", pa.string()), ("data", pa.binary()),
                        ("bytes", pa.int64())])
    kept = pa.Table.from_batches(list(catalog_rows(3, rows, schema)), schema=schema)
    sampled = sample_sizes(kept.filter(kept.column("bytes").is_valid()))
    expected = txns / SAMPLE_EVERY
    for relid in (10, 20, 30, 40):
        count, size = sampled.get(relid, (0, 0))
        assert 0.7 * expected < count < 1.3 * expected and size == 14 * count, (relid, count, expected)
    # The same rows each time: the sample is seeded by the piece.
    again = pa.Table.from_batches(list(catalog_rows(3, rows, schema)), schema=schema)
    assert again.equals(kept)


def test_small_tables_are_collected_by_the_decoding_pass_itself(spark: Any) -> None:
    """The tables the catalog's sample calls small are collected by the decoding pass's own
    job: handing them out from the driver runs no job, and a small table the guess missed is
    collected by one. Each table's rows are its own, unpacked."""
    from pgoutput_arrow.spark._packing import PACKED, ipc_value, likely_small, small_tables, from_driver, unpack_fn

    target = pa.schema([pa.field("v", pa.int64()), pa.field("_seq", pa.int64())])
    chunk = [pa.record_batch([pa.array([t * 100 + i for i in range(3)], pa.int64()), pa.array([0, 1, 2], pa.int64())],
                             schema=target) for t in range(3)]
    packed_rows = pa.table({"_t": pa.array([0, 1, 2], pa.int32()), "_p": pa.array([0, 0, 1], pa.int32()),
                            "ipc": pa.concat_arrays([ipc_value(b) for b in chunk])}, schema=PACKED)
    packed = spark.createDataFrame(packed_rows.to_pandas(), spark_schema_of(PACKED))
    tracker = spark.sparkContext.statusTracker()

    def handed_out(collect: list[int]) -> tuple[dict[int, list[int]], int]:
        group = f"from-driver-{collect}"
        spark.sparkContext.setJobGroup(group, group)
        try:
            collected = packed_rows.filter(pa.compute.is_in(packed_rows.column("_t"), pa.array(collect, pa.int32())))
            out = from_driver(packed, [0, 1, 2], [target] * 3, unpack_fn({}), collected, collect)
            got = {t: sorted(df.toArrow().column("v").to_pylist()) for t, df in out.items()}
            jobs = len(tracker.getJobIdsForGroup(group))
        finally:
            spark.sparkContext.setJobGroup("", "")
        return got, jobs - 3  # each table's toArrow above is a job of its own

    want = {t: [t * 100 + i for i in range(3)] for t in range(3)}
    assert handed_out([0, 1, 2]) == (want, 0)
    assert handed_out([0, 2]) == (want, 1)
    # The guess: by the sample's estimate, smallest first, the direct table never.
    schemas = {n: pa.schema([], metadata={b"pg.relation_id": str(relid).encode()})
               for n, relid in (("a", 10), ("b", 20), ("c", 30))}
    names = sorted(schemas)
    sampled = {10: (1, 100), 20: (10**4, 10**6), 30: (2, 200)}
    assert likely_small(names, schemas, sampled, 3, -1, 64 << 20) == [0, 2]
    assert likely_small(names, schemas, sampled, 4, 2, 64 << 20) == [3, 0]
    assert small_tables({0: 10, 1: 5 << 20, 2: 30}, 3, -1, 64 << 20) == [0, 2]


def test_a_small_table_without_rows_comes_from_the_driver(spark: Any) -> None:
    """A table of the catalog none of whose rows the capture holds, handed out from the driver:
    an empty DataFrame of its schema, nested columns included (pyspark's createDataFrame fails
    on a table of no chunks with one; found by the randomized tester, seed 9500)."""
    from pgoutput_arrow.spark._packing import PACKED, from_driver, unpack_fn

    target = pa.schema([pa.field("_before", pa.struct([pa.field("at", pa.timestamp("us", "UTC"))])),
                        pa.field("_seq", pa.int64())])
    packed = spark.createDataFrame([], spark_schema_of(PACKED))
    small = from_driver(packed, [0], [target], unpack_fn({}))
    got = small[0].toArrow()
    assert got.num_rows == 0 and got.column_names == ["_before", "_seq"]


def test_udtf_from_sql(spark: Any, capture: Any) -> None:
    """Each change the single-process decoder gives comes out of the SQL UDTF once, with the
    same table, op, LSNs, xid, key text (new and old) and unchanged-TOAST columns; the capture
    spans several Spark partitions and is gathered WITH SINGLE PARTITION."""
    rows, tables, _ = capture
    sp.register(spark)
    _capture_df(spark, rows).repartition(3).createOrReplaceTempView("udtf_capture")
    got = spark.sql(
        "SELECT `table`, op, lsn, commit_lsn, xid, seq, coalesce(new['id'], new['a']) AS k, "
        "coalesce(old['id'], old['a']) AS ok, new['b'] AS b, unchanged FROM pgoutput_changes("
        "TABLE(SELECT lsn, xid, data FROM udtf_capture) WITH SINGLE PARTITION)").collect()
    local = dec_tables_cache(rows)
    want: collections.Counter = collections.Counter()
    for name, t in local.items():
        key = "id" if "id" in t.column_names else "a"
        for r in t.to_pylist():
            before = r["_before"] or {}
            want[(name, r["_op"], r["_lsn"], r["_commit_lsn"], r["_xid"],
                  None if r[key] is None else str(r[key]),
                  None if before.get(key) is None else str(before[key]),
                  r.get("b"), tuple(r["_unchanged"] or ()))] += 1
    have = collections.Counter((r.table, r.op, r.lsn, r.commit_lsn, r.xid, r.k, r.ok, r.b,
                                tuple(r.unchanged or ())) for r in got)
    assert sum(want.values()) > 2000 and {k[0] for k in want} == set(tables)
    assert have == want
    # seq orders the changes of a table as the single-process decoder does, up to shared LSNs.
    for name in tables:
        mine = [r.lsn for r in sorted((r for r in got if r.table == name), key=lambda r: (r.commit_lsn, r.seq))]
        theirs = [r["_lsn"] for r in sorted(local[name].to_pylist(),
                                            key=lambda r: (r["_commit_lsn"], r["_seq"]))]
        assert mine == theirs, name


_DEC_CACHE: dict[int, Any] = {}


def dec_tables_cache(rows: list[tuple[int, int, bytes]]) -> dict[str, pa.Table]:
    import pgoutput_arrow

    if id(rows) not in _DEC_CACHE:
        dec = pgoutput_arrow.Decoder(views=False)
        for l, _, d in rows:
            dec.feed(d, l)
        _DEC_CACHE[id(rows)] = dec.finish().tables
    return _DEC_CACHE[id(rows)]


def test_apply_changes_equals_postgres(spark: Any, pg18: Any, capture: Any) -> None:
    """Keyed tables (TOAST carried over, key changes, deletes) and the REPLICA IDENTITY FULL
    table keyed on all its columns, truncated before its last insert."""
    rows, tables, _ = capture
    decoded = sp.decode(_capture_df(spark, rows).repartition(3), with_truncates=True)
    truncates = decoded[sp.TRUNCATES]
    local = dec_tables_cache(rows)
    assert truncates.count() == 1 and truncates.first().relations == [tables[2]]
    for name, keys, order in ((tables[0], ["id"], "id"), (tables[1], ["id"], "id"),
                              (tables[2], ["a", "b"], "a, b")):
        assert local[name].num_rows > 0
        state = sp.apply_changes(decoded[name], keys, truncates=truncates, table=name).orderBy(keys).collect()
        cols = [c for c in decoded[name].columns if not c.startswith("_")]
        want = pg18.query(f"SELECT {', '.join(cols)} FROM {name} ORDER BY {order}")
        assert len(want) > 0
        assert [tuple(r[c] for c in cols) for r in state] == [tuple(w) for w in want], name


def test_batch_data_source(spark: Any, capture: Any, tmp_path: Any) -> None:
    import pyarrow.parquet as pq

    rows, tables, _ = capture
    path = str(tmp_path / "capture.parquet")
    pq.write_table(pa.table({"lsn": [sp.lsn_to_text(l) for l, _, _ in rows],
                             "xid": [x for _, x, _ in rows], "data": [d for _, _, d in rows]}), path)
    sp.register(spark)
    df = spark.read.format("pgoutput").option("table", tables[0]).load(path)
    decoded = sp.decode(_capture_df(spark, rows))
    assert _normalize_table(df.toArrow()) == _normalize_table(decoded[tables[0]].toArrow())
    # A misspelt option fails at load(), naming it and the nearest option, not ignored.
    with pytest.raises(Exception, match="(?i)" + re.escape("unknown option 'tabel' (did you mean 'table'?)")):
        spark.read.format("pgoutput").option("tabel", tables[0]).load(path)


def test_decode_binary_capture_keeps_raw_enum_and_composite_bytes(spark: Any, pg18: Any,
                                                                  unique_name: str) -> None:
    """A capture taken with ``binary 'true'``: enum and composite columns are binary (the send
    bytes) in Spark as in the single-process decoder; the mode is detected from the data."""
    name = unique_name
    pg18.execute(f"CREATE TYPE {name}_mood AS ENUM ('sad', 'happy')")
    pg18.execute(f"CREATE TYPE {name}_pair AS (x int, y text)")
    pg18.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, m {name}_mood, p {name}_pair)")
    pg18.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")
    pg18.create_slot(name)
    pg18.execute(f"INSERT INTO {name} VALUES (1, NULL, NULL), (2, 'happy', ROW(7, 'q')), (3, 'sad', NULL)")
    rows = pg18.get_binary_changes(name, {"proto_version": "1", "publication_names": name,
                                          "binary": "true"})
    pg18.drop_slot(name)
    df = _capture_df(spark, rows).repartition(3)
    got = sp.decode(df)[f"public.{name}"].orderBy("id").collect()
    local = sp.decode_rows_locally([(l, x, d, i) for i, (l, x, d) in enumerate(rows)],
                                   {"views": False}).tables[f"public.{name}"]
    assert pa.types.is_binary(local.schema.field("m").type)
    assert [r.id for r in got] == [1, 2, 3]
    assert [None if r.m is None else bytes(r.m) for r in got] == [None, b"happy", b"sad"]
    assert [None if r.p is None else bytes(r.p) for r in got] == \
        [None if v is None else bytes(v) for v in local.sort_by("id").column("p").to_pylist()]


# --------------------------------------------------------------------------- streaming source

def _slot_position(pg: Any, slot: str) -> int:
    return sp.lsn_to_int(pg.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                   "WHERE slot_name = %s", (slot,)))


def _read_range(reader: Any, start: dict, end: dict) -> list[dict]:
    return [r for part in reader.partitions(start, end) for b in reader.read(part) for r in b.to_pylist()]


def _slot_reaches(pg: Any, slot: str, lsn: int, timeout: float = 10.0) -> int:
    """The slot's position once it is ``lsn`` (the walsender applies a status update when it
    reads it), or as it stands after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (position := _slot_position(pg, slot)) != lsn and time.monotonic() < deadline:
        time.sleep(0.05)
    return position


def _next_offset(reader: Any, start: dict, limit: Any, timeout: float = 20.0) -> dict:
    """The reader's next offset past ``start``, polled as Spark polls (the stream may need a
    moment to start sending)."""
    deadline = time.monotonic() + timeout
    while (end := reader.latestOffset(start, limit)) == start and time.monotonic() < deadline:
        pass
    return end


def test_stream_reader_moves_the_slot_only_on_commit(pg: Any, unique_name: str) -> None:
    """The stream reader's driver and executor halves against a real slot: offsets cut at
    whole transactions (a transaction larger than the limit is not split), reading and polling
    leave the slot alone, commit(end) moves it exactly to end, the ranges planned before a
    restart are read again from the slot with the same rows, and an idle publication still
    lets the slot advance (through an empty batch Spark commits)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from pgoutput_arrow.exceptions import ReplicationError
    from pgoutput_arrow.spark.stream import PgoutputStreamReader, stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text); CREATE TABLE {t}_quiet (x text); "
               f"CREATE TABLE {t}_other (id int); CREATE PUBLICATION {pub} FOR TABLE {t}, {t}_other")
    pg.create_slot(slot)
    initial = _slot_position(pg, slot)
    opts = {"dsn": pg.dsn, "slot": slot, "publication": pub, "table": f"public.{t}",
            "idleAdvanceBytes": "65536", "pollInterval": "0"}
    reader = PgoutputStreamReader(opts, stream_schema(opts))
    start = reader.initialOffset()
    assert start == {"lsn": sp.lsn_to_text(initial)}
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # nothing yet

    for i in (1, 2, 3):
        pg.execute(f"INSERT INTO {t} VALUES ({i}, 'one')")
    pg.execute(f"INSERT INTO {t} SELECT g, 'bulk' FROM generate_series(100, 149) g")  # 50 changes
    pg.execute(f"BEGIN; INSERT INTO {t}_other VALUES (7); UPDATE {t} SET v = 'two' WHERE id = 1; "
               f"DELETE FROM {t} WHERE id = 2; COMMIT")
    pg.execute(f"BEGIN; INSERT INTO {t} VALUES (9, 'rolled back'); ROLLBACK")
    time.sleep(0.5)

    first = _next_offset(reader, start, ReadMaxRows(2))
    second = _next_offset(reader, first, ReadMaxRows(2))
    third = _next_offset(reader, second, ReadMaxRows(2))
    pg.execute(f"INSERT INTO {t}_quiet VALUES ('moves the WAL on')")
    last = _next_offset(reader, third, ReadAllAvailable())
    ranges = ((start, first), (first, second), (second, third), (third, last))
    batches = [_read_range(reader, a, b) for a, b in ranges]
    assert [[(r["_op"], r["id"]) for r in b] for b in batches[:2]] == \
        [[("insert", 1), ("insert", 2)], [("insert", 3)]]
    assert [r["id"] for r in batches[2]] == list(range(100, 150))  # whole, over the limit
    # _seq is the rank within the transaction across every table: the other table's insert
    # came first.
    assert [(r["_op"], r["id"], r["v"], r["_seq"]) for r in batches[3]] == \
        [("update", 1, "two", 1), ("delete", 2, None, 2)]
    time.sleep(0.5)
    assert _slot_position(pg, slot) == initial  # polling and reading moved nothing

    # A restarted query: a new reader plans nothing itself and reads the batches its
    # checkpoint names, from the slot: the same rows.
    reader.stop()
    fresh = PgoutputStreamReader(opts, reader.schema)
    assert [_read_range(fresh, a, b) for a, b in ranges] == batches
    fresh.commit(second)
    assert _slot_reaches(pg, slot, sp.lsn_to_int(second["lsn"])) == sp.lsn_to_int(second["lsn"])
    fresh.commit(first)  # older than the slot: nothing moves backwards, no error
    assert _slot_position(pg, slot) == sp.lsn_to_int(second["lsn"])
    fresh.commit(last)
    assert _slot_reaches(pg, slot, sp.lsn_to_int(last["lsn"])) == sp.lsn_to_int(last["lsn"])

    # Only an unpublished table changes: once the server wrote more than idleAdvanceBytes,
    # the offset moves past it (an empty batch) so that the slot need not hold that WAL.
    pg.execute(f"INSERT INTO {t}_quiet SELECT repeat('x', 200) FROM generate_series(1, 2000)")
    idle = _next_offset(fresh, last, ReadAllAvailable())
    assert sp.lsn_to_int(idle["lsn"]) - sp.lsn_to_int(last["lsn"]) >= 65536
    assert _read_range(fresh, last, idle) == []
    time.sleep(0.3)
    assert _slot_position(pg, slot) == sp.lsn_to_int(last["lsn"])  # only Spark's commit moves it
    fresh.commit(idle)
    assert _slot_reaches(pg, slot, sp.lsn_to_int(idle["lsn"])) == sp.lsn_to_int(idle["lsn"])

    # Someone else consumed the slot past a batch's start: a clear error, not a silent gap.
    pg.execute(f"INSERT INTO {t} VALUES (10, 'taken')")
    taken = _next_offset(fresh, idle, ReadAllAvailable())
    fresh.stop()
    pg.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, taken["lsn"]))
    again = PgoutputStreamReader(opts, reader.schema)
    with pytest.raises(ReplicationError, match="consumed by someone else"):
        _read_range(again, idle, taken)
    again.stop()


def test_stream_reader_holds_a_bounded_amount(pg: Any, unique_name: str, monkeypatch: Any) -> None:
    """A poll stops reading the stream once the driver holds MAX_HELD_BYTES (the rest waits
    in the slot), and a batch's rows travel in parts of about PART_BYTES: the same rows,
    each once, in order."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgoutput_arrow.spark import stream, stream_held
    from pgoutput_arrow.spark.stream import PgoutputStreamReader, stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text); CREATE PUBLICATION {pub} FOR TABLE {t}")
    pg.create_slot(slot)
    opts = {"dsn": pg.dsn, "slot": slot, "publication": pub, "table": f"public.{t}", "pollInterval": "0"}
    reader = PgoutputStreamReader(opts, stream_schema(opts))
    start = reader.initialOffset()
    # 600 transactions of one row (more messages than the stream reads at once), then one
    # of 300 rows.
    pg.execute(f"DO $$ BEGIN FOR i IN 1..600 LOOP INSERT INTO {t} VALUES (i, repeat('x', 100)); COMMIT; "
               "END LOOP; END $$")
    pg.execute(f"INSERT INTO {t} SELECT g, repeat('y', 100) FROM generate_series(1000, 1299) g")
    monkeypatch.setattr(stream, "MAX_HELD_BYTES", 1)
    monkeypatch.setattr(stream_held, "PART_BYTES", 4096)
    # Groups of the stream (decoder flushes) of a few messages: the bound applies between them.
    monkeypatch.setattr(stream, "DECODER_OPTIONS", {**stream.DECODER_OPTIONS, "flush_messages": 20})
    got, parts = [], []
    while (end := _next_offset(reader, start, ReadAllAvailable(), timeout=5)) != start:  # as Spark does
        planned = reader.partitions(start, end)
        parts.append(len(planned))
        got.append([r["id"] for p in planned for b in reader.read(p) for r in b.to_pylist()])
        reader.commit(end)
        start = end
    assert [i for batch in got for i in batch] == [*range(1, 601), *range(1000, 1300)]
    assert len(got) > 2 and max(parts) > 1, (got, parts)
    reader.stop()


def test_stream_reader_reconnects_after_a_server_restart(unique_name: str) -> None:
    """The driver's connection dies with a server restart between two micro-batches; the
    next call (here the commit) reconnects, and the slot kept its position."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pg_harness import PgServer
    from pgoutput_arrow.spark.stream import PgoutputStreamReader, stream_schema

    with PgServer(version=18) as server:  # restarted below: not the shared one
        server.execute("CREATE TABLE t (id int PRIMARY KEY); CREATE PUBLICATION p FOR TABLE t")
        server.create_slot("s")
        opts = {"dsn": server.dsn, "slot": "s", "publication": "p", "table": "public.t"}
        reader = PgoutputStreamReader(opts, stream_schema(opts))
        start = reader.initialOffset()
        server.execute("INSERT INTO t VALUES (1)")
        end = _next_offset(reader, start, ReadAllAvailable())
        server.restart()
        reader.commit(end)
        assert _slot_reaches(server, "s", sp.lsn_to_int(end["lsn"])) == sp.lsn_to_int(end["lsn"])
        server.execute("INSERT INTO t VALUES (2)")
        assert [r["id"] for r in _read_range(reader, end, _next_offset(reader, end, ReadAllAvailable()))] == [2]
        reader.stop()


def test_stream_read_waits_while_the_slot_is_briefly_in_use(pg18: Any, unique_name: str) -> None:
    """A walsender still holding the slot (the previous query's, exiting) makes the restarted
    query's first read wait and then succeed, not fail."""
    import threading

    import psycopg2.extras
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgoutput_arrow.spark.stream import PgoutputStreamReader, stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY); CREATE PUBLICATION {pub} FOR TABLE {t}")
    pg18.create_slot(slot)
    opts = {"dsn": pg18.dsn, "slot": slot, "publication": pub, "table": f"public.{t}"}
    reader = PgoutputStreamReader(opts, stream_schema(opts))
    start = reader.initialOffset()
    pg18.execute(f"INSERT INTO {t} VALUES (1)")
    end = _next_offset(reader, start, ReadAllAvailable())
    reader.stop()
    holder = psycopg2.connect(pg18.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    holder.cursor().start_replication(slot_name=slot, decode=False, options={
        "proto_version": "1", "publication_names": pub})  # never confirms anything
    assert pg18.scalar("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    restarted = PgoutputStreamReader(opts, reader.schema)  # no poll of its own
    release = threading.Timer(1.5, holder.close)
    release.start()
    t0 = time.monotonic()
    assert [r["id"] for r in _read_range(restarted, start, end)] == [1]
    assert time.monotonic() - t0 >= 1.0
    release.join()
    restarted.stop()


def test_stream_schema_from_catalog_equals_decoded(pg: Any, unique_name: str) -> None:
    """The streaming schema is built before any change arrives, from the catalog (the Relation
    and Type messages pgoutput would send); it equals what the decoder makes of the real
    messages: domains, enums, arrays, generated columns, a column list, REPLICA IDENTITY FULL."""
    from pgoutput_arrow.spark.stream import stream_schema

    import pgoutput_arrow

    a, b, pub, slot = f"{unique_name}_a", f"{unique_name}_b", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"""
        CREATE TYPE {a}_mood AS ENUM ('sad', 'happy');
        CREATE DOMAIN {a}_pos AS int CHECK (VALUE > 0);
        CREATE TABLE {a} (id int PRIMARY KEY, m {a}_mood, p {a}_pos, u uuid, j jsonb, iv interval,
                          bt bytea, num numeric(12,3), tags text[], ts timestamptz, d date,
                          g int GENERATED ALWAYS AS (id * 2) STORED, f float8, big bigint, o oid);
        CREATE TABLE {b} (k text, w int, hidden text, x numeric);
        ALTER TABLE {b} REPLICA IDENTITY FULL;
        CREATE PUBLICATION {pub} FOR TABLE {a}, {b} (k, w, x);""")
    pg.create_slot(slot)
    opts = {"dsn": pg.dsn, "slot": slot, "publication": pub}
    schemas = {name: stream_schema({**opts, "table": f"public.{name}"}) for name in (a, b)}
    pg.execute(f"INSERT INTO {a} (id, m, p, u, j, iv, bt, num, tags, ts, d, f, big, o) VALUES "
               f"(1, 'happy', 3, gen_random_uuid(), '{{}}', '1 day', '\\x00', 1.5, '{{a}}', now(), "
               f"'2024-01-01', 0.5, 7, 42); INSERT INTO {b} VALUES ('k', 1, 'h', 2)")
    rows = pg.get_binary_changes(slot, {"proto_version": "1", "publication_names": pub}, peek=True)
    decoded = pgoutput_arrow.decode([(l, d) for l, _, d in rows], views=False).tables
    for name in (a, b):
        want = spark_schema_of(sp.to_spark_arrow_schema(decoded[f"public.{name}"].schema))
        assert schemas[name] == want, name
    assert "g" not in schemas[a].fieldNames() and "hidden" not in schemas[b].fieldNames()


def _checkpoint(path: Any) -> tuple[dict[int, int], set[int]]:
    """A streaming checkpoint's planned batches (id → end LSN of this source) and the ids of
    those Spark committed."""
    import json

    ends = {int(f.name): sp.lsn_to_int(json.loads(f.read_text().splitlines()[-1])["lsn"])
            for f in (path / "offsets").iterdir() if f.name.isdigit()}
    committed = {int(f.name) for f in (path / "commits").iterdir() if f.name.isdigit()}
    return ends, committed


def test_stream_restart_from_checkpoint_exactly_once(spark: Any, pg18: Any, unique_name: str,
                                                     tmp_path: Any) -> None:
    """readStream.format("pgoutput") with a checkpoint, written by an idempotent foreachBatch
    (each batch overwrites its own directory). Three runs on one checkpoint: AvailableNow;
    then a processing-time query stopped while a writer is busy, after which its last
    committed batch is made uncommitted (as if the driver died before the commit log), so
    the restart reads that batch again; then AvailableNow once more. The union of the output
    has every change of the table once — the same as a second slot decoded in one go, with
    PostgreSQL's own row counts for inserts, updates and deletes — its replay equals the
    table, and the slot was only ever moved to the end of a batch Spark had committed."""
    import datetime
    import threading

    import pyarrow.parquet as pq

    import pgoutput_arrow

    t, other, pub = f"{unique_name}_t", f"{unique_name}_other", f"{unique_name}_pub"
    slot, ref = f"{unique_name}_slot", f"{unique_name}_ref"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n bigint); "
                 f"CREATE TABLE {other} (id int PRIMARY KEY); CREATE TABLE {t}_unpublished (x int); "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}, {other}")
    initial = pg18.create_slot(slot)
    pg18.create_slot(ref)  # the same changes, decoded in one go at the end
    inserted: list[int] = []
    counts = collections.Counter()
    conn = pg18.connect()

    def run(sql: str, op: str | None = None, ids: Any = ()) -> None:
        with conn.cursor() as cur:
            cur.execute(sql)
            if op:
                counts[op] += cur.rowcount
        inserted.extend(ids)

    # Before the first run: single-row and multi-row transactions (one larger than the
    # per-batch limit), updates, deletes, a rollback, other tables.
    for i in range(1, 41):
        run(f"INSERT INTO {t} VALUES ({i}, 'v{i}', {i})", "insert", [i])
    run(f"INSERT INTO {t} SELECT g, 'bulk', g FROM generate_series(41, 240) g", "insert", range(41, 241))
    run(f"UPDATE {t} SET v = 'u' || id WHERE id % 5 = 0", "update")
    run(f"DELETE FROM {t} WHERE id % 7 = 0", "delete")
    run(f"BEGIN; INSERT INTO {t} VALUES (9001, 'never', 0); ROLLBACK")
    run("BEGIN")  # one statement per call: rowcount is the last statement's
    run(f"INSERT INTO {other} VALUES (1)")
    run(f"UPDATE {t} SET n = -1 WHERE id = 1", "update")
    run("COMMIT")
    run(f"INSERT INTO {t}_unpublished SELECT g FROM generate_series(1, 100) g")

    out, ckpt = tmp_path / "out", tmp_path / "checkpoint"

    def start(trigger: dict, limit: int) -> Any:
        df = (spark.readStream.format("pgoutput").option("dsn", pg18.dsn).option("slot", slot)
              .option("publication", pub).option("table", f"public.{t}")
              .option("maxChangesPerTrigger", str(limit)).option("pollInterval", "0.2").load())

        def sink(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        return (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
                .trigger(**trigger).start())

    def check_slot() -> int:
        ends, committed = _checkpoint(ckpt)
        position = _slot_position(pg18, slot)
        assert position in {initial} | {ends[b] for b in committed}, sp.lsn_to_text(position)
        assert position <= max(ends[b] for b in committed)
        return position

    sp.register(spark)
    q = start({"availableNow": True}, 100)
    q.awaitTermination()
    assert q.exception() is None
    ends, committed = _checkpoint(ckpt)
    assert len(committed) >= 3 and committed == set(ends)
    after_first = check_slot()

    # More changes while stopped: a key change, a TRUNCATE, new rows.
    run(f"UPDATE {t} SET id = id + 10000 WHERE id BETWEEN 1 AND 10", "update")
    run(f"UPDATE {t} SET n = n * 2 WHERE id BETWEEN 10001 AND 10005", "update")
    run(f"TRUNCATE {t}")
    counts["truncate"] += 1
    for i in range(1001, 1101, 10):
        run(f"INSERT INTO {t} SELECT g, 'after', g FROM generate_series({i}, {i + 9}) g", "insert",
            range(i, i + 10))

    # A processing-time query, stopped while changes keep coming.
    def writer() -> None:
        wconn = pg18.connect()
        with wconn.cursor() as cur:
            for i in range(2001, 2031):
                cur.execute(f"INSERT INTO {t} VALUES ({i}, 'live', {i})")
                cur.execute(f"UPDATE {t} SET n = n + 1 WHERE id = {i - 1000}")
                counts["update"] += cur.rowcount
                inserted.append(i)
                counts["insert"] += 1
                time.sleep(0.1)
        wconn.close()

    q = start({"processingTime": "0.5 seconds"}, 30)
    w = CheckedThread(target=writer)
    w.start()
    deadline = time.monotonic() + 180
    while sum(1 for p in q.recentProgress if p["numInputRows"] > 0) < 3 or w.is_alive():
        assert time.monotonic() < deadline and q.isActive, q.exception()
        time.sleep(0.2)
    q.stop()
    w.join()
    check_slot()
    # The latest planned batch is run again on restart: it is uncommitted if the stop cut it
    # short; if not, its commit is removed, as if the driver died after running it and before
    # logging it. (Only the latest may be: Spark commits a batch to the source, which moves
    # the slot, when it plans the next.)
    ends, committed = _checkpoint(ckpt)
    redo = max(ends)
    if redo in committed:
        for name in (str(redo), f".{redo}.crc"):  # the log entry and Hadoop's checksum of it
            (ckpt / "commits" / name).unlink()
    assert _slot_position(pg18, slot) <= (ends[redo - 1] if redo else initial)
    first_attempt = out / f"batch={redo}"
    redo_rows = (pq.read_table(first_attempt).to_pylist() if (first_attempt / "_SUCCESS").exists()
                 else None)
    redo_files = {f.name for f in first_attempt.iterdir()} if first_attempt.exists() else set()

    run(f"INSERT INTO {t} SELECT g, 'last', g FROM generate_series(3001, 3050) g", "insert",
        range(3001, 3051))
    run(f"DELETE FROM {t} WHERE id BETWEEN 1001 AND 1020", "delete")
    q = start({"availableNow": True}, 1000)
    q.awaitTermination()
    assert q.exception() is None
    assert {f.name for f in first_attempt.iterdir()} - redo_files  # it ran again
    if redo_rows is not None:
        assert pq.read_table(first_attempt).to_pylist() == redo_rows  # with the same rows
    final = check_slot()
    assert final > after_first
    conn.close()

    # The union of all committed batches against the same changes decoded in one go.
    ends, committed = _checkpoint(ckpt)
    assert committed == set(ends)
    # Spark writes timestamps as INT96: read back as naive UTC microseconds.
    got = [r for b in sorted(committed)
           for r in pq.read_table(out / f"batch={b}", coerce_int96_timestamp_unit="us").to_pylist()]
    rows = pg18.get_binary_changes(ref, {"proto_version": "1", "publication_names": pub})
    decoded = pgoutput_arrow.decode([(l, d) for l, _, d in rows], views=False)
    want = decoded.tables[f"public.{t}"].to_pylist() + [
        {"_op": "truncate", **{k: r[k] for k in ("_lsn", "_commit_lsn", "_commit_ts", "_xid")}}
        for r in decoded.truncates.to_pylist() if f"public.{t}" in r["relations"]]
    assert all(r["_commit_lsn"] < ends[max(committed)] for r in want)

    def key(r: dict) -> tuple:
        before = (r.get("_before") or {}).get("id")
        ts = r["_commit_ts"]
        if ts.tzinfo is not None:
            ts = ts.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return (r["_commit_lsn"], r["_lsn"], r["_op"], r.get("id"), r.get("v"), r.get("n"),
                before, r["_xid"], ts)

    assert sorted(map(key, got)) == sorted(map(key, want))
    # In (_commit_lsn, _seq) order, the changes come in the server's order.
    in_order = [(r["_commit_lsn"], r["_lsn"]) for r in sorted(got, key=lambda r: (r["_commit_lsn"], r["_seq"]))]
    assert in_order == sorted(in_order)
    # PostgreSQL's own counts: every inserted id exactly once, every updated and deleted row.
    ops = collections.Counter(r["_op"] for r in got)
    assert ops == counts and counts["update"] > 80 and counts["delete"] > 40
    assert collections.Counter(r["id"] for r in got if r["_op"] == "insert") == \
        collections.Counter(inserted) and max(collections.Counter(inserted).values()) == 1
    # Replayed in order, the changes give the table.
    state: dict[int, tuple] = {}
    for r in sorted(got, key=lambda r: (r["_commit_lsn"], r["_seq"])):
        if r["_op"] == "truncate":
            state.clear()
            continue
        old = (r["_before"] or {}).get("id", r["id"])
        if r["_op"] in ("update", "delete"):
            state.pop(old, None)
        if r["_op"] != "delete":
            state[r["id"]] = (r["id"], r["v"], r["n"])
    assert sorted(state.values()) == sorted(pg18.query(f"SELECT id, v, n FROM {t}"))
    assert len(state) > 100


def test_stream_errors_are_clear(spark: Any, pg18: Any, unique_name: str) -> None:
    """Bad streaming set-ups fail before anything is read, with one clear message: through
    Spark, a missing slot (at load()) and a batch read given a live slot; checked directly
    (the same schema() Spark calls, without a planner process each), a table the publication
    does not publish, a missing option, a two_phase slot, a bad name or limit."""
    from pgoutput_arrow.exceptions import SlotNotFound
    from pgoutput_arrow.spark.stream import stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY); CREATE TABLE {t}_np (id int); "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    pg18.create_slot(slot)
    pg18.create_slot(f"{slot}_2pc", two_phase=True)
    good = {"dsn": pg18.dsn, "slot": slot, "publication": pub, "table": f"public.{t}"}
    sp.register(spark)
    with pytest.raises(Exception, match=re.escape('replication slot "no_such_slot" does not exist')):
        (spark.readStream.format("pgoutput").options(**{**good, "slot": "no_such_slot"}).load())
    with pytest.raises(Exception, match="is read with spark.readStream"):
        spark.read.format("pgoutput").options(**good).load().collect()
    # A misspelt option fails at load(), before the query starts, naming the nearest option.
    with pytest.raises(Exception, match="(?i)" + re.escape("unknown option 'maxChangesPerTriger' (did you mean "
                                                  "'maxChangesPerTrigger'?)")):
        spark.readStream.format("pgoutput").options(**good, maxChangesPerTriger="10").load()

    assert stream_schema(good).fieldNames()[0] == "id"
    with pytest.raises(SlotNotFound, match=re.escape('replication slot "no_such_slot" does not exist')):
        stream_schema({**good, "slot": "no_such_slot"})
    cases = [
        ({"table": f"public.{t}_np"}, f"table public.{t}_np is not in publication {pub}"),
        ({"publication": ""}, "missing: publication"),
        ({"slot": f"{slot}_2pc"}, "was created with two_phase"),
        ({"table": t}, "must be schema-qualified"),
        ({"maxChangesPerTrigger": "0"}, "maxChangesPerTrigger must be at least 1"),
        ({"publication": "no_such_pub"}, "publication no_such_pub does not exist"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=re.escape(message)):
            stream_schema({**good, **options})


def test_stream_without_table_gives_every_published_table(spark: Any, pg18: Any,
                                                            unique_name: str, tmp_path: Any) -> None:
    """Without ``table``: the generic change schema of pgoutput_changes, every published table,
    TRUNCATEs as op 'truncate', in commit order by (commit_lsn, seq); an unpublished table is
    not there."""
    a, b, pub, slot = f"{unique_name}_a", f"{unique_name}_b", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {a} (id int PRIMARY KEY, v text); CREATE TABLE {b} (k text PRIMARY KEY); "
                 f"CREATE TABLE {a}_np (x int); CREATE PUBLICATION {pub} FOR TABLE {a}, {b}")
    pg18.create_slot(slot)
    pg18.execute(f"INSERT INTO {a} VALUES (1, 'one'), (2, 'two'); INSERT INTO {a}_np VALUES (1)")
    pg18.execute(f"BEGIN; INSERT INTO {b} VALUES ('x'); UPDATE {a} SET v = 'uno' WHERE id = 1; COMMIT")
    pg18.execute(f"DELETE FROM {b} WHERE k = 'x'")
    pg18.execute(f"BEGIN; TRUNCATE {a}; INSERT INTO {a} VALUES (3, 'three'); COMMIT")
    sp.register(spark)
    got: list[Any] = []
    stream = (spark.readStream.format("pgoutput").option("dsn", pg18.dsn).option("slot", slot)
              .option("publication", pub).load())
    assert [f.name for f in stream.schema] == ["table", "op", "lsn", "commit_lsn", "commit_ts", "xid",
                                               "seq", "new", "old", "unchanged"]
    q = (stream.writeStream.foreachBatch(lambda df, _: got.extend(df.collect()))
         .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    rows = [(r.table.split(".")[1], r.op, (r.new or {}).get("id") or (r.new or {}).get("k"), (r.new or {}).get("v"))
            for r in sorted(got, key=lambda r: (r.commit_lsn, r.seq))]
    assert rows == [(a, "insert", "1", "one"), (a, "insert", "2", "two"), (b, "insert", "x", None),
                    (a, "update", "1", "uno"), (b, "delete", "x", None), (a, "truncate", None, None),
                    (a, "insert", "3", "three")]


def test_schema_histories_and_special_values_on_shuffled_partitions(spark: Any, pg18: Any) -> None:
    """Issue 13 on Spark: the histories of tests/test_schema_history.py (add+drop, retype,
    renames, a column re-added with another type, replica identity change) and values kept in
    ``_special``, decoded with the default options from shuffled partitions of every size:
    replayed, equal to PostgreSQL's rows; a renamed column is one column."""
    from pyspark.sql import functions as F
    from test_schema_history import HISTORY_SQL, _check_against_server, _check_specials

    pg18.execute("CREATE SCHEMA histspark")
    pg18.execute("CREATE PUBLICATION hist_spark_pub FOR TABLES IN SCHEMA histspark")
    pg18.create_slot("hist_spark")
    with pg18.connect() as conn, conn.cursor() as cur:
        cur.execute("SET search_path = histspark")
        for sql in HISTORY_SQL:
            cur.execute(sql)
    rows = pg18.get_binary_changes("hist_spark", {"proto_version": "1", "publication_names": "hist_spark_pub"})
    pg18.drop_slot("hist_spark")
    df = _capture_df(spark, rows)
    for parts, shuffled in ((1, df.coalesce(1)), (3, df.repartition(3).sortWithinPartitions(F.rand(7))),
                            (5, df.orderBy(F.rand(11)))):
        decoded = sp.decode(shuffled, num_partitions=parts)
        tables = {name: d.toArrow() for name, d in decoded.items()}
        assert "a" not in tables["histspark.h3"].column_names and "a_renamed" in tables["histspark.h3"].column_names
        empty_truncates = pa.table({"relations": pa.array([], pa.list_(pa.string())),
                                    "_commit_lsn": pa.array([], pa.int64()), "_seq": pa.array([], pa.int64())})
        _check_against_server(pg18, tables, empty_truncates, "histspark")
        _check_specials(pg18, tables["histspark.sv"], "histspark")
    # pgoutput-dump's Parquet directories, one file per transaction, read back by Spark whole.
    import subprocess
    import tempfile

    import pyarrow.parquet as pq
    from dump_workload import dump_command

    with tempfile.TemporaryDirectory() as tmp:
        pq.write_table(pa.table({"lsn": pa.array([r[0] for r in rows], pa.int64()),
                                 "data": pa.array([bytes(r[2]) for r in rows], pa.binary())}), f"{tmp}/c.parquet")
        subprocess.run([dump_command(), f"{tmp}/c.parquet", "--format", "parquet", "--output", f"{tmp}/out",
                        "--rows-per-file", "1"], check=True, capture_output=True, timeout=120)
        for rel, columns in (("h1", {"id", "a", "b"}), ("h3", {"id", "a_renamed", "z2"}), ("h4", {"id", "b"})):
            df = spark.read.parquet(f"{tmp}/out/histspark.{rel}")
            assert columns <= set(df.columns), (rel, df.columns)
            assert df.count() == pq.read_table(f"{tmp}/out/histspark.{rel}").num_rows
        h3 = {r["id"]: r for r in spark.read.parquet(f"{tmp}/out/histspark.h3").where("_op = 'insert'").collect()}
        assert h3[1]["a_renamed"] == 10 and h3[3]["z2"] == "r"


def test_array_depth_is_the_drivers_in_every_partition(spark: Any, pg18: Any) -> None:
    """Found by the randomized tester (seed 110): a partition whose first non-empty array of a
    column was 2-D learned depth 2 while the driver's schema said 1, and bringing it to that
    schema failed ("Cannot cast LIST to non-list data type Int32"). Every partition now nests
    as deep as the driver; the 2-D value is kept in _special, the 1-D ones in the column."""
    from pyspark.sql import functions as F

    pg18.execute("CREATE TABLE depth (id int PRIMARY KEY, a int4[])")
    pg18.execute("CREATE PUBLICATION depth_pub FOR TABLE depth")
    pg18.create_slot("depth_slot")
    pg18.execute("INSERT INTO depth VALUES (1, '{{1,2},{3,4}}')")
    for i in range(2, 12):
        pg18.execute(f"INSERT INTO depth VALUES ({i}, '{{{i},NULL}}')")
    rows = pg18.get_binary_changes("depth_slot", {"proto_version": "1", "publication_names": "depth_pub"})
    pg18.drop_slot("depth_slot")
    df = _capture_df(spark, rows)
    for parts in (1, 4):
        decoded = sp.decode(df.repartition(parts).sortWithinPartitions(F.rand(3)), num_partitions=parts)
        got = {r["id"]: r for r in decoded["public.depth"].collect()}
        assert got[1]["a"] is None and dict(got[1]["_special"]) == {"a": "{{1,2},{3,4}}"}
        assert all(got[i]["a"] == [i, None] and got[i]["_special"] is None for i in range(2, 12))


# --------------------------------------------------------------------------- the snapshot

def _snapshot_workload(pg: Any, t: str) -> None:
    """Writes while a snapshot is open: updates (one of a TOAST value), deletes, inserts,
    keys changed; none of them may show in the snapshot, all of them in the stream."""
    pg.execute(f"UPDATE {t} SET v = v || '-upd' WHERE id % 10 = 0; "
               f"UPDATE {t} SET big = repeat('y', 6000) WHERE id = 7; "
               f"UPDATE {t} SET n = n + 1 WHERE id = 8; "  # big unchanged: TOAST not sent
               f"DELETE FROM {t} WHERE id % 13 = 0; "
               f"INSERT INTO {t} (id, v, n) SELECT g, 'new', g FROM generate_series(5001, 5100) g; "
               f"UPDATE {t} SET id = id + 100000 WHERE id % 97 = 1")


def _replica(spark: Any, frames: list[Any], keys: list[str]) -> list[tuple]:
    from functools import reduce

    changes = reduce(lambda a, b: a.unionByName(b), frames)
    state = sp.apply_changes(changes, keys).orderBy(keys).collect()
    return [tuple(r[c] for c in ("id", "v", "n", "big")) for r in state]


@pytest.mark.parametrize("version", [18, 15])
def test_spark_snapshot_then_stream_equals_postgres(spark: Any, version: int, unique_name: str,
                                                    request: Any) -> None:
    """pgspark.snapshot: the slot is created exporting its snapshot, each table is read in
    parallel chunks (one Spark partition each) inside it while writes go on; then the slot's
    changes from the consistent point. Snapshot + changes replayed equal PostgreSQL's final
    rows value by value; no snapshot row shows a write made after the consistent point; a
    DataFrame computed after the snapshot is closed fails clearly."""
    pg = request.getfixturevalue(f"pg{version}")
    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n numeric(12,2), big text); "
               f"INSERT INTO {t} SELECT g, 'v' || g, g / 4.0, CASE WHEN g % 50 = 7 THEN repeat('x', 5000) END "
               f"FROM generate_series(1, 5000) g; CREATE PUBLICATION {pub} FOR TABLE {t}")
    expected_snapshot = pg.query(f"SELECT id, v, n, big FROM {t} ORDER BY id")
    with sp.snapshot(spark, pg.dsn, slot=slot, publication=pub, chunk_bytes=8 * 8192) as snap:
        assert snap.tables == [f"public.{t}"]
        _snapshot_workload(pg, t)  # after the consistent point: not in the snapshot
        df = snap.read(f"public.{t}")
        chunks = snap.chunks(f"public.{t}")
        assert len(chunks) > 2 and df.rdd.getNumPartitions() == len(chunks)
        rows = df.orderBy("id").collect()
        lsn = snap.lsn
        late = snap.read(f"public.{t}")
    snapshot_rows = spark.createDataFrame(rows, df.schema)
    assert [(r.id, r.v, r.n, r.big) for r in rows] == [tuple(r) for r in expected_snapshot]
    assert {r._op for r in rows} == {"snapshot"} and {r._commit_lsn for r in rows} == {lsn}
    assert all(r._seq < 0 for r in rows) and len({r._seq for r in rows}) == len(rows)
    with pytest.raises(Exception, match="snapshot"):
        late.collect()  # the exported snapshot ended with the block
    assert _slot_position(pg, slot) == lsn  # the slot waits at the consistent point

    sp.register(spark)
    stream = (spark.readStream.format("pgoutput").option("dsn", pg.dsn).option("slot", slot)
              .option("publication", pub).option("table", f"public.{t}").load())
    q = stream.writeStream.format("memory").queryName(f"{unique_name}_m").trigger(availableNow=True).start()
    q.awaitTermination()
    changes = spark.table(f"{unique_name}_m")
    assert df.schema == changes.schema  # snapshot rows are typed as the stream's
    assert changes.where(f"_commit_lsn < {lsn}").count() == 0
    assert _replica(spark, [snapshot_rows, changes], ["id"]) == \
        [tuple(r) for r in pg.query(f"SELECT id, v, n, big FROM {t} ORDER BY id")]


@pytest.mark.parametrize("version", [18, 15])
def test_stream_source_online_snapshot_resumes_from_the_checkpoint(spark: Any, version: int, unique_name: str,
                                                                  tmp_path: Any, request: Any) -> None:
    """readStream.format("pgoutput").option("onlineSnapshot", "true"): the table's rows come
    chunk by chunk while the stream flows (snapshot rows where each chunk's watermark is in
    the stream) and writes go on; the progress rides on the offsets. A processing-time query
    stopped in the middle of the snapshot, its last batch made uncommitted, then an
    AvailableNow query on the same checkpoint: it resumes at the next chunk (the table is not
    read again from the start), and the replay of every batch written equals the table."""
    import json
    import threading

    pg = request.getfixturevalue(f"pg{version}")
    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n numeric(12,2), big text); "
               f"INSERT INTO {t} SELECT g, 'v' || g, g / 4.0, CASE WHEN g % 500 = 7 THEN repeat('x', 5000) END "
               f"FROM generate_series(1, 6000) g; CREATE PUBLICATION {pub} FOR TABLE {t}")
    options = {"dsn": pg.dsn, "slot": slot, "publication": pub, "table": f"public.{t}",
               "onlineSnapshot": "true", "snapshotChunkRows": "250", "maxChangesPerTrigger": "400",
               "pollInterval": "0.2"}
    out, ckpt = tmp_path / "out", tmp_path / "checkpoint"
    sp.register(spark)

    def start(trigger: dict) -> Any:
        df = spark.readStream.format("pgoutput").options(**options).load()

        def sink(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        return (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
                .trigger(**trigger).start())

    stop = threading.Event()

    def writer() -> None:  # inserts, updates (one of a TOAST value, one leaving it unsent), deletes, key changes
        conn = pg.connect()
        with conn.cursor() as cur:
            i = 0
            while not stop.is_set():
                i += 1
                cur.execute(f"INSERT INTO {t} (id, v, n) VALUES ({10000 + i}, 'live', {i})")
                cur.execute(f"UPDATE {t} SET v = v || '+' WHERE id = {(i * 37) % 6000 + 1}")
                cur.execute(f"UPDATE {t} SET n = n + 1 WHERE id = {(i * 500) % 6000 + 7}")
                cur.execute(f"DELETE FROM {t} WHERE id = {(i * 53) % 6000 + 2}")
                cur.execute(f"UPDATE {t} SET id = id + 20000 WHERE id = {(i * 71) % 6000 + 3}")
                time.sleep(0.02)
        conn.close()

    w = CheckedThread(target=writer)
    w.start()
    def read_after() -> int:  # the last key of the chunks the latest offset claims
        logged = [f for f in (ckpt / "offsets").iterdir() if f.name.isdigit()] if (ckpt / "offsets").exists() else []
        if not logged:
            return 0
        latest = max(logged, key=lambda f: int(f.name))
        online = json.loads(latest.read_text().splitlines()[-1]).get("online") or {}
        return max((int(t["after"][0]) for t in online.get("tables", {}).values() if t["after"]), default=0)

    q = start({"processingTime": "0.3 seconds"})
    deadline = time.monotonic() + 420  # one chunk of 250 keys per micro-batch, on a loaded machine
    while read_after() < 4000:
        assert time.monotonic() < deadline and q.isActive, q.exception()
        time.sleep(0.2)
    q.stop()
    offsets = {int(f.name): json.loads(f.read_text().splitlines()[-1])
               for f in (ckpt / "offsets").iterdir() if f.name.isdigit()}
    ends, committed = _checkpoint(ckpt)
    redo = max(ends)
    if redo in committed:  # as if the driver died after running it and before logging it
        for name in (str(redo), f".{redo}.crc"):
            (ckpt / "commits" / name).unlink()
    progress = offsets[redo].get("online")
    assert progress is not None and "online" in offsets[0], offsets[redo]
    snapshot_rows_before = spark.read.parquet(str(out)).where("_op = 'snapshot'").count()
    assert 0 < snapshot_rows_before and not all(t["done"] for t in progress["tables"].values())

    q = start({"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    stop.set()
    w.join()
    q = start({"availableNow": True})  # the writer's last changes
    q.awaitTermination()
    assert q.exception() is None
    written = spark.read.parquet(str(out))
    # Resumed, not started over: few keys were read twice (the chunks of the batch run again
    # and the one the driver held, and keys read again for a TOAST value the stream
    # could not rebuild).
    twice = written.where("_op = 'snapshot'").groupBy("id").count().where("count > 1").count()
    assert twice <= 3 * 250 + 50 < snapshot_rows_before, (twice, snapshot_rows_before)
    assert _replica(spark, [written.drop("batch")], ["id"]) == \
        [tuple(r) for r in pg.query(f"SELECT id, v, n, big FROM {t} ORDER BY id")]


@pytest.mark.parametrize("hold", [False, True], ids=["ends-when-read", "holdChunkSnapshot"])
def test_stream_source_online_snapshot_chunks_are_read_by_the_executors(pg18: Any, unique_name: str, hold: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With onlineSnapshot, a chunk reaches the executors as partitions of key ranges (no rows
    through the driver): each part is read under the chunk's exported snapshot, which ends
    once every part was read (the server's xmin horizon is held for one chunk's read; a part
    read again fails, SnapshotGone, saying why), or with holdChunkSnapshot when Spark commits
    the batch (a part may be read again until then); then the next chunk is read. The first
    chunk, before Spark committed a batch of the query (its executors' Python workers may not
    run yet), is read by the driver and shipped with the batch's changes."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgoutput_arrow.live.snapshot import SnapshotGone
    from pgoutput_arrow.live import online_feed
    from pgoutput_arrow.spark.stream import ChangesRange, ChunkRange, PgoutputStreamReader, stream_schema

    # Exported whatever WAL the other tests write meanwhile (a walsender "behind" would have
    # the driver read the chunk itself: test_a_chunk_is_exported_only_while_the_stream_keeps_up).
    monkeypatch.setattr(online_feed, "CATCH_UP_BYTES", 1 << 62)
    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text); "
                 f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 49000) g; "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    options = {"dsn": pg18.dsn, "slot": slot, "publication": pub, "table": f"public.{t}",
               "onlineSnapshot": "true", "snapshotChunkRows": "24000", "pollInterval": "0.1",
               "holdChunkSnapshot": str(hold).lower()}
    reader = PgoutputStreamReader(options, stream_schema(options))
    try:
        start = reader.initialOffset()
        rows: list[int] = []
        deadline = time.monotonic() + 60
        while not rows:  # the first chunk: read by the driver, shipped with the changes
            end = reader.latestOffset(start, ReadAllAvailable())
            parts = reader.partitions(start, end) if end != start else []
            assert not any(isinstance(p, ChunkRange) for p in parts)
            rows = [i for p in parts for b in reader.read(p) for i in b.column("id").to_pylist()]
            reader.commit(end)
            assert time.monotonic() < deadline
            start = end
        assert sorted(rows) == list(range(1, 24001))
        rows = []
        while True:
            end = reader.latestOffset(start, ReadAllAvailable())
            parts = reader.partitions(start, end) if end != start else []
            chunks = [p for p in parts if isinstance(p, ChunkRange)]
            if chunks:
                break
            assert time.monotonic() < deadline
            start = end
        assert all(isinstance(p, ChangesRange) for p in parts if p not in chunks)
        # 24 000 keys: parts of 10 000, 10 000 and 4 000 keys, read where Spark reads them.
        assert len(chunks) == 3, chunks
        def exporting() -> int:  # the chunk's transaction, holding its exported snapshot
            return int(pg18.scalar("SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND "
                                   "state = 'idle in transaction' AND datname = current_database()"))

        assert exporting() in (1, 2)  # and the next chunk's, its keys read, ready for the next batch
        for p in chunks:
            batches = list(reader.read(p))
            rows += [i for b in batches for i in b.column("id").to_pylist()]
            assert all(set(b.column("_op").to_pylist()) <= {"snapshot"} for b in batches)
        assert sorted(rows) == list(range(24001, 48001))
        if hold:
            time.sleep(1)
            assert exporting() >= 1  # until Spark commits the batch
            assert len(list(reader.read(chunks[1]))) >= 1  # read again, the same rows
            reader.commit(end)  # Spark committed the batch: the snapshot ends (on the stream's thread)
        deadline = time.monotonic() + 10
        while exporting():  # without holdChunkSnapshot: every part was read, and nothing committed
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(SnapshotGone, match=None if hold else "read again after every part of it was read once"):
            list(reader.read(chunks[0]))
        if not hold:
            reader.commit(end)
        # The next chunk (the last 1 000 keys), in the next batch: one chunk per batch.
        start, deadline = end, time.monotonic() + 60
        while True:
            end = reader.latestOffset(start, ReadAllAvailable())
            nxt = [p for p in (reader.partitions(start, end) if end != start else []) if isinstance(p, ChunkRange)]
            if nxt:
                break
            assert time.monotonic() < deadline
            start = end
        assert [i for p in nxt for b in reader.read(p) for i in b.column("id").to_pylist()] == \
            list(range(48001, 49001))
    finally:
        reader.stop()
    pg18.drop_slot(slot)


def test_stream_source_online_snapshot_chunks_on_driver(pg18: Any, unique_name: str) -> None:
    """chunksOnDriver: every chunk is read by the driver in its own short transaction and its
    rows shipped with the batch's changes (no part for the executors, no exported snapshot
    left open while Spark plans and schedules); the rows are the table's."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgoutput_arrow.spark.stream import ChunkRange, PgoutputStreamReader, stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text); "
                 f"INSERT INTO {t} SELECT g, 'v' || g FROM generate_series(1, 25000) g; "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    options = {"dsn": pg18.dsn, "slot": slot, "publication": pub, "table": f"public.{t}",
               "onlineSnapshot": "true", "snapshotChunkRows": "10000", "pollInterval": "0.1",
               "chunksOnDriver": "true"}
    reader = PgoutputStreamReader(options, stream_schema(options))
    rows: list[int] = []
    try:
        start, deadline = reader.initialOffset(), time.monotonic() + 60
        while len(rows) < 25000:
            end = reader.latestOffset(start, ReadAllAvailable())
            parts = reader.partitions(start, end) if end != start else []
            assert not any(isinstance(p, ChunkRange) for p in parts)
            rows += [i for p in parts for b in reader.read(p) for i in b.column("id").to_pylist()]
            reader.commit(end)
            exporting = pg18.scalar("SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND "
                                    "state = 'idle in transaction' AND datname = current_database()")
            assert exporting == 0
            assert time.monotonic() < deadline
            start = end
    finally:
        reader.stop()
    assert sorted(rows) == list(range(1, 25001))
    pg18.drop_slot(slot)


def test_stream_source_snapshot_first_then_changes(spark: Any, pg18: Any, unique_name: str,
                                                   tmp_path: Any) -> None:
    """readStream.format("pgoutput").option("snapshot", "true"): the query creates the slot
    exporting its snapshot; its first micro-batch is the table's rows as of the consistent
    point (read in chunks, one partition each), later ones the changes. Two runs on one
    checkpoint with writes between them: the replay of everything written equals the
    table. A snapshot batch that a restarted query would re-run (its snapshot gone) fails
    in one line and drops the never-advanced slot; an existing slot is refused."""
    import pyarrow.parquet as pq
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgoutput_arrow.live.snapshot import SnapshotGone
    from pgoutput_arrow.spark.stream import PgoutputStreamReader, SnapshotRange, stream_schema

    t, pub, slot = f"{unique_name}_t", f"{unique_name}_pub", f"{unique_name}_slot"
    pg18.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v text, n numeric(12,2), big text); "
                 f"INSERT INTO {t} SELECT g, 'v' || g, g / 4.0, NULL FROM generate_series(1, 3000) g; "
                 f"CREATE PUBLICATION {pub} FOR TABLE {t}")
    options = {"dsn": pg18.dsn, "slot": slot, "publication": pub, "table": f"public.{t}",
               "snapshot": "true", "pollInterval": "0.2"}
    out, ckpt = tmp_path / "out", tmp_path / "checkpoint"
    sp.register(spark)

    def run(checkpoint: Any = ckpt) -> None:
        df = spark.readStream.format("pgoutput").options(**options).load()

        def sink(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None

    run()
    first = pq.read_table(out / "batch=0")
    assert set(first.column("_op").to_pylist()) == {"snapshot"} and first.num_rows == 3000
    _snapshot_workload(pg18, t)
    run()  # the same checkpoint: the changes after the snapshot, exactly once
    with pytest.raises(Exception, match="exists already"):
        run(tmp_path / "new")  # a new query (no checkpoint) with snapshot on an existing slot
    written = spark.read.parquet(str(out))
    assert _replica(spark, [written.drop("batch")], ["id"]) == \
        [tuple(r) for r in pg18.query(f"SELECT id, v, n, big FROM {t} ORDER BY id")]
    pg18.drop_slot(slot)

    # The driver that exported the snapshot is gone before its batch was committed.
    reader = PgoutputStreamReader(options, stream_schema(options))
    start = reader.initialOffset()
    assert start["snapshot"] == "pending"
    end = reader.latestOffset(start, ReadAllAvailable())
    parts = reader.partitions(start, end)
    assert parts and all(isinstance(p, SnapshotRange) for p in parts)
    assert sum(len(list(reader.read(p))) for p in parts) >= 1
    reader.stop()  # as if the driver died: the exported snapshot ends with it
    restarted = PgoutputStreamReader(options, reader.schema)
    with pytest.raises(SnapshotGone, match="delete the checkpoint"):
        restarted.partitions(start, end)
    restarted.stop()
    assert pg18.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,)) == 0


def test_held_counts_a_chunk_once_however_many_batches_carry_it() -> None:
    """A chunk of the online snapshot read on the driver comes in several batches at its
    watermark (its range's rows, then the keys read again): the streaming source's batches
    hold one chunk each, so the chunk must count once. Counted twice, a batch starting at the
    watermark ended there, empty, and the query stalled (found by the Spark soak)."""
    from pgoutput_arrow.live.batches import LiveBatch
    from pgoutput_arrow.spark.stream_held import Held

    def rows(commits: list[int], snapshot: bool) -> LiveBatch:
        batch = pa.record_batch({"id": pa.array(range(len(commits)), pa.int64()),
                                 "_commit_lsn": pa.array(commits, pa.int64()),
                                 "_seq": pa.array(range(len(commits)), pa.int64())})
        return LiveBatch("table", "public.t", 1, batch, max(commits), snapshot=snapshot)

    held = Held(None)
    held.add([rows([90, 95], False)])
    held.add([rows([100] * 5, True), rows([100] * 2, True)])  # one chunk, its keys read again
    held.add([rows([110, 120], False), rows([200] * 3, True)])  # changes, then the next chunk
    assert held.chunks == [100, 200]
    assert held.one_chunk(90, 300) == 200  # up to the second chunk
    assert held.one_chunk(100, 300) == 200  # from the first chunk: not empty
    assert held.one_chunk(200, 300) == 300
