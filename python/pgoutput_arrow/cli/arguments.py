"""``pgoutput-dump``'s command line: the options, and the combinations argparse cannot
check by itself (usage errors, exit status 2, found before anything is read, connected to
or created)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import IO, Any, Callable

from .. import __version__
from .._internal import lsn_to_int
from ..live.options import describe, flagged

__all__ = ["PROG", "UsageError", "build_parser", "output_format", "publications", "size_arg"]

PROG = "pgoutput-dump"

DESCRIPTION = """\
Decode a pgoutput capture and print its changes (one line each, in commit order), or store
them as Parquet or Arrow files, one directory per table.

A capture is what pg_logical_slot_get_binary_changes() returns (columns lsn, xid, data),
saved as Parquet (a file, or a directory of them as Spark writes one), Arrow IPC or CSV; the
format is recognised from the file's content."""

EPILOG = """\
examples:
  pgoutput-dump capture.parquet                          aligned lines, BEGIN/COMMIT shown
  pgoutput-dump capture.parquet --format jsonl | jq .    one JSON object per change
  pgoutput-dump capture.parquet --table 'public.order*' --from-lsn 0/16B3748 --limit 100
  pgoutput-dump capture.parquet --format parquet --output out/
                     writes out/public.orders/00000000016B3748-00000000016C0000.parquet ...
  pgoutput-dump capture.parquet --format delta --output lake/ --change-log
                     a Delta Lake replica per table, lake/public.orders, and its change
                     log, lake/_changes/public.orders (exactly once, live too)
  pgoutput-dump capture.parquet --format iceberg --output lake/
                     an Iceberg replica per table, public.orders in the embedded catalog
                     lake/catalog.db (exactly once, live too)
  pgoutput-dump capture.parquet --stats                  counts per table and operation
  pgoutput-dump spark_capture/ --any-order               Parquet files Spark wrote from a
                     reordered DataFrame: decoded whole transactions in commit order
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
Python package (one line on stderr; --debug for the traceback), 2 usage error, 3 --slot-status
found a slot invalidated or past --max-retained-wal."""

FORMATS = ("pretty", "jsonl", "parquet", "arrow", "delta", "iceberg")

#: The formats written under --output.
_DIRECTORY_FORMATS = ("parquet", "arrow", "delta", "iceberg")


class UsageError(Exception):
    """An argument combination argparse cannot check by itself (exit status 2)."""


def lsn_arg(text: str) -> int:
    try:
        return lsn_to_int(text) if "/" in text else int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an LSN: {text!r} (expected X/Y as 16/B374D848, or an integer)"
        ) from None


