"""Seeded random workloads: tables, DML, DDL and transaction shapes, as SQL.

A :class:`Workload` is a list of :class:`Step` s, each one transaction (or one interleaved
pair of transactions, or a prepared transaction finished later), written as plain SQL so
that a failure can be printed and replayed by hand. The same seed gives the same SQL.

What it draws from:

* tables of 1-12 columns (``id int PRIMARY KEY`` first) of the types in :data:`TYPES`:
  integers, floats with NaN/±Infinity/-0, numeric with and without a typmod, text with
  empty and TOAST-sized values, varchar, bool, date/time/timestamp(tz) with ±infinity and
  BC, interval, uuid, jsonb, bytea, int4[] and text[] with NULL elements, an enum, a domain,
  a composite, inet; NULLs everywhere;
* special values PostgreSQL accepts but an Arrow type cannot hold: ``time '24:00:00'``,
  ``NaN`` in ``numeric(10,2)``, timestamps after 294247 AD, arrays with a lower bound other
  than 1 or of another depth than the column's other values;
* DDL between transactions: ADD COLUMN, DROP COLUMN, RENAME COLUMN, ALTER COLUMN TYPE (to
  a type whose text output is the same value's), a dropped column re-added under its name
  with another type, REPLICA IDENTITY FULL/DEFAULT, TRUNCATE (RESTART IDENTITY, CASCADE);
* publications: ``FOR ALL TABLES`` or a list of tables, tables added to and dropped from the
  list while the workload runs; partitioned tables (a range partition and a default one),
  the partition detached, written to on its own and attached again; partitions published as
  themselves or through their root (``publish_via_partition_root``). Each publication or
  partition change commits with a logical message (prefix ``torture-pub``) that tells the
  oracle, in test_decoding's output, from where on it holds;
* transactions: plain, with savepoints rolled back or released, aborted, big enough to be
  streamed (``logical_decoding_work_mem`` is 64 kB on the test servers), prepared and then
  committed or rolled back later, two connections interleaved; logical messages
  (transactional or not); transactions with a replication origin.

DDL that rewrites existing rows (re-adding a column, changing a type) is followed by an
UPDATE of every row: logical replication does not publish a rewrite, so only then do the
published changes determine the rows PostgreSQL holds.
"""

from __future__ import annotations

import dataclasses
import random
import string
from typing import Callable

Literal = Callable[[random.Random], str]


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _text(r: random.Random) -> str:
    roll = r.random()
    if roll < 0.08:
        return "''"
    if roll < 0.14:
        # TOAST-sized and incompressible: md5 chunks of a random seed.
        n = r.randint(60, 140)
        return f"(SELECT string_agg(md5('{r.random()}' || g), '') FROM generate_series(1, {n}) g)"
    chars = string.ascii_letters + string.digits + " '\"\\,{}éß€"
    return _q("".join(r.choice(chars) for _ in range(r.randint(1, 24))))


def _int(lo: int, hi: int) -> Literal:
    return lambda r: str(r.choice([lo, hi, 0, -1, 1, r.randint(lo, hi)]))


def _float(r: random.Random) -> str:
    return r.choice(["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", repr(r.uniform(-1e6, 1e6)), "1e-300"])


def _numeric(r: random.Random) -> str:
    return r.choice(["'NaN'", "0", "-0.0000001", "123456789012345678901234567890.123456789",
                     f"{r.randint(-10**6, 10**6)}.{r.randint(0, 99):02d}"])


def _numeric_10_2(r: random.Random) -> str:
    # NaN is special in numeric(10,2): no decimal128 value holds it.
    return r.choice(["'NaN'", f"{r.randint(-10**7, 10**7)}.{r.randint(0, 99):02d}", "0"])


def _date(r: random.Random) -> str:
    return r.choice(["'infinity'", "'-infinity'", "'0044-03-15 BC'", "'2000-02-29'",
                     f"'{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}'"])


def _time(r: random.Random) -> str:
    return r.choice(["'24:00:00'", "'00:00:00'", f"'{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
                     f"{r.randint(0, 59):02d}.{r.randint(0, 999999):06d}'"])


def _timestamp(r: random.Random) -> str:
    return r.choice(["'infinity'", "'-infinity'", "'294276-12-31 23:59:59'", "'4713-01-01 00:00:00 BC'",
                     f"'{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                     f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999):03d}'"])


def _timestamptz(r: random.Random) -> str:
    return r.choice(["'infinity'", f"'{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-"
                     f"{r.randint(1, 28):02d} 12:34:56.789+05:30'", "'2024-06-01 00:00:00-03:30'"])


def _interval(r: random.Random) -> str:
    return r.choice(["'1 year 2 mons 3 days 04:05:06.7'", "'-3 days'", "'00:00:00'",
                     f"'{r.randint(-1000, 1000)} hours {r.randint(0, 59)} minutes'"])


def _uuid(r: random.Random) -> str:
    return _q("%08x-%04x-%04x-%04x-%012x" % (r.getrandbits(32), r.getrandbits(16), r.getrandbits(16),
                                             r.getrandbits(16), r.getrandbits(48)))


