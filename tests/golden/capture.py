#!/usr/bin/env python3
"""Capture golden pgoutput streams from real PostgreSQL 18 and 15 servers.

For every workload ``workloads/<name>.sql`` and every server version, a fresh server is
started, the workload's setup runs, one logical slot per option set is created, the rest of
the workload runs, and each slot is then read with ``pg_logical_slot_get_binary_changes``
under its option set. Each capture is written as

* ``captures/<name>-pg<ver>-<optionset>.bin``: per row, u64 BE lsn, u32 BE xid,
  u32 BE length, then that many bytes of one pgoutput message;
* ``captures/<name>-pg<ver>-<optionset>.json``: the options, the server version, the
  message kinds seen, and the FACTS the workload recorded from the server while it ran
  (xids, LSNs, timestamps, relation and type OIDs, ...), for tests to check decoded values
  against.

Usage: ``.venv/bin/python tests/golden/capture.py [--versions 18,15] [--only WORKLOAD ...]``
(``make golden`` runs it for everything). See README.md for the workload directives.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import struct
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import psycopg2.extensions  # noqa: E402

from pg_harness import PgServer, int_to_lsn, lsn_to_int  # noqa: E402

WORKLOADS_DIR = HERE / "workloads"
CAPTURES_DIR = HERE / "captures"
PRELUDE = HERE / "prelude.sql"

#: Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 UTC).
PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)

PG_LSN_OID = 3220
FRAME = struct.Struct(">QII")


@dataclass(frozen=True)
class OptionSet:
    name: str
    options: dict[str, str]
    min_version: int = 10
    two_phase_slot: bool = False


#: Every workload is decoded under each of these (where the server supports it).
OPTION_SETS = [
    OptionSet("v1-text", {"proto_version": "1"}),
    OptionSet("v1-binary", {"proto_version": "1", "binary": "true"}),
    OptionSet("v2-stream", {"proto_version": "2", "streaming": "on", "messages": "true"}),
    OptionSet("v3-twophase-binary", {"proto_version": "3", "streaming": "on", "messages": "true",
                                     "two_phase": "true", "binary": "true"},
              min_version=15, two_phase_slot=True),
    OptionSet("v4-parallel", {"proto_version": "4", "streaming": "parallel",
                              "messages": "true", "two_phase": "true"},
              min_version=16, two_phase_slot=True),
]

#: Server settings for captures on top of pg_harness's defaults.
CAPTURE_SETTINGS = {
    # Lets the capture record each transaction's commit timestamp as a fact.
    "track_commit_timestamp": "on",
    "autovacuum": "off",
}


# --------------------------------------------------------------------------- workload files


@dataclass
class Statement:
    sql: str
    session: str
    line: int
    fact: str | None = None
    fact_many: bool = False
    #: "sql", or "sync": wait until every walsender has decoded all WAL so far.
    action: str = "sql"


@dataclass
class Workload:
    name: str
    path: Path
    description: str = ""
    publications: list[str] = field(default_factory=lambda: ["golden"])
    min_version: int = 10
    option_sets: list[str] | None = None
    via: str = "sql"
    setup: list[Statement] = field(default_factory=list)
    body: list[Statement] = field(default_factory=list)


class WorkloadError(ValueError):
    pass


def split_sql(text: str) -> list[tuple[int, str, list[str]]]:
    """Split SQL into statements: (line, statement, directives before it).

    Understands '...' strings (with E'' backslashes), "..." identifiers, $tag$ quoting,
    -- and /* */ comments. A directive is a comment line ``-- @word args``.
    """
    out: list[tuple[int, str, list[str]]] = []
    buf: list[str] = []
    directives: list[str] = []
    i, n, line, start_line = 0, len(text), 1, 1

    def flush() -> None:
        nonlocal buf, directives
        stmt = "".join(buf).strip()
        if stmt:
            out.append((start_line, stmt, directives))
            directives = []
        buf = []

    while i < n:
        c = text[i]
        if not "".join(buf).strip():
            start_line = line
        if c == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            comment = text[i + 2:end].strip()
            if comment.startswith("@"):
                if "".join(buf).strip():
                    raise WorkloadError(f"line {line}: directive inside a statement: {comment}")
                directives.append(comment[1:])
            i = end
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                raise WorkloadError(f"line {line}: unterminated /* comment")
            line += text.count("\n", i, end + 2)
            i = end + 2
            buf.append(" ")
            continue
        if c in ("'", '"'):
            escapes = c == "'" and i > 0 and text[i - 1] in "eE"
            j = i + 1
            while True:
                if j >= n:
                    raise WorkloadError(f"line {line}: unterminated {c}")
                if escapes and text[j] == "\\":
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            buf.append(text[i:j + 1])
            line += text.count("\n", i, j + 1)
            i = j + 1
            continue
        if c == "$":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            if j < n and text[j] == "$" and not text[i + 1:j][:1].isdigit():
                tag = text[i:j + 1]
                end = text.find(tag, j + 1)
                if end == -1:
                    raise WorkloadError(f"line {line}: unterminated {tag} quote")
                buf.append(text[i:end + len(tag)])
                line += text.count("\n", i, end + len(tag))
                i = end + len(tag)
                continue
        if c == ";":
            flush()
            i += 1
            continue
        if c == "\n":
            line += 1
        buf.append(c)
        i += 1
    flush()
    if directives:
        out.append((line, "", directives))
    return out


def load_workload(path: Path) -> Workload:
    w = Workload(name=path.stem, path=path)
    session = "main"
    target = w.setup
    seen_slots = False
    for line, sql, directives in split_sql(path.read_text()):
        fact: str | None = None
        many = False
        for d in directives:
            word, _, arg = d.partition(" ")
            arg = arg.strip()
            if word == "description":
                w.description = (w.description + " " + arg).strip()
            elif word == "publications":
                w.publications = [p.strip() for p in arg.split(",") if p.strip()]
            elif word == "min_version":
                w.min_version = int(arg)
            elif word == "option_sets":
                w.option_sets = [p.strip() for p in arg.split(",") if p.strip()]
            elif word == "slots":
                if seen_slots:
                    raise WorkloadError(f"{path.name}:{line}: @slots given twice")
                seen_slots, target = True, w.body
            elif word == "session":
                if not arg.isidentifier():
                    raise WorkloadError(f"{path.name}:{line}: bad session name {arg!r}")
                session = arg
            elif word == "via":
                if arg not in ("sql", "walsender"):
                    raise WorkloadError(f"{path.name}:{line}: @via sql or @via walsender")
                w.via = arg
            elif word == "sync":
                if target is not w.body:
                    raise WorkloadError(f"{path.name}:{line}: @sync before @slots")
                target.append(Statement("", session, line, action="sync"))
            elif word in ("fact", "facts"):
                if not arg.isidentifier():
                    raise WorkloadError(f"{path.name}:{line}: bad fact name {arg!r}")
                fact, many = arg, word == "facts"
            else:
                raise WorkloadError(f"{path.name}:{line}: unknown directive @{word}")
        if sql:
            target.append(Statement(sql, session, line, fact, many))
        elif fact:
            raise WorkloadError(f"{path.name}:{line}: @fact {fact} has no statement after it")
    if w.via == "sql" and any(st.action == "sync" for st in w.body):
        raise WorkloadError(f"{path.name}: @sync needs @via walsender")
    if not seen_slots:
        raise WorkloadError(f"{path.name}: no '-- @slots' line (where the slots are created)")
    known = {o.name for o in OPTION_SETS}
    for name in w.option_sets or []:
        if name not in known:
            raise WorkloadError(f"{path.name}: unknown option set {name!r}; known: {sorted(known)}")
    return w


# --------------------------------------------------------------------------- facts


def to_json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    return str(value)


def pg_epoch_us(value: dt.datetime) -> int:
    """A timestamptz as pgoutput sends it: microseconds since 2000-01-01 UTC."""
    delta = value - PG_EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def row_to_fact(description: Any, row: tuple[Any, ...]) -> dict[str, Any]:
    """A result row as a JSON object. A timestamptz column ``c`` also gets ``c_pg_us``
    (pgoutput's encoding) and a pg_lsn column also gets ``c_int``."""
    fact: dict[str, Any] = {}
    for col, value in zip(description, row):
        name = col.name
        fact[name] = to_json_value(value)
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            fact[f"{name}_pg_us"] = pg_epoch_us(value)
        if col.type_code == PG_LSN_OID and isinstance(value, str):
            fact[f"{name}_int"] = lsn_to_int(value)
    return fact


def add_commit_facts(pg: PgServer, facts: dict[str, Any]) -> None:
    """After the workload: every fact object with an ``xid`` gets ``committed`` and
    ``commit_time`` (pg_xact_commit_timestamp: what Begin/Commit carry)."""
    def visit(obj: Any) -> None:
        if isinstance(obj, list):
            for item in obj:
                visit(item)
        elif isinstance(obj, dict) and isinstance(obj.get("xid"), int):
            xid = obj["xid"]
            status, ts = pg.query(
                "SELECT txid_status(%s), pg_xact_commit_timestamp(%s::text::xid)",
                (obj.get("full_xid", xid), str(xid)))[0]
            obj["status"] = status
            obj["commit_time"] = ts.isoformat() if ts else None
            obj["commit_time_pg_us"] = pg_epoch_us(ts) if ts else None

    for value in facts.values():
        visit(value)


# --------------------------------------------------------------------------- capture


def slot_name(option_set: OptionSet) -> str:
    return "golden_" + option_set.name.replace("-", "_")


def encode_rows(rows: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray()
    for lsn, xid, data in rows:
        out += FRAME.pack(lsn, xid, len(data))
        out += data
    return bytes(out)


def decode_rows(blob: bytes) -> list[tuple[int, int, bytes]]:
    """The inverse of encode_rows; raises ValueError on a truncated file."""
    rows, pos = [], 0
    while pos < len(blob):
        if pos + FRAME.size > len(blob):
            raise ValueError(f"truncated frame header at offset {pos}")
        lsn, xid, length = FRAME.unpack_from(blob, pos)
        pos += FRAME.size
        if pos + length > len(blob):
            raise ValueError(f"truncated message at offset {pos}: {length} bytes announced")
        rows.append((lsn, xid, blob[pos:pos + length]))
        pos += length
    return rows


class WalsenderStream:
    """A slot read over the streaming replication protocol while the workload runs, as a
    subscriber reads it: one decoding session from start to end. (Each SQL call is a
    session of its own, and a server decoding after the fact knows which transactions
    aborted: PostgreSQL 16+ then never streams them, so no Stream Abort of a whole
    transaction can be captured that way.)"""

    def __init__(self, pg: PgServer, slot: str, options: dict[str, str]) -> None:
        import psycopg2.extras

        self.slot = slot
        self.rows: list[tuple[int, int, bytes]] = []
        self.conn = pg.connect(pg.dsn_for(replication="database"), autocommit=False,
                               connection_factory=psycopg2.extras.LogicalReplicationConnection)
        self.cur = self.conn.cursor()
        self.cur.start_replication(slot_name=slot, decode=False, options=options)

    def _drain(self, timeout: float) -> None:
        import select

        msg = self.cur.read_message()
        if msg is None:
            select.select([self.conn], [], [], timeout)
            msg = self.cur.read_message()
        while msg is not None:
            # XLogData's WAL start is the SQL interface's lsn column.
            self.rows.append((msg.data_start, 0, bytes(msg.payload)))
            msg = self.cur.read_message()

    def sync(self, target_lsn: int, timeout: float = 60.0) -> None:
        """Wait until the walsender has decoded and sent everything up to target_lsn:
        a keepalive (which we ask for) reports how far it has got."""
        deadline = time.monotonic() + timeout
        while True:
            self.cur.send_feedback(reply=True)
            self._drain(0.1)
            if self.cur.wal_end >= target_lsn:
                return
            if time.monotonic() > deadline:
                raise WorkloadError(f"walsender of slot {self.slot} reached "
                                    f"{int_to_lsn(self.cur.wal_end)}, not "
                                    f"{int_to_lsn(target_lsn)}, within {timeout:.0f}s")

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()


def run_statements(pg: PgServer, statements: list[Statement], sessions: dict[str, Any],
                   facts: dict[str, Any], workload: Workload,
                   sync: Callable[[], None] | None = None) -> None:
    for st in statements:
        if st.action == "sync":
            assert sync is not None
            sync()
            continue
        conn = sessions.get(st.session)
        if conn is None:
            conn = sessions[st.session] = pg.connect()
        with conn.cursor() as cur:
            try:
                cur.execute(st.sql)
            except Exception as e:
                raise WorkloadError(f"{workload.path.name}:{st.line} (session {st.session}) on "
                                    f"PostgreSQL {pg.version}: {e}\n{st.sql}") from e
            if st.fact is None:
                continue
            if cur.description is None:
                raise WorkloadError(f"{workload.path.name}:{st.line}: @fact {st.fact} "
                                    "on a statement that returns no rows")
            rows = [row_to_fact(cur.description, r) for r in cur.fetchall()]
            if st.fact in facts:
                raise WorkloadError(f"{workload.path.name}:{st.line}: fact {st.fact} recorded twice")
            if st.fact_many:
                facts[st.fact] = rows
            elif len(rows) != 1:
                raise WorkloadError(f"{workload.path.name}:{st.line}: @fact {st.fact} wants one "
                                    f"row, got {len(rows)} (use @facts for a list)")
            else:
                facts[st.fact] = rows[0]


def capture_workload(workload: Workload, version: int, out_dir: Path) -> list[Path]:
    option_sets = [o for o in OPTION_SETS
                   if version >= o.min_version
                   and (workload.option_sets is None or o.name in workload.option_sets)]
    written: list[Path] = []
    with PgServer(version=version, settings=CAPTURE_SETTINGS) as pg:
        sessions: dict[str, Any] = {}
        facts: dict[str, Any] = {}
        options_of = {o.name: {**o.options, "publication_names": ",".join(workload.publications)}
                      for o in option_sets}
        walsenders: dict[str, WalsenderStream] = {}
        slots: dict[str, int] = {}
        try:
            pg.execute(PRELUDE.read_text())
            run_statements(pg, workload.setup, sessions, facts, workload)
            for o in option_sets:
                slots[o.name] = pg.create_slot(slot_name(o), two_phase=o.two_phase_slot)
                if workload.via == "walsender":
                    walsenders[o.name] = WalsenderStream(pg, slot_name(o), options_of[o.name])

            def sync() -> None:
                pg.flush_wal()
                target = pg.scalar("SELECT pg_current_wal_flush_lsn()::text")
                for stream in walsenders.values():
                    stream.sync(lsn_to_int(target))

            run_statements(pg, workload.body, sessions, facts, workload, sync)
            if walsenders:
                sync()
            for conn in sessions.values():
                if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                    raise WorkloadError(f"{workload.path.name}: a session ends inside a "
                                        "transaction; finish it with COMMIT or ROLLBACK")
        finally:
            for conn in sessions.values():
                conn.close()
            for stream in walsenders.values():
                stream.close()
        pg.flush_wal()  # a trailing ROLLBACK's abort record is not flushed by itself
        add_commit_facts(pg, facts)
        server_version = pg.scalar("SHOW server_version")
        server_version_num = pg.server_version_num
        for o in option_sets:
            options = options_of[o.name]
            if walsenders:
                rows = walsenders[o.name].rows
            else:
                rows = pg.get_binary_changes(slot_name(o), options)
            if not rows:
                raise WorkloadError(f"{workload.name} on PG{version} with {o.name}: no rows")
            kinds: dict[str, int] = {}
            for _, _, data in rows:
                k = chr(data[0])
                kinds[k] = kinds.get(k, 0) + 1
            stem = f"{workload.name}-pg{version}-{o.name}"
            bin_path = out_dir / f"{stem}.bin"
            bin_path.write_bytes(encode_rows(rows))
            meta = {
                "workload": workload.name,
                "description": workload.description,
                "sql": f"workloads/{workload.path.name}",
                "server_version": server_version,
                "server_version_num": server_version_num,
                "option_set": o.name,
                "options": options,
                "slot": {"name": slot_name(o), "two_phase": o.two_phase_slot,
                         "consistent_lsn": int_to_lsn(slots[o.name]),
                         "consistent_lsn_int": slots[o.name]},
                "via": workload.via,
                # The walsender protocol does not send the xid beside each message.
                "frame_xid": "from the server" if workload.via == "sql" else "always 0",
                "rows": len(rows),
                "bytes": sum(len(d) for _, _, d in rows),
                "kinds": dict(sorted(kinds.items())),
                "kind_sequence": "".join(chr(d[0]) for _, _, d in rows),
                "facts": facts,
            }
            json_path = out_dir / f"{stem}.json"
            json_path.write_text(json.dumps(meta, indent=1, sort_keys=False) + "\n")
            written += [bin_path, json_path]
            print(f"  {stem}: {len(rows)} rows, {meta['bytes']} bytes, kinds "
                  f"{''.join(sorted(kinds))}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", default="18,15", help="server versions, e.g. 18,15")
    parser.add_argument("--only", nargs="*", help="workload names (default: all)")
    parser.add_argument("--out", type=Path, default=CAPTURES_DIR)
    args = parser.parse_args(argv)

    versions = [int(v) for v in args.versions.split(",")]
    paths = sorted(WORKLOADS_DIR.glob("*.sql"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
        missing = set(args.only) - {p.stem for p in paths}
        if missing:
            parser.error(f"no such workload(s): {sorted(missing)}")
    workloads = [load_workload(p) for p in paths]  # parse all first: fail before any server

    args.out.mkdir(parents=True, exist_ok=True)
    if not args.only:  # a full run replaces every capture
        for old in list(args.out.glob("*.bin")) + list(args.out.glob("*.json")):
            old.unlink()
    written: list[Path] = []
    for w in workloads:
        for v in versions:
            if v < w.min_version:
                print(f"{w.name} on PG{v}: skipped (needs PG{w.min_version}+)")
                continue
            print(f"{w.name} on PG{v}:")
            written += capture_workload(w, v, args.out)
    total = sum(p.stat().st_size for p in args.out.iterdir() if p.suffix in (".bin", ".json"))
    print(f"wrote {len(written)} files; captures now total {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
