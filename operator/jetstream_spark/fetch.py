"""Read one contiguous sequence range of a stream into Arrow record batches.

Two ways, both bounded by the planned last sequence so a range reads the same messages however
often it is retried:

* batched direct get (`$JS.API.DIRECT.GET.<stream>` with `seq` + `batch`), with
  readMethod=direct on a stream with `allow_direct` (`direct_get`);
* otherwise a pull over an ephemeral, in-memory, ack-none consumer starting at the range's
  first sequence, recreated from the last message on any delivery gap (what an ordered
  consumer does; `pull_consumer`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pyarrow as pa

from .client import JetStreamApi, connect
from .data_loss import LossGuard
from .direct_get import read_direct
from .options import ReadOptions
from .pull_consumer import read_consumer


async def read_range(
    options: ReadOptions,
    first: int,
    last: int,
    direct: bool,
    schema: pa.Schema,
    stream: str | None = None,
    created: str = "",
) -> AsyncIterator[pa.RecordBatch]:
    """Record batches of the messages of `stream` stored with first <= sequence <= last.

    `created` (the stream's creation time when the range was planned) detects a stream that
    was deleted and recreated since: with failOnDataLoss it fails, otherwise the range is
    skipped (its sequences name other messages now).
    """
    if first > last:
        return
    name = stream or options.stream
    async with connect(options.connection) as nc:
        api = JetStreamApi.of(nc, options.connection)
        guard = LossGuard(api, options, name, created)
        if not await guard.check(first):
            return
        reader = read_direct if direct else read_consumer
        async for batch in reader(nc, api, options, name, first, last, schema, guard):
            yield batch
