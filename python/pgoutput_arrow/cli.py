"""``pgoutput-dump``: print or store the changes of a pgoutput capture.

The command is three parts, each replaceable: a *source* yields decoded batches in groups of
whole committed transactions (:class:`CaptureSource` decodes a capture file or an Arrow IPC
stream on stdin; a live replication source yields the same groups), *filters* keep the
tables and LSN range asked for, and a *sink* prints (``pretty``, ``jsonl``), stores
(``parquet``, ``arrow``) or counts (``--stats``) them.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from . import Changes, Decoder, Output, OutputKind, __version__
from ._files import TableDirectory, storable, write_atomically
from ._render import column_values, format_pretty, iso_timestamp
from ._internal import lsn_to_int, lsn_to_str
from .capture import Capture, open_capture, open_stream
from .exceptions import PgoutputError

PROG = "pgoutput-dump"

DESCRIPTION = """\
Decode a pgoutput capture and print its changes (one line each, in commit order), or store
them as Parquet or Arrow files, one directory per table.

A capture is what pg_logical_slot_get_binary_changes() returns (columns lsn, xid, data),
saved as Parquet, Arrow IPC or CSV; the format is recognised from the file's content."""

EPILOG = """\
examples:
  pgoutput-dump capture.parquet                          aligned lines, BEGIN/COMMIT shown
  pgoutput-dump capture.parquet --format jsonl | jq .    one JSON object per change
  pgoutput-dump capture.parquet --table 'public.order*' --from-lsn 0/16B3748 --limit 100
  pgoutput-dump capture.parquet --format parquet --output out/
                     writes out/public.orders/00000000016B3748-00000000016C0000.parquet ...
  pgoutput-dump capture.parquet --stats                  counts per table and operation
  some-producer | pgoutput-dump - --format jsonl         an Arrow IPC stream on stdin
  pgoutput-dump --dsn 'host=db user=repl dbname=shop' --slot shop --create-slot \\
      --create-publication public.orders --format parquet --output out/
                     streams the slot live (made with a publication for public.orders if
                     missing); files as above, acknowledged once durable; Ctrl-C stops

capturing with plain SQL (wal_level = logical):
  CREATE PUBLICATION pub FOR ALL TABLES;
  SELECT pg_create_logical_replication_slot('cap', 'pgoutput');
  -- run the workload, then:
  COPY (SELECT lsn, xid, data FROM pg_logical_slot_get_binary_changes('cap', NULL, NULL,
        'proto_version', '1', 'publication_names', 'pub')) TO '/tmp/capture.csv' (FORMAT csv);

jsonl objects have the keys op (insert, update, delete, truncate, message), schema, table,
lsn and commit_lsn ('X/Y'), commit_ts (ISO 8601, UTC), xid, new, old (the old key or row, when
the server sent one), unchanged (columns whose TOAST value an UPDATE left unchanged: null in
new, but not NULL). Values are JSON-safe: 64-bit integers and decimals as strings, bytes as
hex, NaN and Infinity as strings, dates and times ISO 8601.

exit status: 0 success, 1 unreadable input, decoding or connection error, or a missing
Python package (one line on stderr; --debug for the traceback), 2 usage error."""

_FORMATS = ("pretty", "jsonl", "parquet", "arrow")


class UsageError(Exception):
    """An argument combination argparse cannot check by itself (exit status 2)."""


