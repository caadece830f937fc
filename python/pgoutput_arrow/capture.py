"""Reading captures: the rows ``pg_logical_slot_get_binary_changes`` returns (``lsn``,
``xid``, ``data``), saved as Parquet, Arrow IPC (file or stream) or CSV, or held in memory.

Every source becomes a :class:`Capture`: a ``pyarrow.RecordBatchReader`` of the ``lsn`` and
``data`` columns, which the decoder imports through the Arrow C stream interface without
copying. Arrow IPC files are memory-mapped, so their messages are never copied at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from ._internal import lsn_to_int
from .exceptions import CaptureError

__all__ = ["Capture", "open_capture", "capture_from", "CHUNK_ROWS"]

#: Rows per batch when a capture is read from Parquet, CSV or a Python iterable.
CHUNK_ROWS = 65536

_PARQUET_MAGIC = b"PAR1"
_ARROW_FILE_MAGIC = b"ARROW1"
_ARROW_STREAM_CONTINUATION = b"\xff\xff\xff\xff"


@dataclass
class Capture:
    """A readable capture: ``reader`` yields batches with the columns ``lsn`` and ``data``;
    ``num_rows`` is the number of messages when known in advance (for progress)."""

    reader: pa.RecordBatchReader
    num_rows: int | None = None
    name: str = "<capture>"


def _sniff(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except IsADirectoryError:
        raise CaptureError(f"{path}: is a directory, not a capture file") from None
    except OSError as e:
        raise CaptureError(f"{path}: cannot open: {e.strerror or e}") from None
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    if head.startswith(_ARROW_FILE_MAGIC):
        return "arrow-file"
    if head.startswith(_ARROW_STREAM_CONTINUATION):
        return "arrow-stream"
    if path.suffix.lower() == ".csv" or head[:1].isalnum() or head.startswith(b'"'):
        return "csv"
    if not head:
        raise CaptureError(f"{path}: empty file, not a capture")
    raise CaptureError(
        f"{path}: not a capture: expected Parquet (PAR1), Arrow IPC (ARROW1 or a stream) or CSV, "
        f"found the bytes {head[:8]!r}"
    )


def _require_columns(schema: pa.Schema, where: str) -> None:
    missing = [c for c in ("lsn", "data") if c not in schema.names]
    if missing:
        raise CaptureError(
            f"{where}: a capture needs the columns lsn and data (as "
            f"pg_logical_slot_get_binary_changes returns); missing {', '.join(missing)} "
            f"among [{', '.join(schema.names)}]"
        )


def _selected(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatchReader:
    """Only the lsn and data columns: the decoder needs nothing else."""
    indices = [schema.get_field_index("lsn"), schema.get_field_index("data")]
    out_schema = pa.schema([schema.field(i) for i in indices])

    def gen() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_arrays([batch.column(i) for i in indices], schema=out_schema)

    return pa.RecordBatchReader.from_batches(out_schema, gen())


def _open_parquet(path: Path) -> Capture:
    import pyarrow.parquet as pq

    try:
        # Read, not memory-mapped: Parquet pages are decoded into new buffers anyway, and
        # mapped pages would stay in the process's resident memory up to the file's size.
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{path}: unreadable Parquet file: {e}") from None
    schema = pf.schema_arrow
    _require_columns(schema, str(path))
    batches = pf.iter_batches(batch_size=CHUNK_ROWS, columns=["lsn", "data"])
    out_schema = pa.schema([schema.field("lsn"), schema.field("data")])
    return Capture(
        pa.RecordBatchReader.from_batches(out_schema, batches), pf.metadata.num_rows, str(path)
    )


def _open_arrow_file(path: Path) -> Capture:
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{path}: unreadable Arrow IPC file: {e}") from None
    _require_columns(reader.schema, str(path))
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    return Capture(_selected(batches, reader.schema), None, str(path))


def _open_arrow_stream(source: str | IO[bytes], name: str) -> Capture:
    try:
        stream = pa.memory_map(source) if isinstance(source, str) else source
        reader = pa.ipc.open_stream(stream)
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{name}: unreadable Arrow IPC stream: {e}") from None
    _require_columns(reader.schema, name)
    return Capture(_selected(reader, reader.schema), None, name)


def _open_csv(path: Path) -> Capture:
    import pyarrow.csv as csv

    with open(path, "rb") as f:
        first = f.readline()
    has_header = first.split(b",")[0].strip(b'"\r\n ') == b"lsn"
    read_options = csv.ReadOptions(
        column_names=None if has_header else ["lsn", "xid", "data"],
        block_size=1 << 24,
    )
    convert = csv.ConvertOptions(column_types={"lsn": pa.string(), "data": pa.string()})
    try:
        reader = csv.open_csv(path, read_options=read_options, convert_options=convert)
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{path}: unreadable CSV capture: {e}") from None
    _require_columns(reader.schema, str(path))
    return Capture(_selected(reader, reader.schema), None, str(path))


def open_capture(path: str | os.PathLike[str]) -> Capture:
    """Opens a capture file, recognised by its first bytes: Parquet, Arrow IPC file or
    stream, or CSV (``COPY (SELECT lsn, xid, data FROM pg_logical_slot_get_binary_changes(...))
    TO ... (FORMAT csv)``, with or without a header; ``data`` as bytea's hex ``\\x...`` or
    escape output)."""
    p = Path(path)
    if not p.exists():
        raise CaptureError(f"{p}: no such file")
    kind = _sniff(p)
    if kind == "parquet":
        return _open_parquet(p)
    if kind == "arrow-file":
        return _open_arrow_file(p)
    if kind == "arrow-stream":
        return _open_arrow_stream(str(p), str(p))
    return _open_csv(p)


def open_stream(stream: IO[bytes], name: str = "<stdin>") -> Capture:
    """A capture arriving as an Arrow IPC stream on a file object (``-`` on the CLI)."""
    return _open_arrow_stream(stream, name)


def _from_messages(items: Iterable[Any]) -> Capture:
    """``(lsn, data)`` pairs or bare messages (LSN 0, PostgreSQL's "invalid LSN") in chunks."""
    schema = pa.schema([("lsn", pa.uint64()), ("data", pa.binary())])

    def gen() -> Iterator[pa.RecordBatch]:
        lsns: list[int] = []
        datas: list[bytes] = []
        for n, item in enumerate(items):
            if isinstance(item, (bytes, bytearray, memoryview)):
                lsn: Any = None
                data: Any = item
            else:
                try:
                    lsn, data = item
                except (TypeError, ValueError):
                    raise TypeError(
                        f"item {n}: expected bytes or an (lsn, data) pair, "
                        f"got {type(item).__name__}"
                    ) from None
            if lsn is None:
                lsns.append(0)
            elif isinstance(lsn, str):
                lsns.append(lsn_to_int(lsn))
            else:
                lsns.append(int(lsn))
            datas.append(bytes(data) if not isinstance(data, bytes) else data)
            if len(datas) == CHUNK_ROWS:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(lsns, pa.uint64()), pa.array(datas, pa.binary())], schema=schema
                )
                lsns, datas = [], []
        if datas:
            yield pa.RecordBatch.from_arrays(
                [pa.array(lsns, pa.uint64()), pa.array(datas, pa.binary())], schema=schema
            )

    return Capture(pa.RecordBatchReader.from_batches(schema, gen()), None, "<messages>")


