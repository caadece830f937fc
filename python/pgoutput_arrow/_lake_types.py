"""The decoder's Arrow types mapped to types Spark 4.3 accepts (mapInArrow, Python data
sources), and batches cast to them (docs/spark.md has the table). Delta Lake's types are
Spark's (less ``time``), so the Delta sink maps through them too."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._internal import pg_text

__all__ = ["spark_arrow_type", "to_spark_arrow_schema", "cast_for_spark", "cast_column"]

#: How an interval reaches Spark and Delta: the decoder's default interval type (PostgreSQL's
#: fields), also for a month_day_nano column (``interval="month_day_nano"``; its
#: nanoseconds are whole microseconds).
_MDN_STRUCT = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])


def spark_arrow_type(t: pa.DataType, time_type: bool = True) -> pa.DataType:
    """The Arrow type Spark 4.3 accepts (mapInArrow and Python data sources) for ``t``.
    ``time_type``: whether the session has ``spark.sql.timeType.enabled`` (``time`` is then
    TIME, time64[ns]); without it Spark refuses TIME in most plans, and ``time`` is
    PostgreSQL's text (``'13:45:00.5'``), as in Delta."""
    # BaseExtensionType: pyarrow's canonical extension types (arrow.uuid) are not ExtensionType.
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return pa.string()
        return spark_arrow_type(t.storage_type, time_type)
    if pa.types.is_dictionary(t):
        return spark_arrow_type(t.value_type, time_type)
    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_uint64(t):
        return pa.decimal128(20, 0)
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_fixed_size_binary(t):
        # A 16-byte fixed_size_binary is how the decoder stores uuid: canonical text.
        return pa.string() if t.byte_width == 16 else pa.binary()
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_interval(t):
        return _MDN_STRUCT
    if pa.types.is_time(t):
        return pa.time64("ns") if time_type else pa.string()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=None if t.tz is None else "UTC")
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_duration(t):
        return pa.duration("us")
    if pa.types.is_decimal(t) and (t.precision > 38 or pa.types.is_decimal256(t)):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) \
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(pa.field("element", spark_arrow_type(t.value_type, time_type), True))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_arrow_type(f.type, time_type), True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(spark_arrow_type(t.key_type, time_type), spark_arrow_type(t.item_type, time_type))
    if pa.types.is_null(t):
        return pa.string()
    return t


def to_spark_arrow_schema(schema: pa.Schema, time_type: bool = True) -> pa.Schema:
    """``schema`` with every field's type mapped by :func:`spark_arrow_type`, every field
    nullable (Spark's Arrow data sources compare nullability too) and metadata kept."""
    return pa.schema([pa.field(f.name, spark_arrow_type(f.type, time_type), True, f.metadata) for f in schema],
                     metadata=schema.metadata)


def _hex_lut() -> np.ndarray:
    return np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


_UUID_HEX_POS = np.array([0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17,
                          19, 20, 21, 22, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35])


def _uuid_text(arr: pa.Array) -> pa.Array:
    """16-byte values → 'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx', vectorised."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * 16:(arr.offset + n) * 16]
    raw = raw.reshape(n, 16)
    lut = _hex_lut()
    hexed = np.empty((n, 32), dtype=np.uint8)
    hexed[:, 0::2] = lut[raw >> 4]
    hexed[:, 1::2] = lut[raw & 0x0F]
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    out[:, _UUID_HEX_POS] = hexed
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out.tobytes())])
    if arr.null_count:
        strings = pc.if_else(arr.is_null(), pa.scalar(None, pa.string()), strings)
    return strings


def _interval_struct(arr: pa.Array) -> pa.Array:
    n = len(arr)
    dtype = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanos", "<i8")])
    vals = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset:arr.offset + n]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(
        [pa.array(vals["months"]), pa.array(vals["days"]), pa.array(vals["nanos"] // 1000)],
        fields=list(_MDN_STRUCT), mask=mask)


def _rebased(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A list or map array's offsets starting at 0 and just the values they cover. A sliced
    array's offsets do not start at 0 (``.values`` ignores the slice), and
    ``ListArray.from_arrays`` refuses such offsets together with a null mask."""
    offsets = arr.offsets
    if len(offsets) == 0:
        return pa.array([0], pa.int32()), arr.values.slice(0, 0)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    if start != 0 or offsets.offset != 0:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return offsets, arr.values.slice(start, end - start)


def _cast_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    src = arr.type
    if src == target:
        return arr
    if isinstance(src, pa.BaseExtensionType):
        if src.extension_name == "arrow.uuid":
            return _uuid_text(arr)
        return _cast_array(arr.storage, target)
    if pa.types.is_dictionary(src):
        return _cast_array(arr.dictionary_decode(), target)
    if pa.types.is_fixed_size_binary(src) and src.byte_width == 16 and pa.types.is_string(target):
        return _uuid_text(arr)
    if pa.types.is_interval(src):
        return _interval_struct(arr)
    if pa.types.is_struct(src):
        mask = arr.is_null() if arr.null_count else None
        # .field() ignores the parent's offset in old pyarrow; flatten() honours it.
        kids = arr.flatten() if arr.offset else [arr.field(i) for i in range(src.num_fields)]
        children = [pa.nulls(len(arr), f.type) if src.get_field_index(f.name) < 0
                    else _cast_array(kids[src.get_field_index(f.name)], f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target) and (pa.types.is_list(src) or pa.types.is_large_list(src)
                                     or pa.types.is_fixed_size_list(src)
                                     or pa.types.is_list_view(src) or pa.types.is_large_list_view(src)):
        if not pa.types.is_list(src):
            arr = pc.cast(arr, pa.list_(src.value_type))
        offsets, values = _rebased(arr)
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(offsets, _cast_array(values, target.value_type),
                                        type=target, mask=mask)
    if pa.types.is_map(src):
        offsets, entries = _rebased(arr)
        keys, items = entries.flatten()
        return pa.MapArray.from_arrays(offsets, _cast_array(keys, target.key_type),
                                       _cast_array(items, target.item_type), type=target,
                                       mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_null(src):
        return pa.nulls(len(arr), target)
    if pa.types.is_time(src) and pa.types.is_string(target):
        # PostgreSQL's text of the time, from the crates (pyarrow's cast pads the fraction).
        return pa.table(pg_text(pa.table({"t": arr}))).column(0).combine_chunks()
    if pa.types.is_decimal(src) and pa.types.is_string(target):
        return pc.cast(arr, pa.string())
    return pc.cast(arr, target, safe=True)


def cast_column(col: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    """One column (chunked or not) cast to ``target`` as :func:`cast_for_spark` does."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return _cast_array(col, target)


def cast_for_spark(data: pa.RecordBatch | pa.Table, schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Cast a decoder batch to ``schema`` (default: ``to_spark_arrow_schema(data.schema)``).

    Columns are matched by name: a column of ``schema`` that ``data`` lacks (a batch from
    before a column was added) comes out null, and a narrower type is widened (int4 → int8).
    """
    if schema is None:
        schema = to_spark_arrow_schema(data.schema)
    n = data.num_rows
    names = data.schema.names
    arrays = []
    for f in schema:
        if f.name in names:
            arrays.append(cast_column(data.column(f.name), f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
