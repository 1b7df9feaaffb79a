"""How kopf's per-resource workers hold their places under the worker limit.

kopf runs one worker per resource (keyed by uid) while it has events, and a worker limit caps
how many run at once; the rest wait for a place. Two of kopf's waits held a place doing nothing:
the idle time after a resource's last event (5 s by default), and, after a deletion, the wait
for a resource version that kopf itself marks as never arriving (the removal of the last
finalizer). Each deleted resource held its place for kopf's consistency timeout, 5 s, so a
limit of W workers deleted at most W/5 resources a second: at 2 workers, 40 streams were not
all deleted within 40 s; released at once, their deletion takes seconds.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import kopf

WORKER_IDLE_TIMEOUT = 0.1
"""Seconds kopf keeps an object's worker after its last event (kopf's default is 5 s). Under
a worker limit, that idle time holds a place another resource is queued for; without one,
every idle worker still holds memory. Events that follow later start a new worker."""


def tune_queueing(settings: kopf.OperatorSettings, workers: int) -> None:
    """How many resources of a kind kopf handles at once, and how soon a worker lets go."""
    settings.queueing.worker_limit = workers or None
    settings.queueing.idle_timeout = WORKER_IDLE_TIMEOUT


def release_deleted_workers() -> bool:
    """End a resource's worker as soon as kopf has handled its DELETED event.

    Nothing can follow that event for the worker's key (a uid), so ending it loses nothing; it
    ends the way kopf ends every worker at shutdown, with its end-of-stream token. False when
    kopf's worker is not the one this was written for (kopf 1.45)."""
    from kopf._core.reactor import queueing

    original = queueing.worker
    if getattr(original, "releasing", False):
        return True
    expected = {"processor", "streams", "key"}
    if not expected <= inspect.signature(original).parameters.keys():
        return False
    end_of_stream = getattr(getattr(queueing, "EOS", None), "token", None)
    if end_of_stream is None:
        return False

    async def worker(
        *,
        processor: Callable[..., Awaitable[str | None]],
        streams: dict[Any, Any],
        key: Any,
        **kwargs: Any,
    ) -> None:
        async def process(*, raw_event: Any, **more: Any) -> str | None:
            version = await processor(raw_event=raw_event, **more)
            if raw_event.get("type") == "DELETED" and key in streams:
                streams[key].backlog.put_nowait(end_of_stream)
            return version

        await original(processor=process, streams=streams, key=key, **kwargs)

    worker.releasing = True  # type: ignore[attr-defined]
    queueing.worker = worker
    return True
