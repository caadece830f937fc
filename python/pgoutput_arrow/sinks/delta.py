"""Replicas of the source tables in Delta Lake, exactly once (docs/delta.md).

One Delta table per source table, ``ROOT/schema.table``, kept equal to the source table by a
MERGE on its replica identity key per commit; optionally a change log per table,
``ROOT/_changes/schema.table``, where every change is appended with its metadata.

Exactly once: every Delta commit carries, in the same atomic commit, Delta's application
transaction (``txn``) ``(app id, version)`` with the app id ``APP:schema.table`` (``APP:
schema.table:changes`` for the change log) and as version the commit LSN of the last source
transaction it includes. When a table is first touched, its version says what it holds, and
changes at or before it are skipped: a restart from the slot's confirmed position (which is
only moved once every table committed) applies nothing twice, also after a kill between the
Delta commit and the acknowledgement. The sink must be given whole transactions between two
commits (the live source's ``groups()`` and a decoder's flushes are). What the lake sinks
share is :class:`~.replica.ReplicaSink`; this module holds what Delta does its own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .._internal import lsn_to_str
from ..exceptions import PgoutputError
from .collapse import DELETED, MATCH_PREFIX, PARTIAL, REMOVED, SENT_PREFIX, removed_duplicates
from .lake_schema import cast_column, conformed, type_name, widened
from .replica import LakeSinkError, LakeTable, ReplicaSink

__all__ = ["DeltaSink", "DeltaSinkError", "CHANGE_LOG_DIR"]

#: Where the change logs go, under the sink's root.
CHANGE_LOG_DIR = "_changes"


class DeltaSinkError(LakeSinkError):
    """A table the Delta sink cannot keep as asked (no replica identity key, ...)."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _DeltaTable:
    """One Delta table the sink writes (a :class:`~.replica.LakeTable`), and the app id of its
    commits' ``txn``."""

    uri: str
    app_id: str
    storage_options: dict[str, str] | None
    table: Any = None  # deltalake.DeltaTable, once it exists
    resume: int = 0  # the commit LSN of the last source transaction it holds (0: none)

    def open(self) -> None:
        from deltalake import DeltaTable

        if DeltaTable.is_deltatable(self.uri, self.storage_options):
            self.table = DeltaTable(self.uri, storage_options=self.storage_options)
            self.resume = self.table.transaction_version(self.app_id) or 0

    def exists(self) -> bool:
        return self.table is not None

    def commit_properties(self, version: int) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(app_transactions=[Transaction(self.app_id, version)],
                                custom_metadata={"pgoutput.commit_lsn": lsn_to_str(version)})

    def refreshed(self) -> None:
        from deltalake import DeltaTable

        if self.table is None:
            self.table = DeltaTable(self.uri, storage_options=self.storage_options)
        else:
            self.table.update_incremental()

    def schema(self) -> pa.Schema:
        return pa.schema(self.table.schema().to_arrow())

    def evolve(self, incoming: pa.Schema, drop: bool, renames: dict[str, str]) -> pa.Schema:
        """Creates the table, or brings its schema to take ``incoming`` rows: columns added,
        retyped ones widened (:func:`widened`; the table is rewritten). A column that
        ``incoming`` lacks stays (null from then on), unless ``drop`` (the table is
        rewritten without it). Delta names columns, so a renamed column is the old one left
        null and the new one added (``renames`` unused). Returns the table's schema."""
        from deltalake import DeltaTable, Field, write_deltalake

        if self.table is None:
            self.table = DeltaTable.create(self.uri, incoming, storage_options=self.storage_options)
            return self.schema()
        held = self.schema()
        retyped: dict[str, pa.DataType] = {}
        for f in incoming:
            if f.name in held.names:
                h = held.field(f.name).type
                if type_name(h) != type_name(f.type):
                    w = widened(h, f.type)
                    if w != h:
                        retyped[f.name] = w
        gone = [n for n in held.names if n not in incoming.names] if drop else []
        if retyped or gone:
            # A schema change without data change: no txn, and harmless when repeated.
            rows = self.table.to_pyarrow_table()
            rows = rows.drop_columns(gone)
            cols = [cast_column(c, retyped[n]) if n in retyped else c
                    for n, c in zip(rows.column_names, rows.columns)]
            fields = [pa.field(n, retyped.get(n, t), True)
                      for n, t in zip(rows.column_names, rows.schema.types)]
            write_deltalake(self.uri, pa.Table.from_arrays(cols, schema=pa.schema(fields)),
                            mode="overwrite", schema_mode="overwrite",
                            storage_options=self.storage_options)
            self.refreshed()
            held = self.schema()
        added = [f for f in incoming if f.name not in held.names]
        if added:
            self.table.alter.add_columns([Field.from_arrow(pa.field(f.name, f.type, True))
                                          for f in added])
            self.refreshed()
            held = self.schema()
        return held

    def write(self, rows: pa.Table, schema: pa.Schema, replace: bool, version: int) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, conformed(rows, schema),
                        mode="overwrite" if replace else "append",
                        commit_properties=self.commit_properties(version),
                        storage_options=self.storage_options)
        self.refreshed()

    def merge_keyed(self, rows: pa.Table, keys: list[str], partial: list[str],
                     schema: pa.Schema, version: int) -> None:
        source = conformed(rows, schema)
        control = [MATCH_PREFIX + k for k in keys] + [SENT_PREFIX + c for c in partial] \
            + [DELETED, PARTIAL]
        for c in control:
            source = source.append_column(c, rows.column(c))
        s = {c: f"s.{_quote(c)}" for c in source.column_names}
        updates = {}
        for c in schema.names:
            held = f"t.{_quote(c)}"
            if c in partial:  # unchanged TOAST: the replica's value unless a change sent one
                updates[_quote(c)] = f"CASE WHEN {s[SENT_PREFIX + c]} THEN {s[c]} ELSE {held} END"
            elif c == "_special" and partial:
                updates[_quote(c)] = (f"CASE WHEN {s[PARTIAL]} THEN coalesce({s[c]}, {held}) "
                                      f"ELSE {s[c]} END")
            else:
                updates[_quote(c)] = s[c]
        inserts = {_quote(c): s[c] for c in schema.names}
        predicate = " AND ".join(f"t.{_quote(k)} = {s[MATCH_PREFIX + k]}" for k in keys)
        (self.table.merge(source, predicate, source_alias="s", target_alias="t",
                            commit_properties=self.commit_properties(version))
         .when_matched_delete(predicate=s[DELETED])
         .when_matched_update(updates, predicate=f"NOT {s[DELETED]}")
         .when_not_matched_insert(inserts, predicate=f"NOT {s[DELETED]}")
         .execute())
        self.refreshed()

    def merge_full(self, rows: pa.Table, columns: list[str], schema: pa.Schema,
                    version: int) -> None:
        source = conformed(rows, schema).append_column(DELETED, rows.column(DELETED))
        removals = rows.filter(rows.column(DELETED))
        if removals.num_rows:
            # PostgreSQL removes one of identical rows per change; the MERGE below removes
            # every equal row, so the ones that stay are added back (with their own _special
            # and commit position).
            kept = self._kept_duplicates(conformed(removals, schema),
                                         removals.column(REMOVED), columns, schema)
            if kept.num_rows:
                kept = kept.append_column(DELETED, pa.array([False] * kept.num_rows))
                source = pa.concat_tables([source, kept])
        s = {c: f"s.{_quote(c)}" for c in source.column_names}
        # A removed row matches every equal row of the table (the old row is all PostgreSQL
        # identifies it by); an added one never matches.
        predicate = " AND ".join([s[DELETED]] + [f"(t.{_quote(c)} IS NOT DISTINCT FROM {s[c]})"
                                                 for c in columns])
        (self.table.merge(source, predicate, source_alias="s", target_alias="t",
                            commit_properties=self.commit_properties(version))
         .when_matched_delete()
         .when_not_matched_insert({_quote(c): s[c] for c in schema.names},
                                  predicate=f"NOT {s[DELETED]}")
         .execute())
        self.refreshed()

    def _kept_duplicates(self, removed: pa.Table, counts: pa.ChunkedArray,
                         columns: list[str], schema: pa.Schema) -> pa.Table:
        """The rows of the replica equal to a removed row that stay: of ``n`` equal rows of
        which a commit removes ``r``, ``n - r`` (read from the replica, narrowed by the
        removed rows' values of its plain columns, then compared whole)."""
        if self.table is None:
            return schema.empty_table()
        # Read whole, then narrowed in memory: delta-rs' files may hold view types that a
        # dataset filter cannot compare with the table's schema types.
        held = conformed(self.table.to_pyarrow_dataset().to_table(), schema)
        keep_rows = None
        for c in columns:
            t = schema.field(c).type
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_boolean(t)
                    or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_decimal(t)):
                continue
            values = removed.column(c).combine_chunks()
            test = pc.is_in(held.column(c), value_set=values.drop_null())
            if values.null_count:
                test = pc.or_(test, pc.is_null(held.column(c)))
            keep_rows = test if keep_rows is None else pc.and_(keep_rows, test)
        if keep_rows is not None:
            held = held.filter(keep_rows)
        if not held.num_rows:
            return schema.empty_table()
        equal, gone = removed_duplicates(removed.select(columns), counts.to_pylist(), held)
        return held.filter(pa.array(equal & ~gone))


