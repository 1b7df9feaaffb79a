"""How kopf's per-resource workers hold their places under the worker limit.

kopf runs one worker per resource (keyed by uid) while it has events, and a worker limit caps
how many run at once; the rest wait for a place. Two of kopf's waits held a place doing nothing:
the idle time after a resource's last event (5 s by default), and, after a deletion, the wait
for a resource version that kopf itself marks as never arriving (the removal of the last
finalizer). Each deleted resource held its place for kopf's consistency timeout, 5 s, so a
limit of W workers deleted at most W/5 resources a second: at 2 workers, 40 streams were not
all deleted within 40 s; released at once, their deletion takes seconds.

The deletion's wait is cut short by `observing_processor`, with which
kopf_adaptations.streamline_workers wraps kopf's worker; it also hands every event of the
streams' and consumers' kinds to the operator's registries without kopf's handler machinery,
and keeps from kopf the echoes of its own status patches, in which kopf would find nothing to
do (`EventObservers`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import kopf

from .k8s.throttle import NamespaceTurns
from .metrics import WATCH_ECHOES_SKIPPED

Item = TypeVar("Item")

WORKER_IDLE_TIMEOUT = 0.1
"""Seconds kopf keeps an object's worker after its last event (kopf's default is 5 s). Under
a worker limit, that idle time holds a place another resource is queued for; without one,
every idle worker still holds memory. Events that follow later start a new worker."""


def tune_queueing(settings: kopf.OperatorSettings, workers: int) -> None:
    """How many resources of a kind kopf handles at once, and how soon a worker lets go."""
    settings.queueing.worker_limit = workers or None
    settings.queueing.idle_timeout = WORKER_IDLE_TIMEOUT


EventObserver = Callable[[Mapping[str, Any]], None]
"""Reads a resource's watch event (the operator's registries)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventObservers:
    """The operator's readers of every watch event of some kinds, which kopf's worker calls
    ahead of kopf's processing, and which of those events kopf need not see at all.

    kopf hands each event to its `on.event` handlers through its handler machinery: the
    handler's keyword arguments, contexts, a state, a log line. That cost about 1 ms an event,
    two thirds of kopf's time outside the operator's own handlers at N = 1,000, for a call that
    only updates a registry.

    Every status the operator writes goes through kopf's patch and comes back a moment later as
    a MODIFIED event, one in two of the events a burst brings. kopf decodes it, diffs it against
    the configuration it just stored, and finds nothing to do. Such an echo is plain, and kopf
    would do nothing with it, when it follows the patched event directly (no one else wrote in
    between: their event would come first), its patch stored a configuration (that of the
    patched event, so kopf's diff is empty: a patch that stored none, such as kopf adding its
    finalizer before running any handler, leaves the handlers to the echo), and it holds no
    progress of a handler still to be retried and no deletion. Only kinds without kopf daemons,
    timers or indexes may be observed: those read every event too."""

    group: str
    by_plural: Mapping[str, EventObserver]
    diffbase_field: str
    progress_prefix: str

    def observer(self, resource: Any) -> EventObserver | None:
        """The observer of a kopf resource's events, if any."""
        if getattr(resource, "group", None) != self.group:
            return None
        return self.by_plural.get(getattr(resource, "plural", None) or "")

    def stored_configuration(self, raw_event: Mapping[str, Any]) -> Any:
        """What kopf last stored of the resource's handled configuration, or None."""
        stored: Any = raw_event.get("object")
        for part in self.diffbase_field.split("."):
            stored = stored.get(part) if isinstance(stored, Mapping) else None
        return stored

    def is_plain_echo(self, raw_event: Mapping[str, Any], patched: Patched | None) -> bool:
        """Whether the event is the plain echo of `patched`, the previous event's patch."""
        if patched is None or raw_event.get("type") != "MODIFIED":
            return False
        metadata = (raw_event.get("object") or {}).get("metadata") or {}
        if metadata.get("resourceVersion") != patched.version or metadata.get("deletionTimestamp"):
            return False
        progress = f"{self.progress_prefix}/"
        if any(key.startswith(progress) for key in metadata.get("annotations") or {}):
            return False
        stored = self.stored_configuration(raw_event)
        return stored is not None and stored != patched.stored_before


@dataclass(frozen=True)
class Patched:
    """kopf's patch after handling an event: the version it made, and the configuration kopf
    had stored before it."""

    version: str
    stored_before: Any


_observers: EventObservers | None = None


def observe_events(observers: EventObservers | None) -> None:
    """From now on, kopf's workers hand every event of the observed kinds to their observer,
    and keep plain echoes from kopf (None: kopf sees every event again, and no one else). Takes
    effect where kopf_adaptations.streamline_workers applied; elsewhere, kopf's own `on.event`
    handlers must observe."""
    global _observers
    _observers = observers


EventProcessor = Callable[..., Awaitable[str | None]]
"""kopf's processing of one event (its keyword `raw_event` and more): the resource version its
patch made, if it patched."""


def observing_processor(
    processor: EventProcessor, resource: Any, end_after_deletion: Callable[[], None]
) -> EventProcessor:
    """`processor` for one resource's worker, handing each event to the `observe_events`
    observer of its kind first, keeping plain echoes from kopf, and calling
    `end_after_deletion` once kopf has handled a DELETED event (nothing can follow it for the
    worker's uid, so the worker may end at once)."""
    patched: Patched | None = None  # by handling the previous event, if it patched

    async def process(*, raw_event: Any, **more: Any) -> str | None:
        nonlocal patched
        observers = _observers
        observer = observers.observer(resource) if observers else None
        if observers and observer:
            try:
                observer(raw_event)
            except Exception:  # as kopf treats its event handlers: logged, never retried
                log.exception("Observing an event of %s failed", resource)
            if observers.is_plain_echo(raw_event, patched):
                patched = None
                WATCH_ECHOES_SKIPPED.inc()
                return None
        stored = observers.stored_configuration(raw_event) if observers and observer else None
        version = await processor(raw_event=raw_event, **more)
        patched = None
        if version is not None and observer is not None:
            patched = Patched(version, stored)
        if raw_event.get("type") == "DELETED":
            end_after_deletion()
        return version

    return process


class _TurnsAsDeque(Generic[Item]):
    """NamespaceTurns with the two methods asyncio.Queue asks of its storage."""

    def __init__(self, namespace_of: Callable[[Item], str]) -> None:
        self._turns: NamespaceTurns[Item] = NamespaceTurns()
        self._namespace_of = namespace_of

    def __len__(self) -> int:
        return len(self._turns)

    def append(self, item: Item) -> None:
        self._turns.append(self._namespace_of(item), item)

    def popleft(self) -> Item:
        return self._turns.pop()


class NamespaceFairQueue(asyncio.Queue[Item]):
    """A queue that hands its items out a namespace at a time (oldest first within one).

    kopf starts the workers of resources beyond its worker limit in the order their first
    events came: while one namespace converges 2,000 new Streams, a Stream applied in another
    waited behind all of them (p99 17.9 s with the request queue already fair). With this as
    the queue of waiting workers (kopf_adaptations.share_workers_by_namespace), each namespace
    with work waiting gets the next free place in turn."""

    def __init__(self, namespace_of: Callable[[Item], str]) -> None:
        self._namespace_of = namespace_of
        super().__init__()

    def _init(self, maxsize: int) -> None:
        self._queue = _TurnsAsDeque(self._namespace_of)
