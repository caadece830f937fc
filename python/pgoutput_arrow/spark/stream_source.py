"""The options of ``spark.readStream.format("pgoutput")``, checked (:class:`StreamSource`): what
every side of the source (driver, executors) needs to reach the slot, and the checks of the
slot and publications made before anything is read."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, TypeVar

from .._internal import lsn_to_int as parse_lsn
from .._internal import lsn_to_str
from .._pg import classify_connect_error, with_output_settings
from ..exceptions import ReplicationError, SlotInUse, SlotNotFound
from ..live.slot import check_publications, check_usable, slot_row

__all__ = ["StreamSource", "STREAM_OPTIONS", "retry_in_use", "log_to_stderr", "DEFAULT_IDLE_ADVANCE_BYTES",
           "DEFAULT_POLL_INTERVAL_S"]

_T = TypeVar("_T")

#: After a poll that found nothing, the next one waits this long (Spark polls every 10 ms).
DEFAULT_POLL_INTERVAL_S = 1.0

#: Without changes to the publication, the offset still moves once the server has written
#: this much other WAL, so that an idle slot does not hold it (an empty micro-batch).
DEFAULT_IDLE_ADVANCE_BYTES = 16 << 20

@dataclasses.dataclass(frozen=True)
class StreamSource:
    """The stream's options, checked: what every side (driver, executors) needs to reach the
    slot. ``table`` is ``"schema.table"``, or None for the generic change schema."""

    dsn: str
    slot: str
    publications: tuple[str, ...]
    table: str | None
    max_changes: int | None
    idle_advance_bytes: int
    poll_interval: float
    connect_timeout: int
    snapshot: bool = False
    online_snapshot: bool = False
    chunk_rows: int = 20_000
    #: Whether a chunk's exported snapshot lasts until Spark commits its micro-batch (its
    #: parts may be read again until then) instead of until its parts were read once.
    hold_chunk_snapshot: bool = False
    #: Whether the driver reads every chunk's rows itself (the horizon held for one chunk's
    #: read on the driver, the rows shipped with the batch) instead of the executors.
    chunks_on_driver: bool = False
    verbose: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "StreamSource":
        opts = {k.lower(): v for k, v in options.items()}
        missing = [k for k in ("dsn", "slot", "publication") if not opts.get(k)]
        if missing:
            raise ValueError(
                "spark.readStream.format('pgoutput') needs the options dsn (libpq connection "
                "string), slot (a logical slot with plugin pgoutput) and publication; missing: "
                + ", ".join(missing))
        table = opts.get("table") or None
        if table is not None and "." not in table:
            raise ValueError(f"option table must be schema-qualified ('public.{table}'), "
                             f"not {table!r}")
        pubs = tuple(p.strip() for p in opts["publication"].split(",") if p.strip())
        fields = {field: read(opts, name) for name, (field, read) in _FIELD_OPTIONS.items()}
        return cls(dsn=opts["dsn"], slot=opts["slot"], publications=pubs, table=table, **fields)

    # ---------------------------------------------------------------- SQL

    def connect(self, autocommit: bool = True) -> Any:
        """A connection of the driver or of an executor, with the package's output
        settings."""
        import psycopg2

        try:
            conn = psycopg2.connect(with_output_settings(self.dsn), connect_timeout=self.connect_timeout)
        except psycopg2.Error as e:
            raise classify_connect_error(e, "pgoutput stream: cannot connect") from None
        conn.autocommit = autocommit
        return conn

    def check(self, cur: Any) -> int | None:
        """Clear errors before anything is read: the slot exists, is a pgoutput slot of
        this database without two_phase, no walsender streams it, the publications exist and
        publish ``table``. Returns the slot's ``confirmed_flush_lsn``; with either snapshot,
        None if the slot does not exist yet (the query creates it)."""
        cur.execute("SELECT current_database()")
        dbname = cur.fetchone()[0]
        row = slot_row(cur, self.slot)
        if row is None and (self.snapshot or self.online_snapshot):
            self._check_publications(cur, dbname)
            return None
        if row is None:
            raise SlotNotFound(
                f'pgoutput stream: replication slot "{self.slot}" does not exist in database '
                f"{dbname} (create it with SELECT pg_create_logical_replication_slot("
                f"'{self.slot}', 'pgoutput'))")
        check_usable(row, dbname, where="pgoutput stream: ")
        if row.get("two_phase"):
            raise ReplicationError(
                f'pgoutput stream: replication slot "{self.slot}" was created with two_phase: '
                "its prepared transactions would be decoded at PREPARE, and a slot advanced "
                "past a PREPARE never sends those changes again; use a slot without two_phase")
        self._check_publications(cur, dbname)
        return parse_lsn(row["confirmed_flush_lsn"])

    def _check_publications(self, cur: Any, dbname: str) -> None:
        check_publications(cur, self.publications, dbname, where="pgoutput stream: ")
        if self.table is not None:
            cur.execute("SELECT DISTINCT schemaname || '.' || tablename FROM pg_publication_tables"
                        " WHERE pubname = ANY(%s) ORDER BY 1", (list(self.publications),))
            published = [r[0] for r in cur.fetchall()]
            if self.table not in published:
                raise ValueError(
                    f"pgoutput stream: table {self.table} is not in publication "
                    f"{', '.join(self.publications)}; it publishes {published}")

    def confirmed_flush(self, cur: Any) -> int:
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s", (self.slot,))
        row = cur.fetchone()
        if row is None:
            raise SlotNotFound(f'pgoutput stream: replication slot "{self.slot}" no longer exists')
        if row[0] is None:
            raise ReplicationError(f'pgoutput stream: replication slot "{self.slot}" was '
                                   "invalidated (no confirmed_flush_lsn): its WAL is gone")
        return parse_lsn(row[0])

    def check_not_consumed(self, cur: Any, start: int) -> int:
        """The slot must not be past ``start``: what lies between was consumed elsewhere.
        Returns the slot's position."""
        confirmed = self.confirmed_flush(cur)
        if confirmed > start:
            raise ReplicationError(
                f'pgoutput stream: replication slot "{self.slot}" is at {lsn_to_str(confirmed)}, '
                f"past this micro-batch's start {lsn_to_str(start)}: the changes between were "
                "consumed by someone else (another query on the same slot, or "
                "pg_replication_slot_advance / pg_logical_slot_get_changes); exactly-once output "
                "is no longer possible from this checkpoint")
        return confirmed


