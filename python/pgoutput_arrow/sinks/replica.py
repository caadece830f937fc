"""The one contract of the lake sinks (:class:`~.delta.DeltaSink`, :class:`~.iceberg.IcebergSink`):
a replica per source table kept equal to it, and optionally a change log per table, exactly
once (docs/delta.md, docs/iceberg.md).

What every format shares lives here: holding the batches of whole transactions until
:meth:`ReplicaSink.commit`, skipping what a table already holds (each lake table records, in the
same atomic commit as its data, the commit LSN of the last source transaction it includes), the
cut at a TRUNCATE, the collapse of a commit's changes per row (:mod:`.collapse`), the rule for
tables without a key, the change log's rows and the column renames the stream announces. What
differs, a format's tables, is a :class:`LakeTable`: create and evolve, append or replace,
merge.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any, Iterable, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._internal import META_COLUMNS, lsn_to_str
from ..decoding import Output, conform, unify_schemas
from ..exceptions import PgoutputError
from .collapse import DELETED, collapse_full, collapse_keyed, in_commit_order, json_lines
from .lake_schema import storable

__all__ = ["ReplicaSink", "LakeTable", "LakeSinkError", "REPLICA_META", "renames_of"]

log = logging.getLogger(__name__)

#: The columns a replica keeps besides the table's own: the latest change's special values
#: and commit.
REPLICA_META = ["_special", "_commit_lsn", "_commit_ts"]


class LakeSinkError(PgoutputError):
    """A table a lake sink cannot keep as asked (no replica identity key, ...)."""


class LakeTable(Protocol):
    """One table of a lake format that a sink writes (a replica or a change log)."""

    @property
    def uri(self) -> str:
        """Where the table is (for messages)."""

    #: The commit LSN of the last source transaction it holds (0: none).
    resume: int

    def exists(self) -> bool: ...

    def schema(self) -> pa.Schema:
        """The table's columns, in the Arrow types its rows are written in."""

    def evolve(self, incoming: pa.Schema, drop: bool, renames: dict[str, str]) -> pa.Schema:
        """Creates the table, or brings its schema to take ``incoming`` rows (columns added,
        retyped ones widened, ``renames`` old -> new applied where the format renames; a column
        ``incoming`` lacks dropped only if ``drop``). Returns the table's schema."""

    def write(self, rows: pa.Table, schema: pa.Schema, replace: bool, version: int) -> None:
        """Appends ``rows`` (or replaces the table's rows by them), brought to ``schema``, in one
        commit that records ``version``."""

    def merge_keyed(self, rows: pa.Table, keys: list[str], partial: list[str], schema: pa.Schema,
                    version: int) -> None:
        """Applies :func:`~.collapse.collapse_keyed` rows in one commit recording ``version``."""

    def merge_full(self, rows: pa.Table, columns: list[str], schema: pa.Schema, version: int) -> None:
        """Applies :func:`~.collapse.collapse_full` rows in one commit recording ``version``."""


def renames_of(schemas: list[pa.Schema]) -> dict[str, str]:
    """The column renames (old name -> newest name) between consecutive definitions of one
    table: a column keeps its ``pg.column_id`` (the decoder's pairing) under a new name."""
    out: dict[str, str] = {}
    for before, after in zip(schemas, schemas[1:]):
        names = {(f.metadata or {}).get(b"pg.column_id"): f.name for f in after}
        for f in before:
            cid = (f.metadata or {}).get(b"pg.column_id")
            new = names.get(cid) if cid is not None else None
            if new is not None and new != f.name:
                for old, to in list(out.items()):
                    if to == f.name:
                        out[old] = new
                out.setdefault(f.name, new)
    return {old: new for old, new in out.items() if old != new}


