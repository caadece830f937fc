"""What PostgreSQL says, and how a path's output is compared with it.

Two references, both PostgreSQL's own:

* ``test_decoding`` on the same workload prints every committed change, in commit order,
  with each column's value as PostgreSQL's text output (and the old key or old row).
  :func:`parse_test_decoding` reads it; :func:`compare_changes` compares it with every
  decoded change, value by value: the decoded Arrow value rendered as PostgreSQL's text
  (``pgoutput_arrow._internal.pg_text``), a special value's ``_special`` text, an unchanged
  TOAST value listed in ``_unchanged``. A column PostgreSQL printed that the output lacks
  is a mismatch; so is a change missing, extra or out of order.
* the final ``SELECT``: :func:`compare_final` replays the decoded changes (tests/replay.py)
  and compares the state with the server's rows, typed, value by value; a column the
  server has that the output lacks is a mismatch.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
import types
from typing import Any, Iterable

import pyarrow as pa

import pgoutput_arrow
from pgoutput_arrow import _internal
import values
from replay import compare_state, data_columns, replay, server_rows

META = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_before", "_unchanged", "_special",
        "_status", "_subxid")


@dataclasses.dataclass
class Change:
    """One change as test_decoding printed it: values as PostgreSQL's text (None: NULL;
    ``UNCHANGED``: an unchanged TOAST value), each column's type as ``format_type`` names
    it, and its transaction's xid and commit time (``include-xids``, ``include-timestamp``;
    the time as PostgreSQL's text in the oracle session's ISO/UTC settings)."""

    table: str
    op: str
    new: dict[str, str | None]
    old: dict[str, str | None] | None = None
    types: dict[str, str] = dataclasses.field(default_factory=dict)
    xid: int | None = None
    commit_ts: str | None = None


@dataclasses.dataclass
class Message:
    """A logical decoding message as test_decoding printed it (``xid`` of its transaction,
    None when not transactional)."""

    transactional: bool
    prefix: str
    content: bytes
    xid: int | None
    #: How many of the published changes test_decoding printed before it.
    after: int | None = None


UNCHANGED = "\x00unchanged-toast-datum"


def _identifier(text: str, i: int) -> tuple[str, int]:
    """A possibly quoted identifier at ``text[i:]`` (quote_identifier's output): its name and
    the index after it."""
    if text.startswith('"', i):
        j, buf = i + 1, []
        while True:
            q = text.index('"', j)
            buf.append(text[j:q])
            if text.startswith('"', q + 1):
                buf.append('"')
                j = q + 2
                continue
            return "".join(buf), q + 1
    j = i
    while j < len(text) and text[j] not in '.[:, ':
        j += 1
    return text[i:j], j


def _values(text: str) -> tuple[dict[str, str | None], dict[str, str]]:
    out: dict[str, str | None] = {}
    types: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] == " ":
            i += 1
        if i >= n:
            break
        name, lb = _identifier(text, i)
        assert text[lb] == "[", (text, lb)
        end = text.index("]:", lb)
        types[name] = text[lb + 1:end]
        i = end + 2
        if text.startswith("'", i):
            j, buf = i + 1, []
            while True:
                q = text.index("'", j)
                buf.append(text[j:q])
                if q + 1 < n and text[q + 1] == "'":
                    buf.append("'")
                    j = q + 2
                    continue
                i = q + 1
                break
            out[name] = "".join(buf)
        else:
            sp = text.find(" ", i)
            sp = n if sp < 0 else sp
            raw = text[i:sp]
            i = sp
            if raw.startswith("B'") and raw.endswith("'"):
                raw = raw[2:-1]  # test_decoding prints bit and varbit values as B'...'
            out[name] = None if raw == "null" else UNCHANGED if raw == "unchanged-toast-datum" else raw
    return out, types


def _table_name(text: str, i: int) -> tuple[str, int]:
    """``schema.table`` (each part possibly quoted) at ``text[i:]``: the name as the decoder
    keys tables (the parts unquoted, joined by a dot) and the index after it."""
    schema, j = _identifier(text, i)
    assert text[j] == ".", (text, j)
    table, k = _identifier(text, j + 1)
    return f"{schema}.{table}", k


#: A partition of a generated partitioned table, and its root (generator.py's names).
_PARTITION = re.compile(r"^(public\.t\d+)_p(?:1|d)$")
MARKER_PREFIX = "torture-pub"


class Published:
    """Which tables the publication publishes, and under which name, as the workload's
    marker messages (generator.marker) change it along test_decoding's output."""

    def __init__(self, publication: Any) -> None:
        self.all_tables = publication is None or publication.all_tables
        self.via_root = publication is not None and publication.via_root
        self.listed: set[str] = set()
        self.detached: set[str] = set()

    def marker(self, content: str) -> None:
        verb, name, *rest = content.split("\t")
        if verb == "add":
            self.listed.add(name)
        elif verb == "drop":
            self.listed.discard(name)
        elif verb == "detach":
            self.detached.add(name)
        elif verb == "attach":
            self.detached.discard(name)
        elif verb == "rename" and name in self.listed:
            # A table renamed or moved to another schema stays in the publication.
            self.listed.discard(name)
            self.listed.add(rest[0])

    def name(self, table: str) -> str | None:
        """The name pgoutput publishes a change of ``table`` under; None: not published."""
        m = _PARTITION.match(table)
        root = m.group(1) if m and table not in self.detached else None
        if not self.all_tables and table not in self.listed and (root is None or root not in self.listed):
            return None
        return root if root is not None and self.via_root else table


@dataclasses.dataclass
class Expected:
    """What test_decoding printed: the changes pgoutput publishes, in commit order, the
    logical messages, and each committed transaction's commit time by xid."""

    changes: list[Change]
    messages: list[Message]
    commits: dict[int, str]
    #: (prefix, content) of transactional messages a capture may hold beyond these: those of
    #: savepoints rolled back after pgoutput streamed them (generator.rolled_back_messages).
    may_add: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)

    # The change list behaves as before for callers that only need the changes.
    def __iter__(self) -> Any:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)


