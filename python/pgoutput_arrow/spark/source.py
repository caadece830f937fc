"""The ``pgoutput`` data source: ``spark.read.format("pgoutput")`` reads a capture (Parquet
files of ``lsn``, ``xid``, ``data``); ``spark.readStream.format("pgoutput")`` streams a live
slot (:mod:`.stream`)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import pyarrow as pa

from ._common import spark_schema
from .batch import decode_table_locally
from .generic import UDTF_SCHEMA, changes_to_generic
from .types import cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["PgoutputDataSource", "data_source_for"]


def _read_capture(path: str) -> pa.Table:
    import glob
    import os

    import pyarrow.parquet as pq

    files = sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)) if os.path.isdir(path) else [path]
    parts = []
    for f in files:
        t = pq.read_table(f, columns=["lsn", "xid", "data"])
        parts.append(t)
    if not parts:
        return pa.table({"lsn": pa.array([], pa.int64()), "xid": pa.array([], pa.int64()),
                         "data": pa.array([], pa.binary())})
    # The crates normalise the columns (lsn as text or integer, data binary or hex text).
    return pa.concat_tables(parts, promote_options="permissive")


try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class PgoutputDataSource(DataSource):
        """``spark.read.format("pgoutput").option("table", "public.t").load(path)``: one table of
        a capture (Parquet files with ``lsn``, ``xid``, ``data``), typed as :func:`decode` does.
        Without ``table``, the generic change schema of the ``pgoutput_changes`` UDTF.

        ``spark.readStream.format("pgoutput")`` with the options ``dsn``, ``slot``,
        ``publication`` (and ``table``) streams a live replication slot, with LSN offsets
        (:mod:`pgoutput_arrow.spark.stream`)."""

        #: Whether ``time`` is TIME: the data source's schema is made in a Python worker,
        #: which cannot read the session's settings, so :func:`data_source_for` (what
        #: ``register`` registers) sets it from ``spark.sql.timeType.enabled``; the option
        #: ``timeType`` (``true``/``false``) overrides it. Without, ``time`` is text.
        time_type: bool = False

        @classmethod
        def name(cls) -> str:
            return "pgoutput"

        def _time_type(self) -> bool:
            given = {k.lower(): v for k, v in self.options.items()}.get("timetype")
            if given is None:
                return self.time_type
            if given.strip().lower() not in ("true", "false"):
                raise ValueError(f"option timeType must be 'true' or 'false', not {given!r}")
            return given.strip().lower() == "true"

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
                from .stream import stream_schema

                return stream_schema(self.options, self._time_type())
            table = self.options.get("table")
            if table is None:
                return UDTF_SCHEMA
            changes = self._decoded()
            if table not in changes.tables:
                raise ValueError(f"table {table!r} is not in the capture; it has {sorted(changes.tables)}")
            return spark_schema(to_spark_arrow_schema(changes.tables[table].schema, self._time_type()))

        def reader(self, schema: Any) -> "DataSourceReader":
            if self._is_live():
                raise ValueError("spark.read.format('pgoutput') reads captures from a path; a live "
                                 "replication slot (options dsn, slot) is read with "
                                 "spark.readStream.format('pgoutput')")
            return _PgoutputReader(self.options, schema)

        def streamReader(self, schema: Any) -> Any:
            try:
                from .stream import PgoutputStreamReader
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


def data_source_for(spark: Any) -> Any:
    """:class:`PgoutputDataSource` typing ``time`` as ``spark`` handles it (its
    ``spark.sql.timeType.enabled`` now): what :func:`~pgoutput_arrow.spark.register` registers."""
    if PgoutputDataSource is None:  # pragma: no cover
        return None
    return type("PgoutputDataSource", (PgoutputDataSource,), {"time_type": time_type_enabled(spark)})