def _jsonb(r: random.Random) -> str:
    return r.choice(["'{}'", "'[1, \"a\", null]'", '\'{"k": "v\\\\u00e9", "n": 1.5}\'', "'\"s\"'"])


def _bytea(r: random.Random) -> str:
    return r.choice(["'\\x'", "'\\x00ff10'", f"decode('{r.getrandbits(64):016x}', 'hex')"])


def _int_array(r: random.Random) -> str:
    # '[0:1]={1,2}' (a lower bound other than 1) and a 2-D value in a 1-D column are special.
    return r.choice(["'{}'", "'{1,NULL,3}'", "'{-5}'", "'[0:1]={1,2}'", "'{{1,2},{3,4}}'",
                     f"ARRAY[{r.randint(-9, 9)}, {r.randint(-9, 9)}]"])


def _text_array(r: random.Random) -> str:
    return r.choice(["'{}'", "'{a,NULL,\"b c\",\"\"}'", "ARRAY['x,y', 'q\"z', 'NULL']"])


def _bool(r: random.Random) -> str:
    return r.choice(["true", "false"])


def _enum(r: random.Random) -> str:
    return r.choice(["'sad'", "'ok'", "'happy'"])


def _pair(r: random.Random) -> str:
    return r.choice(["ROW(1, 'a')::pair", "ROW(NULL, 'b c')::pair", "ROW(-7, NULL)::pair"])


def _inet(r: random.Random) -> str:
    return r.choice(["'10.0.0.1'", "'192.168.0.0/16'", "'::1'", "'2001:db8::/32'"])


def _float4(r: random.Random) -> str:
    return r.choice(["'NaN'", "'-Infinity'", "'-0'", "1.1", repr(r.uniform(-1e6, 1e6)), "3.4e38", "1e-45"])


def _numeric_inf(r: random.Random) -> str:
    # ±Infinity (PostgreSQL 14+): text in a numeric without typmod.
    return r.choice(["'Infinity'", "'-Infinity'", "'NaN'", f"{r.randint(-999, 999)}.{r.randint(0, 9)}"])


def _choice(*values: str) -> Literal:
    return lambda r: r.choice(list(values))


def _array(element: Literal, pg_type: str) -> Literal:
    def gen(r: random.Random) -> str:
        items = [element(r) if r.random() < 0.85 else "NULL" for _ in range(r.randint(0, 3))]
        return f"ARRAY[{', '.join(items)}]::{pg_type}" if items else "'{}'"
    return gen


#: name → value generator. The types of README's table, one of each family.
TYPES: dict[str, Literal] = {
    "int2": _int(-32768, 32767),
    "int4": _int(-2**31, 2**31 - 1),
    "int8": _int(-2**63, 2**63 - 1),
    "float8": _float,
    "numeric": _numeric,
    "numeric(10,2)": _numeric_10_2,
    "text": _text,
    "varchar(30)": lambda r: _q("".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(0, 30)))),
    "bool": _bool,
    "date": _date,
    "time": _time,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
    "interval": _interval,
    "uuid": _uuid,
    "jsonb": _jsonb,
    "bytea": _bytea,
    "int4[]": _int_array,
    "text[]": _text_array,
    "mood": _enum,
    "posint": lambda r: str(r.randint(1, 10**6)),
    "pair": _pair,
    "inet": _inet,
    "varchar(60)": lambda r: _q("".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(0, 60)))),
    "numeric(12,2)": _numeric_10_2,
    "float4": _float4,
    "char(5)": _choice("'ab'", "''", "'abcde'", "'é ß'"),
    "json": _choice("""'{"b": 1,  "a": [true, null]}'""", "'[]'", """'"x"'""", "'  {}  '"),
    "timetz": _choice("'12:34:56.789+05:30'", "'00:00:00-03'", "'24:00:00+00'", "'23:59:59.999999-12:45'"),
    "money": _choice("'1234.56'", "'-0.01'", "'0'", "'92233720368547758.07'"),
    "bit(8)": _choice("B'10101010'", "B'00000000'", "B'11111111'"),
    "varbit(16)": _choice("B''", "B'1'", "B'1010101010101010'"),
    "cidr": _choice("'10.0.0.0/8'", "'2001:db8::/32'", "'192.168.1.0/24'"),
    "macaddr": _choice("'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'"),
    "int4range": _choice("'[1,10)'", "'empty'", "'(,5]'", "'[3,)'"),
    "tstzrange": _choice("'[2024-01-01 00:00+00,2024-02-01 00:00+00)'", "'(,infinity)'"),
    "int4multirange": _choice("'{}'", "'{[1,3), [5,9)}'", "'{(,0]}'"),
    "numeric_inf": _numeric_inf,
    "tsvector": _choice("'a fat cat'", "$$'quoted' b:1A c$$", "''"),
    "pg_lsn": _choice("'0/0'", "'16/B374D848'", "'FFFFFFFF/FFFFFFFF'"),
    "oid": _choice("0", "4294967295", "12345"),
    "date[]": _array(_date, "date[]"),
    "timestamp[]": _array(_timestamp, "timestamp[]"),
    "numeric[]": _array(_numeric, "numeric[]"),
    "uuid[]": _array(_uuid, "uuid[]"),
    "xml": _choice("""'<a b="1">x</a>'""", "'text only'", "'<e/>'"),
}