_COMMIT = re.compile(r"^COMMIT (\d+)(?: \(at (.+)\))?$")


def parse_test_decoding(lines: Iterable[str], publication: Any = None, codec: str = "utf-8") -> Expected:
    """Every change line of test_decoding's output that pgoutput publishes (``publication``:
    the workload's generator.Publication), in order, under the name pgoutput gives it; read
    with ``include-xids`` and ``include-timestamp`` on, the changes carry their
    transaction's xid and commit time. A logical message's content is printed as text; it
    is bytes as stored, in the database's encoding (``codec``, Python's name of it)."""
    changes: list[Change] = []
    messages: list[Message] = []
    commits: dict[int, str] = {}
    pub = Published(publication)
    xid: int | None = None
    open_changes: list[Change] = []
    for line in lines:
        if line.startswith("BEGIN"):
            parts = line.split()
            xid = int(parts[1]) if len(parts) > 1 else None
            open_changes = []
            continue
        m = _COMMIT.match(line)
        if m or line == "COMMIT":
            ts = m.group(2) if m else None
            if m:
                commits[int(m.group(1))] = ts or ""
            for c in open_changes:
                c.commit_ts = ts
            open_changes, xid = [], None
            continue
        if line.startswith("message: "):
            head, _, content = line.partition(" content:")
            transactional = head.startswith("message: transactional: 1")
            prefix = head.split(" prefix: ", 1)[1].rsplit(", sz: ", 1)[0]
            messages.append(Message(transactional, prefix, content.encode(codec), xid if transactional else None,
                                    len(changes)))
            if prefix == MARKER_PREFIX:
                pub.marker(content)
            continue
        if not line.startswith("table "):
            continue
        i = len("table ")
        names = []
        while True:
            name, i = _table_name(line, i)
            names.append(name)
            if line.startswith(", ", i):
                i += 2
                continue
            break
        assert line.startswith(": ", i), line
        op, _, body = line[i + 2:].partition(": ")
        op = op.lower()
        if op == "truncate":
            published_names = [n for n in (pub.name(t) for t in names) if n is not None]
            if published_names:
                change = Change(", ".join(published_names), op, {}, xid=xid)
                changes.append(change)
                open_changes.append(change)
            continue
        published = pub.name(names[0])
        if published is None:
            continue
        old = None
        if body.startswith("old-key: "):
            old_text, _, new_text = body[len("old-key: "):].partition(" new-tuple: ")
            old, body = _values(old_text)[0], new_text
        elif body.startswith("(no-tuple-data)"):
            body = ""
        values, types = _values(body)
        change = Change(published, op, values, old, types, xid)
        changes.append(change)
        open_changes.append(change)
    return Expected(changes, messages, commits)


