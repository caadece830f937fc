"""``pgoutput-dump --dsn ... --slot ...``: the live source of the CLI, and its durable sink.

Every output format works live. What is acknowledged to the server, and when:

* ``--format parquet|arrow --output DIR`` (exactly once, across kill -9): each group of whole
  transactions is written as one file per table (hidden ``.name.tmp``, fsync, rename, fsync of
  the directory), then ``DIR/_checkpoint.json`` is replaced atomically with the group's end
  LSN, and only then is that LSN acknowledged. On start the checkpoint says where the output
  ends: ``.tmp`` leftovers are deleted, so are data files of a group that was cut short
  (their first commit LSN is at or after the checkpoint), and streaming resumes right after
  the checkpoint, so no change is lost or written twice. Every file of a table directory
  has the same schema (``_files.TableDirectory``): when a group's rows grow it, the rewrite
  of the files already there is journaled before the group is written and done after its
  checkpoint; on start, a journaled rewrite is finished if its group counts, else dropped
  (no file was touched), so the files never hold a schema ahead of the checkpoint.
* ``pretty`` / ``jsonl`` on stdout, ``--stats``: acknowledged once written and flushed, and,
  when stdout is a regular file (``> changes.jsonl``), fsynced: the acknowledged position is
  then on disk, as a walreceiver's flushed position is. A pipe cannot be exactly-once: what
  the reader had not consumed when either side died is either lost to it (already
  acknowledged) or printed again. (A file is at least once: lines written after the last
  acknowledgement are written again by the next run.)

SIGINT / SIGTERM stop after the group being written, acknowledge it, and exit 0.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from ._files import TableDirectory, storable, write_atomically
from .live import LiveStream, lsn_to_str, parse_lsn

__all__ = ["add_arguments", "run_live", "LiveFileSink", "read_checkpoint"]

CHECKPOINT = "_checkpoint.json"
_DATA_FILE = re.compile(r"^([0-9A-F]{16})-([0-9A-F]{16})(-\d+)?\.(parquet|arrow)$")


def _lsn_arg(text: str) -> int:
    try:
        return parse_lsn(text) if "/" in text else int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an LSN: {text!r} (expected X/Y)") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The live source's options (used when --dsn is given instead of a capture)."""
    g = p.add_argument_group(
        "live source (streaming replication; instead of CAPTURE)",
        "Stream a logical replication slot (plugin pgoutput) as the changes happen.")
    g.add_argument("--dsn", metavar="DSN",
                   help="libpq connection string or URI (host, port, user, password or "
                   "PGPASSWORD/passfile, sslmode up to verify-full, sslrootcert, ...)")
    g.add_argument("--slot", metavar="NAME", help="the logical replication slot")
    g.add_argument("--create-slot", action="store_true",
                   help="create the slot if it does not exist")
    g.add_argument("--temporary", action="store_true",
                   help="with --create-slot: a temporary slot, dropped when the connection "
                   "ends (no resume after a disconnect)")
    g.add_argument("--two-phase", action="store_true",
                   help="decode prepared transactions (the slot is created with two_phase)")
    g.add_argument("--publication", metavar="NAME", action="append",
                   help="publication to stream (repeat for several; default with "
                   "--create-publication/--all-tables: the slot's name)")
    g.add_argument("--create-publication", metavar="TABLE", nargs="+",
                   help="create the publication for these tables if it does not exist")
    g.add_argument("--all-tables", action="store_true",
                   help="create the publication FOR ALL TABLES if it does not exist")
    g.add_argument("--proto-version", type=int, choices=(1, 2, 3, 4),
                   help="pgoutput protocol (default: the highest the server speaks)")
    g.add_argument("--binary", action="store_true", help="values in binary send format")
    g.add_argument("--streaming", choices=("on", "parallel", "off"),
                   help="stream in-progress transactions (default: on from protocol 2)")
    g.add_argument("--messages", action="store_true",
                   help="include logical decoding messages (pg_logical_emit_message)")
    g.add_argument("--origin", choices=("any", "none"), help="changes of which origin")
    g.add_argument("--start-lsn", metavar="X/Y", type=_lsn_arg,
                   help="start at this LSN (never before the slot's confirmed position)")
    g.add_argument("--status-interval", metavar="S", type=float, default=10.0,
                   help="seconds between standby status updates (default 10)")
    g.add_argument("--connect-timeout", metavar="S", type=float, default=10.0,
                   help="seconds to wait for a connection (default 10)")
    g.add_argument("--reconnect-attempts", metavar="N", type=int, default=8,
                   help="reconnect attempts after the connection is lost (default 8)")
    g.add_argument("--reconnect-timeout", metavar="S", type=float, default=120.0,
                   help="give up reconnecting after S seconds (default 120)")
    g.add_argument("--commit-interval", metavar="S", type=float, default=1.0,
                   help="with --output: gather up to S seconds of transactions per file "
                   "group (default 1)")
    g.add_argument("--idle-timeout", metavar="S", type=float,
                   help="stop after S seconds without changes")
    g.add_argument("--stop-after", metavar="S", type=float, help="stop after S seconds")


