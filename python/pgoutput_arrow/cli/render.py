"""The ``jsonl`` and ``pretty`` sinks: each group rendered by the crates
(:class:`pgoutput_arrow._internal.Renderer`, pgoutput-arrow's ``render`` module) straight
from the Arrow batches, and written as it goes."""

from __future__ import annotations

import io
import os
import stat
from typing import IO

from .._internal import Renderer
from .filters import Chunk

__all__ = ["TextSink"]


def _is_regular_file(out: IO[str]) -> bool:
    """Whether ``out`` writes to a regular file (which fsync makes durable), not a pipe, a
    terminal or an in-memory stream."""
    try:
        return stat.S_ISREG(os.fstat(out.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


class TextSink:
    """``jsonl`` (one JSON object per change) or ``pretty`` (BEGIN, aligned lines, COMMIT)
    on ``stream``.

    :meth:`sync` makes what was written durable before it is acknowledged: flushed, and
    when the stream is a regular file (``> changes.jsonl``), fsynced, as a walreceiver's
    flushed position is. A pipe cannot be exactly-once: what the reader had not consumed
    when either side died is either lost to it (already acknowledged) or printed again."""

    def __init__(self, stream: IO[str], fmt: str) -> None:
        self.stream = stream
        # The rendered bytes go to the binary layer under a text stream, not through str.
        self.binary: IO[bytes] | None = getattr(stream, "buffer", None)
        self.renderer = Renderer(fmt)
        self.fsync = _is_regular_file(stream)

    def _emit(self, data: bytes) -> None:
        if not data:
            return
        if self.binary is not None:
            self.binary.write(data)
        else:
            self.stream.write(data.decode())

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        # Written in pieces of about a megabyte as they are rendered: a group of a million
        # changes never sits in memory as text.
        self.renderer.render([(out.name, out.batch) for out in chunk.tables], chunk.batches("truncates"),
                             chunk.batches("messages"), self._emit)
        # A group holds whole transactions: the COMMIT line now, not when the next begins.
        self._emit(self.renderer.end_transaction())

    def sync(self) -> None:
        self.stream.flush()
        if self.fsync:
            os.fsync(self.stream.fileno())

    def finish(self) -> None:
        self.stream.flush()

    def close(self) -> None:
        pass
