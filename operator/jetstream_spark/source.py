"""The `jetstream` Python data source: batch and streaming reads, batch and streaming writes."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import _sync
from .client import JetStreamApi, StreamInfo, connect
from .fetch import read_range
from .options import ReadOptions, WriteOptions
from .planning import (
    SequenceRange,
    next_end,
    offset,
    offset_sequence,
    resolve_end,
    resolve_start,
    split_range,
    use_direct,
)
from .schema import arrow_schema, check_read_schema, check_write_schema, message_schema
from .sink import JetStreamBatchWriter, JetStreamStreamWriter

log = logging.getLogger(__name__)


class JetStreamDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("jetstream")`.

    Holds only its option strings, so Spark can pickle it into planner and executor processes.
    """

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        return message_schema(ReadOptions.from_options(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(ReadOptions.from_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetStreamStreamReader(ReadOptions.from_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> JetStreamBatchWriter:
        options = WriteOptions.from_options(self.options)
        if overwrite:
            raise ValueError("the jetstream sink only appends messages; use mode('append')")
        check_write_schema(schema, options.subject, options.message_id_column)
        return JetStreamBatchWriter(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> JetStreamStreamWriter:
        # Complete output mode (overwrite) re-publishes every row each trigger, like Kafka's sink.
        options = WriteOptions.from_options(self.options)
        check_write_schema(schema, options.subject, options.message_id_column)
        return JetStreamStreamWriter(options, schema)


def register(spark: Any) -> None:
    """Register the `jetstream` format with a SparkSession."""
    spark.dataSource.register(JetStreamDataSource)


async def _stream_info(options: ReadOptions) -> StreamInfo:
    async with connect(options.connection) as nc:
        api = JetStreamApi.of(nc, options.connection)
        return await api.stream_info(options.stream)


def _read_partition(
    options: ReadOptions, arrow: pa.Schema, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, SequenceRange):
        return iter(())  # Spark substitutes InputPartition(None) for an empty plan
    return _sync.iterate(
        lambda: read_range(options, partition.first, partition.last, partition.direct, arrow)
    )


class JetStreamBatchReader(DataSourceReader):
    """Plans the sequence range once on the driver; each task reads one contiguous piece."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_read_schema(schema)
        self.options = options
        self.arrow = arrow_schema(schema)

    def partitions(self) -> Sequence[InputPartition]:
        first, last, direct = _sync.run(self._plan)
        log.info("jetstream batch read of %s: sequences %d..%d", self.options.stream, first, last)
        return split_range(
            first,
            last,
            self.options.min_partitions,
            self.options.max_messages_per_partition,
            direct,
        )

    async def _plan(self) -> tuple[int, int, bool]:
        options = self.options
        async with connect(options.connection) as nc:
            api = JetStreamApi.of(nc, options.connection)
            info = await api.stream_info(options.stream)
            first = await resolve_start(api, info, options, check_loss=True)
            last = await resolve_end(api, info, options)
            return first, last, use_direct(options, info)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.arrow, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are stream sequences kept in Spark's checkpoint; the server keeps no state.

    `{"stream": name, "seq": n}` means every message below `n` went into an earlier batch, so
    a restarted query replays exactly the planned ranges of uncommitted batches.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_read_schema(schema)
        self.options = options
        self.arrow = arrow_schema(schema)
        self._target: int | None = None  # AvailableNow: exclusive end fixed at query start

    def initialOffset(self) -> dict[str, Any]:
        return offset(self.options.stream, _sync.run(self._initial))

    async def _initial(self) -> int:
        options = self.options
        async with connect(options.connection) as nc:
            api = JetStreamApi.of(nc, options.connection)
            info = await api.stream_info(options.stream)
            return await resolve_start(api, info, options, check_loss=False)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        info = _sync.run(lambda: _stream_info(self.options))
        self._target = info.last_seq + 1
        log.info("jetstream AvailableNow for %s stops at %d", self.options.stream, self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offset_sequence(self.options.stream, start)
        info = _sync.run(lambda: _stream_info(self.options))
        end = next_end(
            begin,
            info,
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else None,
            target=self._target,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        return offset(self.options.stream, end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        info = _sync.run(lambda: _stream_info(self.options))
        return offset(self.options.stream, info.last_seq + 1)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first = offset_sequence(self.options.stream, start)
        stop = offset_sequence(self.options.stream, end)
        if stop <= first:
            return []
        info = _sync.run(lambda: _stream_info(self.options))
        if not self.options.fail_on_data_loss:
            first = max(first, info.first_seq)  # removed messages need no partitions
        return split_range(
            first,
            stop - 1,
            self.options.min_partitions,
            self.options.max_messages_per_partition,
            use_direct(self.options, info),
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.arrow, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in the checkpoint, not on the server."""
