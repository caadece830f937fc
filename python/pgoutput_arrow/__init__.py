"""PostgreSQL's logical replication stream (pgoutput) decoded into typed Apache Arrow tables.

>>> import pgoutput_arrow
>>> changes = pgoutput_arrow.decode("capture.parquet")      # doctest: +SKIP
>>> changes.tables["public.orders"]                          # doctest: +SKIP
pyarrow.Table
id: int32 ...

``decode`` reads a whole capture; :class:`Decoder` decodes a stream incrementally. Every
table and batch they return is a real pyarrow object whose buffers were built in Rust and
handed over through the Arrow C stream interface, without copying.
"""

from __future__ import annotations

from . import _internal
from . import exceptions as _exceptions
from ._internal import lsn_to_int, lsn_to_str
from .capture import Capture, capture_from, open_capture
from .decoding import (Changes, Decoder, EmitMode, Output, OutputKind, SpecialValues, conform, decode,
                       unify_schemas)
from .exceptions import *  # noqa: F403  (the whole hierarchy is public)

from .live import LiveBatch, LiveStream, stream  # noqa: E402  (the live source)

__version__: str = _internal.__version__

__all__ = [
    "__version__",
    "decode",
    "Decoder",
    "stream",
    "LiveStream",
    "LiveBatch",
    "Changes",
    "Output",
    "Capture",
    "open_capture",
    "lsn_to_int",
    "lsn_to_str",
    "unify_schemas",
    "conform",
]
__all__ += _exceptions.__all__
