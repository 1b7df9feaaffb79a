"""Which NATS system each resource talks to.

Resources name a NatsConnection of their own namespace, a ClusterNatsConnection that selects
their namespace, or none (the operator's default connection, for the namespaces it serves);
the directory keeps each connection's last working target, refreshed when its Secrets change.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..api.cluster_connection import ClusterNatsConnectionSpec
from ..api.selector import LabelSelector
from ..k8s.secrets import SecretReader
from ..nats.account_keys import OPERATOR_CREDS_KEY, keys_secret_name
from ..nats.jsapi import JetStreamUnavailable
from ..nats.pool import ConnectionPool, ConnectionTarget
from . import connection_check
from .registry import CLUSTER_SCOPE, ConnectionKey, ResourceRegistry
from .results import Result

NOT_SERVED = "NotPermitted"
"""The condition reason where a connection does not serve the resource's namespace."""

CLUSTER_ONLY_FIELDS = ("namespaceSelector", "tenancy", "account", "systemAccount")
"""A ClusterNatsConnection's fields beyond a NatsConnection's."""


def connection_fields(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What reaches NATS: the spec's NatsConnection fields; a NatsAccount named in `account`
    is the creds of the operator's own user of it, from the account's keys Secret."""
    fields = {key: value for key, value in spec.items() if key not in CLUSTER_ONLY_FIELDS}
    account = spec.get("account")
    if isinstance(account, str) and account:
        fields["creds"] = {"secretName": keys_secret_name(account), "key": OPERATOR_CREDS_KEY}
    return fields


EVERY_NAMESPACE = LabelSelector()


@dataclass(frozen=True)
class Serving:
    """Which namespaces the operator's default connection serves (None: none), and where the
    Secrets of ClusterNatsConnections are (the operator's own namespace)."""

    default_selector: LabelSelector | None = EVERY_NAMESPACE
    own_namespace: str = ""
    labels: Callable[[str], Awaitable[Mapping[str, str] | None]] | None = None
    """A namespace's labels (None: not known yet)."""


def not_served(what: str, namespace: str, selector: LabelSelector | None, hint: str) -> str:
    chosen = "selects no namespace" if selector is None else f"selects {selector.describe()}"
    return f"{what} does not serve namespace {namespace!r} (its namespaceSelector {chosen}); {hint}"


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
        clusterwide: ResourceRegistry | None = None,
        serving: Serving | None = None,
    ) -> None:
        self.default = default
        self._connections = connections
        self._clusterwide = clusterwide if clusterwide is not None else ResourceRegistry()
        self._serving = serving or Serving()
        self._secrets = secrets
        self._pool = pool
        self._require_reference = require_reference
        self._changed = changed
        self._follow = follow
        self._targets: dict[tuple[str, str], ConnectionTarget] = {}
        self._system_targets: dict[str, tuple[dict[str, Any], ConnectionTarget]] = {}

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

    async def target_for(
        self, namespace: str, spec: Mapping[str, Any], *, deleting: bool = False
    ) -> ConnectionTarget:
        """The target a Stream or Consumer spec uses; ConnectionNotReady explains a failure.
        A `deleting` resource reaches its connection even where the connection no longer
        serves its namespace: what it made there is deleted, as its owner asked."""
        clusterwide = spec.get("clusterConnectionRef")
        if clusterwide:
            return await self._clusterwide_target(namespace, str(clusterwide), deleting)
        reference = spec.get("connectionRef")
        if not reference:
            if self._require_reference:
                raise ConnectionNotReady(
                    "ConnectionRequired",
                    "this operator only serves resources with spec.connectionRef naming a "
                    "NatsConnection in their namespace, or spec.clusterConnectionRef naming a "
                    "ClusterNatsConnection",
                )
            if deleting:
                return self.default
            await self._served(
                "the operator's default connection",
                namespace,
                self._serving.default_selector,
                "name a NatsConnection of this namespace in spec.connectionRef, or a "
                "ClusterNatsConnection that selects it in spec.clusterConnectionRef; the "
                "platform team sets the default's selector (chart value nats.namespaceSelector)",
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

    async def system_target(self, name: str) -> ConnectionTarget:
        """A ClusterNatsConnection of a system-account user (a NatsAccount's way to the
        resolver): its target as its Secrets say now, without JetStream, which a system
        account does not have."""
        tracked = self._clusterwide.named(CLUSTER_SCOPE, name)
        if tracked is None:
            raise ConnectionNotReady(
                "ConnectionNotFound", f"ClusterNatsConnection {name!r} does not exist"
            )
        known = self._system_targets.get(name)
        if known is not None and known[0] == tracked.spec:
            return known[1]
        target = await connection_check.target_of(
            connection_fields(tracked.spec), self._serving.own_namespace, name, self._secrets
        )
        if isinstance(target, Result):
            raise ConnectionNotReady(
                "ConnectionNotReady",
                f"ClusterNatsConnection {name!r} is not ready: {target.outcome.message}",
            )
        self._system_targets[name] = (dict(tracked.spec), target)
        return target

    def forget_system_target(self, name: str) -> None:
        """Read the system connection's Secrets again next time (a request through it failed:
        its credentials may have been rotated)."""
        self._system_targets.pop(name, None)

    async def _served(
        self, what: str, namespace: str, selector: LabelSelector | None, hint: str
    ) -> None:
        """ConnectionNotReady unless the connection's selector selects the namespace."""
        if selector is not None and not selector.match_labels and not selector.match_expressions:
            return  # {}: every namespace, no labels needed
        labels = None
        if selector is not None and self._serving.labels is not None:
            labels = await self._serving.labels(namespace)
            if labels is None:
                raise ConnectionNotReady(
                    "NamespacesUnknown",
                    f"the labels of namespace {namespace!r} could not be read yet; retrying",
                )
        if selector is None or labels is None or not selector.matches(labels):
            raise ConnectionNotReady(NOT_SERVED, not_served(what, namespace, selector, hint))

    async def _clusterwide_target(
        self, namespace: str, name: str, deleting: bool
    ) -> ConnectionTarget:
        what = f"ClusterNatsConnection {name!r}"
        tracked = self._clusterwide.named(CLUSTER_SCOPE, name)
        if tracked is None:  # one being deleted still serves its users' deletions
            raise ConnectionNotReady("ConnectionNotFound", f"{what} does not exist")
        try:
            spec = ClusterNatsConnectionSpec.model_validate(dict(tracked.spec))
        except ValidationError:
            raise ConnectionNotReady(
                "ConnectionNotReady", f"{what} is not ready: its spec is invalid"
            ) from None
        if not deleting:
            await self._served(
                what,
                namespace,
                spec.namespace_selector,
                "the platform team that owns it decides which namespaces it serves",
            )
        key = (CLUSTER_SCOPE, name)
        if key in self._targets:
            return self._targets[key]
        result, target = await connection_check.check(
            connection_fields(tracked.spec),
            self._serving.own_namespace,
            name,
            self._secrets,
            self._pool,
        )
        if target is None:
            raise ConnectionNotReady(
                "ConnectionNotReady", f"{what} is not ready: {result.outcome.message}"
            )
        if self.remember(key, target) and self._changed is not None:
            await self._changed()
        return target