@dataclasses.dataclass
class Decoded:
    """One decoded change with its values as PostgreSQL's text (or, for a path whose types
    are not the decoder's, as :func:`values.from_output` reads them: ``typed``)."""

    table: str
    op: str
    commit: int
    seq: int
    values: dict[str, Any]
    special: dict[str, str]
    unchanged: list[str]
    before: dict[str, Any] | None
    types: dict[str, str]
    xid: int | None = None
    commit_ts: str | None = None
    typed: bool = False
    arrow_types: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: From a binary-mode stream: an enum or composite is its send bytes (no text).
    binary: bool = False


#: The workload's own types: in binary mode their values are send bytes, which have no
#: PostgreSQL text (README's known limits); the typed paths skip them there.
USER_TYPES = {"mood", "pair"}


def _text_columns(table: pa.Table) -> tuple[list[str], pa.Table]:
    cols = [c for c in table.column_names if c not in META]
    return cols, pa.table(_internal.pg_text(table.select(cols)))


def decoded_changes(changes: Any) -> list[Decoded]:
    """Every row change of every table version (the names each column had then), and every
    TRUNCATE, in commit order."""
    return decoded_from(changes.table_versions, changes.truncates)


def decoded_from(tables: dict[str, list[Any]], truncates: pa.Table | None) -> list[Decoded]:
    """Every row change of ``tables`` (name → tables or batches in the decoder's types, each
    of one schema) and every TRUNCATE of ``truncates``, in commit order."""
    out: list[Decoded] = []
    for name, versions in tables.items():
        for table in versions:
            if table.num_rows == 0:
                continue
            if isinstance(table, pa.RecordBatch):
                table = pa.Table.from_batches([table])
            cols, texts = _text_columns(table)
            ty = {c: (table.schema.field(c).metadata or {}).get(b"pg.type_name", b"").decode() for c in cols}
            binary_raw = {c for c in cols if pa.types.is_binary(table.schema.field(c).type)
                          or pa.types.is_binary_view(table.schema.field(c).type)}
            # A live stream unifies as it goes: a column of the workload's own type whose
            # versions were unified to text holds, from a binary stream, the send bytes'
            # ``\\x`` hex (no PostgreSQL text, as binary_raw above).
            hex_raw = {c for c in cols if _unified_user_type(table.schema.field(c))}
            before = table.column("_before")
            before_text = None
            if before.null_count < table.num_rows:
                flat = pa.table({f.name: pa.chunked_array([c.field(i) for c in before.chunks], type=f.type)
                                 for i, f in enumerate(before.type)})
                before_text = pa.table(_internal.pg_text(flat)).to_pylist()
            before_valid = before.is_valid().to_pylist()
            rows = texts.to_pylist()
            meta = table.select(["_op", "_commit_lsn", "_seq", "_unchanged", "_special", "_xid"]).to_pylist()
            stamps = pa.table(_internal.pg_text(table.select(["_commit_ts"]))).column(0).to_pylist()
            for i, (row, m) in enumerate(zip(rows, meta)):
                values = {c: ("<raw>" if (c in binary_raw and ty[c] != "bytea")
                              or (c in hex_raw and isinstance(v, str) and v.startswith("\\x")) else v)
                          for c, v in row.items()}
                b = before_text[i] if before_text is not None and before_valid[i] else None
                out.append(Decoded(name, m["_op"], m["_commit_lsn"], m["_seq"], values,
                                   dict(m["_special"] or []), m["_unchanged"] or [], b, ty, m["_xid"], stamps[i]))
    if truncates is not None and truncates.num_rows:
        for rels, commit, seq in zip(truncates.column("relations").to_pylist(),
                                     truncates.column("_commit_lsn").to_pylist(),
                                     truncates.column("_seq").to_pylist()):
            out.append(Decoded(", ".join(rels), "truncate", commit, seq, {}, {}, [], None, {}))
    out.sort(key=lambda d: (d.commit, d.seq))
    return out