#: Generator names that are not a type's SQL name.
SQL_TYPE = {"numeric_inf": "numeric"}

#: Types only some servers have (xml needs a server built with libxml: run.py asks).
OPTIONAL_TYPES = {"xml"}


def sql_type(name: str) -> str:
    return SQL_TYPE.get(name, name)

#: ALTER COLUMN ... TYPE pairs whose new value prints like the old one (or is the old one
#: widened): the rewrite keeps every value, so replaying the stream stays exact.
RETYPE: dict[str, list[str]] = {
    "int2": ["int4", "int8"],
    "int4": ["int8", "numeric", "text"],
    "varchar(30)": ["text", "varchar(60)"],
    "numeric(10,2)": ["numeric(12,2)", "numeric"],
    "date": ["timestamp"],
    "bool": ["text"],
}

PRELUDE = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)",
    "CREATE TYPE pair AS (a int4, b text)",
    'CREATE SCHEMA "Other ""Sch"" X"',
    "CREATE SCHEMA s2",
    "SELECT pg_replication_origin_create('torture_origin') WHERE NOT EXISTS "
    "(SELECT 1 FROM pg_replication_origin WHERE roname = 'torture_origin')",
]


@dataclasses.dataclass
class Step:
    """One transaction's SQL (``sql``), how it ends, and on which connection.

    ``kind``: ``commit``, ``abort``, ``prepare`` (``gid`` set; a later step ``finish``
    commits or rolls it back), ``finish`` (``sql`` is the COMMIT/ROLLBACK PREPARED),
    ``ddl`` (autocommit statements), ``interleaved`` (``sql`` and ``other`` run on two
    connections statement by statement, then both commit in ``other_first`` order),
    ``message`` (a non-transactional logical message, autocommit), ``origin`` (committed
    with a replication origin set up on the session, as a replaying node does).
    """

    kind: str
    sql: list[str]
    other: list[str] = dataclasses.field(default_factory=list)
    gid: str = ""
    other_first: bool = False

    def script(self) -> str:
        """The step as a psql script (interleaved statements shown in their order)."""
        if self.kind in ("ddl", "message", "finish"):
            return "\n".join(s + ";" for s in self.sql)
        if self.kind == "interleaved":
            lines = ["-- two connections, A and B, statement by statement"]
            for i in range(max(len(self.sql), len(self.other))):
                if i < len(self.sql):
                    lines.append(f"-- A: {self.sql[i]};")
                if i < len(self.other):
                    lines.append(f"-- B: {self.other[i]};")
            lines.append("-- then " + ("B, A" if self.other_first else "A, B") + " commit")
            return "\n".join(lines)
        if self.kind == "origin":
            return "\n".join(["SELECT pg_replication_origin_session_setup('torture_origin');", "BEGIN;",
                              "SELECT pg_replication_origin_xact_setup('0/1234', now());",
                              *[s + ";" for s in self.sql], "COMMIT;",
                              "SELECT pg_replication_origin_session_reset();"])
        end = {"commit": "COMMIT;", "abort": "ROLLBACK;", "prepare": f"PREPARE TRANSACTION '{self.gid}';"}
        return "\n".join(["BEGIN;", *[s + ";" for s in self.sql], end[self.kind]])


#: Prefix of the logical messages that mark publication and partition changes.
MARKER = "torture-pub"

#: The start of a workload's transactional message (its content expression and ")" follow).
TRANSACTIONAL_MESSAGE = "SELECT pg_logical_emit_message(true, 'torture', "


def marker(*fields: str) -> str:
    """A transactional message telling the oracle of a publication or name change; its
    content is the fields separated by tabs (names may hold spaces)."""
    return f"SELECT pg_logical_emit_message(true, '{MARKER}', {_q(chr(9).join(fields))})"


def qi(name: str) -> str:
    """``name`` as a quoted identifier (every name is quoted: mixed case, spaces, dots and
    quotes are names too)."""
    return '"' + name.replace('"', '""') + '"'


@dataclasses.dataclass
class Column:
    name: str
    type: str

    @property
    def sql(self) -> str:
        return qi(self.name)


@dataclasses.dataclass
class Table:
    name: str
    columns: list[Column]
    next_id: int = 1
    full_identity: bool = False
    #: A partitioned table: its partition ``<name>_p1`` (ids below PARTITION_BOUND) and
    #: ``<name>_pd`` (the default).
    partitioned: bool = False
    published: bool = True
    schema: str = "public"
    #: No primary key: REPLICA IDENTITY DEFAULT then has no key, and PostgreSQL refuses
    #: UPDATE and DELETE of the table while it is published for them.
    keyless: bool = False
    #: "default", "full", "index" (USING INDEX on a unique index of id) or "nothing".
    identity: str = "default"

    @property
    def key(self) -> str:
        """The name the decoder and test_decoding give the table (unquoted parts)."""
        return f"{self.schema}.{self.name}"

    @property
    def sql(self) -> str:
        return f"{qi(self.schema)}.{qi(self.name)}"

    @property
    def inserts_only(self) -> bool:
        return self.keyless or self.identity == "nothing"


