"""One limit on the operator's Kubernetes requests, kopf's and its own, as an aiohttp
middleware: requests step back while the API server is slow (AdaptiveLimit) or people create
or delete resources in a burst (Burst, DeletionRequests), and Events give way to status
(WritesLull). It also taps the operator's watches for new resources."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import suppress
from typing import Any, Generic, TypeVar

import aiohttp
from aiohttp.client_middlewares import ClientHandlerType
from prometheus_client import Counter as PromCounter

from .. import GROUP
from ..metrics import (
    CREATIONS_SEEN,
    KUBE_REQUEST_LIMIT,
    KUBE_REQUESTS_WAITING,
    WRITES_YIELDED,
    YIELDED_SECONDS,
)
from .selection import group_collection

ADAPTIVE_LEAST = 8
"""The fewest requests the adaptive limit keeps in flight. Since writes wait out bursts of
creations (Burst), what is left after one is the operator's own backlog of status writes and
Events, and its own writes are what slows the API server then: with a floor of one the limit
sank to a few requests and 5,000 new streams and consumers took 107 s instead of 83-87 s, and
the user's applies were no faster for it (bench/results/diary-2026-11.md)."""


class AdaptiveLimit:
    """How many requests may be in flight, from how long the API server takes to answer.

    An API server short of CPU answers everyone more slowly, the user's `kubectl apply` too;
    fewer of our requests in flight then leave it more of its time. The limit grows by one for
    every `limit` answers that came within `tolerance` times the fastest recent answer of their
    kind, and falls by a quarter (once per `limit` answers) when one took longer. The fastest
    answer is forgotten slowly (it doubles in `memory` seconds without a faster one), so a
    server that is simply slower settles at a new normal.
    """

    def __init__(
        self, most: int, least: int = 1, tolerance: float = 3.0, memory: float = 30.0
    ) -> None:
        self.most, self.least = most, least
        self.tolerance = tolerance
        self.decay = 2.0 ** (1.0 / memory)
        self.limit = float(most)
        self._fastest: dict[str, tuple[float, float]] = {}
        self._answers_since_change = 0

    def baseline(self, kind: str, now: float) -> float | None:
        if kind not in self._fastest:
            return None
        fastest, at = self._fastest[kind]
        return fastest * math.pow(self.decay, now - at)

    def answered(self, kind: str, seconds: float, now: float) -> None:
        baseline = self.baseline(kind, now)
        if baseline is None or seconds < baseline:
            self._fastest[kind] = (seconds, now)
            baseline = seconds
        self._answers_since_change += 1
        if seconds > self.tolerance * baseline:
            if self._answers_since_change >= self.limit:
                self.limit = max(float(self.least), self.limit * 0.75)
                self._answers_since_change = 0
        elif self._answers_since_change >= self.limit:
            self.limit = min(float(self.most), self.limit + 1)
            self._answers_since_change = 0


class _Arrivals:
    """One namespace's recent arrivals, for Burst."""

    __slots__ = ("arrivals", "began", "in_window", "last")

    def __init__(self) -> None:
        self.arrivals: deque[tuple[float, int]] = deque()
        self.in_window = 0
        self.last = -math.inf
        self.began: float | None = None

    def forget_before(self, moment: float) -> None:
        while self.arrivals and self.arrivals[0][0] < moment:
            self.in_window -= self.arrivals.popleft()[1]


