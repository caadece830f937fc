"""Capture files for the batch data source (``spark.read.format("pgoutput").load(path)``),
through pyarrow's filesystems: a local path or ``file://``, ``s3://``/``s3a://``/``s3n://``
(pyarrow's S3), ``hdfs://`` (pyarrow's HadoopFileSystem, which needs libhdfs), and whatever
else ``pyarrow.fs.FileSystem.from_uri`` knows. The driver lists the files and reads only the
catalog's messages (the schema); the tasks read the files themselves.

Public names of a private module: :mod:`.source` uses them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from .. import _internal
from ..exceptions import CaptureError

__all__ = ["CaptureFiles", "CAPTURE_COLUMNS", "S3_OPTIONS", "list_capture", "read_catalog", "read_files"]

CAPTURE_COLUMNS = ["lsn", "xid", "data"]

#: The S3 options of the data source (Hadoop's s3a names, case-insensitive), and the
#: environment variables read on the driver when an option is not given.
S3_OPTIONS: dict[str, tuple[str, ...]] = {
    "fs.s3a.endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "fs.s3a.access.key": ("AWS_ACCESS_KEY_ID",),
    "fs.s3a.secret.key": ("AWS_SECRET_ACCESS_KEY",),
    "fs.s3a.session.token": ("AWS_SESSION_TOKEN",),
    "fs.s3a.endpoint.region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
}

#: Inserts sampled by the catalog pass to tell whether the capture was taken with
#: ``binary 'true'`` (as :func:`~pgoutput_arrow.spark.batch.collect_catalog` does).
BINARY_SAMPLE = 100

_S3_SCHEMES = ("s3", "s3a", "s3n")
_BATCH_ROWS = 65536


@dataclass(frozen=True)
class CaptureFiles:
    """Where a capture is: ``path`` as the user wrote it, the filesystem's kind and settings
    (resolved on the driver, so that every task opens the same filesystem) and the files,
    sorted, as paths of that filesystem."""

    path: str
    kind: str  # "local", "s3", "hdfs" or "uri"
    settings: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()

    def filesystem(self) -> Any:
        """A new pyarrow filesystem for the files (each task makes its own)."""
        import pyarrow.fs as pafs

        try:
            if self.kind == "local":
                return pafs.LocalFileSystem()
            if self.kind == "s3":
                return pafs.S3FileSystem(**self.settings)
            if self.kind == "hdfs":
                return pafs.HadoopFileSystem.from_uri(self.settings["uri"])
            return pafs.FileSystem.from_uri(self.settings["uri"])[0]
        except (OSError, pa.ArrowException) as e:
            raise _error(self.path, e, self.kind) from None


def _option(opts: Mapping[str, str], name: str) -> str | None:
    value = opts.get(name)
    if value:
        return value
    for env in S3_OPTIONS.get(name, ()):
        if os.environ.get(env):
            return os.environ[env]
    return None


def _s3_settings(path: str, opts: Mapping[str, str]) -> dict[str, Any]:
    """pyarrow's S3FileSystem arguments from the options and the environment."""
    settings: dict[str, Any] = {}
    endpoint = _option(opts, "fs.s3a.endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        settings["endpoint_override"] = parts.netloc
        settings["scheme"] = parts.scheme
    access, secret = _option(opts, "fs.s3a.access.key"), _option(opts, "fs.s3a.secret.key")
    if (access is None) != (secret is None):
        raise CaptureError(f"spark.read.format('pgoutput'): {path}: S3 credentials need both an "
                           "access key and a secret key (options fs.s3a.access.key and "
                           "fs.s3a.secret.key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    if access is not None:
        settings.update(access_key=access, secret_key=secret)
        token = _option(opts, "fs.s3a.session.token")
        if token:
            settings["session_token"] = token
    region = _option(opts, "fs.s3a.endpoint.region")
    if region:
        settings["region"] = region
    return settings


def _locate(path: str, options: Mapping[str, str]) -> tuple[CaptureFiles, str]:
    """The capture's filesystem and ``path`` as a path of it."""
    opts = {k.lower(): v for k, v in options.items()}
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        return CaptureFiles(path, "local"), os.path.abspath(path)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise CaptureError(f"spark.read.format('pgoutput'): {path}: a file:// path names no "
                               "host (file:///dir/capture.parquet)")
        return CaptureFiles(path, "local"), parts.path
    if scheme in _S3_SCHEMES:
        if not parts.netloc:
            raise CaptureError(f"spark.read.format('pgoutput'): {path}: no bucket ({scheme}://bucket/key)")
        return CaptureFiles(path, "s3", _s3_settings(path, opts)), (parts.netloc + parts.path).rstrip("/")
    if scheme == "hdfs":
        return CaptureFiles(path, "hdfs", {"uri": f"hdfs://{parts.netloc}"}), parts.path or "/"
    import pyarrow.fs as pafs

    try:
        _, inner = pafs.FileSystem.from_uri(path)
    except (ValueError, pa.ArrowException) as e:
        if "unrecognized filesystem type" in str(e).lower():
            raise CaptureError(
                f"spark.read.format('pgoutput'): {path}: unknown scheme {scheme}:// (the batch source "
                "reads local paths, file://, s3://, s3a://, s3n://, hdfs:// and the other schemes of "
                "pyarrow.fs.FileSystem.from_uri)") from None
        raise _error(path, e, "uri") from None
    return CaptureFiles(path, "uri", {"uri": path}), inner


def _error(path: str, exc: BaseException, kind: str) -> CaptureError:
    text = " ".join(str(exc).split()) or type(exc).__name__
    hint = ""
    if kind == "s3":
        hint = (" (S3: the options fs.s3a.endpoint, fs.s3a.access.key, fs.s3a.secret.key, "
                "fs.s3a.endpoint.region, or AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY, AWS_REGION on the driver)")
    elif kind == "hdfs":
        hint = (" (hdfs:// needs libhdfs, JAVA_HOME and the Hadoop CLASSPATH on the driver and "
                "every executor: see pyarrow.fs.HadoopFileSystem)")
    return CaptureError(f"spark.read.format('pgoutput'): cannot read {path}: {text}{hint}")


def _hidden(relative: str) -> bool:
    """Spark's rule for files of a dataset: a part starting with ``_`` or ``.`` is not data
    (``_SUCCESS``, ``_temporary/``, ``.part-0.crc``)."""
    return any(p.startswith(("_", ".")) for p in relative.split("/") if p)


def list_capture(path: str, options: Mapping[str, str]) -> CaptureFiles:
    """The capture at ``path`` (one Parquet file, or a directory of them, searched
    recursively for ``*.parquet``), listed on the driver."""
    import pyarrow.fs as pafs

    capture, root = _locate(path, options)
    fs = capture.filesystem()
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise CaptureError(f"spark.read.format('pgoutput'): {path} does not exist")
        if info.type == pafs.FileType.File:
            files = [root]
        else:
            found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
            prefix = len(root.rstrip("/")) + 1
            files = sorted(f.path for f in found if f.type == pafs.FileType.File
                           and f.path.endswith(".parquet") and not _hidden(f.path[prefix:]))
    except CaptureError:
        raise
    except (OSError, pa.ArrowException) as e:
        raise _error(path, e, capture.kind) from None
    return CaptureFiles(capture.path, capture.kind, capture.settings, tuple(files))


def _batches(capture: CaptureFiles, files: tuple[str, ...] | list[str], fs: Any) -> Iterator[pa.RecordBatch]:
    """The capture columns of ``files``, batch by batch, ``data`` as binary."""
    import pyarrow.parquet as pq

    for f in files:
        try:
            with fs.open_input_file(f) as handle:
                parquet = pq.ParquetFile(handle)
                missing = [c for c in CAPTURE_COLUMNS if c not in parquet.schema_arrow.names]
                if missing:
                    raise CaptureError(f"spark.read.format('pgoutput'): {capture.path}: {f} has no column(s) "
                                       f"{', '.join(missing)} (a capture has lsn, xid, data)")
                for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=CAPTURE_COLUMNS):
                    yield batch
        except CaptureError:
            raise
        except (OSError, pa.ArrowException) as e:
            raise _error(f"{capture.path} ({f})", e, capture.kind) from None


def read_files(capture: CaptureFiles, files: tuple[str, ...] | list[str]) -> pa.Table:
    """``files`` of ``capture`` as one table of ``lsn``, ``xid``, ``data`` (a task's work)."""
    parts = [pa.Table.from_batches([b]) for b in _batches(capture, files, capture.filesystem())]
    if not parts:
        return pa.table({"lsn": pa.array([], pa.int64()), "xid": pa.array([], pa.int64()),
                         "data": pa.array([], pa.binary())})
    # The crates normalise the columns (lsn as text or integer).
    return pa.concat_tables(parts, promote_options="permissive")


def read_catalog(capture: CaptureFiles) -> tuple[pa.Table, bool]:
    """The catalog pass over the files, on the driver: the rows of the kinds
    ``_internal.CATALOG_KINDS`` (by the first byte of ``data``) and the first
    :data:`BINARY_SAMPLE` Inserts; every file is read, only those rows are kept. And whether
    no ``xid`` has rows in two files: then every file holds whole transactions."""
    kinds = pa.array([bytes([k]) for k in _internal.CATALOG_KINDS], pa.binary())
    insert = pa.scalar(b"I", pa.binary())
    kept: list[pa.Table] = []
    inserts = 0
    fs = capture.filesystem()
    xids: list[pa.Array] = []
    for f in capture.files:
        in_file: list[pa.Array] = []
        for batch in _batches(capture, [f], fs):
            in_file.append(pc.unique(batch.column(1)))
            inserts, table = _catalog_rows(batch, kinds, insert, inserts)
            if table.num_rows:
                kept.append(table)
        if in_file:
            xids.append(pc.unique(pa.chunked_array(in_file)))
    whole = True
    if len(xids) > 1:
        every = pa.chunked_array(xids, xids[0].type)
        whole = len(pc.unique(every)) == len(every)
    if not kept:
        return read_files(capture, []), whole
    return pa.concat_tables(kept, promote_options="permissive").combine_chunks(), whole


def _catalog_rows(batch: pa.RecordBatch, kinds: pa.Array, insert: pa.Scalar, inserts: int
                  ) -> tuple[int, pa.Table]:
    """The rows of ``batch`` the catalog keeps, and the count of Inserts sampled so far."""
    data = batch.column(2)
    if not pa.types.is_binary(data.type):
        data = data.cast(pa.binary())
    first = pc.binary_slice(data, 0, 1)
    mask = pc.is_in(first, value_set=kinds)
    if inserts < BINARY_SAMPLE:
        is_insert = pc.equal(first, insert)
        n = pc.sum(is_insert).as_py() or 0
        if n:
            # The first Inserts: those up to the sample's size.
            running = pc.cumulative_sum(is_insert.cast(pa.int64()))
            mask = pc.or_(mask, pc.and_(is_insert, pc.less_equal(running, BINARY_SAMPLE - inserts)))
            inserts += n
    return inserts, pa.Table.from_batches([batch]).filter(mask)
