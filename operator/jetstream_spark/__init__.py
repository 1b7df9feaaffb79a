"""A PySpark (4.2+) data source for NATS JetStream streams: `format("jetstream")`.

    from jetstream_spark import JetStreamDataSource
    spark.dataSource.register(JetStreamDataSource)
    spark.read.format("jetstream").option("stream", "ORDERS").load()

Installed with the `jetstream-operator[spark]` extra. Independent of the operator itself:
nothing here imports kopf or `jetstream_operator`.
"""

from __future__ import annotations

from .data_loss import DataLossError
from .options import ConnectionOptions, JetStreamOptionError, ReadOptions, WriteOptions
from .read_limits import ReadError
from .schema import HEADERS_TYPE, message_schema
from .sink import JetStreamCommitMessage, PublishError
from .source import (
    JetStreamBatchReader,
    JetStreamDataSource,
    JetStreamStreamReader,
    register,
)

FORMAT = JetStreamDataSource.name()

__all__ = [
    "FORMAT",
    "HEADERS_TYPE",
    "ConnectionOptions",
    "DataLossError",
    "JetStreamBatchReader",
    "JetStreamCommitMessage",
    "JetStreamDataSource",
    "JetStreamOptionError",
    "JetStreamStreamReader",
    "PublishError",
    "ReadError",
    "ReadOptions",
    "WriteOptions",
    "message_schema",
    "register",
]
