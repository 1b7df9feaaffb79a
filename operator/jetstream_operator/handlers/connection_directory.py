"""Which NATS system each resource talks to.

Resources name a NatsConnection of their own namespace (or none, for the operator's default);
the directory keeps each connection's last working target, refreshed when its Secrets change.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..k8s.secrets import SecretReader
from ..nats.jsapi import JetStreamUnavailable
from ..nats.pool import ConnectionPool, ConnectionTarget
from . import connection_check
from .registry import ConnectionKey, ResourceRegistry

logger = logging.getLogger(__name__)


class ConnectionNotReady(JetStreamUnavailable):
    """The resource's NatsConnection is missing or failing; `reason` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ConnectionDirectory:
    """Targets by connection key; the default connection is always present.

    `changed` is awaited after a resource's first use of a connection records its target, so
    the connection's drift watcher starts then: the connection's own handler, coming later,
    finds the target recorded and unchanged. (Before, resources applied together with their
    connection could leave it without drift repair until a restart.)

    `follow`, where the process only reads NatsConnections (kopf does not watch them then), is
    asked to follow a namespace's connections when a resource there needs one it does not know;
    False when their first listing failed."""

    def __init__(
        self,
        default: ConnectionTarget,
        connections: ResourceRegistry,
        secrets: SecretReader,
        pool: ConnectionPool,
        require_reference: bool = False,
        changed: Callable[[], Awaitable[None]] | None = None,
        follow: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self.default = default
        self._connections = connections
        self._secrets = secrets
        self._pool = pool
        self._require_reference = require_reference
        self._changed = changed
        self._follow = follow
        self._targets: dict[tuple[str, str], ConnectionTarget] = {}

    def known(self) -> dict[ConnectionKey, ConnectionTarget]:
        known: dict[ConnectionKey, ConnectionTarget] = {None: self.default}
        for key, target in self._targets.items():
            known[key] = target
        return known

    def remember(self, key: tuple[str, str], target: ConnectionTarget | None) -> bool:
        """Record a connection's current target; True when it changed."""
        if target is None:
            return self._targets.pop(key, None) is not None
        changed = self._targets.get(key) != target
        self._targets[key] = target
        return changed

    async def target_for(self, namespace: str, spec: Mapping[str, Any]) -> ConnectionTarget:
        """The target a Stream or Consumer spec uses; ConnectionNotReady explains a failure."""
        reference = spec.get("connectionRef")
        if not reference:
            if self._require_reference:
                raise ConnectionNotReady(
                    "ConnectionRequired",
                    "this operator only serves resources with spec.connectionRef naming a "
                    "NatsConnection in their namespace",
                )
            return self.default
        key = (namespace, str(reference))
        if key in self._targets:
            return self._targets[key]
        tracked = self._connections.named(namespace, str(reference))
        if tracked is None and self._follow is not None:
            if not await self._follow(namespace):
                raise ConnectionNotReady(
                    "ConnectionNotReady",
                    f"the NatsConnections of namespace {namespace!r} could not be read yet; "
                    "retrying",
                )
            tracked = self._connections.named(namespace, str(reference))
        if tracked is None:
            raise ConnectionNotReady(
                "ConnectionNotFound",
                f"NatsConnection {reference!r} does not exist in namespace {namespace!r} "
                "(a resource can only use a connection of its own namespace)",
            )
        result, target = await connection_check.check(
            tracked.spec, namespace, str(reference), self._secrets, self._pool
        )
        if target is None:
            raise ConnectionNotReady(
                "ConnectionNotReady",
                f"NatsConnection {reference!r} is not ready: {result.outcome.message}",
            )
        if self.remember(key, target) and self._changed is not None:
            await self._changed()
        return target
