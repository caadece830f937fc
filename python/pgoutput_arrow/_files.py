"""Change files of one table directory kept readable as one table.

``pgoutput-dump --format parquet|arrow`` writes ``DIR/schema.table/FIRST-LAST.parquet`` over
time, and a table's definition changes in between (ADD, DROP, RENAME COLUMN, ALTER TYPE).
Readers take a directory's schema from one file (``pyarrow.parquet.read_table(dir)`` and
``pyarrow.dataset`` from the first, Spark from any) and silently drop the columns the others
add, or fail (polars). So every file of a table directory always has the same schema: the
unified schema of every version written there (``pgoutput_arrow.unify_schemas``, the rules
of ``Changes.tables``). When a new version changes its columns, the directory's files are
rewritten to it (same rows, new columns null; each file atomically) before the new rows are
written; a directory left half rewritten by a crash is finished the next time it is opened.
The cost: each schema change that changes the columns rewrites the table's files once.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from ._internal import lsn_to_int as _lsn_to_int
from .decoding import conform, unify_schemas

__all__ = ["TableDirectory", "storable", "decoded", "write_atomically", "write_json_atomically", "read_file", "fsync_dir",
           "writable_directory", "read_snapshot_record", "SNAPSHOT_RECORD", "DATA_SUFFIXES"]

#: The file in an output directory that records its initial snapshot (slot, consistent point).
SNAPSHOT_RECORD = "_snapshot.json"

DATA_SUFFIXES = (".parquet", ".arrow")

_INTERVAL_STRUCT = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("nanoseconds", pa.int64())])
_UUID_META = {b"ARROW:extension:name": b"arrow.uuid", b"ARROW:extension:metadata": b""}


def _parquet_field(f: pa.Field) -> pa.Field:
    """How a column is stored in Parquet so that pyarrow reads it back with the same values
    and Spark reads it at all: Parquet has no month_day_nano interval (stored as a struct of
    months, days and nanoseconds), Spark rejects Parquet's UUID type (stored as plain 16
    bytes, with the arrow.uuid extension recorded in the field metadata, which pyarrow
    restores), and view arrays become plain strings and binaries."""
    t = f.type
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid":
        return pa.field(f.name, t.storage_type, f.nullable, {**(f.metadata or {}), **_UUID_META})
    if t == pa.month_day_nano_interval():
        return f.with_type(_INTERVAL_STRUCT)
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.json" and \
            pa.types.is_string_view(t.storage_type):
        # json over a view (a json column inside _before): over a plain string, see below.
        return f.with_type(pa.json_(pa.string()))
    # pyarrow's Parquet writer cannot slice view arrays into pages ("Slicing not implemented
    # for StringView"): plain string and binary, the same Parquet column.
    if pa.types.is_string_view(t):
        return f.with_type(pa.string())
    if pa.types.is_binary_view(t):
        return f.with_type(pa.binary())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _parquet_field(t.value_field)
        if inner.equals(t.value_field, check_metadata=True):
            return f
        return f.with_type(pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner))
    if pa.types.is_struct(t):
        children = [t.field(i) for i in range(t.num_fields)]
        fixed = [_parquet_field(c) for c in children]
        if all(a.equals(b, check_metadata=True) for a, b in zip(children, fixed)):
            return f
        return f.with_type(pa.struct(fixed))
    return f


def _to_type(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` rebuilt with the type :func:`_parquet_field` chose, array by array (no
    Python values, which cannot hold every date PostgreSQL can)."""
    if arr.type == t:
        return arr
    if isinstance(arr.type, pa.BaseExtensionType):
        if isinstance(t, pa.BaseExtensionType):
            return pa.ExtensionArray.from_storage(t, _to_type(arr.storage, t.storage_type))
        return _to_type(arr.storage, t)
    if arr.type == pa.month_day_nano_interval():
        return pa.array([None if v is None else
                         {"months": v.months, "days": v.days, "nanoseconds": v.nanoseconds}
                         for v in arr.to_pylist()], t)
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(arr.type):
        children = [_to_type(c, t.field(i).type) for i, c in enumerate(arr.flatten())]
        return pa.StructArray.from_arrays(children, fields=[t.field(i) for i in range(t.num_fields)],
                                          mask=mask)
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        cls = pa.ListArray if pa.types.is_list(arr.type) else pa.LargeListArray
        values = _to_type(arr.values, t.value_type)
        return cls.from_arrays(arr.offsets, values, type=t, mask=mask)
    return arr.cast(t)


