"""The decoder's Arrow types mapped to types Spark 4.3 accepts (mapInArrow, Python data
sources), and batches cast to them (docs/spark.md has the table). The mapping lives in
:mod:`pgoutput_arrow._lake_types`, shared with the Delta Lake sink (Delta's types are
Spark's)."""

from __future__ import annotations

from .._lake_types import cast_column, cast_for_spark, spark_arrow_type, to_spark_arrow_schema

__all__ = ["spark_arrow_type", "to_spark_arrow_schema", "cast_for_spark", "cast_column"]
