"""Every DataFrame pgoutput_arrow.spark returns, on a default SparkSession.

``SparkSession.builder.master("local[2]").getOrCreate()`` with nothing tuned (the workers
are pointed at this interpreter, which the harness needs): no ``spark.sql.timeType.enabled``,
the machine's time zone, Arrow-optimised ``toPandas`` (pandas' nanosecond timestamps), no
schema validation. On PostgreSQL 18 (binary capture) and 15 (text capture), a table with
a column of each type of README's table and rows of the values PostgreSQL accepts that
Python, pandas or Spark cannot hold (±infinity, BC, years past 9999, timestamps beyond
pandas' range, ``time '24:00'``, numeric NaN/±Infinity, interval ±infinity on PG17+), then:
On 15 the session's time zone is America/St_Johns (as on a machine there: -3:30, summer
time), so Spark's own timestamp handling runs off UTC too.
``decode``, the ``pgoutput_changes`` UDTF, the batch data source, ``snapshot(...).read``,
the streaming source and ``apply_changes`` each go through count, a Parquet and a ``noop``
write, ``groupBy().count()``, a join, ``collect`` and ``toPandas``; the collected values
are compared with PostgreSQL's own (its text output read in ISO/UTC settings): a value
Spark or PySpark cannot hold is null in its column and PostgreSQL's text in ``_special``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pyspark  # noqa: F401  (a dependency: missing it is a failure, not a skip)
from pgoutput_arrow import spark as sp

UTC = datetime.timezone.utc

#: (name, type) of the table's columns after ``id``: README's types table.
COLUMNS = (
    ("o", "oid"), ("i2", "int2"), ("i4", "int4"), ("i8", "int8"), ("f4", "float4"),
    ("f8", "float8"), ("n10", "numeric(10,2)"), ("nfree", "numeric"), ("n50", "numeric(50,5)"),
    ("t", "text"), ("bp", "char(6)"), ("nm", "name"), ("ba", "bytea"), ("bo", "bool"),
    ("d", "date"), ("tm", "time"), ("ts", "timestamp"), ("tz", "timestamptz"),
    ("iv", "interval"), ("u", "uuid"), ("js", "json"), ("jb", "jsonb"), ("ai", "int4[]"),
    ("at", "text[]"), ("ad", "date[]"), ("atz", "timestamptz[]"), ("en", "{enum}"),
    ("ip", "inet"), ("mo", "money"), ("tt", "timetz"), ("rg", "int4range"), ("vb", "varbit"),
    ("vc", "varchar(20)"), ("ch", '"char"'), ("cd", "cidr"), ("mc", "macaddr"), ("pt", "point"),
    ("mr", "int4multirange"), ("pl", "pg_lsn"), ("cp", "{comp}"),
)
#: Types a binary stream sends as their send bytes only (README: binary in Spark).
SEND_BYTES = ("{enum}", "{comp}")

#: Values of the columns after ``vb``, per row (rows 1 to 6; row 7 is all NULL).
_MORE = (
    ("'v1'", "'a'", "'10.0.0.0/8'", "'08:00:2b:01:02:03'", "'(1,2)'", "'{[1,3),[5,7)}'", "'16/B374D848'", "ROW(1, 'x')"),
    ("''", "'z'", "'::/0'", "'ff:ff:ff:ff:ff:ff'", "'(-1e300,1e-300)'", "'{}'", "'FFFFFFFF/FFFFFFFF'", "ROW(NULL, NULL)"),
    ("'x'", "'b'", "'192.168.1.0/24'", "'00:00:00:00:00:00'", "'(0,-0)'", "'{(,5]}'", "'0/0'", "ROW(-1, 'q\"t, (x)')"),
    ("'héllo'", "'c'", "'2001:db8::/32'", "'01:02:03:04:05:06'", "'(1.5,-2)'", "'{[1,2],[4,9)}'", "'1/0'", "ROW(2147483647, '')"),
    ("'a b'", "'d'", "'0.0.0.0/0'", "'0a:0b:0c:0d:0e:0f'", "'(3,4)'", "'{[-5,0)}'", "'0/1'", "ROW(0, 'a b')"),
    ("'z'", "'e'", "'1.2.3.4/32'", "'aa:bb:cc:dd:ee:ff'", "'(5,6)'", "'{[7,8)}'", "'2/2'", "ROW(NULL, 'n')"),
)
NAMES = [c for c, _ in COLUMNS]


def _rows(pg_version: int) -> list[tuple[int, ...]]:
    """SQL literals of each row's values (``id`` first)."""
    inf_iv = "'infinity'" if pg_version >= 170000 else "'-178000000 years'"
    ninf_iv = "'-infinity'" if pg_version >= 170000 else "'-1 mons -2 days -00:00:00.000001'"
    rows = [
        (1, "1", "1", "1", "1", "1.5", "2.25", "3.14", "1.5", "2.5", "'a'", "'ab'", "'nm'",
         "'\\x00ff'", "true", "'2024-02-29'", "'12:34:56.789'", "'2024-02-29 12:34:56.789012'",
         "'2024-02-29 12:34:56.789012+05:30'", "'1 year 2 mons 3 days 04:05:06.789'",
         "'12345678-9abc-def0-1234-56789abcdef0'", "'{\"a\": 1}'", "'{\"b\": [1, 2]}'",
         "'{1,NULL,3}'", "'{\"x y\",NULL}'", "'{2024-01-01,NULL}'", "'{\"2024-01-01 00:00+00\"}'",
         "'ok'", "'10.0.0.1'", "12.34", "'12:00+03'", "'[1,5)'", "B'101'"),
        # ±infinity, NaN and the largest values; time 24:00
        (2, "4294967295", "32767", "2147483647", "9223372036854775807", "'NaN'", "'Infinity'",
         "'NaN'", "'Infinity'", "'1.5'", "repeat('long ', 50)", "'abcdef'", "'n'", "''", "false",
         "'infinity'", "'24:00:00'", "'-infinity'", "'infinity'", inf_iv,
         "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'[]'", "'null'", "'{}'", "'{}'",
         "'{infinity,-infinity}'", "'{-infinity}'", "'sad'", "'::1'", "-0.01",
         "'00:00:00-14:59'", "'empty'", "B''"),
        # BC
        (3, "0", "-32768", "-2147483648", "-9223372036854775808", "'-Infinity'", "'NaN'",
         "'NaN'", "'-Infinity'", "'-0.00001'", "''", "''", "''", "'\\x'", "true",
         "'0044-03-15 BC'", "'00:00:00'", "'0044-03-15 12:00:00 BC'",
         "'0001-01-01 00:00:00+00 BC'", ninf_iv, "'00000000-0000-0000-0000-000000000000'",
         "'\"s\"'", "'3'", "'{NULL}'", "'{NULL}'", "'{\"0001-12-31 BC\"}'",
         "'{\"2000-01-01 00:00+00\",\"0001-01-01 00:00+00 BC\"}'", "'happy'",
         "'2001:db8::1/64'", "0", "'23:59:59.999999+15:59'", "'(,5]'", "B'1'"),
        # years past 9999
        (4, "7", "7", "7", "7", "'-0.5'", "'-1e300'", "99999999.99",
         "'123456789012345678901234567890.123456789012345678901'",
         "'12345678901234567890123456789012345678901234.12345'", "'héllo wörld ☃'", "'x'",
         "'a_name'", "'\\xdeadbeef'", "false", "'10000-01-01'", "'23:59:59.999999'",
         "'294276-12-31 23:59:59.999999'", "'12345-06-07 08:09:10+00'", "'-1 days'",
         "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'{\"b\": 2, \"a\": 1}'", "'{\"b\": 2, \"a\": 1}'",
         "'{5}'", "'{\"q\\\"t\",\"\"}'", "'{9999-12-31,10000-01-01}'", "'{}'", "'ok'",
         "'192.168.1.0/24'", "-92233720368547758.08", "'00:00:00.000001+00'", "'[-5,5]'",
         "B'11110000'"),
        # the edges of pandas' timestamps (inside), Python's first and last dates
        (5, "42", "1", "2", "3", "'3.5'", "'0.1'", "-0.01", "'-0.000000000000000000000000000001'",
         "'-1.5'", "'t'", "'b'", "'q'", "'\\x01'", "true", "'0001-01-01'", "'00:00:00.000001'",
         "'1677-09-22 00:00:00'", "'2262-04-10 23:59:59.999999+00'", "'0'",
         "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'", "'{}'", "'{}'", "'{-1}'", "'{z}'",
         "'{0001-01-01}'", "'{\"2262-04-10 23:59:59+00\"}'", "'sad'", "'0.0.0.0'", "0.01",
         "'12:00-05:30'", "'[1,2)'", "B'0'"),
        # just beyond pandas' timestamps; the last date
        (6, "43", "2", "3", "4", "'-3.5'", "'-0.1'", "0", "'0'", "'0'", "'u'", "'c'", "'r'",
         "'\\x02'", "false", "'9999-12-31'", "'13:00'", "'1677-09-21 23:59:59.999999'",
         "'2262-04-11 00:00:00+00'", "'-1 years -1 mons'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13'",
         "'1'", "'1'", "'{0}'", "'{y}'", "'{1500-01-01}'", "'{\"1500-01-01 00:00+00\"}'",
         "'happy'", "'1.2.3.4'", "1", "'13:00+00'", "'[3,4)'", "B'01'"),
    ]
    rows = [(*r, *more) for r, more in zip(rows, _MORE)]
    return [*rows, (7, *(["NULL"] * len(COLUMNS)))]