def storable(table: pa.Table, fmt: str) -> pa.Table:
    """``table`` as it is written in ``fmt`` (Parquet needs the conversions of
    :func:`_parquet_field`; Arrow IPC takes every type as it is)."""
    if fmt != "parquet":
        return table
    fields = [_parquet_field(f) for f in table.schema]
    if all(a.equals(b, check_metadata=True) for a, b in zip(table.schema, fields)):
        return table
    cols = [col if f.type == old.type else
            pa.chunked_array([_to_type(c, f.type) for c in col.chunks], f.type)
            for f, old, col in zip(fields, table.schema, table.columns)]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=table.schema.metadata))


def _interval_field(f: pa.Field) -> bool:
    return (f.metadata or {}).get(b"pg.type_name") in (b"interval", b"_interval")


def _restored(arr: pa.Array, t: pa.DataType, interval: bool) -> pa.Array:
    """``arr`` as read from a file, with the intervals :func:`storable` stored as structs
    made intervals again (``interval``: the column is an interval or interval[] one)."""
    mask = arr.is_null() if arr.null_count else None
    if interval and t == _INTERVAL_STRUCT:
        return pa.array([None if v is None else (v["months"], v["days"], v["nanoseconds"])
                         for v in arr.to_pylist()], pa.month_day_nano_interval())
    if interval and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        values = _restored(arr.values, t.value_type, True)
        if values.type == t.value_type:
            return arr
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, values, mask=mask)
    if pa.types.is_struct(t) and not interval:  # _before: the columns again
        fields = [t.field(i) for i in range(t.num_fields)]
        children = [_restored(c, f.type, _interval_field(f)) for c, f in zip(arr.flatten(), fields)]
        if all(c.type == f.type for c, f in zip(children, fields)):
            return arr
        return pa.StructArray.from_arrays(children, fields=[f.with_type(c.type) for c, f in zip(children, fields)],
                                          mask=mask)
    return arr


def decoded(table: pa.Table) -> pa.Table:
    """A file's table back in the decoder's types where :func:`storable` changed them in a
    way the unifying rules do not cover: intervals stored as structs (in interval and
    interval[] columns, and in ``_before``)."""
    cols, fields = [], []
    for f, col in zip(table.schema, table.columns):
        if _interval_field(f) or f.name == "_before":
            chunks = [_restored(c, f.type, _interval_field(f))
                      for c in col.chunks or [pa.array([], f.type)]]
            if chunks[0].type != f.type:
                col = pa.chunked_array(chunks, chunks[0].type)
                f = f.with_type(col.type)
        cols.append(col)
        fields.append(f)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=table.schema.metadata))


def read_schema(path: Path) -> pa.Schema:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(path)
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).schema


