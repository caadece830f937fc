"""Stream a logical replication slot live, decoded, and confirm to the server only what was
handled (see :mod:`pgoutput_arrow.live.livestream` for how nothing is lost or emitted twice).

One job per module: :mod:`.options` (the options, checked once), :mod:`.connection`
(psycopg2's connection and its CopyBoth stream, read and answered in Rust), :mod:`.slot`
(checks and creations before streaming, the replication commands), :mod:`.livestream` (the
stream, its batches and acknowledgements).
"""

from __future__ import annotations

from .._internal import lsn_to_str
from .._pg import classify_connect_error, quote_ident
from .options import StreamOptions, default_proto_version, parse_lsn
from .livestream import LiveBatch, LiveStream, StreamStats, stream

__all__ = ["stream", "LiveStream", "LiveBatch", "StreamStats", "StreamOptions", "lsn_to_str",
           "parse_lsn", "default_proto_version"]

# The names spark_stream.py imported from live.py before they moved to pgoutput_arrow._pg
# (as classify_connect_error and quote_ident); kept until every importer uses the new ones.
_classify_connect_error = classify_connect_error
_quote_ident = quote_ident
