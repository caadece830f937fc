"""Decode pgoutput captures on Spark (pyspark 4.3+): executors, SQL, a data source, replicas.

Ways in:

* :func:`decode` — ``DataFrame[lsn, xid, data]`` → ``{"schema.table": DataFrame}``, decoded on the
  executors with ``mapInArrow``; the result does not depend on partitioning or row order.
* :func:`register` — for SQL: the Arrow UDTF ``pgoutput_changes`` and the Arrow UDFs
  ``pgoutput_kind``, ``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text``; and the
  ``pgoutput`` batch data source.
* :func:`apply_changes` — the latest state per key: a replica of the source table.
* :func:`to_spark_arrow_schema` / :func:`cast_for_spark` — the decoder's Arrow types mapped to
  types Spark accepts (see docs/spark.md for the table).

Partition independence (see docs/spark.md, "How decoding is distributed"): the SQL interface's
``xid`` column holds, for every message of a transaction, the top-level xid (checked on
PostgreSQL 18 and 15 for Begin…Commit, every streamed chunk, Stream Abort, Prepare, Commit
Prepared and Rollback Prepared; non-transactional messages have 0). Rows are therefore
shuffled by ``xid`` so that each transaction lands whole in one partition, and each
transaction is rebuilt into a canonical, self-contained message stream — ordered by LSN and
message kind, streamed chunks merged into one Stream Start…Stop, Relation and Type messages
that the transaction relies on but that the server sent in another transaction injected from a
small catalog collected beforehand and broadcast. ``_seq`` is then made global again from
per-transaction counts in commit order.
"""

from __future__ import annotations

import bisect
import io
import json
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "to_spark_arrow_schema",
    "spark_arrow_type",
    "cast_for_spark",
    "decode",
    "register",
    "apply_changes",
    "lsn_to_int",
    "lsn_to_text",
    "message_kind",
    "canonical_transactions",
    "RelationCatalog",
    "PgoutputDataSource",
]

# --------------------------------------------------------------------------- Arrow → Spark types

_MDN_STRUCT = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("nanos", pa.int64())])


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark 4.3 accepts (mapInArrow and Python data sources) for ``t``."""
    if isinstance(t, pa.ExtensionType):
        if t.extension_name == "arrow.uuid":
            return pa.string()
        return spark_arrow_type(t.storage_type)
    if pa.types.is_dictionary(t):
        return spark_arrow_type(t.value_type)
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
        return pa.time64("ns")
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
        return pa.list_(pa.field("element", spark_arrow_type(t.value_type), True))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_arrow_type(f.type), True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(spark_arrow_type(t.key_type), spark_arrow_type(t.item_type))
    if pa.types.is_null(t):
        return pa.string()
    return t


def to_spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field's type mapped by :func:`spark_arrow_type`, every field
    nullable (Spark's Arrow data sources compare nullability too) and metadata kept."""
    return pa.schema([pa.field(f.name, spark_arrow_type(f.type), True, f.metadata) for f in schema],
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
        [pa.array(vals["months"]), pa.array(vals["days"]), pa.array(vals["nanos"])],
        fields=list(_MDN_STRUCT), mask=mask)


