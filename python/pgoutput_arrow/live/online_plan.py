"""What the online snapshot (:mod:`.online_snapshot`) reads and in which order: the published
tables it can chunk in key order (:func:`plan_online`), each with its key (:class:`OnlineTable`),
and the key values of decoded rows as Python values ordered as PostgreSQL orders them
(:func:`key_rows`): integers, numeric (NaN and ±Infinity included), text under a collation that
orders by code point, uuid, dates and timestamps (±infinity included), bool, bytea."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa

from .._catalog import RelationDefinition, published_tables, relation_definition
from .._pg import quote_ident

__all__ = ["Key", "OnlineTable", "plan_online", "key_rows"]

#: A key: its columns' values, normalized (:meth:`OnlineTable.norm`).
Key = tuple[Any, ...]


# --------------------------------------------------------------------------- key values

def _numeric_norm(v: Any) -> Any:
    """A numeric key value: a Decimal, or ``"NaN"`` (a Decimal NaN equals nothing, itself
    included, so it could not be looked up)."""
    d = decimal.Decimal(str(v))
    return "NaN" if d.is_nan() else d


def _numeric_order(v: Any) -> tuple[int, decimal.Decimal]:
    """numeric's order: -Infinity, finite values, Infinity, NaN (PostgreSQL's)."""
    if isinstance(v, str):  # "NaN"
        return (3, decimal.Decimal(0))
    if v.is_infinite():
        return (0 if v < 0 else 2, decimal.Decimal(0))
    return (1, v)


#: The special values of dates and timestamps a key may hold (their text: the decoder leaves
#: the column null and gives the text in ``_special``), and where they sort.
_TIME_SPECIALS = {"-infinity": 0, "infinity": 2}


def _time_order(v: Any) -> tuple[int, Any]:
    if isinstance(v, str):
        return (_TIME_SPECIALS[v], None)
    return (1, v)


def _time_text(v: Any) -> str:
    return v if isinstance(v, str) else v.isoformat()


def _time_parse(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda s: s if s in _TIME_SPECIALS else parse(s)


@dataclasses.dataclass(frozen=True)
class _Codec:
    """One key type: ``norm`` makes a decoded value (``as_py``) into a Python value ordered
    as PostgreSQL orders the type; ``text`` renders it as PostgreSQL's input; ``parse`` reads
    that text back."""

    norm: Callable[[Any], Any]
    text: Callable[[Any], str]
    parse: Callable[[str], Any]


def _uuid_norm(v: Any) -> str:
    return str(uuid.UUID(bytes=bytes(v))) if isinstance(v, (bytes, bytearray)) else str(v).lower()


def _ts_norm(v: Any) -> Any:
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.timezone.utc)
    return v


_INT = _Codec(int, str, int)
_TEXT = _Codec(str, str, str)
_CODECS: dict[int, _Codec] = {
    16: _Codec(bool, lambda v: "true" if v else "false", lambda s: s == "true"),
    17: _Codec(bytes, lambda v: "\\x" + bytes(v).hex(), lambda s: bytes.fromhex(s[2:])),
    20: _INT, 21: _INT, 23: _INT, 26: _INT,
    25: _TEXT, 1043: _TEXT,
    1700: _Codec(_numeric_norm, str, _numeric_norm),
    1082: _Codec(lambda v: v, _time_text, _time_parse(datetime.date.fromisoformat)),
    1114: _Codec(lambda v: v, _time_text, _time_parse(datetime.datetime.fromisoformat)),
    1184: _Codec(_ts_norm, _time_text, _time_parse(lambda s: _ts_norm(datetime.datetime.fromisoformat(s)))),
    2950: _Codec(_uuid_norm, str, str),
}
#: Collations under which text orders as Python's str (by code point).
_CODE_POINT_COLLATIONS = {"C", "POSIX", "ucs_basic", "C.UTF-8", "C.utf8", "pg_c_utf8"}


def _sort_value(oid: int, v: Any) -> Any:
    if oid == 1700:
        return _numeric_order(v)
    if oid in (1082, 1114, 1184):
        return _time_order(v)
    return v


def _special_key_value(oid: int, text: str) -> Any:
    """A key value the decoder left null with its text in ``_special``, as the key codec
    holds it; None when the codec cannot order it (a BC date, a year past 9999)."""
    if oid == 1700:
        return _numeric_norm(text)
    if oid in (1082, 1114, 1184) and text in _TIME_SPECIALS:
        return text
    return None


# --------------------------------------------------------------------------- plan

@dataclasses.dataclass(frozen=True)
class OnlineTable:
    """One table the online snapshot reads: its definition as the stream describes it, the
    relation read (``source``: ``ONLY schema.table``, or a partitioned root with its leaves),
    its key (names, type oids, SQL types, in the index's order) and the publications' row
    filter."""

    table: str
    relation: RelationDefinition
    source: str
    key: tuple[str, ...]
    key_oids: tuple[int, ...]
    key_types: tuple[str, ...]
    row_filter: str | None

    def sort_key(self, values: Sequence[Any]) -> Key:
        """A key (normalized values) as a tuple Python orders as PostgreSQL does."""
        return tuple(_sort_value(o, v) for o, v in zip(self.key_oids, values))

    def norm(self, values: Sequence[Any]) -> Key:
        return tuple(_CODECS[o].norm(v) for o, v in zip(self.key_oids, values))

    def to_text(self, key: Key) -> list[str]:
        return [_CODECS[o].text(v) for o, v in zip(self.key_oids, key)]

    def from_text(self, texts: Sequence[str]) -> Key:
        return tuple(_CODECS[o].parse(t) for o, t in zip(self.key_oids, texts))


def _key_of(cur: Any, rel: RelationDefinition, db_collation: str) -> tuple[list[tuple[str, int, str]], str]:
    """The chunking key of ``rel``: ``(name, type oid, SQL type)`` per column in index order,
    or ``([], why not)``."""
    cur.execute(
        "SELECT i.indisreplident, a.attname, a.atttypid::int, format_type(a.atttypid, a.atttypmod), "
        "       coalesce(co.collname, ''), a.attcollation::int "
        "FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) "
        "LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
        "WHERE i.indrelid = %s AND (i.indisreplident OR i.indisprimary) AND i.indexprs IS NULL "
        "ORDER BY i.indisreplident DESC, i.indisprimary DESC, i.indexrelid, k.ord", (rel.relation_id,))
    rows = cur.fetchall()
    if not rows:
        return [], "no primary key or replica identity index"
    first = rows[0][0]
    rows = [r for r in rows if r[0] == first][: len({r[1] for r in rows if r[0] == first})]
    published = {c[0] for c in rel.columns}
    key: list[tuple[str, int, str]] = []
    for _, name, oid, sqltype, collname, colloid in rows:
        if name not in published:
            return [], f"key column {name} is not published"
        if oid not in _CODECS:
            return [], f"key column {name} is of type {sqltype}, which is not chunked in key order"
        if oid in (25, 1043):
            collation = db_collation if collname == "default" else collname
            if collation not in _CODE_POINT_COLLATIONS:
                return [], (f"key column {name} is text under collation {collation!r}, not C "
                            "(its order is not reproduced here)")
        key.append((name, int(oid), sqltype))
    return key, ""


def plan_online(cur: Any, publications: Sequence[str], tables: Sequence[str] | None = None, *,
                only: Collection[str] | None = None) -> tuple[list[OnlineTable], dict[str, str]]:
    """The tables the publications publish (or only ``tables``: each must be published; or
    those of ``only`` that are) that the online snapshot reads, and the others with why not
    (they fall back to an exported snapshot)."""
    published = published_tables(cur, publications, tables)
    if only is not None:
        published = {t: v for t, v in published.items() if t in only}
    cur.execute("SELECT datcollate FROM pg_database WHERE datname = current_database()")
    db_collation = str(cur.fetchone()[0])
    plans: list[OnlineTable] = []
    fallback: dict[str, str] = {}
    for table, (cols, row_filter) in published.items():
        rel = relation_definition(cur, table, publications, cols)
        key, why = _key_of(cur, rel, db_collation)
        if not key:
            fallback[table] = why
            continue
        cur.execute("SELECT relkind FROM pg_class WHERE oid = %s", (rel.relation_id,))
        relkind = cur.fetchone()[0]
        name = f"{quote_ident(rel.namespace)}.{quote_ident(rel.name)}"
        plans.append(OnlineTable(table, rel, name if relkind == "p" else f"ONLY {name}",
                                 tuple(k[0] for k in key), tuple(k[1] for k in key),
                                 tuple(k[2] for k in key), row_filter))
    return plans, fallback


def key_rows(table: OnlineTable, batch: pa.RecordBatch | pa.Table, names: Sequence[str] | None = None,
              struct: str | None = None) -> list[Key | None]:
    """Each row's key (normalized; None where a key column is null) from the columns
    ``names`` (default: the key's) of ``batch``, or of its struct column ``struct``."""
    names = names or table.key
    if struct is not None:
        col = batch.column(struct)
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not all(arr.type.get_field_index(n) >= 0 for n in names):
            return [None] * batch.num_rows
        valid = arr.is_valid().to_pylist()
        columns = [arr.field(n).to_pylist() for n in names]
        return [table.norm(vals) if ok and None not in vals else None
                for ok, vals in zip(valid, zip(*columns))] if columns else []
    columns = [batch.column(n).to_pylist() for n in names]
    if "_special" in batch.schema.names and any(None in c for c in columns):
        # A value no Arrow value of its column holds (numeric NaN, ±infinity): its text.
        specials = batch.column("_special").to_pylist()
        oids = dict(zip(table.key, table.key_oids))
        for n, values in zip(names, columns):
            for i, v in enumerate(values):
                if v is None and specials[i]:
                    text = dict(specials[i]).get(n)
                    if text is not None and n in oids:
                        values[i] = _special_key_value(oids[n], text)
    return [table.norm(vals) if None not in vals else None for vals in zip(*columns)]
