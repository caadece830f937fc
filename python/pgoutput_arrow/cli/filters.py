"""The filters between source and sinks: tables by name (``--table``), transactions by
commit LSN (``--from-lsn``, ``--to-lsn``), and the first N changes (``--limit``). A group's
kept rows stay zero-copy slices of the decoded batches."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from .._internal import first_changes
from ..decoding import Output, OutputKind

__all__ = ["Chunk", "Filters", "filter_chunk", "limit_chunk"]


@dataclass
class Filters:
    tables: list[str]
    from_lsn: int | None
    to_lsn: int | None

    def table_ok(self, name: str) -> bool:
        return not self.tables or any(fnmatch.fnmatchcase(name, g) for g in self.tables)

    def mask(self, batch: pa.RecordBatch, column: str = "_commit_lsn") -> pa.Array | None:
        """Rows inside the LSN range (None: all)."""
        if self.from_lsn is None and self.to_lsn is None:
            return None
        lsn = batch.column(column)
        if "_lsn" in batch.schema.names:  # a non-transactional message: its own LSN
            lsn = pc.coalesce(lsn, batch.column("_lsn"))
        conds = []
        if self.from_lsn is not None:
            conds.append(pc.greater_equal(lsn, pa.scalar(self.from_lsn, lsn.type)))
        if self.to_lsn is not None:
            conds.append(pc.less_equal(lsn, pa.scalar(self.to_lsn, lsn.type)))
        m = conds[0] if len(conds) == 1 else pc.and_(conds[0], conds[1])
        return pc.fill_null(m, False)


@dataclass
class Chunk:
    """One group of decoded batches (the decoder's :class:`~pgoutput_arrow.Output`, in the
    order it gave them), filtered: each keeps its ``kind``, ``table`` and ``version``."""

    outputs: list[Output] = field(default_factory=list)
    max_commit_lsn: int | None = None

    @property
    def tables(self) -> list[Output]:
        """The changes' batches (kind ``table``)."""
        return [o for o in self.outputs if o.kind == "table"]

    def batches(self, kind: OutputKind) -> list[pa.RecordBatch]:
        """The batches of ``kind``."""
        return [o.batch for o in self.outputs if o.kind == kind]


def filter_chunk(outputs: list[Output], filters: Filters) -> Chunk:
    chunk = Chunk()
    commits: list[int] = []
    for out in outputs:
        batch = out.batch
        if "_commit_lsn" in batch.schema.names and batch.num_rows:
            m = pc.max(batch.column("_commit_lsn")).as_py()
            if m is not None:
                commits.append(int(m))
        if out.kind == "table":
            assert out.table is not None
            if not filters.table_ok(out.table):
                continue
        elif out.kind == "truncates":
            batch = _truncates_for(batch, filters)
        elif out.kind == "messages" and filters.tables:
            continue
        mask = filters.mask(batch) if "_commit_lsn" in batch.schema.names else None
        chunk.outputs += [replace(out, batch=part)
                          for part in (_select(batch, mask.to_pylist()) if mask is not None else [batch])
                          if part.num_rows]
    chunk.max_commit_lsn = max(commits) if commits else None
    return chunk


def _select(batch: pa.RecordBatch, keep: list[bool]) -> list[pa.RecordBatch]:
    """The kept rows as zero-copy slices, one per run of kept rows. (``filter`` would copy,
    and pyarrow has no take kernel for view arrays.) Filters by LSN and limits keep one
    run per batch, since a batch's rows are in commit order."""
    parts = []
    start = None
    for i, k in enumerate([*keep, False]):
        if k and start is None:
            start = i
        elif not k and start is not None:
            parts.append(batch.slice(start, i - start))
            start = None
    return parts


def _truncates_for(batch: pa.RecordBatch, filters: Filters) -> pa.RecordBatch:
    """Truncates that touch a selected table (with only those tables in ``relations``)."""
    if not filters.tables:
        return batch
    rels = batch.column("relations").to_pylist()
    kept = [[r for r in rs if filters.table_ok(r)] for rs in rels]
    keep = pa.array([bool(k) for k in kept])
    cols = [pa.array(kept, batch.schema.field("relations").type) if n == "relations" else c
            for n, c in zip(batch.schema.names, batch.columns)]
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema).filter(keep)


def limit_chunk(chunk: Chunk, remaining: int) -> tuple[Chunk, int]:
    """The first ``remaining`` changes of the chunk in the order they are written (the
    crates' renderer's); returns how many."""
    kinds: tuple[OutputKind, ...] = ("table", "truncates", "messages")
    count, cut = first_changes(chunk.batches("table"), chunk.batches("truncates"), chunk.batches("messages"),
                               remaining)
    if cut is None:
        return chunk, count
    masks = {kind: iter(masks) for kind, masks in zip(kinds, cut)}
    outputs: list[Output] = []
    for out in chunk.outputs:
        if out.kind == "transactions":
            outputs.append(out)
        else:
            outputs += (replace(out, batch=part) for part in _select(out.batch, next(masks[out.kind])))
    return Chunk(outputs, chunk.max_commit_lsn), remaining


