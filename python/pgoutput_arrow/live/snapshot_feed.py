"""The snapshots a live stream hands out besides the online one (:mod:`.online_snapshot`):
the initial snapshot (``snapshot=True``: the slot created exporting its snapshot, its chunks
read, then the stream starts at its consistent point on the exporting connection), and a
table's own snapshot (:meth:`LiveStream.snapshot_table`: a table added to the publication, or
one the online snapshot cannot chunk), whose rows come out before anything else. The
reading itself is :mod:`.snapshot`'s."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from ..decoding import Output
from .batches import TableSchemas
from .online_snapshot import OnlineSnapshot
from .options import StreamOptions
from .snapshot import ExportedSnapshot, SnapshotReader, export_snapshot, plan_snapshot, snapshot_table

__all__ = ["SnapshotFeed", "SnapshotEnd"]

Group = tuple[list[Output], int]


@dataclasses.dataclass
class SnapshotEnd:
    """The initial snapshot was read to its end: the stream starts at ``lsn`` (its
    consistent point) on ``conn`` (the exporting connection); ``empty``: no row was handed
    out with that position."""

    lsn: int
    conn: Any
    empty: bool


class SnapshotFeed:
    """The initial snapshot while it is read (:attr:`initial`) and the tables' own snapshots
    queued (:attr:`late`), as groups of :class:`Output` of snapshot rows, each table's
    brought to the stream's schema of it (``schemas``)."""

    def __init__(self, dsn: str, options: StreamOptions, schemas: TableSchemas) -> None:
        self.dsn = dsn
        self.options = options
        self.schemas = schemas
        #: The initial snapshot's reader while it has chunks to read.
        self.initial: SnapshotReader | None = None
        self._exported: ExportedSnapshot | None = None
        # The last chunk's batches, held until the next one shows whether it is the last
        # (its last batch then carries the consistent point as ack_lsn).
        self._held: list[Output] | None = None
        #: Per table: rows of transactions committed below this LSN are dropped from the
        #: stream (the table's own snapshot was taken at that point).
        self.floors: dict[str, int] = {}
        #: Tables' own snapshots, handed out before anything else. Each is [table, its
        #: batches, the next non-empty one read ahead (its last batch carries the online
        #: snapshot's state that records the table as taken)].
        self.late: collections.deque[list[Any]] = collections.deque()

    @property
    def pending(self) -> bool:
        """Whether the initial snapshot or a table's still has rows to hand out."""
        return bool(self.late) or self.initial is not None

    def start_initial(self) -> None:
        """Creates the slot exporting its snapshot and plans the reading of its chunks."""
        o = self.options
        exported = export_snapshot(self.dsn, o)
        try:
            if o.on_snapshot is not None:
                o.on_snapshot(exported.slot, exported.lsn)
            plan = plan_snapshot(self.dsn, exported, o.publications, chunk_bytes=o.snapshot_chunk_bytes,
                                 tables=o.snapshot_tables, connect_timeout=o.connect_timeout)
            self.initial = SnapshotReader(self.dsn, plan, o.snapshot_connections, o.connect_timeout,
                                          **{"binary": o.binary, **o.decoder_options})
        except BaseException:
            exported.close()
            raise
        self._exported = exported

    def next_initial(self, emitted: int) -> tuple[Group | None, SnapshotEnd | None]:
        """The initial snapshot's next chunk: the group ready to hand out, if any (a chunk
        waits until the next one is read), and after the last chunk how it ended (then
        :attr:`initial` is None)."""
        reader, exported = self.initial, self._exported
        assert reader is not None and exported is not None
        try:
            chunk, batches = next(reader)
        except StopIteration:
            self.initial = None
            return self._end_initial(exported)
        group = [Output("table", chunk.table, None, self.schemas.unify(chunk.table, b), emitted, snapshot=True)
                 for b in batches if b.num_rows]
        if not group:
            return None, None
        ready, self._held = self._held, group
        return ((ready, emitted) if ready is not None else None), None

    def _end_initial(self, exported: ExportedSnapshot) -> tuple[Group, SnapshotEnd]:
        """Every chunk was read: the last one's last batch, or an empty group, hands out the
        consistent point, and the exporting connection is the stream's."""
        lsn = exported.lsn
        held, self._held = self._held, None
        if held:
            held[-1] = dataclasses.replace(held[-1], ack_lsn=lsn)
        conn, self._exported = exported.conn, None
        exported.conn = None
        return (held or [], lsn), SnapshotEnd(lsn, conn, not held)

    def add_table(self, table: str, connections: int) -> int:
        """Takes the snapshot of ``table`` (see :meth:`LiveStream.snapshot_table`), queued;
        returns its LSN, below which the table's changes are dropped from now on."""
        o = self.options
        lsn, batches = snapshot_table(self.dsn, table, publication=o.publications, connections=connections,
                                      chunk_bytes=o.snapshot_chunk_bytes, connect_timeout=o.connect_timeout,
                                      **{"binary": o.binary, **o.decoder_options})
        self.floors[table] = lsn
        self.late.append([table, batches, None])
        return lsn

    def next_table_group(self, emitted: int, online: OnlineSnapshot | None) -> Group | None:
        """The next batch of the first table snapshot queued, as a group; None once that
        snapshot is exhausted (it is then dropped from the queue). A table the online
        snapshot took this way is recorded in the state that its last batch carries (read
        one ahead to know it)."""
        late = self.late[0]
        table, batches = late[0], late[1]
        batch = late[2] if late[2] is not None else next((b for b in batches if b.num_rows), None)
        late[2] = next((b for b in batches if b.num_rows), None) if batch is not None else None
        state = None
        if late[2] is None and online is not None and table in online.fallback:
            online.exported.add(table)
            online.dirty = True
            state = online.changed_state() if batch is not None else None
        if batch is None:
            self.late.popleft()
            return None
        return [Output("table", table, None, self.schemas.unify(table, batch), emitted, snapshot=True,
                          snapshot_state=state)], emitted

    def close(self) -> None:
        """Ends what is still read: the initial snapshot (its exporting connection with it)
        and the tables' snapshots not read to their end (their slots and connections)."""
        if self.initial is not None:
            self.initial.close()
            self.initial = None
        if self._exported is not None:
            self._exported.close()
            self._exported = None
        while self.late:
            close = getattr(self.late.popleft()[1], "close", None)
            if close is not None:
                close()