#: Updates (id, from id): the row takes every value of the other, then the deletes.
UPDATES = ((1, 2), (3, 4), (5, 6))
DELETES = (7, 106)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A default SparkSession. One session runs per process (``getOrCreate`` would hand
    back a tuned one made by an earlier module), so an active one is stopped first."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    session = SparkSession.builder.master("local[2]").appName("pgoutput-default-session").getOrCreate()
    # A session made earlier in this process left its SQL settings in the JVM's SparkConf,
    # which a new session starts from: back to Spark's defaults.
    for key, _ in session.sparkContext.getConf().getAll():
        if key.startswith("spark.sql.") and key not in ("spark.sql.warehouse.dir", "spark.sql.catalogImplementation"):
            try:
                session.conf.unset(key)
            except Exception:  # noqa: BLE001 - a static setting: it cannot be tuned per session either
                pass
    # What this module is about: nothing tuned.
    assert session.conf.get("spark.sql.timeType.enabled") == "false"
    assert session.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert session.conf.get("spark.sql.execution.arrow.pyspark.validateSchema.enabled") == "false"
    yield session
    session.stop()


# --------------------------------------------------------------------------- the oracle

TS_MIN = datetime.datetime(1677, 9, 22)
TS_MAX = datetime.datetime(2262, 4, 10, 23, 59, 59, 999999)
SPECIAL = object()


