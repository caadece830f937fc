"""The tester's own readers (tests/torture/oracle.py, values.py), on test_decoding lines and
values PostgreSQL 18 printed: a reader that misreads PostgreSQL would make the tester
compare against the wrong thing. No server needed (the expected numbers were read from one:
``SELECT '0044-03-15 BC'::date - '1970-01-01'::date`` is -735160)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "torture"))

import dataclasses  # noqa: E402

import values  # noqa: E402
from generator import TRANSACTIONAL_MESSAGE, Filtered, Step, Workload  # noqa: E402
from oracle import UNCHANGED, compare_messages, filter_expected, parse_test_decoding  # noqa: E402

LINES = [
    "BEGIN 745",
    'table "Other ""Sch"" X"."t4 ""quoted""": INSERT: id[integer]:1 "c2 sp.d"[bit(8)]:B\'1010\' '
    "c3[text]:'it''s' c4[boolean]:true",
    "message: transactional: 1 prefix: torture, sz: 3 content:a b",
    "table public.t1: UPDATE: old-key: id[integer]:2 new-tuple: id[integer]:3 c1[text]:unchanged-toast-datum",
    "table public.t1: DELETE: id[integer]:6",
    "table public.t1, \"s2\".\"x, y\": TRUNCATE: restart_seqs",
    "COMMIT 745 (at 2026-11-25 18:40:00.123456+00)",
    "message: transactional: 0 prefix: p, sz: 0 content:",
]


def test_test_decoding_lines_read_with_quoted_names_bits_and_transactions() -> None:
    e = parse_test_decoding(LINES)
    assert [(c.table, c.op) for c in e.changes] == [
        ('Other "Sch" X.t4 "quoted"', "insert"), ("public.t1", "update"), ("public.t1", "delete"),
        ("public.t1, s2.x, y", "truncate")]
    first = e.changes[0]
    assert first.new == {"id": "1", "c2 sp.d": "1010", "c3": "it's", "c4": "true"}
    assert first.types == {"id": "integer", "c2 sp.d": "bit(8)", "c3": "text", "c4": "boolean"}
    assert all(c.xid == 745 and c.commit_ts == "2026-11-25 18:40:00.123456+00" for c in e.changes)
    assert e.changes[1].old == {"id": "2"} and e.changes[1].new["c1"] == UNCHANGED
    assert [(m.transactional, m.prefix, m.content, m.xid) for m in e.messages] == [
        (True, "torture", b"a b", 745), (False, "p", b"", None)]


def test_a_streamed_message_of_a_rolled_back_savepoint_may_be_decoded_and_no_other() -> None:
    """pgoutput tags a streamed message with the top transaction's xid, so one streamed before
    its savepoint was rolled back stays in the stream (test_decoding, reading the transaction
    whole at its commit, never prints it): the tester allows that one, and nothing else."""
    msg = lambda text: f"{TRANSACTIONAL_MESSAGE}'{text}')"  # noqa: E731
    w = Workload(1, [
        Step("commit", ["INSERT 1", msg("kept"), "SAVEPOINT s1", msg("gone"), "ROLLBACK TO SAVEPOINT s1",
                        msg("kept too"), "SAVEPOINT s1", msg("released"), "RELEASE SAVEPOINT s1"]),
        Step("interleaved", [msg("a")], ["SAVEPOINT s1", msg("gone in B"), "ROLLBACK TO SAVEPOINT s1"]),
        Step("abort", ["SAVEPOINT s1", msg("aborted whole"), "ROLLBACK TO SAVEPOINT s1"])])
    assert w.rolled_back_messages() == ["'gone'", "'gone in B'"]
    lines = ["BEGIN 9", "message: transactional: 1 prefix: torture, sz: 4 content:kept", "COMMIT 9"]
    e = dataclasses.replace(parse_test_decoding(lines), may_add=[("torture", b"gone")])
    assert compare_messages(e, [(True, "torture", b"kept", 9)], "x") == (1, [])
    assert compare_messages(e, [(True, "torture", b"kept", 9), (True, "torture", b"gone", 9)], "x") == (1, [])
    _, problems = compare_messages(e, [(True, "torture", b"kept", 9), (True, "torture", b"other", 9)], "x")
    assert problems and "extra [(True, 'torture', b'other')]" in problems[0]
    _, problems = compare_messages(e, [(True, "torture", b"gone", 9)], "x")
    assert problems and "missing [(True, 'torture', b'kept')]" in problems[0]


def test_filtered_publication_keeps_listed_columns_of_rows_passing_the_filter() -> None:
    lines = ["BEGIN 9", "table public.t3: INSERT: id[integer]:3 a[text]:'x' b[text]:'y'",
             "table public.t3: INSERT: id[integer]:4 a[text]:'x' b[text]:'y'",
             "table public.t9: INSERT: id[integer]:5", "table public.t3: DELETE: id[integer]:6",
             "table public.t3: DELETE: id[integer]:7", "COMMIT 9"]
    e = filter_expected(parse_test_decoding(lines), Filtered("public.t3", '"public"."t3"', ["id", "a"]))
    assert [(c.op, c.new) for c in e.changes] == [("insert", {"id": "4", "a": "x"}), ("delete", {"id": "7"})]


def test_values_read_postgresql_text_exactly() -> None:
    assert values.read_date("0044-03-15 BC") == -735160
    assert values.read_date("0001-12-31 BC") == -719163
    assert values.read_date("2000-01-01") == 10957
    # ISO 8601 with a signed year (jsonl) is the same day.
    assert values.read_date("-0043-03-15") == -735160
    assert values.read_timestamp("2024-06-01 12:34:56.789+05:30", True) == \
        values.read_timestamp("2024-06-01T07:04:56.789Z", True)
    assert values.read_interval("1 year 2 mons -3 days -04:05:06.7") == (14, -3, -(4 * 3600 + 5 * 60 + 6) * 10**6 - 700000)
    assert values.from_pg_text('{"2000-01-01 00:00:00",NULL}', "timestamp without time zone[]") == [946684800000000, None]
    assert values.from_pg_text("-0", "double precision") != values.from_pg_text("0", "double precision")
    assert values.from_output({"months": 1, "days": 2, "nanos": 3000}, "interval") == (1, 2, 3)
    assert values.from_output({"months": 1, "days": 2, "nanos": 3001}, "interval") != (1, 2, 3)
