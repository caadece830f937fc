"""Decoded Arrow columns to JSON-safe Python values, for ``pgoutput-dump``'s ``jsonl`` and
``pretty`` formats.

JSON-safe means: nothing a JSON parser could silently change. 64-bit integers and decimals
become strings (doubles cannot hold them), bytes become lowercase hex, NaN and ±Infinity
become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, dates and timestamps ISO 8601
(timestamps with a time zone in UTC with ``Z``), intervals ``{"months", "days",
"nanoseconds"}``. Dates and timestamps outside Python's ``datetime`` range (years before 1
or after 9999, which PostgreSQL allows) are formatted too, with a signed year.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Raw", "column_values", "format_pretty", "iso_timestamp", "iso_date"]


class Raw(str):
    """A value that ``pretty`` prints without quotes (a timestamp, a number as text)."""

    __slots__ = ()


_US_PER_DAY = 86_400_000_000

#: PostgreSQL's ±infinity dates and timestamps, which the decoder keeps as the extreme
#: values of the Arrow type (PostgreSQL's own sentinels).
_INFINITY: dict[int, Raw] = {
    2**31 - 1: Raw("infinity"), -(2**31): Raw("-infinity"),
    2**63 - 1: Raw("infinity"), -(2**63): Raw("-infinity"),
}


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Days since 1970-01-01 → proleptic Gregorian (year, month, day), for any year
    (Howard Hinnant's algorithm)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return (y + 1 if m <= 2 else y, m, d)


def _year(y: int) -> str:
    # ISO 8601: four digits, expanded with a sign outside 0000-9999 (year 0 is 1 BC).
    return f"{y:04d}" if 0 <= y <= 9999 else f"{y:+05d}"


def iso_date(days: int) -> str:
    y, m, d = _civil_from_days(days)
    return f"{_year(y)}-{m:02d}-{d:02d}"


def _iso_time(us: int) -> str:
    s, frac = divmod(us, 1_000_000)
    h, rem = divmod(s, 3600)
    mi, sec = divmod(rem, 60)
    text = f"{h:02d}:{mi:02d}:{sec:02d}"
    return f"{text}.{frac:06d}" if frac else text


def iso_timestamp(us: int, utc: bool, sep: str = "T") -> str:
    """Microseconds since 1970-01-01 → ISO 8601, ``Z`` when ``utc``."""
    days, rest = divmod(us, _US_PER_DAY)
    return f"{iso_date(days)}{sep}{_iso_time(rest)}{'Z' if utc else ''}"


def _float(v: float | None, raw: bool) -> Any:
    if v is None or math.isfinite(v):
        return v
    text = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return Raw(text) if raw else text


def _hex(v: bytes | None, pretty: bool) -> Any:
    if v is None:
        return None
    return Raw("\\x" + v.hex()) if pretty else v.hex()


def _uuid(v: bytes | None) -> str | None:
    if v is None:
        return None
    h = v.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _ints(arr: pa.Array) -> list[int | None]:
    """The integers behind a temporal array (days, microseconds, ...), whatever their range:
    ``to_pylist`` would need Python's datetime, which stops at year 9999."""
    width = pa.int32() if arr.type.bit_width == 32 else pa.int64()
    return arr.view(width).to_pylist()  # type: ignore[no-any-return]


def _extension_name(arr: pa.Array, field: pa.Field | None) -> str | None:
    if isinstance(arr.type, pa.BaseExtensionType):
        return str(arr.type.extension_name)
    if field is not None and field.metadata:
        name = field.metadata.get(b"ARROW:extension:name")
        return name.decode() if name else None
    return None


