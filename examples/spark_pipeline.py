"""Decode a capture on Spark, materialise replicas, write them as Parquet.

    python examples/spark_pipeline.py capture.parquet out/ [table=key1,key2 ...]

Runs with local[*] when started with python (Spark's default master); on a cluster, submit it
unchanged with spark-submit --master ... (the master is not fixed here, so spark-submit's wins).
"""

import sys

from pyspark.sql import SparkSession

from pgoutput_arrow import spark as pgspark


def main(capture: str, out: str, keys: dict[str, list[str]]) -> None:
    spark = (SparkSession.builder.appName("pgoutput-pipeline")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    tables = pgspark.decode(spark.read.parquet(capture), with_truncates=True)
    truncates = tables.pop(pgspark.TRUNCATES)
    for name, changes in tables.items():
        changes.write.mode("overwrite").parquet(f"{out}/changes/{name}")
        if name in keys:
            pgspark.apply_changes(changes, keys[name], truncates=truncates, table=name).write.mode("overwrite").parquet(f"{out}/replica/{name}")
        print(name, changes.count(), "changes")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2],
         {k: v.split(",") for k, v in (a.split("=", 1) for a in sys.argv[3:])})
