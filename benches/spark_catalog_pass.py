"""The batch data source's catalog pass on a capture, against reading it whole (docs/spark.md,
"The batch data source"). Usage: spark_catalog_pass.py SOURCE.parquet TILED.parquet — TILED is
written (SOURCE repeated to about 250 MB of data) when missing."""
import os, sys, time, statistics
import pyarrow as pa, pyarrow.parquet as pq
from pgoutput_arrow.spark._capture import list_capture, read_catalog, read_files
from pgoutput_arrow.spark._common import narrow_catalog, is_binary_capture
from pgoutput_arrow.spark._catalog_pass import table_schemas
from pgoutput_arrow import _internal
src, out = sys.argv[1], sys.argv[2]
if not os.path.exists(out):
    t = pq.read_table(src)
    # the same messages repeated: a capture of the size wanted, with the source's mix of kinds
    reps = max(1, int(250e6 // t.column("data").nbytes))
    pq.write_table(pa.concat_tables([t] * reps), out, row_group_size=1 << 20)
t = pq.read_metadata(out)
print("capture", out, os.path.getsize(out) / 1e6, "MB file,", t.num_rows, "rows")
cap = list_capture(out, {})
def timed(fn):
    ts = []
    for _ in range(3):
        os.system(f"cat {out} > /dev/null")  # warm page cache
        a = time.perf_counter(); r = fn(); ts.append(time.perf_counter() - a)
    return statistics.median(ts), min(ts), max(ts), r
m, lo, hi, full = timed(lambda: read_files(cap, cap.files))
print(f"read lsn,xid,data whole      {m:.2f} s ({lo:.2f}-{hi:.2f}), data {full.column('data').nbytes/1e6:.0f} MB")
m, lo, hi, (cat, _) = timed(lambda: read_catalog(cap))
print(f"catalog pass (first byte, xids) {m:.2f} s ({lo:.2f}-{hi:.2f}), kept {cat.num_rows} rows")
def by_describe():
    parts = []
    for f in cap.files:
        for b in pq.ParquetFile(f).iter_batches(batch_size=65536, columns=["lsn","xid","data"]):
            k = pa.table(_internal.describe_messages(pa.table({"data": b.column(2)}))).column("kind")
            import pyarrow.compute as pc
            parts.append(pa.Table.from_batches([b]).filter(pc.is_in(k, pa.array(["relation","type","begin","commit","stream_start","stream_abort","rollback_prepared","prepare","stream_commit","stream_prepare","commit_prepared","begin_prepare"]))))
    return pa.concat_tables(parts)
m, lo, hi, _ = timed(by_describe)
print(f"catalog pass (describe_messages) {m:.2f} s ({lo:.2f}-{hi:.2f})")
m, lo, hi, _ = timed(lambda: table_schemas(narrow_catalog(read_catalog(cap)[0]), {"views": False, "array_ndims": 1, "binary": is_binary_capture(cat)}))
print(f"catalog pass + schemas       {m:.2f} s ({lo:.2f}-{hi:.2f})")
