"""Drift repair: advisories for changes within a second, a paged resync for anything missed.

One STREAM.LIST pass (N/256 requests) checks every stream, instead of a timer and an INFO request
per resource. JetStream has no account-wide consumer listing, so consumers are listed per stream,
and only where advisories cannot stand in: for streams whose state moved since the last look (new
messages, a consumer added or removed), for every stream after advisories may have been lost (a
reconnect, a slow-consumer drop), for consumers clients are reading (every consumer resync
interval), and for the idle rest once per idle interval. Status is written only when something a
person would see has changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import API_VERSION, metrics
from ..api.kinds import CONSUMER, ResourceKind
from ..k8s.status import EventSink, ResourceWriter
from ..nats.advisories import subscribe_changes
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..nats.pool import ConnectionPool, ConnectionTarget
from ..reconcile.backed import STREAM_KIND, StreamBackedKind
from ..reconcile.conditions import Outcome
from . import consumer as consumer_handlers
from . import stream as stream_handlers
from .failures import FailureMemory, History
from .own_writes import OwnWrites
from .registry import (
    ConnectionKey,
    ResourceRegistry,
    TrackedResource,
    connection_key,
    consumer_stream,
    consumers_of,
    declaring,
)
from .results import Result, paused, unavailable
from .status_writes import StatusBudget, status_patch

logger = logging.getLogger(__name__)
T = TypeVar("T")

OUTAGE_GRACE = 15.0
"""Seconds NATS may be unreachable before resources show it (at most three resyncs): a blip
writes nothing."""
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
UNSEEN_RESYNCS = 2
"""Listings in a row that could not see a stream's state before its status says so: one such
listing can be a leader answering late."""

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


async def stream_infos(
    jetstream: JetStreamApi, names: Iterable[str], limit: int = PARALLEL_REPAIRS
) -> dict[str, Mapping[str, Any] | None]:
    """Each stream's INFO (None: gone), `limit` requests at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(name: str) -> tuple[str, Mapping[str, Any] | None]:
        async with gate:
            return name, await jetstream.stream_info(name)

    return dict(await asyncio.gather(*(one(name) for name in names)))


def needs_care(resource: TrackedResource) -> bool:
    """Resources kopf is still creating or deleting are left to kopf."""
    return resource.first_handled and not resource.deleting


@dataclass(frozen=True)
class WatchSettings:
    resync_interval: float
    consumer_resync_interval: float = 300.0
    consumer_idle_resync_interval: float = 14400.0
    use_advisories: bool = True
    read_only: bool = False
    pause_annotation: str = ""


def stream_mark(info: Mapping[str, Any]) -> tuple[Any, ...]:
    """What changes in a stream's listing when its consumers may have changed."""
    state = info.get("state") or {}
    return (
        info.get("created"),
        state.get("first_seq"),
        state.get("last_seq"),
        state.get("messages"),
        state.get("consumer_count"),
    )


def consumer_activity(consumer: Mapping[str, Any]) -> tuple[Any, ...]:
    """What moves in a consumer's listing when clients read or acknowledge, even if its stream
    gets no new messages (a backlog being drained)."""
    delivered = consumer.get("delivered") or {}
    ack_floor = consumer.get("ack_floor") or {}
    return (
        delivered.get("stream_seq"),
        ack_floor.get("stream_seq"),
        consumer.get("num_pending"),
        consumer.get("num_ack_pending"),
        consumer.get("num_redelivered"),
    )


def has_work(consumer: Mapping[str, Any]) -> bool:
    return bool(consumer.get("num_pending") or consumer.get("num_ack_pending"))


class _Rotation:
    """A cursor over a changing set of streams that lists `share` of them per pass; fractions
    carry over, so a small set is not listed on every pass."""

    def __init__(self, share: float) -> None:
        self.share = min(1.0, max(0.0, share))
        self._cursor = 0
        self._credit = 0.0

    def take(self, members: list[str]) -> list[str]:
        if not members:
            return []
        self._credit += len(members) * self.share
        count = min(len(members), math.floor(self._credit))
        self._credit -= count
        start = self._cursor % len(members)
        self._cursor = start + count
        return (members + members)[start : start + count]


