"""Reading captures: the rows ``pg_logical_slot_get_binary_changes`` returns (``lsn``,
``xid``, ``data``), saved as Parquet (a file, or a directory of them as Spark writes one),
Arrow IPC (file or stream) or CSV, or held in memory.

Every source becomes a :class:`Capture`: a ``pyarrow.RecordBatchReader`` of the ``lsn`` and
``data`` columns (and ``xid``, for a capture decoded in any order), which the decoder imports
through the Arrow C stream interface without copying. Arrow IPC files are memory-mapped, so
their messages are never copied at all.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from ._internal import lsn_to_int
from .exceptions import CaptureError, ProtocolError, UnknownRelationError

__all__ = ["Capture", "open_capture", "capture_from", "capture_table", "out_of_order_hint", "CHUNK_ROWS"]

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


#: The columns a capture is read with: in the server's order the decoder needs nothing else;
#: in any order (:func:`capture_table`) the transactions are told apart by ``xid``.
_IN_ORDER = ("lsn", "data")
_ANY_ORDER = ("lsn", "xid", "data")


def _require_columns(schema: pa.Schema, where: str, names: tuple[str, ...] = _IN_ORDER) -> None:
    missing = [c for c in names if c not in schema.names]
    if missing:
        why = " (in any order, xid tells the transactions apart)" if "xid" in missing else ""
        raise CaptureError(
            f"{where}: a capture needs the columns {', '.join(names)}{why} (as "
            f"pg_logical_slot_get_binary_changes returns); missing {', '.join(missing)} "
            f"among [{', '.join(schema.names)}]"
        )


def _selected(batches: Iterable[pa.RecordBatch], schema: pa.Schema,
              names: tuple[str, ...] = _IN_ORDER) -> pa.RecordBatchReader:
    """Only the columns ``names``: the decoder needs nothing else."""
    indices = [schema.get_field_index(n) for n in names]
    out_schema = pa.schema([schema.field(i) for i in indices])

    def gen() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_arrays([batch.column(i) for i in indices], schema=out_schema)

    return pa.RecordBatchReader.from_batches(out_schema, gen())


def _parquet_file(path: Path, names: tuple[str, ...]) -> tuple[Any, pa.Schema]:
    """An open Parquet file of a capture, and the schema of its ``names`` columns."""
    import pyarrow.parquet as pq

    try:
        # Read, not memory-mapped: Parquet pages are decoded into new buffers anyway, and
        # mapped pages would stay in the process's resident memory up to the file's size.
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{path}: unreadable Parquet file: {e}") from None
    schema = pf.schema_arrow
    _require_columns(schema, str(path), names)
    return pf, pa.schema([schema.field(n) for n in names])


def _open_parquet(path: Path, names: tuple[str, ...]) -> Capture:
    pf, out_schema = _parquet_file(path, names)
    batches = pf.iter_batches(batch_size=CHUNK_ROWS, columns=list(names))
    return Capture(
        pa.RecordBatchReader.from_batches(out_schema, batches), pf.metadata.num_rows, str(path)
    )


def _open_parquet_directory(path: Path, names: tuple[str, ...]) -> Capture:
    """A directory of Parquet files, as Spark (or any Hive-style writer) writes a capture:
    its files read one after the other in the order of their names (``part-00000-...``: the
    order of the DataFrame's partitions), the hidden ones and markers (``.``, ``_``) left out."""
    files = sorted(f for f in path.iterdir() if not f.name.startswith((".", "_")))
    if not files:
        raise CaptureError(f"{path}: a directory without capture files (Parquet files, as Spark writes a capture)")
    # Every file checked before the first row (a directory with a stray file fails at once)
    # but opened one at a time: Spark writes hundreds of parts, more than a process may hold
    # open.
    total = 0
    out_schema = None
    for f in files:
        if not f.is_file() or _sniff(f) != "parquet":
            raise CaptureError(f"{f}: not a Parquet file, in the capture directory {path} (a directory "
                               "is read as the Parquet files of one capture, as Spark writes them)")
        pf, schema = _parquet_file(f, names)
        total += pf.metadata.num_rows
        out_schema = out_schema or schema
        pf.close()

    def batches() -> Iterator[pa.RecordBatch]:
        for f in files:
            pf, schema = _parquet_file(f, names)
            try:
                for batch in pf.iter_batches(batch_size=CHUNK_ROWS, columns=list(names)):
                    if schema == out_schema:
                        yield batch
                        continue
                    try:
                        yield batch.cast(out_schema)
                    except (pa.ArrowException, ValueError) as e:
                        raise CaptureError(f"{f}: its columns ({schema}) are not those of {files[0].name} "
                                           f"({out_schema}): {e}") from None
            finally:
                pf.close()

    assert out_schema is not None
    return Capture(pa.RecordBatchReader.from_batches(out_schema, batches()), total, str(path))


def _open_arrow_file(path: Path, names: tuple[str, ...]) -> Capture:
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{path}: unreadable Arrow IPC file: {e}") from None
    _require_columns(reader.schema, str(path), names)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    return Capture(_selected(batches, reader.schema, names), None, str(path))


def _open_arrow_stream(source: str | IO[bytes], name: str, names: tuple[str, ...] = _IN_ORDER) -> Capture:
    try:
        stream = pa.memory_map(source) if isinstance(source, str) else source
        reader = pa.ipc.open_stream(stream)
    except (pa.ArrowException, OSError) as e:
        raise CaptureError(f"{name}: unreadable Arrow IPC stream: {e}") from None
    _require_columns(reader.schema, name, names)
    return Capture(_selected(reader, reader.schema, names), None, name)


def _open_csv(path: Path, names: tuple[str, ...]) -> Capture:
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
    _require_columns(reader.schema, str(path), names)
    return Capture(_selected(reader, reader.schema, names), None, str(path))


def open_capture(path: str | os.PathLike[str], *, xid: bool = False) -> Capture:
    """Opens a capture file, recognised by its first bytes: Parquet, Arrow IPC file or
    stream, or CSV (``COPY (SELECT lsn, xid, data FROM pg_logical_slot_get_binary_changes(...))
    TO ... (FORMAT csv)``, with or without a header; ``data`` as bytea's hex ``\\x...`` or
    escape output); or a directory of Parquet files (a capture Spark wrote), read in the order
    of their names. With ``xid``, the ``xid`` column is read too (and required)."""
    p = Path(path)
    if not p.exists():
        raise CaptureError(f"{p}: no such file")
    names = _ANY_ORDER if xid else _IN_ORDER
    if p.is_dir():
        return _open_parquet_directory(p, names)
    kind = _sniff(p)
    if kind == "parquet":
        return _open_parquet(p, names)
    if kind == "arrow-file":
        return _open_arrow_file(p, names)
    if kind == "arrow-stream":
        return _open_arrow_stream(str(p), str(p), names)
    return _open_csv(p, names)


def open_stream(stream: IO[bytes], name: str = "<stdin>", *, xid: bool = False) -> Capture:
    """A capture arriving as an Arrow IPC stream on a file object (``-`` on the CLI); with
    ``xid``, its ``xid`` column too."""
    return _open_arrow_stream(stream, name, _ANY_ORDER if xid else _IN_ORDER)


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


def capture_table(source: Any) -> pa.Table:
    """The whole capture ``source`` (a path or an Arrow object, as :func:`capture_from` takes)
    in memory with its ``lsn``, ``xid`` and ``data`` columns: what decoding in any order
    (``Decoder.feed_rebuilt``) takes."""
    if isinstance(source, (str, os.PathLike)):
        source = open_capture(source, xid=True).reader.read_all()
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if not isinstance(source, pa.Table):
        if isinstance(source, Capture) or not hasattr(source, "__arrow_c_stream__"):
            raise TypeError(f"decoding in any order takes a path or an Arrow table with the columns lsn, xid "
                            f"and data, not a {type(source).__name__}")
        source = pa.table(source)
    _require_columns(source.schema, "table", _ANY_ORDER)
    table = source.select(list(_ANY_ORDER))
    xid = table.column("xid")
    if pa.types.is_string(xid.type) or pa.types.is_large_string(xid.type):
        # As a driver returns PostgreSQL's xid type (psycopg: text).
        try:
            table = table.set_column(1, "xid", xid.cast(pa.int64()))
        except (pa.ArrowInvalid, ValueError) as e:
            raise CaptureError(f"column xid: text that is not a transaction id: {e}") from None
    return table


@contextmanager
def out_of_order_hint(how: str) -> Iterator[None]:
    """Raises what the body raises, with a hint when it is what a capture whose rows are not
    in the server's order raises (a change of a relation not announced yet, a transaction's
    messages outside it): ``how`` says how to decode it in any order."""
    try:
        yield
    except (UnknownRelationError, ProtocolError) as error:
        text = str(error)
        framing = isinstance(error, ProtocolError) and any(
            w in text for w in ("outside a transaction", "without a Begin", " while transaction ", "which no Stream Start"))
        if not (isinstance(error, UnknownRelationError) or framing):
            raise
        hinted = copy.copy(error)  # its attributes (lsn, relation_id, index) kept
        hinted.args = (f"{text} (if the capture's rows are not in the server's order, as when it was read back "
                       f"through Spark, {how} decodes its whole transactions in any order)",)
        raise hinted from None


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
