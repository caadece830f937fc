"""The decoder's Arrow types mapped to types Spark 4.3 accepts (mapInArrow, Python data
sources), and batches cast to them (docs/spark.md has the table). The mapping lives in
:mod:`pgoutput_arrow._lake_types`, shared with the Delta Lake sink (Delta's types are
Spark's).

Two choices make every DataFrame of this package work on a default SparkSession:

* ``time`` is TIME only where the session has ``spark.sql.timeType.enabled``; elsewhere
  PostgreSQL's text (:func:`time_type_enabled` reads the session's setting on the driver,
  where the schema is made; the executors follow that schema).
* Decoders made for Spark take :data:`SPARK_DECODER_OPTIONS`: dates and timestamps that
  PySpark's ``collect()`` (Python's ``datetime``) or ``toPandas()`` (pandas'
  ``datetime64[ns]``) cannot hold are special values, kept in ``_special``.
"""

from __future__ import annotations

from typing import Any

from .._lake_types import cast_column, cast_for_spark, spark_arrow_type, to_spark_arrow_schema

__all__ = ["spark_arrow_type", "to_spark_arrow_schema", "cast_for_spark", "cast_column",
           "time_type_enabled", "SPARK_DECODER_OPTIONS", "TIME_TYPE_CONF"]

#: The Spark setting without which TIME columns fail ``count()``, writes, ``groupBy``.
TIME_TYPE_CONF = "spark.sql.timeType.enabled"

#: Decoder options of every decoder the Spark integration makes (``datetime_range``: see
#: :class:`pgoutput_arrow.Decoder`).
SPARK_DECODER_OPTIONS: dict[str, Any] = {"datetime_range": "pandas", "time": "time64"}


def time_type_enabled(spark: Any) -> bool:
    """Whether ``spark`` (a SparkSession) handles TIME columns: then ``time`` is TIME, else
    PostgreSQL's text."""
    return str(spark.conf.get(TIME_TYPE_CONF, "false")).strip().lower() == "true"