def _year(text: str) -> int:
    return int(text.split("-")[0])


def _ts(text: str) -> datetime.datetime | None:
    """A timestamp[tz] text as a naive UTC datetime, or None if Spark cannot hold it (the rule
    of datetime_range='pandas', README)."""
    if text in ("infinity", "-infinity") or text.endswith(" BC") or _year(text) > 9999:
        return None
    dt = datetime.datetime.fromisoformat(text)
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return dt if TS_MIN <= dt <= TS_MAX else None


def _date(text: str) -> datetime.date | None:
    if text in ("infinity", "-infinity") or text.endswith(" BC") or _year(text) > 9999:
        return None
    return datetime.date.fromisoformat(text)


_IV_PART = re.compile(r"(-?\d+) (year|mon|day)s?")


def _interval(text: str) -> tuple[int, int, int]:
    """(months, days, nanoseconds) of an interval's text (IntervalStyle postgres)."""
    if text in ("infinity", "-infinity"):
        m = 2**31 - 1 if text == "infinity" else -2**31
        return (m, m, 2**63 - 1 if text == "infinity" else -2**63)
    months = days = 0
    for n, unit in _IV_PART.findall(text):
        if unit == "year":
            months += 12 * int(n)
        elif unit == "mon":
            months += int(n)
        else:
            days += int(n)
    nanos = 0
    clock = re.search(r"(-?)(\d+):(\d\d):(\d\d)(?:\.(\d+))?$", text)
    if clock:
        sign, h, mi, s, f = clock.groups()
        us = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 10**6 + int((f or "").ljust(6, "0"))
        nanos = (-us if sign else us) * 1000
    return months, days, nanos


