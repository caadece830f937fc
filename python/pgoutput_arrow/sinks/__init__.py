"""Sinks that keep decoded changes somewhere else: :class:`DeltaSink`, replicas of the source
tables in Delta Lake, exactly once (needs the ``deltalake`` package: ``pip install
'pgoutput-arrow[delta]'``)."""

from .delta import CHANGE_LOG_DIR, DeltaSink, DeltaSinkError

__all__ = ["DeltaSink", "DeltaSinkError", "CHANGE_LOG_DIR"]
