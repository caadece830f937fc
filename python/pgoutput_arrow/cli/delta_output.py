"""``--format delta --output DIR``: the pipeline's sink around
:class:`pgoutput_arrow.sinks.DeltaSink` (replicas and change logs in Delta Lake).

Live, each group (``--commit-interval`` seconds of whole transactions) is one Delta commit
per table, made when the pipeline syncs, before the group is acknowledged. From a capture, a
commit is made once about ``--rows-per-file`` changes are held, and at the end.
"""

from __future__ import annotations

import argparse

from .filters import Chunk

__all__ = ["DeltaOutput"]


class DeltaOutput:
    def __init__(self, args: argparse.Namespace, live: bool) -> None:
        from ..sinks import DeltaSink

        self.live = live
        self.sink = DeltaSink(
            str(args.output), app_id=args.app_id or (args.slot if live else "capture"),
            replica=not args.change_log_only, change_log=args.change_log or args.change_log_only,
            append_only=args.append_only, drop_columns=args.drop_columns,
            max_rows=args.rows_per_file, max_seconds=None)

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        for name, _version, batch in chunk.tables:
            self.sink.add("table", name, batch)
        for batch in chunk.truncates:
            self.sink.add("truncates", None, batch)
        if not self.live and self.sink.due():
            self.sink.commit()

    def sync(self) -> None:
        self.sink.commit()

    def finish(self) -> None:
        self.sink.commit()

    def close(self) -> None:
        self.sink.close()