def _cast_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    src = arr.type
    if src == target:
        return arr
    if isinstance(src, pa.ExtensionType):
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
        children = []
        for f in target:
            idx = src.get_field_index(f.name)
            if idx < 0:
                children.append(pa.nulls(len(arr), f.type))
            else:
                children.append(_cast_array(arr.field(idx), f.type))
        mask = arr.is_null() if arr.null_count else None
        # .field() ignores the parent's offset in old pyarrow; flatten() honours it.
        flat = arr.flatten() if arr.offset else None
        if flat is not None:
            children = [pa.nulls(len(arr), f.type) if src.get_field_index(f.name) < 0
                        else _cast_array(flat[src.get_field_index(f.name)], f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_list(target) and (pa.types.is_list(src) or pa.types.is_large_list(src)
                                     or pa.types.is_fixed_size_list(src)
                                     or pa.types.is_list_view(src) or pa.types.is_large_list_view(src)):
        if not pa.types.is_list(src):
            arr = pc.cast(arr, pa.list_(src.value_type))
        values = _cast_array(arr.values, target.value_type)
        offsets = arr.offsets
        mask = arr.is_null() if arr.null_count else None
        out = pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
        return out
    if pa.types.is_map(src):
        keys = _cast_array(arr.keys, target.key_type)
        items = _cast_array(arr.items, target.item_type)
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=target,
                                       mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_null(src):
        return pa.nulls(len(arr), target)
    if pa.types.is_decimal(src) and pa.types.is_string(target):
        return pc.cast(arr, pa.string())
    return pc.cast(arr, target, safe=True)


def _column(col: pa.Array | pa.ChunkedArray, target: pa.DataType) -> pa.Array:
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
            arrays.append(_column(data.column(f.name), f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- LSN and wire helpers

def lsn_to_int(text: str) -> int:
    """``'16/B374D848'`` → ``0x16B374D848``."""
    hi, sep, lo = text.partition("/")
    if not sep:
        raise ValueError(f"not an LSN (expected 'X/Y' in hex): {text!r}")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_to_text(value: int) -> str:
    """``0x16B374D848`` → ``'16/B374D848'``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


KIND_NAMES = {
    "B": "begin", "C": "commit", "O": "origin", "R": "relation", "Y": "type", "I": "insert",
    "U": "update", "D": "delete", "T": "truncate", "M": "message", "S": "stream_start",
    "E": "stream_stop", "c": "stream_commit", "A": "stream_abort", "b": "begin_prepare",
    "P": "prepare", "K": "commit_prepared", "r": "rollback_prepared", "p": "stream_prepare",
}


def message_kind(data: bytes) -> str | None:
    """The name of a pgoutput message's kind (``'insert'``, ``'stream_start'``, …)."""
    if not data:
        return None
    return KIND_NAMES.get(chr(data[0]), "unknown")


_U32 = struct.Struct(">I")


def _cstring_end(data: bytes, pos: int) -> int:
    end = data.index(b"\x00", pos)
    return end + 1


@dataclass(frozen=True)
class _Relation:
    """A Relation message without its in-stream xid: ``body`` is ``b'R' + relid + ...``."""

    relid: int
    namespace: str
    name: str
    type_oids: tuple[int, ...]
    body: bytes


def _parse_relation(data: bytes, in_stream: bool) -> _Relation:
    pos = 5 if in_stream else 1
    body = b"R" + data[pos:]
    relid = _U32.unpack_from(data, pos)[0]
    p = pos + 4
    e = _cstring_end(data, p)
    namespace = data[p:e - 1].decode()
    p, e = e, _cstring_end(data, e)
    name = data[p:e - 1].decode()
    p = e + 1  # replica identity
    (ncols,) = struct.unpack_from(">H", data, p)
    p += 2
    oids = []
    for _ in range(ncols):
        p = _cstring_end(data, p + 1)
        oids.append(_U32.unpack_from(data, p)[0])
        p += 8
    return _Relation(relid, namespace, name, tuple(oids), body)


def _relation_ids(data: bytes, in_stream: bool) -> tuple[int, ...]:
    """The relation ids an Insert/Update/Delete/Truncate refers to (empty for others)."""
    k = data[:1]
    pos = 5 if in_stream else 1
    if k in (b"I", b"U", b"D"):
        return (_U32.unpack_from(data, pos)[0],)
    if k == b"T":
        (n,) = _U32.unpack_from(data, pos)
        return struct.unpack_from(f">{n}I", data, pos + 5)
    return ()


def _in_stream_body(data: bytes, xid: int) -> bytes:
    """A Relation/Type body re-encoded as sent inside Stream Start…Stop (with the xid)."""
    return data[:1] + _U32.pack(xid & 0xFFFFFFFF) + data[1:]


# --------------------------------------------------------------------------- partition independence

#: Where each kind goes in a rebuilt transaction at one LSN: Begin, then Origin, Type,
#: Relation, then the changes, then the end of the transaction.
_RANK = {ord("B"): 0, ord("b"): 0, ord("O"): 1, ord("Y"): 2, ord("R"): 3,
         ord("I"): 4, ord("U"): 4, ord("D"): 4, ord("T"): 4, ord("M"): 4,
         ord("C"): 7, ord("P"): 7, ord("K"): 8, ord("r"): 8}
_STREAM_INNER = frozenset(b"YRIUDTM")
_FIRST_NORMAL_OID = 16384


@dataclass
class RelationCatalog:
    """Every Relation and Type message of a capture, by id and LSN; small enough to broadcast.

    A transaction decoded alone needs the Relation message that was in effect for each relation
    it changes. The server sends one only the first time a relation is used in a decoding
    session (and after its definition changed), so it is often in another transaction. The
    applicable version for a change at LSN ``L`` is the newest one at or before ``L``: a
    definition can only change under ACCESS EXCLUSIVE, which no writing transaction overlaps.
    Versions from aborted transactions (and aborted subtransactions) are left out.
    """

    relations: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    types: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    streamed: frozenset[int] = frozenset()

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int, bytes]]) -> "RelationCatalog":
        """Build from the capture's rows of kinds R, Y, S, A and r (any order)."""
        rows = list(rows)
        streamed = {xid for _, xid, d in rows if d[:1] == b"S"}
        aborted_top: set[int] = set()
        aborted_sub: set[int] = set()
        for _, xid, d in rows:
            if d[:1] == b"A":
                top, sub = struct.unpack_from(">II", d, 1)
                (aborted_top if top == sub else aborted_sub).add(sub)
            elif d[:1] == b"r":
                aborted_top.add(xid)
        rels: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        types: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        for lsn, xid, d in rows:
            if d[:1] not in (b"R", b"Y") or xid in aborted_top:
                continue
            in_stream = xid in streamed
            if in_stream and _U32.unpack_from(d, 1)[0] in aborted_sub:
                continue
            body = d[:1] + d[5:] if in_stream else bytes(d)
            oid = _U32.unpack_from(body, 1)[0]
            (rels if d[:1] == b"R" else types)[oid].append((lsn, body))
        for table in (rels, types):
            for versions in table.values():
                versions.sort()
        return cls(dict(rels), dict(types), frozenset(streamed))

    @staticmethod
    def _at(versions: list[tuple[int, bytes]], lsn: int) -> bytes:
        i = bisect.bisect_right(versions, (lsn, b"\xff" * 8)) - 1
        return versions[max(i, 0)][1]

    def relation_at(self, relid: int, lsn: int) -> bytes | None:
        versions = self.relations.get(relid)
        return self._at(versions, lsn) if versions else None

    def type_at(self, oid: int, lsn: int) -> bytes | None:
        versions = self.types.get(oid)
        return self._at(versions, lsn) if versions else None

    def all_relations(self) -> list[tuple[int, bytes]]:
        return sorted(v for versions in self.relations.values() for v in versions)

    def all_types(self) -> list[tuple[int, bytes]]:
        return sorted(v for versions in self.types.values() for v in versions)


class _DecoderState:
    """What the decoder fed by :func:`canonical_transactions` currently knows, so that a
    Relation or Type message is injected only when it is missing or stale."""

    def __init__(self) -> None:
        self.relations: dict[int, bytes] = {}
        self.types: dict[int, bytes] = {}


def _order_key(row: tuple[int, int, bytes, int]) -> tuple[int, int, int, bytes]:
    lsn, _, data, tiebreak = row
    return (lsn, _RANK.get(data[0], 4), tiebreak, data)


def canonical_transactions(
    rows: Sequence[tuple[int, int, bytes, int]],
    catalog: RelationCatalog,
    state: _DecoderState | None = None,
) -> Iterator[tuple[int, list[tuple[int, bytes]]]]:
    """Rebuild each transaction of ``rows`` into a self-contained pgoutput stream.

    ``rows`` are ``(lsn, xid, data, tiebreak)`` of whole transactions, in any order (``tiebreak``
    orders messages that share an LSN and kind: a capture-time row number if there is one,
    else 0, and then the bytes decide). Yields ``(xid, [(lsn, data), ...])`` per transaction,
    in xid order; feeding them to one decoder in that order gives that decoder's output for
    those transactions whatever order the rows came in.
    """
    state = state or _DecoderState()
    groups: dict[int, list[tuple[int, int, bytes, int]]] = defaultdict(list)
    for r in rows:
        groups[r[1]].append(r)
    for xid in sorted(groups):
        yield xid, _canonical_one(xid, groups[xid], catalog, state)


def _canonical_one(xid: int, rows: list[tuple[int, int, bytes, int]], catalog: RelationCatalog,
                   state: _DecoderState) -> list[tuple[int, bytes]]:
    streamed = xid in catalog.streamed or any(r[2][:1] == b"S" for r in rows)
    if xid == 0 or not streamed:
        ordered = sorted(rows, key=_order_key)
        body = [(lsn, data) for lsn, _, data, _ in ordered]
        return _with_catalog(body, xid, False, catalog, state)
    inner = sorted((r for r in rows if r[2][0] in _STREAM_INNER), key=_order_key)
    if not inner:
        # Nothing was streamed (an abort of a transaction whose changes never left the
        # server): there is nothing to decode.
        return []
    tail_rank = {ord("A"): 1, ord("c"): 1, ord("p"): 1, ord("K"): 2, ord("r"): 2}

    def tail_key(r: tuple[int, int, bytes, int]) -> tuple[int, int, int, bytes]:
        d = r[2]
        rank = tail_rank.get(d[0], 1)
        if d[:1] == b"A":
            top, sub = struct.unpack_from(">II", d, 1)
            rank = 0 if top != sub else 1  # subtransaction aborts first
        return (rank, r[0], r[3], d)

    tail = sorted((r for r in rows if r[2][0] in tail_rank), key=tail_key)
    body = [(inner[0][0], b"S" + _U32.pack(xid & 0xFFFFFFFF) + b"\x01")]
    body += _with_catalog([(lsn, d) for lsn, _, d, _ in inner], xid, True, catalog, state)
    body.append((inner[-1][0], b"E"))
    body += [(lsn, d) for lsn, _, d, _ in tail]
    return body


def _with_catalog(body: list[tuple[int, bytes]], xid: int, in_stream: bool,
                  catalog: RelationCatalog, state: _DecoderState) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for lsn, data in body:
        k = data[:1]
        if k == b"R":
            rel = _parse_relation(data, in_stream)
            state.relations[rel.relid] = rel.body
        elif k == b"Y":
            plain = data[:1] + data[5:] if in_stream else data
            state.types[_U32.unpack_from(plain, 1)[0]] = plain
        else:
            for relid in _relation_ids(data, in_stream):
                wanted = catalog.relation_at(relid, lsn)
                if wanted is None or state.relations.get(relid) == wanted:
                    continue
                rel = _parse_relation(wanted, False)
                for oid in rel.type_oids:
                    if oid < _FIRST_NORMAL_OID:
                        continue
                    ty = catalog.type_at(oid, lsn)
                    if ty is not None and state.types.get(oid) != ty:
                        out.append((lsn, _in_stream_body(ty, xid) if in_stream else ty))
                        state.types[oid] = ty
                out.append((lsn, _in_stream_body(wanted, xid) if in_stream else wanted))
                state.relations[relid] = wanted
        out.append((lsn, data))
    return out