class DeltaSink(ReplicaSink):
    """Keeps a Delta table per source table (and with ``change_log`` a change log) under
    ``root`` (a path or a URI deltalake takes, with ``storage_options``).

    ``app_id`` names the source in the tables' ``txn`` (the CLI uses the slot's name): two
    sinks of different sources writing the same tables need different ones. A table without a
    replica identity key (PostgreSQL publishes only its inserts and truncates) is kept by
    appending its inserts, said once in a log line; an update or delete of it (possible only
    when its changes predate a change of its replica identity) is an error, unless
    ``append_only``, which keeps the inserts alone.
    ``replica=False`` keeps only change logs. A column dropped in PostgreSQL stays in the
    replica (null in rows changed since) unless ``drop_columns``.

    ``write()`` takes the batches of whole transactions; ``due()`` says when ``max_rows``,
    ``max_bytes`` or ``max_seconds`` is reached; ``commit()`` writes what is held, one Delta
    commit per table; only then may the slot be acknowledged up to where these batches end::

        with pgoutput_arrow.stream(dsn, slot="s", publication="pub") as changes, \\
                DeltaSink("lake/", app_id="s", change_log=True) as sink:
            for batches, ack_lsn in changes.groups(linger=1.0):
                sink.write(batches)
                if sink.due():
                    sink.commit()
                    changes.ack(ack_lsn)
    """

    FORMAT = "Delta"

    def __init__(self, root: str | Any, *, app_id: str = "pgoutput-arrow", replica: bool = True,
                 change_log: bool = False, append_only: bool = False, drop_columns: bool = False,
                 max_rows: int = 1_000_000, max_bytes: int = 256 << 20,
                 max_seconds: float | None = 10.0,
                 storage_options: dict[str, str] | None = None) -> None:
        super().__init__(app_id=app_id, replica=replica, change_log=change_log,
                         append_only=append_only, drop_columns=drop_columns, max_rows=max_rows,
                         max_bytes=max_bytes, max_seconds=max_seconds)
        self.root = str(root).rstrip("/")
        self.storage_options = storage_options

    def _open(self, name: str, log: bool) -> LakeTable:
        key = f"{CHANGE_LOG_DIR}/{name}" if log else name
        table = _DeltaTable(f"{self.root}/{key}",
                            f"{self.app_id}:{name}" + (":changes" if log else ""),
                            self.storage_options)
        table.open()
        return table

    def _error(self, message: str) -> PgoutputError:
        return DeltaSinkError(message)

    def _failures(self) -> tuple[type[Exception], ...]:
        from deltalake.exceptions import DeltaError
        return (*super()._failures(), DeltaError)

    def __enter__(self) -> DeltaSink:
        return self
