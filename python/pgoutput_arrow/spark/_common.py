"""Helpers shared by the modules of :mod:`pgoutput_arrow.spark` (public names of a private
module: no ``_name`` is imported across modules)."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Any, Callable, Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from .._internal import META_COLUMNS
from .._names import unknown_options

__all__ = ["check_known_options", "IPC_OPTIONS", "ipc_stream", "spark_schema", "quoted", "table_columns", "is_table_column", "rank_within_commit", "META_COLUMNS",
           "narrow_catalog", "is_binary_capture", "dsn_address", "from_executor", "ranked_seq", "with_seq", "bytes_setting", "with_setting"]


#: How decoded rows travel to the JVM as Arrow IPC streams (the decoding pass's packed tables,
#: the streaming source's partitions): zstd (level 1) makes the bytes several times fewer
#: (decoded rows repeat: the meta columns, padded text), and costs less CPU than moving them
#: through the JVM saves (benches/findings.md, "Packed rows compressed", and "The streaming
#: source's partitions compressed").
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def ipc_stream(data: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """``data`` as one Arrow IPC stream, written with :data:`IPC_OPTIONS`."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema, options=IPC_OPTIONS) as writer:
        writer.write(data)
    return sink.getvalue()


def spark_schema(schema: pa.Schema) -> Any:
    """An Arrow schema (already mapped by ``to_spark_arrow_schema``) as Spark's StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier (in backquotes, a backquote doubled)."""
    return "`" + name.replace("`", "``") + "`"


def is_table_column(field: pa.Field) -> bool:
    """Whether a decoder field is one of the table's columns rather than one of the
    decoder's metadata columns: the table's carry ``pg.type_oid`` in their metadata (the
    rule of ``unify_schemas`` and of the CLI), so a table column named ``_op`` stays."""
    return bool(field.metadata) and b"pg.type_oid" in field.metadata


def table_columns(schema: pa.Schema) -> list[str]:
    """The names of the table's own columns of a decoder schema, in order."""
    return [f.name for f in schema if is_table_column(f)]


def rank_within_commit(commit: np.ndarray, *minor: np.ndarray) -> np.ndarray:
    """Each row's rank among the rows of the same ``commit`` (0, 1, ...), ordered by the
    ``minor`` keys, most significant first: Spark's ``_seq``."""
    order = np.lexsort((*reversed(minor), commit))
    c_sorted = commit[order]
    starts = np.r_[0, np.flatnonzero(np.diff(c_sorted)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order)) - group_start
    return rank


def narrow_catalog(rows: pa.Table, split: Collection[int] = ()) -> pa.Table:
    """The catalog pass's rows (``lsn``, ``xid``, ``data`` of the kinds
    ``_internal.CATALOG_KINDS``, and sampled Inserts; or also ``FRAMING_KINDS``) with the
    ends of transactions (Commit, Prepare, …) kept only for the transactions that sent a
    Relation or Type message: they place those; the others' ends are not needed. The framing
    messages (Begin, Origin, …, the ends) are kept whole for the ``split`` transactions: those
    a partition holds only a part of, rebuilt from them (``canonical_stream``'s ``pieces``)."""
    kinds = pa.table(_internal.describe_messages(rows.select(["data"]))).column("kind")
    is_end = pc.is_in(kinds, pa.array(["commit", "stream_commit", "prepare", "stream_prepare"]))
    framing = pc.or_(is_end, pc.is_in(kinds, pa.array(["begin", "origin", "begin_prepare", "commit_prepared"])))
    senders = rows.filter(pc.is_in(kinds, pa.array(["relation", "type"]))).column("xid").unique()
    wanted = pc.or_(pc.and_(is_end, pc.is_in(rows.column("xid"), senders)),
                    pc.is_in(rows.column("xid"), pa.array(sorted(split), pa.int64())))
    return rows.filter(pc.or_(pc.invert(framing), wanted))


