"""The `jetstream` Python data source: batch and streaming reads, batch and streaming writes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
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
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from . import _sync
from .client import JetStreamApi, StreamInfo, connect
from .data_loss import check_data_loss
from .fetch import read_range
from .options import ReadOptions, WriteOptions
from .planning import (
    SequenceRange,
    StreamPosition,
    check_identity,
    check_resolved_order,
    next_end,
    offset,
    read_offsets,
    recreated_error,
    resolve_end,
    resolve_start,
    share_limit,
    split_ranges,
    use_direct,
)
from .schema import arrow_schema, check_read_schema, check_write_schema, message_schema
from .sink import JetStreamBatchWriter, JetStreamStreamWriter

log = logging.getLogger(__name__)


class JetStreamDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("jetstream")`.

    Holds only its option strings, so Spark can pickle it into planner and executor processes.
    `default_parallelism` is the partition count used when `minPartitions` is not given; the
    planner runs in a Python worker without a SparkContext, so `register(spark)` bakes the
    cluster's parallelism into a subclass.
    """

    default_parallelism = 1

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        return message_schema(_flag(self.options, "includeHeaders"))

    def _read_options(self, *, streaming: bool) -> ReadOptions:
        options = ReadOptions.from_options(self.options, streaming=streaming)
        if options.min_partitions is None:
            options = replace(options, min_partitions=max(1, int(self.default_parallelism)))
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(self._read_options(streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetStreamStreamReader(self._read_options(streaming=True), schema)

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


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = next((v for k, v in options.items() if k.lower() == name.lower()), "false")
    return str(value).strip().lower() in ("true", "1", "yes")


def register(spark: Any) -> type[JetStreamDataSource]:
    """Register the `jetstream` format with a SparkSession.

    Reads without `minPartitions` then use at least the cluster's default parallelism (its
    executor cores) as their partition count, as Kafka's source uses one task per partition.
    """
    try:
        parallelism = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        parallelism = int(spark.conf.get("spark.default.parallelism", "1") or 1)
    source = type(
        "JetStreamDataSource",
        (JetStreamDataSource,),
        {"default_parallelism": parallelism, "__module__": __name__},
    )
    spark.dataSource.register(source)
    return source


async def _stream_infos(options: ReadOptions) -> dict[str, StreamInfo]:
    async with connect(options.connection) as nc:
        api = JetStreamApi.of(nc, options.connection)
        return {name: await api.stream_info(name) for name in options.streams}


def _read_partition(
    options: ReadOptions, arrow: pa.Schema, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, SequenceRange):
        return iter(())  # Spark substitutes InputPartition(None) for an empty plan
    return _sync.iterate(
        lambda: read_range(
            options,
            partition.first,
            partition.last,
            partition.direct,
            arrow,
            partition.stream,
            partition.created,
        )
    )


class JetStreamBatchReader(DataSourceReader):
    """Plans the sequence ranges once on the driver; each task reads one contiguous piece."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_read_schema(schema)
        self.options = options
        self.arrow = arrow_schema(schema)

    def partitions(self) -> Sequence[InputPartition]:
        ranges = _sync.run(self._plan)
        for piece in ranges:
            log.info(
                "jetstream batch read of %s: sequences %d..%d",
                piece.stream,
                piece.first,
                piece.last,
            )
        return split_ranges(
            ranges, self.options.min_partitions or 1, self.options.max_messages_per_partition
        )

    async def _plan(self) -> list[SequenceRange]:
        options = self.options
        ranges: list[SequenceRange] = []
        async with connect(options.connection) as nc:
            api = JetStreamApi.of(nc, options.connection)
            for name in options.streams:
                info = await api.stream_info(name)
                first = await resolve_start(api, info, options, check_loss=True)
                last = await resolve_end(api, info, options)
                check_resolved_order(options, name, first, last)
                ranges.append(
                    SequenceRange(first, last, use_direct(options, info), name, info.created)
                )
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.arrow, partition)


class JetStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are stream sequences kept in Spark's checkpoint; the server keeps no state.

    `{"ORDERS": {"seq": n, "created": t}}` means every message of ORDERS below `n` went into
    an earlier batch, so a restarted query replays exactly the planned ranges of uncommitted
    batches; `created` tells a deleted and recreated stream from the one the query read.
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_read_schema(schema)
        self.options = options
        self.arrow = arrow_schema(schema)
        self._target: dict[str, int] | None = None  # AvailableNow: ends fixed at query start
        self._last_trigger = time.monotonic()  # for maxTriggerDelay, as Kafka keeps it
        self._planned: dict[str, int] = {}  # the end just planned, for the lag report

    def initialOffset(self) -> dict[str, Any]:
        return offset(_sync.run(self._initial))

    async def _initial(self) -> dict[str, StreamPosition]:
        options = self.options
        positions: dict[str, StreamPosition] = {}
        async with connect(options.connection) as nc:
            api = JetStreamApi.of(nc, options.connection)
            for name in options.streams:
                info = await api.stream_info(name)
                start = await resolve_start(api, info, options, check_loss=False)
                positions[name] = StreamPosition(start, info.created)
        return positions

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.min_messages_per_trigger is not None:
            return ReadMinRows(self.options.min_messages_per_trigger)
        limit = self.options.max_messages_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        infos = _sync.run(lambda: _stream_infos(self.options))
        self._target = {name: info.last_seq + 1 for name, info in infos.items()}
        log.info("jetstream AvailableNow stops at %s", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        options = self.options
        begin = read_offsets(options.streams, start)
        infos = _sync.run(lambda: _stream_infos(options))
        # Where each stream really continues from: a recreated stream restarts at its
        # beginning (when data loss is tolerated), removed messages are skipped.
        starts: dict[str, StreamPosition] = {}
        available: dict[str, int] = {}
        for name, info in infos.items():
            position = begin[name]
            if not check_identity(info, position):
                if options.fail_on_data_loss:
                    raise recreated_error(info, position)
                log.warning("stream %s was recreated; reading it from its start", name)
                position = StreamPosition(1, info.created)
            elif options.fail_on_data_loss:
                check_data_loss(info, position.seq)
            starts[name] = position
            until = info.last_seq + 1
            if self._target is not None:
                until = min(until, self._target.get(name, until))
            available[name] = max(0, until - max(position.seq, info.first_seq))
        max_rows = options.max_messages_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_rows = None
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else None
        now = time.monotonic()
        if (
            min_rows is not None
            and self._target is None
            and sum(available.values()) < min_rows
            and now - self._last_trigger < options.max_trigger_delay
        ):
            self._planned = {name: begin[name].seq for name in begin}
            return offset(begin)  # wait for more messages, or for maxTriggerDelay
        shares = share_limit(available, max_rows) if max_rows is not None else None
        ends: dict[str, StreamPosition] = {}
        for name, info in infos.items():
            position = starts[name]
            end = next_end(
                position.seq,
                info,
                max_rows=shares[name] if shares is not None else None,
                target=self._target.get(name) if self._target is not None else None,
                fail_on_data_loss=False,  # checked above
            )
            ends[name] = StreamPosition(end, info.created)
        if any(ends[name].seq > starts[name].seq for name in ends):
            self._last_trigger = now
        self._planned = {name: position.seq for name, position in ends.items()}
        return offset(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The streams' ends, shown as `latestOffset` in StreamingQueryProgress, with the
        lag behind them of the batch just planned (Python sources cannot report custom
        metrics, so Kafka's offsetsBehindLatest figures travel here)."""
        infos = _sync.run(lambda: _stream_infos(self.options))
        latest = {name: info.last_seq + 1 for name, info in infos.items()}
        behind = {
            name: max(0, latest[name] - self._planned.get(name, latest[name])) for name in latest
        }
        report: dict[str, Any] = offset(
            {name: StreamPosition(seq, infos[name].created) for name, seq in latest.items()}
        )
        report["messagesBehindLatest"] = behind
        report["maxMessagesBehindLatest"] = max(behind.values(), default=0)
        return report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        options = self.options
        begin = read_offsets(options.streams, start)
        stop = read_offsets(options.streams, end)
        if all(
            stop[name].seq <= begin[name].seq and stop[name].created == begin[name].created
            for name in options.streams
        ):
            return []
        infos = _sync.run(lambda: _stream_infos(options))
        ranges: list[SequenceRange] = []
        for name in options.streams:
            first = begin[name].seq
            if begin[name].created and begin[name].created != stop[name].created:
                first = 1  # planned after the stream was recreated: read it from its start
            if not options.fail_on_data_loss:
                first = max(first, infos[name].first_seq)  # removed messages need no tasks
            ranges.append(
                SequenceRange(
                    first,
                    stop[name].seq - 1,
                    use_direct(options, infos[name]),
                    name,
                    stop[name].created,
                )
            )
        return split_ranges(ranges, options.min_partitions or 1, options.max_messages_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.arrow, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in the checkpoint, not on the server."""
