"""Change files of one table directory kept readable as one table.

``pgoutput-dump --format parquet|arrow`` writes ``DIR/schema.table/FIRST-LAST.parquet`` over
time, and a table's definition changes in between (ADD, DROP, RENAME COLUMN, ALTER TYPE).
Readers take a directory's schema from one file (``pyarrow.parquet.read_table(dir)`` and
``pyarrow.dataset`` from the first, Spark from a summary or any file) and silently drop the
columns the others add. So every file of a table directory always has the same schema: the
unified schema of every version written there (``pgoutput_arrow.unify_schemas``, the rules of
``Changes.tables``). When a new version changes it, the directory's earlier files are
rewritten to it (same rows, new columns null; each file atomically), before the new rows are
written; a directory left half rewritten by a crash is finished the next time it is opened.
The cost: a schema change rewrites that table's earlier files once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from . import conform, unify_schemas

__all__ = ["TableDirectory", "storable", "write_atomically", "read_file", "DATA_SUFFIXES"]

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


def storable_schema(schema: pa.Schema, fmt: str) -> pa.Schema:
    """The schema :func:`storable` gives a table of ``schema``."""
    if fmt != "parquet":
        return schema
    return pa.schema([_parquet_field(f) for f in schema], metadata=schema.metadata)


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


def _is_interval_struct(f: pa.Field) -> bool:
    return f.type == _INTERVAL_STRUCT and (f.metadata or {}).get(b"pg.type_name") == b"interval"


def decoded(table: pa.Table) -> pa.Table:
    """A file's table back in the decoder's types where :func:`storable` changed them in a
    way the unifying rules do not cover (intervals stored as structs)."""
    if not any(_is_interval_struct(f) for f in table.schema):
        return table
    cols, fields = [], []
    for f, col in zip(table.schema, table.columns):
        if _is_interval_struct(f):
            values = [None if v is None else (v["months"], v["days"], v["nanoseconds"]) for v in col.to_pylist()]
            col = pa.chunked_array([pa.array(values, pa.month_day_nano_interval())])
            f = f.with_type(pa.month_day_nano_interval())
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
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: Schema metadata naming the run that wrote a file: column ids (``pg.column_id``) are one
#: decoder's own, so those of an earlier run's files are dropped and their columns matched
#: by name.
RUN_KEY = b"pgoutput.run"


def _without_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` without column ids."""
    def strip(f: pa.Field) -> pa.Field:
        md = {k: v for k, v in (f.metadata or {}).items() if k != b"pg.column_id"}
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([strip(t.field(i)) for i in range(t.num_fields)])
        return pa.field(f.name, t, f.nullable, md or None)
    return pa.schema([strip(f) for f in schema], metadata=schema.metadata)


class TableDirectory:
    """One table's directory of change files, every file under the same schema."""

    def __init__(self, directory: Path, fmt: str) -> None:
        self.directory = directory
        self.fmt = fmt
        self.run = os.urandom(8).hex().encode()
        # Each version's schema (decoder types), in the order last written.
        self.versions: dict[bytes, pa.Schema] = {}
        self.unified: pa.Schema | None = None
        self.rewritten = 0
        for n, path in enumerate(self.files()):
            s = _without_ids(_decoded_schema(read_schema(path)))
            if all(not s.equals(v) for v in self.versions.values()):
                self.versions[b"earlier-%d" % n] = s
        if self.versions:
            # Also finishes a rewrite that a crash interrupted.
            self._set_unified(unify_schemas(list(self.versions.values())))

    def files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir()
                      if p.suffix in DATA_SUFFIXES and not p.name.startswith("."))

    def conform(self, table: pa.Table) -> pa.Table:
        """``table`` (the rows of one version) under the directory's schema, which grows
        with this version if need be (rewriting the files already there)."""
        md = table.schema.metadata or {}
        key = md.get(b"pg.version", b"") + b"@" + md.get(b"pg.relation_id", b"")
        if not self.versions or next(reversed(self.versions)) != key:
            self.versions.pop(key, None)
            self.versions[key] = table.schema
            self._set_unified(unify_schemas(list(self.versions.values())))
        assert self.unified is not None
        return self._stamped(conform(table, self.unified))

    def _stamped(self, table: pa.Table) -> pa.Table:
        return table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_KEY: self.run})

    def _set_unified(self, schema: pa.Schema) -> None:
        if self.unified is not None and schema.equals(self.unified, check_metadata=True):
            return
        self.unified = schema
        target = storable_schema(schema.with_metadata({**(schema.metadata or {}), RUN_KEY: self.run}), self.fmt)
        for path in self.files():
            if read_schema(path).equals(target, check_metadata=True):
                continue
            current = decoded(read_file(path))
            if (current.schema.metadata or {}).get(RUN_KEY) != self.run:
                current = current.cast(_without_ids(current.schema))
            table = storable(self._stamped(conform(current, schema)), self.fmt)
            write_atomically(table, path, self.fmt)
            self.rewritten += 1


def _decoded_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(pa.month_day_nano_interval()) if _is_interval_struct(f) else f
                      for f in schema], metadata=schema.metadata)