def read_checkpoint(root: Path) -> int | None:
    """The end LSN of what ``DIR`` holds completely (None: no live output there yet)."""
    try:
        data = json.loads((root / CHECKPOINT).read_text())
    except FileNotFoundError:
        return None
    return parse_lsn(data["lsn"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LiveFileSink:
    """Per-table Parquet or Arrow files, one per table and group, named by the commit LSNs of
    their first and last rows, plus the checkpoint that makes a group count."""

    def __init__(self, root: Path, fmt: str) -> None:
        self.root = root
        self.fmt = fmt
        self.ext = "parquet" if fmt == "parquet" else "arrow"
        self.files: list[Path] = []
        root.mkdir(parents=True, exist_ok=True)
        # One writer per directory: a second one would interleave groups.
        self._lock = open(root / ".lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(f"{root} is being written by another pgoutput-dump") from None
        self.checkpoint = self._recover()
        # Every table directory under one schema: a rewrite a kill interrupted is finished
        # if its group counts, else forgotten (the group is streamed again).
        self.dirs = {d.name: TableDirectory(d, fmt, self.checkpoint)
                     for d in sorted(root.iterdir())
                     if d.is_dir() and not d.name.startswith(("_", "."))}

    def _data_files(self) -> list[Path]:
        return [f for d in self.root.iterdir() if d.is_dir() for f in d.iterdir()
                if _DATA_FILE.match(f.name)]

    def _recover(self) -> int:
        """Deletes what a killed run left: ``.tmp`` files, and the files of a group whose
        checkpoint was never written. Returns the checkpoint LSN (0: empty directory)."""
        for d in [self.root] + [d for d in self.root.iterdir() if d.is_dir()]:
            for f in d.iterdir():
                if f.name.endswith(".tmp"):
                    f.unlink()
        checkpoint = read_checkpoint(self.root)
        files = self._data_files()
        if checkpoint is None:
            if files:
                raise OSError(f"{self.root} holds data files but no {CHECKPOINT}: it was not "
                              "written by a live pgoutput-dump; use an empty directory")
            self._write_checkpoint(0)
            return 0
        removed = False
        for f in files:
            first = int(_DATA_FILE.match(f.name).group(1), 16)  # type: ignore[union-attr]
            if first >= checkpoint:  # written after the last complete group: not counted
                f.unlink()
                removed = True
        if removed:
            for d in {f.parent for f in files}:
                _fsync_dir(d)
        return checkpoint

    def _write_checkpoint(self, lsn: int) -> None:
        path = self.root / CHECKPOINT
        tmp = self.root / f".{CHECKPOINT}.tmp"
        with open(tmp, "w") as f:
            json.dump({"lsn": lsn_to_str(lsn), "written_at": time.time()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.root)

    def write_group(self, chunk: Any, end_lsn: int) -> None:
        """Writes every table of the group, then moves the checkpoint to ``end_lsn``."""
        parts: dict[str, list[pa.RecordBatch]] = {}
        for name, _version, b in chunk.tables:
            if b.num_rows:
                parts.setdefault(name, []).append(b)
        for kind in ("truncates", "messages", "transactions"):
            for b in getattr(chunk, kind):
                parts.setdefault(f"_{kind}", []).append(b)
        for key, batches in parts.items():
            if key.startswith("_"):
                tables = [storable(pa.Table.from_batches(same), self.fmt)
                          for same in _by_schema(batches)]
            else:
                # One file under the directory's schema, which may grow: the rewrite of
                # the files already there is journaled now and done once the group counts.
                directory = self.dirs.get(key)
                if directory is None:
                    directory = self.dirs[key] = TableDirectory(self.root / key, self.fmt)
                tables = [directory.prepare(batches, end_lsn)]
            for n, table in enumerate(tables):
                first, last = _lsn_range(table)
                directory_path = self.root / key
                directory_path.mkdir(exist_ok=True)
                suffix = f"-{n}" if n else ""
                path = directory_path / f"{first:016X}-{last:016X}{suffix}.{self.ext}"
                write_atomically(table, path, self.fmt)
                self.files.append(path)
        if end_lsn > self.checkpoint:
            self._write_checkpoint(end_lsn)
            self.checkpoint = end_lsn
        for directory in self.dirs.values():
            directory.finish()

    def close(self) -> None:
        self._lock.close()


def _by_schema(batches: list[pa.RecordBatch]) -> list[list[pa.RecordBatch]]:
    """The batches grouped by schema, in order of first appearance."""
    groups: list[list[pa.RecordBatch]] = []
    for b in batches:
        for same in groups:
            if same[0].schema.equals(b.schema):
                same.append(b)
                break
        else:
            groups.append([b])
    return groups


def _lsn_range(table: pa.Table) -> tuple[int, int]:
    """The smallest and largest commit LSN of the rows (a non-transactional message's own
    LSN where it has none)."""
    names = table.schema.names
    col = next((c for c in ("_commit_lsn", "commit_lsn") if c in names), None)
    if col is None:
        return 0, 0
    values = table.column(col)
    if "_lsn" in names and values.null_count:
        values = pc.coalesce(values, table.column("_lsn").cast(values.type))
    mm = pc.min_max(values)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return (0, 0) if lo is None else (int(lo), int(hi))


class _LiveProgress:
    """``lag 1.2 MB  35.1k msg/s  4.2 MB/s  rows 120k`` on stderr when it is a terminal."""

    def __init__(self, enabled: bool | None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.last = 0.0
        self.shown = False

    def update(self, s: LiveStream, rows: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < 0.5:
            return
        self.last = now
        st = s.stats()
        text = (f"lag {_bytes(st.lag_bytes)}  {_si(st.messages_per_s)} msg/s  "
                f"{_bytes(st.bytes_per_s)}/s  rows {_si(rows)}  "
                f"confirmed {lsn_to_str(st.confirmed_lsn)}"
                + (f"  reconnects {st.reconnects}" if st.reconnects else ""))
        sys.stderr.write(f"\r{text}\x1b[K")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _si(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _publications(args: argparse.Namespace) -> tuple[list[str] | None, Any]:
    """(publications to stream, publication to create: tables, "ALL" or None)."""
    create_pub: Any = None
    if args.all_tables:
        create_pub = "ALL"
    elif args.create_publication:
        create_pub = args.create_publication
    return args.publication or (None if create_pub is None else [args.slot]), create_pub


def _check_arguments(args: argparse.Namespace, fmt: str) -> None:
    """The option combinations argparse cannot check by itself: usage errors (exit 2),
    raised before anything is connected to or created."""
    from .cli import UsageError

    if fmt in ("parquet", "arrow") and args.output is None:
        raise UsageError(f"--format {fmt} needs --output DIR")
    if args.output is not None and fmt not in ("parquet", "arrow"):
        raise UsageError("--output is for --format parquet or arrow")
    if not args.slot:
        raise UsageError("--dsn needs --slot NAME")
    if _publications(args)[0] is None:
        raise UsageError("--dsn needs --publication NAME (or --create-publication TABLE ... "
                         "or --all-tables)")
    if args.temporary and not args.create_slot:
        raise UsageError("--temporary goes with --create-slot")


def open_stream(args: argparse.Namespace, start_lsn: int | None) -> LiveStream:
    publication, create_pub = _publications(args)
    decoder_options: dict[str, Any] = {
        "special_values": args.special_values,
        "views": not args.no_views,
        "memory_limit": args.memory_limit,
        "spill_dir": args.spill_dir,
    }
    starts = [x for x in (start_lsn, args.start_lsn) if x]
    return LiveStream(
        args.dsn, slot=args.slot, publication=publication, create_slot=args.create_slot,
        temporary_slot=args.temporary, two_phase=args.two_phase,
        create_publication=create_pub, proto_version=args.proto_version, binary=args.binary,
        streaming=args.streaming, messages=args.messages, origin=args.origin,
        start_lsn=max(starts) if starts else None, status_interval=args.status_interval,
        connect_timeout=args.connect_timeout, reconnect_attempts=args.reconnect_attempts,
        reconnect_timeout=args.reconnect_timeout, idle_timeout=args.idle_timeout,
        stop_after=args.stop_after, **decoder_options)


def _is_regular_file(out: IO[str]) -> bool:
    """Whether ``out`` writes to a regular file (which fsync makes durable), not a pipe, a
    terminal or an in-memory stream."""
    try:
        return stat.S_ISREG(os.fstat(out.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def run_live(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    """The live branch of ``pgoutput-dump``: stream, write, acknowledge."""
    from . import Output
    from .cli import Filters, JsonlSink, PrettySink, StatsSink, filter_chunk, limit_chunk

    out = out or sys.stdout
    fmt = args.format or ("pretty" if out.isatty() else "jsonl")
    _check_arguments(args, fmt)

    file_sink = LiveFileSink(args.output, fmt) if fmt in ("parquet", "arrow") else None
    stats = StatsSink() if args.stats else None
    sink: Any = None
    if file_sink is None and stats is None:
        sink = PrettySink(out) if fmt == "pretty" else JsonlSink(out)
    fsync_out = sink is not None and _is_regular_file(out)
    filters = Filters(args.table, args.from_lsn, args.to_lsn)
    progress = _LiveProgress(args.progress)
    stream = open_stream(args, file_sink.checkpoint if file_sink else None)

    stopping = {"count": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        stopping["count"] += 1
        if stopping["count"] > 1:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        stream.stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    remaining = args.limit
    rows = 0
    try:
        with stream:
            linger = args.commit_interval if file_sink is not None else 0.0
            for batches, ack_lsn in stream.groups(linger=linger):
                outputs = [Output(b.kind, b.table, b.version, b.batch)  # type: ignore[arg-type]
                           for b in batches]
                chunk = filter_chunk(outputs, filters)
                complete = True
                if remaining is not None:
                    chunk, n = limit_chunk(chunk, remaining)
                    remaining -= n
                    complete = remaining > 0
                if file_sink is not None:
                    file_sink.write_group(chunk, ack_lsn if complete else 0)
                if sink is not None:
                    sink.write(chunk)
                    if isinstance(sink, PrettySink):
                        # A live group holds whole transactions: show the COMMIT line now
                        # rather than when the next transaction arrives.
                        lines: list[str] = []
                        sink._close_txn(lines)
                        if lines:
                            out.write("\n".join(lines) + "\n")
                    out.flush()
                    if fsync_out:  # acknowledged below: the lines must be on disk first
                        os.fsync(out.fileno())
                if stats is not None:
                    stats.write(chunk)
                rows += sum(b.num_rows for b in batches)
                if complete:
                    stream.ack(ack_lsn)  # durable: files + checkpoint, or stdout flushed
                    # (and fsynced when it is a file)
                progress.update(stream, rows)
                if remaining == 0:
                    break
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        progress.close()
        if file_sink is not None:
            file_sink.close()
    if sink is not None:
        sink.close()
    if stats is not None:
        stats.report(out)
    return 0

