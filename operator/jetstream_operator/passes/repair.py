"""The drift watchers' triggers (a resync, an advisory, a recount, a retry) as a trigger of the
one pass (`envelope.run`): the work brings what a listing told into the kind's driver, unless a
newer look already reported; the status is written under the status budget."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from ..api.kinds import CONSUMER, ResourceKind
from ..handlers.failures import FailureMemory
from ..handlers.registry import ConnectionKey, ResourceRegistry, TrackedResource, connection_key
from ..handlers.resource_figures import LiveFigures
from ..handlers.results import Result
from ..handlers.status_writes import StatusBudget, status_patch
from ..handlers.tenancy_gate import TenancyGate
from ..k8s.status import EventSink, ResourceWriter
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..reconcile.backed import STREAM_KIND, StreamBackedKind
from .drivers import Seen, drift_drivers
from .envelope import Unit, run

logger = logging.getLogger(__name__)

PARALLEL_REPAIRS = 8
"""Resources repaired at once from one listing: a burst of status writes (consumer counts after
thousands of consumers were made) then takes seconds rather than a write's latency each."""


async def all_of(repairs: Iterable[Awaitable[None]], limit: int = PARALLEL_REPAIRS) -> None:
    """Run the repairs, `limit` at a time. After a failure (a JetStreamUnavailable, which makes
    the run loop back off) no further one starts; the first failure is raised."""
    gate = asyncio.Semaphore(limit)
    failures: list[BaseException] = []

    async def one(repair: Awaitable[None]) -> None:
        async with gate:
            if failures:
                if inspect.iscoroutine(repair):
                    repair.close()  # never started: nothing to clean up
                return
            try:
                await repair
            except Exception as error:
                failures.append(error)

    await asyncio.gather(*(one(repair) for repair in repairs))
    if failures:
        raise failures[0]


def needs_care(resource: TrackedResource) -> bool:
    """Resources kopf is still creating or deleting are left to kopf."""
    return resource.first_handled and not resource.deleting


class Repairer:
    """Repairs the resources of one NATS connection, one at a time each (under its lock)."""

    def __init__(
        self,
        backed: Mapping[StreamBackedKind, ResourceRegistry],
        consumers: ResourceRegistry,
        writer: ResourceWriter,
        events: EventSink,
        connection: ConnectionKey,
        read_only: bool,
        pause_annotation: str,
        failures: FailureMemory,
        budget: StatusBudget | None,
        explained: Callable[[str], str | None] | None,
        gate: TenancyGate | None = None,
        figures: LiveFigures | None = None,
    ) -> None:
        """`explained`: see `DriftWatcher`; `gate`: the connections' tenancy; `figures`: where
        every look's figures go, before the status budget holds any back."""
        self._gate = gate
        self._figures = figures
        self.backed = dict(backed)
        self.streams = self.backed[STREAM_KIND]
        self.consumers = consumers
        self._drivers = drift_drivers(self.backed, self.streams, explained)
        self._writer = writer
        self._events = events
        self._connection = connection
        self._read_only = read_only
        self._pause_annotation = pause_annotation
        self._failures = failures
        self._budget = budget
        self._looked_at: dict[str, float] = {}

    def belongs(self, resource: TrackedResource) -> bool:
        """Whether the resource uses this watcher's connection."""
        return connection_key(resource) == self._connection

    def registries(self) -> list[tuple[ResourceKind, ResourceRegistry]]:
        kinds = [(kind.resource, registry) for kind, registry in self.backed.items()]
        return [*kinds, (CONSUMER, self.consumers)]

    def looking(self, uid: str) -> None:
        """A handler is about to look at the resource on the server: a listing taken before
        now must not write its older figures over what the handler reports."""
        self._looked_at[uid] = asyncio.get_running_loop().time()

    def forget_looks_until(self, as_of: float) -> None:
        """Listings from after `as_of` are newer than every look recorded until then."""
        self._looked_at = {uid: at for uid, at in self._looked_at.items() if at > as_of}

    async def write_status(
        self, kind: ResourceKind, resource: TrackedResource, result: Result
    ) -> None:
        """A status that shows a condition of the connection or the server, not of a pass."""
        patch = status_patch(resource, result)
        if patch is None:
            return
        try:
            await self._write(kind, resource, patch)
        except Exception:
            logger.exception("could not write the status of %s", resource.owner.describe())

    async def _write(
        self, kind: ResourceKind, resource: TrackedResource, patch: dict[str, Any]
    ) -> None:
        """Write the status patch, and keep the registry's copy as the server now holds it."""
        written = await self._writer.patch_status(
            kind.plural, resource.owner.namespace, resource.owner.name, patch
        )
        if written:
            resource.body = {**resource.body, "status": {**resource.status, **patch}}

    async def repair(
        self,
        kind: ResourceKind,
        resource: TrackedResource,
        jetstream: JetStreamApi,
        known: Mapping[str, Any] | None,
        known_stream: Mapping[str, Any] | None = None,
        as_of: float | None = None,
    ) -> None:
        """One resource's pass; its failure never stops the others' (it is logged and retried
        by the failure memory). `as_of` is when `known` was fetched: a listing taken before the
        resource's latest look (a consumer's recount meanwhile) would write older figures."""
        if not needs_care(resource) or not self.belongs(resource):
            return
        try:
            await self._repair_one(kind, resource, jetstream, known, known_stream, as_of)
        except JetStreamUnavailable:
            raise  # the whole connection is in trouble: the run loop backs off
        except Exception:
            logger.exception(
                "repairing %s %s failed; the others go on", kind.singular, resource.owner.describe()
            )

    async def _repair_one(
        self,
        kind: ResourceKind,
        resource: TrackedResource,
        jetstream: JetStreamApi,
        known: Mapping[str, Any] | None,
        known_stream: Mapping[str, Any] | None,
        as_of: float | None = None,
    ) -> None:
        unit = Unit.tracked(kind, resource, self._failures)
        driver = self._drivers[kind.kind]

        async def looked_at() -> Result | None:
            uid = unit.owner.uid
            looked = asyncio.get_running_loop().time() if known is None else as_of
            if looked is not None:
                if looked < self._looked_at.get(uid, -math.inf):
                    return None  # a newer look already wrote what this one knows
                self._looked_at[uid] = looked
            seen = Seen(resource, known, known_stream)
            return await driver.repair(unit, jetstream, seen, read_only=self._read_only)

        async def written(result: Result) -> None:
            if self._figures is not None:
                self._figures.record(resource, result.status)
            patch = status_patch(resource, result, self._budget)
            if patch is not None:
                await self._write(kind, resource, patch)

        await run(
            unit,
            looked_at,
            written,
            self._events,
            read_only=self._read_only,
            pause_annotation=self._pause_annotation,
            gate=self._gate,
        )
