"""``--format parquet|arrow --output DIR``: per-table Parquet or Arrow IPC files.

:class:`FileSink` (captures) gathers about ``--rows-per-file`` rows of a table per file.
:class:`LiveFileSink` (live, exactly once across kill -9) writes each group of whole
transactions as one file per table (hidden ``.name.tmp``, fsync, rename, fsync of the
directory), then replaces ``DIR/_checkpoint.json`` atomically with the group's end LSN, and
only then is that LSN acknowledged. The initial snapshot (``--snapshot``) goes to
``snapshot-LSN-N.parquet`` files beside the change files, recorded in ``DIR/_snapshot.json``;
its last group moves the checkpoint to its consistent point, and only then does it count: a
snapshot cut short is deleted and taken again (see docs/snapshot.md). On start the checkpoint
says where the output ends:
``.tmp`` leftovers are deleted, so are data files of a group that was cut short (their
first commit LSN is at or after the checkpoint), and streaming resumes right after the
checkpoint, so no change is lost or written twice.

Every file of a table directory has the same schema (``_files.TableDirectory``): when a
group's rows grow it, the rewrite of the files already there is journaled before the group
is written and done after its checkpoint; on start, a journaled rewrite is finished if its
group counts, else dropped (no file was touched), so the files never hold a schema ahead of
the checkpoint.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .._files import SNAPSHOT_RECORD, read_snapshot_record, TableDirectory, fsync_dir, storable, writable_directory, write_atomically, write_json_atomically
from .._internal import lsn_to_int, lsn_to_str
from ..decoding import Output
from .filters import Chunk

__all__ = ["FileSink", "LiveFileSink", "read_checkpoint", "CHECKPOINT", "SNAPSHOT_RECORD"]

CHECKPOINT = "_checkpoint.json"
_SNAPSHOT_FILE = re.compile(r"^snapshot-([0-9A-F]{16})-(\d+)\.(parquet|arrow)$")
_DATA_FILE = re.compile(r"^([0-9A-F]{16})-([0-9A-F]{16})(-\d+)?\.(parquet|arrow)$")


def _is_leftover(name: str) -> bool:
    """Whether ``name`` is the hidden ``.name.tmp`` of a write of this module's own that a kill
    interrupted (a data or snapshot file, the checkpoint, the snapshot record): only those
    are deleted, never another file in the directory the user gave."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    inner = name[1:-len(".tmp")]
    return inner in (CHECKPOINT, SNAPSHOT_RECORD) or bool(_DATA_FILE.match(inner) or _SNAPSHOT_FILE.match(inner))


def _directory_name(out: Output) -> str:
    """Where a batch's files go: its table's directory, or ``_truncates``, ``_messages``,
    ``_transactions``."""
    return out.name if out.kind == "table" else f"_{out.kind}"


class FileSink:
    """Parquet or Arrow IPC files per table, each holding whole transactions, about
    ``rows_per_file`` rows, and named by the commit LSNs of its first and last rows. Every
    file of a table's directory has the same schema, which grows with the table's versions
    (:class:`~pgoutput_arrow._files.TableDirectory`): a file holds rows of any versions."""

    def __init__(self, root: Path, fmt: str, rows_per_file: int) -> None:
        self.root = root
        self.fmt = fmt
        self.rows_per_file = rows_per_file
        self.pending: dict[str, list[pa.RecordBatch]] = {}
        self.files: list[Path] = []
        # The table directories already there: opening one finishes a rewrite that a
        # killed run left half done.
        self.dirs: dict[str, TableDirectory] = {
            d.name: TableDirectory(d, fmt) for d in sorted(root.iterdir())
            if d.is_dir() and not d.name.startswith(("_", "."))} if root.is_dir() else {}

    def _add(self, key: str, batch: pa.RecordBatch) -> None:
        held = self.pending.get(key)
        if held and key.startswith("_") and held[0].schema != batch.schema:
            self._write(key)
            held = None
        if held is None:
            held = self.pending[key] = []
        held.append(batch)

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        for out in chunk.outputs:
            if out.num_rows:
                self._add(_directory_name(out), out.batch)
        # Only here, between groups of whole transactions: a transaction is never split
        # across files, so the files' LSN ranges do not overlap and their names sort in
        # commit order (rows_per_file is a soft limit).
        for key, batches in list(self.pending.items()):
            if sum(b.num_rows for b in batches) >= self.rows_per_file:
                self._write(key)

    def _write(self, key: str) -> None:
        batches = self.pending.pop(key)
        if key.startswith("_"):
            table = storable(pa.Table.from_batches(batches), self.fmt)
        else:
            directory = self.dirs.get(key)
            if directory is None:
                directory = self.dirs[key] = TableDirectory(self.root / key, self.fmt)
            table = directory.table(batches)
        lsn_col = "_commit_lsn" if "_commit_lsn" in table.schema.names else None
        if key == "_transactions":
            lsn_col = next((c for c in ("commit_lsn", "_commit_lsn") if c in table.schema.names),
                           None)
        lsns = [v for v in (table.column(lsn_col).to_pylist() if lsn_col else []) if v is not None]
        first, last = (min(lsns), max(lsns)) if lsns else (0, 0)
        directory_path = self.root / key
        directory_path.mkdir(parents=True, exist_ok=True)
        ext = "parquet" if self.fmt == "parquet" else "arrow"
        base = f"{first:016X}-{last:016X}"
        path = directory_path / f"{base}.{ext}"
        n = 1
        while path in self.files:
            path = directory_path / f"{base}-{n}.{ext}"
            n += 1
        write_atomically(table, path, self.fmt)
        self.files.append(path)

    def sync(self) -> None:
        pass

    def finish(self) -> None:
        for key in list(self.pending):
            self._write(key)

    def close(self) -> None:
        pass


