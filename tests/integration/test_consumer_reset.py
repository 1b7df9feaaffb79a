"""Moving a consumer's position keeps every message: the reset annotation (to a sequence, a
time, or just after the ack floor) and recreateOnImmutableChange.

On nats-server 2.14 (JetStream API level 4, `make test-matrix`) the server's reset API moves the
consumer in place; on 2.12 (`make test`) the operator recreates it at the sequence. Both runs
check the same positions by reading messages as a client does.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.consumer_reset import RESET_API_LEVEL

from .helpers import Resources, event_posted, eventually, is_ready, stream_manifest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

RESET = "jetstream-operator.io/reset"
RESET_TO = "jetstream-operator.io/reset-to"


async def _setup(
    resources: Resources, nc: Client, namespace: str, durable: str, **spec: Any
) -> tuple[str, JetStreamContext, JetStreamApi]:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", stream_manifest("s", stream))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "c"},
            "spec": {"durableName": durable, "streamName": stream, "ackPolicy": "explicit", **spec},
        },
    )
    await eventually(lambda: _ready(resources))
    return stream, nc.jetstream(), JetStreamApi(nc)


async def _ready(resources: Resources) -> bool:
    return is_ready(resources.get("consumers", "c"))


async def _publish(js: JetStreamContext, stream: str, numbers: range) -> None:
    for number in numbers:
        await js.publish(f"{stream.lower()}.a", str(number).encode())


async def _take(
    js: JetStreamContext, stream: str, durable: str, count: int, ack: bool
) -> list[int]:
    """Fetch `count` messages as a client does; their payloads are their stream sequence - 1."""
    subscription = await js.pull_subscribe_bind(durable, stream=stream)
    taken: list[int] = []
    while len(taken) < count:
        for message in await subscription.fetch(count - len(taken), timeout=5):
            taken.append(int(message.data))
            if ack:
                await message.ack_sync()
    await subscription.unsubscribe()
    return taken


async def _reset(resources: Resources, token: str, target: str | None) -> dict[str, Any]:
    resources.annotate("consumers", "c", {RESET: token, RESET_TO: target})

    async def recorded() -> dict[str, Any] | None:
        last = ((resources.get("consumers", "c") or {}).get("status") or {}).get("lastReset")
        return last if (last or {}).get("token") == token else None

    return await eventually(recorded)


async def test_reset_moves_the_position_to_a_sequence_a_time_and_the_ack_floor(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream, js, jetstream = await _setup(resources, nc, namespace, "RESETTABLE")
    expected = "ResetAPI" if await jetstream.api_level() >= RESET_API_LEVEL else "Recreated"
    version = nc.connected_server_version
    assert (expected == "ResetAPI") == ((version.major, version.minor) >= (2, 14)), version
    await _publish(js, stream, range(60))
    await asyncio.sleep(0.05)
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await _publish(js, stream, range(60, 100))
    assert await _take(js, stream, "RESETTABLE", 50, ack=True) == list(range(50))

    # Back to stream sequence 20: everything from there is delivered again, nothing skipped.
    last = await _reset(resources, "back-to-20", "20")
    assert (last["sequence"], last["method"]) == (20, expected)
    info = await jetstream.consumer_info(stream, "RESETTABLE")
    assert info is not None
    assert (info["num_pending"], info["delivered"]["stream_seq"]) == (81, 19)
    assert await _take(js, stream, "RESETTABLE", 11, ack=True) == list(range(19, 30))

    # Delivered and not acknowledged: a reset to the ack floor delivers them again.
    assert await _take(js, stream, "RESETTABLE", 5, ack=False) == list(range(30, 35))
    last = await _reset(resources, "unacked-again", "ackFloor")
    assert last["sequence"] == 31
    assert await _take(js, stream, "RESETTABLE", 5, ack=True) == list(range(30, 35))

    # Forward to the first message at or after a time: the second batch.
    last = await _reset(resources, "second-batch", between.isoformat().replace("+00:00", "Z"))
    assert last["sequence"] == 61
    assert await _take(js, stream, "RESETTABLE", 40, ack=True) == list(range(60, 100))

    # The moved consumer is in sync with its spec: later passes (every 2 s here) leave it.
    created = (await jetstream.consumer_info(stream, "RESETTABLE") or {}).get("created")
    await asyncio.sleep(5)
    after = await jetstream.consumer_info(stream, "RESETTABLE")
    assert after is not None and after["created"] == created
    assert await _ready(resources)


async def test_recreating_for_an_immutable_change_keeps_the_position(
    resources: Resources, nc: Client, namespace: str, api_client: client.ApiClient
) -> None:
    stream, js, jetstream = await _setup(
        resources, nc, namespace, "KEEPER", recreateOnImmutableChange=True
    )
    await _publish(js, stream, range(100))
    assert await _take(js, stream, "KEEPER", 30, ack=True) == list(range(30))
    assert await _take(js, stream, "KEEPER", 5, ack=False) == list(range(30, 35))
    before = await jetstream.consumer_info(stream, "KEEPER") or {}
    assert before
    resources.patch_spec("consumers", "c", {"maxWaiting": 10})  # the server cannot change it

    async def recreated() -> dict[str, Any] | None:
        info = await jetstream.consumer_info(stream, "KEEPER") or {}
        done = (info.get("config") or {}).get("max_waiting") == 10
        return info if done and info["created"] != before["created"] else None

    info = await eventually(recreated)
    assert info["num_pending"] == 70
    event = await event_posted(api_client, namespace, "c", "Recreating")
    assert "stream sequence 31, just after its ack floor" in event.message
    assert await _take(js, stream, "KEEPER", 70, ack=True) == list(range(30, 100))
    await asyncio.sleep(5)  # passes every 2 s: in sync, not recreated again
    after = await jetstream.consumer_info(stream, "KEEPER")
    assert after is not None and after["created"] == info["created"]
    assert await _ready(resources)


async def test_a_malformed_reset_is_a_warning_and_changes_nothing(
    resources: Resources, nc: Client, namespace: str, api_client: client.ApiClient
) -> None:
    stream, js, jetstream = await _setup(resources, nc, namespace, "STEADY")
    await _publish(js, stream, range(10))
    before = await jetstream.consumer_info(stream, "STEADY")
    last = await _reset(resources, "typo", "yesterday")
    assert "reset-to must be a stream sequence" in last["error"]
    await event_posted(api_client, namespace, "c", "InvalidReset")
    after = await jetstream.consumer_info(stream, "STEADY")
    assert before is not None and after is not None
    assert (after["created"], after["num_pending"]) == (before["created"], 10)
    assert await _ready(resources)
