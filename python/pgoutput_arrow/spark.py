"""Decode pgoutput captures on Spark (pyspark 4.3+): executors, SQL, a data source, replicas.

Ways in:

* :func:`decode` — ``DataFrame[lsn, xid, data]`` → ``{"schema.table": DataFrame}``, decoded on the
  executors with ``mapInArrow``; the result does not depend on partitioning or row order.
* :func:`register` — for SQL: the Arrow UDTF ``pgoutput_changes`` and the Arrow UDFs
  ``pgoutput_kind``, ``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text``; and the
  ``pgoutput`` batch data source.
* ``spark.readStream.format("pgoutput")`` — a live replication slot as a streaming source with
  LSN offsets, acknowledged only when Spark commits a micro-batch (:mod:`.spark_stream`).
* :func:`apply_changes` — the latest state per key: a replica of the source table.
* :func:`to_spark_arrow_schema` / :func:`cast_for_spark` — the decoder's Arrow types mapped to
  types Spark accepts (see docs/spark.md for the table).

Partition independence (see docs/spark.md, "How decoding is distributed"): the SQL interface's
``xid`` column holds, for every message of a transaction, the top-level xid (checked on
PostgreSQL 18 and 15 for Begin…Commit, every streamed chunk, Stream Abort, Prepare, Commit
Prepared and Rollback Prepared; non-transactional messages have 0), except a
subtransaction's Stream Abort, whose xid column holds the subtransaction's xid: its body names
the top-level one. Rows are therefore shuffled by that transaction key so that each transaction lands whole in one partition, and each
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
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._internal import lsn_to_int, lsn_to_str

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
    "canonical_stream",
    "RelationCatalog",
    "PgoutputDataSource",
]

# --------------------------------------------------------------------------- Arrow → Spark types

_MDN_STRUCT = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("nanos", pa.int64())])


def spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark 4.3 accepts (mapInArrow and Python data sources) for ``t``."""
    # BaseExtensionType: pyarrow's canonical extension types (arrow.uuid) are not ExtensionType.
    if isinstance(t, pa.BaseExtensionType):
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

#: PostgreSQL's LSN text ↔ int (pgoutput_proto::Lsn).
lsn_to_text = lsn_to_str


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


def _u32(data: bytes, pos: int) -> int:
    return int.from_bytes(data[pos:pos + 4], "big")


def _p32(value: int) -> bytes:
    return value.to_bytes(4, "big")


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
    relid = _u32(data, pos)
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
        oids.append(_u32(data, p))
        p += 8
    if p != len(data):
        raise ValueError(f"Relation message: {len(data) - p} bytes left over (in_stream={in_stream})")
    return _Relation(relid, namespace, name, tuple(oids), body)


def _relation_ids(data: bytes, in_stream: bool) -> tuple[int, ...]:
    """The relation ids an Insert/Update/Delete/Truncate refers to (empty for others)."""
    k = data[:1]
    pos = 5 if in_stream else 1
    if k in (b"I", b"U", b"D"):
        return (_u32(data, pos),)
    if k == b"T":
        n = _u32(data, pos)
        return struct.unpack_from(f">{n}I", data, pos + 5)
    return ()


def _in_stream_body(data: bytes, xid: int) -> bytes:
    """A Relation/Type body re-encoded as sent inside Stream Start…Stop (with the xid)."""
    return data[:1] + _p32(xid & 0xFFFFFFFF) + data[1:]


# --------------------------------------------------------------------------- partition independence

#: Where each kind goes in a rebuilt transaction at one LSN: Begin, then Origin, Type,
#: Relation, then the changes, then the end of the transaction.
_RANK = {ord("B"): 0, ord("b"): 0, ord("O"): 1, ord("Y"): 2, ord("R"): 3,
         ord("I"): 4, ord("U"): 4, ord("D"): 4, ord("T"): 4, ord("M"): 4,
         ord("C"): 7, ord("P"): 7, ord("K"): 8, ord("r"): 8}
_STREAM_INNER = frozenset(b"YRIUDTM")
_ROW_KINDS = frozenset(b"IUD")
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
            if in_stream and _u32(d, 1) in aborted_sub:
                continue
            body = d[:1] + d[5:] if in_stream else bytes(d)
            oid = _u32(body, 1)
            (rels if d[:1] == b"R" else types)[oid].append((lsn, body))
        for table in (rels, types):
            for versions in table.values():
                versions.sort()
        return cls(dict(rels), dict(types), frozenset(streamed))

    def __post_init__(self) -> None:
        # Most relations have one version: looked up once per change, it needs no search.
        self._only: dict[int, bytes] = {r: v[0][1] for r, v in self.relations.items() if len(v) == 1}

    @staticmethod
    def _at(versions: list[tuple[int, bytes]], lsn: int) -> bytes:
        i = bisect.bisect_right(versions, (lsn, b"\xff" * 8)) - 1
        return versions[max(i, 0)][1]

    def relation_at(self, relid: int, lsn: int) -> bytes | None:
        only = self._only.get(relid)
        if only is not None:
            return only
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
        # A subtransaction's Stream Abort has the subtransaction's xid in the xid column.
        groups[_u32(r[2], 1) if r[2][:1] == b"A" else r[1]].append(r)
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
    body = [(inner[0][0], b"S" + _p32(xid & 0xFFFFFFFF) + b"\x01")]
    body += _with_catalog([(lsn, d) for lsn, _, d, _ in inner], xid, True, catalog, state)
    body.append((inner[-1][0], b"E"))
    body += [(lsn, d) for lsn, _, d, _ in tail]
    return body


