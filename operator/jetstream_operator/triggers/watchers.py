"""One drift watcher per NATS system in use, restarted when its target changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from ..handlers.registry import ConnectionKey, TrackedResource
from ..nats.pool import ConnectionTarget
from .drift import DriftWatcher


class WatcherSet:
    """One drift watcher task per connection in use, restarted when its target changes."""

    def __init__(self, make: Callable[[ConnectionKey, ConnectionTarget], DriftWatcher]) -> None:
        self._make = make
        self._running: dict[
            ConnectionKey, tuple[ConnectionTarget, DriftWatcher, asyncio.Task[None]]
        ] = {}

    def sync(self, wanted: Mapping[ConnectionKey, ConnectionTarget]) -> None:
        for key in list(self._running):
            target, _, task = self._running[key]
            if wanted.get(key) != target:
                task.cancel()
                del self._running[key]
        for key, target in wanted.items():
            if key not in self._running:
                watcher = self._make(key, target)
                task = asyncio.create_task(watcher.run(), name=f"drift-{key}")
                self._running[key] = (target, watcher, task)

    def observed(self, resource: TrackedResource) -> None:
        for _, watcher, _ in self._running.values():
            watcher.observed(resource)

    def get(self, key: ConnectionKey) -> DriftWatcher | None:
        running = self._running.get(key)
        return running[1] if running is not None else None

    async def stop(self) -> None:
        tasks = [task for _, _, task in self._running.values()]
        self._running.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
