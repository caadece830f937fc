"""A Prometheus / OpenMetrics endpoint for a live stream (``stream(..., metrics_port=P)``,
``pgoutput-dump --dsn ... --metrics-port P``), served by ``prometheus_client`` (the
``metrics`` extra) on its own thread.

The stream's own numbers are read when the endpoint is scraped (:class:`StreamStats`, no
work in the stream's loop); the slot's ``wal_status``, ``safe_wal_size``, retained WAL and
the server's view of the lag are polled from ``pg_replication_slots`` on an ordinary
connection of the scraping thread, at most every ``poll_interval`` seconds. Every metric has
the label ``slot``; docs/operations.md lists them, docs/grafana-dashboard.json shows them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._pg import close_quietly, one_line
from .connection import connect
from .slot_guard import SlotStatus, query_slot_status
from .stats import StreamStats

__all__ = ["MetricsServer", "WAL_STATUSES"]

#: The values of pg_replication_slots.wal_status, one series each (1 for the slot's).
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")


class _SlotPoller:
    """The slot's row of pg_replication_slots, read again when older than ``interval``."""

    def __init__(self, dsn: str, slot: str, connect_timeout: float, interval: float) -> None:
        self.dsn, self.slot = dsn, slot
        self.connect_timeout, self.interval = connect_timeout, interval
        self._conn: Any = None
        self._at = -math.inf
        self._status: SlotStatus | None = None
        self.ok = False
        self.error = ""
        self._lock = threading.Lock()

    def status(self) -> SlotStatus | None:
        with self._lock:
            if time.monotonic() - self._at >= self.interval:
                self._at = time.monotonic()
                self._poll()
            return self._status if self.ok else None

    def _poll(self) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn, self.connect_timeout, replication=False)
            with self._conn.cursor() as cur:
                rows = query_slot_status(cur, self.slot)
            self._status = rows[0] if rows else None
            self.ok, self.error = rows != [], "" if rows else "slot not found"
        except Exception as e:  # noqa: BLE001  (the server is down: said by poll_ok = 0)
            self.ok, self.error = False, one_line(str(e))
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        close_quietly(conn)


class _Collector:
    """Builds every metric family at scrape time."""

    def __init__(self, stats: Callable[[], StreamStats], poller: _SlotPoller) -> None:
        self.stats, self.poller = stats, poller

    def describe(self) -> list[Any]:
        return []  # collected at scrape time only (no describe-time scrape)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        slot = self.poller.slot
        st = self.stats()

        def gauge(name: str, doc: str, value: float | None, unit: str = "") -> Any:
            g = GaugeMetricFamily(name, doc, labels=["slot"], unit=unit)
            if value is not None:
                g.add_metric([slot], value)
            return g

        def counter(name: str, doc: str, value: float) -> Any:
            c = CounterMetricFamily(name, doc, labels=["slot"])
            c.add_metric([slot], value)
            return c

        yield gauge("pgoutput_lag_bytes", "Server WAL end (as the stream last heard it) minus "
                    "the position confirmed to the server", st.lag_bytes)
        yield gauge("pgoutput_lag_seconds", "Now minus the commit time of the last transaction "
                    "received; 0 while caught up", st.lag_seconds)
        yield gauge("pgoutput_confirmed_lsn", "The flushed position last confirmed to the "
                    "server (pg_replication_slots.confirmed_flush_lsn), as a number",
                    st.confirmed_lsn)
        yield gauge("pgoutput_server_wal_end_lsn", "The server's WAL end from its last message "
                    "or keepalive, as a number", st.server_wal_end)
        yield gauge("pgoutput_transactions_in_flight", "Transactions begun whose outcome is "
                    "not known yet (open, streamed in progress, prepared)", st.in_flight_transactions)
        yield gauge("pgoutput_buffered_bytes", "Messages of transactions in flight held in "
                    "memory", st.buffered_bytes)
        yield gauge("pgoutput_spill_bytes", "Messages of transactions in flight held in spill "
                    "files", st.spilled_bytes)
        yield counter("pgoutput_messages", "pgoutput messages received", st.messages)
        yield counter("pgoutput_received_bytes", "Bytes of pgoutput messages received", st.bytes)
        yield counter("pgoutput_reconnects", "Reconnections after a lost connection", st.reconnects)
        changes = CounterMetricFamily("pgoutput_changes", "Row changes handed out, per table",
                                      labels=["slot", "table"])
        sizes = CounterMetricFamily("pgoutput_change_bytes", "Bytes of the Arrow batches of row "
                                    "changes handed out, per table", labels=["slot", "table"])
        for table, n in sorted(st.table_changes.items()):
            changes.add_metric([slot, table], n)
            sizes.add_metric([slot, table], st.table_bytes.get(table, 0))
        yield changes
        yield sizes

        status = self.poller.status()
        yield gauge("pgoutput_slot_poll_ok", "1 when pg_replication_slots was read for this "
                    "slot at the last poll", 1.0 if status is not None else 0.0)
        if status is None:
            return
        states = GaugeMetricFamily("pgoutput_slot_wal_status", "pg_replication_slots.wal_status "
                                   "(1 for the slot's)", labels=["slot", "wal_status"])
        for name in WAL_STATUSES:
            states.add_metric([slot, name], 1.0 if status.wal_status == name else 0.0)
        yield states
        yield gauge("pgoutput_slot_safe_wal_size_bytes", "pg_replication_slots.safe_wal_size: "
                    "WAL that can be written before the slot is in danger of invalidation "
                    "(absent: no max_slot_wal_keep_size)", status.safe_wal_size)
        yield gauge("pgoutput_slot_retained_wal_bytes", "WAL the server keeps for the slot: its "
                    "position minus restart_lsn", status.retained_wal_bytes)
        yield gauge("pgoutput_slot_lag_bytes", "The server's WAL position minus the slot's "
                    "confirmed_flush_lsn, as the server sees it", status.lag_bytes)
        yield gauge("pgoutput_slot_active", "1 while a consumer streams from the slot",
                    1.0 if status.active else 0.0)
        yield gauge("pgoutput_slot_invalidated", "1 once the slot was invalidated (its changes "
                    "are lost)", 1.0 if status.invalidated else 0.0)


class MetricsServer:
    """Serves the metrics of one stream at ``http://addr:port/metrics`` until :meth:`close`.
    ``port`` 0 picks a free port (read :attr:`port`)."""

    def __init__(self, stats: Callable[[], StreamStats], *, dsn: str, slot: str, port: int,
                 addr: str = "0.0.0.0", connect_timeout: float = 10.0,
                 poll_interval: float = 5.0) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError as e:
            raise ImportError(
                "metrics need the prometheus_client package: pip install "
                "'pgoutput-arrow[metrics]'", name="prometheus_client") from e
        self._poller = _SlotPoller(dsn, slot, connect_timeout, poll_interval)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(stats, self._poller))
        self._server, self._thread = start_http_server(port, addr, registry=self.registry)
        self.port: int = int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        self._poller.close()