def expected_value(col: str, text: str | None, js: str | None, binary: bool) -> Any:
    """What PySpark's collect() gives for PostgreSQL's ``text`` of a value of ``col`` (``js``:
    its to_json, for arrays), or SPECIAL when the value belongs in ``_special``."""
    if text is None:
        return None
    kind = dict(COLUMNS)[col]
    if kind in ("oid", "int2", "int4", "int8"):
        return int(text)
    if kind == "float4":
        return struct.unpack("f", struct.pack("f", float(text)))[0]
    if kind == "float8":
        return float(text)
    if kind == "numeric(10,2)":
        return SPECIAL if text in ("NaN", "Infinity", "-Infinity") else decimal.Decimal(text)
    if kind == "bytea":
        return bytes.fromhex(text[2:])
    if kind == "bool":
        return text == "t"
    if kind == "date":
        d = _date(text)
        return SPECIAL if d is None else d
    if kind == "time":
        return SPECIAL if text == "24:00:00" else text  # the default session: PostgreSQL's text
    if kind in ("timestamp", "timestamptz"):
        t = _ts(text)
        return SPECIAL if t is None else t
    if kind == "interval":
        return _interval(text)
    if kind in SEND_BYTES and binary:
        assert js is not None
        return bytes.fromhex(js)  # README: the raw send bytes in binary mode
    if kind.endswith("[]"):
        items = json.loads(js) if js is not None else None
        assert isinstance(items, list)
        if kind == "date[]":
            got = [None if v is None else _date(v) for v in items]
        elif kind == "timestamptz[]":
            got = [None if v is None else _ts(v.replace("T", " ")) for v in items]
        else:
            return items
        return SPECIAL if any(g is None and v is not None for g, v in zip(got, items)) else got
    return text  # the types Spark gets as PostgreSQL's text


def pg_state(conn: Any, table: str) -> dict[int, dict[str, tuple[str | None, str | None]]]:
    """PostgreSQL's values of every row: id → column → (text output, to_json of an array or
    the hex of an enum's or composite's send bytes), read in ISO/UTC settings."""
    def second(c: str, k: str) -> str:
        if k.endswith("[]"):
            return f"to_json({c})::text"
        if k in SEND_BYTES:
            return f"encode({'enum_send' if k == '{enum}' else 'record_send'}({c}), 'hex')"
        return "NULL"

    # format('%s'): each type's output function (bpchar keeps its padding); NULL stays NULL.
    # (num_nonnulls: a composite with NULL fields IS NULL, but is a value.)
    outs = ", ".join(f"CASE WHEN num_nonnulls({c}) = 1 THEN format('%s', {c}) END, {second(c, k)}"
                     for c, k in COLUMNS)
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, {outs} FROM {table} ORDER BY id")
        rows = cur.fetchall()
    return {r[0]: {c: (r[1 + 2 * i], r[2 + 2 * i]) for i, c in enumerate(NAMES)} for r in rows}


# --------------------------------------------------------------------------- comparing

