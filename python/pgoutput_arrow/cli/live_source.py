"""The live source: a logical replication slot streamed as the changes happen, in groups
of whole committed transactions, each acknowledged once the sinks made it durable.

This is the one module of the CLI that streams with :mod:`pgoutput_arrow.live` (the
flags of its options come from their one table, :class:`pgoutput_arrow.live.StreamOptions`).

SIGINT / SIGTERM stop after the group being written (it is acknowledged) and exit 0; a
second one stops at once.

Restarted with the same command (a supervisor's restart), ``--create-slot`` reuses the slot
when it exists (a logical pgoutput slot of this database, checked before streaming), and
``--snapshot`` takes the snapshot only when the output (``--output``: Parquet, Arrow or
Delta, Iceberg) does not hold a finished one; one cut short is discarded and taken again with a new
slot. A slot this run created is dropped again when the run fails before its output holds
anything that depends on it (the snapshot unfinished, or nothing written), so a failure
leaves no slot holding WAL behind.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Generator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Protocol

from ..decoding import Output
from .._internal import lsn_to_str
from ..live import LiveStream, stream
from ..exceptions import SlotInvalidated, SlotNotFound
from ..live.options import flagged
from ..live.slot_guard import RELEASE_WAIT_S, drop_slot, drop_unfinished_slot, invalidation_message, slot_status
from .arguments import publications
from .capture_source import decoder_options
from .progress import Progress, nbytes, si

__all__ = ["LiveSource", "ResumableOutput"]


class ResumableOutput(Protocol):
    """An output that says where a restart resumes (``--output`` of Parquet, Arrow or
    Delta, Iceberg): what it holds, and the initial snapshot it holds or was taking."""

    root: Path
    #: Nonzero when the output holds changes already.
    checkpoint: int
    #: What :meth:`discard_snapshot` counts ("files", "Delta tables", "Iceberg tables").
    DISCARDS: str

    def snapshot_record(self) -> dict[str, object] | None: ...

    def begin_snapshot(self, slot: str, lsn: int | None) -> None: ...

    def discard_snapshot(self) -> int: ...

    def written(self) -> bool: ...

    #: The online snapshot's progress it holds (None: none), and whether this run takes one.
    online_state: dict[str, Any] | None
    online: bool


class LiveSource:
    """``--dsn``/``--slot``: streams from ``start_lsn`` (the output directory's checkpoint)
    or ``--start-lsn``, whichever is later; ``linger`` gathers up to that many seconds of
    transactions per group."""

    #: Groups are acknowledged to the server once the sinks made them durable.
    acknowledges = True

    def __init__(self, args: argparse.Namespace, start_lsn: int | None, linger: float,
                 files: ResumableOutput | None = None) -> None:
        publication, create = publications(args)
        snapshot = bool(args.snapshot) and self._needs_snapshot(args, files)
        self.args = args
        self.files = files
        self.snapshot = snapshot
        #: Whether this run acknowledged a position (with a snapshot: its end, or later).
        self.acked = False
        #: Whether the slot was there before this run (None: not asked, nothing to drop).
        self.slot_existed: bool | None = None
        starts = [x for x in (start_lsn, args.start_lsn) if x]
        # The options of stream() that are flags (their one table: StreamOptions), as given.
        options = {f.name: getattr(args, f.name) for f, _ in flagged()}
        options["snapshot"] = snapshot
        if args.online_snapshot and files is not None:
            # Where the online snapshot stands: kept with the output's checkpoint.
            options["snapshot_state"] = files.online_state
            files.online = True
        if snapshot and files is not None:
            files.begin_snapshot(args.slot, None)
            options["on_snapshot"] = files.begin_snapshot
        self.stream: LiveStream = stream(
            args.dsn, slot=args.slot, publication=publication, create_publication=create,
            start_lsn=max(starts) if starts else None, **options, **decoder_options(args))
        self.linger = linger
        self.progress = Progress(args.progress, interval=0.5, delay=0.0)
        self.rows = 0
        self.signals = 0
        self.old_handlers: dict[int, Any] = {}

    @staticmethod
    def _needs_snapshot(args: argparse.Namespace, files: ResumableOutput | None) -> bool:
        """With ``--output``, whether the snapshot is still to be taken: not when the
        directory holds a complete one; a snapshot a kill cut short is deleted first, with its
        slot (if it never advanced), since its exported snapshot died with the process."""
        if files is None:
            return True
        record = files.snapshot_record()
        if record is None:
            if files.checkpoint:
                raise OSError(f"{files.root} holds changes streamed without a snapshot: "
                              "--snapshot needs an empty directory")
            return True
        slot = str(record["slot"])
        if slot != args.slot:
            raise OSError(f"{files.root} holds the snapshot of slot {slot}, not of --slot {args.slot}")
        if record["done"]:
            return False
        lsn = record["lsn"]
        dropped = drop_unfinished_slot(args.dsn, slot, lsn if isinstance(lsn, int) else None,
                                       args.connect_timeout)
        removed = files.discard_snapshot()
        where = f" at {lsn_to_str(lsn)}" if isinstance(lsn, int) else ""
        sys.stderr.write(f"pgoutput-dump: the snapshot of slot {slot}{where} was interrupted and its "
                         f"exported snapshot ended with that process: starting it over ({removed} {files.DISCARDS} "
                         f"deleted{', slot dropped' if dropped else ''})\n")
        return True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals > 1:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.stream.stop()

    def __enter__(self) -> LiveSource:
        self.old_handlers = {s: signal.signal(s, self._on_signal)
                             for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.args.create_slot and not self.args.temporary_slot:
                self.slot_existed = bool(slot_status(self.args.dsn, self.args.slot,
                                                     self.args.connect_timeout))
                if not self.slot_existed and not self.snapshot and self.files is not None \
                        and self.files.checkpoint:
                    # The output holds changes of a slot that is gone: a new one would start
                    # at the current WAL position and skip the changes in between.
                    raise SlotInvalidated(invalidation_message(self.args.slot, "does not exist",
                                                               None))
            self.stream.__enter__()
        except BaseException as e:
            try:
                if isinstance(e, Exception):  # the stream closed itself: its slot may go
                    self._drop_slot_of_failed_run()
            finally:
                self._restore()
            raise
        return self

    def _restore(self) -> None:
        for s, handler in self.old_handlers.items():
            signal.signal(s, handler)
        self.old_handlers = {}

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.stream.__exit__(kind, value, tb)
            if kind is not None and issubclass(kind, Exception):
                self._drop_slot_of_failed_run()
        finally:
            self._restore()
            self.progress.close()

    def _drop_slot_of_failed_run(self) -> None:
        """After a failure: drops the slot this run created when nothing kept depends on it
        (its snapshot unfinished, or nothing written), so it does not hold WAL forever. A
        slot that was there before, or that the output resumes from, stays."""
        if self.slot_existed is not False:
            return
        # Acknowledged: the slot moved with the output. Written without a snapshot: the output
        # holds changes a new slot would not send again. An unfinished snapshot is taken
        # again by the next run (with a new slot).
        if self.acked or (self.files is not None and self.files.written() and not self.snapshot):
            return
        try:  # our walsender may still be going away
            drop_slot(self.args.dsn, self.args.slot, self.args.connect_timeout, wait=RELEASE_WAIT_S)
        except SlotNotFound:
            return
        sys.stderr.write(f'pgoutput-dump: dropped replication slot "{self.args.slot}", '
                         "created by this run, which failed before its output depended on it\n")

    def groups(self) -> Generator[tuple[list[Output], int | None], None, None]:
        """(batches of whole committed transactions, the LSN to acknowledge once they are
        durable)."""
        for batches, ack_lsn in self.stream.groups(linger=self.linger):
            states = [b.snapshot_state for b in batches if b.snapshot_state is not None]
            if states and self.files is not None:
                # Stored with this group (the checkpoint, or once the lake committed it).
                self.files.online_state = dict(states[-1])
            yield batches, ack_lsn
            self.rows += sum(b.num_rows for b in batches)
            self._update()

    def ack(self, lsn: int) -> None:
        self.stream.ack(lsn)
        self.acked = self.acked or lsn > 0

    def _update(self) -> None:
        """``lag 1.2 MB  35.1k msg/s  4.2 MB/s  rows 120k  confirmed 0/16B3748``."""
        if not self.progress.due():
            return
        st = self.stream.stats()
        self.progress.show(
            f"lag {nbytes(st.lag_bytes)}  {si(st.messages_per_s)} msg/s  "
            f"{nbytes(st.bytes_per_s)}/s  rows {si(self.rows)}  "
            f"confirmed {lsn_to_str(st.confirmed_lsn)}"
            + (f"  reconnects {st.reconnects}" if st.reconnects else ""))
