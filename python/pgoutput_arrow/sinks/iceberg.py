"""Replicas of the source tables in Apache Iceberg, exactly once (docs/iceberg.md).

One Iceberg table per source table, ``schema.table`` in a catalog (by default an embedded SQL
catalog, SQLite at ``ROOT/catalog.db`` with its warehouse under ``ROOT``), kept equal to the
source table; optionally a change log per table, ``schema__changes.table``, where every change
is appended with its metadata. What the lake sinks share (holding whole transactions, the
collapse per row, TRUNCATE, tables without a key, the change log's rows) is
:class:`~.replica.ReplicaSink`; this module holds what Iceberg does its own way:

* **Merging** is copy-on-write through pyiceberg: the rows of the table a commit's changes may
  touch are read (a filter on the key columns' values), and one Iceberg transaction deletes
  them and appends what they become together with the untouched ones the filter also caught.
* **Exactly once**: every data snapshot the sink commits carries, in its summary, the commit
  LSN of the last source transaction it includes (``pgoutput.commit-lsn.APP``), and the same
  transaction sets the table property of that name (it outlives snapshot expiry and
  compaction). When a table is first touched, that LSN says what it holds, and changes at or
  before it are skipped.
* **Schema evolution** by Iceberg's field ids: a renamed column (the decoder pairs the names)
  is renamed, keeping its values; an added column is added; a widened one promoted where
  Iceberg promotes (``int`` → ``long``, ``float`` → ``double``, a wider decimal), else the
  column is replaced by one of the common type and the table rewritten; a dropped column stays
  (null from then on) unless ``drop_columns``.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._internal import META_COLUMNS, align_columns
from ..exceptions import PgoutputError
from .collapse import DELETED, MATCH_PREFIX, PARTIAL, REMOVED, SENT_PREFIX, removed_duplicates, row_ids
from .lake_schema import cast_column, conformed, type_name, widened
from .replica import REPLICA_META, LakeSinkError, LakeTable, ReplicaSink

__all__ = ["IcebergSink", "IcebergSinkError", "iceberg_catalog", "CHANGE_LOG_SUFFIX",
           "POSITION_PREFIX"]

#: The namespace of a change log: the source table's schema and this.
CHANGE_LOG_SUFFIX = "__changes"

#: The snapshot summary key and table property that record, per app id, the commit LSN of the
#: last source transaction the table holds (a decimal integer).
POSITION_PREFIX = "pgoutput.commit-lsn."

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: How many times a table's commit is tried when other writers commit first.
_COMMIT_ATTEMPTS = 5

#: The table property listing the field ids of columns PostgreSQL dropped (kept, null since).
DROPPED_PROPERTY = "pgoutput.dropped-field-ids"

#: The columns of a lake table that are not the source table's.
_NOT_COLUMNS = frozenset(META_COLUMNS) | frozenset(REPLICA_META)

#: The name pyiceberg knows the default embedded catalog by.
_CATALOG_NAME = "pgoutput"


class IcebergSinkError(LakeSinkError):
    """A table the Iceberg sink cannot keep as asked (no replica identity key, ...)."""


def iceberg_catalog(root: str | Path, properties: dict[str, str] | None = None) -> Any:
    """The pyiceberg catalog of a sink at ``root``: without ``properties`` the embedded SQL
    catalog (SQLite at ``root/catalog.db``, its warehouse ``root``, made if need be); else
    pyiceberg's ``load_catalog`` of them (``type``: ``sql`` with a ``uri`` of a database such
    as PostgreSQL, ``rest``, ``glue``, ...; ``name`` its name, default ``pgoutput``), the
    warehouse ``root`` unless they give one."""
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError as e:
        raise PgoutputError("the Iceberg sink needs pyiceberg: pip install "
                            "'pgoutput-arrow[iceberg]'") from e
    path = Path(root).absolute() if "://" not in str(root) else None
    warehouse = path.as_uri() if path is not None else str(root)
    if not properties:
        if path is None:
            raise PgoutputError(f"{root}: the embedded Iceberg catalog needs a local directory; "
                                "give the catalog's properties for a remote warehouse")
        path.mkdir(parents=True, exist_ok=True)
        properties = {"type": "sql", "uri": f"sqlite:///{path / 'catalog.db'}"}
    props = {"warehouse": warehouse, **properties}
    return load_catalog(props.pop("name", _CATALOG_NAME), **props)


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with Arrow's large and view variants as the plain ones (pyiceberg reads large)."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, _plain_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_plain_type(t.key_type), _plain_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    return t


def _plain(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _plain_type(f.type), True) for f in schema])


def _renames_since(held: pa.Schema, incoming: pa.Schema, dropped: set[str]) -> dict[str, str]:
    """The renames between the table's columns (in its order, PostgreSQL's: ADD COLUMN
    appends, a rename keeps its place; ``dropped`` left out) and a definition of the table,
    by the decoder's rule (:func:`~pgoutput_arrow._internal.align_columns`)."""
    own = [f for f in held if f.name not in _NOT_COLUMNS and f.name not in dropped]
    new = [f for f in incoming if f.name not in _NOT_COLUMNS]
    matched = align_columns([(f.name, type_name(f.type)) for f in own],
                            [(f.name, type_name(f.type)) for f in new])
    return {own[m].name: f.name for f, m in zip(new, matched)
            if m is not None and own[m].name != f.name and f.name not in held.names}