def _plain(v: Any) -> Any:
    """A collected Spark value in plain Python (Rows as tuples or dicts, bytearray as bytes)."""
    from pyspark.sql import Row

    if isinstance(v, Row):
        if "months" in v.__fields__:
            us = v["microseconds"]
            # ±infinity keeps every field at its extreme (as _interval gives it).
            return (v["months"], v["days"], us if us in (2**63 - 1, -(2**63)) else us * 1000)
        return {k: _plain(v[k]) for k in v.__fields__}
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _collected(col: str, v: Any) -> Any:
    v = _plain(v)
    kind = dict(COLUMNS)[col]
    if kind in ("timestamptz",) and v is not None:
        return v.astimezone(UTC).replace(tzinfo=None)  # collect(): local naive time
    if kind == "timestamptz[]" and v is not None:
        return [None if x is None else x.astimezone(UTC).replace(tzinfo=None) for x in v]
    return v


def check_values(where: str, values: dict[str, Any], special: dict[str, str] | None, prefix: str,
                 pg: dict[str, tuple[str | None, str | None]], binary: bool, problems: list[str]) -> None:
    """Each column's collected value against PostgreSQL's: equal, or null with PostgreSQL's
    text in ``_special[prefix + column]``."""
    special = special or {}
    for c in NAMES:
        text, js = pg[c]
        want = expected_value(c, text, js, binary)
        got = _collected(c, values[c])
        if want is SPECIAL:
            if got is not None or special.get(prefix + c) != text:
                problems.append(f"{where} {c}: want null and _special {text!r}, got {got!r}, "
                                f"_special {special.get(prefix + c)!r}")
        elif not _same(got, want) or (prefix + c) in special:
            problems.append(f"{where} {c}: PostgreSQL {text!r} -> want {want!r}, got {got!r}"
                            f" (_special {special.get(prefix + c)!r})")


def _pandas_plain(v: Any) -> Any:
    import numpy as np
    import pandas as pd

    if isinstance(v, np.ndarray):
        return [_pandas_plain(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_pandas_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _pandas_plain(x) for k, x in v.items()}
    if v is None or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def _row_plain(v: Any) -> Any:
    from pyspark.sql import Row

    if isinstance(v, Row):
        return {k: _row_plain(v[k]) for k in v.__fields__}
    if isinstance(v, (list, tuple)):
        return [_row_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _row_plain(x) for k, x in v.items()}
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, float) and math.isnan(v):
        return None  # pandas shows a float column's NULL as NaN
    return v


def _as_pandas_shows(r: datetime.datetime, zone: str) -> datetime.datetime:
    """The wall time ``toPandas`` shows for the instant that ``collect`` gave as ``r`` (naive,
    in this process's local time): PySpark converts with pandas to the session's time zone
    named as a string, whose rules (pytz's) end in 2037, so a later summer time is an hour off
    the true wall time (``collect``'s, from Python's own zone rules). PySpark's and pandas'
    rule for any DataFrame, not the decoder's (docs/spark.md)."""
    import pandas as pd

    return pd.Timestamp(r.astimezone(UTC)).tz_convert(zone).tz_localize(None).to_pydatetime()


def _pandas_same(p: Any, r: Any, dtype: Any, zone: str) -> bool:
    """``toPandas``'s value ``p`` against ``collect``'s ``r`` of Spark type ``dtype`` in a
    session whose time zone is ``zone``."""
    from pyspark.sql.types import ArrayType, StructType, TimestampType

    if isinstance(p, float) and math.isnan(p):
        return r is None
    if isinstance(p, float) and isinstance(r, int) and not isinstance(r, bool):
        # PySpark's toPandas makes an integer column holding NULLs float64 (its rule, for any
        # DataFrame): the value rounded to a double (docs/spark.md says so).
        return p == float(r)
    if isinstance(p, list) and isinstance(r, list):
        element = dtype.elementType if isinstance(dtype, ArrayType) else None
        return len(p) == len(r) and all(_pandas_same(x, y, element, zone) for x, y in zip(p, r))
    if isinstance(p, dict) and isinstance(r, dict):
        fields = {f.name: f.dataType for f in dtype.fields} if isinstance(dtype, StructType) else {}
        return p.keys() == r.keys() and all(_pandas_same(p[k], r[k], fields.get(k), zone) for k in p)
    if isinstance(p, datetime.datetime) and isinstance(r, datetime.datetime):
        if isinstance(dtype, TimestampType):
            return p.replace(tzinfo=None) == _as_pandas_shows(r, zone)
        return p.replace(tzinfo=None) == r.replace(tzinfo=None)
    return p == r