def positive(text: str) -> int:
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
    p.add_argument(
        "input", metavar="CAPTURE", nargs="?",
        help="capture file (Parquet, Arrow IPC file or stream, CSV), a directory of Parquet "
        "files (as Spark writes a capture; read in the order of their names), or - for an "
        "Arrow IPC stream on stdin; or --dsn/--slot for a live replication slot",
    )
    _add_live_arguments(p)
    _add_operations_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument(
        "-f", "--format", choices=FORMATS, default=None,
        help="pretty: aligned lines with BEGIN/COMMIT (the default when stdout is a terminal); "
        "jsonl: one JSON object per change (the default otherwise); parquet, arrow: files "
        "under --output, one directory per table; delta: a Delta Lake replica per table "
        "under --output (docs/delta.md); iceberg: an Apache Iceberg replica per table, in an "
        "embedded catalog under --output or --iceberg-catalog's (docs/iceberg.md)",
    )
    out.add_argument(
        "-o", "--output", metavar="DIR", type=Path,
        help="directory for --format parquet/arrow/delta/iceberg: DIR/schema.table/FIRST-LAST.parquet, "
        "named "
        "by the commit LSNs of the first and last rows (16 hex digits each, so names sort); "
        "truncates, messages and transactions go to DIR/_truncates, DIR/_messages, "
        "DIR/_transactions. Files appear atomically (written as hidden .tmp files, then "
        "renamed)",
    )
    out.add_argument(
        "--rows-per-file", metavar="N", type=positive, default=1_000_000,
        help="with --output, start a new file of a table once it holds N rows or more; a "
        "transaction is never split across files (default 1000000)",
    )
    out.add_argument(
        "--stats", action="store_true",
        help="print counts per table and operation instead of the changes (after writing "
        "the files with --format parquet/arrow)",
    )
    _add_lake_arguments(p)
    flt = p.add_argument_group("filters")
    flt.add_argument(
        "-t", "--table", metavar="GLOB", action="append", default=[],
        help="only tables whose schema.table matches GLOB (fnmatch: *, ?, [abc]); repeat for "
        "several; messages are left out when given",
    )
    flt.add_argument(
        "--from-lsn", metavar="LSN", type=lsn_arg,
        help="only transactions that commit at or after LSN (X/Y or an integer)",
    )
    flt.add_argument(
        "--to-lsn", metavar="LSN", type=lsn_arg,
        help="only transactions that commit at or before LSN; reading stops after it",
    )
    flt.add_argument(
        "-n", "--limit", metavar="N", type=positive,
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
        "--views", action="store_true",
        help="text and binary columns as view arrays pointing into the messages (zero copy; "
        "Arrow output only: pyarrow's filter/sort/take/join and pandas' list conversion "
        "refuse them) instead of plain string/binary columns",
    )
    # The default since views stopped being it; kept so that old command lines still run.
    dec.add_argument("--no-views", action="store_true", help=argparse.SUPPRESS)
    dec.add_argument(
        "--interval", choices=("struct", "month_day_nano"), default="struct",
        help="interval columns as struct<months, days, microseconds> (the default: exact, "
        "and every consumer reads it) or Arrow's month_day_nano interval",
    )
    dec.add_argument(
        "--uuid", choices=("text", "fixed_size_binary"), default="text",
        help="uuid columns as their canonical text (the default) or 16 bytes with the "
        "arrow.uuid extension type",
    )
    dec.add_argument(
        "--datetime-range", choices=("python", "arrow", "pandas"), default="python",
        help="which dates and timestamps the typed columns hold; the others go to _special: "
        "python (the default) what Python's datetime holds, 0001-01-01 to 9999-12-31; arrow "
        "every value, infinity as the type's extreme values (DuckDB's); pandas as python with "
        "timestamps of pandas' datetime64[ns] only",
    )
    dec.add_argument(
        "--time", choices=("text", "time64"), default="text",
        help="time columns as PostgreSQL's text HH:MM:SS[.ffffff] (the default: exact, and "
        "every consumer reads it) or Arrow's time64[us]",
    )
    dec.add_argument(
        "--memory-limit", metavar="SIZE", type=positive_size,
        help="buffered changes of open transactions beyond SIZE (bytes, or 256MB, 1GB, ...) "
        "spill to disk (default 256MB)",
    )
    dec.add_argument("--spill-dir", metavar="DIR", help="where to spill (default: a temp dir)")
    dec.add_argument(
        "--any-order", action="store_true",
        help="the capture's rows may be in any order (read back through Spark, say): it is read "
        "into memory with its xid column and decoded whole transaction by whole transaction in "
        "commit order (by default the rows must be in the server's order, as "
        "pg_logical_slot_get_binary_changes returns them, and are decoded as they are read)",
    )
    dec.add_argument(
        "--date-order", choices=("MDY", "DMY", "YMD"), type=str.upper,
        help="a capture printed under DateStyle SQL or Postgres: its field order (default "
        "MDY, PostgreSQL's; YMD prints as MDY). Live streams pin DateStyle ISO",
    )
    dec.add_argument(
        "--timezone", metavar="ZONE",
        help="a capture printed under DateStyle SQL, German or Postgres: the TimeZone it was "
        "printed under (IANA name, e.g. Europe/Berlin), to read the zone abbreviations of its "
        "timestamptz values (CET, LMT)",
    )
    misc = p.add_argument_group("other")
    misc.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="a progress line on stderr (default: when stderr is a terminal and the input "
        "takes more than a second)",
    )
    misc.add_argument("-v", "--verbose", action="store_true",
                      help="say more of the work on stderr (the package's INFO log): each chunk the "
                      "online snapshot reads, with its rows and time")
    misc.add_argument("--debug", action="store_true", help="show the traceback of an error")
    misc.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    return p


