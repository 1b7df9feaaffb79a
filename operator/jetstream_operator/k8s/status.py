"""Status patches and Events written outside kopf's handler cycle (drift repair, live state,
and the Events of handled resources, posted after their status)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any, Protocol

import aiohttp

from .. import GROUP, VERSION
from ..metrics import EVENTS_DEFERRED, EVENTS_DEFERRED_SECONDS, EVENTS_FAILED
from .client import MERGE_PATCH, ApiError, KubeApi
from .throttle import WritesLull

logger = logging.getLogger(__name__)

COMPONENT = "jetstream-operator"


class ResourceWriter:
    """Writes a custom resource's status subresource and posts Events about it."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch the status; False when the resource is gone."""
        try:
            await self._api.request(
                "PATCH",
                f"{_objects(plural, namespace)}/{name}/status",
                {"status": status},
                content_type=MERGE_PATCH,
            )
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def list_objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """Our custom resources of one kind in a namespace, read from the API server itself
        (the watch-fed registries may still be filling after a restart)."""
        answer = await self._api.request("GET", _objects(plural, namespace))
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    async def read_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One of our custom resources as the API server has it; None when there is none."""
        try:
            body: dict[str, Any] = await self._api.request(
                "GET", f"{_objects(plural, namespace)}/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return body

    async def post_event(
        self,
        reference: Mapping[str, Any],
        event_type: str,
        reason: str,
        message: str,
        at: datetime | None = None,
    ) -> None:
        """A core/v1 Event on the resource, of what happened `at` (now by default). Raises
        what the request raised: the EventPoster tells a retry from a drop."""
        now = (at or datetime.now(UTC)).isoformat()  # as the `kubernetes` client serialized it
        metadata = reference["metadata"]
        # A cluster-scoped object's Events go to `default`, as kubectl describe looks there.
        where = metadata["namespace"] or CLUSTER_EVENTS_NAMESPACE
        body = {
            "metadata": {
                "generateName": f"{metadata['name']}.",
                "namespace": where,
            },
            "involvedObject": {
                "apiVersion": reference["apiVersion"],
                "kind": reference["kind"],
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata["uid"],
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
        }
        await self._api.request("POST", f"/api/v1/namespaces/{where}/events", body)


CLUSTER_EVENTS_NAMESPACE = "default"

EVENTS_AT_ONCE = 8
"""Events in flight at once: a backlog of thousands goes in seconds, and leaves places under
the request limit for status writes."""

EVENT_ATTEMPTS = 5
"""Tries of an Event whose posting failed for a reason that may pass (the API server busy,
overloaded or unreachable); then it is dropped, and counted."""

EVENT_RETRY_SECONDS = (1.0, 30.0)
"""The first and the longest wait before an Event is tried again, doubled in between and
jittered into [half, full], so Events that failed together are not retried together."""


def may_pass(error: BaseException) -> bool:
    """Whether a failed request is worth trying again: the API server was unreachable, timed
    out, throttled or failed itself. A refusal (a namespace being deleted, an invalid Event)
    would be refused again."""
    if isinstance(error, ApiError):
        return error.status in (408, 429) or error.status >= 500
    return isinstance(error, aiohttp.ClientError | TimeoutError | OSError)


class EventSink(Protocol):
    """Where handlers and drift repair leave their Events."""

    def post(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Queue an Event on the resource `body` (its apiVersion, kind and metadata)."""


@dataclass(slots=True)
class _Queued:
    reference: Mapping[str, Any]
    event_type: str
    reason: str
    message: str
    at: datetime
    queued: float
    number: int
    attempts: int = 0


