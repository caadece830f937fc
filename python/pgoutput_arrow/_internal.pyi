# Stubs of the native module (crates/pgoutput-py), checked against it with
# `python -m mypy.stubtest pgoutput_arrow._internal`.
from os import PathLike
from collections.abc import Callable
from typing import Any, final

__all__ = [
    "__version__", "Decoder", "ArrowTable", "ArrowBatch", "Renderer", "WalReceiver", "TxnTracker", "CopyDecoder", "unify_schemas", "align_columns",
    "conform", "pg_text", "rows_json",
    "lsn_to_int", "lsn_to_str", "META_COLUMNS", "ARRIVED_COLUMNS", "canonical_stream", "relation_schemas",
    "relation_schema", "describe_messages", "CATALOG_KINDS", "FRAMING_KINDS", "CHANGE_KINDS", "END_KINDS",
]

__version__: str

@final
class ArrowTable:
    """A table handed over through the Arrow PyCapsule interface (``pa.table(obj)``)."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def __arrow_c_schema__(self) -> object: ...
    @property
    def num_rows(self) -> int: ...
    def __len__(self) -> int: ...

@final
class ArrowBatch:
    """One record batch handed over through the Arrow PyCapsule interface
    (``pa.record_batch(obj)``)."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...
    def __arrow_c_schema__(self) -> object: ...
    @property
    def num_rows(self) -> int: ...
    def __len__(self) -> int: ...

@final
class Decoder:
    def __new__(
        cls,
        *,
        special_values: str = "keep",
        views: bool = False,
        interval: str = "struct",
        uuid: str = "text",
        time: str = "text",
        batch_size: int | None = None,
        memory_limit: int | None = None,
        spill_dir: str | PathLike[str] | None = None,
        emit: str = "committed",
        binary: bool | None = None,
        array_ndims: int | None = None,
        date_order: str | None = None,
        timezone: str | None = None,
        datetime_range: str = "python",
    ) -> Decoder: ...
    def push(self, lsn: int, data: bytes) -> None: ...
    def push_stream(self, stream: object) -> int: ...
    def take(self) -> list[tuple[str, str | None, int | None, ArrowBatch]]: ...
    def flush(self) -> None: ...
    def column_attnums(self, relation_id: int, names: list[str], attnums: list[int]) -> None: ...
    @property
    def safe_lsn(self) -> int: ...
    @property
    def pending(self) -> tuple[int, int, int]: ...
    def finish(self) -> dict[str, Any]: ...

@final
class Renderer:
    """Decoded changes as text (``"jsonl"`` or ``"pretty"``), group by group, in commit
    order; pretty cuts text longer than ``max_chars`` characters."""

    def __new__(cls, format: str, *, max_chars: int = 64) -> Renderer: ...
    def render(
        self,
        tables: list[tuple[str, Any]],
        truncates: list[Any],
        messages: list[Any],
        write: Callable[[bytes], object],
    ) -> int: ...
    def end_transaction(self) -> bytes: ...

@final
class TxnTracker:
    """Transaction boundaries seen in a pgoutput stream."""

    def __new__(cls) -> TxnTracker: ...
    def see(self, data: bytes) -> None: ...
    @property
    def idle(self) -> bool: ...
    def prepared_floor(self) -> int | None: ...
    def take_relations(self) -> list[int]: ...

@final
class WalReceiver:
    """The read loop of a walsender's CopyBoth stream on a libpq connection."""

    def __new__(
        cls, conn: int, get_copy_data: int, consume_input: int, freemem: int, put_copy_data: int, flush: int
    ) -> WalReceiver: ...
    def read(
        self, tracker: TxnTracker, max_messages: int
    ) -> tuple[ArrowBatch | None, int, int, int, bool, int, str | None]: ...
    def send_status(
        self, written: int, flushed: int, applied: int, reply_requested: bool = False, timeout: float = 30.0
    ) -> bool: ...

@final
class CopyDecoder:
    """The binary COPY data of one relation's snapshot decoded into its batches."""

    def __new__(
        cls,
        relation_id: int,
        namespace: str,
        name: str,
        replica_identity: str,
        columns: list[tuple[str, int, int, bool]],
        types: list[tuple[int, str, str]],
        *,
        lsn: int,
        commit_ts: int,
        first_seq: int,
        special_values: str = "keep",
        views: bool = False,
        interval: str = "struct",
        uuid: str = "text",
        time: str = "text",
        binary: bool | None = None,
        array_ndims: int | None = None,
        batch_size: int | None = None,
        datetime_range: str = "python",
    ) -> CopyDecoder: ...
    @property
    def text_columns(self) -> list[bool]: ...
    @property
    def schema(self) -> ArrowTable: ...
    @property
    def rows(self) -> int: ...
    @property
    def bytes_read(self) -> int: ...
    @property
    def done(self) -> bool: ...
    def push(self, data: bytes) -> None: ...
    def take(self) -> list[ArrowBatch]: ...
    def finish(self) -> list[ArrowBatch]: ...
    def start(self, conn: int, sql: str, functions: list[int]) -> None: ...
    def read(self, max_bytes: int = ...) -> list[ArrowBatch]: ...

def unify_schemas(schemas: list[Any]) -> ArrowTable: ...
def conform(data: Any, schema: Any) -> ArrowTable: ...
def align_columns(previous: list[tuple[str, str]], columns: list[tuple[str, str]]) -> list[int | None]: ...
def pg_text(data: Any) -> ArrowTable: ...
def rows_json(data: Any) -> bytes: ...
def lsn_to_int(lsn: str) -> int: ...
def lsn_to_str(lsn: int) -> str: ...

META_COLUMNS: list[str]
ARRIVED_COLUMNS: list[str]

def canonical_stream(rows: Any, catalog: Any, history: bool = False, pieces: list[int] = ...) -> ArrowBatch: ...

def relation_schemas(
    catalog: Any,
    *,
    special_values: str = "keep",
    views: bool = False,
    interval: str = "struct",
    uuid: str = "text",
    time: str = "text",
    binary: bool | None = None,
    array_ndims: int | None = None,
) -> dict[str, ArrowTable]: ...
def relation_schema(
    relation_id: int,
    namespace: str,
    name: str,
    replica_identity: str,
    columns: list[tuple[str, int, int, bool]],
    types: list[tuple[int, str, str]],
    *,
    special_values: str = "keep",
    views: bool = False,
    interval: str = "struct",
    uuid: str = "text",
    time: str = "text",
    binary: bool | None = None,
    array_ndims: int | None = None,
) -> ArrowTable: ...
def describe_messages(data: Any) -> ArrowTable: ...

CATALOG_KINDS: bytes
FRAMING_KINDS: bytes
CHANGE_KINDS: bytes
END_KINDS: bytes
