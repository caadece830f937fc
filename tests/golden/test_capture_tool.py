"""capture.py itself: its SQL splitter and directives, and a small capture end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import capture
from capture import WorkloadError, decode_rows, encode_rows, load_workload, split_sql
from kinds_coverage import read_frames


def test_split_respects_quotes_comments_and_dollar_quoting() -> None:
    sql = """
    -- @fact one
    SELECT 'a;b', "we;ird", E'it\\'s;' AS x;
    /* a ; comment */ CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$;
    SELECT $$;$$; -- trailing; comment
    SELECT 'it''s'
    """
    parts = split_sql(sql)
    assert [d for _, _, d in parts] == [["fact one"], [], [], []]
    assert parts[0][1] == """SELECT 'a;b', "we;ird", E'it\\'s;' AS x"""
    assert parts[1][1].endswith("$body$ SELECT 1; $body$")
    assert parts[2][1] == "SELECT $$;$$"
    assert parts[3][1] == "SELECT 'it''s'"
    assert parts[0][0] == 3 and parts[3][0] == 6


def test_split_rejects_unterminated_quotes() -> None:
    with pytest.raises(WorkloadError, match="unterminated"):
        split_sql("SELECT 'oops")
    with pytest.raises(WorkloadError, match="unterminated"):
        split_sql("SELECT $x$ oops")


def test_workload_directives(tmp_path: Path) -> None:
    path = tmp_path / "w.sql"
    path.write_text("-- @publications p1, p2\n-- @option_sets v1-text\nCREATE TABLE t (i int);\n"
                    "-- @slots\n-- @session other\n-- @facts rows\nSELECT 1;\n")
    w = load_workload(path)
    assert w.publications == ["p1", "p2"] and w.option_sets == ["v1-text"]
    assert [s.sql for s in w.setup] == ["CREATE TABLE t (i int)"]
    assert [(s.session, s.fact, s.fact_many) for s in w.body] == [("other", "rows", True)]


@pytest.mark.parametrize("text,error", [
    ("SELECT 1;", "no '-- @slots'"),
    ("-- @slots\n-- @bogus\nSELECT 1;", "unknown directive"),
    ("-- @slots\n-- @option_sets v9\nSELECT 1;", "unknown option set"),
    ("-- @slots\n-- @sync\nSELECT 1;", "@sync needs @via walsender"),
    ("-- @slots\nSELECT 1;\n-- @fact dangling\n", "no statement after it"),
])
def test_workload_errors(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "bad.sql"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=error):
        load_workload(path)


def test_frames_round_trip() -> None:
    rows = [(1, 2, b"B" + bytes(20)), (2**64 - 1, 2**32 - 1, b"C")]
    assert decode_rows(encode_rows(rows)) == rows
    with pytest.raises(ValueError, match="truncated"):
        decode_rows(encode_rows(rows)[:-1])


@pytest.mark.parametrize("via", ["sql", "walsender"])
def test_capture_end_to_end(tmp_path: Path, via: str) -> None:
    path = tmp_path / "tiny.sql"
    path.write_text(f"""
        -- @via {via}
        -- @option_sets v1-text, v2-stream
        CREATE TABLE t (id int PRIMARY KEY);
        CREATE PUBLICATION golden FOR TABLE t;
        -- @slots
        BEGIN;
        -- @fact tx
        SELECT * FROM golden_tx();
        INSERT INTO t VALUES (1);
        COMMIT;
        -- @fact msg
        SELECT pg_logical_emit_message(false, 'p', 'c') AS lsn;
    """)
    written = capture.capture_workload(load_workload(path), 18, tmp_path)
    assert sorted(p.name for p in written) == [
        "tiny-pg18-v1-text.bin", "tiny-pg18-v1-text.json",
        "tiny-pg18-v2-stream.bin", "tiny-pg18-v2-stream.json"]
    v1 = read_frames(tmp_path / "tiny-pg18-v1-text.bin")
    v2 = read_frames(tmp_path / "tiny-pg18-v2-stream.bin")
    assert [d[:1] for _, _, d in v1] == [b"B", b"R", b"I", b"C"]
    assert [d[:1] for _, _, d in v2] == [b"B", b"R", b"I", b"C", b"M"]  # messages 'true'
    meta = json.loads((tmp_path / "tiny-pg18-v1-text.json").read_text())
    tx = meta["facts"]["tx"]
    assert tx["status"] == "committed" and isinstance(tx["commit_time_pg_us"], int)
    assert meta["via"] == via and meta["kinds"] == {"B": 1, "C": 1, "I": 1, "R": 1}
    expected_xid = tx["xid"] if via == "sql" else 0
    assert {xid for _, xid, _ in v1} == {expected_xid}
    # Message LSN (after the flags byte) is what pg_logical_emit_message returned.
    assert int.from_bytes(v2[-1][2][2:10], "big") == meta["facts"]["msg"]["lsn_int"]