class EventPoster:
    """The Events of handled resources, posted in the background after the status they tell
    of: each waits for a pause in the operator's writes of its resources (WritesLull), for at
    most the lull's `most_wait` from when it happened, and carries that time. A queued Event
    is a few small strings, where a request held back costs kilobytes.

    `normal` False keeps only Warnings (the `events: warnings` setting), for handlers and
    drift repair alike. An Event whose posting failed for a reason that may pass is tried
    again with jittered backoff, EVENT_ATTEMPTS times in all: a Warning is often the only
    word a person gets of a failure, and an API server in trouble is when failures happen."""

    def __init__(
        self,
        writer: ResourceWriter,
        lull: WritesLull | None,
        at_once: int = EVENTS_AT_ONCE,
        *,
        normal: bool = True,
        jitter: Callable[[], float] = random.random,
        retry_seconds: tuple[float, float] = EVENT_RETRY_SECONDS,
    ) -> None:
        self._writer = writer
        self._lull = lull
        self._at_once = at_once
        self._normal = normal
        self._jitter = jitter
        self._retry_seconds = retry_seconds
        self._queue: deque[_Queued] = deque()
        self._retries: list[tuple[float, int, _Queued]] = []  # a heap by when each is due
        self._due: deque[_Queued] = deque()  # retries whose wait is over, until tried
        self._numbered = 0
        self._deferred_through = 0  # the Events up to this number waited for a lull
        self._queued = asyncio.Event()
        self._drain: asyncio.Task[None] | None = None

    def post(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        if event_type == "Normal" and not self._normal:
            return
        metadata = body.get("metadata") or {}
        reference = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "metadata": {key: metadata.get(key) for key in ("name", "namespace", "uid")},
        }
        self._numbered += 1
        self._queue.append(
            _Queued(
                reference,
                event_type,
                reason,
                message,
                datetime.now(UTC),
                time.monotonic(),
                self._numbered,
            )
        )
        self._queued.set()
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._posting(), name="event-poster")

    @property
    def waiting(self) -> int:
        """Events queued or waiting for a retry."""
        return len(self._queue) + len(self._retries) + len(self._due)

    async def _posting(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            await self._retry_due()
            while self._queue:
                if self._lull is not None:
                    since = time.monotonic() - self._queue[0].queued
                    if await self._lull.wait(self._lull.most_wait - since):
                        self._count_deferred()
                await self._send_batch(self._queue)

    async def _retry_due(self) -> None:
        """Send the retries whose wait is over; they waited for a lull the first time. Kept
        on the poster until tried, so a shutdown midway posts them at `close`."""
        now = time.monotonic()
        while self._retries and self._retries[0][0] <= now:
            self._due.append(heapq.heappop(self._retries)[2])
        while self._due:
            await self._send_batch(self._due)

    def _count_deferred(self) -> None:
        """Every Event queued now waited for that lull; each is counted once."""
        first, last = self._queue[0].number, self._queue[-1].number
        EVENTS_DEFERRED.inc(last - max(self._deferred_through, first - 1))
        self._deferred_through = last

    async def _send_batch(self, queue: deque[_Queued], retry: bool = True) -> None:
        """The oldest few, taken off `queue` once tried: a shutdown that cancels them midway
        posts them again rather than not at all."""
        batch = list(islice(queue, self._at_once))
        outcomes = await asyncio.gather(
            *(
                self._writer.post_event(
                    each.reference, each.event_type, each.reason, each.message, each.at
                )
                for each in batch
            ),
            return_exceptions=True,
        )
        now = time.monotonic()
        for event, outcome in zip(batch, outcomes, strict=True):
            queue.popleft()
            if event.attempts == 0 and event.number <= self._deferred_through:
                EVENTS_DEFERRED_SECONDS.inc(now - event.queued)
            event.attempts += 1
            if not isinstance(outcome, Exception):
                continue
            name = event.reference["metadata"]["name"]
            if retry and may_pass(outcome) and event.attempts < EVENT_ATTEMPTS:
                wait = self._retry_wait(event.attempts)
                logger.info(
                    "event %s on %s: %r; trying again in %.1f s", event.reason, name, outcome, wait
                )
                heapq.heappush(self._retries, (now + wait, event.number, event))
                asyncio.get_running_loop().call_later(wait, self._queued.set)
                EVENTS_FAILED.labels(outcome="retried").inc()
                continue
            logger.warning("could not post event %s on %s: %r", event.reason, name, outcome)
            EVENTS_FAILED.labels(outcome="dropped").inc()

    def _retry_wait(self, attempts: int) -> float:
        first, longest = self._retry_seconds
        full = min(longest, first * 2.0 ** (attempts - 1))
        return full * (0.5 + 0.5 * self._jitter())

    async def close(self, within: float = 5.0) -> None:
        """Post what is queued or waiting for a retry, without waiting for a lull or the
        retry's time, once each, for at most `within` seconds."""
        if self._drain is not None:
            self._drain.cancel()
            with suppress(asyncio.CancelledError):
                await self._drain
        self._queue.extend(self._due)
        self._queue.extend(event for _, _, event in sorted(self._retries))
        self._due.clear()
        self._retries.clear()

        async def send_all() -> None:
            while self._queue:
                await self._send_batch(self._queue, retry=False)

        try:
            await asyncio.wait_for(send_all(), within)
        except TimeoutError:
            logger.warning("%d events not posted at shutdown", len(self._queue))


def _objects(plural: str, namespace: str) -> str:
    """The collection's path; namespace "" for a cluster-scoped kind."""
    if not namespace:
        return f"/apis/{GROUP}/{VERSION}/{plural}"
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
