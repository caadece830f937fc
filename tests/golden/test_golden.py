"""The committed golden captures: complete, consistent with their .json, and with facts
that agree with the bytes (checked here with a few struct reads, independent of the Rust
parser, so a wrong fact is caught before a Rust test relies on it)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from capture import OPTION_SETS, WORKLOADS_DIR, load_workload
from kinds_coverage import CAPTURES_DIR, REQUIRED_KINDS, kinds_by_capture, missing_kinds, read_frames

MAX_TOTAL_BYTES = 2 * 1024 * 1024
VERSIONS = (18, 15)


def capture_stems() -> list[str]:
    return sorted(p.stem for p in CAPTURES_DIR.glob("*.bin"))


#: The parameter of a test whose captures are missing (see :func:`stems`).
MISSING = "no-capture"


def stems(selected: Callable[[str], bool] = lambda stem: True) -> list[str]:
    """The stems of the captures a test checks. When none is there, one parameter that
    fails in :func:`load`: an empty parameter list would only skip the test, and the golden
    tests would pass with their captures missing."""
    return [s for s in capture_stems() if selected(s)] or [MISSING]


def load(stem: str) -> tuple[list[tuple[int, int, bytes]], dict[str, Any]]:
    if stem == MISSING:
        pytest.fail(f"no golden capture for this test in {CAPTURES_DIR} (make golden writes them)")
    return read_frames(CAPTURES_DIR / f"{stem}.bin"), json.loads((CAPTURES_DIR / f"{stem}.json").read_text())


def cstring(data: bytes, pos: int) -> tuple[str, int]:
    end = data.index(b"\0", pos)
    return data[pos:end].decode(), end + 1


def messages(rows: list[tuple[int, int, bytes]]) -> Iterator[tuple[int, int, bytes, bool]]:
    """(lsn, frame xid, message, inside a stream): Relation, Type, changes and Message
    carry an xid of their own only between Stream Start and Stream Stop."""
    in_stream = False
    for lsn, xid, data in rows:
        kind = data[:1]
        if kind == b"S":
            in_stream = True
        elif kind == b"E":
            in_stream = False
        yield lsn, xid, data, in_stream


def test_every_kind_is_captured() -> None:
    by_capture = kinds_by_capture()
    assert by_capture, "no captures committed"
    assert missing_kinds(by_capture) == []
    seen = {k for kinds in by_capture.values() for k in kinds}
    assert seen <= set(REQUIRED_KINDS), f"unknown kinds {seen - set(REQUIRED_KINDS)}"


def test_each_workload_has_its_captures_and_nothing_else() -> None:
    expected = set()
    for path in sorted(WORKLOADS_DIR.glob("*.sql")):
        w = load_workload(path)
        for v in VERSIONS:
            if v < w.min_version:
                continue
            for o in OPTION_SETS:
                if v >= o.min_version and (w.option_sets is None or o.name in w.option_sets):
                    expected.add(f"{w.name}-pg{v}-{o.name}")
    assert set(capture_stems()) == expected
    assert {p.stem for p in CAPTURES_DIR.glob("*.json")} == expected


def test_total_size_is_small() -> None:
    assert capture_stems(), f"no captures in {CAPTURES_DIR}"
    total = sum(p.stat().st_size for p in CAPTURES_DIR.iterdir())
    assert total < MAX_TOTAL_BYTES, f"captures total {total} bytes"


@pytest.mark.parametrize("stem", stems())
def test_json_describes_its_bin(stem: str) -> None:
    rows, meta = load(stem)
    workload, version, option_set = meta["workload"], meta["server_version_num"] // 10000, meta["option_set"]
    assert stem == f"{workload}-pg{version}-{option_set}"
    assert meta["rows"] == len(rows)
    assert meta["bytes"] == sum(len(d) for _, _, d in rows)
    assert meta["kind_sequence"] == "".join(chr(d[0]) for _, _, d in rows)
    assert (WORKLOADS_DIR.parent / meta["sql"]).is_file()
    assert meta["options"]["proto_version"] in ("1", "2", "3", "4")
    if meta["via"] == "walsender":
        assert all(xid == 0 for _, xid, _ in rows)
    else:
        # The frame's xid is the transaction's: Begin's own xid field says so too.
        for _, xid, data in rows:
            if data[:1] == b"B":
                assert struct.unpack_from(">I", data, 17)[0] == xid


def transaction_facts(facts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in facts.items() if isinstance(v, dict) and "xid" in v and "status" in v}


@pytest.mark.parametrize("stem", stems(lambda s: "-v1-" in s))
def test_begin_matches_transaction_facts(stem: str) -> None:
    """Without streaming or two-phase, every committed transaction that changed a published
    table arrives as Begin with the xid and commit time the server recorded."""
    rows, meta = load(stem)
    begins = {}
    for _, _, data in rows:
        if data[:1] == b"B":
            final_lsn, commit_ts, xid = struct.unpack_from(">QqI", data, 1)
            begins[xid] = commit_ts
    committed = {name: f for name, f in transaction_facts(meta["facts"]).items()
                 if f["status"] == "committed"}
    assert committed
    seen = 0
    for name, f in committed.items():
        if f["xid"] in begins:
            seen += 1
            assert begins[f["xid"]] == f["commit_time_pg_us"], name
    # Every committed transaction the workload recorded had published changes, except
    # the ones that only wrote messages (v1 has no messages).
    assert seen >= len([n for n in committed if "message" not in n]), (sorted(committed), begins)


@pytest.mark.parametrize("stem", stems())
def test_relation_and_type_oids_match_the_catalog(stem: str) -> None:
    rows, meta = load(stem)
    relations = {r["relname"]: r for r in meta["facts"].get("relations", [])}
    types = {t["oid"]: t for t in meta["facts"].get("types", [])}
    for _, _, data, in_stream in messages(rows):
        pos = 5 if in_stream else 1
        if data[:1] == b"R":
            (oid,) = struct.unpack_from(">I", data, pos)
            nsp, pos = cstring(data, pos + 4)
            name, pos = cstring(data, pos)
            assert nsp == "public" and relations[name]["oid"] == oid
            ident = chr(data[pos])
            if name not in ("evolving",):  # alter_table changes its identity mid-way
                assert ident == relations[name]["replident"], name
        elif data[:1] == b"Y":
            (oid,) = struct.unpack_from(">I", data, pos)
            nsp, pos = cstring(data, pos + 4)
            name, pos = cstring(data, pos)
            t = types[oid]
            if t["typtype"] == "d":
                # A domain is announced by its own OID with its base type's names, and
                # pg_catalog is sent as the empty string.
                base_nsp = "" if t["base_nspname"] == "pg_catalog" else t["base_nspname"]
                assert (nsp, name) == (base_nsp, t["base_typname"])
            else:
                assert (nsp, name) == ("public", t["typname"])


@pytest.mark.parametrize("stem", stems(lambda s: s.startswith("origin-")))
def test_origin_message_matches_facts(stem: str) -> None:
    rows, meta = load(stem)
    facts = meta["facts"]
    origins = [d for _, _, d in rows if d[:1] == b"O"]
    assert len(origins) == 1
    (lsn,) = struct.unpack_from(">Q", origins[0], 1)
    name, _ = cstring(origins[0], 9)
    assert name == facts["origin"]["roname"] == "golden_origin"
    assert lsn == facts["origin_xact"]["origin_lsn_int"]
    # The Begin right before it: the origin's timestamp became the commit timestamp.
    index = [d for _, _, d in rows].index(origins[0])
    _, commit_ts, xid = struct.unpack_from(">QqI", rows[index - 1][2], 1)
    assert xid == facts["tx_with_origin"]["xid"]
    assert commit_ts == facts["origin_xact"]["origin_timestamp_pg_us"]


@pytest.mark.parametrize("stem", stems(lambda s: s.startswith(("messages-", "streaming-"))
                                        and "-v1-" not in s))
def test_logical_messages_match_facts(stem: str) -> None:
    rows, meta = load(stem)
    emitted = {f["prefix"]: f for f in meta["facts"].values()
               if isinstance(f, dict) and "prefix" in f}
    got = {}
    for _, _, data, in_stream in messages(rows):
        if data[:1] != b"M":
            continue
        pos = 5 if in_stream else 1
        flags, lsn = struct.unpack_from(">BQ", data, pos)
        prefix, pos = cstring(data, pos + 9)
        (length,) = struct.unpack_from(">I", data, pos)
        content = data[pos + 4:pos + 4 + length]
        assert pos + 4 + length == len(data)
        got[prefix] = (flags, lsn, content)
    rolled_back_tx = {p for p in emitted if p == "golden/tx-rollback"}
    assert set(got) == set(emitted) - rolled_back_tx
    for prefix, (flags, lsn, content) in got.items():
        fact = emitted[prefix]
        expected = (bytes.fromhex(fact["content"]) if prefix == "golden/bytes"
                    else fact["content"].encode())
        assert content == expected, prefix
        assert flags == (0 if "nontx" in prefix else 1), prefix
        # The LSN that pg_logical_emit_message returned.
        assert lsn == fact["lsn_int"], prefix


@pytest.mark.parametrize("stem", stems(lambda s: s.startswith("two_phase-")
                                        and ("-v3-" in s or "-v4-" in s)))
def test_two_phase_gids_match_facts(stem: str) -> None:
    rows, meta = load(stem)
    facts = meta["facts"]
    gids = {}
    for _, _, data in rows:
        kind = data[:1]
        if kind == b"b":
            _, _, _, xid = struct.unpack_from(">QQqI", data, 1)
            gids.setdefault("b", []).append((cstring(data, 29)[0], xid))
        elif kind in (b"P", b"K"):
            _, _, _, xid = struct.unpack_from(">QQqI", data, 2)
            gids.setdefault(kind.decode(), []).append((cstring(data, 30)[0], xid))
        elif kind == b"r":
            _, _, _, _, xid = struct.unpack_from(">QQqqI", data, 2)
            gids.setdefault("r", []).append((cstring(data, 38)[0], xid))
        elif kind == b"p":
            _, _, _, xid = struct.unpack_from(">QQqI", data, 2)
            gids.setdefault("p", []).append((cstring(data, 30)[0], xid))
    commit = (facts["prepared_commit"]["gid"], facts["tx_commit_prepared"]["xid"])
    rollback = (facts["prepared_rollback"]["gid"], facts["tx_rollback_prepared"]["xid"])
    streamed = (facts["prepared_streamed"]["gid"], facts["tx_stream_prepared"]["xid"])
    assert gids["b"] == [commit, rollback]
    assert gids["P"] == [commit, rollback]
    assert gids["K"] == [commit, streamed]
    assert gids["r"] == [rollback]
    assert gids["p"] == [streamed]