def _lsn_arg(text: str) -> int:
    try:
        return lsn_to_int(text) if "/" in text else int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an LSN: {text!r} (expected X/Y as 16/B374D848, or an integer)"
        ) from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_source_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument(
        "-f", "--format", choices=_FORMATS, default=None,
        help="pretty: aligned lines with BEGIN/COMMIT (the default when stdout is a terminal); "
        "jsonl: one JSON object per change (the default otherwise); parquet, arrow: files "
        "under --output, one directory per table",
    )
    out.add_argument(
        "-o", "--output", metavar="DIR", type=Path,
        help="directory for --format parquet/arrow: DIR/schema.table/FIRST-LAST.parquet, named "
        "by the commit LSNs of the first and last rows (16 hex digits each, so names sort); "
        "truncates, messages and transactions go to DIR/_truncates, DIR/_messages, "
        "DIR/_transactions. Files appear atomically (written as hidden .tmp files, then "
        "renamed)",
    )
    out.add_argument(
        "--rows-per-file", metavar="N", type=_positive, default=1_000_000,
        help="with --output, start a new file of a table once it holds N rows or more; a "
        "transaction is never split across files (default 1000000)",
    )
    out.add_argument(
        "--stats", action="store_true",
        help="print counts per table and operation instead of the changes (after writing "
        "the files with --format parquet/arrow)",
    )
    flt = p.add_argument_group("filters")
    flt.add_argument(
        "-t", "--table", metavar="GLOB", action="append", default=[],
        help="only tables whose schema.table matches GLOB (fnmatch: *, ?, [abc]); repeat for "
        "several; messages are left out when given",
    )
    flt.add_argument(
        "--from-lsn", metavar="LSN", type=_lsn_arg,
        help="only transactions that commit at or after LSN (X/Y or an integer)",
    )
    flt.add_argument(
        "--to-lsn", metavar="LSN", type=_lsn_arg,
        help="only transactions that commit at or before LSN; reading stops after it",
    )
    flt.add_argument(
        "-n", "--limit", metavar="N", type=_positive,
        help="stop after N changes (after filtering)",
    )
    dec = p.add_argument_group("decoding")
    dec.add_argument(
        "--special-values", choices=("keep", "error", "null", "text"), default="keep",
        help="values PostgreSQL accepted that no Arrow value of the column's type can hold "
        "(time 24:00:00, NaN in numeric(p,s), timestamps beyond int64 microseconds, arrays "
        "whose lower bound is not 1): keep them (the default: jsonl and pretty print "
        "PostgreSQL's text in the value's place, Parquet/Arrow keep it in the _special "
        "column), fail, store NULL (the value is lost), or decode such columns as "
        "PostgreSQL's text; +-infinity dates and timestamps are kept as the type's extreme "
        "values and printed as infinity",
    )
    dec.add_argument(
        "--no-views", action="store_true",
        help="copy text and binary values into plain string/binary columns instead of view "
        "arrays pointing into the messages",
    )
    dec.add_argument(
        "--memory-limit", metavar="BYTES", type=_positive,
        help="buffered changes of open transactions beyond BYTES spill to disk",
    )
    dec.add_argument("--spill-dir", metavar="DIR", help="where to spill (default: a temp dir)")
    misc = p.add_argument_group("other")
    misc.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="a progress line on stderr (default: when stderr is a terminal and the input "
        "takes more than a second)",
    )
    misc.add_argument("--debug", action="store_true", help="show the traceback of an error")
    misc.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _add_source_arguments(p: argparse.ArgumentParser) -> None:
    """Where the messages come from. A live source adds its options here (--dsn, --slot)
    and a branch to :func:`open_source`; it yields the same :class:`Chunk` groups."""
    p.add_argument(
        "input", metavar="CAPTURE", nargs="?",
        help="capture file (Parquet, Arrow IPC file or stream, CSV), or - for an Arrow IPC "
        "stream on stdin; or --dsn/--slot for a live replication slot",
    )
    from .live_cli import add_arguments as add_live_arguments

    add_live_arguments(p)


# --- sources ---------------------------------------------------------------------------


class ChangeSource(Protocol):
    """Decoded changes in groups of whole committed transactions, in commit order."""

    def chunks(self) -> Iterator[list[Output]]: ...


