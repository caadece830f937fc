"""Decode pgoutput captures on Spark (pyspark 4.3+): executors, SQL, a data source, replicas.

Ways in:

* :func:`decode` — ``DataFrame[lsn, xid, data]`` → ``{"schema.table": DataFrame}``, decoded on the
  executors with ``mapInArrow``; the result does not depend on partitioning or row order
  (:mod:`.batch`).
* :func:`register` — for SQL: the Arrow UDTF ``pgoutput_changes`` and the Arrow UDFs
  ``pgoutput_kind``, ``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text``; and the
  ``pgoutput`` batch data source (:mod:`.sql`, :mod:`.source`).
* ``spark.readStream.format("pgoutput")`` — a live replication slot as a streaming source with
  LSN offsets, acknowledged only when Spark commits a micro-batch (:mod:`.stream`).
* :func:`snapshot` — the initial snapshot of a new slot's tables, read by the executors chunk
  by chunk (:mod:`.snapshot`); or ``.option("snapshot", "true")`` on the streaming source, whose
  first micro-batch is then the snapshot.
* :func:`apply_changes` — the latest state per key: a replica of the source table (:mod:`.replica`).
* :func:`to_spark_arrow_schema` / :func:`cast_for_spark` — the decoder's Arrow types mapped to
  types Spark accepts (:mod:`.types`; docs/spark.md has the table).

Every byte of the protocol is the crates' (``pgoutput_arrow._internal``): the canonical rebuild
of shuffled transactions, the relation catalog, the schemas of relations.
"""

from __future__ import annotations

from .._internal import lsn_to_int
from .._internal import lsn_to_str as lsn_to_text
from .batch import TRUNCATES, canonical_stream, decode, decode_rows_locally, decode_table_locally
from .generic import UDTF_SCHEMA, changes_to_generic
from .replica import apply_changes
from .snapshot import SparkSnapshot, snapshot
from .source import PgoutputDataSource
from .sql import PgoutputChangesUDTF, message_kind, register
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, spark_arrow_type, time_type_enabled, to_spark_arrow_schema

__all__ = [
    "to_spark_arrow_schema",
    "spark_arrow_type",
    "cast_for_spark",
    "time_type_enabled",
    "SPARK_DECODER_OPTIONS",
    "decode",
    "register",
    "apply_changes",
    "snapshot",
    "SparkSnapshot",
    "lsn_to_int",
    "lsn_to_text",
    "message_kind",
    "canonical_stream",
    "changes_to_generic",
    "decode_rows_locally",
    "decode_table_locally",
    "PgoutputDataSource",
    "PgoutputChangesUDTF",
    "TRUNCATES",
    "UDTF_SCHEMA",
]
