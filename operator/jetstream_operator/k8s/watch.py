"""A list-then-watch of one of our kinds, namespace by namespace, outside kopf.

Where a process only reads NatsConnections, kopf must not watch them at all: it removes its
finalizer from every object of a kind for which the process has no handler needing one, and the
finalizer's name is shared with the process that manages them. So that process follows them
here, in the namespaces its own resources use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import GROUP, VERSION
from .client import ApiError, KubeApi

logger = logging.getLogger(__name__)

Observe = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Told each change: the event type (ADDED, MODIFIED, DELETED) and the object."""

RETRY_SECONDS = (1.0, 30.0)
"""The first and the longest wait, doubled in between, before following a namespace again
after the API server failed a listing or a watch; jittered."""

SHORTEST_WATCH = 1.0
"""Seconds: a watch that ends sooner (refused, or cut by a proxy) is followed by a wait this
long, so a server that keeps ending them at once is not asked again in a tight loop."""

FIRST_LISTING_TIMEOUT = 10.0
"""Seconds `follow` waits for a namespace's first listing before it gives up for now."""


class NamespaceWatches:
    """Follows `plural` in each namespace asked for, telling `observe` of every change
    (`path_of` a namespace: the collection's path, when it is not one of our kinds).

    A watch that ends is started again from the last version seen (kept current by bookmarks);
    one the API server refuses as too old (410) starts over from a new listing, which reports
    the objects deleted meanwhile as DELETED."""

    def __init__(
        self,
        api: KubeApi,
        plural: str,
        observe: Observe,
        path_of: Callable[[str], str] | None = None,
    ) -> None:
        self._api = api
        self._plural = plural
        self._observe = observe
        self._path_of = path_of or (
            lambda namespace: f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._listed: dict[str, asyncio.Event] = {}

    async def follow(self, namespace: str) -> bool:
        """Follow `namespace` from now on; True once its first listing has been reported,
        False when that did not happen within FIRST_LISTING_TIMEOUT (it goes on trying)."""
        if namespace not in self._tasks:
            self._listed[namespace] = asyncio.Event()
            self._tasks[namespace] = asyncio.create_task(
                self._follow(namespace), name=f"watch-{self._plural}-{namespace}"
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listed[namespace].wait(), FIRST_LISTING_TIMEOUT)
        return self._listed[namespace].is_set()

    async def stop(self) -> None:
        """Stop following, and close the API client, which is this object's own."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._api.close()

    async def _follow(self, namespace: str) -> None:
        path = self._path_of(namespace)
        known: dict[str, dict[str, Any]] = {}  # by name, as last reported
        pause = RETRY_SECONDS[0]
        while True:
            try:
                version: str | None = await self._list(path, known)
                self._listed[namespace].set()
                pause = RETRY_SECONDS[0]
                while version is not None:
                    started = time.monotonic()
                    version = await self._watch(path, version, known)
                    await asyncio.sleep(max(0.0, started + SHORTEST_WATCH - time.monotonic()))
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the API server's trouble: list again later
                logger.warning("following %s in %s failed: %s", self._plural, namespace, error)
                await asyncio.sleep(random.uniform(0.5, 1.0) * pause)
                pause = min(pause * 2, RETRY_SECONDS[1])

    async def _list(self, path: str, known: dict[str, dict[str, Any]]) -> str:
        """Report what changed since `known`; the listing's resource version."""
        listing = await self._api.request("GET", path)
        items = {item["metadata"]["name"]: item for item in listing.get("items") or []}
        for name in [name for name in known if name not in items]:
            await self._observe("DELETED", known.pop(name))
        for name, item in items.items():
            before = known.get(name)
            known[name] = item
            if before is None:
                await self._observe("ADDED", item)
            elif _version(before) != _version(item):
                await self._observe("MODIFIED", item)
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, path: str, version: str, known: dict[str, dict[str, Any]]) -> str | None:
        """Report the watch's events; the version to go on from, None to list again."""
        try:
            async for event in self._api.watch(path, version):
                kind, body = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # most often 410: the version is too old to watch from
                version = _version(body) or version
                if kind == "BOOKMARK":
                    continue
                name = body["metadata"]["name"]
                if kind == "DELETED":
                    known.pop(name, None)
                else:
                    known[name] = body
                await self._observe(str(kind), body)
        except ApiError as error:
            if error.status == 410:
                return None
            raise
        return version


def _version(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")
