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
commits (the live source's ``groups()`` and a decoder's flushes are).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Iterable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._internal import META_COLUMNS, lsn_to_str
from ..decoding import conform, unify_schemas
from ..exceptions import PgoutputError
from .collapse import (DELETED, MATCH_PREFIX, PARTIAL, REMOVED, SENT_PREFIX, collapse_full,
                       collapse_keyed, in_commit_order, json_lines, row_ids)
from .delta_schema import cast_column, conformed, delta_storable, delta_type_name, widened

__all__ = ["DeltaSink", "DeltaSinkError", "CHANGE_LOG_DIR"]

log = logging.getLogger(__name__)

#: Where the change logs go, under the sink's root.
CHANGE_LOG_DIR = "_changes"

# The columns a replica keeps besides the table's own: the latest change's special values
# and commit.
_REPLICA_META = ["_special", "_commit_lsn", "_commit_ts"]


class DeltaSinkError(PgoutputError):
    """A table the Delta sink cannot keep as asked (no replica identity key, ...)."""


class _Batch(Protocol):
    kind: str
    table: str | None
    batch: pa.RecordBatch


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class _Target:
    """One Delta table the sink writes and the app id of its commits."""

    uri: str
    app_id: str
    storage_options: dict[str, str] | None
    table: Any = None  # deltalake.DeltaTable, once it exists
    resume: int = -1  # the commit LSN of the last source transaction it holds (0: none)

    def open(self) -> None:
        from deltalake import DeltaTable

        if self.resume >= 0:
            return
        if DeltaTable.is_deltatable(self.uri, self.storage_options):
            self.table = DeltaTable(self.uri, storage_options=self.storage_options)
            self.resume = self.table.transaction_version(self.app_id) or 0
        else:
            self.resume = 0

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

    def evolve(self, incoming: pa.Schema, drop: bool = False) -> pa.Schema:
        """Creates the table, or brings its schema to take ``incoming`` rows: columns added,
        retyped ones widened (:func:`widened`; the table is rewritten). A column that
        ``incoming`` lacks stays (null from then on), unless ``drop`` (the table is
        rewritten without it). Returns the table's schema."""
        from deltalake import DeltaTable, Field, write_deltalake

        if self.table is None:
            self.table = DeltaTable.create(self.uri, incoming, storage_options=self.storage_options)
            return self.schema()
        held = self.schema()
        retyped: dict[str, pa.DataType] = {}
        for f in incoming:
            if f.name in held.names:
                h = held.field(f.name).type
                if delta_type_name(h) != delta_type_name(f.type):
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