def exercise(spark: Any, df: Any, what: str, key: str, tmp: Path, problems: list[str]) -> list[Any]:
    """count, a Parquet and a noop write, groupBy().count(), a join, collect and toPandas of
    ``df`` (a failure of any is a problem); returns the collected rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    steps: dict[str, Callable[[], Any]] = {}
    out: dict[str, Any] = {}
    steps["count"] = df.count
    path = str(tmp / what.replace(" ", "_").replace(".", "_"))
    steps["parquet"] = lambda: (df.write.mode("overwrite").parquet(path), spark.read.parquet(path).count())[1]
    steps["noop"] = lambda: df.write.format("noop").mode("overwrite").save()
    groupable = [f.name for f in df.schema if not isinstance(f.dataType, MapType)]
    steps["groupBy"] = lambda: sum(r["count"] for r in df.groupBy(*groupable).count().collect())
    other = df.select(F.col(key).alias("_k2")).distinct()
    steps["join"] = lambda: df.join(other, F.col(key).eqNullSafe(F.col("_k2"))).count()
    steps["collect"] = df.collect
    steps["toPandas"] = df.toPandas
    for name, step in steps.items():
        try:
            out[name] = step()
        except Exception as e:  # noqa: BLE001 - each failure is reported, then the test fails
            problems.append(f"{what}: {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    n = out.get("count")
    for name in ("parquet", "groupBy", "join"):
        if name in out and out[name] != n:
            problems.append(f"{what}: {name} gives {out[name]} rows, count {n}")
    rows = out.get("collect", [])
    if len(rows) != n:
        problems.append(f"{what}: collect gives {len(rows)} rows, count {n}")
    pdf = out.get("toPandas")
    if pdf is not None:
        if len(pdf) != len(rows):
            problems.append(f"{what}: toPandas gives {len(pdf)} rows, collect {len(rows)}")
        else:
            zone = spark.conf.get("spark.sql.session.timeZone")
            for i, r in enumerate(rows):
                for c in df.columns:
                    p, v = _pandas_plain(pdf[c].iloc[i]), _row_plain(r[c])
                    if not _pandas_same(p, v, df.schema[c].dataType, zone):
                        problems.append(f"{what}: toPandas row {i} {c}: {p!r} != collect {v!r}")
    return rows


# --------------------------------------------------------------------------- the workload

def _changes_expected(a: dict[int, Any], b: dict[int, Any], ids: list[int]) -> list[tuple[str, int, Any, Any]]:
    """(op, id, new values, old values) of the changes made after state ``a`` of ``ids``."""
    out: list[tuple[str, int, Any, Any]] = [("insert", i, a[i], None) for i in ids]
    out += [("update", i, b[i], a[i]) for i, _ in UPDATES]
    out += [("delete", i, None, a[i] if i in a else a[i - 100]) for i in DELETES]
    return out


def check_change_rows(what: str, rows: list[Any], expected: list[tuple[str, int, Any, Any]], binary: bool,
                      problems: list[str]) -> None:
    got: dict[tuple[str, int], Any] = {}
    for r in rows:
        i = r["id"] if r["_op"] != "delete" else r["_before"]["id"]
        got[(r["_op"], i)] = r
    want = {(op, i): (new, old) for op, i, new, old in expected}
    if sorted(got) != sorted(want):
        problems.append(f"{what}: changes {sorted(got)}, want {sorted(want)}")
    for k in sorted(set(got) & set(want)):
        r, (new, old) = got[k], want[k]
        special = r["_special"]
        if new is not None:
            check_values(f"{what} {k}", r.asDict(), special, "", new, binary, problems)
        if old is not None:
            check_values(f"{what} {k} _before", r["_before"].asDict(), special, "_before.", old, binary, problems)


@pytest.mark.parametrize("version,zone", [(18, None), (15, "America/St_Johns")])
def test_every_dataframe_on_a_default_session(spark: Any, version: int, zone: str | None, unique_name: str,
                                              request: Any, tmp_path: Path) -> None:
    """``zone``: the session's time zone, as on a machine in that zone (a half-hour offset,
    summer time); None: this machine's."""
    if zone is not None:
        spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        _every_dataframe(spark, version, unique_name, request, tmp_path)
    finally:
        spark.conf.unset("spark.sql.session.timeZone")


