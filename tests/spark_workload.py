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
