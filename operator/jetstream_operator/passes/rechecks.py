"""The background recheck every kind checked by a kopf daemon shares (NatsConnection,
ClusterNatsConnection, NatsAccount, NatsUser): wait, find the resource as the registry last saw
it, and check it unless it is gone or being deleted; the kind says how long to wait and what a
check is. For the kinds whose passes are theirs alone (NatsAccount, NatsUser), a failure gets
the manners of every other kind: one Warning per distinct failure, and a jittered backoff."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import kopf

from ..handlers.failures import NO_BASIS, FailureMemory
from ..handlers.registry import ResourceRegistry, TrackedResource
from ..handlers.results import Event, Result

RECHECKED = "rechecked kinds"
"""The failure memory key (`FailureMemories`) of NatsAccounts and NatsUsers: no drift watcher
retries them, their daemons do."""


async def recheck_every(
    stopped: kopf.DaemonStopped,
    registry: ResourceRegistry,
    namespace: str,
    name: str,
    wait: Callable[[TrackedResource | None], float],
    check: Callable[[TrackedResource], Awaitable[None]],
) -> None:
    """Until the daemon is stopped: wait as `wait` says for the resource (None: not seen
    yet), then `check` it if it is still there and not being deleted."""
    while not stopped:
        await stopped.wait(wait(registry.named(namespace, name)))
        if stopped:
            return
        tracked = registry.named(namespace, name)
        if tracked is None or tracked.deleting:
            continue
        await check(tracked)


def settled(
    memory: FailureMemory, uid: str, result: Result, shown: Mapping[str, Any] | None
) -> Result:
    """A pass's result with a Warning for its failure, unless the same failure was warned of
    already (`shown`: the Ready condition now), and the delay of its next try."""
    outcome = result.outcome
    warned = any(e.type == "Warning" and e.reason == outcome.reason for e in result.events)
    if not outcome.ready and not warned:
        warning = Event("Warning", outcome.reason, outcome.message)
        result = replace(result, events=[*result.events, warning])
    return memory.settle(uid, NO_BASIS, result, shown)


def ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            found: Mapping[str, Any] = condition
            return found
    return None


def next_wait(memory: FailureMemory, tracked: TrackedResource | None, interval: float) -> float:
    """The recheck interval, or sooner where a failed pass's backoff is due."""
    due = None if tracked is None else memory.retry_in(tracked.owner.uid)
    return interval if due is None else min(interval, due)
