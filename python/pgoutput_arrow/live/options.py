"""The options of a live stream, checked once: :class:`StreamOptions`, and LSN parsing."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._internal import lsn_to_int
from .._names import unknown_options
from ..decoding import Decoder

__all__ = ["StreamOptions", "Flag", "TOPICS", "option", "flagged", "describe", "options_doc", "parse_lsn",
           "default_proto_version", "DEFAULT_CONNECT_TIMEOUT_S"]

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
class Flag:
    """How an option of :func:`~pgoutput_arrow.stream` is given to ``pgoutput-dump``:
    its flag, the help group (``live`` or ``operations``), its metavar and the kind of value
    (``bool``: a switch; ``int``, ``float``, ``str``, ``size``: bytes, or 64MB, ...)."""

    flag: str
    kind: str
    metavar: str | None = None
    group: str = "live"
    #: What the help says besides the option's phrase, of the command line's own ways.
    note: str = ""


#: The topics of :func:`~pgoutput_arrow.stream`'s options, in the order its documentation
#: lists them.
TOPICS = {
    "slot": "The slot",
    "server": "What the server sends",
    "connection": "The connection and its recovery",
    "operations": "Operations (docs/operations.md)",
    "stop": "When the stream stops",
    "snapshot": "The initial snapshot (:mod:`pgoutput_arrow.live.snapshot`)",
    "batches": "When batches come out and are acknowledged",
}


def option(default: Any, doc: str, topic: str, flag: Flag | None = None,
           choices: tuple[Any, ...] | None = None) -> Any:
    """A field of :class:`StreamOptions` with what documents it (``doc``: one phrase, for
    :func:`~pgoutput_arrow.stream`'s documentation and the CLI's help alike), where it is
    documented (``topic``, a key of :data:`TOPICS`), its flag on the command line and the
    values it takes."""
    return dataclasses.field(default=default, metadata={"doc": doc, "topic": topic, "flag": flag,
                                                        "choices": choices})


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """Everything :func:`pgoutput_arrow.stream` takes besides the DSN, grouped by what it
    concerns; build it with :meth:`of` (the keyword options of ``stream``).

    This class is the options' one table: each field's metadata documents it
    (:func:`option`), and :func:`stream`'s documentation and ``pgoutput-dump``'s flags are
    made from it (:func:`options_doc`, :func:`flagged`)."""

    # The slot and its publications.
    slot: str
    publications: tuple[str, ...]
    create_slot: bool = option(False, "create the slot if it does not exist (an existing one is reused: "
                               "the same command resumes)", "slot", Flag("--create-slot", "bool"))
    temporary_slot: bool = option(False, "with {create_slot}: a temporary slot, dropped when the connection "
                                  "ends (no resume after a disconnect)", "slot", Flag("--temporary", "bool"))
    two_phase: bool = option(False, "decode prepared transactions (the slot is created with two_phase)",
                             "slot", Flag("--two-phase", "bool"))
    failover: bool = option(False, "a failover slot (PostgreSQL 17+): created (or altered) with FAILOVER, "
                            "synchronized to standbys with sync_replication_slots = on", "slot",
                            Flag("--failover", "bool", group="operations"))
    create_publication: Sequence[str] | str | None = None
    # What the server sends (START_REPLICATION's options).
    proto_version: int | None = option(None, "pgoutput protocol, by default the highest the server speaks: "
                                       "4 on 16+, 3 on 15, 2 on 14, else 1", "server",
                                       Flag("--proto-version", "int"), (1, 2, 3, 4))
    binary: bool = option(False, "values in binary send format", "server", Flag("--binary", "bool"))
    streaming: str | None = option(None, "stream in-progress transactions, by default on from protocol 2",
                                   "server", Flag("--streaming", "str"), ("on", "parallel", "off"))
    messages: bool = option(False, "include logical decoding messages (pg_logical_emit_message)", "server",
                            Flag("--messages", "bool"))
    origin: str | None = option(None, "changes of which origin", "server", Flag("--origin", "str"),
                                ("any", "none"))
    # Where to start, where to stop.
    start_lsn: int = 0
    idle_timeout: float | None = option(None, "stop after that many seconds without changes", "stop",
                                        Flag("--idle-timeout", "float", "S"))
    stop_after: float | None = option(None, "stop after that many seconds", "stop",
                                      Flag("--stop-after", "float", "S"))
    stop_at_lsn: int | None = None
    # The connection and its recovery.
    status_interval: float = option(10.0, "seconds between standby status updates", "connection",
                                    Flag("--status-interval", "float", "S"))
    connect_timeout: float = option(float(DEFAULT_CONNECT_TIMEOUT_S), "seconds to wait for a connection",
                                    "connection", Flag("--connect-timeout", "float", "S"))
    reconnect_attempts: int = option(8, "reconnect attempts after the connection is lost", "connection",
                                     Flag("--reconnect-attempts", "int", "N"))
    reconnect_timeout: float = option(120.0, "give up reconnecting after that many seconds", "connection",
                                      Flag("--reconnect-timeout", "float", "S"))
    reconnect_initial_delay: float = option(0.2, "seconds before the first reconnect attempt", "connection")
    reconnect_max_delay: float = option(10.0, "the most seconds between two attempts (the delay doubles "
                                        "from the first)", "connection")
    # Operations: a Prometheus endpoint, heartbeats (seconds between two; None: none).
    metrics_port: int | None = option(None, "serve Prometheus metrics on http://0.0.0.0:PORT/metrics (0: a "
                                      "free port, see LiveStream.metrics_port; needs prometheus_client: "
                                      "pip install 'pgoutput-arrow[metrics]')", "operations",
                                      Flag("--metrics-port", "int", "PORT", "operations"))
    heartbeat_interval: float | None = option(None, "seconds between two logical decoding messages "
                                              "(pg_logical_emit_message) that keep the slot advancing while "
                                              "the published tables are idle", "operations",
                                              Flag("--heartbeat-interval", "float", "S", "operations"))
    # When decoded batches come out and are acknowledged.
    flush_interval: float = option(1.0, "seconds of changes gathered per decoder flush", "batches")
    flush_messages: int = option(200_000, "messages gathered per decoder flush at most", "batches")
    flush_linger: float = option(0.01, "seconds a stream that keeps receiving changes waits after a flush for "
                                 "more before it hands out what is complete (fewer, larger batches; 0: hand "
                                 "out as soon as it has caught up with the server)", "batches")
    auto_ack: bool = option(False, "acknowledge a batch when the next one is asked for", "batches")
    # The initial snapshot (pgoutput_arrow.live.snapshot): taken as the slot is created,
    # read by that many connections in chunks of about that many bytes of table; the
    # callback is told (slot, consistent point) once the slot exists, before any row is read.
    snapshot: bool = option(False, "with {create_slot}: first every published table's rows as of the slot's "
                            "creation (_op 'snapshot'), then the changes from there", "snapshot",
                            Flag("--snapshot", "bool", note="with --output: snapshot-*.parquet files, taken again "
                                 "only if the output holds no finished one"))
    snapshot_connections: int = option(4, "connections that read the snapshot in parallel", "snapshot",
                                       Flag("--snapshot-connections", "int", "N"))
    snapshot_chunk_bytes: int = option(64 << 20, "bytes of table each connection reads at a time",
                                       "snapshot", Flag("--snapshot-chunk-bytes", "size", "SIZE"))
    # The online snapshot (pgoutput_arrow.live.online_snapshot): chunks in key order while
    # the stream flows, resumable from a stored state.
    online_snapshot: bool = option(False, "every published table read in key order, chunk by chunk, while the "
                                   "stream flows (_op 'snapshot' rows where each chunk's watermark is in "
                                   "the stream; no transaction longer than one chunk; resumable)",
                                   "snapshot",
                                   Flag("--online-snapshot", "bool", note="with --output its progress is kept "
                                        "with the output (_checkpoint.json of Parquet and Arrow files; "
                                        "_online_snapshot.json beside Delta or Iceberg tables, written once they committed): "
                                        "the same command resumes at the next chunk"))
    snapshot_chunk_rows: int = option(20_000, "rows of a table each chunk of the online snapshot reads",
                                      "snapshot", Flag("--snapshot-chunk-rows", "int", "N"))
    snapshot_tables: tuple[str, ...] | None = option(
        None, "only these published tables (\"schema.table\", comma-separated or a list) are in the snapshot, "
        "the initial or the online one (every published table's changes still stream)", "snapshot",
        Flag("--snapshot-tables", "str", "T1,T2"))
    snapshot_state: Mapping[str, Any] | None = option(
        None, "the online snapshot's progress to resume from: the snapshot_state of the last chunk "
        "stored (LiveBatch.snapshot_state); without it the online snapshot starts over", "snapshot")
    on_snapshot: Callable[[str, int], None] | None = option(
        None, "called with the slot's name and consistent point once the slot exists, before any "
        "row is read", "snapshot")
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
        if known.get("snapshot") and known.get("online_snapshot"):
            raise ValueError("snapshot and online_snapshot are two ways to take the snapshot: choose one")
        if known.get("snapshot_state") is not None and not known.get("online_snapshot"):
            raise ValueError("snapshot_state resumes an online snapshot: it needs online_snapshot=True")
        if known.get("snapshot_tables") is not None:
            known["snapshot_tables"] = _table_list(known["snapshot_tables"])
            if not (known.get("snapshot") or known.get("online_snapshot")):
                raise ValueError("snapshot_tables names the tables of a snapshot: it needs snapshot=True or "
                                 "online_snapshot=True")
        _check_not_negative(known)
        if int(known.get("snapshot_chunk_rows", 1)) < 1:
            raise ValueError("snapshot_chunk_rows must be at least 1")
        if known.get("snapshot") and int(known.get("snapshot_connections", 4)) < 1:
            raise ValueError("snapshot_connections must be at least 1")
        # A temporary slot is always created.
        known["create_slot"] = bool(known.get("create_slot")) or bool(known.get("temporary_slot"))
        if "status_interval" in known:
            known["status_interval"] = float(known["status_interval"])
        return cls(
            slot=slot,
            publications=names,
            create_publication=create_publication,
            start_lsn=parse_lsn(start_lsn) if start_lsn is not None else 0,
            stop_at_lsn=parse_lsn(stop_at_lsn) if stop_at_lsn is not None else None,
            decoder_options=decoder,
            **known,
        )


def _check_not_negative(known: Mapping[str, Any]) -> None:
    """A count or a duration given below 0 (``flush_interval=-1``) fails here, naming it: no
    option of the stream takes one."""
    for name, value in sorted(known.items()):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"{name} must not be negative, not {value!r}")


def _table_list(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a.t1,b.t2"`` or ``["a.t1", "b.t2"]`` → ``("a.t1", "b.t2")``; each ``schema.table``."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(str(p).strip() for p in parts if str(p).strip()))
    wrong = [n for n in names if n.count(".") != 1]
    if not names or wrong:
        raise ValueError(f"snapshot_tables: tables as \"schema.table\", not {', '.join(map(repr, wrong)) or repr(value)}")
    return names


def flagged() -> list[tuple[dataclasses.Field[Any], Flag]]:
    """The options ``pgoutput-dump`` takes as flags (with ``--dsn``), with their flags."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(StreamOptions) if f.metadata.get("flag")]