class Progress:
    """``\\r 42% 1.2M/2.9M messages 350k/s`` on stderr, only after the first second."""

    def __init__(self, total: int | None, enabled: bool | None) -> None:
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self.done = 0
        self.last = 0.0
        self.shown = False

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < 1.0 or now - self.last < 0.2:
            return
        self.last = now
        rate = self.done / elapsed
        if self.total:
            pct = 100.0 * self.done / self.total
            text = f"{pct:5.1f}% {_si(self.done)}/{_si(self.total)} messages {_si(rate)}/s"
        else:
            text = f"{_si(self.done)} messages {_si(rate)}/s"
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


@dataclass
class CaptureSource:
    """A capture decoded batch by batch: after each batch of messages the decoder is
    flushed, so each group holds every transaction committed in it."""

    capture: Capture
    options: dict[str, Any]
    progress: Progress

    def chunks(self) -> Iterator[list[Output]]:
        decoder = Decoder(**self.options)
        try:
            for batch in self.capture.reader:
                decoder.feed_batch(batch)
                decoder.flush()
                self.progress.update(batch.num_rows)
                outputs = decoder.take()
                if outputs:
                    yield outputs
            rest = _outputs_of(decoder.finish())
            if rest:
                yield rest
        finally:
            self.progress.close()


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


def open_source(args: argparse.Namespace) -> ChangeSource:
    options: dict[str, Any] = {
        "special_values": args.special_values,
        "views": not args.no_views,
        "memory_limit": args.memory_limit,
        "spill_dir": args.spill_dir,
    }
    if args.input == "-":
        if sys.stdin.isatty():
            raise UsageError("input is - but stdin is a terminal: pipe an Arrow IPC stream in")
        capture = open_stream(sys.stdin.buffer)
    else:
        capture = open_capture(args.input)
    return CaptureSource(capture, options, Progress(capture.num_rows, args.progress))


# --- filters -------------------------------------------------------------------------


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
    """One group of decoded, filtered batches."""

    tables: list[tuple[str, int, pa.RecordBatch]] = field(default_factory=list)
    truncates: list[pa.RecordBatch] = field(default_factory=list)
    messages: list[pa.RecordBatch] = field(default_factory=list)
    transactions: list[pa.RecordBatch] = field(default_factory=list)
    max_commit_lsn: int | None = None


def _to_int(v: Any) -> int | None:
    return None if v is None else int(v)


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
        for part in (_select(batch, mask.to_pylist()) if mask is not None else [batch]):
            if not part.num_rows:
                continue
            if out.kind == "table":
                chunk.tables.append((out.table or "", out.version or 0, part))
            else:
                getattr(chunk, out.kind).append(part)
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
    """The first ``remaining`` changes of the chunk in commit order; returns how many."""
    keys: list[tuple[int, int]] = []
    for _, _, b in chunk.tables:
        keys += zip(_ints(b, "_commit_lsn"), _ints(b, "_seq"))
    for b in chunk.truncates:
        keys += ((c, s) for c, s, r in zip(_ints(b, "_commit_lsn"), _ints(b, "_seq"),
                                           b.column("relations").to_pylist()) for _ in r)
    for b in chunk.messages:
        keys += zip(_message_keys(b), _ints(b, "_seq"))
    if len(keys) <= remaining:
        return chunk, len(keys)
    keys.sort()
    cut = keys[remaining - 1]

    def upto(b: pa.RecordBatch, commit: list[int]) -> pa.RecordBatch:
        seq = _ints(b, "_seq")
        return _select(b, [(c, s) <= cut for c, s in zip(commit, seq)])

    out = Chunk(max_commit_lsn=chunk.max_commit_lsn, transactions=chunk.transactions)
    out.tables = [(n, v, p) for n, v, b in chunk.tables for p in upto(b, _ints(b, "_commit_lsn"))]
    out.truncates = [p for b in chunk.truncates for p in upto(b, _ints(b, "_commit_lsn"))]
    out.messages = [p for b in chunk.messages for p in upto(b, _message_keys(b))]
    return out, remaining