def read_file(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def write_atomically(table: pa.Table, path: Path, fmt: str) -> None:
    """Writes a hidden ``.name.tmp`` (readers such as Spark and pyarrow datasets skip
    names starting with a dot), fsyncs it, renames it into place and fsyncs the
    directory, so a reader never sees a partial file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                pq.write_table(table, f)
            else:
                with pa.ipc.new_file(f, table.schema) as w:
                    w.write_table(table)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def without_column_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` without column ids (``pg.column_id`` and a unified column's
    ``pg.column_id.merged``: one decoder's own numbering)."""
    def strip(f: pa.Field) -> pa.Field:
        md = {k: v for k, v in (f.metadata or {}).items() if not k.startswith(b"pg.column_id")}
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([strip(t.field(i)) for i in range(t.num_fields)])
        return pa.field(f.name, t, f.nullable, md or None)
    return pa.schema([strip(f) for f in schema], metadata=schema.metadata)


def _version(schema: pa.Schema) -> int:
    return int((schema.metadata or {}).get(b"pg.version", b"0") or 0)


class TableDirectory:
    """One table's directory of change files, every file under the same schema: the unified
    schema (:func:`~pgoutput_arrow.unify_schemas`) of the schema the files already had and
    of every version written since.

    Files are compared by the columns they read back with (what a Parquet round trip
    renames, such as list item fields, never looks like a change), without metadata: a
    version that only changes metadata (``pg.version``, a key flag) rewrites nothing, nor
    does a new run. Column ids (``pg.column_id``) are one decoder's numbering, so a file's
    own are never used: its columns are matched by name to the schema the files are known
    to hold, whose ids are the current decoder's (that is how a renamed column stays one).
    A rewrite keeps both schemas in a journal until it is done, and opening the directory
    finishes one that a crash interrupted. A live sink journals the rewrite before writing
    a group (:meth:`prepare`) and does it once the group counts (:meth:`finish`), so that
    the files never hold a schema ahead of the checkpoint; a capture's sink does it before
    writing (:meth:`table`).
    """

    def __init__(self, directory: Path, fmt: str, counted: int | None = None) -> None:
        """Opens ``directory`` (it may not exist yet). ``counted``: the checkpoint of a live
        output; a rewrite a crash interrupted is finished if the group that started it is
        counted (its end LSN at most ``counted``), and else forgotten (its files were not
        touched yet). Without it (a capture's output) it is always finished."""
        self.directory = directory
        self.fmt = fmt
        #: The schemas the files' schema is unified from, oldest first: the schema the
        #: files had when opened (without ids), then the versions written since.
        self.versions: list[pa.Schema] = []
        #: What every file holds (decoder types), and the columns it reads back with.
        self.unified: pa.Schema | None = None
        self._on_disk: list[tuple[str, pa.DataType, bool]] | None = None
        self._grown = False
        #: Whether the next version is a new decoder's first (see :meth:`_see`).
        self._by_name = False
        #: The files' schema with the current decoder's column ids, when it is not
        #: ``unified`` (after a new decoder's first version).
        self._files_as: pa.Schema | None = None
        #: The rewrite :meth:`prepare` started and :meth:`finish` does: (held, unified).
        self._pending: tuple[pa.Schema | None, pa.Schema] | None = None
        #: Files rewritten so far.
        self.rewritten = 0
        for tmp in self.directory.glob(".*.tmp") if self.directory.is_dir() else []:
            tmp.unlink()  # a write a crash interrupted: its file is whole or absent
        journal = self.directory / JOURNAL
        unified: pa.Schema | None = None
        if journal.exists():  # a rewrite a crash interrupted
            held, to, lsn = _read_journal(journal)
            if counted is None or lsn is None or lsn <= counted:
                self._pending = (held, to)
                self.finish()
                unified = to
            else:  # begun for a group that does not count: no file was rewritten yet
                journal.unlink()
                fsync_dir(self.directory)
        if unified is None:
            distinct: list[pa.Schema] = []
            for path in self.files():
                s = read_schema(path)
                if all(_columns(s) != _columns(d) for d in distinct):
                    distinct.append(s)
            # More than one only in a directory written otherwise (by an earlier version
            # of pgoutput-dump): its files in name order, columns matched by name.
            schemas = [without_column_ids(decoded(_empty(s)).schema) for s in distinct]
            if len(schemas) > 1:
                unified = unify_schemas(schemas)
                self._pending = (None, unified)
                self.finish()
            elif schemas:
                unified = schemas[0]
        if unified is not None:
            # The versions to come are a decoder of this run's: its own column ids.
            unified = without_column_ids(unified)
            self.versions = [unified]
            self.unified, self._on_disk = unified, self._read_back(unified)
            self._by_name = True

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir()
                      if p.suffix in DATA_SUFFIXES and not p.name.startswith("."))

    def prepare(self, batches: list[pa.RecordBatch], lsn: int | None = None) -> pa.Table:
        """``batches`` (rows of this table, of any of its versions) as one table under the
        directory's schema, as it is stored. The schema first grows with their versions; if
        the files' columns change, the rewrite of every file already there is journaled
        (with ``lsn``, the end of the group the batches belong to) for :meth:`finish`."""
        for b in batches:
            self._see(b.schema)
        if self._grown:
            unified = unify_schemas(self.versions)
            on_disk = self._read_back(unified)
            held = self._files_as or self.unified
            if held is not None and on_disk != self._on_disk and self.files():
                _write_journal(self.directory / JOURNAL, held, unified, lsn)
                self._pending = (held, unified)
            self.unified, self._on_disk, self._grown = unified, on_disk, False
            self._files_as = None
        assert self.unified is not None
        target = self.unified
        return storable(pa.concat_tables([conform(b, target) for b in batches]), self.fmt)

    def table(self, batches: list[pa.RecordBatch]) -> pa.Table:
        """:meth:`prepare`, then :meth:`finish`: the files already there are rewritten
        before the caller writes the table."""
        table = self.prepare(batches)
        self.finish()
        return table

    def finish(self) -> None:
        """Rewrites every file to the grown schema, if :meth:`prepare` found it changed,
        each atomically, newest first; then drops the journal."""
        if self._pending is None:
            return
        held, unified = self._pending
        target = self._read_back(unified)
        for path in reversed(self.files()):
            if _columns(read_schema(path)) == target:
                continue  # written under it, or rewritten before a crash
            current = _maps_as(decoded(read_file(path)), held or unified)
            current = current.cast(without_column_ids(current.schema))
            if held is not None:
                # By name to what the files hold, whose column ids pair its columns with
                # the grown schema's (a renamed column).
                current = conform(current, held)
            write_atomically(storable(conform(current, unified), self.fmt), path, self.fmt)
            self.rewritten += 1
        journal = self.directory / JOURNAL
        if journal.exists():
            journal.unlink()
            fsync_dir(self.directory)
        self._pending = None

    def _see(self, schema: pa.Schema) -> None:
        if any(schema.equals(v, check_metadata=True) for v in self.versions):
            return
        if self.unified is not None and (self._by_name or _version(schema) <= _version(self.versions[-1])):
            # The first version of a decoder (of this run; or of a reconnected stream: a
            # decoder numbers a table's versions upwards), whose column ids are its own:
            # the columns so far are matched to it by name, once, so that its ids pair the
            # next versions with them (a column renamed later stays one column).
            self.versions = [unify_schemas([without_column_ids(self.unified), schema]), schema]
            self._by_name = False
            # The files' columns by name, under this decoder's ids: what a rewrite reads
            # them as.
            self._files_as = self.versions[0]
        else:
            self.versions.append(schema)
        self._grown = True

    def _read_back(self, schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
        """The columns a file written under ``schema`` reads back with (an empty one,
        written and read in memory)."""
        table = storable(_empty(schema), self.fmt)
        sink = pa.BufferOutputStream()
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, sink)
            back = pq.read_schema(pa.BufferReader(sink.getvalue()))
        else:
            with pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
            back = pa.ipc.open_file(sink.getvalue()).schema
        return _columns(back)