#: Ids below this go to a partitioned table's first partition.
PARTITION_BOUND = 40


@dataclasses.dataclass
class Publication:
    """How the workload's publication ``torture`` is made: for all tables or for a list
    (then changed by the steps), partitions through their root or as themselves."""

    all_tables: bool = True
    via_root: bool = False
    #: Tables whose final rows the stream cannot give (not published the whole time, or
    #: renamed: the changes then live under two names).
    partial: frozenset[str] = frozenset()

    def create(self) -> str:
        what = "FOR ALL TABLES " if self.all_tables else ""
        return f"CREATE PUBLICATION torture {what}WITH (publish_via_partition_root = {str(self.via_root).lower()})"


@dataclasses.dataclass
class Filtered:
    """A second publication ``torture_f`` (PostgreSQL 15+) of one table with a column list
    and a row filter ``id % 3 <> 0``: its own slot and capture, the oracle applies both to
    test_decoding's changes of the table."""

    table: str  # the key
    sql: str  # its quoted name
    columns: list[str]

    def create(self) -> str:
        return (f"CREATE PUBLICATION torture_f FOR TABLE {self.sql} ({', '.join(qi(c) for c in self.columns)}) "
                "WHERE (id % 3 <> 0)")


@dataclasses.dataclass
class Workload:
    seed: int
    steps: list[Step]
    publication: Publication = dataclasses.field(default_factory=Publication)
    #: (option set, message kind letter) → how many of them the captures must hold at least.
    expects: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    #: Per table key, each renamed column's name → its newest name.
    renames: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    filtered: Filtered | None = None

    def script(self) -> str:
        extra = [self.filtered.create() + ";"] if self.filtered is not None else []
        return "\n\n".join(["-- prelude", *[s + ";" for s in PRELUDE], self.publication.create() + ";", *extra]
                           + [s.script() for s in self.steps])

    def statements(self) -> int:
        return sum(len(s.sql) + len(s.other) for s in self.steps)

    def rolled_back_messages(self) -> list[str]:
        """The content (an SQL expression) of each transactional message emitted inside a
        savepoint that was rolled back while its transaction went on. test_decoding never
        prints one; pgoutput sends one that it streamed before the rollback, because it
        tags a streamed message with the top transaction's xid (``pgoutput_message``: "xid =
        txn->xid"), so its Stream Abort of the subtransaction cannot name it."""
        out: list[str] = []
        for step in self.steps:
            if step.kind == "abort":
                continue
            for statements in (step.sql, step.other):
                inside: list[str] | None = None  # in the savepoint (None: outside one)
                for sql in statements:
                    if sql == "SAVEPOINT s1":
                        inside = []
                    elif sql == "RELEASE SAVEPOINT s1":
                        inside = None
                    elif sql == "ROLLBACK TO SAVEPOINT s1" and inside is not None:
                        out += inside
                        inside = []  # the savepoint stays
                    elif sql.startswith(TRANSACTIONAL_MESSAGE) and inside is not None:
                        inside.append(sql[len(TRANSACTIONAL_MESSAGE):-1])
        return out


#: Column names besides the plain ``c<n>``: PostgreSQL takes any text as a quoted name.
ODD_COLUMN = ["C{n}Mixed", "c{n} sp.d", 'c{n}"q']
ODD_TABLE = ["T{n} Mixed Case", "t{n}.dotted", 't{n} "quoted"', "t{n} space"]
ODD_SCHEMA = ['Other "Sch" X', "s2"]

#: Columns added with a volatile default (the table is rewritten, each row its own value).
VOLATILE = [("float8", "random()"), ("timestamptz", "clock_timestamp()"), ("uuid", "gen_random_uuid()"),
            ("int4", "(random() * 1000)::int")]