class DeltaSink:
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

    def __init__(self, root: str | Any, *, app_id: str = "pgoutput-arrow", replica: bool = True,
                 change_log: bool = False, append_only: bool = False, drop_columns: bool = False,
                 max_rows: int = 1_000_000, max_bytes: int = 256 << 20,
                 max_seconds: float | None = 10.0,
                 storage_options: dict[str, str] | None = None) -> None:
        if not replica and not change_log:
            raise ValueError("DeltaSink: replica=False needs change_log=True (nothing to write)")
        self.root = str(root).rstrip("/")
        self.app_id = app_id
        self.replica = replica
        self.change_log = change_log
        self.append_only = append_only
        self.drop_columns = drop_columns
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.storage_options = storage_options
        self._held: dict[str, list[pa.RecordBatch]] = {}
        self._truncates: list[pa.RecordBatch] = []
        self._rows = 0
        self._bytes = 0
        self._since: float | None = None
        self._targets: dict[str, _Target] = {}
        # Tables kept by appending their inserts (no replica identity key), said once each.
        self._appended: set[str] = set()
        #: Delta commits made, and change rows applied (after skipping what tables held).
        self.commits = 0
        self.rows_written = 0

    # -- input

    def write(self, batches: Iterable[_Batch]) -> None:
        """Holds the change batches (``kind`` ``"table"``) and truncates of whole
        transactions (a live group, or a decoder's outputs); other kinds are ignored."""
        for b in batches:
            self.add(b.kind, b.table, b.batch)

    def add(self, kind: str, table: str | None, batch: pa.RecordBatch) -> None:
        """Holds one batch (see :meth:`write`)."""
        if not batch.num_rows:
            return
        if kind == "table" and table is not None:
            self._held.setdefault(table, []).append(batch)
        elif kind == "truncates":
            self._truncates.append(batch)
        else:
            return
        if self._since is None:
            self._since = time.monotonic()
        self._rows += batch.num_rows
        self._bytes += batch.nbytes

    def due(self) -> bool:
        """Whether what is held reached ``max_rows``, ``max_bytes`` or ``max_seconds``."""
        if self._since is None:
            return False
        return (self._rows >= self.max_rows or self._bytes >= self.max_bytes
                or (self.max_seconds is not None
                    and time.monotonic() - self._since >= self.max_seconds))

    # -- output

    def resume_lsn(self, table: str) -> int:
        """The commit LSN of the last source transaction the replica (or change log) of
        ``table`` holds (0: none)."""
        target = self._target(table, log=not self.replica)
        return target.resume

    def commit(self) -> None:
        """Writes what is held: per table one Delta commit to its replica (and one to its
        change log), each with its ``txn``."""
        truncated: dict[str, list[tuple[int, int, int]]] = {}
        for b in self._truncates:
            for table, pos in _truncate_positions(b).items():
                truncated.setdefault(table, []).extend(pos)
        names = list(self._held) + [t for t in truncated if t not in self._held]
        for name in names:
            self._commit_table(name, self._held.get(name, []), truncated.get(name, []))
        self._held = {}
        self._truncates = []
        self._rows = self._bytes = 0
        self._since = None

    def close(self) -> None:
        """Drops what is held and not committed (it is streamed again after a restart)."""
        self._held = {}
        self._truncates = []

    def __enter__(self) -> DeltaSink:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- per table

    def _target(self, name: str, log: bool) -> _Target:
        key = f"{CHANGE_LOG_DIR}/{name}" if log else name
        target = self._targets.get(key)
        if target is None:
            target = self._targets[key] = _Target(
                f"{self.root}/{key}", f"{self.app_id}:{name}" + (":changes" if log else ""),
                self.storage_options)
            target.open()
        return target

    def _commit_table(self, name: str, batches: list[pa.RecordBatch],
                      truncates: list[tuple[int, int, int]]) -> None:
        changes = _changes_of(batches) if batches else None
        newest = batches[-1].schema if batches else None
        for log in ([False] if self.replica else []) + ([True] if self.change_log else []):
            target = self._target(name, log)
            rows = changes
            if rows is not None and target.resume:
                rows = rows.filter(pc.greater(rows.column("_commit_lsn"), target.resume))
            truncs = [t for t in truncates if t[0] > target.resume]
            if (rows is None or not rows.num_rows) and not truncs:
                continue
            version = max([t[0] for t in truncs]
                          + ([int(pc.max(rows.column("_commit_lsn")).as_py())]
                             if rows is not None and rows.num_rows else []))
            if log:
                self._append_log(target, rows, truncs, version)
            else:
                self._apply(name, target, rows, newest, truncs, version)
            self.commits += 1
        if changes is not None:
            self.rows_written += changes.num_rows

    def _apply(self, name: str, target: _Target, rows: pa.Table | None,
               newest: pa.Schema | None, truncs: list[tuple[int, int, int]], version: int) -> None:
        overwrite = bool(truncs)
        if rows is not None and truncs:
            # A TRUNCATE empties the table: only the changes after the last one count.
            commit, seq, _ = max(truncs)
            c, s = rows.column("_commit_lsn"), rows.column("_seq")
            after = pc.or_(pc.greater(c, commit), pc.and_(pc.equal(c, commit), pc.greater(s, seq)))
            rows = rows.filter(after)
        if rows is None or newest is None:
            # Only a TRUNCATE: the table emptied, its schema kept.
            if target.table is None:
                return
            self._write(target, target.schema().empty_table(), target.schema(), "overwrite",
                        version)
            return
        columns = [c for c in rows.column_names if c not in META_COLUMNS]
        if self.drop_columns:  # only the newest definition's columns
            columns = [c for c in columns if c in newest.names]
        meta = newest.metadata or {}
        identity = meta.get(b"pg.replica_identity", b"default").decode()
        keys = [f.name for f in newest if (f.metadata or {}).get(b"pg.key") == b"true"
                and f.name in columns]
        if identity == "full" or keys:
            partial: list[str] = []
            if identity == "full":
                collapsed = collapse_full(rows, columns)
            else:
                result = collapse_keyed(rows, columns, keys)
                collapsed, partial = result.rows, result.partial_columns
            schema = target.evolve(collapsed.select(columns + _REPLICA_META).schema,
                                   self.drop_columns)
            if overwrite:  # after a TRUNCATE: the rows that remain are all there is
                self._write(target, collapsed.filter(pc.invert(collapsed.column(DELETED))),
                            schema, "overwrite", version)
            elif identity == "full":
                self._merge_full(target, collapsed, columns, schema, version)
            else:
                self._merge_keyed(target, collapsed, keys, partial, schema, version)
        else:
            # No key (REPLICA IDENTITY DEFAULT without a primary key, or NOTHING): PostgreSQL
            # refuses UPDATE and DELETE on such a table while a publication publishes them, so
            # only inserts (and TRUNCATE) arrive, and the replica is their rows.
            ops = rows.column("_op")
            moved = rows.filter(pc.is_in(ops, pa.array(["update", "delete"])))
            if moved.num_rows and not self.append_only:
                first = moved.slice(0, 1).to_pylist()[0]
                raise DeltaSinkError(
                    f"{name} has no replica identity key (REPLICA IDENTITY {identity.upper()}) "
                    f"but its changes hold {moved.num_rows} updates or deletes (the first a "
                    f"{first['_op']} committed at {lsn_to_str(first['_commit_lsn'])}), which "
                    "cannot be matched to rows of the Delta table: give the table a primary key "
                    "or REPLICA IDENTITY FULL / USING INDEX, or keep only its inserts "
                    "(--append-only, DeltaSink(append_only=True))")
            if name not in self._appended:
                self._appended.add(name)
                log.warning("%s has no replica identity key (REPLICA IDENTITY %s): its inserts "
                            "are appended to %s%s", name, identity.upper(), target.uri,
                            " (its updates and deletes are dropped: --append-only)"
                            if self.append_only else "")
            inserts = rows.filter(pc.is_in(ops, pa.array(["insert", "snapshot"])))
            data = inserts.select(columns + _REPLICA_META)
            schema = target.evolve(data.schema, self.drop_columns)
            self._write(target, data, schema, "overwrite" if overwrite else "append", version)

    def _write(self, target: _Target, rows: pa.Table, schema: pa.Schema, mode: str,
               version: int) -> None:
        """Appends ``rows`` (or replaces the table by them), brought to ``schema``, in one
        commit with the txn of ``version``."""
        from deltalake import write_deltalake

        write_deltalake(target.uri, conformed(rows, schema),
                        mode="overwrite" if mode == "overwrite" else "append",
                        commit_properties=target.commit_properties(version),
                        storage_options=self.storage_options)
        target.refreshed()

    def _merge_keyed(self, target: _Target, rows: pa.Table, keys: list[str], partial: list[str],
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
        (target.table.merge(source, predicate, source_alias="s", target_alias="t",
                            commit_properties=target.commit_properties(version))
         .when_matched_delete(predicate=s[DELETED])
         .when_matched_update(updates, predicate=f"NOT {s[DELETED]}")
         .when_not_matched_insert(inserts, predicate=f"NOT {s[DELETED]}")
         .execute())
        target.refreshed()

    def _merge_full(self, target: _Target, rows: pa.Table, columns: list[str], schema: pa.Schema,
                    version: int) -> None:
        source = conformed(rows, schema).append_column(DELETED, rows.column(DELETED))
        removals = rows.filter(rows.column(DELETED))
        if removals.num_rows:
            # PostgreSQL removes one of identical rows per change; the MERGE below removes
            # every equal row, so the ones that stay are added back (with their own _special
            # and commit position).
            kept = self._kept_duplicates(target, conformed(removals, schema),
                                         removals.column(REMOVED), columns, schema)
            if kept.num_rows:
                kept = kept.append_column(DELETED, pa.array([False] * kept.num_rows))
                source = pa.concat_tables([source, kept])
        s = {c: f"s.{_quote(c)}" for c in source.column_names}
        # A removed row matches every equal row of the table (the old row is all PostgreSQL
        # identifies it by); an added one never matches.
        predicate = " AND ".join([s[DELETED]] + [f"(t.{_quote(c)} IS NOT DISTINCT FROM {s[c]})"
                                                 for c in columns])
        (target.table.merge(source, predicate, source_alias="s", target_alias="t",
                            commit_properties=target.commit_properties(version))
         .when_matched_delete()
         .when_not_matched_insert({_quote(c): s[c] for c in schema.names},
                                  predicate=f"NOT {s[DELETED]}")
         .execute())
        target.refreshed()

    @staticmethod
    def _kept_duplicates(target: _Target, removed: pa.Table, counts: pa.ChunkedArray,
                         columns: list[str], schema: pa.Schema) -> pa.Table:
        """The rows of the replica equal to a removed row that stay: of ``n`` equal rows of
        which a commit removes ``r``, ``n - r`` (read from the replica, narrowed by the
        removed rows' values of its plain columns, then compared whole)."""
        if target.table is None:
            return schema.empty_table()
        # Read whole, then narrowed in memory: delta-rs' files may hold view types that a
        # dataset filter cannot compare with the table's schema types.
        held = conformed(target.table.to_pyarrow_dataset().to_table(), schema)
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
        ids = row_ids(pa.concat_tables([removed.select(columns), held.select(columns)]))
        removed_ids, held_ids = ids[:removed.num_rows], ids[removed.num_rows:]
        to_remove = dict(zip(removed_ids.tolist(), counts.to_pylist()))
        seen: dict[int, int] = {}
        keep = []
        for i, rid in enumerate(held_ids.tolist()):
            r = to_remove.get(rid)
            if r is None:
                continue
            seen[rid] = seen.get(rid, 0) + 1
            if seen[rid] > r:  # the first r equal rows go, the others stay
                keep.append(i)
        return held.take(pa.array(keep, pa.int64()))

    def _append_log(self, target: _Target, rows: pa.Table | None,
                    truncs: list[tuple[int, int, int]], version: int) -> None:
        parts = []
        if rows is not None and rows.num_rows:
            parts.append(_log_rows(rows))
        if truncs:
            commit, seq, lsn = (np.array(x, dtype=np.int64) for x in zip(*truncs))
            parts.append(pa.table({"_op": pa.array(["truncate"] * len(truncs)),
                                   "_lsn": lsn, "_commit_lsn": commit, "_seq": seq}))
        log = in_commit_order(pa.concat_tables(parts, promote_options="permissive"))
        self._write(target, log, target.evolve(log.schema), "append", version)


def _changes_of(batches: list[pa.RecordBatch]) -> pa.Table:
    """One table's batches (of one or more schema versions, in commit order) as one table
    of the unified schema, in types Delta stores."""
    schemas: list[pa.Schema] = []
    for b in batches:
        if not schemas or not schemas[-1].equals(b.schema, check_metadata=True):
            schemas.append(b.schema)
    if len(schemas) == 1:
        table = pa.Table.from_batches(batches)
    else:
        unified = unify_schemas(schemas)
        table = pa.concat_tables([conform(b, unified) for b in batches])
    return in_commit_order(delta_storable(table))


def _log_rows(rows: pa.Table) -> pa.Table:
    """The change log's rows: ``_before`` as JSON text of the old key or row (a struct whose
    fields change with the table's definition would need a rewrite at each change)."""
    before = rows.column("_before").combine_chunks()
    if before.type.num_fields:
        flat = pa.table({before.type.field(i).name: before.field(i)
                         for i in range(before.type.num_fields)})
        as_json = pc.if_else(before.is_valid(), json_lines(flat), pa.scalar(None, pa.string()))
    else:
        as_json = pa.nulls(rows.num_rows, pa.string())
    i = rows.column_names.index("_before")
    return rows.set_column(i, pa.field("_before", pa.string()), as_json)


def _truncate_positions(batch: pa.RecordBatch) -> dict[str, list[tuple[int, int, int]]]:
    """Table -> (commit LSN, seq, LSN) of each truncate of it in ``batch``."""
    relations = batch.column("relations")
    names = pc.list_flatten(relations)
    parent = np.asarray(pc.list_parent_indices(relations).to_numpy(zero_copy_only=False))
    commit = batch.column("_commit_lsn").to_numpy(zero_copy_only=False)
    seq = batch.column("_seq").to_numpy(zero_copy_only=False)
    lsn = batch.column("_lsn").to_numpy(zero_copy_only=False)
    out: dict[str, list[tuple[int, int, int]]] = {}
    for name, row in zip(names.to_pylist(), parent.tolist()):  # one per truncated table
        out.setdefault(str(name), []).append((int(commit[row]), int(seq[row]), int(lsn[row])))
    return out