def _promotes(held: pa.DataType, wide: pa.DataType) -> bool:
    """Whether Iceberg promotes a column of ``held`` to ``wide`` in place."""
    h, w = type_name(held), type_name(wide)
    if (h, w) in (("integer", "long"), ("float", "double")):
        return True
    return bool(pa.types.is_decimal(held) and pa.types.is_decimal(wide)
                and held.scale == wide.scale and wide.precision >= held.precision)


def _filterable(t: pa.DataType) -> bool:
    """Whether a pyiceberg filter compares values of ``t`` exactly (other columns are left
    out of the filter that narrows what a merge reads: it then reads more, never less)."""
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_boolean(t))


def _values_filter(rows: pa.Table, columns: list[str]) -> Any:
    """A pyiceberg filter true for every row of the table equal to a row of ``rows`` on
    ``columns`` (and for others): per filterable column, its values (or null)."""
    from pyiceberg.expressions import AlwaysTrue, And, In, IsNull, Or, Reference

    result: Any = AlwaysTrue()
    for c in columns:
        col = rows.column(c)
        if not _filterable(col.type):
            continue
        values = pc.unique(col.drop_null()).to_pylist()
        test: Any = In(term=Reference(c), values=values) if values else None
        if col.null_count:
            null = IsNull(term=Reference(c))
            test = null if test is None else Or(test, null)
        if test is not None:
            result = And(result, test)
    return result


