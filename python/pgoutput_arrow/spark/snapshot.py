"""The initial snapshot on Spark: every published table as it was when the slot was created,
read by the executors chunk by chunk, before the slot's changes are streamed.

::

    from pgoutput_arrow import spark as pgspark

    with pgspark.snapshot(spark, dsn, slot="shop_spark", publication="shop") as snap:
        for table in snap.tables:
            snap.read(table).write.mode("overwrite").parquet(f"/lake/{table}/snapshot")
    # then stream the changes from the same slot, from snap.lsn on:
    spark.readStream.format("pgoutput").option("slot", "shop_spark") ...

The work is :mod:`pgoutput_arrow.live.snapshot`'s: the driver creates the slot exporting its
snapshot and cuts each published table into chunks of block ranges; each chunk is one Spark
partition, read on an executor by ``COPY ... (FORMAT binary)`` inside the exported snapshot
and decoded in Rust. The exported snapshot lives as long as the driver keeps the slot's
replication connection open and idle: a DataFrame of :meth:`SparkSnapshot.read` must be
computed (written, cached, counted) before the ``with`` block ends; afterwards its tasks fail
with :class:`~pgoutput_arrow.live.snapshot.SnapshotGone`.

Through Spark Connect the "driver" above is the client process that calls :func:`snapshot`:
it holds the exported snapshot, so it must run until the DataFrames are computed.

Snapshot rows are typed as the stream types the table (the streaming source's schema), with
``_op = "snapshot"``, ``_lsn = _commit_lsn =`` the slot's consistent point and a negative
``_seq``: :func:`~pgoutput_arrow.spark.apply_changes` over the snapshot and the changes gives
the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .._internal import lsn_to_str
from ..live.options import DEFAULT_CONNECT_TIMEOUT_S, StreamOptions
from ..live.snapshot import (
    DEFAULT_CHUNK_BYTES,
    ExportedSnapshot,
    SnapshotChunk,
    SnapshotGone,
    SnapshotPlan,
    export_snapshot,
    open_snapshot_connection,
    plan_snapshot,
    read_chunk,
)
from ._common import from_executor, spark_schema
from .types import SPARK_DECODER_OPTIONS, cast_for_spark, time_type_enabled, to_spark_arrow_schema

__all__ = ["SparkSnapshot", "snapshot", "SNAPSHOT_DECODER_OPTIONS", "read_chunk_batches", "read_exported_part"]

#: How the snapshot types columns: as the streaming source does (text tuple data, arrays of
#: one level), so that snapshot rows and streamed changes of a table share one schema.
SNAPSHOT_DECODER_OPTIONS: dict[str, Any] = {"views": False, "binary": False, "array_ndims": 1}


def read_chunk_batches(dsn: str, snapshot_name: str, chunk: SnapshotChunk, target: pa.Schema | None,
                       connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """The rows of ``chunk`` (an executor's work), as Spark-ready batches of ``target``, or
    as the decoder makes them (``target`` None): on a connection of its own that joins the
    exported snapshot ``snapshot_name``."""
    with from_executor(dsn, f"reading the snapshot of {chunk.table}"):
        conn = open_snapshot_connection(dsn, snapshot_name, connect_timeout)
    try:
        for batch in read_chunk(conn, chunk, **SNAPSHOT_DECODER_OPTIONS, **SPARK_DECODER_OPTIONS):
            yield batch if target is None else cast_for_spark(batch, target)
    finally:
        conn.close()


def read_exported_part(dsn: str, chunk: Any, part: int,
                       connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Iterator[pa.RecordBatch]:
    """Part ``part`` of an online snapshot's chunk (``live.online_export.ExportedChunk``: an
    executor's work), as the stream's batches of the table: on a connection of its own that
    joins the chunk's exported snapshot."""
    with from_executor(dsn, f"reading the online snapshot of {chunk.table}"):
        try:
            conn = open_snapshot_connection(dsn, chunk.snapshot_name, connect_timeout)
        except SnapshotGone as e:
            if not chunk.channel:
                raise
            raise SnapshotGone(
                f"part {part + 1} of the online snapshot's chunk of {chunk.table} at {lsn_to_str(chunk.lsn)} "
                "was read again after every part of it was read once, and its exported snapshot ended "
                "then (so that it does not hold the server's xmin horizon): a micro-batch's DataFrame "
                "read twice (persist it in foreachBatch), or a task run again after it read its rows. "
                "The query's restart reads the chunk again, as nothing of it was committed; "
                ".option('holdChunkSnapshot', 'true') keeps each chunk's snapshot until Spark commits "
                f"its micro-batch instead ({e})") from None
    try:
        yield from chunk.read(conn, part)
        chunk.read_done(conn, part)
    finally:
        conn.close()


class SparkSnapshot:
    """A slot just created with its snapshot exported, and the plan of the snapshot's
    chunks; see the module documentation. ``lsn`` is the consistent point (the stream of the
    slot starts there), ``tables`` the tables the snapshot holds."""

    def __init__(self, spark: Any, dsn: str, exported: ExportedSnapshot, plan: SnapshotPlan,
                 connect_timeout: float) -> None:
        self.spark = spark
        self.dsn = dsn
        self.slot = plan.slot
        self.lsn = plan.lsn
        self.tables: list[str] = sorted(plan.tables)
        self.snapshot_name = plan.snapshot_name
        self._exported: ExportedSnapshot | None = exported
        self._plan = plan
        self._connect_timeout = connect_timeout

    def schema(self, table: str) -> pa.Schema:
        """The decoder's Arrow schema of ``table``'s snapshot rows."""
        return self._definition(table).schema(**SNAPSHOT_DECODER_OPTIONS)

    def _definition(self, table: str) -> Any:
        try:
            return self._plan.tables[table]
        except KeyError:
            raise ValueError(f"the snapshot holds no table {table!r}; it holds {self.tables}") from None

    def chunks(self, table: str) -> list[SnapshotChunk]:
        """``table``'s chunks."""
        self._definition(table)
        return [c for c in self._plan.chunks if c.table == table]

    def all_chunks(self) -> list[SnapshotChunk]:
        """Every chunk of the snapshot, biggest tables first."""
        return list(self._plan.chunks)

    def read(self, table: str) -> Any:
        """``table``'s rows as of the consistent point: a DataFrame with one partition per
        chunk, read by the executors. Compute it before the snapshot is closed."""
        if self._exported is None:
            raise ValueError("the snapshot is closed: its rows can no longer be read")
        target = to_spark_arrow_schema(self.schema(table), time_type_enabled(self.spark))
        chunks = {c.index: c for c in self.chunks(table)}
        dsn, name, timeout = self.dsn, self.snapshot_name, self._connect_timeout

        order = sorted(chunks)

        def read_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for i in batch.column(0).to_pylist():
                    yield from read_chunk_batches(dsn, name, chunks[order[i]], target, timeout)

        # One chunk per partition: spark.range splits n numbers into n partitions of one.
        ids = self.spark.range(0, len(order), 1, numPartitions=max(1, len(order)))
        return ids.mapInArrow(read_partition, spark_schema(target))

    def read_all(self) -> dict[str, Any]:
        """Every table's DataFrame (:meth:`read`), by ``"schema.table"``."""
        return {t: self.read(t) for t in self.tables}

    def close(self) -> None:
        """Ends the exported snapshot. The slot stays, at the consistent point: stream it."""
        if self._exported is not None:
            self._exported.close()
            self._exported = None

    def __enter__(self) -> SparkSnapshot:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def snapshot(spark: Any, dsn: str, *, slot: str, publication: str | Sequence[str],
             tables: Sequence[str] | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
             create_publication: Sequence[str] | str | None = None,
             connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> SparkSnapshot:
    """Create the logical slot ``slot`` (an error if it exists) exporting its snapshot, and
    plan the snapshot of every table ``publication`` publishes (or of ``tables``), cut into
    chunks of about ``chunk_bytes`` of table pages: the executors read one chunk per
    partition. Use it as a context manager; the slot stays for the stream."""
    options = StreamOptions.of(slot=slot, publication=publication, create_slot=True,
                               create_publication=create_publication,
                               connect_timeout=connect_timeout)
    exported = export_snapshot(dsn, options)
    try:
        plan = plan_snapshot(dsn, exported, options.publications, chunk_bytes=chunk_bytes,
                             tables=tables, connect_timeout=connect_timeout)
    except BaseException:
        exported.close()
        raise
    return SparkSnapshot(spark, dsn, exported, plan, connect_timeout)
