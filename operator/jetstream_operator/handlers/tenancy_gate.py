"""The tenancy of a resource's connection, applied before a pass asks NATS anything: the rules
of `reconcile/tenancy.py` with the namespace's other resources from the registries."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from ..api.selector import LabelSelector
from ..api.tenancy import Tenancy
from ..reconcile.backed import STREAM_KIND, StreamBackedKind
from ..reconcile.ownership import Owner
from ..reconcile.renames import MANAGED_KEYS, Refused
from ..reconcile.tenancy import NOT_PERMITTED, Resource, refusal, usage
from .registry import (
    CLUSTER_SCOPE,
    ConnectionKey,
    ResourceRegistry,
    TrackedResource,
    connection_key,
    declaring,
)


def made(status: Mapping[str, Any]) -> bool:
    """Whether the resource manages an object in NATS already."""
    return any(status.get(key) for key in MANAGED_KEYS)


def tenancy_by_connection(
    default: Tenancy | None, clusterwide: ResourceRegistry
) -> Callable[[ConnectionKey], Tenancy | None]:
    """Each connection's tenancy: the default connection's from the settings, a
    ClusterNatsConnection's from its spec (its defaults where it states none, or where the
    spec cannot be read: no adoption, no unshared streams of other namespaces), and none for
    a namespace's own NatsConnection."""

    def of(connection: ConnectionKey) -> Tenancy | None:
        if connection is None:
            return default
        if connection[0] != CLUSTER_SCOPE:
            return None
        tracked = clusterwide.named(CLUSTER_SCOPE, connection[1])
        try:
            return Tenancy.model_validate((tracked.spec if tracked else {}).get("tenancy") or {})
        except ValidationError:
            return Tenancy()

    return of


class TenancyGate:
    """Asks each resource's connection for its tenancy (None: the connection is the
    namespace's own, or shares nothing) and refuses what it does not allow."""

    def __init__(
        self,
        tenancy_of: Callable[[ConnectionKey], Tenancy | None],
        backed: Mapping[StreamBackedKind, ResourceRegistry],
        consumers: ResourceRegistry,
        labels_of: Callable[[str], Mapping[str, str] | None] = lambda _: None,
    ) -> None:
        self._tenancy_of = tenancy_of
        self._labels_of = labels_of
        self._backed = backed
        self._registries = {kind.resource.kind: registry for kind, registry in backed.items()}
        self._registries["Consumer"] = consumers
        self._streams = self._registries[STREAM_KIND.resource.kind]

    def refusal(
        self,
        kind: str,
        owner: Owner,
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
        connection: ConnectionKey,
    ) -> Refused | None:
        tenancy = self._tenancy_of(connection)
        if tenancy is None:
            return None
        resource = Resource(kind, owner.name, spec, self._stream_of(kind, owner, spec))
        ahead = self._ahead(owner, connection, made(status))

        def shared(name: str) -> bool | None:
            return self._shared(kind, name, owner.namespace, connection)

        return refusal(tenancy, owner.namespace, resource, ahead, made=made(status), shared=shared)

    def usage(self, connection: ConnectionKey) -> list[dict[str, Any]]:
        """Each namespace's resources made in NATS through the connection, as quotas count
        them."""
        return usage(
            (resource.owner.namespace, Resource(kind, resource.owner.name, resource.spec))
            for kind, registry in self._registries.items()
            for resource in registry
            if connection_key(resource) == connection
            and not resource.deleting
            and made(resource.status)
        )

    def _shared(
        self, kind: str, name: str, namespace: str, connection: ConnectionKey
    ) -> bool | None:
        """Whether the stream a resource of `kind` names (a bucket's mirror names a bucket)
        is shared with `namespace`; None when no resource on the connection declares it."""
        reader = next((each for each in self._backed if each.resource.kind == kind), None)
        stream = name
        if reader is not None and not name.startswith(reader.stream_prefix):
            stream = reader.stream_prefix + name
        owners = [
            resource
            for _, resource in declaring(stream, self._backed)
            if connection_key(resource) == connection and not resource.deleting
        ]
        if not owners:
            return None
        return any(
            resource.owner.namespace == namespace
            or namespace in (resource.spec.get("sharedWith") or [])
            or self._selected(resource.spec.get("sharedWithSelector"), namespace)
            for resource in owners
        )

    def _selected(self, selector: object, namespace: str) -> bool:
        """Whether a sharedWithSelector picks the namespace; not while its labels are unknown."""
        if not isinstance(selector, Mapping):
            return False
        labels = self._labels_of(namespace)
        try:
            return labels is not None and LabelSelector.model_validate(selector).matches(labels)
        except ValidationError:
            return False

    def _stream_of(self, kind: str, owner: Owner, spec: Mapping[str, Any]) -> str | None:
        reference = spec.get("streamRef")
        if kind != "Consumer" or not isinstance(reference, str):
            return None
        target = self._streams.named(owner.namespace, reference)
        return target.spec_text("name") if target is not None else None

    def _ahead(self, owner: Owner, connection: ConnectionKey, is_made: bool) -> Iterator[Resource]:
        """The namespace's resources on the connection that count before this one: every one
        made in NATS, then (for one not made yet) those created earlier. Deleting ones, and
        those the tenancy's rules refused (never to be made as they are), do not count."""
        mine = self._order(owner.uid)
        for kind, registry in self._registries.items():
            for other in registry.in_namespace(owner.namespace):
                if other.owner.uid == owner.uid or other.deleting:
                    continue
                if connection_key(other) != connection or _refused_by_rules(other):
                    continue
                if made(other.status) or (not is_made and self._order_of(other) < mine):
                    yield Resource(kind, other.owner.name, other.spec)

    def _order(self, uid: str) -> tuple[str, str]:
        for registry in self._registries.values():
            tracked = registry.get(uid)
            if tracked is not None:
                return self._order_of(tracked)
        return ("~", "")  # not registered yet: after every registered one

    @staticmethod
    def _order_of(resource: TrackedResource) -> tuple[str, str]:
        created = (resource.body.get("metadata") or {}).get("creationTimestamp") or "~"
        return (str(created), resource.owner.name)


def _refused_by_rules(resource: TrackedResource) -> bool:
    for condition in resource.status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("reason") == NOT_PERMITTED)
    return False
