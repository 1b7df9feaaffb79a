"""Drift repair: advisories for changes within a second, a paged resync for anything missed.

One STREAM.LIST pass (N/256 requests) checks every stream, instead of a timer and an INFO request
per resource. JetStream has no account-wide consumer listing, so consumers are listed per stream,
and only where advisories cannot stand in: for streams whose state moved since the last look (new
messages, a consumer added or removed), for every stream after advisories may have been lost (a
reconnect, a slow-consumer drop), for consumers clients are reading (every consumer resync
interval), for those whose figures are measured (every pass), and for the idle rest once per
idle interval. Where the connection's account can be read through the system account, one
JSZ request gives every consumer instead (`nats.jsz`). Status is written only when something a
person would see has changed.

This module holds the triggers (advisories, recounts, retries, the resync timer) and the loop
that feeds them into passes; a pass itself is `repair`, the choice of consumers to list is
`consumer_sweep`, and what an outage shows is `outage`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..api.kinds import CONSUMER
from ..handlers.failures import FailureMemory
from ..handlers.own_writes import OwnWrites
from ..handlers.registry import (
    ConnectionKey,
    ResourceRegistry,
    TrackedResource,
    consumer_stream,
    consumers_of,
    declaring,
)
from ..handlers.resource_figures import LiveFigures
from ..handlers.status_writes import StatusBudget
from ..handlers.tenancy_gate import TenancyGate
from ..k8s.status import EventSink, ResourceWriter
from ..nats.advisories import subscribe_changes
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..nats.jsz import AccountConsumers, AccountMonitoring, stream_peers
from ..nats.pool import ConnectionPool, ConnectionTarget
from ..passes.repair import Repairer, all_of
from ..reconcile.backed import STREAM_KIND, StreamBackedKind
from .consumer_sweep import ConsumerSweep
from .outage import OutageDisplay
from .recount import FIRST_STATUS_WAIT, RECOUNT_GATHER, FirstStatusWaits, recounted_infos

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class WatchSettings:
    resync_interval: float
    consumer_resync_interval: float = 300.0
    consumer_idle_resync_interval: float = 14400.0
    use_advisories: bool = True
    read_only: bool = False
    pause_annotation: str = ""


class DriftWatcher:
    """Keeps every resource's server state and live status current, on one NATS connection:
    the kinds holding a stream (Stream, KeyValue, ObjectStore) and Consumers."""

    def __init__(
        self,
        backed: Mapping[StreamBackedKind, ResourceRegistry],
        consumers: ResourceRegistry,
        pool: ConnectionPool,
        target: ConnectionTarget,
        writer: ResourceWriter,
        events: EventSink,
        settings: WatchSettings,
        connection: ConnectionKey = None,
        may_act: Callable[[], Awaitable[bool]] | None = None,
        failures: FailureMemory | None = None,
        budget: StatusBudget | None = None,
        explained: Callable[[str], str | None] | None = None,
        gate: TenancyGate | None = None,
        figures: LiveFigures | None = None,
        monitoring: AccountMonitoring | None = None,
    ) -> None:
        """`explained` gives, by a Consumer's uid, why its streamRef finds no Stream, as the
        Consumer's own handler last found out (an API read): a pass here keeps that message
        instead of writing the plain one over it, and asks nothing. `figures` keeps the
        opted-in resources' latest figures for their metrics, and has their consumers listed
        on every pass. `monitoring`, where the connection's account can be read through the
        system account, gives every consumer's state in one request instead of one per
        stream."""
        self._monitoring = monitoring
        self._monitoring_failure: str | None = None  # logged once until it changes
        self._failures = failures if failures is not None else FailureMemory()
        self._repairer = Repairer(
            backed,
            consumers,
            writer,
            events,
            connection,
            read_only=settings.read_only,
            pause_annotation=settings.pause_annotation,
            failures=self._failures,
            budget=budget,
            explained=explained,
            gate=gate,
            figures=figures,
        )
        self._figures = figures
        self._backed = self._repairer.backed
        self._streams = self._repairer.streams
        self._consumers = consumers
        self._pool = pool
        self._target = target
        self._settings = settings
        self._may_act = may_act
        self._budget = budget
        self._outage = OutageDisplay(self._repairer)
        self._first_status = FirstStatusWaits()
        self.own_writes = OwnWrites()
        """What handlers on this connection create, so its advisories are not looked into."""
        self._recount: set[str] = set()
        self._recount_at = 0.0
        self._pending_streams: set[str] = set()
        self._pending_consumers: set[tuple[str, str]] = set()
        self._second_looks: dict[tuple[str, str], int] = {}
        self._listed = 0  # streams the last listing returned
        self._wakeup = asyncio.Event()
        share = settings.resync_interval / settings.consumer_resync_interval
        # Without advisories the sweep is the only way to see a change: no idle discount.
        idle_share = (
            settings.resync_interval / settings.consumer_idle_resync_interval
            if settings.use_advisories
            else share
        )
        self._sweep = ConsumerSweep(share, idle_share)

    async def run(self) -> None:
        """Run until cancelled; NATS outages only delay the work."""
        subscribed = False
        losses: tuple[int, int] | None = None
        next_resync = 0.0
        loop = asyncio.get_running_loop()
        interval = self._settings.resync_interval
        while True:
            if self._may_act is not None and not await self._may_act():
                # A standby replica: kopf has paused its handlers, and so do we.
                self._pending_streams.clear()
                self._pending_consumers.clear()
                next_resync = 0.0
                await asyncio.sleep(1.0)
                continue
            try:
                jetstream = await self._pool.jetstream(self._target)
                connection = await self._pool.connection(self._target)
                if self._settings.use_advisories and not subscribed:
                    await subscribe_changes(connection, self.notify_stream, self.notify_consumer)
                    subscribed = True
                now_losses = (
                    connection.stats["reconnects"],
                    self._pool.dropped_messages(self._target),
                )
                if now_losses != losses:
                    # Advisories sent while we were away, or dropped because we fell behind,
                    # are lost: look at everything.
                    losses = now_losses
                    next_resync = 0.0
                    self._sweep.everything_next()
                await self._repair_pending(jetstream)
                await self._retry_due(jetstream)
                if loop.time() >= next_resync:
                    await self.resync(jetstream)
                    next_resync = loop.time() + interval
                    self._recount.clear()  # the listing refreshed every stream's counts
                elif self._recount and loop.time() >= self._recount_at:
                    await self._refresh_counts(jetstream)
            except JetStreamUnavailable as error:
                logger.warning("drift check postponed: %s", error)
                next_resync = loop.time() + min(interval, 5.0)
                await self._outage.unavailable(error, interval)
            except Exception:  # the watcher must outlive any single failure
                logger.exception("drift check failed; retrying")
                next_resync = loop.time() + min(interval, 5.0)
            else:
                self._outage.answered()
            self._wakeup.clear()
            if self._pending_streams or self._pending_consumers:
                continue
            wake_at = next_resync
            if self._recount:
                wake_at = min(wake_at, self._recount_at)
            retry_at = self._failures.next_due()
            if retry_at is not None:
                # The memory's clock is monotonic, as is the loop's.
                wake_at = min(wake_at, loop.time() + max(0.0, retry_at - self._failures.clock()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), max(0.05, wake_at - loop.time()))

    async def notify_stream(self, stream: str, action: str = "") -> None:
        if self.own_writes.is_echo(stream, None, action):
            return  # a handler's own creation or update: its answer is what a look would see
        self._pending_streams.add(stream)
        self._wakeup.set()

    async def notify_consumer(self, stream: str, consumer: str, action: str = "") -> None:
        if self.own_writes.is_echo(stream, consumer, action):
            # A handler's own creation: it shows the consumer, and the stream's count (its
            # stream's first status counts it, or it recounts).
            return
        self._pending_consumers.add((stream, consumer))
        self.recount_soon(stream)

    def recount_soon(self, stream: str) -> None:
        """The stream's consumer count in status is stale: count again within seconds."""
        if self._streams.with_spec("name", stream):
            if not self._recount:  # let a burst of advisories gather, without holding repairs
                self._recount_at = asyncio.get_running_loop().time() + RECOUNT_GATHER
            self._recount.add(stream)
        self._wakeup.set()

    def looking(self, uid: str) -> None:
        """A handler is about to look at the resource on the server: a listing taken before
        now must not write its older figures over what the handler reports."""
        self._repairer.looking(uid)

    def observed(self, resource: TrackedResource) -> None:
        """The watch delivered a resource: wake whoever waits for its first status."""
        self._first_status.observed(resource)

    async def recount_now(
        self, stream: str, jetstream: JetStreamApi, timeout: float = FIRST_STATUS_WAIT
    ) -> None:
        """Show a consumer just made on its stream's count before the consumer reports Ready,
        so status is complete when the last resource turns Ready. The write is the one the
        advisory's recount would make a moment later; that recount then finds nothing to do."""
        resources = [
            r for r in self._streams.with_spec("name", stream) if self._repairer.belongs(r)
        ]
        if not resources:
            return
        for resource in resources:
            await self._first_status.wait(resource, timeout)
        if not all(resource.first_handled for resource in resources):
            self.recount_soon(stream)  # as often as needed until its first status is there
            return
        as_of = asyncio.get_running_loop().time()
        try:
            info = await jetstream.stream_info(stream)
        except JetStreamUnavailable:
            self.recount_soon(stream)
            raise
        if info is None:
            return
        for resource in resources:
            await self._repairer.repair(
                STREAM_KIND.resource, resource, jetstream, info, as_of=as_of
            )

    async def _retry_due(self, jetstream: JetStreamApi) -> None:
        """Retry the failures whose backoff has run out."""
        for uid in self._failures.due():
            for kind, registry in self._repairer.registries():
                resource = registry.get(uid)
                if resource is None:
                    continue
                await self._repairer.repair(kind, resource, jetstream, None)

    async def _refresh_counts(self, jetstream: JetStreamApi) -> None:
        """Refresh the status of streams whose consumers came or went, so a Stream shows its
        consumer count within seconds instead of at the next resync."""
        names, self._recount = self._recount, set()
        as_of = asyncio.get_running_loop().time()
        infos = await recounted_infos(jetstream, names, self._listed)
        await all_of(
            self._repairer.repair(
                STREAM_KIND.resource, resource, jetstream, infos[name], as_of=as_of
            )
            for name in names
            if infos.get(name) is not None
            for resource in self._streams.with_spec("name", name)
        )
        # A stream kopf has not yet written a first status for was skipped: look again soon
        # rather than at the next resync.
        later = {
            name
            for name in names
            if infos.get(name) is not None
            and any(not r.first_handled for r in self._streams.with_spec("name", name))
        }
        if later:
            self._recount |= later
            self._recount_at = asyncio.get_running_loop().time() + RECOUNT_GATHER

    def _look_again(self, stream: str, consumer: str, delay: float = 1.0) -> None:
        key = (stream, consumer)
        attempts = self._second_looks.get(key, 0)
        if attempts >= 10:
            self._second_looks.pop(key, None)
            return
        self._second_looks[key] = attempts + 1

        def again() -> None:
            self._pending_consumers.add(key)
            self._wakeup.set()

        asyncio.get_running_loop().call_later(delay, again)

    async def _repair_pending(self, jetstream: JetStreamApi) -> None:
        streams, self._pending_streams = self._pending_streams, set()
        consumers, self._pending_consumers = self._pending_consumers, set()
        for name in streams:
            for kind, resource in declaring(name, self._backed):
                await self._repairer.repair(kind.resource, resource, jetstream, None)
            # A stream that came back (or went) takes its consumers with it.
            consumers |= {(name, durable) for durable in self._durables_on(name)}
        for stream, durable in consumers:
            for resource in self._consumers.with_spec("durableName", durable):
                if consumer_stream(resource, self._streams) != stream:
                    continue
                if not resource.first_handled and not resource.deleting:
                    # kopf is still writing its first status (e.g. StreamNotFound): look
                    # again shortly rather than wait for the next resync.
                    self._look_again(stream, durable)
                else:
                    self._second_looks.pop((stream, durable), None)
                await self._repairer.repair(CONSUMER, resource, jetstream, None)

    def _durables_on(self, stream: str) -> set[str]:
        return {
            str(resource.spec_text("durableName"))
            for resource in consumers_of(stream, self._consumers, self._streams)
        }

    async def resync(self, jetstream: JetStreamApi) -> None:
        """One paged listing of all streams, and of the consumers the sweep chooses."""
        as_of = asyncio.get_running_loop().time()
        listing = await self._serving_advisories(jetstream.stream_listing(), jetstream)
        self._listed = len(listing.infos)
        infos = listing.seen()
        # Left as they are until a listing sees them: an empty state stands in for theirs.
        # Those seen again are looked at at once, as after an advisory.
        self._pending_streams.update(self._outage.seen_again(listing.unseen))
        await self._outage.show_unseen(listing.unseen)
        await self._serving_advisories(
            all_of(
                self._repairer.repair(
                    kind.resource, resource, jetstream, infos.get(name), as_of=as_of
                )
                for kind, registry in self._backed.items()
                for resource in registry
                if (name := kind.stream_name(resource.spec)) is not None
                and name not in listing.unseen
            ),
            jetstream,
        )
        by_stream: dict[str, list[TrackedResource]] = {}
        for resource in self._consumers:
            if not self._repairer.belongs(resource):
                continue
            stream = consumer_stream(resource, self._streams)
            if stream is not None and stream in listing.unseen:
                continue
            if stream is None or stream not in infos:
                await self._repairer.repair(CONSUMER, resource, jetstream, None)
            else:
                by_stream.setdefault(stream, []).append(resource)
        figures = self._figures
        measured = {
            stream
            for stream, resources in by_stream.items()
            if figures is not None and any(figures.wanted(resource) for resource in resources)
        }
        chosen = list(self._sweep.choose(infos, by_stream, always=measured))
        monitored, monitored_at = await self._monitored(chosen, infos)
        for stream in chosen:
            # The sweep is a request per stream (hundreds at thousands of streams): what the
            # advisories announced meanwhile is repaired first, not after the whole sweep.
            if self._pending_streams or self._pending_consumers:
                await self._repair_pending(jetstream)
            resources = by_stream[stream]
            consumers = monitored.covering(stream, infos[stream]) if monitored else None
            looked_at = monitored_at
            if consumers is None:
                listed = await jetstream.list_consumers(stream)
                consumers, looked_at = {str(info.get("name")): info for info in listed}, None
            self._sweep.looked(stream, consumers)
            for resource in resources:
                known = consumers.get(str(resource.spec_text("durableName")))
                await self._repairer.repair(
                    CONSUMER, resource, jetstream, known, infos[stream], as_of=looked_at
                )
            budget = self._budget
            if budget is not None and any(budget.behind(r.owner.uid) for r in resources):
                self._sweep.behind(stream)
        self._repairer.forget_looks_until(as_of)

    async def _monitored(
        self, streams: list[str], infos: Mapping[str, Mapping[str, Any]]
    ) -> tuple[AccountConsumers | None, float | None]:
        """The chosen streams' consumers from the servers' JetStream monitoring, in one
        request, where this connection has a way to it; with when they were asked for (a look
        at a consumer after that is newer). None: each stream's consumers are listed."""
        if self._monitoring is None or not streams:
            return None, None
        servers = frozenset().union(*(stream_peers(infos[stream]) or () for stream in streams))
        asked_at = asyncio.get_running_loop().time()
        try:
            answer = await self._monitoring(servers)
        except Exception as error:  # the JetStream API still answers: list as before
            if repr(error) != self._monitoring_failure:
                self._monitoring_failure = repr(error)
                logger.warning("consumers listed per stream: JetStream monitoring: %r", error)
            return None, None
        self._monitoring_failure = None
        return answer, asked_at

    async def _serving_advisories(self, work: Awaitable[T], jetstream: JetStreamApi) -> T:
        """Await a long part of a resync (a listing of thousands of streams takes seconds)
        while repairing what advisories announce meanwhile, so a stream deleted during a
        resync comes back in milliseconds, not after it. Safe beside the resync's own
        repairs: both take the resource's lock, and a listing older than a look is not used."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                if self._pending_streams or self._pending_consumers:
                    await self._repair_pending(jetstream)
                    continue
                if task.done():
                    return task.result()
                self._wakeup.clear()  # set again by the next advisory
                woken = asyncio.ensure_future(self._wakeup.wait())
                try:
                    await asyncio.wait({task, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            # What is on its way out (a failed repair, or the work's own failure) is the one to
            # report: the work's ending is only collected, so it is never logged as unretrieved.
            if not task.cancelled():
                task.exception()
