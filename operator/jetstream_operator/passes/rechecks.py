"""The background recheck every kind checked by a kopf daemon shares (NatsConnection,
ClusterNatsConnection, NatsAccount, NatsUser): wait, find the resource as the registry last saw
it, and check it unless it is gone or being deleted; the kind says how long to wait and what a
check is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import kopf

from ..handlers.registry import ResourceRegistry, TrackedResource


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
