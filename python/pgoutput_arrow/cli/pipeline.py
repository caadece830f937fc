"""The one loop of ``pgoutput-dump``: a source yields decoded batches in groups of whole
committed transactions (a capture, or a live slot), the filters keep the tables, LSN range
and number of changes asked for, and the sinks print (``pretty``, ``jsonl``), store
(``parquet``, ``arrow``, ``delta``, ``iceberg``) or count (``--stats``) them. A live group
is acknowledged to the server once every sink made it durable."""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from typing import IO, Protocol

from .arguments import output_format
from .capture_source import CaptureSource
from .lake_output import LakeOutput
from .file_sinks import FileSink, LiveFileSink
from .filters import Chunk, Filters, filter_chunk, limit_chunk
from .live_source import LiveSource
from .render import TextSink
from .stats import StatsSink

__all__ = ["run", "Sink"]


class Sink(Protocol):
    def write(self, chunk: Chunk, end_lsn: int) -> None:
        """Takes one group; ``end_lsn`` is where it ends when it is to be acknowledged
        (0: it is not, being cut short by ``--limit`` or from a capture)."""

    def sync(self) -> None:
        """Makes what was written durable, before the group is acknowledged."""

    def finish(self) -> None:
        """The end: writes what is still held."""

    def close(self) -> None:
        """Releases what the sink holds, after an error too."""


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """Runs the command of ``args`` (from :func:`~.arguments.build_parser`), writing text to
    ``out`` (default stdout). Returns the exit status."""
    out = out or sys.stdout
    fmt = output_format(args, out)
    live = args.dsn is not None

    sinks: list[Sink] = []
    files: FileSink | LiveFileSink | None = None
    resumable: LiveFileSink | LakeOutput | None = None  # where a live restart resumes
    source: CaptureSource | LiveSource
    try:
        if live:
            # The output directory first: its checkpoint says where to resume.
            if fmt in ("parquet", "arrow"):
                files = resumable = LiveFileSink(args.output, fmt)
                sinks.append(files)
            elif fmt in ("delta", "iceberg"):  # resumes after what each lake table holds
                resumable = LakeOutput(args, live=True)
                sinks.append(resumable)
            source = LiveSource(args, files.checkpoint if isinstance(files, LiveFileSink) else None,
                                linger=args.commit_interval if sinks else 0.0, files=resumable)
        else:
            source = CaptureSource(args)
            if fmt in ("parquet", "arrow"):
                files = FileSink(args.output, fmt, args.rows_per_file)
                sinks.append(files)
            elif fmt in ("delta", "iceberg"):
                sinks.append(LakeOutput(args, live=False))
        stats = StatsSink() if args.stats else None
        if stats is not None:
            sinks.append(stats)
        elif not sinks:
            sinks.append(TextSink(out, fmt))
        _drain(source, Filters(args.table, args.from_lsn, args.to_lsn), sinks, args)
        for sink in sinks:
            sink.finish()
    finally:
        for sink in sinks:
            sink.close()
    if stats is not None:
        stats.report(out)
        if files is not None:
            out.write(f"{len(files.files)} files written under {args.output}\n")
    return 0


def _drain(source: CaptureSource | LiveSource, filters: Filters, sinks: list[Sink],
           args: argparse.Namespace) -> None:
    remaining: int | None = args.limit
    with source, closing(source.groups()) as groups:
        for outputs, end_lsn in groups:
            chunk = filter_chunk(outputs, filters)
            complete = True
            if remaining is not None:
                chunk, n = limit_chunk(chunk, remaining)
                remaining -= n
                complete = remaining > 0
            ack = end_lsn if end_lsn is not None and complete else None
            for sink in sinks:
                sink.write(chunk, ack or 0)
            if ack is not None:
                for sink in sinks:
                    sink.sync()  # durable: files + checkpoint, or stdout flushed (and fsynced)
                source.ack(ack)
            if remaining == 0:
                break
            # Reading stops after --to-lsn.
            if args.to_lsn is not None and chunk.max_commit_lsn is not None \
                    and chunk.max_commit_lsn > args.to_lsn:
                break
            # Not held while the source makes the next group: one group at a time in memory.
            del outputs, chunk