def _same(ours: Any, theirs: str | None, pg_type: str, typed: bool = False, arrow_type: Any = None) -> bool:
    if typed:
        # A path in its own types (Spark, jsonl, Delta): both sides read by values.py. A
        # special value arrives as PostgreSQL's text (``_special`` or jsonl's in-place text).
        if isinstance(ours, str) and ours == theirs:
            return True
        try:
            return bool(values.from_output(ours, pg_type, arrow_type) == values.from_pg_text(theirs, pg_type))
        except (values.Unreadable, ValueError, KeyError, TypeError, AssertionError, IndexError, AttributeError):
            return False
    if ours == theirs:
        return True
    if ours is None or theirs is None:
        return False
    if pg_type in ("bool", "boolean"):
        return {"t": "true", "f": "false"}.get(ours) == theirs
    return False


def _same_widened(ours: Any, theirs: str | None, was: str, got: Decoded, column: str) -> bool:
    """A value in PostgreSQL's text of the type its column has in an output that unified the
    column's versions as it went (a live stream): ``theirs`` of the type the change was
    made under (``was``), widened to the output's (a date in a timestamp column)."""
    now = values.format_type(got.types.get(column, ""))
    if got.typed or not was or not now or was == now or ours is None or theirs is None:
        return False
    try:
        return values.widened(values.from_pg_text(theirs, was), was, now) == values.from_pg_text(ours, now)
    except (values.Unreadable, ValueError, KeyError, TypeError, AssertionError, IndexError):
        return False