#: The rewrite under way in a table directory: the schema its files hold, the one they are
#: being rewritten to, and the end LSN of the live group that grew it (hidden: readers
#: skip names starting with a dot).
JOURNAL = ".schema-rewrite.json"


def _write_journal(path: Path, held: pa.Schema, unified: pa.Schema, lsn: int | None) -> None:
    data: dict[str, object] = {k: base64.b64encode(v.serialize().to_pybytes()).decode()
                               for k, v in (("held", held), ("unified", unified))}
    data["lsn"] = lsn
    write_json_atomically(path, data)


def write_json_atomically(path: Path, data: object) -> None:
    """``path`` holds ``data`` as JSON, replaced atomically and durably: a hidden
    ``.name.tmp`` written and fsynced, renamed into place, the directory fsynced."""
    text = json.dumps(data)
    tmp = path.with_name(f".{path.name.lstrip('.')}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _read_journal(path: Path) -> tuple[pa.Schema, pa.Schema, int | None]:
    data = json.loads(path.read_text())
    held, unified = (pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data[k])))
                     for k in ("held", "unified"))
    return held, unified, data["lsn"]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def writable_directory(root: Path) -> TextIO:
    """Creates the output directory ``root`` if needed and takes its writer's lock
    (``root/.lock``, held while the returned file is open): an ``OSError`` in one line when
    the location cannot be written (a file, under a file, read-only, no permission) or
    another pgoutput-dump writes there. Called before anything is created on a server."""
    import fcntl

    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / ".lock", "w")
    except OSError as e:
        raise OSError(f"cannot write --output {root}: {e.strerror or e}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise OSError(f"{root} is being written by another pgoutput-dump") from None
    return lock


def _maps_as(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with its map columns (``_special``) typed as ``schema`` has them: a Parquet
    round trip names a map's entries after the column, and conform does not rename them."""
    names = set(schema.names)
    fields = [f.with_type(schema.field(f.name).type)
              if f.name in names and pa.types.is_map(f.type) and pa.types.is_map(schema.field(f.name).type)
              else f for f in table.schema]
    if all(str(a.type) == str(b.type) for a, b in zip(fields, table.schema)):
        return table  # (pyarrow's type equality ignores the entries' name)
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def _empty(schema: pa.Schema) -> pa.Table:
    """A table of no rows (``Schema.empty_table`` cannot make extension columns)."""
    return pa.Table.from_batches([pa.RecordBatch.from_arrays(
        [pa.nulls(0, f.type) for f in schema], schema=schema)])


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    """What a reader of the files sees of a schema: names, types and nullability."""
    return [(f.name, f.type, f.nullable) for f in schema]


def read_snapshot_record(root: Path) -> dict[str, object] | None:
    """The snapshot record of the output at ``root`` (None: there is none), with ``lsn`` as an
    int (None while its slot was being created). Whether it is done is the output's to say."""
    try:
        record: dict[str, object] = json.loads((root / SNAPSHOT_RECORD).read_text())
    except FileNotFoundError:
        return None
    lsn = record.get("lsn")
    record["lsn"] = _lsn_to_int(str(lsn)) if lsn is not None else None
    return record
