"""What pgoutput would announce for a published table, read from the catalog: its Relation
message (relation id, replica identity, the published columns with their types and key
flags) and the Type messages of its non-built-in column types. Shared by the snapshot
(:mod:`pgoutput_arrow.live.snapshot`) and the Spark streaming source, which both need a
table's schema as the stream decoder gives it before any change arrives."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from . import _internal
from .exceptions import ReplicationError

__all__ = ["RelationDefinition", "relation_definition", "published_tables", "server_version"]

def published_tables(cur: Any, publications: Sequence[str], tables: Sequence[str] | None = None
                     ) -> dict[str, tuple[list[str] | None, str | None]]:
    """What the publications publish (or only ``tables``; ``ValueError`` naming those they
    do not, as :class:`ReplicationError`): per ``"schema.table"``, the published columns (None: all; column lists are
    15+) and the row filter pgoutput applies (None: every row; the filters of several
    publications are ORed, and one without a filter publishes every row).

    Never on a replication connection: read there before START_REPLICATION,
    ``pg_publication_tables`` leaves the walsender holding the tables as they are now, and its
    first Relation message of a table then has the current columns even for changes made
    before a rename. Measured on PostgreSQL 18 (15 is not affected): a backlog of an insert,
    ``RENAME COLUMN v TO v2`` and an insert gave Relation messages ``[id, v2], [id, v2]``
    instead of ``[id, v], [id, v2]``; reading ``pg_publication``, ``pg_class`` or
    ``to_regclass`` there did not."""
    extra = "attnames, rowfilter" if server_version(cur) >= 150000 else "NULL::name[], NULL::text"
    cur.execute(f"SELECT schemaname, tablename, {extra} FROM pg_publication_tables "
                "WHERE pubname = ANY(%s) ORDER BY 1, 2", (list(publications),))
    published: dict[str, tuple[set[str] | None, list[str | None]]] = {}
    for schema, name, attnames, rowfilter in cur.fetchall():
        cols, filters = published.setdefault(f"{schema}.{name}", (set(), []))
        if attnames is None:
            published[f"{schema}.{name}"] = (None, filters)
        elif cols is not None:
            cols.update(attnames)
        filters.append(rowfilter)
    if tables is not None:
        missing = [t for t in tables if t not in published]
        if missing:
            raise ReplicationError(f"{', '.join(missing)} not published by {', '.join(publications)}")
        published = {t: published[t] for t in tables}
    return {table: (sorted(cols) if cols is not None else None,
                    None if any(f is None for f in filters) else " OR ".join(f"({f})" for f in filters))
            for table, (cols, filters) in published.items()}


#: Types with an oid below this are built in; pgoutput sends a Type message for the others.
FIRST_GENBKI_OID = 10000


@dataclasses.dataclass(frozen=True)
class RelationDefinition:
    """A table as pgoutput's Relation message would describe it now. ``columns``:
    ``(name, type oid, typmod, is key)`` of the published columns in attnum order;
    ``types``: ``(oid, namespace, name)`` of the non-built-in ones (namespace "" for
    pg_catalog), as ``_internal.relation_schema`` and ``_internal.CopyDecoder`` take them."""

    relation_id: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[tuple[str, int, int, bool], ...]
    types: tuple[tuple[int, str, str], ...]

    @property
    def table(self) -> str:
        """``"schema.table"``, as the decoder names the table."""
        return f"{self.namespace}.{self.name}"

    def native_args(self) -> tuple[Any, ...]:
        """The positional arguments of ``relation_schema`` and ``CopyDecoder``."""
        namespace = "" if self.namespace == "pg_catalog" else self.namespace
        return (self.relation_id, namespace, self.name, self.replica_identity,
                list(self.columns), list(self.types))

    def schema(self, **type_options: Any) -> pa.Schema:
        """The schema the decoder gives this relation (``type_options``: ``views``,
        ``binary``, ``array_ndims``, ``special_values``)."""
        return pa.table(_internal.relation_schema(*self.native_args(), **type_options)).schema


def server_version(cur: Any) -> int:
    cur.execute("SELECT current_setting('server_version_num')::int")
    return int(cur.fetchone()[0])


def relation_definition(cur: Any, table: str, publications: Sequence[str],
                        published: list[str] | None = None) -> RelationDefinition:
    """``table`` (``"schema.table"``) as pgoutput would describe it now, with the columns the
    publications publish: ``published`` when the caller read them from
    pg_publication_tables already, else read here (all columns before PostgreSQL 15)."""
    schema, name = table.split(".", 1)
    version = server_version(cur)
    cur.execute("SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s", (schema, name))
    row = cur.fetchone()
    if row is None:
        raise ValueError(f"table {table} does not exist")
    relid, replident = row
    names: set[str] | None = set(published) if published is not None else None
    if names is None and version >= 150000:
        cur.execute("SELECT attnames FROM pg_publication_tables WHERE pubname = ANY(%s) "
                    "AND schemaname = %s AND tablename = %s", (list(publications), schema, name))
        names = {a for r in cur.fetchall() for a in (r[0] or [])}
    generated = "a.attgenerated" if version >= 120000 else "''"
    cur.execute(
        f"SELECT a.attname, a.atttypid, a.atttypmod, {generated}, "
        "  %s = 'f' OR a.attnum IN (SELECT unnest(i.indkey) FROM pg_index i WHERE "
        "    i.indrelid = a.attrelid AND ((%s = 'd' AND i.indisprimary) OR "
        "                                 (%s = 'i' AND i.indisreplident))) "
        "FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (replident, replident, replident, relid))
    columns: list[tuple[str, int, int, bool]] = []
    for attname, typoid, typmod, gen, key in cur.fetchall():
        # pgoutput leaves out virtual generated columns, and stored ones before 18 (on 18 the
        # publication decides, and attnames says).
        if gen == "v" or (gen == "s" and version < 180000):
            continue
        if names is not None and attname not in names:
            continue
        columns.append((attname, int(typoid), int(typmod), bool(key)))
    types = [type_info(cur, oid) for oid in dict.fromkeys(c[1] for c in columns) if oid >= FIRST_GENBKI_OID]
    return RelationDefinition(int(relid), schema, name, replident, tuple(columns), tuple(types))


def type_info(cur: Any, typoid: int) -> tuple[int, str, str]:
    """What pgoutput's logicalrep_write_typ sends: the oid, with the namespace and name of its
    base type (a domain's, followed down to a non-domain)."""
    base = typoid
    for _ in range(100):
        cur.execute("SELECT t.typtype, t.typbasetype, n.nspname, t.typname FROM pg_type t "
                    "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s", (base,))
        typtype, basetype, nspname, typname = cur.fetchone()
        if typtype != "d":
            break
        base = basetype
    return typoid, "" if nspname == "pg_catalog" else nspname, typname
