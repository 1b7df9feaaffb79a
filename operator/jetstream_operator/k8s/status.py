"""Status patches and Events written outside kopf's handler cycle (drift repair, live state,
and the Events of handled resources, posted after their status)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from .. import GROUP, VERSION
from ..metrics import EVENTS_DEFERRED, EVENTS_DEFERRED_SECONDS
from .client import MERGE_PATCH, ApiError, KubeApi
from .login import WritesLull

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
        """A core/v1 Event on the resource, of what happened `at` (now by default); failures are
        logged, never raised."""
        now = (at or datetime.now(UTC)).isoformat()  # as the `kubernetes` client serialized it
        metadata = reference["metadata"]
        body = {
            "metadata": {
                "generateName": f"{metadata['name']}.",
                "namespace": metadata["namespace"],
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
        try:
            await self._api.request(
                "POST", f"/api/v1/namespaces/{metadata['namespace']}/events", body
            )
        except ApiError as error:
            logger.warning("could not post event %s on %s: %s", reason, metadata["name"], error)


EVENTS_AT_ONCE = 8
"""Events in flight at once: a backlog of thousands goes in seconds, and leaves places under
the request limit for status writes."""


@dataclass(frozen=True, slots=True)
class _Queued:
    reference: Mapping[str, Any]
    event_type: str
    reason: str
    message: str
    at: datetime
    queued: float
    number: int


class EventPoster:
    """The Events of handled resources, posted in the background after the status they tell
    of: each waits for a pause in the operator's writes of its resources (WritesLull), for at
    most the lull's `most_wait` from when it happened, and carries that time. A queued Event
    is a few small strings, where a request held back costs kilobytes."""

    def __init__(
        self, writer: ResourceWriter, lull: WritesLull | None, at_once: int = EVENTS_AT_ONCE
    ) -> None:
        self._writer = writer
        self._lull = lull
        self._at_once = at_once
        self._queue: deque[_Queued] = deque()
        self._numbered = 0
        self._deferred_through = 0  # the Events up to this number waited for a lull
        self._queued = asyncio.Event()
        self._drain: asyncio.Task[None] | None = None

    def post(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
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

    async def _posting(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._queue:
                if self._lull is not None:
                    since = time.monotonic() - self._queue[0].queued
                    if await self._lull.wait(self._lull.most_wait - since):
                        self._count_deferred()
                await self._send_batch()

    def _count_deferred(self) -> None:
        """Every Event queued now waited for that lull; each is counted once."""
        first, last = self._queue[0].number, self._queue[-1].number
        EVENTS_DEFERRED.inc(last - max(self._deferred_through, first - 1))
        self._deferred_through = last

    async def _send_batch(self) -> None:
        """The oldest few, taken off the queue once tried: a shutdown that cancels them midway
        posts them again rather than not at all. An Event that cannot be posted is logged and
        dropped, not retried: the status it tells of holds the same news."""
        batch = list(islice(self._queue, self._at_once))
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
            self._queue.popleft()
            if event.number <= self._deferred_through:
                EVENTS_DEFERRED_SECONDS.inc(now - event.queued)
            if isinstance(outcome, Exception):
                logger.warning("could not post event %s: %r", event.reason, outcome)

    async def close(self, within: float = 5.0) -> None:
        """Post what is queued, without waiting for a lull, for at most `within` seconds."""
        if self._drain is not None:
            self._drain.cancel()
            with suppress(asyncio.CancelledError):
                await self._drain

        async def send_all() -> None:
            while self._queue:
                await self._send_batch()

        try:
            await asyncio.wait_for(send_all(), within)
        except TimeoutError:
            logger.warning("%d events not posted at shutdown", len(self._queue))


def _objects(plural: str, namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