def capture_from(source: Any) -> Capture:
    """Any accepted source as a :class:`Capture` (see :func:`pgoutput_arrow.decode`)."""
    if isinstance(source, Capture):
        return source
    if isinstance(source, (str, os.PathLike)):
        return open_capture(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        raise TypeError(
            "decode() got one bytes object: pass a path, a table, or an iterable of messages "
            "(for one message: [data])"
        )
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        _require_columns(source.schema, "table")
        return Capture(
            _selected(source.to_batches(), source.schema), source.num_rows, "<table>"
        )
    if isinstance(source, pa.RecordBatchReader):
        _require_columns(source.schema, "reader")
        return Capture(_selected(source, source.schema), None, "<reader>")
    if hasattr(source, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(source)
        _require_columns(reader.schema, type(source).__name__)
        return Capture(_selected(reader, reader.schema), None, type(source).__name__)
    if hasattr(source, "__arrow_c_array__"):
        return capture_from(pa.record_batch(source))
    if isinstance(source, Iterable):
        return _from_messages(source)
    raise TypeError(
        f"cannot decode a {type(source).__name__}: expected a path, a pyarrow Table, "
        "RecordBatch or RecordBatchReader, an object with __arrow_c_stream__, "
        "or an iterable of (lsn, data) pairs or bytes"
    )