def _ints(batch: pa.RecordBatch, name: str) -> list[int]:
    return [0 if v is None else int(v) for v in batch.column(name).to_pylist()]


def _message_keys(batch: pa.RecordBatch) -> list[int]:
    """Where a message sorts: its transaction's commit LSN, or its own LSN when it is not
    transactional."""
    commit = batch.column("_commit_lsn").to_pylist()
    own = batch.column("_lsn").to_pylist()
    return [int(c) if c is not None else int(o or 0) for c, o in zip(commit, own)]


# --- changes as rows -----------------------------------------------------------------

def _is_data_field(f: pa.Field) -> bool:
    """A published column, not one of the decoder's metadata columns (_op, _lsn, ...,
    _special): the decoder gives every published column its PostgreSQL type in the field
    metadata (the rule its unify_schemas uses), so a table's own column named _status or
    _seq is still printed, and a metadata column added later is not."""
    return b"pg.type_oid" in (f.metadata or {})


def _split_name(name: str) -> tuple[str, str]:
    schema, _, table = name.partition(".")
    return (schema, table) if table else ("", schema)


@dataclass
class Event:
    """One change, ready to print."""

    key: tuple[int, int]
    op: str
    name: str
    lsn: int | None
    commit_lsn: int | None
    commit_ts: int | None
    xid: int | None
    new: dict[str, Any] | None = None
    old: dict[str, Any] | None = None
    unchanged: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    return batch.column(name).to_pylist() if name in batch.schema.names else [None] * batch.num_rows


def _ts_us(batch: pa.RecordBatch, name: str) -> list[int | None]:
    if name not in batch.schema.names:
        return [None] * batch.num_rows
    return batch.column(name).cast(pa.int64()).to_pylist()  # type: ignore[no-any-return]


def events(chunk: Chunk, pretty: bool) -> list[Event]:
    """Every change of the chunk in commit order."""
    out: list[Event] = []
    for name, _, b in chunk.tables:
        data_fields = [f for f in b.schema if _is_data_field(f)]
        cols = {f.name: column_values(b.column(f.name), pretty, f) for f in data_fields}
        before = column_values(b.column("_before"), pretty) if "_before" in b.schema.names \
            else [None] * b.num_rows
        meta = b.schema.metadata or {}
        if meta.get(b"pg.replica_identity") != b"full" and "_before" in b.schema.names:
            # An old key ('K'): only the key columns were sent; the others are not NULL,
            # they are absent.
            key = {f.name for f in b.schema.field("_before").type
                   if (f.metadata or {}).get(b"pg.key") == b"true"}
            before = [None if r is None else {k: v for k, v in r.items() if k in key}
                      for r in before]
        unchanged = _column(b, "_unchanged")
        special = _column(b, "_special")
        ops, lsns, commits, xids, seqs = (_column(b, c) for c in
                                           ("_op", "_lsn", "_commit_lsn", "_xid", "_seq"))
        ts = _ts_us(b, "_commit_ts")
        names = list(cols)
        for i in range(b.num_rows):
            op = ops[i]
            new = None if op == "delete" else {n: cols[n][i] for n in names}
            if special[i]:
                # A value its column's type cannot hold: PostgreSQL's text in its place.
                old_row = before[i]
                for key, text in special[i]:
                    if key.startswith("_before."):
                        if old_row is not None:
                            old_row[key[len("_before."):]] = text
                    elif new is not None:
                        new[key] = text
            out.append(Event((commits[i] or 0, seqs[i] or 0), op, name, lsns[i], commits[i],
                             ts[i], xids[i], new, before[i], unchanged[i] or []))
    for b in chunk.truncates:
        ts = _ts_us(b, "_commit_ts")
        rows = zip(_column(b, "relations"), _column(b, "cascade"), _column(b, "restart_identity"),
                   _column(b, "_lsn"), _column(b, "_commit_lsn"), ts, _column(b, "_xid"),
                   _column(b, "_seq"))
        for rels, cascade, restart, lsn, commit, t, xid, seq in rows:
            for rel in rels:
                out.append(Event((commit or 0, seq or 0), "truncate", rel, lsn, commit, t, xid,
                                 extra={"cascade": cascade, "restart_identity": restart}))
    for b in chunk.messages:
        ts = _ts_us(b, "_commit_ts")
        content = column_values(b.column("content"), pretty)
        rows = zip(_message_keys(b), _column(b, "prefix"), content, _column(b, "transactional"),
                   _column(b, "_lsn"), _column(b, "_commit_lsn"), ts, _column(b, "_xid"),
                   _column(b, "_seq"))
        for key, prefix, data, transactional, lsn, commit, t, xid, seq in rows:
            out.append(Event((key, seq or 0), "message", "", lsn, commit, t, xid,
                             extra={"prefix": prefix, "content": data,
                                    "transactional": transactional}))
    out.sort(key=lambda e: e.key)
    return out