@dataclass
class _IcebergTable:
    """One Iceberg table the sink writes (a :class:`~.replica.LakeTable`)."""

    catalog: Any
    identifier: tuple[str, str]
    key: str  # POSITION_PREFIX + the app id
    table: Any = None  # pyiceberg's Table, once it exists
    resume: int = 0  # the commit LSN of the last source transaction it holds (0: none)
    aligned: bool = False  # whether a definition of this run was matched to the held columns

    @property
    def uri(self) -> str:
        return ".".join(self.identifier)

    def open(self) -> None:
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.table.snapshots import ancestors_of

        try:
            self.table = self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return
        held = [int(self.table.properties.get(self.key, 0))]
        for snapshot in ancestors_of(self.table.current_snapshot(), self.table.metadata):
            mark = snapshot.summary.additional_properties.get(self.key) if snapshot.summary else None
            if mark is not None:
                held.append(int(mark))
                break
        self.resume = max(held)

    def exists(self) -> bool:
        return self.table is not None

    def schema(self) -> pa.Schema:
        return _plain(self.table.schema().as_arrow())

    def _held(self, row_filter: Any, schema: pa.Schema) -> pa.Table:
        return conformed(self.table.scan(row_filter=row_filter).to_arrow(), schema)

    def _retried(self, action: Callable[[], _T]) -> _T:
        """``action()``, done again on the table as it is now when another writer (a
        compaction, a snapshot expiry) committed between its read and its commit: pyiceberg's
        commits are optimistic, and each action reads what it rewrites."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                return action()
            except (CommitFailedException, ValidationException) as e:
                # pyiceberg retries a commit itself, and refuses one whose reads another
                # writer's files invalidate (ValidationException): then it is done again here.
                if attempt == _COMMIT_ATTEMPTS - 1:
                    raise IcebergSinkError(f"{self.uri}: {_COMMIT_ATTEMPTS} commits in a row met "
                                           f"another writer's ({e}); the slot was not acknowledged "
                                           "past them: run the same command again") from e
                log.info("%s: another writer committed first (%s); reading the table again", self.uri, e)
                self.table = self.catalog.load_table(self.identifier)
        raise AssertionError("unreachable")

    def evolve(self, incoming: pa.Schema, drop: bool, renames: dict[str, str]) -> pa.Schema:
        return self._retried(lambda: self._evolve(incoming, drop, renames))

    def write(self, rows: pa.Table, schema: pa.Schema, replace: bool, version: int) -> None:
        self._retried(lambda: self._write(rows, schema, replace, version))

    def merge_keyed(self, rows: pa.Table, keys: list[str], partial: list[str], schema: pa.Schema,
                    version: int) -> None:
        self._retried(lambda: self._merge_keyed(rows, keys, partial, schema, version))

    def merge_full(self, rows: pa.Table, columns: list[str], schema: pa.Schema, version: int) -> None:
        self._retried(lambda: self._merge_full(rows, columns, schema, version))

    def _evolve(self, incoming: pa.Schema, drop: bool, renames: dict[str, str]) -> pa.Schema:
        incoming = _plain(incoming)
        if self.table is None:
            self.catalog.create_namespace_if_not_exists(self.identifier[0])
            self.table = self.catalog.create_table(self.identifier, schema=incoming)
            return self.schema()
        held = self.schema()
        ids = {f.name: f.field_id for f in self.table.schema().fields}
        dropped = {n for n, i in ids.items() if i in self._dropped_ids()}
        if not self.aligned:
            # The first definition this run sees: a column renamed while no sink watched
            # (between a stop and the table's next change) is found by the decoder's rule.
            renames = {**_renames_since(held, incoming, dropped), **renames}
        self.aligned = True
        renames = {o: n for o, n in renames.items() if o in held.names and n not in held.names}
        after = pa.schema([held.field(n).with_name(renames.get(n, n)) for n in held.names])
        # Columns the definition lacks are dropped in PostgreSQL: recorded, so that a later
        # column is never taken for one of them after a restart.
        now_dropped = {ids[o] for o in held.names
                       if renames.get(o, o) not in incoming.names and o not in _NOT_COLUMNS}
        now_dropped |= {ids[n] for n in dropped if n not in incoming.names}
        target: list[pa.Field] = []
        replaced: dict[str, pa.DataType] = {}
        for f in incoming:
            t = f.type
            if f.name in after.names:
                h = after.field(f.name).type
                t = h if type_name(h) == type_name(t) else widened(h, t)
                if t != h and not _promotes(h, t):
                    replaced[f.name] = t
            target.append(pa.field(f.name, t, True))
        kept = [f.name for f in after if f.name not in incoming.names and not drop]
        gone = [f.name for f in after if f.name not in incoming.names and drop]
        wanted = pa.schema(target + [after.field(n) for n in kept])
        if not renames and not gone and now_dropped == self._dropped_ids() and all(
                n in after.names and after.field(n).type == wanted.field(n).type for n in wanted.names):
            return held
        rows = None
        if replaced:
            # Iceberg cannot retype these in place: the column is replaced, the table rewritten
            # with its values cast (read before the schema changes).
            rows = self.table.scan().to_arrow()
            rows = rows.rename_columns([renames.get(n, n) for n in rows.column_names])
        with self.table.transaction() as tx:  # a schema change, no data change: no position
            with tx.update_schema() as update:
                for old, new in renames.items():
                    update.rename_column(old, new)
                for name in gone + list(replaced):
                    update.delete_column(name)
            with tx.update_schema() as update:
                update.union_by_name(wanted)
            tx.set_properties({DROPPED_PROPERTY: ",".join(map(str, sorted(now_dropped)))})
            if rows is not None:
                new = _plain(tx.table_metadata.schema().as_arrow())
                cols = {n: cast_column(rows.column(n), replaced[n]) if n in replaced else rows.column(n)
                        for n in rows.column_names}
                from pyiceberg.expressions import AlwaysTrue

                tx.overwrite(conformed(pa.table(cols), new), overwrite_filter=AlwaysTrue())
        return self.schema()

    def _dropped_ids(self) -> set[int]:
        return {int(i) for i in self.table.properties.get(DROPPED_PROPERTY, "").split(",") if i}

    def _commit(self, version: int, delete: Any, rows: pa.Table | None) -> None:
        """One Iceberg transaction: the rows ``delete`` matches deleted, ``rows`` appended, the
        position set (snapshot summary and table property)."""
        mark = {self.key: str(version)}
        with self.table.transaction() as tx:
            if delete is not None:
                with warnings.catch_warnings():
                    # A delete that matches nothing (rows the table never held) is no news.
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    tx.delete(delete, snapshot_properties=mark)
            if rows is not None and rows.num_rows:
                tx.append(rows, snapshot_properties=mark)
            tx.set_properties(mark)

    def _write(self, rows: pa.Table, schema: pa.Schema, replace: bool, version: int) -> None:
        from pyiceberg.expressions import AlwaysTrue

        self._commit(version, AlwaysTrue() if replace else None, conformed(rows, schema))

    def _merge_keyed(self, rows: pa.Table, keys: list[str], partial: list[str], schema: pa.Schema,
                     version: int) -> None:
        source = conformed(rows, schema)
        match = pa.table({k: rows.column(MATCH_PREFIX + k) for k in keys})
        matched = np.ones(rows.num_rows, dtype=bool)
        for k in keys:
            matched &= np.asarray(match.column(k).is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        alive = ~np.asarray(rows.column(DELETED).to_numpy(zero_copy_only=False), dtype=bool)
        if not matched.any():  # rows the table cannot hold yet: appended
            self._commit(version, None, source.filter(pa.array(alive)))
            return
        keyed = pa.table({k: cast_column(match.column(k), schema.field(k).type) for k in keys})
        delete = _values_filter(keyed.filter(pa.array(matched)), keys)
        held = self._held(delete, schema)
        ids = row_ids(pa.concat_tables([held.select(keys), keyed]))
        held_ids, match_ids = ids[:held.num_rows], ids[held.num_rows:]
        touched = np.isin(held_ids, match_ids[matched])
        out = source
        if partial:
            out = _with_held_values(out, rows, held, held_ids, match_ids, matched, partial)
        result = pa.concat_tables([held.filter(pa.array(~touched)), out.filter(pa.array(alive))])
        self._commit(version, delete, result)

    def _merge_full(self, rows: pa.Table, columns: list[str], schema: pa.Schema, version: int) -> None:
        source = conformed(rows, schema)
        removed = np.asarray(rows.column(DELETED).to_numpy(zero_copy_only=False), dtype=bool)
        added = source.filter(pa.array(~removed))
        if not removed.any():
            self._commit(version, None, added)
            return
        removals = source.filter(pa.array(removed))
        counts = rows.column(REMOVED).filter(pa.array(removed)).to_pylist()
        delete = _values_filter(removals, columns)
        held = self._held(delete, schema)
        _, gone = removed_duplicates(removals.select(columns), counts, held)
        keep = ~gone
        self._commit(version, delete, pa.concat_tables([held.filter(pa.array(keep)), added]))


def _with_held_values(out: pa.Table, rows: pa.Table, held: pa.Table, held_ids: np.ndarray,
                      match_ids: np.ndarray, matched: np.ndarray, partial: list[str]) -> pa.Table:
    """``out`` (the collapsed rows) with each column some change left unsent (unchanged
    TOAST) taken from the held row of the same key where no change sent it, and ``_special``
    completed from it for a row whose last change was partial, as Delta's MERGE does."""
    n = out.num_rows
    found = np.zeros(n, dtype=bool)
    at = np.zeros(n, dtype=np.int64)
    if held.num_rows:
        order = np.argsort(held_ids, kind="stable")
        pos = np.clip(np.searchsorted(held_ids[order], match_ids), 0, held.num_rows - 1)
        found = matched & (held_ids[order][pos] == match_ids)
        at = order[pos]

    def pick(c: str, use_held: np.ndarray) -> pa.Array:
        # Own value, or the held row's (null where there is none): one take of both.
        both = pa.concat_arrays([out.column(c).combine_chunks(), held.column(c).combine_chunks()])
        index = np.where(use_held, n + at, np.arange(n))
        return both.take(pa.array(index, mask=use_held & ~found))

    def flag(c: str) -> np.ndarray:
        return np.asarray(rows.column(c).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)

    for c in partial:
        out = out.set_column(out.column_names.index(c), out.schema.field(c),
                             pick(c, ~flag(SENT_PREFIX + c)))
    if "_special" in out.column_names:
        unset = np.asarray(out.column("_special").is_null().to_numpy(zero_copy_only=False), dtype=bool)
        out = out.set_column(out.column_names.index("_special"), out.schema.field("_special"),
                             pick("_special", flag(PARTIAL) & unset))
    return out