class ReplicaSink:
    """Keeps a lake table per source table (and with ``change_log`` a change log): the
    contract of :class:`~.delta.DeltaSink` and :class:`~.iceberg.IcebergSink`, which document
    it for users. A format implements :meth:`_open` (its :class:`LakeTable` of a replica or a
    change log)."""

    #: The format's name, in messages.
    FORMAT = "lake"
    #: Whether the format has Iceberg's types (``time``, no 8- or 16-bit integers).
    ICEBERG_TYPES = False

    def __init__(self, *, app_id: str = "pgoutput-arrow", replica: bool = True,
                 change_log: bool = False, append_only: bool = False, drop_columns: bool = False,
                 max_rows: int = 1_000_000, max_bytes: int = 256 << 20,
                 max_seconds: float | None = 10.0) -> None:
        if not replica and not change_log:
            raise ValueError(f"{type(self).__name__}: replica=False needs change_log=True "
                             "(nothing to write)")
        self.app_id = app_id
        self.replica = replica
        self.change_log = change_log
        self.append_only = append_only
        self.drop_columns = drop_columns
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self._held: dict[str, list[pa.RecordBatch]] = {}
        self._truncates: list[pa.RecordBatch] = []
        self._rows = 0
        self._bytes = 0
        self._since: float | None = None
        self._tables: dict[tuple[str, bool], LakeTable] = {}
        # Tables kept by appending their inserts (no replica identity key), said once each.
        self._appended: set[str] = set()
        # Each table's newest definition seen (its column ids pair renamed columns).
        self._definitions: dict[str, pa.Schema] = {}
        #: Lake commits made, and change rows applied (after skipping what tables held).
        self.commits = 0
        self.rows_written = 0

    def _open(self, name: str, log: bool) -> LakeTable:
        """The lake table of source table ``name`` (its change log if ``log``)."""
        raise NotImplementedError

    def _failures(self) -> tuple[type[Exception], ...]:
        """The exceptions the format's library raises when it cannot read or write a table
        (storage not writable, a catalog unreachable, ...): they become the sink's error, naming
        the table (the base: ``OSError``)."""
        return (OSError,)

    # -- input

    def write(self, batches: Iterable[Output]) -> None:
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
        return self._table(table, log=not self.replica).resume

    def commit(self) -> None:
        """Writes what is held: per table one commit to its replica (and one to its change
        log), each recording the commit LSN of the last source transaction it includes."""
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

    def __enter__(self) -> Any:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- per table

    def _table(self, name: str, log: bool) -> LakeTable:
        table = self._tables.get((name, log))
        if table is None:
            try:
                table = self._open(name, log)
            except self._failures() as e:
                raise self._error(f"{self.FORMAT} table of {name}"
                                  f"{' (change log)' if log else ''}: {e}") from e
            self._tables[(name, log)] = table
        return table

    def _commit_table(self, name: str, batches: list[pa.RecordBatch],
                      truncates: list[tuple[int, int, int]]) -> None:
        try:
            self._commit_targets(name, batches, truncates)
        except self._failures() as e:
            raise self._error(f"{name}: cannot write its {self.FORMAT} table: {e}") from e

    def _commit_targets(self, name: str, batches: list[pa.RecordBatch],
                        truncates: list[tuple[int, int, int]]) -> None:
        changes = self._changes_of(batches) if batches else None
        newest = batches[-1].schema if batches else None
        renames = self._renames(name, batches)
        for log in ([False] if self.replica else []) + ([True] if self.change_log else []):
            target = self._table(name, log)
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
                self._append_log(target, rows, truncs, version, renames)
            else:
                self._apply(name, target, rows, newest, truncs, version, renames)
            self.commits += 1
        if changes is not None:
            self.rows_written += changes.num_rows

    def _renames(self, name: str, batches: list[pa.RecordBatch]) -> dict[str, str]:
        """The renames from the definition last seen of ``name`` to its newest one."""
        schemas = ([self._definitions[name]] if name in self._definitions else []) \
            + [b.schema for b in batches]
        if batches:
            self._definitions[name] = batches[-1].schema
        return renames_of(schemas)

    def _changes_of(self, batches: list[pa.RecordBatch]) -> pa.Table:
        """One table's batches (of one or more definitions, in commit order) as one table of
        the unified schema, in types the format stores."""
        schemas: list[pa.Schema] = []
        for b in batches:
            if not schemas or not schemas[-1].equals(b.schema, check_metadata=True):
                schemas.append(b.schema)
        if len(schemas) == 1:
            table = pa.Table.from_batches(batches)
        else:
            unified = unify_schemas(schemas)
            table = pa.concat_tables([conform(b, unified) for b in batches])
        return in_commit_order(storable(table, self.ICEBERG_TYPES))

    def _apply(self, name: str, target: LakeTable, rows: pa.Table | None,
               newest: pa.Schema | None, truncs: list[tuple[int, int, int]], version: int,
               renames: dict[str, str]) -> None:
        replace = bool(truncs)
        if rows is not None and truncs:
            # A TRUNCATE empties the table: only the changes after the last one count.
            commit, seq, _ = max(truncs)
            c, s = rows.column("_commit_lsn"), rows.column("_seq")
            after = pc.or_(pc.greater(c, commit), pc.and_(pc.equal(c, commit), pc.greater(s, seq)))
            rows = rows.filter(after)
        if rows is None or newest is None:
            # Only a TRUNCATE: the table emptied, its schema kept.
            if target.exists():
                target.write(target.schema().empty_table(), target.schema(), True, version)
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
            schema = target.evolve(collapsed.select(columns + REPLICA_META).schema,
                                   self.drop_columns, renames)
            if replace:  # after a TRUNCATE: the rows that remain are all there is
                target.write(collapsed.filter(pc.invert(collapsed.column(DELETED))), schema,
                             True, version)
            elif identity == "full":
                target.merge_full(collapsed, columns, schema, version)
            else:
                target.merge_keyed(collapsed, keys, partial, schema, version)
            return
        # No key (REPLICA IDENTITY DEFAULT without a primary key, or NOTHING): PostgreSQL
        # refuses UPDATE and DELETE on such a table while a publication publishes them, so
        # only inserts (and TRUNCATE) arrive, and the replica is their rows.
        ops = rows.column("_op")
        moved = rows.filter(pc.is_in(ops, pa.array(["update", "delete"])))
        if moved.num_rows and not self.append_only:
            first = moved.slice(0, 1).to_pylist()[0]
            raise self._error(
                f"{name} has no replica identity key (REPLICA IDENTITY {identity.upper()}) "
                f"but its changes hold {moved.num_rows} updates or deletes (the first a "
                f"{first['_op']} committed at {lsn_to_str(first['_commit_lsn'])}), which "
                f"cannot be matched to rows of the {self.FORMAT} table: give the table a primary "
                "key or REPLICA IDENTITY FULL / USING INDEX, or keep only its inserts "
                f"(--append-only, {type(self).__name__}(append_only=True))")
        if name not in self._appended:
            self._appended.add(name)
            log.warning("%s has no replica identity key (REPLICA IDENTITY %s): its inserts "
                        "are appended to %s%s", name, identity.upper(), target.uri,
                        " (its updates and deletes are dropped: --append-only)"
                        if self.append_only else "")
        inserts = rows.filter(pc.is_in(ops, pa.array(["insert", "snapshot"])))
        data = inserts.select(columns + REPLICA_META)
        schema = target.evolve(data.schema, self.drop_columns, renames)
        target.write(data, schema, replace, version)

    def _error(self, message: str) -> PgoutputError:
        """The format's error for a table it cannot keep as asked."""
        return LakeSinkError(message)

    def _append_log(self, target: LakeTable, rows: pa.Table | None,
                    truncs: list[tuple[int, int, int]], version: int,
                    renames: dict[str, str]) -> None:
        parts = []
        if rows is not None and rows.num_rows:
            parts.append(_log_rows(rows))
        if truncs:
            commit, seq, lsn = (np.array(x, dtype=np.int64) for x in zip(*truncs))
            parts.append(pa.table({"_op": pa.array(["truncate"] * len(truncs)),
                                   "_lsn": lsn, "_commit_lsn": commit, "_seq": seq}))
        changes = in_commit_order(pa.concat_tables(parts, promote_options="permissive"))
        target.write(changes, target.evolve(changes.schema, False, renames), False, version)


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