class _Gen:
    def __init__(self, seed: int, types: list[str] | None = None) -> None:
        self.r = random.Random(seed)
        self.types = types or list(TYPES)
        self.tables: list[Table] = []
        self.col_counter = 0
        self.table_counter = 0
        self.gid_counter = 0
        self.pending_gids: list[str] = []
        # Publication and partition choices draw from their own generator, so that the rest
        # of a seed's workload is what it was before they existed.
        self.rp = random.Random(seed * 7919 + 1)
        self.publication = Publication(all_tables=self.rp.random() < 0.7, via_root=self.rp.random() < 0.5)
        self.partial: set[str] = set()
        # The shapes added for issue 21 draw from a generator of their own too.
        self.rs = random.Random(seed * 104729 + 3)
        self.expects: dict[tuple[str, str], int] = {}
        self.renames: dict[str, dict[str, str]] = {}
        #: Prepared transactions big enough to be streamed.
        self.big_gids: set[str] = set()
        #: The filtered publication's table: no DDL changes it.
        self.frozen: Table | None = None

    def expect(self, option_set: str, kind: str, n: int = 1) -> None:
        self.expects[(option_set, kind)] = self.expects.get((option_set, kind), 0) + n

    def is_published(self, t: Table) -> bool:
        return self.publication.all_tables or t.published

    def new_column(self) -> Column:
        self.col_counter += 1
        name = f"c{self.col_counter}"
        if self.rs.random() < 0.15:
            name = self.rs.choice(ODD_COLUMN).format(n=self.col_counter)
        return Column(name, self.r.choice(self.types))

    def create_table(self) -> Step:
        self.table_counter += 1
        n = self.table_counter
        t = Table(f"t{n}", [Column("id", "int4")])
        # 1 to 40 columns, most tables narrow.
        width = self.r.randint(0, 11) if self.r.random() < 0.8 else self.r.randint(12, 39)
        t.columns += [self.new_column() for _ in range(width)]
        self.tables.append(t)
        t.partitioned = self.rp.random() < 0.25
        if not t.partitioned:
            if self.rs.random() < 0.3:
                t.name = self.rs.choice(ODD_TABLE).format(n=n)
            if self.rs.random() < 0.25:
                t.schema = self.rs.choice(ODD_SCHEMA)
            t.keyless = self.rs.random() < 0.12
        cols = ", ".join(f"{c.sql} {sql_type(c.type)}" + (" PRIMARY KEY" if c.name == "id" and not t.keyless else "")
                         for c in t.columns)
        sql = [f"CREATE TABLE {t.sql} ({cols})" + (" PARTITION BY RANGE (id)" if t.partitioned else "")]
        if t.partitioned:
            sql += [f"CREATE TABLE {t.name}_p1 PARTITION OF {t.name} FOR VALUES FROM (MINVALUE) TO ({PARTITION_BOUND})",
                    f"CREATE TABLE {t.name}_pd PARTITION OF {t.name} DEFAULT"]
        if not self.publication.all_tables:
            # A partitioned table is published from its creation on and stays.
            t.published = t.partitioned or self.rp.random() < 0.75
            if t.published:
                sql += ["BEGIN", f"ALTER PUBLICATION torture ADD TABLE {t.sql}", marker("add", t.key), "COMMIT"]
            else:
                self.partial.add(t.key)
        return Step("ddl", sql)

    def publication_step(self) -> Step | None:
        """A table added to or dropped from the publication, or a partition detached,
        written to on its own and attached again."""
        parts = [t for t in self.tables if t.partitioned]
        plain = [t for t in self.tables if not t.partitioned]
        if parts and (self.publication.all_tables or not plain or self.rp.random() < 0.5):
            t = self.rp.choice(parts)
            p1 = f"{t.name}_p1"
            # Rows of the first partition's range inserted while it is detached would land
            # in the default partition and the attach would fail: ids go past the bound.
            t.next_id = max(t.next_id, PARTITION_BOUND)
            return Step("ddl", ["BEGIN", f"ALTER TABLE {t.name} DETACH PARTITION {p1}", marker("detach", f"public.{p1}"),
                                "COMMIT", f"UPDATE {p1} SET id = id WHERE id % 2 = 0",
                                "BEGIN", f"ALTER TABLE {t.name} ATTACH PARTITION {p1} FOR VALUES FROM (MINVALUE) TO "
                                f"({PARTITION_BOUND})", marker("attach", f"public.{p1}", f"public.{t.name}"), "COMMIT"])
        if self.publication.all_tables or not plain:
            return None
        t = self.rp.choice(plain)
        self.partial.add(t.key)
        verb = "DROP" if t.published else "ADD"
        t.published = not t.published
        return Step("ddl", ["BEGIN", f"ALTER PUBLICATION torture {verb} TABLE {t.sql}",
                            marker(verb.lower(), t.key), "COMMIT"])

    def value(self, c: Column) -> str:
        if self.r.random() < 0.15:
            return "NULL"
        return TYPES[c.type](self.r) if c.type in TYPES else "NULL"

    def insert(self, t: Table) -> str:
        rows = []
        for _ in range(self.r.choice([1, 1, 1, 2, 3])):
            vals = [str(t.next_id) if c.name == "id" else self.value(c) for c in t.columns]
            t.next_id += 1
            rows.append("(" + ", ".join(vals) + ")")
        return f"INSERT INTO {t.sql} ({', '.join(c.sql for c in t.columns)}) VALUES {', '.join(rows)}"

    def update(self, t: Table) -> str:
        data = [c for c in t.columns if c.name != "id"]
        where = self.where(t)
        if not data:
            return f"UPDATE {t.sql} SET id = id {where}"
        sets = [f"{c.sql} = {self.value(c)}" for c in self.r.sample(data, self.r.randint(1, min(3, len(data))))]
        return f"UPDATE {t.sql} SET {', '.join(sets)} {where}"

    def where(self, t: Table) -> str:
        if self.r.random() < 0.1:
            return ""  # every row
        lo = self.r.randint(1, max(1, t.next_id - 1))
        return f"WHERE id BETWEEN {lo} AND {lo + self.r.randint(0, 3)}"

    def delete(self, t: Table) -> str:
        return f"DELETE FROM {t.sql} {self.where(t)}"

    def dml(self) -> str:
        t = self.r.choice(self.tables)
        roll = self.r.random()
        if roll < 0.5 or (roll < 0.95 and t.inserts_only):
            return self.insert(t)
        if roll < 0.8:
            return self.update(t)
        if roll < 0.95:
            return self.delete(t)
        transactional = self.r.choice(["true", "false"])
        if transactional == "false":
            # Sent at once, whatever becomes of the transaction around it.
            self.expect("v1-text", "M")
        if transactional == "true":
            return f"{TRANSACTIONAL_MESSAGE}{_text(self.r)})"
        return f"SELECT pg_logical_emit_message(false, 'torture', {_text(self.r)})"

    def ddl_tables(self) -> list[Table]:
        return [t for t in self.tables if t is not self.frozen]

    def publish(self, t: Table) -> str:
        """A statement that has the stream carry ``t``'s definition right after a column was
        added or dropped. Otherwise a column added and one of the same type dropped, with no
        change of the table in between, read in the stream as a RENAME (README, known limits;
        torture seed 3: c12 tsvector added, then c2 tsvector dropped and re-added as date),
        and the replay of a unified table would put the dropped column's values in the new
        one. A row of each partition: each is a relation of its own in the stream."""
        if t.inserts_only:
            return self.insert(t)
        return f"UPDATE {t.sql} SET id = id WHERE id IN (SELECT min(id) FROM {t.sql} GROUP BY tableoid)"

    def ddl(self) -> Step:
        t = self.r.choice(self.ddl_tables())
        data = [c for c in t.columns if c.name != "id"]
        roll = self.r.random()
        touch = f"UPDATE {t.sql} SET id = id"
        if t.inserts_only and roll >= 0.55:
            # No UPDATE publishes a rewrite of such a table: only DDL that rewrites nothing.
            roll = self.r.random() * 0.55
        if roll < 0.25 or not data:
            c = self.new_column()
            t.columns.append(c)
            return Step("ddl", [f"ALTER TABLE {t.sql} ADD COLUMN {c.sql} {sql_type(c.type)}", self.publish(t)])
        c = self.r.choice(data)
        if roll < 0.4:
            t.columns.remove(c)
            return Step("ddl", [f"ALTER TABLE {t.sql} DROP COLUMN {c.sql}", self.publish(t)])
        if roll < 0.55:
            old = c.name
            self.col_counter += 1
            c.name = f"{old.split('_')[0]}_r{self.col_counter}"
            names = self.renames.setdefault(t.key, {})
            for k, v in list(names.items()):
                if v == old:
                    names[k] = c.name
            names[old] = c.name
            return Step("ddl", [f"ALTER TABLE {t.sql} RENAME COLUMN {qi(old)} TO {c.sql}"])
        if roll < 0.7 and c.type in RETYPE:
            c.type = self.r.choice(RETYPE[c.type])
            return Step("ddl", [f"ALTER TABLE {t.sql} ALTER COLUMN {c.sql} TYPE {c.type}", touch])
        if roll < 0.8:
            # Dropped and re-added under its name with another type.
            t.columns.remove(c)
            new = Column(c.name, self.r.choice([x for x in self.types if x != c.type]))
            t.columns.append(new)
            return Step("ddl", [f"ALTER TABLE {t.sql} DROP COLUMN {c.sql}", self.publish(t),
                                f"ALTER TABLE {t.sql} ADD COLUMN {new.sql} {sql_type(new.type)}", touch])
        if t.partitioned:
            # REPLICA IDENTITY and TRUNCATE of a partitioned table act on each partition
            # apart (the root has no storage): not generated.
            return Step("ddl", [f"ALTER TABLE {t.sql} RENAME COLUMN {c.sql} TO {qi(c.name + '_x')}",
                                f"ALTER TABLE {t.sql} RENAME COLUMN {qi(c.name + '_x')} TO {c.sql}"])
        if roll < 0.9:
            t.full_identity = not t.full_identity
            t.identity = "full" if t.full_identity else "default"
            return Step("ddl", [f"ALTER TABLE {t.sql} REPLICA IDENTITY {'FULL' if t.full_identity else 'DEFAULT'}"])
        how = self.r.choice(["", " RESTART IDENTITY", " CASCADE"])
        if self.is_published(t):
            self.expect("v1-text", "T")
        return Step("commit", [f"TRUNCATE {t.sql}{how}"])

    def shape_ddl(self) -> Step | None:
        """DDL of the shapes issue 21 added: REPLICA IDENTITY USING INDEX and NOTHING, ADD
        COLUMN with a constant or volatile default, a table renamed or moved to another
        schema, a table dropped."""
        plain = [t for t in self.tables if not t.partitioned and t is not self.frozen]
        if not plain:
            return None
        t = self.rs.choice(plain)
        roll = self.rs.random()
        touch = f"UPDATE {t.sql} SET id = id"
        if roll < 0.3 and not t.keyless:
            if t.identity == "nothing":
                t.identity, t.full_identity = "default", False
                return Step("ddl", [f"ALTER TABLE {t.sql} REPLICA IDENTITY DEFAULT"])
            if self.rs.random() < 0.5:
                self.col_counter += 1
                index = f"ri_{self.col_counter}"
                t.identity, t.full_identity = "index", False
                return Step("ddl", [f"CREATE UNIQUE INDEX {index} ON {t.sql} (id)",
                                    f"ALTER TABLE {t.sql} REPLICA IDENTITY USING INDEX {index}"])
            t.identity, t.full_identity = "nothing", False
            return Step("ddl", [f"ALTER TABLE {t.sql} REPLICA IDENTITY NOTHING"])
        if roll < 0.6 and not t.inserts_only:
            # A default: existing rows get it without a published change (a constant one is
            # not even a rewrite): the UPDATE after it publishes them.
            self.col_counter += 1
            if self.rs.random() < 0.5:
                c = Column(f"c{self.col_counter}", self.r.choice(self.types))
                default = TYPES[c.type](self.rs)
                if "SELECT" in default:
                    default = "'a default'"  # no subquery in a DEFAULT
            else:
                ty, default = self.rs.choice(VOLATILE)
                c = Column(f"c{self.col_counter}", ty)
            t.columns.append(c)
            return Step("ddl", [f"ALTER TABLE {t.sql} ADD COLUMN {c.sql} {sql_type(c.type)} DEFAULT {default}", touch])
        if roll < 0.85:
            old = t.key
            self.table_counter += 1
            old_sql = t.sql
            if self.rs.random() < 0.5 or t.schema != "public":
                t.name = f"{t.name}_n{self.table_counter}"
                sql = f"ALTER TABLE {old_sql} RENAME TO {qi(t.name)}"
            else:
                t.schema = self.rs.choice(ODD_SCHEMA)
                sql = f"ALTER TABLE {old_sql} SET SCHEMA {qi(t.schema)}"
            # The changes of the table are under two names: no final comparison of it.
            self.partial.update({old, t.key})
            # Changes before the rename are under the old name, those after under the new:
            # one map of column renames for both.
            self.renames[t.key] = self.renames.setdefault(old, {})
            return Step("ddl", ["BEGIN", sql, marker("rename", old, t.key), "COMMIT"])
        if len(self.tables) > 1:
            self.tables.remove(t)
            return Step("ddl", [f"DROP TABLE {t.sql}"])
        return None

    def big_insert(self, t: Table, rows: int | None = None) -> list[str]:
        """Statements writing well over logical_decoding_work_mem (64 kB) to ``t``."""
        n = rows or self.r.randint(150, 400)
        cols = [c for c in t.columns if c.name != "id" and c.type == "text"]
        first = t.next_id
        t.next_id += n
        if cols:
            sql = (f"INSERT INTO {t.sql} (id, {cols[0].sql}) SELECT g, repeat(md5(g::text), 8) "
                   f"FROM generate_series({first}, {first + n - 1}) g")
        else:
            # Without a text column a row is small: more of them.
            n2 = n * 6
            t.next_id += n2 - n
            sql = f"INSERT INTO {t.sql} (id) SELECT g FROM generate_series({first}, {first + n2 - 1}) g"
        if t.inserts_only:
            return [sql]
        return [sql, f"UPDATE {t.sql} SET id = id WHERE id >= {first}"]

    def streamed_shape(self) -> Step | None:
        """Two big transactions open at once (both streamed), a savepoint rolled back inside
        a streamed one, a prepared transaction big enough to stream."""
        published = [t for t in self.tables if self.is_published(t)]
        if not published:
            return None
        roll = self.rs.random()
        if roll < 0.4 and len(published) > 1:
            a, b = self.rs.sample(published, 2)
            sa, sb = self.big_insert(a, 300), self.big_insert(b, 300)
            self.expect("v2-stream", "S", 2)
            self.expect("v2-stream", "c", 2)
            return Step("interleaved", sa + [self.insert(a)], sb + [self.insert(b)], other_first=self.rs.random() < 0.5)
        t = self.rs.choice(published)
        if roll < 0.7:
            inner = self.big_insert(t, 300)
            self.expect("v2-stream", "A")
            self.expect("v2-stream", "c")
            return Step("commit", [*self.big_insert(t, 300), "SAVEPOINT s1", *inner, self.insert(t),
                                   "ROLLBACK TO SAVEPOINT s1", self.insert(t)])
        if len(self.pending_gids) >= 3:
            return None
        self.gid_counter += 1
        gid = f"g{self.gid_counter}"
        self.pending_gids.append(gid)
        # Stream Prepare is expected when it is committed later (finish_prepared):
        # PostgreSQL 17+ drops the changes of one it already knows rolled back instead.
        self.big_gids.add(gid)
        # Inserts only (see transaction()).
        return Step("prepare", [self.big_insert(t, 300)[0], self.insert(t)], gid=gid)

    def transaction(self) -> Step:
        roll = self.r.random()
        # What the body's statements expect (a non-transactional message: its 'M'), undone
        # where the shape drawn leaves the body out (drawn first all the same: the seeds'
        # workloads stay what they were).
        before = dict(self.expects)
        body = [self.dml() for _ in range(self.r.randint(1, 6))]

        def body_unused() -> None:
            self.expects.clear()
            self.expects.update(before)

        if roll < 0.1:
            return Step("abort", body)
        if roll < 0.22:
            inner = [self.dml() for _ in range(self.r.randint(1, 3))]
            end = self.r.choice(["ROLLBACK TO SAVEPOINT s1", "RELEASE SAVEPOINT s1"])
            return Step("commit", body + ["SAVEPOINT s1", *inner, end] + [self.dml()])
        if roll < 0.3:
            # Big enough to stream (logical_decoding_work_mem = 64kB).
            t = self.r.choice(self.tables)
            big = self.big_insert(t)
            kind = self.r.choice(["commit", "commit", "abort"])
            if self.is_published(t) and kind == "commit":
                # Not for an aborted one: PostgreSQL 17+ drops the changes of a transaction
                # it already knows aborted instead of streaming them.
                self.expect("v2-stream", "S")
                self.expect("v2-stream", "c")
            return Step(kind, body + big)
        if roll < 0.38 and len(self.pending_gids) < 3:
            # Inserts only: rows a prepared transaction updated or deleted stay locked until
            # it is finished, and a later statement on them would wait for ever.
            body_unused()
            self.gid_counter += 1
            gid = f"g{self.gid_counter}"
            self.pending_gids.append(gid)
            targets = [self.r.choice(self.tables) for _ in range(self.r.randint(1, 4))]
            if any(self.is_published(t) for t in targets):
                self.expect("v3-twophase-binary", "P")
            return Step("prepare", [self.insert(t) for t in targets], gid=gid)
        if roll < 0.5 and roll >= 0.46:
            # Replayed from another node: a replication origin on the session.
            if self.publication.all_tables and any(s.startswith("INSERT") for s in body):
                self.expect("v1-text", "O")
            return Step("origin", body)
        if roll < 0.46 and len(self.tables) > 1:
            body_unused()
            a, b = self.r.sample(self.tables, 2)
            return Step("interleaved", [self.insert(a) for _ in range(self.r.randint(1, 3))],
                        [self.insert(b) for _ in range(self.r.randint(1, 3))], other_first=self.r.random() < 0.5)
        return Step("commit", body)

    def finish_prepared(self) -> Step:
        gid = self.pending_gids.pop(0)
        verb = self.r.choice(["COMMIT PREPARED", "COMMIT PREPARED", "ROLLBACK PREPARED"])
        if gid in self.big_gids and verb == "COMMIT PREPARED":
            self.expect("v3-twophase-binary", "p")
        return Step("finish", [f"{verb} '{gid}'"])

    def filtered(self) -> Filtered | None:
        """The table of the second publication (column list, row filter): a keyed table that
        no DDL touches afterwards (taken out of the tables DDL draws from)."""
        keyed = [t for t in self.tables if not t.partitioned and not t.keyless and len(t.columns) > 2]
        if not keyed or self.rs.random() < 0.5:
            return None
        t = self.rs.choice(keyed)
        cols = ["id"] + [c.name for c in t.columns[1:] if self.rs.random() < 0.5]
        self.frozen = t
        return Filtered(t.key, t.sql, cols)


