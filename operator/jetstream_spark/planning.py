"""Turn options and stream state into sequence ranges, partitions and streaming offsets.

A partition is a contiguous, inclusive range of one stream's sequences, so the set of messages
it reads is fixed by its bounds alone: a retried task or a replayed micro-batch reads the same
stored messages (minus any removed meanwhile), and deleted messages simply are not there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from .client import JetStreamApi, StreamInfo
from .data_loss import StreamRecreatedError, check_data_loss
from .options import Bound, JetStreamOptionError, Position, ReadMethod, ReadOptions, rfc3339


@dataclass(frozen=True)
class SequenceRange(InputPartition):
    """Messages of `stream` with first <= sequence <= last.

    `direct` picks direct get over a consumer; `created` is the stream's creation time at
    planning, so a task can tell that the stream was deleted and recreated meanwhile.
    """

    first: int
    last: int
    direct: bool = False
    stream: str = ""
    created: str = ""

    @property
    def span(self) -> int:
        return max(0, self.last - self.first + 1)


def split_range(
    first: int, last: int, min_partitions: int, max_per_partition: int, direct: bool = False
) -> list[SequenceRange]:
    """Cut [first, last] into max(min_partitions, span / max_per_partition) near-equal pieces."""
    return split_ranges([SequenceRange(first, last, direct)], min_partitions, max_per_partition)


def split_ranges(
    ranges: Sequence[SequenceRange], min_partitions: int, max_per_partition: int
) -> list[SequenceRange]:
    """Cut each range into near-equal contiguous pieces of at most `max_per_partition`
    sequences, with at least `min_partitions` pieces in all (the largest pieces are split
    first), never more pieces than sequences."""
    wanted = [r for r in ranges if r.span > 0]
    counts = [math.ceil(r.span / max_per_partition) for r in wanted]
    while sum(counts) < min_partitions:
        candidates = [i for i, r in enumerate(wanted) if counts[i] < r.span]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: wanted[i].span / counts[i])
        counts[widest] += 1
    pieces: list[SequenceRange] = []
    for piece, count in zip(wanted, counts, strict=True):
        size, extra = divmod(piece.span, count)
        start = piece.first
        for index in range(count):
            length = size + (1 if index < extra else 0)
            pieces.append(
                SequenceRange(start, start + length - 1, piece.direct, piece.stream, piece.created)
            )
            start += length
    return pieces


def use_direct(options: ReadOptions, info: StreamInfo) -> bool:
    """Direct get only when asked for: inside Spark the consumer path measured faster
    (docs/benchmarks.md), and it takes several subject filters."""
    if options.read_method is ReadMethod.DIRECT:
        if not info.allow_direct:
            raise JetStreamOptionError(
                f"readMethod=direct, but stream '{info.name}' does not set allow_direct"
            )
        return True
    return False


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


def check_resolved_order(options: ReadOptions, stream: str, first: int, last: int) -> None:
    """A start after an explicit end is a mistake in the options, not an empty result.

    Only a start more than one past the end is inverted: first == last + 1 is an empty range
    (e.g. a time range with no messages in it)."""
    end = options.end
    if end.position is Position.LATEST or first <= last + 1:
        return
    if end.position is Position.SEQUENCE and first <= end.sequence:
        return  # the end was clamped to the stream's last sequence, not inverted
    raise JetStreamOptionError(
        f"stream '{stream}': the start ({options.start.describe()}, sequence {first}) is after "
        f"the end ({end.describe()}, sequence {last})"
    )


@dataclass(frozen=True)
class StreamPosition:
    """Where a query is in one stream: every message below `seq` went into an earlier batch."""

    seq: int
    created: str = ""


Offsets = dict[str, StreamPosition]


def offset(positions: Mapping[str, StreamPosition]) -> dict[str, Any]:
    """The checkpointed form: {"ORDERS": {"seq": 4001, "created": "..."}, ...}."""
    return {
        name: {"seq": position.seq, "created": position.created}
        for name, position in positions.items()
    }


def read_offsets(streams: Sequence[str], value: Mapping[str, Any]) -> Offsets:
    """Read back offsets from the checkpoint, refusing ones written for other streams.

    The one-stream form of earlier versions, {"stream": "ORDERS", "seq": 4001}, is accepted.
    """
    if isinstance(value.get("stream"), str) and "seq" in value:
        recorded: dict[str, Any] = {str(value["stream"]): {"seq": value["seq"]}}
    else:
        recorded = dict(value)
    if set(recorded) != set(streams):
        raise JetStreamOptionError(
            f"the checkpoint holds offsets of stream(s) {sorted(recorded)}, not {sorted(streams)}; "
            "use a new checkpoint location to read other streams"
        )
    return {
        name: StreamPosition(int(recorded[name]["seq"]), str(recorded[name].get("created", "")))
        for name in streams
    }


def check_identity(info: StreamInfo, position: StreamPosition) -> bool:
    """True when `info` is the stream the position was taken in; False (or an error with
    `fail`) when it was deleted and recreated: a new creation time, or sequences that went
    backwards (offsets of earlier versions carry no creation time)."""
    if position.created:
        return position.created == info.created
    return position.seq <= info.last_seq + 1


def recreated_error(info: StreamInfo, position: StreamPosition) -> StreamRecreatedError:
    return StreamRecreatedError(info.name, position.seq, position.created, info.created)


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


def share_limit(available: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split a per-trigger limit over streams in proportion to what each has available
    (Kafka's source does the same over partitions); every stream with messages gets >= 1."""
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {name: (count * limit) // total for name, count in available.items()}
    spare = limit - sum(shares.values())
    for name in sorted(available, key=lambda n: available[n] - shares[n], reverse=True):
        if spare <= 0:
            break
        if shares[name] < available[name]:
            shares[name] += 1
            spare -= 1
    return shares