def canonical_stream(table: pa.Table, catalog: RelationCatalog) -> tuple[pa.Array, pa.Array]:
    """:func:`canonical_transactions` of a partition's rows (a table of ``lsn``, ``xid``,
    ``data``, ``_tb`` columns), flattened into one stream: ``(lsn, data)`` arrays.

    Built with Arrow and numpy when none of its transactions was streamed (see
    :func:`_canonical_whole`), message by message in Python otherwise; the same messages in the
    same order either way.
    """
    fast = _canonical_whole(table, catalog)
    if fast is not None:
        return fast
    cols = table.select(["lsn", "xid", "data", "_tb"]).to_pydict()
    rows = list(zip(cols["lsn"], cols["xid"], cols["data"], cols["_tb"]))
    stream = [m for _, body in canonical_transactions(rows, catalog) for m in body]
    return pa.array([lsn for lsn, _ in stream], pa.int64()), pa.array([d for _, d in stream], pa.binary())


_RANK_LUT = np.full(256, 4, np.int8)
for _kind, _rank in _RANK.items():
    _RANK_LUT[_kind] = _rank
_STREAM_KINDS = np.frombuffer(b"SEcAp", np.uint8)
_ROW_KIND_CODES = np.frombuffer(b"IUD", np.uint8)
_STATE_KIND_CODES = np.frombuffer(b"RYT", np.uint8)


def _canonical_whole(table: pa.Table, catalog: RelationCatalog) -> tuple[pa.Array, pa.Array] | None:
    """:func:`canonical_stream` for rows of transactions sent whole, or None when it does
    not apply (a streamed transaction, nulls, messages shorter than any such kind).

    The rows are sorted as :func:`_canonical_one` sorts them (transaction, then LSN, kind rank,
    tie-breaker, bytes). Only some messages can need a Relation (and Type) message injected
    before them: a change whose relation version (the catalog's newest at its LSN) differs
    from that of the previous change of its relation in the stream, or that follows a
    Relation or Truncate of its relation. Those, and every Relation, Type and Truncate, go
    through :func:`_with_catalog` in stream order, so the decoder state it keeps evolves as in
    the Python rebuild; every other change passes as it is.
    """
    n = table.num_rows
    if n == 0:
        return pa.array([], pa.int64()), pa.array([], pa.binary())
    if any(table.column(c).null_count for c in ("lsn", "xid", "data", "_tb")):
        return None
    data = table.column("data").combine_chunks()
    if not pa.types.is_binary(data.type):
        return None
    offsets = np.frombuffer(data.buffers()[1], np.int32, n + 1, data.offset * 4).astype(np.int64)
    values = np.frombuffer(data.buffers()[2], np.uint8)
    if (np.diff(offsets) < 5).any():
        return None
    kinds = values[offsets[:-1]]
    xid = table.column("xid").to_numpy()
    if np.isin(kinds, _STREAM_KINDS).any() or (catalog.streamed and np.isin(xid, list(catalog.streamed)).any()):
        return None
    lsn = table.column("lsn").to_numpy()
    key = pa.table({"x": xid, "l": lsn, "r": _RANK_LUT[kinds], "t": table.column("_tb"), "d": data})
    order = pc.sort_indices(key, sort_keys=[(c, "ascending") for c in key.column_names]).to_numpy()
    kinds, lsn, starts = kinds[order], lsn[order], offsets[:-1][order]
    relid = np.zeros(n, np.int64)
    for b in range(1, 5):
        relid = (relid << 8) | values[starts + b]

    # (position, relation, version) of everything that sets or needs a relation; a Relation
    # or Truncate has version -1, which no change has, so the change after it is checked.
    pos_parts, rel_parts, ver_parts = [], [], []
    rows = np.flatnonzero(np.isin(kinds, _ROW_KIND_CODES))
    by_rel = rows[np.argsort(relid[rows], kind="stable")]
    bounds = np.flatnonzero(np.diff(relid[by_rel])) + 1
    for group in np.split(by_rel, bounds) if len(by_rel) else []:
        versions = catalog.relations.get(int(relid[group[0]]))
        if not versions:
            continue  # a relation the catalog does not have: nothing to inject
        vlsn = np.array([v for v, _ in versions], np.int64)
        pos_parts.append(group)
        rel_parts.append(relid[group])
        ver_parts.append(np.maximum(np.searchsorted(vlsn, lsn[group], side="right") - 1, 0))
    state_rows = np.flatnonzero(np.isin(kinds, _STATE_KIND_CODES))
    for p in state_rows:
        if kinds[p] == ord("R"):
            rels: tuple[int, ...] = (int(relid[p]),)
        elif kinds[p] == ord("T"):
            rels = _relation_ids(data[int(order[p])].as_py(), False)
        else:
            continue
        pos_parts.append(np.full(len(rels), p))
        rel_parts.append(np.array(rels, np.int64))
        ver_parts.append(np.full(len(rels), -1))
    events = [state_rows]
    if pos_parts:
        pos, rel, ver = np.concatenate(pos_parts), np.concatenate(rel_parts), np.concatenate(ver_parts)
        o = np.lexsort((pos, rel))
        pos, rel, ver = pos[o], rel[o], ver[o]
        first = np.r_[True, rel[1:] != rel[:-1]]
        changed = first | np.r_[True, ver[1:] != ver[:-1]]
        events.append(pos[changed & (ver >= 0)])

    state = _DecoderState()
    inj_pos: list[int] = []
    inj_lsn: list[int] = []
    inj_data: list[bytes] = []
    for at_ in np.unique(np.concatenate(events)).tolist():
        out = _with_catalog([(int(lsn[at_]), data[int(order[at_])].as_py())], 0, False, catalog, state)
        for lsn_, d in out[:-1]:
            inj_pos.append(at_)
            inj_lsn.append(lsn_)
            inj_data.append(d)
    ordered = data.take(pa.array(order))
    if not inj_pos:
        return pa.array(lsn), ordered
    m = len(inj_pos)
    at = np.array(inj_pos, np.int64)
    perm = np.empty(n + m, np.int64)
    perm[np.arange(n) + np.searchsorted(at, np.arange(n), side="right")] = np.arange(n)
    perm[at + np.arange(m)] = n + np.arange(m)
    all_lsn = np.concatenate([lsn, np.array(inj_lsn, np.int64)])[perm]
    all_data = pa.concat_arrays([ordered, pa.array(inj_data, pa.binary())]).take(pa.array(perm))
    return pa.array(all_lsn), all_data