class Burst:
    """Whether people are creating (or deleting) resources of the operator's kinds in a burst
    right now, in a namespace.

    A `kubectl apply` or an Argo CD sync of hundreds of resources competes with the operator's
    own writes for the API server's CPU; each write the operator makes during the burst slows
    the apply down, and the apply's last resource is what the person waits for. A `kubectl
    delete -f` of as many does the same, and each of its deletions brings the operator's
    finalizer removal and Event. While the operator's watches bring at least `threshold` of
    them within `window` seconds, and the last came within `quiet` seconds, its writes in that
    namespace wait, for at most `most_hold` seconds from the start of the burst: a burst that
    never ends delays the operator once, then no more. Reads and the work in NATS go on
    meanwhile. Bursts are kept per namespace, so one team's apply never holds another team's
    writes (docs/tenancy.md). `seen_total` counts what was seen, for the metrics.
    """

    def __init__(
        self,
        most_hold: float,
        threshold: int = 32,
        window: float = 1.0,
        quiet: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        seen_total: PromCounter = CREATIONS_SEEN,
    ) -> None:
        self.most_hold, self.threshold = most_hold, threshold
        self.window, self.quiet = window, quiet
        self.clock = clock
        self.seen_total = seen_total
        self._namespaces: dict[str, _Arrivals] = {}

    def seen(self, count: int, namespace: str = "") -> None:
        if count <= 0:
            return
        self.seen_total.inc(count)
        now = self.clock()
        arrivals = self._namespaces.get(namespace)
        if arrivals is None:
            self._forget_quiet(now)
            arrivals = self._namespaces[namespace] = _Arrivals()
        if now - arrivals.last >= self.quiet:
            arrivals.began = None  # a new burst, whether or not anyone asked in between
        arrivals.arrivals.append((now, count))
        arrivals.in_window += count
        arrivals.last = now
        arrivals.forget_before(now - self.window)

    def _forget_quiet(self, now: float) -> None:
        """Namespaces without an arrival for a while: nothing of theirs is held."""
        stale = now - max(self.window, self.quiet) - self.most_hold
        for namespace in [key for key, each in self._namespaces.items() if each.last < stale]:
            del self._namespaces[namespace]

    def holding(self, namespace: str = "") -> bool:
        arrivals = self._namespaces.get(namespace)
        if arrivals is None:
            return False
        now = self.clock()
        arrivals.forget_before(now - self.window)
        if now - arrivals.last >= self.quiet or arrivals.in_window < self.threshold:
            arrivals.began = None
            return False
        if arrivals.began is None:
            arrivals.began = now
        return now - arrivals.began < self.most_hold

    def _until_it_may_end(self, namespace: str) -> float:
        """Seconds until the burst's quiet or its hold runs out, if nothing else arrives."""
        arrivals = self._namespaces.get(namespace)
        if arrivals is None:
            return 0.01
        ends = arrivals.last + self.quiet
        if arrivals.began is not None:
            ends = min(ends, arrivals.began + self.most_hold)
        return max(0.01, ends - self.clock())

    async def wait(self, namespace: str = "") -> float:
        """Until the namespace's burst is over or has been held for `most_hold`; the seconds
        waited."""
        if not self.holding(namespace):
            return 0.0
        started = self.clock()
        WRITES_YIELDED.inc()
        try:
            while self.holding(namespace):
                await asyncio.sleep(self._until_it_may_end(namespace))
        finally:
            YIELDED_SECONDS.inc(self.clock() - started)
        return self.clock() - started


class WritesLull:
    """A pause in the operator's writes of its own resources, which its Events wait for
    (EventPoster, k8s/status.py); RequestLimit tells it of every such write.

    An Event is an API write like the status it tells of: 2,000 new resources posting theirs
    as they came were Ready about 15% later than without them (bench/results/diary-2026-11.md,
    2026-11-27 18:07).
    Status is what people and tools wait on. So an Event waits until none of those writes has
    been in flight (waiting for a place included) for `quiet` seconds, for at most `most_wait`
    seconds from when it happened: under writes that never pause, Events come that much late,
    and none is lost. One change at a time leaves pauses enough for its Event to go at once.
    """

    def __init__(self, most_wait: float, quiet: float = 0.1) -> None:
        self.most_wait, self.quiet = most_wait, quiet
        self._in_flight = 0
        self._paused = asyncio.Event()
        self._paused.set()
        self._settling: asyncio.TimerHandle | None = None

    def began(self) -> None:
        self._in_flight += 1
        self._paused.clear()
        if self._settling is not None:
            self._settling.cancel()
            self._settling = None

    def ended(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._settling = asyncio.get_running_loop().call_later(self.quiet, self._settle)

    def _settle(self) -> None:
        self._settling = None
        if self._in_flight == 0:
            self._paused.set()

    async def wait(self, most: float) -> bool:
        """Until the writes pause, or for `most` seconds; whether it waited at all."""
        if self._paused.is_set() or most <= 0:
            return False
        with suppress(TimeoutError):  # then late rather than never
            await asyncio.wait_for(self._paused.wait(), most)
        return True


ADDED = b'{"type":"ADDED"'
"""How kube-apiserver starts a watch event for a new object (JSON, no spaces)."""
MODIFIED = b'{"type":"MODIFIED"'
DELETED = b'{"type":"DELETED"'
DELETING = b'"deletionTimestamp"'
"""In an object's event once someone asked for its deletion (a finalizer keeps it a while)."""


Seen = Callable[[str, list[bytes], list[bytes]], None]
"""Told the resource (plural) of a watch and the events (JSON lines) it brought: the new
objects', and those of objects being deleted or gone."""


class _WatchTap:
    """A watch response's body that reports the creations and deletions passing through it, as
    they arrive, before kopf queues them for a worker (which, under a worker limit, can be
    seconds later). kopf reads a watch with `iter_chunked` only; everything else is the
    original stream's. kube-apiserver sends one event per line."""

    def __init__(self, content: aiohttp.StreamReader, plural: str, seen: Seen) -> None:
        self._content = content
        self._plural = plural
        self._seen = seen
        self._partial = b""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._content, name)

    def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        return self._tapped(size)

    async def _tapped(self, size: int) -> AsyncIterator[bytes]:
        async for data in self._content.iter_chunked(size):
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            added = [line for line in lines if line.startswith(ADDED)]
            deleting = [
                line
                for line in lines
                if (line.startswith(MODIFIED) or line.startswith(DELETED)) and DELETING in line
            ]
            if added or deleting:
                self._seen(self._plural, added, deleting)
            yield data


