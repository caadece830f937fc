"""The live stream's batches: :data:`LiveBatch` (the decoder's :class:`~pgoutput_arrow.Output`), and what is
done to each decoded batch before it goes out: the rows already handled dropped
(:func:`drop_handled`), and each table's versions brought to one schema
(:class:`TableSchemas`)."""

from __future__ import annotations

import pyarrow as pa

from .._files import without_column_ids
from ..decoding import Output, commit_column, conform, unify_schemas

__all__ = ["LiveBatch", "TableSchemas", "drop_handled", "commit_column"]


#: The live stream's batches are the decoder's (:class:`~pgoutput_arrow.Output`), with their
#: ``ack_lsn`` and snapshot fields set: one type from the decoder to every sink.
LiveBatch = Output


def drop_handled(batch: pa.RecordBatch, floor: int) -> pa.RecordBatch:
    """``batch`` without the rows of transactions that committed before ``floor`` (handled
    already: the second guard against duplicates after a resume, or a table whose own
    snapshot was taken at ``floor``)."""
    if floor <= 0:
        return batch
    col = commit_column(batch)
    if col is None or batch.num_rows == 0:
        return batch
    import pyarrow.compute as pc

    values = batch.column(col)
    lowest = pc.min(values).as_py()
    if lowest is None or lowest >= floor:
        return batch
    # Rows come in commit order: those already handled are the batch's first ones. A
    # slice, since pyarrow's filter has no kernel for the view columns of text and bytea.
    commits = values.to_pylist()
    first_new = next((i for i, c in enumerate(commits) if c is None or c >= floor), len(commits))
    return batch.slice(first_new)


class TableSchemas:
    """Per table, each version's schema seen so far (in the order last in force) and their
    unified schema, which every batch of the table is brought to: a table's schema only grows
    (columns added, dropped ones kept, a renamed one under its newest name, retyped ones
    widened), as in :attr:`Changes.tables`."""

    def __init__(self) -> None:
        self._versions: dict[str, dict[tuple[bytes, pa.Schema], pa.Schema]] = {}
        self._unified: dict[str, pa.Schema] = {}

    def unify(self, table: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` under the unified schema of every version of ``table`` seen."""
        # The decoder's version, and the schema itself: the online snapshot's chunks carry
        # none, and a chunk read after an ALTER TABLE has columns the one before had not.
        key = ((batch.schema.metadata or {}).get(b"pg.version", b""), batch.schema)
        versions = self._versions.setdefault(table, {})
        if not versions or next(reversed(versions)) != key:
            versions.pop(key, None)
            versions[key] = batch.schema
            self._unified[table] = unify_schemas(list(versions.values()))
        unified = self._unified[table]
        if batch.schema == unified:
            return batch
        whole = conform(batch, unified).combine_chunks()
        batches = whole.to_batches()
        # A table of no rows has no batch: one of no rows (a chunk that kept none).
        return batches[0] if batches else pa.record_batch([pa.array([], f.type) for f in whole.schema],
                                                          schema=whole.schema)

    def new_decoder(self) -> None:
        """A new decoder starts (after a reconnect). Column ids (``pg.column_id``) are one
        decoder's own: what earlier decoders' batches had becomes one version without ids,
        matched by name to the new decoder's."""
        for table, versions in self._versions.items():
            if versions:
                earlier = unify_schemas(list(versions.values()))
                earlier = without_column_ids(earlier)
                self._versions[table] = {(b"earlier", earlier): earlier}
