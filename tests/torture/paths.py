"""The ways out whose output is not the decoder's own Arrow batches, read back into
:class:`oracle.Decoded` changes for the per-change comparison with test_decoding:
``pgoutput-dump`` (``--format jsonl``, ``--format parquet``, ``--format delta --change-log``)
run on a capture file, and Spark's DataFrames. Values stay in the path's own types and are
compared by :mod:`values` (``typed``), so a type a path degrades shows as a mismatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import values
from oracle import META, Decoded

#: The pgoutput-dump of the interpreter running the tester (the .venv with the built decoder).
DUMP = str(Path(sys.executable).with_name("pgoutput-dump"))


def run_dump(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    """``pgoutput-dump ARGS``; a non-zero exit raises with its stderr."""
    p = subprocess.run([DUMP, *args], capture_output=True, timeout=timeout,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if p.returncode != 0:
        raise RuntimeError(f"pgoutput-dump {' '.join(args)} exited {p.returncode}: "
                           f"{p.stderr.decode(errors='replace')[-1500:]}")
    return p


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def jsonl_changes(text: str, binary: bool = False, places: list[tuple[bool, str, bytes, int]] | None = None,
                  ) -> tuple[list[Decoded], list[tuple[bool, str, bytes, int | None]]]:
    """The changes and messages of ``--format jsonl`` output, in its order (the commit
    order); the truncate objects of one TRUNCATE statement (one per table) become one
    change, as test_decoding prints it. ``places``: gets each message with the number of
    changes before it."""
    out: list[Decoded] = []
    messages: list[tuple[bool, str, bytes, int | None]] = []
    seq = 0
    last_truncate: tuple[Any, ...] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        seq += 1
        op = o["op"]
        if op == "message":
            messages.append((bool(o["transactional"]), o["prefix"], bytes.fromhex(o["content"]),
                             o.get("xid") if o["transactional"] else None))
            if places is not None:
                places.append((*messages[-1][:3], len(out)))
            continue
        name = f"{o['schema']}.{o['table']}"
        commit = _lsn(o["commit_lsn"])
        if op == "truncate":
            key = (o["lsn"], commit)
            if last_truncate == key and out and out[-1].op == "truncate":
                out[-1].table += ", " + name
                continue
            last_truncate = key
            out.append(Decoded(name, "truncate", commit, seq, {}, {}, [], None, {}, o.get("xid"), None, True))
            continue
        last_truncate = None
        new = o.get("new") or {}
        old = o.get("old")
        if op == "delete":
            new, old = old or {}, None
        out.append(Decoded(name, op, commit, seq, new, {}, o.get("unchanged") or [], old, {}, o.get("xid"),
                           o.get("commit_ts"), True, binary=binary))
    return out, messages


def typed_changes(tables: dict[str, pa.Table], truncates: list[tuple[str, int, int, int | None]] | None = None,
                  before_json: bool = False, binary: bool = False) -> list[Decoded]:
    """The rows of ``tables`` (one unified table per name, in a path's own Arrow types:
    Spark's, Parquet's, Delta's) as changes in commit order (``_commit_lsn``, ``_seq``).
    ``truncates``: (relations, commit LSN, seq, xid); ``before_json``: ``_before`` is JSON
    text (the Delta change log)."""
    out: list[Decoded] = []
    for name, table in tables.items():
        if table.num_rows == 0:
            continue
        rows, types = values.plain(table)
        cols = [c for c in table.column_names if c not in META]
        before_types: dict[str, Any] = {}
        if "_before" in types and pa.types.is_struct(types["_before"]):
            before_types = {f.name: f.type for f in types["_before"]}
        for r in rows:
            if r["_op"] == "truncate":
                continue
            before = r.get("_before")
            if before_json and isinstance(before, str):
                before = json.loads(before)
            special = r.get("_special") or {}
            if isinstance(special, list):
                special = dict(special)
            stamp = r.get("_commit_ts")
            d = Decoded(name, r["_op"], r["_commit_lsn"], r["_seq"], {c: r[c] for c in cols}, special,
                        list(r.get("_unchanged") or []), before, {}, r.get("_xid"),
                        stamp if stamp is not None else None, True, {**types, **{f"_before.{k}": v for k, v in
                                                                               before_types.items()}})
            d.commit_ts = _stamp(stamp, types.get("_commit_ts"))
            d.binary = binary
            out.append(d)
    for rels, commit, seq, xid in truncates or []:
        out.append(Decoded(rels, "truncate", commit, seq, {}, {}, [], None, {}, xid, None, True))
    out.sort(key=lambda d: (d.commit, d.seq))
    return out


def _stamp(v: Any, t: Any) -> Any:
    """A ``_commit_ts`` read as microseconds since 1970 (values.plain) back to a value
    values.from_output takes for timestamptz."""
    return v


def parquet_output(root: Path) -> tuple[dict[str, pa.Table], list[tuple[str, int, int, int | None]]]:
    """``--format parquet --output ROOT``: each table's directory read whole (every file has
    the table's schema), and the ``_truncates`` directory."""
    tables = {}
    for d in sorted(root.iterdir()):
        if d.name.startswith((".", "_")) or not d.is_dir():
            continue
        tables[d.name] = pq.read_table(d)
    truncates = []
    t = root / "_truncates"
    if t.exists():
        for r in pq.read_table(t).to_pylist():
            truncates.append((", ".join(r["relations"]), r["_commit_lsn"], r["_seq"], r.get("_xid")))
    return tables, truncates


def delta_change_log(root: Path) -> tuple[dict[str, pa.Table], list[tuple[str, int, int, int | None]]]:
    """``--format delta --change-log --output ROOT``: ``ROOT/_changes/<table>`` read with
    deltalake; a TRUNCATE is a row per table with ``_op = 'truncate'``, grouped back into one
    change per statement (same commit LSN and seq)."""
    from deltalake import DeltaTable

    tables = {}
    grouped: dict[tuple[int, int], list[str]] = {}
    xids: dict[tuple[int, int], Any] = {}
    base = root / "_changes"
    if not base.exists():
        return {}, []
    for d in sorted(base.iterdir()):
        if d.name.startswith(".") or not d.is_dir():
            continue
        t = DeltaTable(str(d)).to_pyarrow_table()
        tables[d.name] = t
        for r in t.filter(pa.compute.equal(t.column("_op"), "truncate")).select(
                ["_commit_lsn", "_seq", "_xid"]).to_pylist():
            key = (r["_commit_lsn"], r["_seq"])
            grouped.setdefault(key, []).append(d.name)
            xids[key] = r["_xid"]
    truncates = [(", ".join(names), k[0], k[1], xids[k]) for k, names in grouped.items()]
    return tables, truncates
