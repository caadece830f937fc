"""A workload that exercises everything order-sensitive in a pgoutput capture, for the Spark tests.

It produces, on one slot: multi-row inserts (rows sharing one LSN), updates that leave a TOAST
value unchanged, primary-key changes, deletes, REPLICA IDENTITY FULL, a schema change, a
truncate, interleaved concurrent transactions, a streamed transaction with a rolled-back
savepoint, an aborted streamed transaction, two-phase commit and rollback, and logical
decoding messages (transactional and not).

``run_workload(pg, name)`` returns the capture rows ``[(lsn, xid, data)]`` in the server's row
order, and the names of the tables it made (``public.<name>_...``).
"""

from __future__ import annotations

from typing import Any

from pg_harness import PgServer



def _big(seed: int) -> str:
    # md5 chains do not compress, so the value is really toasted out of line.
    return "".join(f"{(seed * 7919 + i) * 2654435761 % 4294967296:08x}" for i in range(1200))


def run_workload(pg: PgServer, name: str, *, proto: int = 4, binary: bool = False,
                 streaming: bool = True) -> tuple[list[tuple[int, int, bytes]], list[str], dict[str, Any]]:
    kv, wide, full = f"{name}_kv", f"{name}_wide", f"{name}_full"
    pub, slot = f"{name}_pub", f"{name}_slot"
    pg.execute(f"CREATE TABLE {kv} (id int PRIMARY KEY, v text, n bigint)")
    pg.execute(f"CREATE TABLE {wide} (id int PRIMARY KEY, big text, small int)")
    pg.execute(f"CREATE TABLE {full} (a int, b text)")
    pg.execute(f"ALTER TABLE {full} REPLICA IDENTITY FULL")
    pg.execute(f"CREATE PUBLICATION {pub} FOR TABLE {kv}, {wide}, {full}")
    two_phase = proto >= 3
    pg.create_slot(slot, two_phase=two_phase)

    # Multi-row insert: all rows share the LSN of one WAL record.
    pg.execute(f"INSERT INTO {kv} SELECT g, 'v' || g, g * 10 FROM generate_series(1, 200) g")
    pg.execute(f"INSERT INTO {wide} VALUES (1, %s, 1), (2, %s, 2), (3, %s, 3)",
               (_big(1), _big(2), _big(3)))
    # Updates that leave the TOAST value unchanged, a primary-key change, deletes.
    pg.execute(f"UPDATE {wide} SET small = small + 100 WHERE id IN (1, 2)")
    pg.execute(f"UPDATE {wide} SET id = 30, small = 33 WHERE id = 3")
    pg.execute(f"UPDATE {kv} SET v = 'changed' || id WHERE id % 7 = 0")
    pg.execute(f"UPDATE {kv} SET id = id + 1000 WHERE id % 11 = 0")
    pg.execute(f"DELETE FROM {kv} WHERE id % 13 = 0")
    pg.execute(f"INSERT INTO {full} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    pg.execute(f"UPDATE {full} SET b = 'bb' WHERE a = 2")
    pg.execute(f"DELETE FROM {full} WHERE a = 3")

    # Interleaved transactions: B starts first, A commits first.
    conn_a, conn_b = pg.connect(autocommit=False), pg.connect(autocommit=False)
    try:
        cur_a, cur_b = conn_a.cursor(), conn_b.cursor()
        cur_b.execute(f"INSERT INTO {kv} VALUES (5001, 'b1', 1)")
        cur_a.execute(f"INSERT INTO {kv} VALUES (5002, 'a1', 2)")
        cur_b.execute(f"UPDATE {kv} SET n = -1 WHERE id = 1")
        cur_a.execute(f"UPDATE {kv} SET n = -2 WHERE id = 2")
        conn_a.commit()
        cur_b.execute(f"INSERT INTO {kv} VALUES (5003, 'b2', 3)")
        conn_b.commit()
    finally:
        conn_a.close()
        conn_b.close()

    # Schema change inside a transaction, rows before and after it.
    pg.execute(f"BEGIN; INSERT INTO {kv} VALUES (6001, 'pre', 1); "
               f"ALTER TABLE {kv} ADD COLUMN extra text; "
               f"INSERT INTO {kv} VALUES (6002, 'post', 2, 'e'); COMMIT")
    pg.execute(f"UPDATE {kv} SET extra = 'x' || id WHERE id BETWEEN 10 AND 20")

    # A streamed transaction (larger than logical_decoding_work_mem) with a rolled-back
    # savepoint inside, and an aborted streamed transaction.
    pg.execute(f"BEGIN; INSERT INTO {kv} SELECT g, 's' || g, g FROM generate_series(10001, 12000) g; "
               f"SAVEPOINT sp; INSERT INTO {kv} SELECT g, 'rolled back', g FROM generate_series(20001, 21000) g; "
               f"ROLLBACK TO SAVEPOINT sp; "
               f"UPDATE {kv} SET v = 'streamed update' WHERE id BETWEEN 10001 AND 10500; "
               f"DELETE FROM {kv} WHERE id BETWEEN 11901 AND 12000; COMMIT")
    pg.execute(f"BEGIN; INSERT INTO {kv} SELECT g, 'aborted', g FROM generate_series(30001, 32000) g; ROLLBACK")

    # Two-phase commit and rollback.
    if two_phase:
        pg.execute(f"BEGIN; INSERT INTO {kv} VALUES (7001, 'prepared', 1); PREPARE TRANSACTION '{name}_p1'")
        pg.execute(f"BEGIN; INSERT INTO {kv} VALUES (7002, 'prepared-rb', 1); PREPARE TRANSACTION '{name}_p2'")
        pg.execute(f"INSERT INTO {kv} VALUES (7003, 'between', 1)")
        pg.execute(f"COMMIT PREPARED '{name}_p1'")
        pg.execute(f"ROLLBACK PREPARED '{name}_p2'")

    # Logical decoding messages, a truncate and rows after it.
    pg.execute("SELECT pg_logical_emit_message(true, 'spark', 'transactional')")
    pg.execute("SELECT pg_logical_emit_message(false, 'spark', 'not transactional')")
    pg.execute(f"TRUNCATE {full}")
    pg.execute(f"INSERT INTO {full} VALUES (9, 'after truncate')")

    options: dict[str, Any] = {"proto_version": str(proto), "publication_names": pub,
                               "messages": "true"}
    if binary:
        options["binary"] = "true"
    if streaming and proto >= 2:
        options["streaming"] = "on"
    rows = pg.get_binary_changes(slot, options)
    pg.drop_slot(slot)
    tables = [f"public.{kv}", f"public.{wide}", f"public.{full}"]
    return rows, tables, options


#: Columns of every type family of the README's types table, as ``name type`` (after ``id``).
TYPE_COLUMNS = (
    "o oid", "i2 int2", "i4 int4", "i8 int8", "f4 float4", "f8 float8",
    "n10 numeric(10,2)", "nfree numeric", "n50 numeric(50,5)",
    "t text", "vc varchar(20)", "bp char(6)", "ch \"char\"", "nm name", "ba bytea", "bo bool",
    "d date", "tm time", "ts timestamp", "tz timestamptz", "iv interval", "u uuid",
    "js json", "jb jsonb", "ai int4[]", "at text[]", "en {enum}", "ip inet", "mo money",
    "pt point", "rg int4range", "au uuid[]", "av interval[]",
)

#: Rows of values for TYPE_COLUMNS (SQL literals), each with its ``id``: extremes, specials
#: (NaN, ±Infinity, ±infinity dates and timestamps), NULL elements and all-NULL rows.
TYPE_ROWS = (
    (1, "0", "0", "0", "0", "0", "0", "0", "0", "0", "''", "''", "''", "''", "''", "''", "false",
     "'2000-01-01'", "'00:00'", "'2000-01-01 00:00'", "'2000-01-01 00:00+00'", "'0'",
     "'00000000-0000-0000-0000-000000000000'", "'null'", "'{}'", "'{}'", "'{}'", "'happy'",
     "'0.0.0.0'", "0", "'(0,0)'", "'empty'", "'{}'", "'{}'"),
    (2, "4294967295", "32767", "2147483647", "9223372036854775807", "'NaN'", "'Infinity'",
     "99999999.99", "'123456789012345678901234567890.123456789012345678901'",
     "'12345678901234567890123456789012345678901234.12345'",
     "'héllo wörld ☃'", "'varchar'", "'ab'", "'x'", "'a_name'", "'\\x00ff10'", "true",
     "'2024-02-29'", "'23:59:59.999999'", "'2024-02-29 12:34:56.789012'",
     "'2024-02-29 12:34:56.789012+05:30'", "'1 year 2 mons 3 days 04:05:06.789'",
     "'12345678-9abc-def0-1234-56789abcdef0'", "'{\"a\": [1, 2.5, null], \"b\": \"x\"}'",
     "'{\"b\": \"x\", \"a\": [1, 2.5, null]}'", "'{1,NULL,-3}'", "'{\"a b\",NULL,\"\",\"q\\\"t\"}'",
     "'sad'", "'192.168.1.0/24'", "1234567.89", "'(1.5,-2)'", "'[1,10)'",
     "'{12345678-9abc-def0-1234-56789abcdef0,NULL}'", "'{\"1 day 00:00:01\",NULL,\"-1 mons\"}'"),
    (3, "1", "-32768", "-2147483648", "-9223372036854775808", "'-Infinity'", "'-Infinity'",
     "-0.01", "'-0.000000000000000000000000000001'", "'-0.00001'", "repeat('long ', 200)",
     "'x'", "'abcdef'", "'\\001'", "'n'", "''", "false", "'infinity'", "'00:00:00.000001'",
     "'-infinity'", "'infinity'", "'-1 mons -2 days -00:00:00.000001'",
     "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'[]'", "'[]'", "'{NULL}'", "'{NULL}'", "'happy'",
     "'::1'", "-0.01", "'(-1e300,1e-300)'", "'(,5]'", "'{NULL}'", "'{NULL}'"),
    (4, *(["NULL"] * 33)),
    (5, "42", "7", "7", "7", "'1.5'", "'-0.0'", "1.5", "'NaN'", "'-1.5'", "'t'", "'v'", "'b'",
     "'q'", "'nm'", "'\\x'", "true", "'-infinity'", "'12:00'", "'infinity'", "'-infinity'",
     "'-178000000 years'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'3'", "'3'", "'{5}'",
     "'{z}'", "'ok'", "'2001:db8::1/64'", "'-92233720368547758.08'", "'(0,-0)'", "'(1,2)'",
     "'{ffffffff-ffff-ffff-ffff-ffffffffffff}'", "'{\"00:00:00.000001\"}'"),
)


def run_types_workload(pg: PgServer, name: str) -> dict[str, Any]:
    """One table with a column of each type family, captured on two slots at once: text mode
    and ``binary 'true'``. Inserts (several rows in one statement, so sharing an LSN), then,
    with REPLICA IDENTITY FULL (``_before`` holds every column), updates of every column and a
    delete. Returns the rows of each capture (``text``, ``binary``), the table's name, and
    PostgreSQL's own text output of each inserted row (``pg_text``: id → {column: text})."""
    table, enum, pub = f"{name}_types", f"{name}_mood", f"{name}_pub"
    cols = [c.format(enum=enum) for c in TYPE_COLUMNS]
    pg.execute(f"CREATE TYPE {enum} AS ENUM ('sad', 'ok', 'happy')")
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, {', '.join(cols)})")
    pg.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    pg.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    slots = {"text": f"{name}_text", "binary": f"{name}_bin"}
    for slot in slots.values():
        pg.create_slot(slot)
    names = [c.split()[0] for c in TYPE_COLUMNS]
    values = ", ".join(f"({', '.join(map(str, r))})" for r in TYPE_ROWS)
    pg.execute(f"INSERT INTO {table} (id, {', '.join(names)}) VALUES {values}")
    # Each type's output function (format's %s), not its cast to text: bpchar keeps its
    # padding, inet its output form.
    outs = ", ".join(f"CASE WHEN {n} IS NOT NULL THEN format('%s', {n}) END" for n in names)
    texts = pg.query(f"SELECT id, {outs} FROM {table} ORDER BY id")
    pg_text = {r[0]: dict(zip(names, r[1:])) for r in texts}
    # Every column of row 2 copied onto row 1 (old and new values of every type), row 5 gets
    # row 3's, then row 4 (all NULLs) is deleted and one more row inserted alone.
    sets = ", ".join(f"{n} = s.{n}" for n in names)
    pg.execute(f"UPDATE {table} t SET {sets} FROM {table} s WHERE t.id = 1 AND s.id = 2")
    pg.execute(f"UPDATE {table} t SET {sets} FROM {table} s WHERE t.id = 5 AND s.id = 3")
    pg.execute(f"DELETE FROM {table} WHERE id = 4")
    pg.execute(f"INSERT INTO {table} (id, {', '.join(names)}) VALUES ({', '.join(map(str, (6, *TYPE_ROWS[1][1:])))})")
    base = {"proto_version": "1", "publication_names": pub}
    out: dict[str, Any] = {"table": f"public.{table}", "pg_text": pg_text, "columns": names}
    out["text"] = pg.get_binary_changes(slots["text"], base)
    out["binary"] = pg.get_binary_changes(slots["binary"], {**base, "binary": "true"})
    for slot in slots.values():
        pg.drop_slot(slot)
    return out