def _with_catalog(body: list[tuple[int, bytes]], xid: int, in_stream: bool,
                  catalog: RelationCatalog, state: _DecoderState) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    pos = 5 if in_stream else 1
    known = state.relations
    for lsn, data in body:
        if data[0] in _ROW_KINDS:
            # The common case, inline: a change of a relation the decoder knows as it was then.
            relid = int.from_bytes(data[pos:pos + 4], "big")
            wanted = catalog.relation_at(relid, lsn)
            if wanted is None or known.get(relid) == wanted:
                out.append((lsn, data))
                continue
        k = data[:1]
        if k == b"R":
            rel = _parse_relation(data, in_stream)
            state.relations[rel.relid] = rel.body
        elif k == b"Y":
            plain = data[:1] + data[5:] if in_stream else data
            state.types[_u32(plain, 1)] = plain
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


# --------------------------------------------------------------------------- decoding on Spark

_META_KINDS = ("52", "59", "53", "41", "72")  # hex of R, Y, S, A, r


def _decoder_module() -> Any:
    import pgoutput_arrow

    return pgoutput_arrow


def _normalized(df: Any, order_col: str | None) -> Any:
    """``lsn`` as a long (from 'X/Y' text if need be), ``xid`` as a long, ``data`` binary, and a
    tie-breaker column ``_tb``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    lsn = F.col("lsn")
    if isinstance(df.schema["lsn"].dataType, StringType):
        hi = F.conv(F.substring_index(lsn, "/", 1), 16, 10).cast("bigint")
        lo = F.conv(F.substring_index(lsn, "/", -1), 16, 10).cast("bigint")
        lsn = F.shiftleft(hi, 32) + lo
    tb = F.col(order_col).cast("bigint") if order_col else F.lit(0).cast("bigint")
    data = F.col("data").cast("binary")
    # The transaction a row belongs to: its xid, but a subtransaction's Stream Abort names its
    # top-level transaction in its body (bytes 2-5) and the subtransaction in the xid column.
    top = F.when(F.hex(F.substring(data, 1, 1)) == "41",
                 F.conv(F.hex(F.substring(data, 2, 4)), 16, 10).cast("bigint")).otherwise(F.col("xid").cast("bigint"))
    return df.select(lsn.cast("bigint").alias("lsn"), F.col("xid").cast("bigint").alias("xid"),
                     data.alias("data"), tb.alias("_tb"), top.alias("_txn"))


def collect_catalog(ndf: Any) -> RelationCatalog:
    """The first, small pass: every Relation, Type, Stream Start, Stream Abort and Rollback
    Prepared row of the capture, collected to the driver."""
    from pyspark.sql import functions as F

    meta = ndf.where(F.hex(F.substring("data", 1, 1)).isin(*_META_KINDS)).select("lsn", "xid", "data")
    return RelationCatalog.from_rows((r.lsn, r.xid, bytes(r.data)) for r in meta.collect())


def _synthetic_schema_stream(catalog: RelationCatalog, rows: bool = True) -> list[tuple[int, bytes]]:
    """Every Relation version, each followed by a row of NULLs, one transaction each: decoding
    it gives each table's final (unified) schema as the decoder builds it. Without ``rows``
    (and at LSN 0), it is the relation history an executor's decoder starts from, so that its
    catalog gives every column the same ``pg.column_id`` as the driver's (a renamed column is
    then matched to its newest name whatever versions the partition holds)."""
    stream: list[tuple[int, bytes]] = []
    xid = 1
    for lsn, ty in catalog.all_types():
        stream.append((lsn if rows else 0, ty))
    for lsn, body in catalog.all_relations():
        rel = _parse_relation(body, False)
        ncols = len(rel.type_oids)
        at = lsn if rows else 0
        stream.append((at, b"B" + struct.pack(">QqI", at, 0, xid)))
        stream.append((at, body))
        if rows:
            stream.append((at, b"I" + _p32(rel.relid) + b"N" + struct.pack(">H", ncols) + b"n" * ncols))
        stream.append((at, b"C" + struct.pack(">BQQq", 0, at, at, 0)))
        xid += 1
    return stream


def _feed(decoder: Any, stream: list[tuple[int, bytes]], xids: list[int] | None = None) -> None:
    if not stream:
        return
    if hasattr(decoder, "feed_batch"):
        lsns = pa.array([lsn for lsn, _ in stream], pa.int64())
        xs = pa.array(xids if xids is not None else [0] * len(stream), pa.int64())
        data = pa.array([d for _, d in stream], pa.binary())
        decoder.feed_batch(pa.record_batch({"lsn": lsns, "xid": xs, "data": data}))
    else:
        for lsn, d in stream:
            decoder.feed(d, lsn)


def _decode_streams(stream: list[tuple[int, bytes]], options: dict[str, Any]) -> Any:
    mod = _decoder_module()
    decoder = mod.Decoder(**options)
    _feed(decoder, stream)
    return decoder.finish()


def _table_schemas(catalog: RelationCatalog, options: dict[str, Any]) -> dict[str, pa.Schema]:
    """Each table's unified schema as the decoder makes it (not yet mapped for Spark)."""
    changes = _decode_streams(_synthetic_schema_stream(catalog), options)
    return {name: t.schema for name, t in changes.tables.items()}


