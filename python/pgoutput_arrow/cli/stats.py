"""``--stats``: counts of changes per table and operation."""

from __future__ import annotations

from collections import Counter
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc

from .filters import Chunk

__all__ = ["StatsSink"]


class StatsSink:
    """Counts per table and operation."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        for out in chunk.tables:
            for op, n in zip(*_value_counts(out.batch.column("_op"))):
                self.counts[(out.name, op)] += n
        for b in chunk.batches("truncates"):
            for rels in b.column("relations").to_pylist():
                for rel in rels:
                    self.counts[(rel, "truncate")] += 1
        for b in chunk.batches("messages"):
            for prefix in b.column("prefix").to_pylist():
                self.counts[(f"message:{prefix}", "message")] += 1

    def sync(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass

    def report(self, stream: IO[str]) -> None:
        ops = ["insert", "update", "delete", "truncate", "message"]
        names = sorted({n for n, _ in self.counts})
        used = [o for o in ops if any(self.counts[(n, o)] for n in names)] or ops[:3]
        w = max([len("table"), len("total")] + [len(n) for n in names])
        widths = [max(len(o), 9) for o in used]
        header = f"{'table':<{w}}  " + "  ".join(f"{o:>{x}}" for o, x in zip(used, widths)) \
            + f"  {'total':>9}"
        lines = [header, "-" * len(header)]
        for n in names:
            row = [self.counts[(n, o)] for o in used]
            lines.append(f"{n:<{w}}  " + "  ".join(f"{c:>{x}}" for c, x in zip(row, widths))
                         + f"  {sum(row):>9}")
        tot = [sum(self.counts[(n, o)] for n in names) for o in used]
        lines.append(f"{'total':<{w}}  " + "  ".join(f"{c:>{x}}" for c, x in zip(tot, widths))
                     + f"  {sum(tot):>9}")
        stream.write("\n".join(lines) + "\n")


def _value_counts(arr: pa.Array) -> tuple[list[str], list[int]]:
    vc = pc.value_counts(arr)
    return vc.field("values").to_pylist(), vc.field("counts").to_pylist()
