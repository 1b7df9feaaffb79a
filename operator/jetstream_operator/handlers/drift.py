"""Drift repair: advisories for changes within a second, a paged resync for anything missed.

One STREAM.LIST pass (N/256 requests) checks every stream, instead of a timer and an INFO request
per resource; status is written only when something a person would see has changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from .. import API_VERSION
from ..api.kinds import STREAM
from ..k8s.status import ResourceWriter
from ..nats.advisories import subscribe_stream_changes
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..nats.pool import ConnectionPool, ConnectionTarget
from ..reconcile.conditions import conditions_for, same_conditions
from . import stream as stream_handlers
from .registry import StreamRegistry, StreamResource
from .stream import Result

logger = logging.getLogger(__name__)


def status_patch(resource: StreamResource, result: Result) -> dict[str, Any] | None:
    """The status to write after a pass, or None when nothing visible changed."""
    previous = resource.status
    conditions = conditions_for(
        result.outcome, resource.generation, previous.get("conditions") or []
    )
    unchanged = same_conditions(conditions, previous.get("conditions") or []) and all(
        previous.get(key) == value for key, value in result.status.items()
    )
    if unchanged and previous.get("observedGeneration") == resource.generation:
        return None
    return {"observedGeneration": resource.generation, "conditions": conditions, **result.status}


def needs_care(resource: StreamResource) -> bool:
    """Resources kopf is still creating or deleting are left to kopf."""
    return resource.first_handled and not resource.deleting


class DriftWatcher:
    """Keeps every Stream's server state and live status current, on one NATS connection."""

    def __init__(
        self,
        registry: StreamRegistry,
        pool: ConnectionPool,
        target: ConnectionTarget,
        writer: ResourceWriter,
        resync_interval: float,
        use_advisories: bool = True,
        read_only: bool = False,
        pause_annotation: str = "",
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._target = target
        self._writer = writer
        self._interval = resync_interval
        self._use_advisories = use_advisories
        self._read_only = read_only
        self._pause_annotation = pause_annotation
        self._pending: set[str] = set()
        self._wakeup = asyncio.Event()

    async def run(self) -> None:
        """Run until cancelled; NATS outages only delay the work."""
        subscribed = False
        reconnects = -1
        next_resync = 0.0
        loop = asyncio.get_running_loop()
        while True:
            try:
                jetstream = await self._pool.jetstream(self._target)
                connection = await self._pool.connection(self._target)
                if self._use_advisories and not subscribed:
                    await subscribe_stream_changes(connection, self.notify)
                    subscribed = True
                if connection.stats["reconnects"] != reconnects:
                    # Advisories sent while we were away are lost: look at everything.
                    reconnects = connection.stats["reconnects"]
                    next_resync = 0.0
                if self._pending:
                    names, self._pending = self._pending, set()
                    await self._repair_named(jetstream, names)
                if loop.time() >= next_resync:
                    await self.resync(jetstream)
                    next_resync = loop.time() + self._interval
            except JetStreamUnavailable as error:
                logger.warning("drift check postponed: %s", error)
                next_resync = loop.time() + min(self._interval, 5.0)
            except Exception:  # the watcher must outlive any single failure
                logger.exception("drift check failed; retrying")
                next_resync = loop.time() + min(self._interval, 5.0)
            self._wakeup.clear()
            timeout = max(0.05, next_resync - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def notify(self, stream: str) -> None:
        self._pending.add(stream)
        self._wakeup.set()

    async def _repair_named(self, jetstream: JetStreamApi, names: set[str]) -> None:
        for name in names:
            for resource in self._registry.by_stream_name(name):
                if needs_care(resource):
                    await self.repair(resource, jetstream)

    async def resync(self, jetstream: JetStreamApi) -> None:
        """One paged listing of all streams, compared with every resource."""
        infos = {
            str(info.get("config", {}).get("name")): info for info in await jetstream.list_streams()
        }
        for resource in self._registry:
            name = resource.stream_name
            if name is not None and needs_care(resource):
                await self.repair(resource, jetstream, known=infos.get(name))

    async def repair(
        self,
        resource: StreamResource,
        jetstream: JetStreamApi,
        known: Mapping[str, Any] | None = None,
    ) -> None:
        async with resource.lock:
            if resource.annotation(self._pause_annotation).lower() == "true":
                result = stream_handlers.paused(self._pause_annotation)
            else:
                result = await stream_handlers.reconcile(
                    resource.spec,
                    resource.owner,
                    jetstream,
                    drift=True,
                    known_info=known,
                    read_only=self._read_only,
                )
            patch = status_patch(resource, result)
            if patch is not None:
                written = await self._writer.patch_status(
                    STREAM.plural, resource.owner.namespace, resource.owner.name, patch
                )
                if written:
                    resource.body = {**resource.body, "status": {**resource.status, **patch}}
            reference = {
                "apiVersion": API_VERSION,
                "kind": STREAM.kind,
                "metadata": {
                    "namespace": resource.owner.namespace,
                    "name": resource.owner.name,
                    "uid": resource.owner.uid,
                },
            }
            for event in result.events:
                await self._writer.post_event(reference, event.type, event.reason, event.message)
