"""Stream snapshots and restores on a real nats-server, the data path of backups: a stream of
100,000 messages snapshotted, deleted and restored holds the same messages at the same
sequences, and a restore that cannot be whole leaves no stream behind."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamError
from jetstream_operator.nats.snapshots import Snapshot, restore_stream, snapshot_stream

from .helpers import eventually

pytestmark = pytest.mark.integration

MESSAGES = 100_000


async def _content(nc: Client, stream: str) -> tuple[int, int, str]:
    """Message count, last sequence, and a hash of every message's sequence, subject and data,
    read as a client reads them."""
    info = await JetStreamApi(nc).stream_info(stream)
    assert info is not None
    total, last = info["state"]["messages"], info["state"]["last_seq"]
    digest = hashlib.sha256()
    subscription = await nc.jetstream().subscribe(
        f"{stream.lower()}.>", stream=stream, ordered_consumer=True
    )
    for _ in range(total):
        message = await subscription.next_msg(timeout=10)
        sequence = message.metadata.sequence.stream
        digest.update(f"{sequence} {message.subject} ".encode() + message.data + b"\n")
    await subscription.unsubscribe()
    return total, last, digest.hexdigest()


async def _snapshot(nc: Client, stream: str) -> tuple[Snapshot, list[bytes]]:
    parts: list[bytes] = []

    async def sink(chunk: bytes) -> None:
        parts.append(chunk)

    return await snapshot_stream(JetStreamApi(nc), stream, sink), parts


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _stream_with_messages(nc: Client, namespace: str) -> str:
    stream = namespace.replace("-", "_").upper()
    await nc.jetstream().add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    for index in range(MESSAGES):
        await nc.publish(f"{stream.lower()}.{index % 7}", f"message {index}".encode())
    await nc.flush()
    return stream


async def test_a_stream_of_100000_messages_comes_back_whole(nc: Client, namespace: str) -> None:
    stream = await _stream_with_messages(nc, namespace)
    jetstream = JetStreamApi(nc)

    async def all_stored() -> bool:
        info = await jetstream.stream_info(stream)
        return info is not None and info["state"]["messages"] == MESSAGES

    await eventually(all_stored)
    before = await _content(nc, stream)
    snapshot, parts = await _snapshot(nc, stream)
    assert (snapshot.state["messages"], snapshot.state["last_seq"]) == (MESSAGES, MESSAGES)
    assert snapshot.size == sum(map(len, parts)) and snapshot.chunks == len(parts)
    assert snapshot.sha256 == hashlib.sha256(b"".join(parts)).hexdigest()
    assert await jetstream.delete_stream(stream)

    restored = await restore_stream(jetstream, snapshot.config, snapshot.state, _chunks(parts))
    assert restored["state"]["messages"] == MESSAGES
    assert await _content(nc, stream) == before


async def test_a_restore_that_cannot_be_whole_leaves_no_stream(nc: Client, namespace: str) -> None:
    stream = await _stream_with_messages(nc, namespace)
    jetstream = JetStreamApi(nc)
    snapshot, parts = await _snapshot(nc, stream)
    with pytest.raises(JetStreamError) as existing:
        await restore_stream(jetstream, snapshot.config, snapshot.state, _chunks(parts))
    assert existing.value.err_code == 10130  # the stream exists: never overwritten
    assert await jetstream.delete_stream(stream)
    truncated = [parts[0], parts[1][: len(parts[1]) // 2]]
    with pytest.raises(JetStreamError, match="restore failed"):
        await restore_stream(jetstream, snapshot.config, snapshot.state, _chunks(truncated))
    assert await jetstream.stream_info(stream) is None
    renamed = {**snapshot.config, "name": f"{stream}_COPY", "subjects": [f"{stream.lower()}c.>"]}
    with pytest.raises(JetStreamError, match="stream names do not match"):
        await restore_stream(jetstream, renamed, snapshot.state, _chunks(parts))
