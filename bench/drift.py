"""Drift repair: streams changed or deleted out of band, timed until the controller puts them
back, the same for ours and NACK."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats

from jetstream_operator.nats.jsapi import JetStreamApi


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] * 1000 if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


async def drift_latency(
    url: str,
    prefix: str,
    samples: int,
    timeout: float = 10.0,
    at_once: bool = False,
    expected_max_msgs: int = -1,
) -> dict[str, Any]:
    """Out-of-band changes (max_msgs) and then deletions of `samples` streams, each timed until
    the server shows the declared stream again; one after another, or all at once (a controller
    that repairs only on a timer would take `samples` times its period one after another). A
    repair that takes longer than `timeout` counts as not repaired."""
    nc = await nats.connect(url)
    jetstream = JetStreamApi(nc)
    names = [f"{prefix}_{index}" for index in range(samples)]

    async def until(probe: Callable[[], Awaitable[bool]]) -> float | None:
        started = time.perf_counter()
        while not await probe():
            if time.perf_counter() - started > timeout:
                return None
            await asyncio.sleep(0.005 if not at_once else 0.05)
        return time.perf_counter() - started

    async def change(name: str) -> float | None:
        info = await jetstream.stream_info(name)
        assert info is not None, name
        await jetstream.update_stream({**info["config"], "max_msgs": 12345})

        async def restored() -> bool:
            current = await jetstream.stream_info(name)
            return current is not None and current["config"]["max_msgs"] == expected_max_msgs

        return await until(restored)

    async def delete(name: str) -> float | None:
        await jetstream.delete_stream(name)

        async def back() -> bool:
            return await jetstream.stream_info(name) is not None

        return await until(back)

    async def each(step: Callable[[str], Awaitable[float | None]]) -> list[float]:
        if at_once:
            took = await asyncio.gather(*(step(name) for name in names))
        else:
            took = [await step(name) for name in names]
        return [value for value in took if value is not None]

    if at_once:
        changes, deletions = await each(change), await each(delete)
    else:  # each stream changed, then deleted, before the next
        changes, deletions = [], []
        for name in names:
            changes += [t for t in [await change(name)] if t is not None]
            deletions += [t for t in [await delete(name)] if t is not None]
    await nc.close()
    return {
        "samples": samples,
        "at_once": at_once,
        "timeout_s": timeout,
        "changes_repaired": len(changes),
        "deletions_repaired": len(deletions),
        "change_p50_ms": percentile(changes, 50),
        "change_p99_ms": percentile(changes, 99),
        "delete_p50_ms": percentile(deletions, 50),
        "delete_p99_ms": percentile(deletions, 99),
    }
