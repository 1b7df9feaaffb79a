"""Structured Streaming job: orders per customer from ORDERS, running totals to ORDER_TOTALS.

    python examples/spark/order_totals.py --servers nats://127.0.0.1:4222 \\
        --checkpoint /tmp/order-totals-checkpoint [--available-now]

Reads the `orders` stream with the jetstream source (offsets are stream sequences in the
checkpoint), sums each customer's orders and publishes the totals as JSON to
`totals.<customer>`; the latest message per subject is the current total. Python sinks offer
append and complete output modes only (no update), so each trigger republishes every
customer's total: fine for thousands of customers; for more, use foreachBatch with a batch
write. `messageIdColumn=customer` makes the message id `<query id>:<batch id>:<customer>`, so
a replayed micro-batch is dropped by JetStream's duplicate window instead of publishing the
same totals twice.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id string, customer string, amount_cents long"


def order_totals(orders: DataFrame) -> DataFrame:
    """Orders (jetstream rows with JSON data) -> customer, orders, total_cents."""
    parsed = orders.select(
        F.from_json(F.col("data").cast("string"), ORDER_SCHEMA).alias("order")
    ).select("order.*")
    return parsed.groupBy("customer").agg(
        F.count("*").alias("orders"), F.sum("amount_cents").alias("total_cents")
    )


def as_messages(totals: DataFrame, subject_prefix: str) -> DataFrame:
    """The sink's input: subject, data (JSON) and the customer as message-id key."""
    return totals.select(
        F.concat(F.lit(f"{subject_prefix}."), F.col("customer")).alias("subject"),
        F.to_json(F.struct("customer", "orders", "total_cents")).alias("data"),
        F.col("customer"),
    )


def start_job(
    spark: SparkSession,
    *,
    servers: str,
    checkpoint: str,
    orders_stream: str = "ORDERS",
    totals_subject_prefix: str = "totals",
    available_now: bool = False,
    max_messages_per_trigger: int | None = None,
) -> Any:
    """Start the query and return it (a StreamingQuery); the caller awaits or stops it."""
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", servers)
        .option("stream", orders_stream)
        .option("startingOffsets", "earliest")
    )
    if max_messages_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(max_messages_per_trigger))
    writer = (
        as_messages(order_totals(reader.load()), totals_subject_prefix)
        .writeStream.format("jetstream")
        .outputMode("complete")
        .option("servers", servers)
        .option("messageIdColumn", "customer")
        .option("checkpointLocation", checkpoint)
        .queryName("order-totals")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer
    return writer.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="nats://127.0.0.1:4222")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--orders-stream", default="ORDERS")
    parser.add_argument("--totals-subject-prefix", default="totals")
    parser.add_argument("--available-now", action="store_true", help="process what is there, stop")
    parser.add_argument("--max-messages-per-trigger", type=int)
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("order-totals").getOrCreate()
    from jetstream_spark import register

    register(spark)
    query = start_job(
        spark,
        servers=args.servers,
        checkpoint=args.checkpoint,
        orders_stream=args.orders_stream,
        totals_subject_prefix=args.totals_subject_prefix,
        available_now=args.available_now,
        max_messages_per_trigger=args.max_messages_per_trigger,
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
