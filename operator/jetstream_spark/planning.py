"""Turn options and stream state into sequence ranges, partitions and streaming offsets.

A partition is a contiguous, inclusive range of stream sequences, so the set of messages it
reads is fixed by its bounds alone: a retried task or a replayed micro-batch reads the same
stored messages (minus any removed meanwhile), and deleted messages simply are not there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from .client import JetStreamApi, StreamInfo
from .fetch import check_data_loss
from .options import Bound, JetStreamOptionError, Position, ReadMethod, ReadOptions, rfc3339


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """Messages with first <= sequence <= last; `direct` picks direct get over a consumer."""

    first: int
    last: int
    direct: bool = True

    @property
    def span(self) -> int:
        return max(0, self.last - self.first + 1)


def split_range(
    first: int, last: int, min_partitions: int, max_per_partition: int, direct: bool = True
) -> list[SequenceRange]:
    """Cut [first, last] into max(min_partitions, span / max_per_partition) near-equal pieces."""
    span = last - first + 1
    if span <= 0:
        return []
    count = max(min_partitions, math.ceil(span / max_per_partition))
    count = min(count, span)
    size, extra = divmod(span, count)
    ranges: list[SequenceRange] = []
    start = first
    for index in range(count):
        length = size + (1 if index < extra else 0)
        ranges.append(SequenceRange(start, start + length - 1, direct))
        start += length
    return ranges


def use_direct(options: ReadOptions, info: StreamInfo) -> bool:
    if options.read_method is ReadMethod.CONSUMER:
        return False
    if options.read_method is ReadMethod.DIRECT:
        if not info.allow_direct:
            raise JetStreamOptionError(
                f"readMethod=direct, but stream '{info.name}' does not set allow_direct"
            )
        return True
    return info.allow_direct


async def _sequence_at(api: JetStreamApi, info: StreamInfo, bound: Bound) -> int:
    """First sequence stored at or after the bound's time; past the end if none is."""
    assert bound.time is not None
    found = await api.message_at_time(info.name, rfc3339(bound.time))
    return found.seq if found is not None else info.last_seq + 1


async def resolve_start(
    api: JetStreamApi, info: StreamInfo, options: ReadOptions, *, check_loss: bool
) -> int:
    """The first sequence to read (inclusive) for startingOffsets / startingTimestamp."""
    start = options.start
    if start.position is Position.EARLIEST:
        return info.first_available
    if start.position is Position.LATEST:
        return info.last_seq + 1
    if start.position is Position.TIME:
        return await _sequence_at(api, info, start)
    if check_loss and options.fail_on_data_loss:
        check_data_loss(info, start.sequence)
    return max(start.sequence, info.first_available)


async def resolve_end(api: JetStreamApi, info: StreamInfo, options: ReadOptions) -> int:
    """The last sequence to read (inclusive): endingOffsets is inclusive, endingTimestamp not."""
    end = options.end
    if end.position is Position.SEQUENCE:
        return min(end.sequence, info.last_seq)
    if end.position is Position.TIME:
        return await _sequence_at(api, info, end) - 1
    return info.last_seq


def offset(stream: str, next_sequence: int) -> dict[str, Any]:
    """Streaming offset: every message below `seq` has been handed to Spark."""
    return {"stream": stream, "seq": next_sequence}


def offset_sequence(stream: str, value: dict[str, Any]) -> int:
    """Read back an offset from the checkpoint, refusing one written for another stream."""
    recorded = value.get("stream")
    if recorded != stream:
        raise JetStreamOptionError(
            f"the checkpoint holds offsets of stream '{recorded}', not '{stream}'; "
            "use a new checkpoint location to read another stream"
        )
    return int(value["seq"])


def next_end(
    start: int,
    info: StreamInfo,
    *,
    max_rows: int | None,
    target: int | None,
    fail_on_data_loss: bool,
) -> int:
    """End offset (exclusive) of the next micro-batch from `start`, honouring the read limit
    and an AvailableNow target; skips removed messages when data loss is tolerated."""
    if fail_on_data_loss:
        check_data_loss(info, start)
    effective = max(start, info.first_seq)
    end = info.last_seq + 1
    if target is not None:
        end = min(end, target)
    if max_rows is not None:
        end = min(end, effective + max_rows)
    return max(end, start)