# --- sinks ---------------------------------------------------------------------------


class Sink(Protocol):
    def write(self, chunk: Chunk) -> None: ...
    def close(self) -> None: ...


def _lsn_text(v: int | None) -> str | None:
    return None if v is None else lsn_to_str(v)


class JsonlSink:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, chunk: Chunk) -> None:
        lines = []
        for e in events(chunk, pretty=False):
            schema, table = _split_name(e.name)
            obj: dict[str, Any] = {
                "op": e.op,
                "schema": schema or None,
                "table": table or None,
                "lsn": _lsn_text(e.lsn),
                "commit_lsn": _lsn_text(e.commit_lsn),
                "commit_ts": None if e.commit_ts is None else iso_timestamp(e.commit_ts, True),
                "xid": e.xid,
                "new": e.new,
                "old": e.old,
                "unchanged": e.unchanged,
            }
            obj.update(e.extra)
            lines.append(json.dumps(obj, ensure_ascii=False, allow_nan=False))
        if lines:
            self.stream.write("\n".join(lines) + "\n")

    def close(self) -> None:
        self.stream.flush()


class PrettySink:
    """``BEGIN xid``, one aligned line per change, ``COMMIT lsn``."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.open: tuple[int | None, int | None] | None = None
        self.width = 0

    def _close_txn(self, lines: list[str]) -> None:
        if self.open is not None:
            xid, commit = self.open
            lines.append(f"COMMIT {xid}  lsn {_lsn_text(commit)}")
            self.open = None

    def write(self, chunk: Chunk) -> None:
        evs = events(chunk, pretty=True)
        self.width = max([self.width] + [len(e.name) for e in evs])
        lines: list[str] = []
        for e in evs:
            txn = (e.xid, e.commit_lsn) if e.commit_lsn is not None else None
            if txn != self.open:
                self._close_txn(lines)
                if txn is not None:
                    ts = "" if e.commit_ts is None else "  " + iso_timestamp(e.commit_ts, True, " ")
                    lines.append(f"BEGIN {e.xid}  commit lsn {_lsn_text(e.commit_lsn)}{ts}")
                    self.open = txn
            indent = "  " if txn is not None else ""
            head = f"{indent}{_lsn_text(e.lsn) or '-':>12}  {e.op:<8} {e.name:<{self.width}}"
            if e.op == "message":
                x = e.extra
                content = x["content"]
                try:  # pretty: the content as text when it is UTF-8, else \x hex
                    content = "'" + bytes.fromhex(content[2:]).decode() + "'"
                except (UnicodeDecodeError, ValueError):
                    pass
                body = (f"prefix='{x['prefix']}' content={content}"
                        + ("" if x["transactional"] else "  (non-transactional)"))
                lines.append(f"{head}  {body}")
                continue
            if e.op == "truncate":
                flags = [f for f, on in (("cascade", e.extra["cascade"]),
                                         ("restart identity", e.extra["restart_identity"])) if on]
                lines.append(head + (f"  ({', '.join(flags)})" if flags else ""))
                continue
            unchanged = set(e.unchanged)
            parts = []
            if e.new is not None:
                parts.append(format_pretty(e.new, unchanged.__contains__))
            if e.old is not None:
                parts.append(("old: " if e.op != "delete" else "") + format_pretty(e.old))
            lines.append(f"{head}  {'  '.join(parts)}".rstrip())
        if lines:
            self.stream.write("\n".join(lines) + "\n")

    def close(self) -> None:
        lines: list[str] = []
        self._close_txn(lines)
        if lines:
            self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()


class StatsSink:
    """Counts per table and operation."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def write(self, chunk: Chunk) -> None:
        for name, _, b in chunk.tables:
            for op, n in zip(*_value_counts(b.column("_op"))):
                self.counts[(name, op)] += n
        for b in chunk.truncates:
            for rels in b.column("relations").to_pylist():
                for rel in rels:
                    self.counts[(rel, "truncate")] += 1
        for b in chunk.messages:
            for prefix in b.column("prefix").to_pylist():
                self.counts[(f"message:{prefix}", "message")] += 1

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