def _add_live_arguments(p: argparse.ArgumentParser) -> None:
    """The live source's options (used when --dsn is given instead of a capture)."""
    g = p.add_argument_group(
        "live source (streaming replication; instead of CAPTURE)",
        "Stream a logical replication slot (plugin pgoutput) as the changes happen.")
    g.add_argument("--dsn", metavar="DSN",
                   help="libpq connection string or URI (host, port, user, password or "
                   "PGPASSWORD/passfile, sslmode up to verify-full, sslrootcert, ...)")
    g.add_argument("--slot", metavar="NAME", help="the logical replication slot")
    g.add_argument("--publication", metavar="NAME", action="append",
                   help="publication to stream (repeat for several; default with "
                   "--create-publication/--all-tables: the slot's name)")
    g.add_argument("--create-publication", metavar="TABLE", nargs="+",
                   help="create the publication for these tables if it does not exist (one that exists is "
                        "left as it is, with a warning naming those of the tables it does not publish)")
    g.add_argument("--all-tables", action="store_true",
                   help="create the publication FOR ALL TABLES if it does not exist")
    g.add_argument("--start-lsn", metavar="X/Y", type=lsn_arg,
                   help="start at this LSN (never before the slot's confirmed position)")
    g.add_argument("--commit-interval", metavar="S", type=float, default=1.0,
                   help="with --output: gather up to S seconds of transactions per file "
                   "group (default 1)")
    _add_stream_options(g, "live")


def _add_stream_options(g: argparse._ArgumentGroup, group: str) -> None:
    """The options of :func:`pgoutput_arrow.stream` that are flags of this group (their one
    table: :class:`pgoutput_arrow.live.StreamOptions`), under their ``stream()`` names
    (``args.temporary_slot`` for ``--temporary``); the help names the flags."""
    flags = {f.name: flag.flag for f, flag in flagged()}
    kinds: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "size": positive_size}
    for f, flag in flagged():
        if flag.group != group:
            continue
        text = describe(f, lambda name: flags.get(name, name), choices=False)
        text += f"; {flag.note}" if flag.note else ""
        if flag.kind == "bool":
            g.add_argument(flag.flag, dest=f.name, action="store_true", help=text)
        else:
            g.add_argument(flag.flag, dest=f.name, metavar=flag.metavar, type=kinds[flag.kind],
                           choices=f.metadata.get("choices"), default=f.default, help=text)


def _add_lake_arguments(p: argparse.ArgumentParser) -> None:
    """The options of --format delta and iceberg (docs/delta.md, docs/iceberg.md)."""
    g = p.add_argument_group("lake tables (--format delta, --format iceberg)")
    g.add_argument("--change-log", action="store_true",
                   help="also append every change, with its metadata, to a change log per "
                   "table: DIR/_changes/schema.table (Delta), schema__changes.table (Iceberg)")
    g.add_argument("--change-log-only", action="store_true",
                   help="only the change logs, no replicas")
    g.add_argument("--append-only", action="store_true",
                   help="tables without a replica identity key (appended by default: only "
                   "their inserts arrive): drop an update or delete of one instead of stopping")
    g.add_argument("--drop-columns", action="store_true",
                   help="drop a column dropped in PostgreSQL from the replica (default: it "
                   "stays, null in rows changed since)")
    g.add_argument("--app-id", metavar="NAME",
                   help="the name the tables' positions are kept under: the Delta commits' txn "
                   "NAME:schema.table, the Iceberg snapshots' pgoutput.commit-lsn.NAME "
                   "(default: the slot's name, or 'capture')")
    g.add_argument("--iceberg-catalog", metavar="KEY=VALUE", action="append",
                   help="a pyiceberg catalog property, repeated (type=sql uri=postgresql+psycopg2:"
                   "//..., or type=rest uri=http://...); default: an embedded SQL catalog, "
                   "DIR/catalog.db, its warehouse DIR")


