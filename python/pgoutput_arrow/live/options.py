"""The options of a live stream, checked once: :class:`StreamOptions`, and LSN parsing."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._internal import lsn_to_int
from ..decoding import Decoder

__all__ = ["StreamOptions", "parse_lsn", "default_proto_version", "DEFAULT_CONNECT_TIMEOUT_S"]

DEFAULT_CONNECT_TIMEOUT_S = 10


def parse_lsn(value: int | str) -> int:
    """``'16/B374D848'`` or an int → the LSN as an int."""
    if isinstance(value, int):
        if not 0 <= value < 1 << 64:
            raise ValueError(f"LSN out of range: {value}")
        return value
    return lsn_to_int(str(value))


def default_proto_version(server_version_num: int) -> int:
    """The highest pgoutput protocol a server speaks: 4 on 16+, 3 on 15, 2 on 14, else 1."""
    if server_version_num >= 160000:
        return 4
    if server_version_num >= 150000:
        return 3
    if server_version_num >= 140000:
        return 2
    return 1


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """Everything :func:`pgoutput_arrow.stream` takes besides the DSN, grouped by what it
    concerns; build it with :meth:`of` (the keyword options of ``stream``)."""

    # The slot and its publications.
    slot: str
    publications: tuple[str, ...]
    create_slot: bool = False
    temporary_slot: bool = False
    two_phase: bool = False
    #: Create the slot with FAILOVER (PostgreSQL 17+): synchronized to standbys that have
    #: sync_replication_slots on, so that it survives a failover.
    failover: bool = False
    create_publication: Sequence[str] | str | None = None
    # What the server sends (START_REPLICATION's options).
    proto_version: int | None = None
    binary: bool = False
    streaming: str | None = None
    messages: bool = False
    origin: str | None = None
    # Where to start, where to stop.
    start_lsn: int = 0
    idle_timeout: float | None = None
    stop_after: float | None = None
    stop_at_lsn: int | None = None
    # The connection and its recovery.
    status_interval: float = 10.0
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    reconnect_attempts: int = 8
    reconnect_timeout: float = 120.0
    reconnect_initial_delay: float = 0.2
    reconnect_max_delay: float = 10.0
    # Operations: a Prometheus endpoint, heartbeats (seconds between two; None: none).
    metrics_port: int | None = None
    heartbeat_interval: float | None = None
    # When decoded batches come out and are acknowledged.
    flush_interval: float = 1.0
    flush_messages: int = 200_000
    auto_ack: bool = False
    # The initial snapshot (pgoutput_arrow.live.snapshot): taken as the slot is created,
    # read by that many connections in chunks of about that many bytes of table; the
    # callback is told (slot, consistent point) once the slot exists, before any row is read.
    snapshot: bool = False
    snapshot_connections: int = 4
    snapshot_chunk_bytes: int = 64 << 20
    on_snapshot: Callable[[str, int], None] | None = None
    # Passed to pgoutput_arrow.Decoder.
    decoder_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        *,
        slot: str,
        publication: str | Sequence[str] | None = None,
        create_publication: Sequence[str] | str | None = None,
        start_lsn: int | str | None = None,
        stop_at_lsn: int | str | None = None,
        status_interval: float = 10.0,
        **options: Any,
    ) -> StreamOptions:
        """The keyword options of :func:`pgoutput_arrow.stream`, checked; those that are not
        fields of this class go to the decoder."""
        if not slot:
            raise ValueError("slot is required")
        if create_publication is not None and publication is None:
            publication = slot
        if publication is None:
            raise ValueError("publication is required (or create_publication=[tables] / 'ALL')")
        pubs = [publication] if isinstance(publication, str) else list(publication)
        names = tuple(p.strip() for part in pubs for p in part.split(",") if p.strip())
        if options.get("streaming") not in (None, "on", "off", "parallel"):
            raise ValueError(
                f"streaming must be 'on', 'parallel' or 'off', not {options['streaming']!r}")
        if options.get("origin") not in (None, "any", "none"):
            raise ValueError(f"origin must be 'any' or 'none', not {options['origin']!r}")
        fields = {f.name for f in dataclasses.fields(cls)} - {"decoder_options"}
        known = {k: v for k, v in options.items() if k in fields}
        decoder = {k: v for k, v in options.items() if k not in fields}
        keywords = set(inspect.signature(cls.of).parameters) - {"options"}
        _check_decoder_options(decoder, fields | keywords, bool(known.get("binary")))
        if known.get("snapshot") and int(known.get("snapshot_connections", 4)) < 1:
            raise ValueError("snapshot_connections must be at least 1")
        # A temporary slot is always created.
        known["create_slot"] = bool(known.get("create_slot")) or bool(known.get("temporary_slot"))
        return cls(
            slot=slot,
            publications=names,
            create_publication=create_publication,
            start_lsn=parse_lsn(start_lsn) if start_lsn is not None else 0,
            stop_at_lsn=parse_lsn(stop_at_lsn) if stop_at_lsn is not None else None,
            status_interval=float(status_interval),
            decoder_options=decoder,
            **known,
        )


def _check_decoder_options(decoder: Mapping[str, Any], ours: set[str], binary: bool) -> None:
    """The options that go to the decoder (``ours``: the names ``stream()`` itself takes),
    checked before anything is done on the server:
    a misspelt option (``TypeError`` naming it and the nearest known one) or a wrong value
    (the decoder's ``ValueError``) fails here, not after the slot has been created."""
    accepted = set(inspect.signature(Decoder).parameters)
    unknown = sorted(set(decoder) - accepted)
    if unknown:
        known = sorted(ours | accepted)
        hints = [f"{name!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(name, known, 1))
                 else repr(name) for name in unknown]
        raise TypeError(f"stream() got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                        f"the options are those of stream() and of pgoutput_arrow.Decoder: {', '.join(known)}")
    Decoder(**{"binary": binary, **decoder})