_INTER_SCHEMA = pa.schema([("table", pa.string()), ("commit_lsn", pa.int64()),
                           ("n", pa.int64()), ("ipc", pa.binary())])


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def _decode_partition_fn(catalog: RelationCatalog, schemas: dict[str, pa.Schema],
                         options: dict[str, Any]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    history = _synthetic_schema_stream(catalog, rows=False)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        table = pa.Table.from_batches(received)
        lsn, data = canonical_stream(table, catalog)
        del table
        decoder = _decoder_module().Decoder(**options)
        _feed(decoder, history)
        decoder.feed_batch(pa.record_batch({"lsn": lsn, "xid": pa.array(np.zeros(len(lsn), np.int64)), "data": data}))
        yield from _intermediate(decoder.finish(), schemas)

    return run


def _intermediate(changes: Any, schemas: dict[str, pa.Schema]) -> Iterator[pa.RecordBatch]:
    """Per table one IPC blob (``_seq`` replaced by the row's rank within its transaction
    across all tables), and per transaction its row count (for the global ``_seq``)."""
    parts = []
    for ti, (name, table) in enumerate(sorted(changes.tables.items())):
        if table.num_rows == 0:
            continue
        parts.append(pa.table({"commit": table.column("_commit_lsn"), "seq": table.column("_seq"),
                               "t": pa.array(np.full(table.num_rows, ti, np.int32)),
                               "row": pa.array(np.arange(table.num_rows, dtype=np.int64))}))
    if not parts:
        yield from _truncates_only(changes)
        return
    allrows = pa.concat_tables(parts).combine_chunks()
    commit = allrows.column("commit").to_numpy()
    order = np.lexsort((allrows.column("seq").to_numpy(), commit))
    c_sorted = commit[order]
    starts = np.r_[0, np.flatnonzero(np.diff(c_sorted)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    local = np.empty(len(order), np.int64)
    local[order] = np.arange(len(order)) - group_start
    t_idx = allrows.column("t").to_numpy()
    row_idx = allrows.column("row").to_numpy()
    counts = np.diff(np.r_[starts, len(order)])
    yield pa.record_batch({"table": pa.nulls(len(starts), pa.string()),
                           "commit_lsn": pa.array(c_sorted[starts]),
                           "n": pa.array(counts.astype(np.int64)),
                           "ipc": pa.nulls(len(starts), pa.binary())}, schema=_INTER_SCHEMA)
    for ti, (name, table) in enumerate(sorted(changes.tables.items())):
        if table.num_rows == 0:
            continue
        seq = np.empty(table.num_rows, np.int64)
        mask = t_idx == ti
        seq[row_idx[mask]] = local[mask]
        table = table.set_column(table.schema.get_field_index("_seq"), "_seq", pa.array(seq))
        unified = schemas.get(name)
        if unified is not None:
            # Columns by pg.column_id (a renamed column under its newest name), then by name.
            table = _decoder_module().conform(table, unified)
        target = to_spark_arrow_schema(unified if unified is not None else table.schema)
        for chunk in table.to_batches(max_chunksize=65536):
            blob = _ipc(cast_for_spark(chunk, target))
            yield pa.record_batch({"table": [name], "commit_lsn": [None], "n": [chunk.num_rows],
                                   "ipc": [blob]}, schema=_INTER_SCHEMA)
    yield from _truncates_only(changes)


TRUNCATES = "_truncates"
"""The key of :func:`decode`'s TRUNCATEs (``with_truncates=True``); no table name lacks a schema."""


def _truncates_only(changes: Any) -> Iterator[pa.RecordBatch]:
    truncates = changes.truncates
    if truncates.num_rows:
        target = to_spark_arrow_schema(truncates.schema)
        for chunk in truncates.to_batches(max_chunksize=65536):
            yield pa.record_batch({"table": [TRUNCATES], "commit_lsn": [None], "n": [chunk.num_rows],
                                   "ipc": [_ipc(cast_for_spark(chunk, target))]}, schema=_INTER_SCHEMA)


def _plain_table_fn(schema: pa.Schema) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for blob in b.column(0).to_pylist():
                yield pa.ipc.open_stream(blob).read_next_batch().cast(schema)

    return run


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def decode(df: Any, *, order_col: str | None = None, num_partitions: int | None = None,
           with_truncates: bool = False, **options: Any) -> dict[str, Any]:
    """Decode a capture DataFrame (``lsn`` text or long, ``xid``, ``data`` binary) on the
    executors into ``{"schema.table": DataFrame}`` with the decoder's columns.

    The result does not depend on how ``df`` is partitioned or ordered. ``order_col`` (a
    capture-time row number, if the capture has one) only breaks ties among messages that share
    an LSN, which otherwise only decides ``_seq`` among them. ``options`` go to the decoder.
    The decoded rows are cached (``persist``) so that the per-table DataFrames share one
    decoding pass. ``with_truncates=True`` adds ``result["_truncates"]`` (:data:`TRUNCATES`):
    the decoder's TRUNCATEs (``relations``, ``cascade``, ``restart_identity`` and the transaction
    columns; its ``_seq`` is not comparable with the tables' ``_seq``, order by ``_commit_lsn``,
    ``_lsn``), for :func:`apply_changes`.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    spark = df.sparkSession
    options = dict(options)
    options.setdefault("views", False)
    if options.get("array_ndims") is None:
        # The schema is settled on the driver before any data is seen: every partition must
        # nest arrays as deep as it does, not learn a depth from its own first array (an
        # array of another depth is kept in _special, as everywhere).
        options["array_ndims"] = 1
    ndf = _normalized(df, order_col)
    catalog = collect_catalog(ndf)
    if options.get("binary") is None:
        # Every partition's decoder must type enum/composite columns alike, and the
        # schemas are made before any data is seen: ask the data once, here.
        options["binary"] = _stream_is_binary(ndf)
    schemas = _table_schemas(catalog, options)
    n = num_partitions or max(spark.sparkContext.defaultParallelism, 1)
    inter_schema = StructType([StructField("table", StringType()), StructField("commit_lsn", LongType()),
                               StructField("n", LongType()), StructField("ipc", BinaryType())])
    inter = (ndf.repartition(n, "_txn")
             .mapInArrow(_decode_partition_fn(catalog, schemas, options), inter_schema)
             .persist())
    counts = (inter.where(F.col("table").isNull()).groupBy("commit_lsn").agg(F.sum("n").alias("n"))
              .orderBy("commit_lsn").collect())
    commit_lsns = np.array([r.commit_lsn for r in counts], dtype=np.int64)
    offsets = np.cumsum([0] + [r.n for r in counts])[:-1].astype(np.int64)
    bc = spark.sparkContext.broadcast((commit_lsns, offsets))

    out: dict[str, Any] = {}
    for name, unified in schemas.items():
        schema = to_spark_arrow_schema(unified)
        out[name] = (inter.where(F.col("table") == name).select("ipc")
                     .mapInArrow(_finish_table_fn(schema, bc), _spark_schema(schema)))
    if with_truncates:
        tschema = to_spark_arrow_schema(_decode_streams([], options).truncates.schema)
        out[TRUNCATES] = (inter.where(F.col("table") == TRUNCATES).select("ipc")
                          .mapInArrow(_plain_table_fn(tschema), _spark_schema(tschema)))
    return out


def _insert_value_kind(data: bytes) -> bool | None:
    """Whether an Insert message's first value cell is binary ('b'), text ('t'), or None
    when its cells are all null or unchanged (or it is not an Insert)."""
    if data[:1] != b"I":
        return None
    # 'I', [xid (in a streamed chunk)], relation id, 'N', number of columns, cells.
    for pos in (5, 9):
        if data[pos:pos + 1] == b"N" and len(data) >= pos + 3:
            break
    else:
        return None
    pos += 3
    while pos < len(data):
        kind = data[pos:pos + 1]
        if kind == b"b":
            return True
        if kind == b"t":
            return False
        if kind not in (b"n", b"u"):
            return None
        pos += 1
    return None


def _stream_is_binary(ndf: Any, sample: int = 100) -> bool:
    """Whether the capture was taken with ``binary 'true'``, from its first Inserts."""
    inserts = ndf.where("substring(data, 1, 1) = X'49'").select("data").limit(sample).collect()
    for row in inserts:
        kind = _insert_value_kind(bytes(row.data))
        if kind is not None:
            return kind
    return False


def _finish_table_fn(schema: pa.Schema, bc: Any) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        commit_lsns, offsets = bc.value
        seq_i = schema.get_field_index("_seq")
        for b in batches:
            for blob in b.column(0).to_pylist():
                batch = pa.ipc.open_stream(blob).read_next_batch()
                commit = batch.column("_commit_lsn").to_numpy(zero_copy_only=False)
                pos = np.searchsorted(commit_lsns, commit)
                seq = batch.column(seq_i).to_numpy(zero_copy_only=False) + offsets[pos]
                arrays = list(batch.columns)
                arrays[seq_i] = pa.array(seq, pa.int64())
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return run


# --------------------------------------------------------------------------- replicas

def apply_changes(changes: Any, keys: Sequence[str], *, truncates: Any = None,
                  table: str | None = None) -> Any:
    """The latest state per key of one table's changes (as :func:`decode` returns them).

    Changes are applied in commit order (``_commit_lsn``, ``_seq``). Deleted rows are removed.
    A column listed in ``_unchanged`` (an unchanged TOAST value) keeps the value of the
    previous version of the row, also across a key change. An update that changed the key
    (``_before`` carries the old key) removes the old key's row. With ``truncates`` (the
    ``"_truncates"`` DataFrame of ``decode(..., with_truncates=True)``) and ``table`` (this
    table's ``"schema.table"`` name), changes before the table's last TRUNCATE are dropped.
    ``_special`` (PostgreSQL's text of values the columns cannot hold) stays with the row:
    the state's ``_special`` is that of the row's latest change.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if truncates is not None:
        if table is None:
            raise ValueError("apply_changes: truncates= needs table= (the table's schema.table name)")
        last_trunc = (truncates.where(F.array_contains(F.col("relations"), table))
                      .select(F.max(F.struct("_commit_lsn", "_lsn")).alias("m")).collect()[0].m)
        if last_trunc is not None:
            changes = changes.where(F.struct("_commit_lsn", "_lsn")
                                    > F.struct(F.lit(last_trunc[0]).alias("_commit_lsn"),
                                               F.lit(last_trunc[1]).alias("_lsn")))

    # _special is carried as a column: it is never listed in _unchanged, so each row state
    # takes its latest change's.
    meta = {"_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged"}
    cols = [c for c in changes.columns if c not in meta]
    before_fields = set()
    before_type = changes.schema["_before"].dataType
    if hasattr(before_type, "fieldNames"):
        before_fields = set(before_type.fieldNames())
    new_key = F.struct(*[F.col(k).alias(k) for k in keys])
    if all(k in before_fields for k in keys):
        old_key = F.when(F.col("_before").isNotNull(),
                         F.struct(*[F.col("_before")[k].alias(k) for k in keys])).otherwise(new_key)
    else:
        old_key = new_key
    unchanged = F.coalesce(F.col("_unchanged"), F.array().cast("array<string>"))
    # A value is wrapped in a struct so that "set to NULL" and "not sent" stay apart.
    vals = [F.when(F.array_contains(unchanged, c), F.lit(None)).otherwise(F.struct(F.col(c).alias("v"))).alias(c)
            for c in cols]
    base = changes.select(F.col("_op"), F.col("_commit_lsn"), F.col("_seq"),
                          new_key.alias("_nk"), old_key.alias("_ok"), *vals)
    key_changed = (F.col("_op") == "update") & (F.col("_ok") != F.col("_nk"))
    deletes = base.where((F.col("_op") == "delete") | key_changed).select(
        F.col("_ok").alias("_k"), "_commit_lsn", "_seq", F.lit(True).alias("_del"),
        F.lit(None).cast(base.schema["_ok"].dataType).alias("_src"),
        *[F.lit(None).cast(base.schema[c].dataType).alias(c) for c in cols])
    upserts = base.where(F.col("_op") != "delete").select(
        F.col("_nk").alias("_k"), "_commit_lsn", "_seq", F.lit(False).alias("_del"),
        F.when(key_changed, F.col("_ok")).alias("_src"), *cols)
    events = deletes.unionByName(upserts)
    w = (Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))

    def carried(ev: Any) -> Any:
        # After a delete the row starts afresh: a segment id restarts the carry-over.
        seg = F.sum(F.col("_del").cast("int")).over(
            Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
            .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        ev = ev.withColumn("_segment", F.when(F.col("_del"), F.lit(-1)).otherwise(seg))
        ws = (Window.partitionBy("_k", "_segment").orderBy("_commit_lsn", "_seq")
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
        prev = (Window.partitionBy("_k").orderBy("_commit_lsn", "_seq", F.col("_del").desc())
                .rowsBetween(Window.unboundedPreceding, -1))
        out = ev
        for c in cols:
            out = out.withColumn(c, F.when(F.col("_del"), F.last(F.col(c), True).over(prev))
                                 .otherwise(F.last(F.col(c), True).over(ws)))
        return out.drop("_segment")

    # First pass: the state of every key; then an upsert that moved a row from another key
    # takes its unchanged columns from that key's state at the move, and the state is redone.
    state = carried(events)
    moved_from = state.where("_del").select(
        F.col("_k").alias("_src"), F.col("_commit_lsn").alias("_m_commit"), F.col("_seq").alias("_m_seq"),
        *[F.col(c).alias(f"_m_{c}") for c in cols])
    joined = events.join(moved_from, (events["_src"] == moved_from["_src"])
                         & (events["_commit_lsn"] == moved_from["_m_commit"])
                         & (events["_seq"] == moved_from["_m_seq"]) & ~events["_del"], "left")
    events2 = joined.select(events["_k"], events["_commit_lsn"], events["_seq"], events["_del"],
                            events["_src"], *[F.coalesce(events[c], F.col(f"_m_{c}")).alias(c) for c in cols])
    final = carried(events2)
    last = Window.partitionBy("_k").orderBy(F.col("_commit_lsn").desc(), F.col("_seq").desc(), F.col("_del").asc())
    latest = final.withColumn("_rn", F.row_number().over(last)).where("_rn = 1 AND NOT _del")
    return latest.select(*[F.col(c)["v"].alias(c) for c in cols])


# --------------------------------------------------------------------------- SQL: UDFs and the UDTF

UDTF_SCHEMA = ("table string, op string, lsn bigint, commit_lsn bigint, commit_ts timestamp, "
               "xid bigint, seq bigint, new map<string,string>, old map<string,string>, "
               "unchanged array<string>")

_UDTF_META = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special")


def _text_map(table: pa.Table, names: list[str]) -> pa.Array:
    """Rows as map<string,string> of each column's text (NULLs kept as NULL values)."""
    n = table.num_rows
    if not names:
        return pa.array([[] for _ in range(n)], pa.map_(pa.string(), pa.string()))
    texts = []
    for c in names:
        col = _column(table.column(c), spark_arrow_type(table.schema.field(c).type))
        if pa.types.is_struct(col.type) or pa.types.is_list(col.type) or pa.types.is_binary(col.type):
            col = pa.array([None if v is None else (v.hex() if isinstance(v, bytes) else json.dumps(v, default=str))
                            for v in col.to_pylist()], pa.string())
        else:
            col = pc.cast(col, pa.string())
        texts.append(col)
    keys = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    items = pa.array(np.stack([t.to_numpy(zero_copy_only=False) for t in texts], axis=1).reshape(-1), pa.string())
    offsets = pa.array(np.arange(0, len(names) * (n + 1), len(names), dtype=np.int32))
    return pa.MapArray.from_arrays(offsets, keys, items)


def _with_special(texts: pa.Array, table: pa.Table, prefix: str) -> pa.Array:
    """``texts`` (a map of column texts per row) with each special value's text (the row's
    ``_special`` entries whose key starts with ``prefix``) in its column's place."""
    if "_special" not in table.column_names:
        return texts
    special = table.column("_special").combine_chunks()
    if special.null_count == len(special):
        return texts
    rows = texts.to_pylist()
    for i, entries in enumerate(special.to_pylist()):
        if not entries or rows[i] is None:
            continue
        extra = {k[len(prefix):]: v for k, v in entries
                 if k.startswith(prefix) and (prefix or not k.startswith("_before."))}
        rows[i] = [(k, extra.get(k, v)) for k, v in rows[i]]
    return pa.array(rows, texts.type)


def changes_to_generic(changes: Any) -> Iterator[pa.RecordBatch]:
    """Every table of a decoder result in the UDTF's one generic schema."""
    ts = pa.timestamp("us", tz="UTC")
    for name, table in sorted(changes.tables.items()):
        if table.num_rows == 0:
            continue
        cols = [c for c in table.column_names if c not in _UDTF_META]
        before = table.column("_before").combine_chunks()
        if before.null_count == len(before):
            old = pa.nulls(table.num_rows, pa.map_(pa.string(), pa.string()))
        else:
            flat = pa.table({f.name: before.field(i) for i, f in enumerate(before.type)})
            old = pc.if_else(before.is_null(), pa.nulls(table.num_rows, pa.map_(pa.string(), pa.string())),
                             _text_map(flat, flat.column_names))
        yield pa.record_batch({
            "table": pa.array([name] * table.num_rows, pa.string()),
            "op": _column(table.column("_op"), pa.string()),
            "lsn": _column(table.column("_lsn"), pa.int64()),
            "commit_lsn": _column(table.column("_commit_lsn"), pa.int64()),
            "commit_ts": _column(table.column("_commit_ts"), ts),
            "xid": _column(table.column("_xid"), pa.int64()),
            "seq": _column(table.column("_seq"), pa.int64()),
            "new": _with_special(_text_map(table, cols), table, ""),
            "old": _with_special(old, table, "_before."),
            "unchanged": _column(table.column("_unchanged"), pa.list_(pa.field("element", pa.string()))),
        })


def decode_rows_locally(rows: Sequence[tuple[int, int, bytes, int]], options: dict[str, Any]) -> Any:
    """Decode whole transactions in any order in this process (the same canonical rebuilding
    as :func:`decode`, with the catalog taken from ``rows`` themselves)."""
    lsn, xid, data, tb = zip(*rows) if rows else ((), (), (), ())
    return decode_table_locally(pa.table({"lsn": pa.array(lsn, pa.int64()), "xid": pa.array(xid, pa.int64()),
                                          "data": pa.array(data, pa.binary()), "_tb": pa.array(tb, pa.int64())}),
                                options)


def decode_table_locally(table: pa.Table, options: dict[str, Any]) -> Any:
    """:func:`decode_rows_locally` for a table of ``lsn`` (int64), ``xid``, ``data`` and
    optionally ``_tb`` (the tie-breaker) columns."""
    if "_tb" not in table.column_names:
        table = table.append_column("_tb", pa.array(np.zeros(table.num_rows, np.int64)))
    meta = table.filter(pc.is_in(pc.binary_slice(table.column("data"), 0, 1), pa.array([bytes([k]) for k in b"RYSAr"])))
    catalog = RelationCatalog.from_rows(zip(meta.column("lsn").to_pylist(), meta.column("xid").to_pylist(),
                                            meta.column("data").to_pylist()))
    lsn, data = canonical_stream(table, catalog)
    decoder = _decoder_module().Decoder(**options)
    if len(lsn):
        decoder.feed_batch(pa.record_batch({"lsn": lsn, "xid": pa.array(np.zeros(len(lsn), np.int64)), "data": data}))
    return decoder.finish()


def _lsn_column(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """An ``lsn`` column as int64: text ``'X/Y'`` converted, integers cast."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return pa.array([None if v is None else lsn_to_int(v) for v in arr.to_pylist()], pa.int64())
    return pc.cast(arr, pa.int64())


def _capture_columns(lsn: pa.Array | pa.ChunkedArray, xid: pa.Array | pa.ChunkedArray,
                     data: pa.Array | pa.ChunkedArray) -> pa.Table:
    """A capture's columns as :func:`decode_table_locally` takes them."""
    return pa.table({"lsn": _lsn_column(lsn), "xid": pc.cast(xid, pa.int64()), "data": pc.cast(data, pa.binary())})


class PgoutputChangesUDTF:
    """``SELECT * FROM pgoutput_changes(TABLE(SELECT lsn, xid, data FROM capture))``.

    Rows reaching one UDTF instance are decoded together at the end (transactions rebuilt as in
    :func:`decode`), so a capture must reach one instance whole: add ``WITH SINGLE PARTITION``
    after ``TABLE(...)`` when the capture spans several Spark partitions.
    """

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        if batch.num_rows:
            self.parts.append(_capture_columns(batch.column(0), batch.column(1), batch.column(2)))
        return iter(())

    def terminate(self) -> Iterator[pa.Table]:
        if not self.parts:
            return
        from pgoutput_arrow.exceptions import ProtocolError, UnknownRelationError

        try:
            changes = decode_table_locally(pa.concat_tables(self.parts), {"views": False})
        except (ProtocolError, UnknownRelationError) as e:
            # The usual cause: the capture was split over several UDTF instances (Arrow UDTFs
            # cannot ask for a single partition themselves).
            raise type(e)(f"{e} (pgoutput_changes decodes the rows of one partition together: if the "
                          "capture spans several Spark partitions, write "
                          "TABLE(...) WITH SINGLE PARTITION)") from e
        for b in changes_to_generic(changes):
            yield pa.Table.from_batches([b])


def register(spark: Any) -> None:
    """Register for SQL: ``pgoutput_changes`` (Arrow UDTF), ``pgoutput_kind``,
    ``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text`` (Arrow UDFs), and the ``pgoutput``
    data source."""
    from pyspark.sql.functions import arrow_udf, arrow_udtf  # type: ignore[attr-defined]  # 4.1+, not in the stubs

    def kind(data: pa.Array) -> pa.Array:
        first = [None if d is None else message_kind(d) for d in data.to_pylist()]
        return pa.array(first, pa.string())

    def relation(data: pa.Array) -> pa.Array:
        """Relation id of Relation messages (streamed or not) and of Insert/Update/Delete
        outside streamed chunks (inside them the first field is the xid)."""
        out: list[int | None] = []
        for d in data.to_pylist():
            # Outside streamed chunks, Relation/Insert/Update/Delete start with the relation id.
            # (A Relation inside a streamed chunk has the xid first: its length tells.)
            if d and d[:1] == b"R":
                try:
                    out.append(_parse_relation(d, False).relid)
                except (ValueError, struct.error, IndexError):
                    out.append(_parse_relation(d, True).relid)
            else:
                out.append(_u32(d, 1) if d and d[:1] in (b"I", b"U", b"D") and len(d) >= 5 else None)
        return pa.array(out, pa.int64())

    def to_int(text: pa.Array) -> pa.Array:
        return pa.array([None if t is None else lsn_to_int(t) for t in text.to_pylist()], pa.int64())

    def to_text(value: pa.Array) -> pa.Array:
        return pa.array([None if v is None else lsn_to_text(v) for v in value.to_pylist()], pa.string())

    for name, fn, rtype in (("pgoutput_kind", kind, "string"), ("pgoutput_relation", relation, "bigint"),
                            ("lsn_to_int", to_int, "bigint"), ("lsn_to_text", to_text, "string")):
        fn.__annotations__ = {list(fn.__code__.co_varnames)[0]: pa.Array, "return": pa.Array}
        spark.udf.register(name, arrow_udf(fn, rtype))
    spark.udtf.register("pgoutput_changes", arrow_udtf(PgoutputChangesUDTF, returnType=UDTF_SCHEMA))
    try:
        spark.dataSource.register(PgoutputDataSource)
    except Exception:  # noqa: BLE001 - pyspark without Python data sources
        pass


# --------------------------------------------------------------------------- data source

def _read_capture(path: str) -> pa.Table:
    import glob
    import os

    import pyarrow.parquet as pq

    files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)) if os.path.isdir(path) else [path]
    parts = []
    for f in files:
        t = pq.read_table(f, columns=["lsn", "xid", "data"])
        parts.append(_capture_columns(t.column("lsn"), t.column("xid"), t.column("data")))
    if not parts:
        return pa.table({"lsn": pa.array([], pa.int64()), "xid": pa.array([], pa.int64()),
                         "data": pa.array([], pa.binary())})
    return pa.concat_tables(parts)


try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class PgoutputDataSource(DataSource):
        """``spark.read.format("pgoutput").option("table", "public.t").load(path)``: one table of
        a capture (Parquet files with ``lsn``, ``xid``, ``data``), typed as :func:`decode` does.
        Without ``table``, the generic change schema of the ``pgoutput_changes`` UDTF.

        ``spark.readStream.format("pgoutput")`` with the options ``dsn``, ``slot``,
        ``publication`` (and ``table``) streams a live replication slot, with LSN offsets
        (:mod:`pgoutput_arrow.spark_stream`)."""

        @classmethod
        def name(cls) -> str:
            return "pgoutput"

        def _is_live(self) -> bool:
            return any(k.lower() in ("dsn", "slot") for k in self.options)

        def _decoded(self) -> Any:
            if not hasattr(self, "_changes"):
                if "path" not in self.options:
                    raise ValueError("spark.read.format('pgoutput') reads a capture: pass its path "
                                     "to load(path); a live slot is read with spark.readStream "
                                     "and the options dsn, slot, publication")
                self._changes = decode_table_locally(_read_capture(self.options["path"]), {"views": False})
            return self._changes

        def schema(self) -> Any:
            if self._is_live():
                from .spark_stream import stream_schema

                return stream_schema(self.options)
            table = self.options.get("table")
            if table is None:
                return UDTF_SCHEMA
            changes = self._decoded()
            if table not in changes.tables:
                raise ValueError(f"table {table!r} is not in the capture; it has {sorted(changes.tables)}")
            return _spark_schema(to_spark_arrow_schema(changes.tables[table].schema))

        def reader(self, schema: Any) -> "DataSourceReader":
            if self._is_live():
                raise ValueError("spark.read.format('pgoutput') reads captures from a path; a live "
                                 "replication slot (options dsn, slot) is read with "
                                 "spark.readStream.format('pgoutput')")
            return _PgoutputReader(self.options, schema)

        def streamReader(self, schema: Any) -> Any:
            try:
                from .spark_stream import PgoutputStreamReader
            except ImportError as e:  # pyspark.sql.streaming.datasource: 4.2+
                raise ImportError("spark.readStream.format('pgoutput') needs pyspark 4.2 or later "
                                  f"(read limits for Python streaming sources): {e}") from e
            if not self._is_live():
                raise ValueError("spark.readStream.format('pgoutput') streams a live replication "
                                 "slot: it needs the options dsn, slot and publication (a capture "
                                 "file is read with spark.read.format('pgoutput').load(path))")
            return PgoutputStreamReader(self.options, schema)

    class _PgoutputReader(DataSourceReader):
        def __init__(self, options: Mapping[str, str], schema: Any) -> None:
            self.options = dict(options)
            self.schema = schema

        def partitions(self) -> list[InputPartition]:
            # One partition: a capture is one ordered stream, decoded whole.
            return [InputPartition(0)]

        def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
            from pyspark.sql.pandas.types import to_arrow_schema

            changes = decode_table_locally(_read_capture(self.options["path"]), {"views": False})
            target = to_arrow_schema(self.schema, timezone="UTC")
            table = self.options.get("table")
            if table is None:
                for b in changes_to_generic(changes):
                    yield pa.RecordBatch.from_arrays(list(b.columns), schema=target)
                return
            t = changes.tables.get(table)
            if t is None:
                return
            for chunk in t.to_batches(max_chunksize=65536):
                yield cast_for_spark(chunk, target)
except ImportError:  # pragma: no cover - pyspark without Python data sources
    PgoutputDataSource = None  # type: ignore[assignment,misc]