def is_binary_capture(catalog: pa.Table) -> bool:
    """Whether the capture was taken with ``binary 'true'``, from the Inserts in ``catalog``."""
    told = pa.table(_internal.describe_messages(catalog.select(["data"]))).column("binary").drop_null()
    return bool(told[0].as_py()) if len(told) else False


def dsn_address(dsn: str) -> str:
    """``host:port`` of a libpq connection string or URI (never its password), as libpq
    would resolve them (``PGHOST``, ``PGPORT``, the local socket, 5432)."""
    from psycopg2.extensions import parse_dsn

    try:
        parts = parse_dsn(dsn)
    except Exception:
        return "the server of the DSN (it does not parse)"
    host = parts.get("host") or parts.get("hostaddr") or os.environ.get("PGHOST") or "the local socket"
    port = parts.get("port") or os.environ.get("PGPORT") or "5432"
    return f"{host}:{port}"


@contextmanager
def from_executor(dsn: str, what: str) -> Iterator[None]:
    """Around a connection a Spark executor opens to ``dsn`` (``what`` it is for): one that
    fails says where to and that executors, not only the driver, must reach the server."""
    from ..exceptions import ConnectionFailed

    try:
        yield
    except ConnectionFailed as e:
        raise type(e)(f"{e} ({what} connects from a Spark executor to {dsn_address(dsn)}: every "
                      "executor must reach the server, not only the driver)",
                      lsn=e.lsn, sqlstate=e.sqlstate) from None


def ranked_seq(tables: dict[str, pa.Table], truncates: pa.Table) -> dict[str, np.ndarray]:
    """Each row's rank within its transaction across ``tables`` and the TRUNCATEs (key
    ``""``), in the decoder's order: Spark's ``_seq``, whichever rows of other
    transactions were decoded beside it."""
    parts = [(name, t) for name, t in sorted(tables.items()) if t.num_rows]
    if truncates.num_rows:
        parts.append(("", truncates))
    if not parts:
        return {}
    commit = np.concatenate([t.column("_commit_lsn").to_numpy() for _, t in parts])
    seq = np.concatenate([t.column("_seq").to_numpy() for _, t in parts])
    rank = rank_within_commit(commit, seq)
    out: dict[str, np.ndarray] = {}
    offset = 0
    for name, t in parts:
        out[name] = rank[offset:offset + t.num_rows]
        offset += t.num_rows
    return out


def with_seq(table: pa.Table, seq: np.ndarray) -> pa.Table:
    """``table`` with ``seq`` as its ``_seq``."""
    i = table.schema.get_field_index("_seq")
    return table.set_column(i, table.schema.field(i), pa.array(seq, pa.int64()))


def bytes_setting(text: str, default: int = 128 << 20) -> int:
    """A Spark byte size (``134217728b``, ``128m``, ``1g``, a plain number), or ``default``
    where it does not read as one."""
    m = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", text.lower())
    if not m:
        return default
    return int(m.group(1)) << (10 * "bkmgt".index(m.group(2) or "b"))


def with_setting(spark: Any, key: str, default: str, value: Callable[[str], str], action: Callable[[], Any]) -> Any:
    """``action()`` with the session's SQL setting ``key`` at ``value(its value, or
    default)``, then the setting as it was (unset if it was empty)."""
    before = spark.conf.get(key, default)
    spark.conf.set(key, value(before))
    try:
        return action()
    finally:
        if before:
            spark.conf.set(key, before)
        else:
            spark.conf.unset(key)


def check_known_options(given: Collection[str], known: Collection[str], what: str) -> None:
    """A ``ValueError`` naming each option in ``given`` that is not one of ``known`` (their
    documented spellings; Spark's options are case-insensitive), with the nearest known one:
    a misspelt option fails before anything is read, instead of being ignored."""
    by_lower = {k.lower(): k for k in known}
    unknown = sorted(k for k in given if k.lower() not in by_lower)
    if not unknown:
        return
    raise ValueError(f"{what}: {unknown_options(unknown, known)}; "
                     f"its options are {', '.join(sorted(known, key=str.lower))}")