def compare_changes(expected: Any, decoded: list[Decoded], label: str,
                    renames: dict[str, dict[str, str]] | None = None) -> tuple[int, list[str]]:
    """(values compared, mismatches) of every decoded change against test_decoding's: the
    table, operation and order, each value and old value, the transaction's xid and commit
    time. ``renames``: per table, a column's name → its newest name, for an output that
    keeps one unified schema per table (CLI Parquet, Delta)."""
    problems: list[str] = []
    compared = 0
    expected = list(expected)
    if len(expected) != len(decoded):
        problems.append(f"{label}: {len(decoded)} changes decoded, test_decoding printed {len(expected)}")
    for k, (want, got) in enumerate(zip(expected, decoded)):
        where = f"{label}: change #{k} ({want.table} {want.op})"
        same_table = want.table == got.table or (
            want.op == "truncate" and sorted(want.table.split(", ")) == sorted(got.table.split(", ")))
        if not same_table or want.op != got.op:
            problems.append(f"{where}: decoded {got.table} {got.op} instead")
            break
        if want.xid is not None and got.xid is not None and want.xid != got.xid:
            problems.append(f"{where}: _xid = {got.xid}, PostgreSQL's transaction is {want.xid}")
        if want.commit_ts is not None and got.commit_ts is not None:
            compared += 1
            if not _same(got.commit_ts, want.commit_ts, "timestamp with time zone", got.typed):
                problems.append(f"{where}: _commit_ts = {got.commit_ts!r}, PostgreSQL committed at "
                                f"{want.commit_ts!r}")
        names = renames_of(want.table, renames)
        for col, text in want.new.items():
            have = _column_of(col, got, names)
            if have not in got.values and col in names:
                # Renamed more than once, the last rename never announced for this table (a
                # partition with no change after its root's rename): the output has one of
                # the names in between (each rename's name is new).
                between = [k for k, v in names.items() if v == names[col] and k in got.values]
                if len(between) == 1:
                    have = between[0]
            if have not in got.values:
                problems.append(f"{where}: column {col} printed by PostgreSQL is missing from the output")
                continue
            compared += 1
            if text == UNCHANGED:
                if have not in got.unchanged:
                    problems.append(f"{where}: {col} is an unchanged TOAST value, not in _unchanged")
                continue
            if got.values[have] == "<raw>" or (got.typed and got.binary and want.types.get(col) in USER_TYPES):
                continue  # an undecoded type in binary mode: its send bytes
            ours = got.special.get(have, got.values[have])
            pg_type = want.types.get(col, "") if got.typed else got.types.get(have, "")
            if not (_same(ours, text, pg_type, got.typed, got.arrow_types.get(have))
                    or _same_widened(ours, text, want.types.get(col, ""), got, have)):
                problems.append(f"{where}: {col} = {ours!r}, PostgreSQL printed {text!r}")
        if want.old is not None and want.op == "update":
            for col, text in want.old.items():
                have = _column_of(col, got, names, before=True)
                compared += 1
                ours = got.special.get(f"_before.{have}", None if got.before is None else got.before.get(have))
                if got.values.get(have) == "<raw>" or (got.typed and got.binary and want.types.get(col) in USER_TYPES):
                    continue
                pg_type = want.types.get(col, "") if got.typed else got.types.get(have, "")
                if not (_same(ours, text, pg_type, got.typed, got.arrow_types.get(have))
                        or _same_widened(ours, text, want.types.get(col, ""), got, have)):
                    problems.append(f"{where}: old {col} = {ours!r}, PostgreSQL printed {text!r}")
        if len(problems) > 20:
            break
    return compared, problems


def renames_of(table: str, renames: dict[str, dict[str, str]] | None) -> dict[str, str]:
    """``table``'s column renames (a name → its newest name): its own, or for a partition its
    root's (a partition's columns are renamed with its root's)."""
    names = (renames or {}).get(table, {})
    m = _PARTITION.match(table)
    if not names and m:
        names = (renames or {}).get(m.group(1), {})
    return names


def _column_of(col: str, got: Decoded, names: dict[str, str], before: bool = False) -> str:
    """The output column of PostgreSQL's column ``col`` in change ``got``: its name, else its
    newest name (``names``). A unified output can have both: a column dropped and kept under
    its name, and a later column of that name renamed since (``c`` dropped, ``c`` added,
    renamed ``c_r2``). A row has a value in one of them at most (the first is null from its
    drop on, the second before its add): the one holding this row's value (``before``: its
    old value), the same name when neither does."""
    renamed = names.get(col, col)
    if col not in got.values:
        return renamed
    if renamed == col or renamed not in got.values:
        return col

    def holds(c: str) -> bool:
        if before:
            return (got.before or {}).get(c) is not None or f"_before.{c}" in got.special
        return got.values[c] is not None or c in got.special or c in got.unchanged

    return renamed if holds(renamed) and not holds(col) else col


