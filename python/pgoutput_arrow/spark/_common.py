"""Helpers shared by the modules of :mod:`pgoutput_arrow.spark` (public names of a private
module: no ``_name`` is imported across modules)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .._internal import META_COLUMNS

__all__ = ["spark_schema", "table_columns", "is_table_column", "META_COLUMNS"]


def spark_schema(schema: pa.Schema) -> Any:
    """An Arrow schema (already mapped by ``to_spark_arrow_schema``) as Spark's StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def is_table_column(field: pa.Field) -> bool:
    """Whether a decoder field is one of the table's columns rather than one of the
    decoder's metadata columns: the table's carry ``pg.type_oid`` in their metadata (the
    rule of ``unify_schemas`` and of the CLI), so a table column named ``_op`` stays."""
    return bool(field.metadata) and b"pg.type_oid" in field.metadata


def table_columns(schema: pa.Schema) -> list[str]:
    """The names of the table's own columns of a decoder schema, in order."""
    return [f.name for f in schema if is_table_column(f)]
