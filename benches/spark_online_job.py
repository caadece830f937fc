"""One Spark streaming query of ``benches/online_soak.py --formats spark``: the ``soak`` table
through ``spark.readStream.format("pgoutput")`` with ``onlineSnapshot``, each micro-batch written
to ``OUT/public.soak/batch=N`` (overwritten when a batch runs again: idempotent), on a
checkpoint under ``OUT``. ``--trigger processing`` runs until killed; ``available-now`` runs to
the end of what the server has (the online snapshot read to its end) and exits.

    python benches/spark_online_job.py --dsn DSN --slot SLOT --out DIR --chunk-rows N [--trigger ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dsn", required=True)
    p.add_argument("--slot", required=True)
    p.add_argument("--publication", default="soak")
    p.add_argument("--out", required=True)
    p.add_argument("--chunk-rows", type=int, default=50_000)
    p.add_argument("--trigger", choices=["processing", "available-now"], default="processing")
    p.add_argument("--chunks-on-driver", action="store_true", help="the source's chunksOnDriver option")
    args = p.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    checkpoint = Path(args.out) / "_checkpoint"
    if (checkpoint / "offsets").is_dir() and not any(f.name.isdigit() for f in (checkpoint / "offsets").iterdir()):
        # Killed while Spark wrote its first offset file: Spark refuses the checkpoint
        # ("offsets should be empty on batch 0"), and no batch was planned: start it afresh.
        shutil.rmtree(checkpoint)
    from pyspark.sql import SparkSession

    from pgoutput_arrow import spark as pgspark

    spark = (SparkSession.builder.master("local[2]").appName("online-soak-stream")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pgspark.register(spark)
    df = (spark.readStream.format("pgoutput").option("dsn", args.dsn).option("slot", args.slot)
          .option("publication", args.publication).option("table", "public.soak")
          .option("onlineSnapshot", "true").option("snapshotChunkRows", str(args.chunk_rows))
          .option("maxChangesPerTrigger", str(2 * args.chunk_rows)).option("pollInterval", "0.2")
          .option("chunksOnDriver", str(args.chunks_on_driver).lower()).option("verbose", "true").load())

    def store(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.write.mode("overwrite").parquet(f"{args.out}/public.soak/batch={batch_id}")

    trigger = {"availableNow": True} if args.trigger == "available-now" else {"processingTime": "0.5 seconds"}
    query = (df.writeStream.foreachBatch(store).option("checkpointLocation", str(checkpoint))
             .trigger(**trigger).start())
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