def _default_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else ""
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 20} MiB"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else repr(value) if isinstance(value, str) else str(value)


def describe(f: dataclasses.Field[Any], ref: Callable[[str], str] = lambda name: f"``{name}``",
             choices: bool = True) -> str:
    """An option's phrase with its values and its default: ``doc (one of 'on', 'off';
    default 4)``; ``ref`` names the other options it names (``{create_slot}`` in the
    phrase)."""
    doc: str = f.metadata["doc"].format_map({g.name: ref(g.name) for g in dataclasses.fields(StreamOptions)})
    values = f.metadata.get("choices") if choices else None
    default = _default_text(f.default)
    extra = ["one of " + ", ".join(repr(c) for c in values)] if values else []
    if default:
        extra.append(f"default {default}")
    return f"{doc} ({'; '.join(extra)})" if extra else doc


def options_doc() -> str:
    """The options of :class:`StreamOptions`, by topic, as :func:`~pgoutput_arrow.stream`'s
    documentation lists them (reST bullets)."""
    by_topic: dict[str, list[str]] = {t: [] for t in TOPICS}
    for f in dataclasses.fields(StreamOptions):
        if "doc" in f.metadata:
            by_topic[f.metadata["topic"]].append(f"* ``{f.name}``: {describe(f)}")
    return "\n\n".join(f"{TOPICS[t]}:\n\n" + "\n".join(items) for t, items in by_topic.items() if items)


def _check_decoder_options(decoder: Mapping[str, Any], ours: set[str], binary: bool) -> None:
    """The options that go to the decoder (``ours``: the names ``stream()`` itself takes),
    checked before anything is done on the server:
    a misspelt option (``TypeError`` naming it and the nearest known one) or a wrong value
    (the decoder's ``ValueError``) fails here, not after the slot has been created."""
    accepted = set(inspect.signature(Decoder).parameters)
    unknown = sorted(set(decoder) - accepted)
    if unknown:
        known = sorted(ours | accepted)
        raise TypeError(f"stream() got {unknown_options(unknown, known)}; "
                        f"the options are those of stream() and of pgoutput_arrow.Decoder: {', '.join(known)}")
    Decoder(**{"binary": binary, **decoder})