def compare_messages(expected: Expected, got: list[tuple[bool, str, bytes, int | None]],
                     label: str, ordered: bool = False) -> tuple[int, list[str]]:
    """(messages compared, mismatches) of a path's logical messages (transactional, prefix,
    content, xid or None) against test_decoding's, as multisets (a non-transactional
    message's place among transactions is when it was decoded, not a commit order); the
    xid of each transactional one where test_decoding printed it (PostgreSQL 15's
    test_decoding prints no BEGIN before a message that is its transaction's only change
    under skip-empty-xacts). ``ordered``: a path whose messages table is in the decoding
    order (a decoder's, in order or any order) has them in test_decoding's order too: a
    transaction's at its commit, a non-transactional one where the server decoded it."""
    want = sorted((m.transactional, m.prefix, m.content) for m in expected.messages)
    have = sorted((t, p, c) for t, p, c, _ in got)
    in_order = [(t, p, c) for t, p, c, _ in got]
    allowed = Counter((True, p, c) for p, c in expected.may_add)
    extra = Counter(have) - Counter(want)
    if extra and not extra - allowed:
        # Streamed before their savepoint was rolled back: PostgreSQL sent them.
        for m, n in extra.items():
            for _ in range(n):
                have.remove(m)
    problems = []
    if want != have:
        missing = [m for m in want if m not in have]
        extra = [m for m in have if m not in want]
        problems.append(f"{label}: messages differ from test_decoding's: missing {missing[:3]}, "
                        f"extra {extra[:3]} ({len(have)} decoded, {len(want)} printed)")
    elif ordered and len(in_order) == len(want):
        printed = [(m.transactional, m.prefix, m.content) for m in expected.messages]
        k = next((k for k, (a, b) in enumerate(zip(in_order, printed)) if a != b), None)
        if k is not None:
            problems.append(f"{label}: message #{k} is {in_order[k][:2]}, test_decoding printed "
                            f"{printed[k][:2]} there (the same messages in another order)")
    with_xid = Counter((m.prefix, m.content, m.xid) for m in expected.messages if m.transactional and m.xid is not None)
    have_xid = Counter((p, c, x) for t, p, c, x in got if t)
    wrong = [k for k, n in with_xid.items() if have_xid[k] < n]
    if wrong:
        problems.append(f"{label}: transactional messages without their transaction's xid: {wrong[:3]}")
    return len(want), problems


def compare_message_places(expected: Expected, places: list[tuple[bool, str, bytes, int]],
                           label: str) -> tuple[int, list[str]]:
    """(messages compared, mismatches) of where an output that interleaves messages with
    changes (pgoutput-dump's jsonl) puts each message: after as many changes as test_decoding
    printed before it. ``places``: (transactional, prefix, content, changes before it), in
    the output's order. Checked when the output has exactly test_decoding's messages."""
    printed = [(m.transactional, m.prefix, m.content, m.after) for m in expected.messages]
    if any(m[3] is None for m in printed) or [p[:3] for p in places] != [m[:3] for m in printed]:
        return 0, []  # compare_messages says what differs
    k = next((k for k, (a, b) in enumerate(zip(places, printed)) if a[3] != b[3]), None)
    if k is None:
        return len(places), []
    return len(places), [f"{label}: message #{k} {places[k][:2]} comes after {places[k][3]} changes, "
                         f"test_decoding printed it after {printed[k][3]}"]


def published_columns(expected: list[Change]) -> dict[str, set[str]]:
    """Per table, the columns of its last published insert or update: a column added or
    renamed after it was never announced by the stream (pgoutput sends a Relation message
    only before a change), so the output cannot have it yet."""
    out: dict[str, set[str]] = {}
    for c in expected:
        if c.op in ("insert", "update"):
            out[c.table] = set(c.new)
    return out


def _unified_user_type(field: pa.Field) -> bool:
    """Whether ``field`` is a column of one of the workload's own types unified to text."""
    md = field.metadata or {}
    return md.get(b"pg.unified") == b"text" and md.get(b"pg.type_name", b"").decode() in USER_TYPES


def unified_raw_columns(tables: dict[str, pa.Table]) -> set[tuple[str, str]]:
    """(table, column) of a binary live stream's tables whose column of the workload's own
    type was unified to text: its send bytes show as ``\\x`` hex there (raw_text_columns
    for a stream that unifies as it goes)."""
    return {(name, f.name) for name, table in tables.items() for f in table.schema if _unified_user_type(f)}


