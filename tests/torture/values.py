"""PostgreSQL's text of a value and a consumer's value of it, brought to one comparable form.

The paths whose output is not the decoder's Arrow types (Spark, the CLI's jsonl, the Delta
change log) are compared with test_decoding value by value here: :func:`from_pg_text` reads
PostgreSQL's text (ISO DateStyle, postgres IntervalStyle, UTC, shortest exact floats, hex
bytea: the oracle session's settings) under the column's type as test_decoding names it
(``format_type``), and :func:`from_output` reads what a path produced under the same type.
Both give plain Python values: integers, :class:`decimal.Decimal`, floats as their bits,
days / microseconds since 1970 for dates and timestamps, ``(months, days, microseconds)``
for intervals, lists for arrays; any other type stays text. Nothing here comes from the
decoder: the readers are written from PostgreSQL's output formats.
"""

from __future__ import annotations

import base64
import decimal
import re
import struct
import uuid
from typing import Any

import pyarrow as pa

INT_TYPES = {"smallint", "integer", "bigint", "oid", "posint", "xid"}
FLOAT_TYPES = {"double precision", "real"}
INFINITIES = {"infinity": "infinity", "-infinity": "-infinity"}


class Unreadable(ValueError):
    """A value the reader does not know how to read (reported as a mismatch)."""


def base_type(pg_type: str) -> str:
    """``numeric(10,2)`` → ``numeric``, ``character varying(30)`` → ``character varying``."""
    return re.sub(r"\(.*\)", "", pg_type).strip()


def _days_from_civil(y: int, m: int, d: int) -> int:
    # Howard Hinnant's days_from_civil: proleptic Gregorian, any year (0 = 1 BC).
    y -= m <= 2
    era = y // 400  # floor division: the C original adjusts negative years by hand
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_DATE = re.compile(r"^(-?)(\d{4,})-(\d\d)-(\d\d)")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
_OFFSET = re.compile(r"([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$")


def _year(sign: str, digits: str, bc: bool) -> int:
    y = int(digits)
    if sign:
        y = -y  # ISO 8601 signed year: -0043 is 44 BC (year 0 is 1 BC)
    if bc:
        y = 1 - y
    return y