def column_values(arr: pa.Array | pa.ChunkedArray, pretty: bool = False,
                  field: pa.Field | None = None) -> list[Any]:
    """The values of one column as JSON-safe Python values (``pretty``: values for the
    pretty printer instead, numbers as numbers and text-like values as :class:`Raw`)."""
    if isinstance(arr, pa.ChunkedArray):
        out: list[Any] = []
        for chunk in arr.chunks:
            out.extend(column_values(chunk, pretty, field))
        return out
    ext = _extension_name(arr, field)
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    t = arr.type
    if ext == "arrow.uuid" and pa.types.is_fixed_size_binary(t):
        return [_uuid(v) for v in arr.to_pylist()]
    if pa.types.is_null(t):
        return [None] * len(arr)
    if pa.types.is_dictionary(t):
        return column_values(arr.dictionary_decode(), pretty, field)
    if pa.types.is_boolean(t) or (pa.types.is_integer(t) and t.bit_width <= 32):
        return arr.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_integer(t):
        return [v if pretty or v is None else str(v) for v in arr.to_pylist()]
    if pa.types.is_floating(t):
        return [_float(v, pretty) for v in arr.to_pylist()]
    if pa.types.is_decimal(t):
        return [None if v is None else (Raw if pretty else str)(format(v, "f"))
                for v in arr.to_pylist()]
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return arr.to_pylist()  # type: ignore[no-any-return]
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        return [_hex(v, pretty) for v in arr.to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else _INFINITY.get(v) or Raw(iso_date(v)) for v in _ints(arr)]
    if pa.types.is_date64(t):
        return [None if v is None else Raw(iso_date(v // 86_400_000)) for v in _ints(arr)]
    if pa.types.is_timestamp(t):
        scale = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}[t.unit]
        utc = t.tz is not None
        sep = " " if pretty else "T"
        vals = _ints(arr)
        if t.unit == "ns":
            return [None if v is None else _INFINITY.get(v) or Raw(iso_timestamp(v // 1000, utc, sep))
                    for v in vals]
        return [None if v is None else _INFINITY.get(v) or Raw(iso_timestamp(v * scale, utc, sep))
                for v in vals]
    if pa.types.is_time(t):
        div = {"s": 1e-6, "ms": 1e-3, "us": 1, "ns": 1000}[t.unit]
        return [None if v is None else Raw(_iso_time(int(v // div))) for v in _ints(arr)]
    if pa.types.is_interval(t):
        return [_interval(v, pretty) for v in arr.to_pylist()]
    if pa.types.is_duration(t):
        return [None if v is None else (v if pretty else str(v)) for v in _ints(arr)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) \
            or pa.types.is_fixed_size_list(t):
        return _lists(arr, pretty)
    if pa.types.is_struct(t):
        children = arr.flatten()
        names = [t.field(i).name for i in range(t.num_fields)]
        cols = [column_values(c, pretty, t.field(i)) for i, c in enumerate(children)]
        valid = arr.is_valid().to_pylist()
        return [dict(zip(names, row)) if ok else None for ok, row in zip(valid, zip(*cols))] \
            if cols else [{} if ok else None for ok in valid]
    if pa.types.is_map(t):
        return _lists(arr, pretty)
    # Anything else: Arrow's own text (cast), so the line is still printed.
    return [None if v is None else str(v) for v in pc.cast(arr, pa.string()).to_pylist()]


def _interval(v: Any, pretty: bool) -> Any:
    if v is None:
        return None
    months, days, nanos = v.months, v.days, v.nanoseconds
    if pretty:
        sign = "-" if nanos < 0 else ""
        return Raw(f"{months} mons {days} days {sign}{_iso_time(abs(nanos) // 1000)}")
    return {"months": months, "days": days, "nanoseconds": str(nanos)}


def _lists(arr: pa.Array, pretty: bool) -> list[Any]:
    if pa.types.is_fixed_size_list(arr.type):
        n = arr.type.list_size
        values = column_values(arr.flatten(), pretty)
        valid = arr.is_valid().to_pylist()
        out: list[Any] = []
        k = 0
        for ok in valid:
            out.append(values[k:k + n] if ok else None)
            if ok:
                k += n
        return out
    if pa.types.is_list_view(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    offsets = arr.offsets.to_pylist()
    values = column_values(arr.values, pretty)
    valid = arr.is_valid().to_pylist()
    return [values[offsets[i]:offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]


def _pretty_scalar(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, Decimal)):
        return str(v)
    if isinstance(v, str):
        return "'" + v.replace("'", "''").replace("\n", "\\n") + "'"
    if isinstance(v, list):
        return "[" + ", ".join(_pretty_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "(" + " ".join(f"{k}={_pretty_scalar(x)}" for k, x in v.items()) + ")"
    return str(v)


def format_pretty(values: dict[str, Any], unchanged: Callable[[str], bool] = lambda c: False) -> str:
    """``id=1 name='a' ts=2024-01-01 00:00:00Z`` (unchanged TOAST values as ``<unchanged>``)."""
    return " ".join(
        f"{name}=<unchanged>" if unchanged(name) else f"{name}={_pretty_scalar(v)}"
        for name, v in values.items()
    )
