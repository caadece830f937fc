"""The capture source: a capture file (or an Arrow IPC stream on stdin) decoded batch by
batch, in groups of whole committed transactions."""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Generator
from types import TracebackType
from typing import Any, TypeVar

from ..decoding import Changes, Decoder, Output, OutputKind
from ..capture import Capture, capture_table, open_capture, open_stream, out_of_order_hint
from .arguments import UsageError
from .progress import Progress, si

__all__ = ["CaptureSource", "decoder_options"]

T = TypeVar("T")


def decoder_options(args: argparse.Namespace) -> dict[str, Any]:
    """The decoding options of the command line, as :class:`pgoutput_arrow.Decoder` takes them."""
    return {
        "special_values": args.special_values,
        "views": args.views and not args.no_views,
        "interval": args.interval,
        "uuid": args.uuid,
        "time": args.time,
        "datetime_range": args.datetime_range,
        "memory_limit": args.memory_limit,
        "spill_dir": args.spill_dir,
    }


class CaptureSource:
    """Decodes the capture one batch of messages at a time (65536 rows from Parquet and CSV,
    the file's own batches from Arrow IPC), flushing the decoder after each, so that each
    group holds the transactions committed in it and memory holds one group at a time
    (and the messages of transactions still open). With ``--any-order``, the whole capture
    at once, rebuilt in commit order (``Decoder.feed_rebuilt``)."""

    #: A capture is not acknowledged to anyone.
    acknowledges = False

    def __init__(self, args: argparse.Namespace) -> None:
        self.any_order: bool = args.any_order
        if args.input == "-":
            if sys.stdin.isatty():
                raise UsageError("input is - but stdin is a terminal: pipe an Arrow IPC stream in")
            self.capture: Capture = open_stream(sys.stdin.buffer, xid=self.any_order)
        else:
            self.capture = open_capture(args.input, xid=self.any_order)
        # Only a capture can have been printed under other settings: live streams pin them.
        self.options = {**decoder_options(args), "date_order": args.date_order,
                        "timezone": args.timezone}
        try:
            Decoder(**self.options)  # an unknown --timezone is a usage error, before any reading
        except ValueError as e:
            raise UsageError(str(e)) from None
        self.progress = Progress(args.progress)
        self.done = 0

    def __enter__(self) -> CaptureSource:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.close()

    def groups(self) -> Generator[tuple[list[Output], int | None], None, None]:
        """(batches of whole committed transactions, None: nothing to acknowledge). The
        capture is read and decoded one group ahead, in a thread, while the caller writes
        the group before: both release the GIL, so reading and decoding overlap with
        rendering or writing on another core."""
        return _ahead(self._decoded())

    def _decoded(self) -> Generator[tuple[list[Output], int | None], None, None]:
        if self.any_order:
            yield from self._rebuilt()
            return
        with out_of_order_hint("--any-order"):
            yield from self._in_order()

    def _rebuilt(self) -> Generator[tuple[list[Output], int | None], None, None]:
        decoder = Decoder(**self.options)
        table = capture_table(self.capture.reader.read_all())
        decoder.feed_rebuilt(table, table)
        self._update(table.num_rows)
        del table
        rest = _outputs_of(decoder.finish())
        if rest:
            yield rest, None

    def _in_order(self) -> Generator[tuple[list[Output], int | None], None, None]:
        decoder = Decoder(**self.options)
        for batch in self.capture.reader:
            decoder.feed_batch(batch)
            decoder.flush()
            self._update(batch.num_rows)
            outputs = decoder.take()
            if outputs:
                yield outputs, None
            # Not held while the next batch is decoded: memory holds one group at a time.
            del outputs, batch
        rest = _outputs_of(decoder.finish())
        if rest:
            yield rest, None

    def ack(self, lsn: int) -> None:
        pass

    def _update(self, n: int) -> None:
        """``\\r 42% 1.2M/2.9M messages 350k/s``."""
        self.done += n
        if not self.progress.due():
            return
        rate = self.done / max(time.monotonic() - self.progress.start, 1e-9)
        total = self.capture.num_rows
        if total:
            self.progress.show(f"{100.0 * self.done / total:5.1f}% {si(self.done)}/{si(total)} "
                               f"messages {si(rate)}/s")
        else:
            self.progress.show(f"{si(self.done)} messages {si(rate)}/s")


def _ahead(items: Generator[T, None, None]) -> Generator[T, None, None]:
    """``items``, made one ahead in a thread of their own: what it raises is raised here;
    closed early (``--limit``), the thread stops after the item it is making."""
    handoff: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                handoff.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
                del item
            put((False, None))
        except BaseException as e:  # noqa: BLE001  (handed to the consumer, raised there)
            put((False, e))
        finally:
            items.close()

    thread = threading.Thread(target=make, name="pgoutput-dump read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            more, item = handoff.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
            del item
    finally:
        stop.set()
        thread.join()


def _outputs_of(changes: Changes) -> list[Output]:
    out: list[Output] = []
    for name, versions in changes.table_versions.items():
        for i, table in enumerate(versions, 1):
            version = int((table.schema.metadata or {}).get(b"pg.version", i))
            out += [Output("table", name, version, b) for b in table.to_batches() if b.num_rows]
    kind: OutputKind
    for kind in ("truncates", "messages", "transactions"):
        out += [Output(kind, None, None, b) for b in getattr(changes, kind).to_batches()
                if b.num_rows]
    return out