class ConsumerSweep:
    """Chooses the streams whose consumers a resync lists.

    Advisories and the API audit report every change to a consumer as it happens, so listing is
    needed only where they cannot help: for streams whose state moved (new messages, a consumer
    added or removed: pending figures changed), for every stream after advisories may have been
    lost, for consumers that clients are reading without new messages (a backlog being drained:
    `share`, every consumer resync interval), and, as the guard against an advisory lost without
    a reconnect, for the idle rest at the much smaller `idle_share`. Idle consumers therefore
    cost a listing per stream per idle interval, not per consumer resync interval.
    """

    def __init__(self, share: float, idle_share: float | None = None) -> None:
        self._active_rotation = _Rotation(share)
        self._idle_rotation = _Rotation(share if idle_share is None else idle_share)
        self._marks: dict[str, tuple[Any, ...]] = {}
        self._activity: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._active: set[str] = set()
        self._everything = True

    def everything_next(self) -> None:
        """Advisories may have been lost: list every stream's consumers on the next pass."""
        self._everything = True

    def looked(self, stream: str, consumers: Mapping[str, Mapping[str, Any]]) -> None:
        """Record a listing of the stream's consumers: a stream stays active while a consumer's
        figures move between looks, or when one first seen has work outstanding."""
        before = self._activity.get(stream)
        now = {name: consumer_activity(info) for name, info in consumers.items()}
        moving = any(
            (before is not None and name in before and before[name] != mark)
            or ((before is None or name not in before) and has_work(consumers[name]))
            for name, mark in now.items()
        )
        self._activity[stream] = now
        if moving:
            self._active.add(stream)
        else:
            self._active.discard(stream)

    def behind(self, stream: str) -> None:
        """A consumer's status is behind the figures this look found (its write was held back by
        the status budget): keep the stream active, so it is looked at again until written."""
        self._active.add(stream)

    def choose(self, infos: Mapping[str, Mapping[str, Any]], streams: Iterable[str]) -> set[str]:
        ordered = sorted(set(streams))
        if self._everything:
            self._everything = False
            chosen = set(ordered)
        else:
            # A stream seen for the first time had its consumers made or checked by their
            # handlers just now: it is only marked (and counted active if it holds messages a
            # consumer may be reading). Afterwards, a changed mark means a look.
            chosen = {
                name
                for name in ordered
                if name in self._marks and stream_mark(infos[name]) != self._marks[name]
            }
            for name in ordered:
                if name not in self._marks:
                    self._marks[name] = stream_mark(infos[name])
                    if (infos[name].get("state") or {}).get("messages"):
                        self._active.add(name)
            chosen.update(self._active_rotation.take([n for n in ordered if n in self._active]))
            chosen.update(self._idle_rotation.take([n for n in ordered if n not in self._active]))
        for name in chosen:
            self._marks[name] = stream_mark(infos[name])
        for gone in set(self._marks) - set(ordered):
            del self._marks[gone]
            self._activity.pop(gone, None)
            self._active.discard(gone)
        return chosen


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
    ) -> None:
        """`explained` gives, by a Consumer's uid, why its streamRef finds no Stream, as the
        Consumer's own handler last found out (an API read): a pass here keeps that message
        instead of writing the plain one over it, and asks nothing."""
        self._explained = explained
        self._backed = dict(backed)
        self._by_resource = {kind.resource.kind: kind for kind in self._backed}
        self._streams = self._backed[STREAM_KIND]
        self._consumers = consumers
        self._pool = pool
        self._target = target
        self._writer = writer
        self._events = events
        self._settings = settings
        self._connection = connection
        self._may_act = may_act
        self._failures = failures if failures is not None else FailureMemory()
        self._budget = budget
        self.own_writes = OwnWrites()
        """What handlers on this connection create, so its advisories are not looked into."""
        self._recount: set[str] = set()
        self._recount_at = 0.0
        self._pending_streams: set[str] = set()
        self._pending_consumers: set[tuple[str, str]] = set()
        self._second_looks: dict[tuple[str, str], int] = {}
        self._first_status: dict[str, asyncio.Event] = {}
        self._looked_at: dict[str, float] = {}
        self._unseen: dict[str, int] = {}  # stream: listings in a row without its state
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
        outage_since, outage_shown = 0.0, False
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
                outage_since = outage_since or loop.time()
                grace = min(OUTAGE_GRACE, 3 * interval)
                if not outage_shown and loop.time() - outage_since >= grace:
                    outage_shown = True
                    await self._show_outage(error)
            except Exception:  # the watcher must outlive any single failure
                logger.exception("drift check failed; retrying")
                next_resync = loop.time() + min(interval, 5.0)
            else:
                outage_since, outage_shown = 0.0, False
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

    async def _show_outage(self, error: JetStreamUnavailable) -> None:
        """NATS has not answered for a while: every resource of this connection says so
        (Reconciling, not Stalled), once per outage; the first resync afterwards says Ready."""
        result = unavailable(error)
        for kind, registry in self._registries():
            for resource in registry:
                if needs_care(resource) and self.belongs(resource):
                    await self._write_status(kind, resource, result)

    async def _show_unseen(self, unseen: Mapping[str, str]) -> None:
        """Streams the cluster listed without their state (servers offline, or no answer)
        keep their status; after `UNSEEN_RESYNCS` listings in a row their resources and their
        consumers say so (Reconciling, not Stalled). Once seen again, they are looked at at
        once, as after an advisory."""
        for name in [name for name in self._unseen if name not in unseen]:
            if self._unseen.pop(name) >= UNSEEN_RESYNCS:
                self._pending_streams.add(name)
        for name, reason in unseen.items():
            self._unseen[name] = self._unseen.get(name, 0) + 1
            if self._unseen[name] != UNSEEN_RESYNCS:
                continue
            logger.info("stream %s unseen in %d listings: %s", name, UNSEEN_RESYNCS, reason)
            why = reason or "its servers are offline or did not answer in time"
            message = (
                f"NATS could not report stream {name}: {why}. Status shows what it last "
                "reported; it is looked at again at every resync."
            )
            result = Result(Outcome(False, "StreamOffline", message), retry=True)
            holders = [
                (kind.resource, resource) for kind, resource in declaring(name, self._backed)
            ]
            users = consumers_of(name, self._consumers, self._streams)
            for kind, resource in [*holders, *((CONSUMER, user) for user in users)]:
                if needs_care(resource) and self.belongs(resource):
                    await self._write_status(kind, resource, result)

    async def _write_status(
        self, kind: ResourceKind, resource: TrackedResource, result: Result
    ) -> None:
        """A status that shows a condition of the connection or the server, not of a pass."""
        patch = status_patch(resource, result)
        if patch is None:
            return
        try:
            written = await self._writer.patch_status(
                kind.plural, resource.owner.namespace, resource.owner.name, patch
            )
        except Exception:
            logger.exception("could not write the status of %s", resource.owner.describe())
            return
        if written:
            resource.body = {**resource.body, "status": {**resource.status, **patch}}

    def _registries(self) -> list[tuple[ResourceKind, ResourceRegistry]]:
        kinds = [(kind.resource, registry) for kind, registry in self._backed.items()]
        return [*kinds, (CONSUMER, self._consumers)]

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
        self._looked_at[uid] = asyncio.get_running_loop().time()

    def observed(self, resource: TrackedResource) -> None:
        """The watch delivered a resource: wake whoever waits for its first status."""
        if resource.first_handled:
            waiting = self._first_status.pop(resource.owner.uid, None)
            if waiting is not None:
                waiting.set()

    async def _first_status_of(self, resource: TrackedResource, timeout: float) -> None:
        """Wait until kopf's first status of the resource is in the registry: a count written
        before it would be overwritten by the handler's older figure."""
        if resource.first_handled:
            return
        waiting = self._first_status.setdefault(resource.owner.uid, asyncio.Event())
        try:
            await asyncio.wait_for(waiting.wait(), timeout)
        except TimeoutError:
            self._first_status.pop(resource.owner.uid, None)  # e.g. a stream that never came
            logger.info(
                "no first status of %s after %.0f s; its consumer count follows later",
                resource.owner.describe(),
                timeout,
            )

    async def recount_now(
        self, stream: str, jetstream: JetStreamApi, timeout: float = FIRST_STATUS_WAIT
    ) -> None:
        """Show a consumer just made on its stream's count before the consumer reports Ready,
        so status is complete when the last resource turns Ready. The write is the one the
        advisory's recount would make a moment later; that recount then finds nothing to do."""
        resources = [r for r in self._streams.with_spec("name", stream) if self.belongs(r)]
        if not resources:
            return
        for resource in resources:
            await self._first_status_of(resource, timeout)
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
            await self._repair(STREAM_KIND.resource, resource, jetstream, info, as_of=as_of)

    async def _retry_due(self, jetstream: JetStreamApi) -> None:
        """Retry the failures whose backoff has run out."""
        for uid in self._failures.due():
            for kind, registry in self._registries():
                resource = registry.get(uid)
                if resource is None:
                    continue
                await self._repair(kind, resource, jetstream, None)

    async def _refresh_counts(self, jetstream: JetStreamApi) -> None:
        """Refresh the status of streams whose consumers came or went, so a Stream shows its
        consumer count within seconds instead of at the next resync. Up to a quarter of the
        account's streams cost an INFO each; more cost one listing of them all."""
        names, self._recount = self._recount, set()
        as_of = asyncio.get_running_loop().time()
        infos: Mapping[str, Mapping[str, Any] | None]
        if len(names) <= max(RECOUNT_BY_INFO, self._listed / RECOUNT_LISTING_SHARE):
            infos = await stream_infos(jetstream, names)
        else:
            infos = (await jetstream.stream_listing()).seen()  # the unseen wait for a resync
        await all_of(
            self._repair(STREAM_KIND.resource, resource, jetstream, infos[name], as_of=as_of)
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
                await self._repair(kind.resource, resource, jetstream, None)
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
                await self._repair(CONSUMER, resource, jetstream, None)

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
        await self._show_unseen(listing.unseen)
        await self._serving_advisories(
            all_of(
                self._repair(kind.resource, resource, jetstream, infos.get(name), as_of=as_of)
                for kind, registry in self._backed.items()
                for resource in registry
                if (name := kind.stream_name(resource.spec)) is not None
                and name not in listing.unseen
            ),
            jetstream,
        )
        by_stream: dict[str, list[TrackedResource]] = {}
        for resource in self._consumers:
            if not self.belongs(resource):
                continue
            stream = consumer_stream(resource, self._streams)
            if stream is not None and stream in listing.unseen:
                continue
            if stream is None or stream not in infos:
                await self._repair(CONSUMER, resource, jetstream, None)
            else:
                by_stream.setdefault(stream, []).append(resource)
        for stream in self._sweep.choose(infos, by_stream):
            # The sweep is a request per stream (hundreds at thousands of streams): what the
            # advisories announced meanwhile is repaired first, not after the whole sweep.
            if self._pending_streams or self._pending_consumers:
                await self._repair_pending(jetstream)
            resources = by_stream[stream]
            consumers = {
                str(info.get("name")): info for info in await jetstream.list_consumers(stream)
            }
            self._sweep.looked(stream, consumers)
            for resource in resources:
                known = consumers.get(str(resource.spec_text("durableName")))
                await self._repair(CONSUMER, resource, jetstream, known, infos[stream])
            budget = self._budget
            if budget is not None and any(budget.behind(r.owner.uid) for r in resources):
                self._sweep.behind(stream)
        # Later listings are newer than every look recorded before this one.
        self._looked_at = {uid: at for uid, at in self._looked_at.items() if at > as_of}

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

    def belongs(self, resource: TrackedResource) -> bool:
        """Whether the resource uses this watcher's connection."""
        return connection_key(resource) == self._connection

    async def _reconcile(
        self,
        kind: ResourceKind,
        resource: TrackedResource,
        jetstream: JetStreamApi,
        known: Mapping[str, Any] | None,
        known_stream: Mapping[str, Any] | None = None,
    ) -> Result:
        read_only = self._settings.read_only
        history = History(resource.generation, resource.status, self._failures)
        backed = self._by_resource.get(kind.kind)
        if backed is not None:
            return await stream_handlers.reconcile(
                backed,
                resource.spec,
                resource.owner,
                jetstream,
                drift=True,
                known_info=known,
                read_only=read_only,
                history=history,
            )
        explanation = self._explained(resource.owner.uid) if self._explained else None

        async def unresolved_ref(_: str) -> str | None:
            return explanation

        return await consumer_handlers.reconcile(
            resource.spec,
            resource.owner,
            jetstream,
            stream_name=consumer_stream(resource, self._streams),
            drift=True,
            known_info=known,
            known_stream_info=known_stream,
            read_only=read_only,
            history=history,
            unresolved_ref=unresolved_ref if explanation else None,
        )

    async def _repair(
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
        started = time.perf_counter()
        async with resource.lock:
            uid = resource.owner.uid
            looked = asyncio.get_running_loop().time() if known is None else as_of
            if looked is not None:
                if looked < self._looked_at.get(uid, -math.inf):
                    return  # a newer look already wrote what this one knows
                self._looked_at[uid] = looked
            annotation = self._settings.pause_annotation
            if annotation and resource.annotation(annotation).lower() == "true":
                result = paused(annotation)
            else:
                result = await self._reconcile(kind, resource, jetstream, known, known_stream)
            metrics.observe(
                kind.kind,
                result.outcome.reason,
                (event.reason for event in result.events),
                time.perf_counter() - started,
            )
            patch = status_patch(resource, result, self._budget)
            if patch is not None:
                written = await self._writer.patch_status(
                    kind.plural, resource.owner.namespace, resource.owner.name, patch
                )
                if written:
                    resource.body = {**resource.body, "status": {**resource.status, **patch}}
            reference = {
                "apiVersion": API_VERSION,
                "kind": kind.kind,
                "metadata": {
                    "namespace": resource.owner.namespace,
                    "name": resource.owner.name,
                    "uid": resource.owner.uid,
                },
            }
            for event in result.events:
                self._events.post(reference, event.type, event.reason, event.message)