class DeletionRequests:
    """Which watch events are people's deletion requests, for a Burst of them.

    The first event of an object with a deletionTimestamp is the DELETE that set it. Later ones
    are writes to an object already being deleted, the operator's own among them (a status
    while its deletion waits, a finalizer's removal beside another's): counting those would
    make the operator yield to itself. Objects are known by uid until their DELETED event, or
    for `remember` seconds.
    """

    def __init__(
        self, burst: Burst, remember: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst = burst
        self.remember = remember
        self.clock = clock
        self._deleting: dict[str, float] = {}  # uid: when first seen deleting, in time order

    def seen(self, events: list[bytes]) -> None:
        now, requested = self.clock(), Counter[str]()
        while self._deleting:
            oldest, when = next(iter(self._deleting.items()))
            if now - when <= self.remember:
                break
            del self._deleting[oldest]
        for event in events:
            uid = _uid(event)
            if uid is None:
                continue
            if event.startswith(DELETED):
                self._deleting.pop(uid, None)
            elif uid not in self._deleting:
                self._deleting[uid] = now
                requested[event_namespace(event)] += 1
        for namespace, count in requested.items():
            self.burst.seen(count, namespace)


def _uid(event: bytes) -> str | None:
    try:
        uid = json.loads(event)["object"]["metadata"]["uid"]
    except (ValueError, KeyError, TypeError):
        return None
    return uid if isinstance(uid, str) else None


_EVENT_NAMESPACE = re.compile(rb'"namespace":"([^"]*)"')
_PATH_NAMESPACE = re.compile(r"/namespaces/([^/]+)")


def event_namespace(event: bytes) -> str:
    """The namespace of a watch event's object: the first `namespace` of its line is its
    metadata's (kube-apiserver writes apiVersion, kind, then metadata)."""
    found = _EVENT_NAMESPACE.search(event)
    return found.group(1).decode() if found else ""


def request_namespace(request: aiohttp.ClientRequest) -> str:
    found = _PATH_NAMESPACE.search(request.url.path)
    return found.group(1) if found else ""


def is_watch(request: aiohttp.ClientRequest) -> bool:
    return request.url.query.get("watch") in ("true", "1")


def is_event(request: aiohttp.ClientRequest) -> bool:
    return request.method not in ("GET", "HEAD") and request.url.path.endswith("/events")


def yields(request: aiohttp.ClientRequest) -> bool:
    """Whether a request waits out a burst of creations or deletions: writes of our resources
    and their Events. kopf's peering keepalives must not (a standby would take over while the
    active replica waits), nor a Secret's finalizer, nor any read."""
    if request.method in ("GET", "HEAD"):
        return False
    path = request.url.path
    return path.startswith(f"/apis/{GROUP}/") or is_event(request)


Waiting = TypeVar("Waiting")


class NamespaceTurns(Generic[Waiting]):
    """What waits for a place (requests, kopf's workers), by namespace: `pop` takes the oldest
    of the namespace whose turn it is, then moves that namespace to the back of the line, so a
    namespace with thousands waiting takes one turn as one with a single item does."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Waiting]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, namespace: str, turn: Waiting) -> None:
        self._queues.setdefault(namespace, deque()).append(turn)
        self._size += 1

    def remove(self, namespace: str, turn: Waiting) -> None:
        queue = self._queues.get(namespace)
        if queue is not None and turn in queue:
            queue.remove(turn)
            self._size -= 1
            if not queue:
                del self._queues[namespace]

    def pop(self) -> Waiting:
        namespace, queue = next(iter(self._queues.items()))
        turn = queue.popleft()
        self._size -= 1
        del self._queues[namespace]
        if queue:
            self._queues[namespace] = queue  # to the back of the line
        return turn


class RequestLimit:
    """At most `limit` Kubernetes API requests in flight at once, watches aside (a watch holds
    its request open for minutes and must never wait behind the others); 0 for no limit. With
    `adaptive`, fewer while the API server answers slowly (AdaptiveLimit); with `burst`, writes
    wait while people create resources of our kinds in a burst, with `deletions` while they
    delete them in one (Burst); with `lull`, our writes of our resources are told to it, for
    Events to wait for a pause in them (WritesLull), and Events get a place under the limit
    after any other request; `added` is told of each new resource of our group as its watch
    brings it. An aiohttp middleware, shared by kopf's session and the operator's own.

    kopf's own session has no limit: a burst of new resources becomes hundreds of concurrent
    patches, and the API server serves them before the user's own applies."""

    def __init__(
        self,
        limit: int,
        adaptive: bool = False,
        burst: Burst | None = None,
        added: Callable[[str, Mapping[str, Any]], None] | None = None,
        deletions: DeletionRequests | None = None,
        lull: WritesLull | None = None,
    ) -> None:
        self._capacity = (
            AdaptiveLimit(limit, least=min(ADAPTIVE_LEAST, limit)) if adaptive and limit else None
        )
        self._most = limit
        self._burst = burst
        self._added = added
        self._deletions = deletions
        held_by = (burst, deletions.burst if deletions is not None else None)
        self._bursts = [each for each in held_by if each is not None]
        self._lull = lull
        self._in_flight = 0
        self._waiting: NamespaceTurns[asyncio.Future[None]] = NamespaceTurns()
        self._waiting_events: NamespaceTurns[asyncio.Future[None]] = NamespaceTurns()
        KUBE_REQUEST_LIMIT.set(limit)

    @property
    def lull(self) -> WritesLull | None:
        return self._lull

    @property
    def limit(self) -> int:
        return int(self._capacity.limit) if self._capacity else self._most

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if is_watch(request):
            response = await handler(request)
            plural = group_collection(request)
            if plural is not None and (self._bursts or self._added is not None):
                response.content = _WatchTap(  # type: ignore[assignment]
                    response.content, plural, self._seen
                )
            return response
        lull, event = self._lull, is_event(request)
        writing = lull if lull is not None and not event and yields(request) else None
        if writing is not None:
            writing.began()  # before a burst's wait: held writes are writes to come
        try:
            namespace = request_namespace(request)
            if self._bursts and yields(request):
                for burst in self._bursts:
                    await burst.wait(namespace)
            later = event and lull is not None
            return await self._limited(request, handler, later=later, namespace=namespace)
        finally:
            if writing is not None:
                writing.ended()

    async def _limited(
        self,
        request: aiohttp.ClientRequest,
        handler: ClientHandlerType,
        later: bool,
        namespace: str = "",
    ) -> aiohttp.ClientResponse:
        if not self._most:
            return await handler(request)
        await self._enter(later, namespace)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await handler(request)
        finally:
            if self._capacity is not None:
                status = request.url.path.endswith("/status")
                kind = f"{request.method} status" if status else request.method
                before = self.limit
                self._capacity.answered(kind, loop.time() - started, loop.time())
                if self.limit != before:
                    KUBE_REQUEST_LIMIT.set(self.limit)
            self._in_flight -= 1
            self._admit()

    def _seen(self, plural: str, added: list[bytes], deleting: list[bytes]) -> None:
        if self._deletions is not None and deleting:
            self._deletions.seen(deleting)
        if self._burst is not None:
            for namespace, count in Counter(map(event_namespace, added)).items():
                self._burst.seen(count, namespace)
        if self._added is not None:
            for event in added:
                try:
                    body = json.loads(event).get("object")
                except ValueError:
                    continue  # kopf reports what it cannot read
                if isinstance(body, dict):
                    self._added(plural, body)

    async def after_creations(self, namespace: str = "") -> float:
        """Wait out a burst of creations in the namespace as a write would; the seconds
        waited. For a handler whose next write reports on things the burst is still bringing
        (a new stream's first status counts the consumers applied after it)."""
        return await self._burst.wait(namespace) if self._burst is not None else 0.0

    async def _enter(self, later: bool = False, namespace: str = "") -> None:
        """A place under the limit; `later` ones only once no other request waits. Waiting
        requests are served a namespace at a time in turn, so one namespace's burst of writes
        does not queue another namespace's behind all of it."""
        if self._in_flight < self.limit and not self._waiting and not self._waiting_events:
            self._in_flight += 1
            return
        queue = self._waiting_events if later else self._waiting
        turn = asyncio.get_running_loop().create_future()
        queue.append(namespace, turn)
        self._count_waiting()
        try:
            await turn  # _admit counts us in before it wakes us
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._in_flight -= 1
                self._admit()
            else:
                queue.remove(namespace, turn)
                self._count_waiting()
            raise

    def _admit(self) -> None:
        """Wakes waiters while there is room, namespaces in turn and each in arrival order,
        Events last: one wake-up per place, not one for every waiter on every answer (a burst
        queues thousands)."""
        for queue in (self._waiting, self._waiting_events):
            while queue and self._in_flight < self.limit:
                turn = queue.pop()
                if not turn.done():
                    self._in_flight += 1
                    turn.set_result(None)
        self._count_waiting()

    def _count_waiting(self) -> None:
        KUBE_REQUESTS_WAITING.set(len(self._waiting) + len(self._waiting_events))
