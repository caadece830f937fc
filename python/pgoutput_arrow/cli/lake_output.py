"""``--format delta|iceberg --output DIR``: the pipeline's sink around
:class:`pgoutput_arrow.sinks.DeltaSink` or :class:`~pgoutput_arrow.sinks.IcebergSink`
(replicas and change logs in Delta Lake or Apache Iceberg).

Live, each group (``--commit-interval`` seconds of whole transactions) is one lake commit
per table, made when the pipeline syncs, before the group is acknowledged. From a capture, a
commit is made once about ``--rows-per-file`` changes are held, and at the end.

The directory is checked first (created, locked against a second writer, written to), so a
location that cannot be written fails in one line before a slot is made or a row is read.
Live with ``--online-snapshot``, ``DIR/_online_snapshot.json`` holds the online snapshot's
progress, written once the groups it came with are committed and before they are
acknowledged; the same command resumes at the next chunk. Live with ``--snapshot``,
``DIR/_snapshot.json`` records the initial snapshot (its slot, then
its consistent point, then ``done`` once its last group is committed), so that the same
command started again resumes: a finished snapshot is not taken again (the slot is streamed
from where it was confirmed), and one cut short is discarded (its lake tables deleted, its
slot dropped) and taken again, as the Parquet output does (docs/delta.md, docs/iceberg.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import SNAPSHOT_RECORD, read_snapshot_record, fsync_dir, writable_directory, write_json_atomically
from .._internal import lsn_to_int, lsn_to_str
from .arguments import UsageError
from .filters import Chunk

if TYPE_CHECKING:  # the sinks need numpy and a lake package: imported when a lake is written
    from ..sinks import DeltaSink, IcebergSink

__all__ = ["LakeOutput", "SNAPSHOT_RECORD", "ONLINE_STATE"]

#: Where ``--online-snapshot`` keeps its progress in the lake's directory.
ONLINE_STATE = "_online_snapshot.json"


def _delta_tables(root: Path) -> list[Path]:
    """The Delta tables under ``root`` (replicas, and change logs under ``_changes``)."""
    found = []
    for parent in (root, root / "_changes"):
        if parent.is_dir():
            found += [d for d in sorted(parent.iterdir())
                      if d.is_dir() and (d / "_delta_log").is_dir()]
    return found


def _iceberg_tables(sink: IcebergSink) -> list[tuple[str, ...]]:
    """The Iceberg tables of ``sink``'s catalog that this source wrote (a position of its
    app id): a catalog may hold others, which are not ours to discard."""
    from ..sinks.iceberg import POSITION_PREFIX

    catalog, key = sink.catalog, POSITION_PREFIX + sink.app_id
    found = []
    for namespace in catalog.list_namespaces():
        for identifier in catalog.list_tables(namespace):
            if key in catalog.load_table(identifier).properties:
                found.append(tuple(identifier))
    return found


def _catalog_properties(pairs: list[str]) -> dict[str, str]:
    """``--iceberg-catalog KEY=VALUE`` pairs as pyiceberg catalog properties."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--iceberg-catalog {pair!r}: expected KEY=VALUE (a pyiceberg "
                             "catalog property, such as type=sql or uri=postgresql+psycopg2://...)")
        out[key] = value
    return out