def log_to_stderr() -> None:
    """The package's INFO lines (each online snapshot chunk read, reconnects) on the driver's
    stderr, as ``pgoutput-dump -v`` shows them: the source's driver side runs in a Python
    process of its own, whose logging nobody configured."""
    import logging
    import sys

    logger = logging.getLogger("pgoutput_arrow")
    if not any(getattr(h, "_pgoutput_stream", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        handler._pgoutput_stream = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _int_option(opts: Mapping[str, str], key: str, default: int | None,
                minimum: int) -> int | None:
    """``opts`` has lower-case keys (Spark's options are case-insensitive); ``key`` is the
    documented spelling, used in messages."""
    text = opts.get(key.lower())
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {text!r}") from None
    if value < minimum:
        raise ValueError(f"option {key} must be at least {minimum}, not {value}")
    return value


def _online_option(opts: Mapping[str, str]) -> bool:
    online = _bool_option(opts, "onlineSnapshot")
    if online and _bool_option(opts, "snapshot"):
        raise ValueError("options snapshot and onlineSnapshot are two ways to take the snapshot: choose one")
    return online


def _bool_option(opts: Mapping[str, str], key: str) -> bool:
    text = (opts.get(key.lower()) or "false").strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"option {key} must be true or false, not {text!r}")
    return text == "true"


def _float_option(opts: Mapping[str, str], key: str, default: float) -> float:
    text = opts.get(key.lower())
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"option {key} must be a number of seconds, not {text!r}") from None
    if value < 0:
        raise ValueError(f"option {key} must not be negative, not {value}")
    return value


#: The options read into a field of :class:`StreamSource` other than the connection's and
#: the table's, as documented (docs/spark.md): option -> (field, how its text is read).
_FIELD_OPTIONS: dict[str, tuple[str, Callable[[Mapping[str, str], str], Any]]] = {
    "maxChangesPerTrigger": ("max_changes", lambda o, k: _int_option(o, k, None, minimum=1)),
    "idleAdvanceBytes": ("idle_advance_bytes",
                         lambda o, k: _int_option(o, k, DEFAULT_IDLE_ADVANCE_BYTES, minimum=0) or 0),
    "pollInterval": ("poll_interval", lambda o, k: _float_option(o, k, DEFAULT_POLL_INTERVAL_S)),
    "connectTimeout": ("connect_timeout", lambda o, k: _int_option(o, k, 10, minimum=1) or 10),
    "snapshot": ("snapshot", _bool_option),
    "onlineSnapshot": ("online_snapshot", lambda o, k: _online_option(o)),
    "snapshotChunkRows": ("chunk_rows", lambda o, k: _int_option(o, k, 20_000, minimum=1) or 20_000),
    "holdChunkSnapshot": ("hold_chunk_snapshot", _bool_option),
    "chunksOnDriver": ("chunks_on_driver", _bool_option),
    "verbose": ("verbose", _bool_option),
}

#: The options of ``spark.readStream.format("pgoutput")``: those :meth:`StreamSource.from_options`
#: reads, and ``timeType`` (read by the data source itself).
STREAM_OPTIONS = ("dsn", "slot", "publication", "table", *_FIELD_OPTIONS, "timeType")


def retry_in_use(fn: Callable[..., _T], *args: Any, attempts: int = 50) -> _T:
    """Run a slot function, waiting out a short overlap with another user of the slot (the
    previous query's walsender still releasing it): ``55006`` object in use."""
    import psycopg2

    for attempt in range(attempts):
        try:
            return fn(*args)
        except SlotInUse:
            if attempt == attempts - 1:
                raise
        except psycopg2.Error as e:
            if getattr(e, "pgcode", None) != "55006" or attempt == attempts - 1:
                raise classify_connect_error(e, "pgoutput stream") from None
        time.sleep(0.2)
    raise AssertionError("unreachable")
