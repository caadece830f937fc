"""Helpers shared by the modules of :mod:`pgoutput_arrow.spark` (public names of a private
module: no ``_name`` is imported across modules)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .._internal import META_COLUMNS
from ..exceptions import (
    AuthenticationFailed,
    ConnectionFailed,
    PublicationNotFound,
    ReplicationError,
    SlotInUse,
    SlotNotFound,
    WalLevelNotLogical,
)

__all__ = ["spark_schema", "table_columns", "is_table_column", "quote_ident", "classify_connect_error",
           "META_COLUMNS"]


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


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def classify_connect_error(exc: BaseException, where: str) -> ReplicationError:
    """psycopg2's connect and command errors → the exception hierarchy, one clear line.

    The streaming source's copy of ``pgoutput_arrow.live``'s rule (private there while the
    live package is being reorganised); one of the two goes when live exports it."""
    text = "; ".join(p.strip() for p in str(exc).strip().splitlines() if p.strip()) or type(exc).__name__
    sqlstate = getattr(exc, "pgcode", None)
    lower = text.lower()
    if sqlstate == "42704" and "replication slot" in lower:
        return SlotNotFound(f"{where}: {text}")
    if sqlstate == "42704" and "publication" in lower:
        return PublicationNotFound(f"{where}: {text}")
    if sqlstate == "55006" or "is active for pid" in lower:
        return SlotInUse(f"{where}: {text} (another process is streaming this slot)")
    if "wal_level" in lower:
        return WalLevelNotLogical(f"{where}: {text}")
    auth_markers = ("password authentication failed", "authentication failed",
                    "no password supplied", "no pg_hba.conf entry", "pg_hba.conf rejects",
                    "role \"", "fe_sendauth")
    if any(m in lower for m in auth_markers) or sqlstate in ("28P01", "28000"):
        return AuthenticationFailed(f"{where}: {text}", sqlstate=sqlstate)
    if "timeout expired" in lower:
        return ConnectionFailed(f"{where}: timed out ({text})", sqlstate=sqlstate)
    return ConnectionFailed(f"{where}: {text}", sqlstate=sqlstate)