class LakeOutput:
    """The pipeline's sink for ``--format delta`` and ``--format iceberg`` (see the module's
    note)."""

    def __init__(self, args: argparse.Namespace, live: bool) -> None:
        from ..sinks import DeltaSink, IcebergSink

        self.live = live
        self.root = Path(args.output)
        self._lock = writable_directory(self.root)
        self.iceberg = args.format == "iceberg"
        options: dict[str, Any] = dict(
            app_id=args.app_id or (args.slot if live else "capture"),
            replica=not args.change_log_only, change_log=args.change_log or args.change_log_only,
            append_only=args.append_only, drop_columns=args.drop_columns,
            max_rows=args.rows_per_file, max_seconds=None)
        self.sink: DeltaSink | IcebergSink
        if self.iceberg:
            self.sink = IcebergSink(str(args.output),
                                    catalog=_catalog_properties(args.iceberg_catalog or []),
                                    **options)
        else:
            self.sink = DeltaSink(str(args.output), **options)
        #: What discard_snapshot() counts.
        self.DISCARDS = "Iceberg tables" if self.iceberg else "Delta tables"
        #: Whether the lake holds tables already (for --snapshot: an empty lake).
        self.checkpoint = 1 if self._tables() else 0
        self._slot = ""
        self._snapshot_lsn: int | None = None
        self._end_lsn = 0
        #: The online snapshot's progress (--online-snapshot): the state handed out with the
        #: groups written, stored in DIR/_online_snapshot.json once they are committed.
        try:
            self.online_state: dict[str, Any] | None = json.loads((self.root / ONLINE_STATE).read_text())
        except FileNotFoundError:
            self.online_state = None
        self._written_state = self.online_state
        self.online = False

    def _tables(self) -> list[Path] | list[tuple[str, ...]]:
        from ..sinks import IcebergSink

        if isinstance(self.sink, IcebergSink):
            return _iceberg_tables(self.sink)
        return _delta_tables(self.root)

    # -- the initial snapshot (LiveSource asks, as it asks the Parquet output)

    def snapshot_record(self) -> dict[str, object] | None:
        """The snapshot this lake holds or was taking: ``{"slot", "lsn", "done"}`` (``lsn``
        None while its slot was being created)."""
        record = read_snapshot_record(self.root)
        if record is None:
            return None
        record["done"] = bool(record.get("done")) and record["lsn"] is not None
        return record

    def _record(self, slot: str, lsn: int | None, done: bool) -> None:
        write_json_atomically(self.root / SNAPSHOT_RECORD,
                              {"slot": slot, "lsn": None if lsn is None else lsn_to_str(lsn), "done": done})

    def begin_snapshot(self, slot: str, lsn: int | None) -> None:
        """Records, durably, the snapshot being taken: before its slot is created (``lsn``
        None), then with the slot's consistent point."""
        self._record(slot, lsn, False)
        self._slot = slot
        self._snapshot_lsn = lsn

    def discard_snapshot(self) -> int:
        """Deletes the lake tables and the record of a snapshot that never finished (the
        lake held nothing else: ``--snapshot`` starts in an empty lake). Returns how many
        tables were deleted."""
        from ..sinks import IcebergSink

        tables = self._tables()
        for t in tables:
            if isinstance(t, Path):
                shutil.rmtree(t)
            elif isinstance(self.sink, IcebergSink):
                self.sink.catalog.purge_table(t)
        fsync_dir(self.root)
        (self.root / SNAPSHOT_RECORD).unlink(missing_ok=True)
        fsync_dir(self.root)
        self.checkpoint = 0
        return len(tables)

    def written(self) -> bool:
        """Whether this run committed anything to the lake."""
        return self.sink.commits > 0

    # -- the pipeline's sink

    def write(self, chunk: Chunk, end_lsn: int) -> None:
        self.sink.write(chunk.outputs)
        self._end_lsn = max(self._end_lsn, end_lsn)
        if not self.live and self.sink.due():
            self.sink.commit()

    def sync(self) -> None:
        self.sink.commit()
        if self.online_state is not self._written_state:
            # After the lake commits, before the slot is acknowledged: never ahead of what the
            # lake holds. Behind it after a kill in between, the chunks since are read again
            # (their rows replace the same rows: a MERGE on the key) and the changes since
            # come again from the slot, skipped where a table holds them.
            write_json_atomically(self.root / ONLINE_STATE, self.online_state)
            self._written_state = self.online_state
        if self._snapshot_lsn is not None and self._end_lsn >= self._snapshot_lsn:
            # Its last group is committed: from now on a restart streams the slot.
            self._record(self._slot, self._snapshot_lsn, True)
            self._snapshot_lsn = None

    def finish(self) -> None:
        self.sink.commit()

    def close(self) -> None:
        self.sink.close()
        self._lock.close()
