"""The driver of the standalone-cluster test, run as its own process (one SparkContext per
process, and the test session already has a local one).

    python tests/spark/cluster_driver.py SPARK_MASTER NATS_URL SOURCE BATCH_OUT STREAM_OUT \\
        CHECKPOINT PER_TRIGGER

Batch: reads SOURCE across the cluster and writes it to BATCH_OUT. Streaming: copies SOURCE to
STREAM_OUT in AvailableNow micro-batches of PER_TRIGGER messages, while the test kills a
worker. Prints one JSON line per phase.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession

from jetstream_spark import register


def main() -> None:
    master, url, source, batch_out, stream_out, checkpoint, per_trigger = sys.argv[1:8]
    spark = (
        SparkSession.builder.master(master)
        .appName("jetstream-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.driver.memory", "512m")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "8")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    def read() -> DataFrame:
        return spark.read.format("jetstream").option("servers", url).option("stream", source).load()

    frame = read()
    partitions = frame.rdd.getNumPartitions()
    started = time.monotonic()
    (
        frame.select("subject", "data")
        .selectExpr(f"concat('{batch_out}.', subject) AS subject", "data")
        .write.format("jetstream")
        .mode("append")
        .option("servers", url)
        .option("writeId", "cluster-batch")
        .save()
    )
    print(
        json.dumps(
            {
                "phase": "batch",
                "partitions": partitions,
                "executors": spark.sparkContext.defaultParallelism,
                "seconds": round(time.monotonic() - started, 1),
            }
        ),
        flush=True,
    )

    query = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr(f"concat('{stream_out}.', subject) AS subject", "data")
        .writeStream.format("jetstream")
        .option("servers", url)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress]
    print(json.dumps({"phase": "stream", "batches": batches}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
