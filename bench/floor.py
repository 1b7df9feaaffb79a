"""The floor: the requests any controller must make for N Streams and N Consumers (the
creations in NATS with nats-py, 2N status patches), timed with no controller running, the same
for ours and NACK."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import nats
from kubernetes import client

from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi


async def floor_nats(url: str, prefix: str, count: int) -> float:
    """The same creations made straight with nats-py, 32 at a time."""
    nc = await nats.connect(url)
    jetstream = JetStreamApi(nc)
    limit = asyncio.Semaphore(32)

    async def make(index: int) -> None:
        name = f"{prefix}_{index}"
        async with limit:
            await jetstream.create_stream({"name": name, "subjects": [f"{name.lower()}.>"]})
            await jetstream.create_consumer(
                name,
                {
                    "stream_name": name,
                    "action": "create",
                    "config": {
                        "name": f"C{index}",
                        "durable_name": f"C{index}",
                        "ack_policy": "explicit",
                    },
                },
            )

    started = time.perf_counter()
    await asyncio.gather(*(make(index) for index in range(count)))
    elapsed = time.perf_counter() - started
    await nc.close()
    return elapsed


def floor_status_patches(
    objects: client.CustomObjectsApi,
    namespace: str,
    count: int,
    group: str = GROUP,
    version: str = VERSION,
) -> float:
    """2N status patches (streams s0.., consumers c0..) with the Kubernetes client, 8 at a
    time, as the operator must do."""

    def patch(target: tuple[str, str]) -> None:
        plural, name = target
        objects.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, {"status": {"observedGeneration": 1}}
        )

    targets = [("streams", f"s{i}") for i in range(count)] + [
        ("consumers", f"c{i}") for i in range(count)
    ]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(patch, targets))
    return time.perf_counter() - started


async def delete_streams(url: str, prefix: str) -> None:
    """Every stream whose name starts with `prefix`, 32 at a time."""
    nc = await nats.connect(url)
    try:
        jetstream, names = JetStreamApi(nc), cast(list[str], [])
        while True:
            page = await jetstream.request("STREAM.NAMES", {"offset": len(names)})
            found = page.get("streams") or []
            names += found
            if not found or len(names) >= int(page.get("total", 0)):
                break
        limit = asyncio.Semaphore(32)

        async def delete(name: str) -> None:
            async with limit:
                await jetstream.request(f"STREAM.DELETE.{name}", {})

        await asyncio.gather(*(delete(n) for n in names if str(n).startswith(prefix)))
    finally:
        await nc.close()