class IcebergSink(ReplicaSink):
    """Keeps an Iceberg table per source table (and with ``change_log`` a change log) in
    ``catalog`` (a pyiceberg catalog, or the properties of one for :func:`iceberg_catalog`;
    default the embedded SQL catalog under ``root``): namespace the source table's schema,
    table its name; change logs in namespace ``schema__changes``.

    ``app_id`` names the source in the tables' positions (the CLI uses the slot's name): two
    sinks of different sources writing the same tables need different ones. A table without a
    replica identity key is kept by appending its inserts (an update or delete of it is an
    error unless ``append_only``). ``replica=False`` keeps only change logs. A column dropped
    in PostgreSQL stays in the replica (null in rows changed since) unless ``drop_columns``.

    ``write()`` takes the batches of whole transactions; ``due()`` says when ``max_rows``,
    ``max_bytes`` or ``max_seconds`` is reached; ``commit()`` writes what is held, one Iceberg
    transaction per table; only then may the slot be acknowledged up to where these batches
    end::

        with pgoutput_arrow.stream(dsn, slot="s", publication="pub") as changes, \\
                IcebergSink("lake/", app_id="s", change_log=True) as sink:
            for batches, ack_lsn in changes.groups(linger=1.0):
                sink.write(batches)
                if sink.due():
                    sink.commit()
                    changes.ack(ack_lsn)
    """

    FORMAT = "Iceberg"
    ICEBERG_TYPES = True

    def __init__(self, root: str | Path, *, catalog: Any = None, app_id: str = "pgoutput-arrow",
                 replica: bool = True, change_log: bool = False, append_only: bool = False,
                 drop_columns: bool = False, max_rows: int = 1_000_000,
                 max_bytes: int = 256 << 20, max_seconds: float | None = 10.0) -> None:
        super().__init__(app_id=app_id, replica=replica, change_log=change_log,
                         append_only=append_only, drop_columns=drop_columns, max_rows=max_rows,
                         max_bytes=max_bytes, max_seconds=max_seconds)
        self.root = str(root)
        self.catalog = catalog if catalog is not None and not isinstance(catalog, dict) \
            else iceberg_catalog(root, catalog)

    def _open(self, name: str, log: bool) -> LakeTable:
        schema, _, table = name.partition(".")
        namespace = schema + CHANGE_LOG_SUFFIX if log else schema
        target = _IcebergTable(self.catalog, (namespace, table), POSITION_PREFIX + self.app_id)
        target.open()
        return target

    def _error(self, message: str) -> PgoutputError:
        return IcebergSinkError(message)

    def _failures(self) -> tuple[type[Exception], ...]:
        import pyiceberg.exceptions as errors
        found: tuple[type[Exception], ...] = (
            *super()._failures(), errors.CommitFailedException,
            errors.CommitStateUnknownException, errors.ValidationException, errors.RESTError,
            errors.NoSuchNamespaceError, errors.SignError)
        try:
            from sqlalchemy.exc import SQLAlchemyError  # the SQL catalog's database
        except ImportError:  # a catalog other than SQL
            return found
        return (*found, SQLAlchemyError)

    def __enter__(self) -> IcebergSink:
        return self