def _micros(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


def read_date(text: str) -> Any:
    if text in INFINITIES:
        return text
    bc = text.endswith(" BC")
    m = _DATE.match(text)
    if not m:
        raise Unreadable(f"date {text!r}")
    return _days_from_civil(_year(m.group(1), m.group(2), bc), int(m.group(3)), int(m.group(4)))


def read_time(text: str) -> int:
    m = _TIME.match(text)
    if not m:
        raise Unreadable(f"time {text!r}")
    return ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 1_000_000 + _micros(m.group(4))


def read_timestamp(text: str, with_tz: bool) -> Any:
    """PostgreSQL's ISO text (``2024-06-01 12:34:56.789+00``, ``... BC``) or ISO 8601
    (``2024-06-01T12:34:56.789Z``, signed years) as microseconds since 1970 UTC."""
    if text in INFINITIES:
        return text
    bc = text.endswith(" BC")
    t = text[:-3] if bc else text
    m = _DATE.match(t)
    if not m:
        raise Unreadable(f"timestamp {text!r}")
    rest = t[m.end():].lstrip(" T")
    days = _days_from_civil(_year(m.group(1), m.group(2), bc), int(m.group(3)), int(m.group(4)))
    offset = 0
    if rest.endswith("Z"):
        rest = rest[:-1]
    else:
        o = _OFFSET.search(rest)
        if o and with_tz:
            sign = -1 if o.group(1) == "-" else 1
            offset = sign * (int(o.group(2)) * 3600 + int(o.group(3) or 0) * 60 + int(o.group(4) or 0))
            rest = rest[:o.start()]
    return days * 86_400_000_000 + read_time(rest or "00:00:00") - offset * 1_000_000


_INTERVAL_UNITS = {"year": ("m", 12), "years": ("m", 12), "mon": ("m", 1), "mons": ("m", 1),
                   "day": ("d", 1), "days": ("d", 1)}


def read_interval(text: str) -> tuple[int, int, int]:
    """IntervalStyle postgres: ``1 year 2 mons -3 days -04:05:06.7``."""
    months = days = micros = 0
    tokens = text.split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if ":" in tok:
            neg = tok.startswith("-")
            m = re.fullmatch(r"(\d+):(\d\d):(\d\d)(?:\.(\d+))?", tok.lstrip("+-"))
            if not m:
                raise Unreadable(f"interval {text!r}")
            v = ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 1_000_000 + _micros(m.group(4))
            micros += -v if neg else v
            i += 1
            continue
        if i + 1 >= len(tokens) or tokens[i + 1] not in _INTERVAL_UNITS:
            raise Unreadable(f"interval {text!r}")
        unit, mult = _INTERVAL_UNITS[tokens[i + 1]]
        if unit == "m":
            months += int(tok) * mult
        else:
            days += int(tok)
        i += 2
    return months, days, micros


def read_float(text: str, pg_type: str) -> tuple[str, bytes]:
    f = float(text)
    if pg_type == "real":
        return ("f4", struct.pack(">f", f))
    return ("f8", struct.pack(">d", f))


def read_numeric(text: str) -> Any:
    if text in ("NaN", "Infinity", "-Infinity"):
        return text
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise Unreadable(f"numeric {text!r}") from None


def parse_array(text: str) -> Any:
    """PostgreSQL's array text (``{1,NULL,"a b"}``, nested braces) as nested lists of
    element texts (None for NULL). A ``[lo:hi]=`` prefix is kept: the value is special."""
    if text.startswith("["):
        return ("dims", text)
    pos = 0

    def parse() -> list[Any]:
        nonlocal pos
        assert text[pos] == "{"
        pos += 1
        out: list[Any] = []
        if text[pos] == "}":
            pos += 1
            return out
        while True:
            if text[pos] == "{":
                out.append(parse())
            elif text[pos] == '"':
                pos += 1
                buf = []
                while text[pos] != '"':
                    if text[pos] == "\\":
                        pos += 1
                    buf.append(text[pos])
                    pos += 1
                pos += 1
                out.append("".join(buf))
            else:
                j = pos
                while text[j] not in ",}":
                    j += 1
                raw = text[pos:j]
                out.append(None if raw == "NULL" else raw)
                pos = j
            if text[pos] == ",":
                pos += 1
                continue
            assert text[pos] == "}"
            pos += 1
            return out

    return parse()


def from_pg_text(text: str | None, pg_type: str) -> Any:
    """PostgreSQL's text of a value of ``pg_type`` in comparable form."""
    if text is None:
        return None
    if pg_type.endswith("[]"):
        parsed = parse_array(text)
        if isinstance(parsed, tuple):
            return parsed

        def walk(v: Any) -> Any:
            return [walk(x) for x in v] if isinstance(v, list) else from_pg_text(v, pg_type[:-2])
        return walk(parsed)
    t = base_type(pg_type)
    if t in INT_TYPES:
        return int(text)
    if t in FLOAT_TYPES:
        return read_float(text, t)
    if t == "numeric":
        return read_numeric(text)
    if t == "boolean":
        return {"true": True, "false": False, "t": True, "f": False}[text]
    if t == "bytea":
        return bytes.fromhex(text[2:]) if text.startswith("\\x") else text
    if t == "date":
        return read_date(text)
    if t == "time without time zone":
        return read_time(text)
    if t in ("timestamp without time zone", "timestamp with time zone"):
        return read_timestamp(text, t.endswith("with time zone"))
    if t == "interval":
        return read_interval(text)
    if t == "uuid":
        return str(uuid.UUID(text))
    return text


#: The catalog's names (``pg.type_name``, ``typname``) of the types a unified column can be
#: widened to, as ``format_type`` prints them.
_FORMAT_TYPE = {"int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
                "float8": "double precision", "timestamp": "timestamp without time zone",
                "timestamptz": "timestamp with time zone", "varchar": "character varying", "bpchar": "character"}


def format_type(typname: str) -> str:
    """``_timestamp`` → ``timestamp without time zone[]``, ``int8`` → ``bigint``; other names
    (``numeric``, ``date``, ``text``) as they are."""
    if typname.startswith("_"):
        return format_type(typname[1:]) + "[]"
    return _FORMAT_TYPE.get(typname, typname)


def widened(value: Any, was: str, now: str) -> Any:
    """``value`` (as :func:`from_pg_text` reads it under ``was``) as a value of ``now``, the
    wider type a stream unified the column to (README, schema evolution: a date column
    dropped and added again as timestamp holds the date's midnight). Types whose comparable
    forms agree (integers, numerics of any scale, text) need nothing."""
    if isinstance(value, list) and was.endswith("[]") and now.endswith("[]"):
        return [widened(v, was[:-2], now[:-2]) if not isinstance(v, list) else widened(v, was, now) for v in value]
    if (base_type(was) == "date" and base_type(now) == "timestamp without time zone"
            and isinstance(value, int)):
        return value * 86_400 * 10**6
    return value


def from_output(value: Any, pg_type: str, arrow_type: pa.DataType | None = None) -> Any:
    """A path's value (a Python object from Arrow or JSON) of a column of ``pg_type`` in the
    form :func:`from_pg_text` gives. ``arrow_type`` tells the unit of temporal integers."""
    if value is None:
        return None
    if pg_type.endswith("[]"):
        if isinstance(value, str):
            return from_pg_text(value, pg_type)  # kept as PostgreSQL's text (array_ndims=0, special)
        inner = arrow_type.value_type if arrow_type is not None and hasattr(arrow_type, "value_type") else None
        return [from_output(v, pg_type[:-2], inner) if not isinstance(v, list)
                else from_output(v, pg_type, inner) for v in value]
    t = base_type(pg_type)
    if isinstance(value, str) and t not in ("text", "character varying", "character", "json", "jsonb",
                                            "uuid", "bytea"):
        return from_pg_text(value, pg_type)  # PostgreSQL's text (jsonl, utf8 columns, specials)
    if t in INT_TYPES or t == "numeric":
        return value if isinstance(value, (int, decimal.Decimal)) else read_numeric(str(value))
    if t in FLOAT_TYPES:
        return ("f4", struct.pack(">f", value)) if t == "real" else ("f8", struct.pack(">d", value))
    if t == "bytea":
        if isinstance(value, str):  # jsonl: lowercase hex; Delta/Spark: bytes
            return bytes.fromhex(value[2:] if value.startswith("\\x") else value)
        return bytes(value)
    if t == "uuid":
        if isinstance(value, uuid.UUID):
            return str(value)
        return str(uuid.UUID(bytes=value)) if isinstance(value, (bytes, bytearray)) else str(uuid.UUID(value))
    if t == "date":
        if arrow_type is not None and pa.types.is_timestamp(arrow_type) and isinstance(value, int):
            # A date column a later ALTER ... TYPE timestamp widened (docs/cli.md: a sink's
            # files keep one schema): the date's midnight.
            per_day = 86_400 * {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[arrow_type.unit]
            return value // per_day if value % per_day == 0 else ("not a midnight", value)
        return _date_value(value)
    if t == "time without time zone":
        return _time_value(value, arrow_type)
    if t in ("timestamp without time zone", "timestamp with time zone"):
        return _ts_value(value)
    if t == "interval":
        if isinstance(value, dict) and "microseconds" in value:  # the decoder's default struct
            return int(value["months"]), int(value["days"]), int(value["microseconds"])
        if isinstance(value, dict):  # struct<months, days, nanos|nanoseconds>
            nanos = value.get("nanos", value.get("nanoseconds"))
            return int(value["months"]), int(value["days"]), _exact_div(int(nanos), 1000)
        if isinstance(value, tuple) or hasattr(value, "months"):
            return value.months, value.days, _exact_div(value.nanoseconds, 1000)
    if t == "boolean":
        return bool(value)
    if isinstance(value, (bytes, bytearray)):
        return ("raw", base64.b16encode(value).decode())
    return value


def _exact_div(n: int, d: int) -> Any:
    return n // d if n % d == 0 else ("inexact", n, d)


def _date_value(v: Any) -> Any:
    if isinstance(v, int):  # days since 1970 (date32 read as int32)
        return {2**31 - 1: "infinity", -2**31: "-infinity"}.get(v, v)
    import datetime as dt
    if isinstance(v, dt.datetime):
        v = v.date()
    return (v - dt.date(1970, 1, 1)).days


def _time_value(v: Any, arrow_type: pa.DataType | None) -> Any:
    if isinstance(v, int):
        unit = getattr(arrow_type, "unit", "us")
        if unit == "ns":
            return _exact_div(v, 1000)
        return v * {"s": 1_000_000, "ms": 1000, "us": 1}[unit]
    return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond


def _ts_value(v: Any) -> Any:
    if isinstance(v, int):  # microseconds since 1970 (timestamp read as int64)
        return {2**63 - 1: "infinity", -2**63: "-infinity"}.get(v, v)
    import datetime as dt
    if v.tzinfo is not None:
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    delta = v - dt.datetime(1970, 1, 1)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def plain(table: pa.Table) -> tuple[list[dict[str, Any]], dict[str, pa.DataType]]:
    """``table``'s rows as Python objects, dates, times and timestamps as integers in their
    unit (Python's datetime cannot hold ±infinity or years past 9999), with each column's
    original type."""
    cols = {}
    types = {}
    for name in table.column_names:
        col = table.column(name)
        types[name] = col.type
        cols[name] = _plain_array(col).to_pylist()
    n = table.num_rows
    return [{k: v[i] for k, v in cols.items()} for i in range(n)], types


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):  # _before: dates and timestamps of old values too
        return pa.struct([pa.field(f.name, _plain_type(f.type), True) for f in t])
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    return t


def _plain_array(col: Any) -> Any:
    t = col.type
    if isinstance(t, pa.BaseExtensionType):
        col = pa.chunked_array([c.storage for c in col.chunks], t.storage_type) \
            if isinstance(col, pa.ChunkedArray) else col.storage
        t = col.type
    if pa.types.is_timestamp(t) and t.unit != "us":
        # Delta and Spark hand timestamps back in microseconds; a coarser unit is scaled.
        col = col.cast(pa.timestamp("us", t.tz))
        t = col.type
    target = _plain_type(t)
    if target != t:
        col = col.cast(target)
    return col
