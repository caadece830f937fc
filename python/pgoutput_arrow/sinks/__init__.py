"""Sinks that keep decoded changes somewhere else: replicas of the source tables, exactly once,
in Delta Lake (:class:`DeltaSink`; needs ``deltalake``: ``pip install 'pgoutput-arrow[delta]'``)
or Apache Iceberg (:class:`IcebergSink`; needs ``pyiceberg``: ``pip install
'pgoutput-arrow[iceberg]'``), both on one contract (:class:`ReplicaSink`)."""

from .delta import CHANGE_LOG_DIR, DeltaSink, DeltaSinkError
from .iceberg import IcebergSink, IcebergSinkError, iceberg_catalog
from .replica import LakeSinkError, ReplicaSink

__all__ = ["DeltaSink", "DeltaSinkError", "CHANGE_LOG_DIR", "IcebergSink", "IcebergSinkError",
           "iceberg_catalog", "LakeSinkError", "ReplicaSink"]
