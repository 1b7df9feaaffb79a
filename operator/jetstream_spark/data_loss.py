"""Tell removed messages from merely absent ones, so a query fails (or skips ahead) on loss.

A range may skip sequences that were deleted from the middle or filtered out; only a skipped
sequence below the stream's first sequence, or a stream recreated under the same name, means
messages the query wanted are gone.
"""

from __future__ import annotations

from .client import JetStreamApi, StreamInfo
from .options import ReadOptions


class DataLossError(RuntimeError):
    """Messages a query still wanted were removed from the stream before it read them."""

    def __init__(self, stream: str, wanted: int, first_available: int) -> None:
        super().__init__(
            f"JetStream stream '{stream}' no longer has sequence {wanted}: the first available "
            f"sequence is {first_available}, so messages {wanted}..{first_available - 1} were "
            "removed (by limits, purge or deletion) before this query read them. "
            "Set failOnDataLoss=false to skip ahead instead."
        )
        self.stream = stream
        self.wanted = wanted
        self.first_available = first_available


class StreamRecreatedError(DataLossError):
    """The stream was deleted and recreated under the query: same name, new sequences."""

    def __init__(self, stream: str, wanted: int, was: str, now: str) -> None:
        RuntimeError.__init__(
            self,
            f"JetStream stream '{stream}' was deleted and recreated (created {was or 'earlier'}, "
            f"now {now}) while the query was at sequence {wanted}; its sequences restarted, so "
            "the offsets no longer name the same messages. Set failOnDataLoss=false to restart "
            "from the new stream's first message, or use a new checkpoint location.",
        )
        self.stream = stream
        self.wanted = wanted
        self.first_available = 1


def check_data_loss(info: StreamInfo, wanted: int) -> None:
    """Raise if sequence `wanted` is below the stream's first sequence (an empty new stream
    reports first_seq 0 and loses nothing)."""
    if wanted < info.first_seq:
        raise DataLossError(info.name, wanted, info.first_seq)


class LossGuard:
    """The data-loss check at each fetch, as Kafka's source does it: when a fetch skips
    sequences (at its start, inside it, or by ending early), the first skipped sequence is
    compared with the stream's first sequence; below it means removed by limits, purge or
    deletion at the head, not deleted from the middle or filtered out."""

    def __init__(self, api: JetStreamApi, options: ReadOptions, stream: str, created: str):
        self.api = api
        self.stream = stream
        self.created = created
        self.enabled = options.fail_on_data_loss
        self.checks = 0

    async def check(self, wanted: int) -> bool:
        """False when the stream was recreated and losses are tolerated (skip the range)."""
        if not self.enabled and not self.created:
            return True
        self.checks += 1
        info = await self.api.stream_info(self.stream)
        if self.created and info.created != self.created:
            if self.enabled:
                raise StreamRecreatedError(self.stream, wanted, self.created, info.created)
            return False
        if self.enabled:
            check_data_loss(info, wanted)
        return True

    async def after_fetch(self, gap: int) -> None:
        if gap and self.enabled:
            await self.check(gap)