def generate(seed: int, transactions: int = 40, *, exclude: frozenset[str] = frozenset(),
             filtered: bool = False) -> Workload:
    """A workload of about ``transactions`` transactions and DDL steps. ``exclude``: types
    the server lacks (OPTIONAL_TYPES); ``filtered``: may make the second publication
    (column list and row filter, PostgreSQL 15+)."""
    g = _Gen(seed, [t for t in TYPES if t not in exclude])
    steps = [g.create_table() for _ in range(g.r.randint(1, 4))]
    filt = g.filtered() if filtered else None
    for _ in range(transactions):
        if g.rp.random() < 0.06:
            while g.pending_gids:
                steps.append(g.finish_prepared())
            step = g.publication_step()
            if step is not None:
                steps.append(step)
        if g.rs.random() < 0.08:
            while g.pending_gids:
                steps.append(g.finish_prepared())
            step = g.shape_ddl() if g.rs.random() < 0.6 else g.streamed_shape()
            if step is not None:
                steps.append(step)
        roll = g.r.random()
        if roll < 0.12:
            # DDL and TRUNCATE wait for the locks of prepared transactions: finish them first.
            while g.pending_gids:
                steps.append(g.finish_prepared())
            # The filtered publication's table takes no DDL (its column list must keep
            # covering its replica identity): with no other table, a new one.
            steps.append(g.ddl() if g.ddl_tables() else g.create_table())
        elif roll < 0.15 and len(g.tables) < 6:
            steps.append(g.create_table())
        elif roll < 0.2 and g.pending_gids:
            steps.append(g.finish_prepared())
        else:
            steps.append(g.transaction())
    while g.pending_gids:
        steps.append(g.finish_prepared())
    return Workload(seed, steps, dataclasses.replace(g.publication, partial=frozenset(g.partial)),
                    g.expects, g.renames, filt)
