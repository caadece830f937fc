"""The pinned type table (``tests/type_table.py``): README's table is made from it, and its
checker catches a type degraded to text or to raw bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from type_table import ROWS, check_types, expected_type, normalize, readme_table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_table_is_the_pinned_table() -> None:
    text = README.read_text()
    assert readme_table() in text, (
        "README's 'Supported types' table differs from tests/type_table.py: replace it with "
        "the output of `python tests/type_table.py`")


@pytest.mark.parametrize("pg_type, want", [
    ("integer", ("int4", (), 0)), ("numeric(10, 2)[]", ("numeric", (10, 2), 1)),
    ("character varying(20)", ("varchar", (20,), 0)), ('"char"', ("char", (), 0)),
    ("char(6)", ("bpchar", (6,), 0)), ("_int4", ("int4", (), 1)), ("int4[][]", ("int4", (), 2)),
    ("timestamp(3) with time zone", ("timestamptz", (3,), 0)),
])
def test_normalize(pg_type: str, want: tuple[str, tuple[int, ...], int]) -> None:
    assert normalize(pg_type) == want


def test_every_name_is_in_one_row() -> None:
    names = [n for r in ROWS for n in r.pg]
    assert len(names) == len(set(names))


def _field(name: str, t: pa.DataType, ext: str | None = None) -> pa.Field:
    md = {b"ARROW:extension:name": ext.encode(), b"ARROW:extension:metadata": b""} if ext else None
    return pa.field(name, t, metadata=md)


def test_check_types_catches_degraded_types() -> None:
    pinned = pa.schema([
        _field("d", pa.date32()), _field("n", pa.decimal128(10, 2)), _field("u", pa.string()),
        _field("e", pa.string()), _field("a", pa.list_(pa.int32())), _field("nf", pa.string()),
        _field("iv", expected_type("interval", False)[0]),
    ])
    types = {"d": "date", "n": "numeric(10,2)", "u": "uuid", "e": "enum", "a": "int4[]", "nf": "numeric",
             "iv": "interval"}
    assert check_types(pinned, types, binary=False) == []
    # In binary mode an enum is its send bytes.
    assert [p.split(" ")[1] for p in check_types(pinned, types, binary=True)] == ["'e'"]
    degraded = pa.schema([
        _field("d", pa.string()), _field("n", pa.string()), _field("u", pa.binary()),
        _field("e", pa.binary()), _field("a", pa.string()), _field("nf", pa.string_view()),
        _field("iv", pa.month_day_nano_interval()),
    ])
    problems = check_types(degraded, types, binary=False)
    assert [p.split(" ")[1] for p in problems] == ["'d'", "'n'", "'u'", "'e'", "'a'", "'nf'", "'iv'"], problems
    assert check_types(pa.schema([]), {"d": "date"}, binary=False) == ["column 'd' (date) is missing"]
    with pytest.raises(KeyError):
        expected_type("no_such_type", False)
