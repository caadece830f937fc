"""SQL: the Arrow UDTF ``pgoutput_changes`` and the Arrow UDFs ``pgoutput_kind``,
``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text`` (:func:`register`)."""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from .. import _internal
from .._internal import lsn_to_int, lsn_to_str
from .batch import decode_table_locally
from .generic import UDTF_SCHEMA, changes_to_generic

__all__ = ["register", "message_kind", "PgoutputChangesUDTF"]


def message_kind(data: bytes) -> str | None:
    """The name of a pgoutput message's kind (``'insert'``, ``'stream_start'``, …;
    ``'unknown'`` for a byte no protocol version uses, None for an empty message)."""
    kind = pa.table(_internal.describe_messages(pa.table({"data": pa.array([data], pa.binary())}))).column("kind")
    value: str | None = kind[0].as_py()
    return value


def _described(data: pa.Array, column: str) -> pa.Array:
    table = pa.table(_internal.describe_messages(pa.table({"data": data.cast(pa.binary())})))
    return table.column(column).combine_chunks()


def register(spark: Any) -> None:
    """Register for SQL: ``pgoutput_changes`` (Arrow UDTF), ``pgoutput_kind``,
    ``pgoutput_relation``, ``lsn_to_int``, ``lsn_to_text`` (Arrow UDFs), and the ``pgoutput``
    data source (``time`` columns as the session's ``spark.sql.timeType.enabled`` says now:
    register again after changing it)."""
    from pyspark.sql.functions import arrow_udf, arrow_udtf  # type: ignore[attr-defined]  # 4.1+, not in the stubs

    from .source import data_source_for

    def kind(data: pa.Array) -> pa.Array:
        return _described(data, "kind")

    def relation(data: pa.Array) -> pa.Array:
        """Relation id of Relation messages (streamed or not) and of Insert/Update/Delete
        outside streamed chunks (inside them the first field is the xid)."""
        return _described(data, "relation_id")

    def to_int(text: pa.Array) -> pa.Array:
        return pa.array([None if t is None else lsn_to_int(t) for t in text.to_pylist()], pa.int64())

    def to_text(value: pa.Array) -> pa.Array:
        return pa.array([None if v is None else lsn_to_str(v) for v in value.to_pylist()], pa.string())

    for name, fn, rtype in (("pgoutput_kind", kind, "string"), ("pgoutput_relation", relation, "bigint"),
                            ("lsn_to_int", to_int, "bigint"), ("lsn_to_text", to_text, "string")):
        fn.__annotations__ = {list(fn.__code__.co_varnames)[0]: pa.Array, "return": pa.Array}
        spark.udf.register(name, arrow_udf(fn, rtype))
    spark.udtf.register("pgoutput_changes", arrow_udtf(PgoutputChangesUDTF, returnType=UDTF_SCHEMA))
    source = data_source_for(spark)
    if source is not None:
        spark.dataSource.register(source)


class PgoutputChangesUDTF:
    """``SELECT * FROM pgoutput_changes(TABLE(SELECT lsn, xid, data FROM capture))``.

    Rows reaching one UDTF instance are decoded together at the end (transactions rebuilt as in
    :func:`decode`), so a capture must reach one instance whole: add ``WITH SINGLE PARTITION``
    after ``TABLE(...)`` when the capture spans several Spark partitions.
    """

    def __init__(self) -> None:
        self.parts: list[pa.Table] = []

    def eval(self, batch: pa.RecordBatch) -> Iterator[pa.Table]:
        if batch.num_rows:
            self.parts.append(pa.table({"lsn": batch.column(0), "xid": batch.column(1), "data": batch.column(2)}))
        return iter(())

    def terminate(self) -> Iterator[pa.Table]:
        if not self.parts:
            return
        from pgoutput_arrow.exceptions import ProtocolError, UnknownRelationError

        try:
            changes = decode_table_locally(pa.concat_tables(self.parts), {"views": False})
        except (ProtocolError, UnknownRelationError) as e:
            # The usual cause: the capture was split over several UDTF instances (Arrow UDTFs
            # cannot ask for a single partition themselves).
            raise type(e)(f"{e} (pgoutput_changes decodes the rows of one partition together: if the "
                          "capture spans several Spark partitions, write "
                          "TABLE(...) WITH SINGLE PARTITION)") from e
        for b in changes_to_generic(changes):
            yield pa.Table.from_batches([b])