class FileSink:
    """Parquet or Arrow IPC files per table, each holding whole transactions, about
    ``rows_per_file`` rows, and named by the commit LSNs of its first and last rows. Every
    file of a table's directory has the same schema, which grows with the table's versions
    (:class:`~pgoutput_arrow._files.TableDirectory`): a file holds rows of any versions."""

    def __init__(self, root: Path, fmt: str, rows_per_file: int) -> None:
        self.root = root
        self.fmt = fmt
        self.rows_per_file = rows_per_file
        self.pending: dict[str, list[pa.RecordBatch]] = {}
        self.files: list[Path] = []
        # The table directories already there: opening one finishes a rewrite that a
        # killed run left half done.
        self.dirs: dict[str, TableDirectory] = {
            d.name: TableDirectory(d, fmt) for d in sorted(root.iterdir())
            if d.is_dir() and not d.name.startswith(("_", "."))} if root.is_dir() else {}

    def _add(self, key: str, batch: pa.RecordBatch) -> None:
        held = self.pending.get(key)
        if held and key.startswith("_") and held[0].schema != batch.schema:
            self._write(key)
            held = None
        if held is None:
            held = self.pending[key] = []
        held.append(batch)

    def write(self, chunk: Chunk) -> None:
        for name, _, b in chunk.tables:
            if b.num_rows:
                self._add(name, b)
        for kind in ("truncates", "messages", "transactions"):
            for b in getattr(chunk, kind):
                self._add(f"_{kind}", b)
        # Only here, between groups of whole transactions: a transaction is never split
        # across files, so the files' LSN ranges do not overlap and their names sort in
        # commit order (rows_per_file is a soft limit).
        for key, batches in list(self.pending.items()):
            if sum(b.num_rows for b in batches) >= self.rows_per_file:
                self._write(key)

    def _write(self, key: str) -> None:
        batches = self.pending.pop(key)
        if key.startswith("_"):
            table = storable(pa.Table.from_batches(batches), self.fmt)
        else:
            directory = self.dirs.get(key)
            if directory is None:
                directory = self.dirs[key] = TableDirectory(self.root / key, self.fmt)
            table = directory.table(batches)
        lsn_col = "_commit_lsn" if "_commit_lsn" in table.schema.names else None
        if key == "_transactions":
            lsn_col = next((c for c in ("commit_lsn", "_commit_lsn") if c in table.schema.names),
                           None)
        lsns = [v for v in (table.column(lsn_col).to_pylist() if lsn_col else []) if v is not None]
        first, last = (min(lsns), max(lsns)) if lsns else (0, 0)
        directory_path = self.root / key
        directory_path.mkdir(parents=True, exist_ok=True)
        ext = "parquet" if self.fmt == "parquet" else "arrow"
        base = f"{first:016X}-{last:016X}"
        path = directory_path / f"{base}.{ext}"
        n = 1
        while path in self.files:
            path = directory_path / f"{base}-{n}.{ext}"
            n += 1
        write_atomically(table, path, self.fmt)
        self.files.append(path)

    def close(self) -> None:
        for key in list(self.pending):
            self._write(key)


