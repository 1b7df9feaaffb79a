"""Small synchronous helpers around nats-py for setting up streams in Spark tests.

Spark calls block, so the Spark tests are plain functions; these run nats-py on a private
event loop that leaves pytest-asyncio's session loop alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.js.api import StreamConfig

T = TypeVar("T")
_names = itertools.count(1)
created: list[tuple[str, str]] = []  # (url, stream): deleted at the end of the session


def unique(prefix: str) -> str:
    """A stream name no other test (in this or another session) uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def with_js(url: str, action: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        nc = await nats.connect(
            url, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=1
        )
        try:
            return await action(nc)
        finally:
            await nc.close()

    return run(main())


def create_stream(
    url: str, name: str, subjects: list[str], *, cleanup: bool = True, **config: Any
) -> None:
    """Create a stream; with `cleanup`, it is deleted when the test module ends."""

    async def action(nc: Client) -> None:
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=subjects, **config))

    with_js(url, action)
    if cleanup:
        created.append((url, name))


def delete_created_streams() -> None:
    """Best effort: the shared server may have been restarted or stopped by then."""
    while created:
        url, name = created.pop()
        with contextlib.suppress(Exception):
            delete_stream(url, name)


def delete_stream(url: str, name: str) -> None:
    async def action(nc: Client) -> None:
        await nc.jetstream().delete_stream(name)

    with_js(url, action)


def publish(
    url: str,
    messages: Iterable[tuple[str, bytes]],
    headers: Callable[[int], dict[str, str] | None] | None = None,
) -> list[int]:
    """Publish with acks, in order; returns the stored sequences."""

    async def action(nc: Client) -> list[int]:
        js = nc.jetstream()
        futures = []
        for index, (subject, data) in enumerate(messages):
            hdrs = headers(index) if headers else None
            futures.append(await js.publish_async(subject, data, headers=hdrs))
            if len(futures) % 500 == 0:
                await asyncio.gather(*futures[-500:])
        acks = await asyncio.gather(*futures)
        return [ack.seq for ack in acks]

    return with_js(url, action)


def delete_messages(url: str, stream: str, sequences: Iterable[int]) -> None:
    async def action(nc: Client) -> None:
        js = nc.jetstream()
        for seq in sequences:
            await js.delete_msg(stream, seq)

    with_js(url, action)


def stored_messages(url: str, stream: str) -> list[tuple[int, str, bytes, dict[str, str]]]:
    """Every stored message (seq, subject, data, headers), read one by one with plain gets."""

    async def action(nc: Client) -> list[tuple[int, str, bytes, dict[str, str]]]:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        found = []
        for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
            try:
                message = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            found.append(
                (seq, message.subject or "", message.data or b"", dict(message.headers or {}))
            )
        return found

    return with_js(url, action)


def stream_df(spark: Any, url: str, stream: str, **options: Any) -> Any:
    """A streaming read of `stream` from the earliest message, with extra options."""
    reader = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", stream)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def available_now_to_parquet(
    frame: Any, output: Path, checkpoint: Path, timeout: float = 120
) -> Any:
    """Run an AvailableNow query into parquet and return it, failed or not (callers check
    `query.exception()`)."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(Exception):  # a failed query raises here
        query.awaitTermination(timeout)
    return query
