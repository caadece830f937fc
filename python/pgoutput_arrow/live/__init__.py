"""Stream a logical replication slot live, decoded, and confirm to the server only what was
handled (see :mod:`pgoutput_arrow.live.livestream` for how nothing is lost or emitted twice).

One job per module: :mod:`.options` (the options, checked once), :mod:`.connection`
(psycopg2's connection and its CopyBoth stream, read and answered in Rust), :mod:`.slot`
(checks and creations before streaming, the replication commands), :mod:`.livestream` (the
stream and its acknowledgements; its positions are pgoutput-proto's ``SessionPositions``),
:mod:`.reader` (the stream read into a decoder, its flushes made into groups),
:mod:`.batches` (:class:`LiveBatch`, and what each decoded batch goes through: rows already
handled dropped, one schema per table), :mod:`.sidecar` (the ordinary connection beside the replication one:
attnums, heartbeats), :mod:`.stats` (counters and :class:`StreamStats`), :mod:`.slot_guard`
(the server's slots: status, drop), :mod:`.metrics` (the Prometheus endpoint; needs the ``metrics`` extra), :mod:`.snapshot`
(reading a snapshot: exported, planned, in chunks), :mod:`.snapshot_feed` (the initial
snapshot and tables' own, handed over to the stream), :mod:`.online_plan` and
:mod:`.online_snapshot` (the online snapshot: chunks in key order while the stream flows).
"""

from __future__ import annotations

from .._internal import lsn_to_str
from .._pg import with_output_settings
from .options import StreamOptions, default_proto_version, parse_lsn
from .batches import LiveBatch
from .livestream import HEARTBEAT_PREFIX, LiveStream, stream
from .stats import StreamStats
from .slot_guard import SlotStatus, drop_slot, slot_status
from .snapshot import (ExportedSnapshot, SnapshotChunk, SnapshotGone, SnapshotPlan, SnapshotReader,
                       export_snapshot, open_snapshot_connection, plan_snapshot, read_chunk, snapshot_table)

__all__ = ["stream", "LiveStream", "LiveBatch", "StreamStats", "StreamOptions", "lsn_to_str",
           "parse_lsn", "default_proto_version", "HEARTBEAT_PREFIX", "SlotStatus", "slot_status",
           "drop_slot", "ExportedSnapshot", "SnapshotChunk", "SnapshotGone", "SnapshotPlan",
           "SnapshotReader", "export_snapshot", "open_snapshot_connection", "plan_snapshot",
           "read_chunk", "snapshot_table", "with_output_settings"]