# --- main ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.dsn is not None:
        if args.input is not None:
            raise UsageError("give a CAPTURE or --dsn, not both")
        from .live_cli import run_live

        return run_live(args)
    if args.input is None:
        raise UsageError("a CAPTURE file (or - for stdin), or --dsn and --slot, is required")
    fmt = args.format or ("pretty" if sys.stdout.isatty() else "jsonl")
    if fmt in ("parquet", "arrow") and args.output is None:
        raise UsageError(f"--format {fmt} needs --output DIR")
    if args.output is not None and fmt not in ("parquet", "arrow"):
        raise UsageError("--output is for --format parquet or arrow")
    if args.from_lsn is not None and args.to_lsn is not None and args.from_lsn > args.to_lsn:
        raise UsageError("--from-lsn is after --to-lsn: nothing can match")

    source = open_source(args)
    filters = Filters(args.table, args.from_lsn, args.to_lsn)
    stats = StatsSink() if args.stats else None
    sink: Sink | None
    if fmt in ("parquet", "arrow"):
        sink = FileSink(args.output, fmt, args.rows_per_file)
    elif stats is not None:
        sink = None
    elif fmt == "pretty":
        sink = PrettySink(sys.stdout)
    else:
        sink = JsonlSink(sys.stdout)

    remaining = args.limit
    chunks = source.chunks()
    try:
        for outputs in chunks:
            chunk = filter_chunk(outputs, filters)
            if remaining is not None:
                chunk, n = limit_chunk(chunk, remaining)
                remaining -= n
            if sink is not None:
                sink.write(chunk)
            if stats is not None:
                stats.write(chunk)
            if remaining == 0:
                break
            if args.to_lsn is not None and chunk.max_commit_lsn is not None \
                    and chunk.max_commit_lsn > args.to_lsn:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if sink is not None:
        sink.close()
    if stats is not None:
        stats.report(sys.stdout)
    if isinstance(sink, FileSink) and stats is not None:
        sys.stdout.write(f"{len(sink.files)} files written under {args.output}\n")
    return 0


#: The pip package that provides a module imported only by some ways in.
_PACKAGE_OF_MODULE = {"psycopg2": "psycopg2-binary", "pyspark": "pyspark", "pandas": "pandas"}


def _missing_package(e: ImportError) -> str:
    """One line naming what to install, for an optional module that is not there."""
    if not e.name:
        return _one_line(e)
    module = e.name.split(".")[0]
    package = _PACKAGE_OF_MODULE.get(module, module)
    return (f"the Python package {package} is not installed (import of {e.name} failed): "
            f"pip install {package}")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2
    except BrokenPipeError:
        # The reader went away (| head): not an error. Point stdout at /dev/null so that
        # the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except ImportError as e:  # an optional dependency (psycopg2 for --dsn) is missing
        if args.debug:
            raise
        sys.stderr.write(f"{PROG}: error: {_missing_package(e)}\n")
        return 1
    except (PgoutputError, OSError, pa.ArrowException, ValueError, TypeError) as e:
        if args.debug:
            raise
        where = f"{args.input}: " if isinstance(e, PgoutputError) and args.input not in ("-", None) \
            and not str(e).startswith(str(args.input)) else ""
        sys.stderr.write(f"{PROG}: error: {where}{_one_line(e)}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
