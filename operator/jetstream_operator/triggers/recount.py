"""What a recount of streams' consumer counts needs besides the watcher's own timing: their
fresh INFO, bought as cheaply as their number allows, and a wait for the stream's first status,
without which a count would be written only to be overwritten."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..handlers.registry import TrackedResource
from ..nats.jsapi import JetStreamApi
from ..passes.repair import PARALLEL_REPAIRS

logger = logging.getLogger(__name__)

RECOUNT_GATHER = 0.5
"""Seconds to let consumer advisories gather before refreshing their streams' counts."""
RECOUNT_BY_INFO = 8
"""Up to this many streams are refreshed by INFO each, and up to a `RECOUNT_LISTING_SHARE` of
the streams a listing returns; more by one listing."""
RECOUNT_LISTING_SHARE = 4
"""A listing returns every stream of the account: during a burst of consumers at 5,000
streams, a listing per recount was 9% of the operator's CPU, where an INFO for each of the few
dozen streams concerned costs a few requests of a page's size each."""
FIRST_STATUS_WAIT = 60.0
"""Seconds a new consumer waits for its stream's first status before showing on its count (and
before reporting Ready itself); past it, the advisory's recount shows the consumer later."""


async def stream_infos(
    jetstream: JetStreamApi, names: Iterable[str], limit: int = PARALLEL_REPAIRS
) -> dict[str, Mapping[str, Any] | None]:
    """Each stream's INFO (None: gone), `limit` requests at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(name: str) -> tuple[str, Mapping[str, Any] | None]:
        async with gate:
            return name, await jetstream.stream_info(name)

    return dict(await asyncio.gather(*(one(name) for name in names)))


async def recounted_infos(
    jetstream: JetStreamApi, names: set[str], listed: int
) -> Mapping[str, Mapping[str, Any] | None]:
    """The streams' INFO for a recount: up to a quarter of the `listed` streams of the
    account cost an INFO each; more cost one listing of them all."""
    if len(names) <= max(RECOUNT_BY_INFO, listed / RECOUNT_LISTING_SHARE):
        return await stream_infos(jetstream, names)
    return (await jetstream.stream_listing()).seen()  # the unseen wait for a resync


class FirstStatusWaits:
    """Who waits for kopf's first status of a stream: a count written before it would be
    overwritten by the handler's older figure."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Event] = {}

    def observed(self, resource: TrackedResource) -> None:
        """The watch delivered a resource: wake whoever waits for its first status."""
        if resource.first_handled:
            waiting = self._waiting.pop(resource.owner.uid, None)
            if waiting is not None:
                waiting.set()

    async def wait(self, resource: TrackedResource, timeout: float) -> None:
        """Wait until kopf's first status of the resource is in the registry."""
        if resource.first_handled:
            return
        waiting = self._waiting.setdefault(resource.owner.uid, asyncio.Event())
        try:
            await asyncio.wait_for(waiting.wait(), timeout)
        except TimeoutError:
            self._waiting.pop(resource.owner.uid, None)  # e.g. a stream that never came
            logger.info(
                "no first status of %s after %.0f s; its consumer count follows later",
                resource.owner.describe(),
                timeout,
            )