def size_arg(text: str) -> int:
    """``1GB``, ``512MB``, ``64kB``, ``100`` (bytes; units of 1024, as PostgreSQL's)."""
    units = {"": 1, "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
    number = text.strip().rstrip("bBkKmMgGtT ")
    unit = text.strip()[len(number):].strip().lower()
    if unit in ("k", "m", "g", "t"):
        unit += "b"
    try:
        value = float(number) * units[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (expected bytes, or a number with kB, MB, GB or TB)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(value)


def positive_size(text: str) -> int:
    """:func:`size_arg`, more than zero."""
    value = size_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive size: {text!r}")
    return value


def _add_operations_arguments(p: argparse.ArgumentParser) -> None:
    """Running a live source in production: the slot guard, failover slots, metrics and
    heartbeats (see docs/operations.md)."""
    g = p.add_argument_group(
        "operations (with --dsn)",
        "Guard the server's slots, survive a failover, expose metrics.")
    g.add_argument("--slot-status", action="store_true",
                   help="list every logical slot (or --slot NAME): active, lag, retained WAL, "
                   "wal_status, invalidation; a table, or one JSON object per slot with "
                   "--format jsonl; exit status 3 when one is invalidated or retains more "
                   "than --max-retained-wal")
    g.add_argument("--max-retained-wal", metavar="SIZE", type=size_arg,
                   help="with --slot-status: the retained WAL (e.g. 10GB) past which the exit "
                   "status is 3")
    g.add_argument("--drop-slot", action="store_true",
                   help="drop the slot --slot NAME (refused while a consumer streams from it)")
    _add_stream_options(g, "operations")


def publications(args: argparse.Namespace) -> tuple[list[str] | None, list[str] | str | None]:
    """(publications to stream, publication to create: tables, "ALL" or None)."""
    create: list[str] | str | None = None
    if args.all_tables:
        create = "ALL"
    elif args.create_publication:
        create = args.create_publication
    return args.publication or (None if create is None else [args.slot]), create


def output_format(args: argparse.Namespace, out: IO[str]) -> str:
    """The output format (pretty on a terminal, else jsonl, unless --format says), after
    checking the combinations of options: raises :class:`UsageError`."""
    fmt: str = args.format or ("pretty" if out.isatty() else "jsonl")
    if args.dsn is not None and args.input is not None:
        raise UsageError("give a CAPTURE or --dsn, not both")
    if args.dsn is None and args.input is None:
        raise UsageError("a CAPTURE file (or - for stdin), or --dsn and --slot, is required")
    if fmt in _DIRECTORY_FORMATS and args.output is None:
        raise UsageError(f"--format {fmt} needs --output DIR")
    if args.output is not None and fmt not in _DIRECTORY_FORMATS:
        raise UsageError("--output is for --format parquet, arrow, delta or iceberg")
    if args.iceberg_catalog and fmt != "iceberg":
        raise UsageError("--iceberg-catalog is for --format iceberg")
    if fmt not in ("delta", "iceberg") and (args.change_log or args.change_log_only or args.append_only
                           or args.drop_columns or args.app_id):
        raise UsageError("--change-log, --change-log-only, --append-only, --drop-columns and "
                         "--app-id are for --format delta or iceberg")
    if args.any_order and args.input is None:
        raise UsageError("--any-order is for a CAPTURE: a live stream is in the server's order")
    if args.from_lsn is not None and args.to_lsn is not None and args.from_lsn > args.to_lsn:
        raise UsageError("--from-lsn is after --to-lsn: nothing can match")
    if args.dsn is None and (args.failover or args.metrics_port is not None
                             or args.heartbeat_interval is not None):
        raise UsageError("--failover, --metrics-port and --heartbeat-interval go with --dsn")
    if args.dsn is not None:
        if not args.slot:
            raise UsageError("--dsn needs --slot NAME")
        if publications(args)[0] is None:
            raise UsageError("--dsn needs --publication NAME (or --create-publication TABLE ... "
                             "or --all-tables)")
        if args.temporary_slot and not args.create_slot:
            raise UsageError("--temporary goes with --create-slot")
        if args.snapshot and not args.create_slot:
            raise UsageError("--snapshot goes with --create-slot (the snapshot is taken as the slot is created)")
        if args.snapshot_connections < 1:
            raise UsageError("--snapshot-connections must be at least 1")
        if args.online_snapshot and args.snapshot:
            raise UsageError("--snapshot and --online-snapshot are two ways to take the snapshot: choose one")
        if args.snapshot_chunk_rows < 1:
            raise UsageError("--snapshot-chunk-rows must be at least 1")
    return fmt