def _every_dataframe(spark: Any, version: int, unique_name: str, request: Any, tmp_path: Path) -> None:
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    pg = request.getfixturevalue(f"pg{version}")
    binary = version == 18  # one capture per server: binary on 18, text on 15
    t, enum, comp, pub = f"{unique_name}_t", f"{unique_name}_mood", f"{unique_name}_pair", f"{unique_name}_pub"
    cap, live = f"{unique_name}_cap", f"{unique_name}_live"
    name = f"public.{t}"
    conn = pg.connect()
    with conn.cursor() as cur:
        # The oracle and the capture read in ISO/UTC settings (as a subscriber sets them).
        cur.execute("SET DateStyle = 'ISO, MDY'; SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres'; "
                    "SET extra_float_digits = 1")
        cols = ", ".join(f"{c} {k.format(enum=enum, comp=comp)}" for c, k in COLUMNS)
        cur.execute(f"CREATE TYPE {enum} AS ENUM ('sad', 'ok', 'happy'); "
                    f"CREATE TYPE {comp} AS (a int, b text); "
                    f"CREATE TABLE {t} (id int PRIMARY KEY, {cols}); "
                    f"ALTER TABLE {t} REPLICA IDENTITY FULL; CREATE PUBLICATION {pub} FOR TABLE {t}")
    pg.create_slot(cap)
    rows = _rows(pg.server_version_num)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {t} (id, {', '.join(NAMES)}) VALUES "
                    + ", ".join(f"({', '.join(map(str, r))})" for r in rows))
    first = pg_state(conn, t)
    problems: list[str] = []

    # The snapshot (a new slot exporting it) holds the rows as inserted.
    with sp.snapshot(spark, pg.dsn, slot=live, publication=pub) as snap:
        got = exercise(spark, snap.read(name), "snapshot", "id", tmp_path, problems)
        if sorted(r["id"] for r in got) != sorted(first):
            problems.append(f"snapshot: ids {sorted(r['id'] for r in got)}, want {sorted(first)}")
        for r in got:
            check_values(f"snapshot {r['id']}", r.asDict(), r["_special"], "", first[r["id"]], False, problems)

    with conn.cursor() as cur:
        sets = ", ".join(f"{c} = s.{c}" for c in NAMES)
        cur.execute(f"INSERT INTO {t} SELECT id + 100, {', '.join(NAMES)} FROM {t}")
        for i, src in UPDATES:
            cur.execute(f"UPDATE {t} x SET {sets} FROM {t} s WHERE x.id = {i} AND s.id = {src}")
        cur.execute(f"DELETE FROM {t} WHERE id = ANY(%s)", (list(DELETES),))
    last = pg_state(conn, t)
    before = {**first, **{i + 100: first[i] for i in first}}
    everything = _changes_expected(before, last, sorted(before))
    after_snapshot = _changes_expected(before, last, sorted(i + 100 for i in first))

    with conn.cursor() as cur:
        opts = ["proto_version", "1", "publication_names", pub] + (["binary", "true"] if binary else [])
        cur.execute("SELECT lsn::text, xid::text, data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
                    "VARIADIC %s::text[])", (cap, opts))
        capture = [(lsn, int(xid), bytes(data)) for lsn, xid, data in cur.fetchall()]
    pg.drop_slot(cap)
    conn.close()
    schema = StructType([StructField("lsn", StringType()), StructField("xid", LongType()),
                         StructField("data", BinaryType())])
    capture_df = spark.createDataFrame([(l, x, bytearray(d)) for l, x, d in capture], schema)

    # decode: every change, value by value.
    decoded = sp.decode(capture_df.repartition(2))[name]
    if decoded.schema["tm"].dataType.simpleString() != "string":  # no timeType: text
        problems.append(f"decode: time is {decoded.schema['tm'].dataType.simpleString()} without timeType")
    got = exercise(spark, decoded, "decode", "id", tmp_path, problems)
    check_change_rows("decode", got, everything, binary, problems)

    # apply_changes: the replica equals the table.
    replica = sp.apply_changes(decoded, keys=["id"])
    got = exercise(spark, replica, "apply_changes", "id", tmp_path, problems)
    if sorted(r["id"] for r in got) != sorted(last):
        problems.append(f"apply_changes: ids {sorted(r['id'] for r in got)}, want {sorted(last)}")
    for r in got:
        check_values(f"apply_changes {r['id']}", r.asDict(), r["_special"], "", last[r["id"]], binary, problems)

    # The batch data source reads the capture from Parquet files.
    path = tmp_path / "capture"
    path.mkdir()
    pq.write_table(pa.table({"lsn": [l for l, _, _ in capture], "xid": [x for _, x, _ in capture],
                             "data": pa.array([d for _, _, d in capture], pa.binary())}), path / "part-0.parquet")
    sp.register(spark)
    source = spark.read.format("pgoutput").option("table", name).load(str(path))
    got = exercise(spark, source, "batch source", "id", tmp_path, problems)
    check_change_rows("batch source", got, everything, binary, problems)

    # The UDTF: values as PostgreSQL's text (special ones too).
    capture_df.createOrReplaceTempView(f"{unique_name}_capture")
    udtf = spark.sql(f"SELECT * FROM pgoutput_changes(TABLE(SELECT lsn, xid, data FROM {unique_name}_capture) "
                     "WITH SINGLE PARTITION)")
    got = exercise(spark, udtf, "UDTF", "lsn", tmp_path, problems)
    by_key = {(r["op"], int((r["new"] or r["old"])["id"])): r for r in got}
    for op, i, new, old in everything:
        r = by_key.get((op, i))
        if r is None:
            problems.append(f"UDTF: no {op} of {i}")
            continue
        for values, want in ((r["new"], new), (r["old"], old)):
            if want is None:
                continue
            texts = {c: want[c][0] for c in NAMES}
            if binary:  # an enum's or a composite's send bytes, as bytea's text
                for c, k in COLUMNS:
                    if k in SEND_BYTES and texts[c] is not None:
                        texts[c] = "\\x" + want[c][1]
            got_texts = {c: values.get(c) for c in NAMES}
            bad = {c: (got_texts[c], texts[c]) for c in NAMES if got_texts[c] != texts[c]}
            if bad:
                problems.append(f"UDTF {op} {i}: (got, PostgreSQL) {bad}")

    # The streaming source: the changes after the snapshot, batch by batch.
    streamed: list[Any] = []

    def each_batch(batch: Any, batch_id: int) -> None:
        streamed.extend(exercise(spark, batch, f"stream batch {batch_id}", "id", tmp_path, problems))

    stream = (spark.readStream.format("pgoutput").option("dsn", pg.dsn).option("slot", live)
              .option("publication", pub).option("table", name).load())
    q = (stream.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    check_change_rows("stream", streamed, after_snapshot, False, problems)
    pg.drop_slot(live)

    assert not problems, "\n".join(problems[:60]) + f"\n({len(problems)} problems)"
