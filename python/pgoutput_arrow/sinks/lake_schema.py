"""Decoded columns as the lake formats store them (Delta Lake, Iceberg), and a lake table's
schema kept able to take a source table's changing definition (docs/delta.md, "Schema
evolution"; docs/iceberg.md).

The formats' types are Spark's, so columns take the types the Spark integration gives them
(:mod:`pgoutput_arrow._lake_types`): uint8/16/32 the next wider signed integer, uint64
decimal(20,0), ``uuid`` its canonical text, ``interval`` a struct of months, days and microseconds,
view arrays plain strings and binaries; ``time``, which Delta lacks, PostgreSQL's text
(``'13:45:00'``) there and Iceberg's ``time`` in Iceberg, which lacks 8- and 16-bit integers
(they widen to ``integer``).
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from .._internal import pg_text
from .._lake_types import cast_column as lake_cast, spark_arrow_type
from .collapse import json_lines

__all__ = ["storable", "type_name", "widened", "conformed", "cast_column"]


def _lake_type(t: pa.DataType, iceberg: bool) -> pa.DataType:
    """Spark's type for ``t`` (:func:`~pgoutput_arrow._lake_types.spark_arrow_type`), with
    text for ``time`` in Delta and ``integer`` for small integers in Iceberg."""
    t = spark_arrow_type(t)
    if pa.types.is_time(t):
        return pa.time64("us") if iceberg else pa.string()
    if iceberg and (pa.types.is_int8(t) or pa.types.is_int16(t)):
        return pa.int32()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_lake_type(t.value_type, iceberg)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_lake_type(f.type, iceberg)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_lake_type(t.key_type, iceberg), _lake_type(t.item_type, iceberg))
    return t


def storable(table: pa.Table, iceberg: bool = False) -> pa.Table:
    """``table`` with every column of a type Delta (or Iceberg) stores (see the module's note)."""
    cols = []
    fields = []
    for f, col in zip(table.schema, table.columns):
        t = _lake_type(f.type, iceberg)
        if pa.types.is_time(f.type) and not pa.types.is_time(t):  # PostgreSQL's text of the time
            col = pa.table(pg_text(pa.table({f.name: col}))).column(0)
        cols.append(col if col.type == t else lake_cast(col, t))
        fields.append(pa.field(f.name, t, True))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def type_name(t: pa.DataType) -> str:
    """The lake type an Arrow type is stored as (``long``, ``decimal(10,2)``, ...; a nested
    type: Arrow's name of it, which starts with none of the primitive names)."""
    names = {pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long",
             pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean", pa.date32(): "date"}
    if t in names:
        return names[t]
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz else "timestamp_ntz"
    if pa.types.is_time(t):
        return "time"
    return f"nested {t}"


_INT_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_DECIMAL = re.compile(r'.*decimal\((\d+),\s*(\d+)\)')


def _fits(narrow: str, wide: str) -> bool:
    """Every value of lake type ``narrow`` is one of ``wide`` (so it can be cast)."""
    if narrow == wide:
        return True
    if narrow in _INT_RANK and wide in _INT_RANK:
        return _INT_RANK[narrow] <= _INT_RANK[wide]
    if narrow in ("byte", "short", "integer", "float") and wide == "double":
        return True
    if narrow in ("byte", "short") and wide == "float":
        return True
    dn, dw = _DECIMAL.match(narrow), _DECIMAL.match(wide)
    if dw and (dn or narrow in _INT_RANK):
        p, s = (int(dn.group(1)), int(dn.group(2))) if dn else ({1: 3, 2: 5, 3: 10, 4: 19}[
            _INT_RANK[narrow]], 0)
        return int(dw.group(2)) >= s and int(dw.group(1)) - int(dw.group(2)) >= p - s
    return False


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    try:
        pc.cast(pa.array([], source), target)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def widened(held: pa.DataType, incoming: pa.DataType) -> pa.DataType:
    """The type a column of lake type ``held`` takes when values of ``incoming`` arrive:
    ``held`` if they fit it, ``incoming`` if it holds every value of ``held`` (the table is
    rewritten), else text (both sides as text: :func:`cast_column`). Nested types (arrays,
    structs) take ``incoming`` when Arrow casts the held values to it, else text."""
    h, i = type_name(held), type_name(incoming)
    if _fits(i, h):
        return held
    if _fits(h, i):
        return incoming
    nested = h.startswith("nested") or i.startswith("nested")
    if nested and _castable(held, incoming):
        return incoming
    return pa.string()


def cast_column(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """``col`` cast to ``t``; to text by PostgreSQL's text output where Arrow has no cast
    (arrays, structs, binary)."""
    if col.type == t:
        return col
    if pa.types.is_string(t) and not _castable(col.type, t):
        if pa.types.is_struct(col.type):  # a composite: its fields as a JSON object
            flat = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            fields = pa.table({col.type.field(i).name: flat.field(i)
                               for i in range(col.type.num_fields)})
            return pc.if_else(flat.is_valid(), json_lines(fields), pa.scalar(None, pa.string()))
        return pa.table(pg_text(pa.table({"c": col}))).column(0).cast(t)
    return pc.cast(col, t)


def conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns, in its order: missing ones null (a dropped
    column is null from the drop on), others cast (to a type they fit, see :func:`widened`)."""
    cols = []
    for f in schema:
        if f.name in rows.column_names:
            cols.append(cast_column(rows.column(f.name), f.type))
        else:
            cols.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)