def read_checkpoint(root: Path) -> int | None:
    """The end LSN of what ``DIR`` holds completely (None: no live output there yet)."""
    data = _checkpoint_data(root)
    return None if data is None else lsn_to_int(data["lsn"])


def _checkpoint_data(root: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((root / CHECKPOINT).read_text())
    except FileNotFoundError:
        return None
    return data


class LiveFileSink:
    """Per-table Parquet or Arrow files, one per table and group, named by the commit LSNs of
    their first and last rows, plus the checkpoint that makes a group count."""

    #: What discard_snapshot() counts.
    DISCARDS = "files"

    def __init__(self, root: Path, fmt: str) -> None:
        self.root = root
        self.fmt = fmt
        self.ext = "parquet" if fmt == "parquet" else "arrow"
        self.files: list[Path] = []
        # One writer per directory: a second one would interleave groups.
        self._lock = writable_directory(root)
        self.checkpoint = self._recover()
        #: The online snapshot's progress (--online-snapshot), kept in the checkpoint: a
        #: chunk's files count with the checkpoint that records it.
        self.online_state: dict[str, Any] | None = (_checkpoint_data(root) or {}).get("online_snapshot")
        self._written_state = self.online_state
        #: Whether this run takes an online snapshot: its chunks are files like the changes'
        #: (named by their commit LSN, counted by the checkpoint).
        self.online = False
        self._snapshot_lsn: int | None = None
        self._snapshot_files = sum(1 for d in root.iterdir() if d.is_dir()
                                   for f in d.iterdir() if _SNAPSHOT_FILE.match(f.name))
        # Every table directory under one schema: a rewrite a kill interrupted is finished
        # if its group counts, else forgotten (the group is streamed again).
        self.dirs = {d.name: TableDirectory(d, fmt, self.checkpoint)
                     for d in sorted(root.iterdir())
                     if d.is_dir() and not d.name.startswith(("_", "."))}

    def _data_files(self) -> list[Path]:
        return [f for d in self.root.iterdir() if d.is_dir() for f in d.iterdir()
                if _DATA_FILE.match(f.name)]

    def _recover(self) -> int:
        """Deletes what a killed run left: ``.tmp`` files, and the files of a group whose
        checkpoint was never written. Returns the checkpoint LSN (0: empty directory)."""
        for d in [self.root] + [d for d in self.root.iterdir() if d.is_dir()]:
            for f in d.iterdir():
                if _is_leftover(f.name):
                    f.unlink()
        checkpoint = read_checkpoint(self.root)
        files = self._data_files()
        if checkpoint is None:
            if files:
                raise OSError(f"{self.root} holds data files but no {CHECKPOINT}: it was not "
                              "written by a live pgoutput-dump; use an empty directory")
            self._write_checkpoint(0)
            return 0
        removed = False
        for f in files:
            first = int(_DATA_FILE.match(f.name).group(1), 16)  # type: ignore[union-attr]
            if first >= checkpoint:  # written after the last complete group: not counted
                f.unlink()
                removed = True
        if removed:
            for d in {f.parent for f in files}:
                fsync_dir(d)
        return checkpoint

    def _write_checkpoint(self, lsn: int) -> None:
        record: dict[str, Any] = {"lsn": lsn_to_str(lsn), "written_at": time.time()}
        state = getattr(self, "online_state", None)
        if state is not None:
            record["online_snapshot"] = state
        write_json_atomically(self.root / CHECKPOINT, record)

    # ------------------------------------------------------------------ the snapshot

    def snapshot_record(self) -> dict[str, object] | None:
        """The snapshot this directory holds or was taking: ``{"slot", "lsn"}`` (``lsn`` None
        while the slot was being created), with ``"done"`` (the checkpoint reached it)."""
        record = read_snapshot_record(self.root)
        if record is None:
            return None
        record["done"] = record["lsn"] is not None and self.checkpoint >= int(record["lsn"])  # type: ignore[call-overload]
        return record

    def begin_snapshot(self, slot: str, lsn: int | None) -> None:
        """Records, durably, the snapshot being taken: before its slot is created (``lsn``
        None), then with the slot's consistent point."""
        write_json_atomically(self.root / SNAPSHOT_RECORD,
                              {"slot": slot, "lsn": None if lsn is None else lsn_to_str(lsn)})
        self._snapshot_lsn = lsn

    def discard_snapshot(self) -> int:
        """Deletes the files and the record of a snapshot that never finished (its exported
        snapshot died with the process that read it). Returns the number of files deleted."""
        removed = 0
        for d in [d for d in self.root.iterdir() if d.is_dir()]:
            for f in d.iterdir():
                if _SNAPSHOT_FILE.match(f.name):
                    f.unlink()
                    removed += 1
            fsync_dir(d)
        (self.root / SNAPSHOT_RECORD).unlink(missing_ok=True)
        fsync_dir(self.root)
        self._snapshot_files = 0
        # The directories' schemas were read from those files too: read them again.
        self.dirs = {d.name: TableDirectory(d, self.fmt, self.checkpoint)
                     for d in sorted(self.root.iterdir())
                     if d.is_dir() and not d.name.startswith(("_", "."))}
        return removed

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        """Writes every table of the group, then moves the checkpoint to ``end_lsn``."""
        parts: dict[str, list[pa.RecordBatch]] = {}
        for out in chunk.outputs:
            if out.num_rows:
                parts.setdefault(_directory_name(out), []).append(out.batch)
        for key, batches in parts.items():
            if key.startswith("_"):
                tables = [storable(pa.Table.from_batches(same), self.fmt)
                          for same in _by_schema(batches)]
            else:
                # One file under the directory's schema, which may grow: the rewrite of
                # the files already there is journaled now and done once the group counts.
                directory = self.dirs.get(key)
                if directory is None:
                    directory = self.dirs[key] = TableDirectory(self.root / key, self.fmt)
                tables = [directory.prepare(batches, end_lsn)]
            for n, table in enumerate(tables):
                first, last = _lsn_range(table)
                directory_path = self.root / key
                directory_path.mkdir(exist_ok=True)
                suffix = f"-{n}" if n else ""
                path = directory_path / f"{first:016X}-{last:016X}{suffix}.{self.ext}"
                if not key.startswith("_") and not self.online and _is_snapshot(table):
                    # Rows of the initial snapshot, all at its consistent point: numbered.
                    self._snapshot_files += 1
                    path = directory_path / f"snapshot-{first:016X}-{self._snapshot_files:06d}.{self.ext}"
                write_atomically(table, path, self.fmt)
                self.files.append(path)
        if end_lsn > self.checkpoint or (self.online_state is not self._written_state and end_lsn):
            self._write_checkpoint(max(end_lsn, self.checkpoint))
            self.checkpoint = max(end_lsn, self.checkpoint)
            self._written_state = self.online_state
        for directory in self.dirs.values():
            directory.finish()

    def sync(self) -> None:
        pass  # write() made the group durable, checkpoint included

    def written(self) -> bool:
        """Whether this run wrote a file."""
        return bool(self.files)

    def finish(self) -> None:
        pass

    def close(self) -> None:
        self._lock.close()


def _is_snapshot(table: pa.Table) -> bool:
    """Whether ``table`` holds rows of the initial snapshot (a group holds only those, or none)."""
    return table.num_rows > 0 and "_op" in table.schema.names and table.column("_op")[0].as_py() == "snapshot"


def _by_schema(batches: list[pa.RecordBatch]) -> list[list[pa.RecordBatch]]:
    """The batches grouped by schema, in order of first appearance."""
    groups: list[list[pa.RecordBatch]] = []
    for b in batches:
        for same in groups:
            if same[0].schema.equals(b.schema):
                same.append(b)
                break
        else:
            groups.append([b])
    return groups


def _lsn_range(table: pa.Table) -> tuple[int, int]:
    """The smallest and largest commit LSN of the rows (a non-transactional message's own
    LSN where it has none)."""
    names = table.schema.names
    col = next((c for c in ("_commit_lsn", "commit_lsn") if c in names), None)
    if col is None:
        return 0, 0
    values = table.column(col)
    if "_lsn" in names and values.null_count:
        values = pc.coalesce(values, table.column("_lsn").cast(values.type))
    mm = pc.min_max(values)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return (0, 0) if lo is None else (int(lo), int(hi))
