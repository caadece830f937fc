"""The ``pgoutput`` data source: ``spark.read.format("pgoutput")`` reads a capture (Parquet
files of ``lsn``, ``xid``, ``data`` on a local path, ``file://``, ``s3a://``, ``hdfs://``, …:
:mod:`._capture`), its schema made from the catalog pass on the driver;
``spark.readStream.format("pgoutput")`` streams a live slot (:mod:`.stream`)."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import pyarrow as pa

from ._capture import S3_OPTIONS, CaptureFiles, list_capture, read_catalog, read_files
from ._common import check_known_options, is_binary_capture, narrow_catalog, ranked_seq, spark_schema, with_seq
from ._catalog_pass import table_schemas
from .generic import UDTF_SCHEMA, changes_to_generic
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["PgoutputDataSource", "data_source_for", "CapturePlan", "CapturePart", "plan_capture",
           "CAPTURE_DECODER_OPTIONS", "CAPTURE_OPTIONS"]

#: The options of ``spark.read.format("pgoutput")`` (a capture): ``path`` (``load(path)``),
#: ``table``, ``timeType`` and the S3 options.
CAPTURE_OPTIONS = ("path", "table", "timeType", *S3_OPTIONS)

#: How the batch source's decoders type columns, as :func:`~pgoutput_arrow.spark.decode`'s do:
#: the schema is made on the driver from the catalog before any change is read, so arrays
#: nest one level (another depth goes to ``_special``) and ``binary`` is the capture's mode,
#: told by the catalog pass's sampled Inserts.
CAPTURE_DECODER_OPTIONS: dict[str, Any] = {"views": False, "array_ndims": 1}


class CapturePlan:
    """What the driver learns of a capture before any task runs: its files, its catalog (the
    Relation, Type and transaction-framing messages: never a decode of the changes), its
    binary mode, every table's decoder schema, and whether each file holds whole
    transactions (no ``xid`` in two files)."""

    def __init__(self, capture: CaptureFiles, catalog: pa.Table, whole_files: bool) -> None:
        self.capture = capture
        self.catalog = catalog
        self.whole_files = whole_files
        self.binary = is_binary_capture(catalog)
        self.schemas = table_schemas(catalog, self.options)

    @property
    def options(self) -> dict[str, Any]:
        return {**SPARK_DECODER_OPTIONS, **CAPTURE_DECODER_OPTIONS, "binary": self.binary}

    def parts(self) -> list[tuple[str, ...]]:
        """The files of each task: one file each when every file holds whole transactions
        (the rows of a transaction are then all in one task, as ``decode()``'s shuffle by
        ``xid`` puts them, and the catalog gives each task the Relation and Type messages
        of the others), else all of them in one."""
        files = self.capture.files
        if self.whole_files and len(files) > 1:
            return [(f,) for f in files]
        return [files]

    def decode(self, files: tuple[str, ...]) -> Any:
        """Decode ``files`` (a task's work) as ``decode()``'s executors decode their whole
        transactions: rebuilt with the catalog's history first (the decoder then numbers
        each table's versions and columns as the driver's schemas do), ``_seq`` the row's
        rank within its transaction."""
        import pgoutput_arrow

        rows = read_files(self.capture, files)
        decoder = pgoutput_arrow.Decoder(**self.options)
        if rows.num_rows:
            decoder.feed_rebuilt(rows, self.catalog, history=True)
        del rows
        changes = decoder.finish()
        seqs = ranked_seq(changes.tables, changes.truncates)
        tables = {name: with_seq(t, seqs[name]) for name, t in changes.tables.items() if t.num_rows}
        return tables


def plan_capture(path: str, options: Mapping[str, str]) -> CapturePlan:
    """List the capture at ``path`` and read its catalog (the driver's work)."""
    capture = list_capture(path, options)
    catalog, whole_files = read_catalog(capture)
    return CapturePlan(capture, narrow_catalog(catalog), whole_files)


try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class PgoutputDataSource(DataSource):
        """``spark.read.format("pgoutput").option("table", "public.t").load(path)``: one table of
        a capture (Parquet files with ``lsn``, ``xid``, ``data``; a local path, ``file://``,
        ``s3a://``, ``hdfs://``, with the S3 options of :data:`._capture.S3_OPTIONS`), typed
        as :func:`decode` does.
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

        def _plan(self) -> CapturePlan:
            # schema() runs first, in a Python worker on the driver; Spark then pickles this
            # object for the read's planning, so the plan is made once.
            if getattr(self, "_capture_plan", None) is None:
                if "path" not in self.options:
                    raise ValueError("spark.read.format('pgoutput') reads a capture: pass its path "
                                     "to load(path); a live slot is read with spark.readStream "
                                     "and the options dsn, slot, publication")
                self._capture_plan = plan_capture(self.options["path"], self.options)
            return self._capture_plan

        def schema(self) -> Any:
            # Made first, on load(): a misspelt option fails before anything is read.
            if self._is_live():
                from .stream import stream_schema
                from .stream_source import STREAM_OPTIONS

                check_known_options(self.options, STREAM_OPTIONS, "spark.readStream.format('pgoutput')")

                return stream_schema(self.options, self._time_type())
            check_known_options(self.options, CAPTURE_OPTIONS, "spark.read.format('pgoutput')")
            table = self.options.get("table")
            if table is None:
                return UDTF_SCHEMA
            plan = self._plan()
            if table not in plan.schemas:
                raise ValueError(f"table {table!r} is not in the capture {self.options['path']}; "
                                 f"it has {sorted(plan.schemas)}")
            return spark_schema(to_spark_arrow_schema(plan.schemas[table], self._time_type()))

        def reader(self, schema: Any) -> "DataSourceReader":
            if self._is_live():
                raise ValueError("spark.read.format('pgoutput') reads captures from a path; a live "
                                 "replication slot (options dsn, slot) is read with "
                                 "spark.readStream.format('pgoutput')")
            return _PgoutputReader(self._plan(), self.options.get("table"), schema)

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

    class CapturePart(InputPartition):
        """One task's share of a capture: whole files of it."""

        def __init__(self, index: int, files: tuple[str, ...]) -> None:
            super().__init__(index)
            self.files = files

    class _PgoutputReader(DataSourceReader):
        def __init__(self, plan: CapturePlan, table: str | None, schema: Any) -> None:
            self.plan = plan
            self.table = table
            self.schema = schema

        def partitions(self) -> list[InputPartition]:
            return [CapturePart(i, files) for i, files in enumerate(self.plan.parts())]

        def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
            import pgoutput_arrow
            from pyspark.sql.pandas.types import to_arrow_schema

            tables = self.plan.decode(partition.files)
            target = to_arrow_schema(self.schema, timezone="UTC")
            if self.table is None:
                for b in changes_to_generic(_Tables(tables)):
                    yield pa.RecordBatch.from_arrays(list(b.columns), schema=target)
                return
            t = tables.get(self.table)
            if t is None:
                return
            # Columns by pg.column_id, as the driver's schema has them.
            t = pgoutput_arrow.conform(t, self.plan.schemas[self.table])
            for chunk in t.to_batches(max_chunksize=65536):
                yield cast_for_spark(chunk, target)

    class _Tables:
        """What :func:`changes_to_generic` reads of a decoder result."""

        def __init__(self, tables: dict[str, pa.Table]) -> None:
            self.tables = tables
except ImportError:  # pragma: no cover - pyspark without Python data sources
    PgoutputDataSource = None  # type: ignore[assignment,misc]


def data_source_for(spark: Any) -> Any:
    """:class:`PgoutputDataSource` typing ``time`` as ``spark`` handles it (its
    ``spark.sql.timeType.enabled`` now): what :func:`~pgoutput_arrow.spark.register` registers."""
    if PgoutputDataSource is None:  # pragma: no cover
        return None
    return type("PgoutputDataSource", (PgoutputDataSource,), {"time_type": time_type_enabled(spark)})
