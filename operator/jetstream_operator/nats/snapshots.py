"""Stream snapshots and restores through the JetStream API, the data path of backups.

A snapshot is the server's own archive of a stream (its config, state, messages and consumers),
sent in chunks that the receiver acknowledges one by one, so the server never sends faster
than the sink takes them. A restore sends the archive back in acknowledged chunks, then an
empty message that asks the server to finish; the server answers with the restored stream.
Both hand the bytes to the caller and keep none: a sink writes them where the backup goes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nats.aio.msg import Msg

from .jsapi import JetStreamApi, JetStreamError, JetStreamUnavailable

DEFAULT_CHUNK_SIZE = 128 * 1024
CHUNK_WAIT = 30.0
"""Seconds without a chunk before a snapshot counts as stalled (the server waits as long for
an acknowledgement before it gives up on the receiver)."""


class SnapshotFailed(RuntimeError):
    """The server ended the snapshot with an error, or stopped sending: nothing it sent is a
    complete archive."""


@dataclass(frozen=True)
class Snapshot:
    """What a finished snapshot holds: the stream's config and state when it began, and the
    archive's size and SHA-256 (of the bytes as the sink received them)."""

    config: dict[str, Any]
    state: dict[str, Any]
    size: int
    sha256: str
    chunks: int


async def snapshot_stream(
    jetstream: JetStreamApi,
    stream: str,
    sink: Callable[[bytes], Awaitable[None]],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    check_messages: bool = False,
) -> Snapshot:
    """Stream `stream`'s archive into `sink`, chunk by chunk; raises SnapshotFailed unless the
    server said it was complete. `check_messages` has the server verify every message's
    checksum first (slower)."""
    connection = jetstream.connection
    inbox = connection.new_inbox()
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def received(message: Msg) -> None:
        await chunks.put(message)

    subscription = await connection.subscribe(inbox, cb=received)
    try:
        answer = await jetstream.request(
            f"STREAM.SNAPSHOT.{stream}",
            {"deliver_subject": inbox, "chunk_size": chunk_size, "jsck": check_messages},
        )
        digest, size, count = hashlib.sha256(), 0, 0
        while True:
            try:
                message = await asyncio.wait_for(chunks.get(), CHUNK_WAIT)
            except TimeoutError as error:
                raise SnapshotFailed(
                    f"no chunk of {stream}'s snapshot for {CHUNK_WAIT:.0f}s"
                ) from error
            if not message.data:
                _check_end(stream, message)
                break
            await sink(message.data)
            digest.update(message.data)
            size, count = size + len(message.data), count + 1
            if message.reply:
                await connection.publish(message.reply, b"")
    finally:
        await subscription.unsubscribe()
    return Snapshot(
        config=dict(answer.get("config") or {}),
        state=dict(answer.get("state") or {}),
        size=size,
        sha256=digest.hexdigest(),
        chunks=count,
    )


def _check_end(stream: str, message: Msg) -> None:
    """The empty message ends the snapshot; a status other than 204 (or none) says it failed."""
    headers = message.headers or {}
    status = str(headers.get("Status") or "")
    if status and status != "204":
        description = headers.get("Description") or "no description"
        raise SnapshotFailed(f"the server ended {stream}'s snapshot with {status} {description}")


async def restore_stream(
    jetstream: JetStreamApi,
    config: Mapping[str, Any],
    state: Mapping[str, Any],
    archive: AsyncIterable[bytes],
    *,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Restore a stream from its archive under `config["name"]` (which must not exist); returns
    the server's answer for the restored stream (its config and state)."""
    name = str(config["name"])
    answer = await jetstream.request(
        f"STREAM.RESTORE.{name}", {"config": dict(config), "state": dict(state)}
    )
    target = str(answer["deliver_subject"])
    connection = jetstream.connection
    try:
        async for chunk in archive:
            if chunk:
                _checked(await connection.request(target, chunk, timeout=timeout))
        # The empty message asks the server to finish; it answers once the stream is back.
        return _checked(await connection.request(target, b"", timeout=timeout))
    except TimeoutError as error:
        raise JetStreamUnavailable(f"the restore of {name} got no answer in time") from error


def _checked(reply: Msg) -> dict[str, Any]:
    if not reply.data:
        return {}
    answer: dict[str, Any] = json.loads(reply.data)
    failure = answer.get("error")
    if failure:
        raise JetStreamError(
            int(failure.get("code", 0)),
            int(failure.get("err_code", 0)),
            str(failure.get("description", "unknown error")),
        )
    return answer