def raw_text_columns(changes: Any) -> set[tuple[str, str]]:
    """(table, column) whose unified column is text (``pg.unified``) while a version held an
    undecoded type's binary send bytes (an enum or composite in binary mode): those bytes
    have no PostgreSQL text to show but ``\\x`` hex, so the final state cannot equal the
    server's text there (documented in README's known limits); every change is still
    compared with test_decoding."""
    out: set[tuple[str, str]] = set()
    for name, versions in changes.table_versions.items():
        unified = changes.tables.get(name)
        if unified is None:
            continue
        for v in versions:
            for f in v.schema:
                md = f.metadata or {}
                if b"pg.type_oid" in md and md.get(b"pg.type_name") != b"bytea" and (
                        pa.types.is_binary(f.type) or pa.types.is_binary_view(f.type)):
                    out.add((name, f.name))
    return {(t, c) for t, c in out if c in changes.tables[t].column_names
            and (changes.tables[t].schema.field(c).metadata or {}).get(b"pg.unified") == b"text"}


def compare_final(conn: Any, tables: dict[str, pa.Table], truncates: pa.Table, label: str,
                  expected: list[Change], comparable: Any = None,
                  skip: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
                  publication: Any = None) -> tuple[int, list[str]]:
    """(values compared, mismatches) of the replayed state against the server's rows, over
    the columns the stream announced (:func:`published_columns`), for the tables published
    the whole time (a partitioned table as its root when published through it, else as
    its partitions)."""
    announced = published_columns(expected)
    problems: list[str] = []
    compared = 0
    with conn.cursor() as cur:
        via_root = publication is not None and publication.via_root
        kinds = "c.relkind IN ('r', 'p') AND NOT c.relispartition" if via_root else "c.relkind = 'r'"
        cur.execute("SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
                    f"c.relnamespace WHERE {kinds} AND n.nspname NOT IN ('pg_catalog', 'information_schema', "
                    "'pg_toast')")
        partial = publication.partial if publication is not None else frozenset()
        server_tables = [r[0] for r in cur.fetchall() if r[0] not in partial]
    # Only those: a partition published on its own while detached, or a table published
    # part of the time, has changes of rows it never saw inserted.
    replayed = {name: t for name, t in tables.items() if name in server_tables}
    keys = {name: ["id"] for name in replayed}
    try:
        states = replay(types.SimpleNamespace(tables=replayed, truncates=truncates), keys)  # type: ignore[arg-type]
    except AssertionError as e:  # a change of a row the replay never saw: a finding
        return 0, [f"{label}: {e}"]
    for name in server_tables:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM " + quoted(name))
            n = cur.fetchone()[0]
        if name not in tables:
            if n:
                problems.append(f"{label}: {name} has {n} rows in PostgreSQL and none decoded")
            continue
        table = tables[name]
        if n == 0:
            # Nothing to read typed: a column retyped after the table's last change was
            # never announced (the retyping DDL publishes the rows it rewrites, if any).
            if states[name].values():
                problems.append(f"{label}: {name} is empty in PostgreSQL, the replay has "
                                f"{len(states[name].values())} rows")
            continue
        # Rows whose value was special: compared as text with PostgreSQL's output.
        special_cols = _special_columns(table)
        cols = [c for c in server_columns(conn, name) if c in announced.get(name, set())]
        missing = [c for c in cols if c not in data_columns(table)]
        if missing:
            problems.append(f"{label}: {name}: columns {missing} of PostgreSQL are missing from the output")
        plain = [c for c in cols if c not in missing and c not in special_cols and (name, c) not in skip
                 and (comparable is None or comparable(table.schema.field(c).type))]
        try:
            compare_state(_project(states[name], plain), server_rows(conn, name, table, plain), f"{label}: {name}")
        except Exception as e:  # noqa: BLE001  (a mismatch, or the server refusing to read the rows as typed)
            text = str(e)
            if isinstance(e, AssertionError) and "differing columns" in text:
                # The rows are long: the columns that differ say more.
                head, _, detail = text.partition("; only in replay:")
                text = head + "; differing columns" + detail.rsplit("differing columns", 1)[1]
            problems.append(text[:2000] if isinstance(e, AssertionError) else f"{label}: {name}: {type(e).__name__}: {e}"[:2000])
        compared += n * len(cols)
    return compared, problems


