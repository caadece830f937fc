"""The live stream's ordinary connection beside its replication one (opened on first use):
the catalog reads that tell the decoder each column's attnum, and the heartbeats that move
the slot of an idle publication. Best effort: a failure is said once, and the stream goes
on (its own errors are the ones that matter)."""

from __future__ import annotations

import warnings
from typing import Any

from .._pg import close_quietly, one_line
from .connection import connect

__all__ = ["Sidecar", "HEARTBEAT_PREFIX"]

#: The prefix of the heartbeat messages (``heartbeat_interval``); with ``messages=True``
#: they are among the stream's messages.
HEARTBEAT_PREFIX = "pgoutput_arrow.heartbeat"


class Sidecar:
    """The ordinary connection of one live stream to ``dsn``."""

    def __init__(self, dsn: str, connect_timeout: float, heartbeat_interval: float | None) -> None:
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.heartbeat_interval = heartbeat_interval
        self._conn: Any = None
        self._last_heartbeat = 0.0
        self._catalog_warned = False
        self._heartbeat_warned = False

    def attnums(self, relation_ids: list[int]) -> dict[int, dict[str, int]]:
        """Each relation's columns and their attnums, as ``pg_attribute`` says now; empty
        when it cannot be read (said once: renamed columns are then told from dropped and
        added ones by their order only)."""
        try:
            with self._connection().cursor() as cur:
                cur.execute("SELECT attrelid::int8, attname, attnum FROM pg_attribute WHERE attrelid = "
                            "ANY(%s::oid[]) AND attnum > 0 AND NOT attisdropped", (relation_ids,))
                rows = cur.fetchall()
        except Exception as e:  # noqa: BLE001  (a hint: the stream goes on without it)
            self.close()
            if not self._catalog_warned:
                self._catalog_warned = True
                warnings.warn(f"pgoutput live stream: cannot read pg_attribute ({one_line(str(e))}): "
                              "renamed columns are told from dropped and added ones by their order only",
                              RuntimeWarning, stacklevel=3)
            return {}
        columns: dict[int, dict[str, int]] = {relid: {} for relid in relation_ids}
        for relid, name, attnum in rows:
            columns[int(relid)][name] = int(attnum)
        return columns

    def heartbeat(self, now: float) -> None:
        """Every ``heartbeat_interval`` seconds, a transactional logical decoding message: its
        commit is WAL of this database that the walsender decodes, so the slot advances while
        the published tables are idle (Debezium's heartbeat action). A failure is said once
        and retried next time."""
        if self.heartbeat_interval is None or now - self._last_heartbeat < self.heartbeat_interval:
            return
        self._last_heartbeat = now
        try:
            with self._connection().cursor() as cur:
                cur.execute("SELECT pg_logical_emit_message(true, %s, '')", (HEARTBEAT_PREFIX,))
        except Exception as e:  # noqa: BLE001  (the stream goes on; its own errors matter)
            self.close()
            if not self._heartbeat_warned:
                self._heartbeat_warned = True
                warnings.warn(f"pgoutput live stream: heartbeat failed ({one_line(str(e))}); "
                              "retrying every interval", RuntimeWarning, stacklevel=3)

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = connect(self.dsn, self.connect_timeout, replication=False)
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        close_quietly(conn)