def server_columns(conn: Any, name: str) -> list[str]:
    """The columns of table ``name`` in PostgreSQL now, in their order (none: dropped since)."""
    with conn.cursor() as cur:
        cur.execute("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
                    "AND NOT attisdropped ORDER BY attnum", (quoted(name),))
        return [r[0] for r in cur.fetchall()]


def quoted(name: str) -> str:
    """``schema.table`` (the decoder's key; the schema holds no dot) as SQL."""
    schema, table = name.split(".", 1)
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


def _special_columns(table: pa.Table) -> set[str]:
    out: set[str] = set()
    for entries in table.column("_special").to_pylist():
        for k, _ in entries or []:
            if not k.startswith("_before."):
                out.add(k)
    return out


def _project(state: Any, cols: list[str]) -> Any:
    class View:
        def values(self) -> list[dict[str, Any]]:
            return [{c: r.get(c) for c in cols} for r in state.values()]
    return View()


def unify_outputs(outputs: list[pgoutput_arrow.Output], rest: pgoutput_arrow.Changes) -> dict[str, pa.Table]:
    """A Decoder's batches, as a sink would keep them: per table, every batch brought to
    the unified schema of the versions (in the order they were last in force)."""
    by_table: dict[str, list[pa.RecordBatch]] = {}
    for o in outputs:
        if o.kind == "table" and o.table is not None:
            by_table.setdefault(o.table, []).append(o.batch)
    for name, t in rest.tables.items():
        by_table.setdefault(name, []).extend(t.to_batches())
    return unify_batches(by_table)


def unify_batches(by_table: dict[str, list[pa.RecordBatch]]) -> dict[str, pa.Table]:
    """Per table, every batch brought to the unified schema of its versions (in the order
    they were last in force), as a sink keeps them."""
    tables = {}
    for name, batches in by_table.items():
        if not batches:
            continue
        schemas: dict[Any, pa.Schema] = {}
        for b in batches:
            # pg.version counts a session's Relation messages: a restarted live stream
            # counts again from 1, so the schema itself is part of the key.
            key = ((b.schema.metadata or {}).get(b"pg.version", b""), b.schema.to_string(show_schema_metadata=False))
            schemas.pop(key, None)
            schemas[key] = b.schema
        unified = pgoutput_arrow.unify_schemas(list(schemas.values()))
        tables[name] = pa.concat_tables([pgoutput_arrow.conform(b, unified) for b in batches])
    return tables


def filter_expected(everything: Expected, filtered: Any) -> Expected:
    """What the second publication (generator.Filtered: one table, a column list, the row
    filter ``id % 3 <> 0``) publishes of test_decoding's changes (read without a
    publication): the table's changes whose row (the old key for a DELETE) passes the
    filter, with the listed columns only; its TRUNCATEs."""
    keep = set(filtered.columns)
    out = []
    for c in everything.changes:
        if c.op == "truncate":
            if filtered.table in c.table.split(", "):
                out.append(dataclasses.replace(c, table=filtered.table))
            continue
        if c.table != filtered.table:
            continue
        row = c.new
        if row.get("id") is None or int(row["id"]) % 3 == 0:
            continue
        out.append(dataclasses.replace(
            c, new={k: v for k, v in c.new.items() if k in keep},
            old=None if c.old is None else {k: v for k, v in c.old.items() if k in keep},
            types={k: v for k, v in c.types.items() if k in keep}))
    # Fewer changes: a message's place among them is not test_decoding's count.
    messages = [dataclasses.replace(m, after=None) for m in everything.messages]
    return Expected(out, messages, everything.commits, everything.may_add)
