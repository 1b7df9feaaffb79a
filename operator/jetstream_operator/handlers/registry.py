"""What the operator knows of its resources, kept current by the watch stream.

Drift repair starts from a NATS name (an advisory, a listing page) and needs the resource that
declares it, without an API request per lookup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import GROUP
from ..marks import METRICS_LABEL
from ..memory import shared
from ..reconcile.backed import StreamBackedKind
from ..reconcile.ownership import Owner


@dataclass
class TrackedResource:
    """The latest seen state of one custom resource."""

    owner: Owner
    body: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def spec(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.body.get("spec") or {}
        return spec

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.body.get("status") or {}
        return status

    @property
    def generation(self) -> int | None:
        generation: int | None = self.body.get("metadata", {}).get("generation")
        return generation

    def spec_text(self, key: str) -> str | None:
        value = self.spec.get(key)
        return value if isinstance(value, str) and value else None

    def annotation(self, key: str) -> str:
        value = (self.body.get("metadata", {}).get("annotations") or {}).get(key, "")
        return str(value)

    @property
    def deleting(self) -> bool:
        return bool(self.body.get("metadata", {}).get("deletionTimestamp"))

    @property
    def first_handled(self) -> bool:
        """kopf has run the create handler at least once (a status exists)."""
        return bool(self.status.get("conditions"))


KEPT_METADATA = (
    "namespace",
    "name",
    "uid",
    "generation",
    "deletionTimestamp",
    "creationTimestamp",  # the order of a namespace's resources against its quotas
)
KEPT_ANNOTATION_PREFIX = f"{GROUP}/"
DROPPED_STATUS = ("lastHandledConfiguration",)


def slim_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """What drift repair reads of a resource, and nothing more: thousands are kept, and
    managedFields, kubectl's last-applied annotation and kopf's diff base are most of a body.
    Shared strings (see `shared`) make the rest cheaper still."""
    metadata = body.get("metadata") or {}
    kept_metadata = {key: metadata[key] for key in KEPT_METADATA if key in metadata}
    annotations = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key.startswith(KEPT_ANNOTATION_PREFIX)
    }
    if annotations:
        kept_metadata["annotations"] = annotations
    labels = metadata.get("labels") or {}
    if METRICS_LABEL in labels:  # the only label read: whether the resource has metrics
        kept_metadata["labels"] = {METRICS_LABEL: labels[METRICS_LABEL]}
    status = {
        key: value for key, value in (body.get("status") or {}).items() if key not in DROPPED_STATUS
    }
    return {
        "metadata": shared(kept_metadata),
        "spec": shared(body.get("spec") or {}),
        "status": shared(status),
    }


INDEXED_SPEC_KEYS = ("name", "bucket", "durableName", "streamName", "streamRef")
"""Spec fields looked up by value on every handler call and advisory; indexed so a lookup does
not scan thousands of resources."""


class ResourceRegistry:
    """Resources of one kind by uid, shared by kopf's handlers and drift repair."""

    def __init__(self) -> None:
        self._by_uid: dict[str, TrackedResource] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._by_name: dict[tuple[str, str], str] = {}
        self._by_spec: dict[tuple[str, str], set[str]] = {}
        self._by_namespace: dict[str, set[str]] = {}

    def _index(self, uid: str, resource: TrackedResource, present: bool) -> None:
        name_key = (resource.owner.namespace, resource.owner.name)
        spec_keys = [
            (key, value)
            for key in INDEXED_SPEC_KEYS
            if (value := resource.spec_text(key)) is not None
        ]
        if present:
            self._by_namespace.setdefault(resource.owner.namespace, set()).add(uid)
            self._by_name[name_key] = uid
            for spec_key in spec_keys:
                self._by_spec.setdefault(spec_key, set()).add(uid)
            return
        if self._by_name.get(name_key) == uid:
            del self._by_name[name_key]
        in_namespace = self._by_namespace.get(resource.owner.namespace)
        if in_namespace is not None:
            in_namespace.discard(uid)
            if not in_namespace:
                del self._by_namespace[resource.owner.namespace]
        for spec_key in spec_keys:
            uids = self._by_spec.get(spec_key)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_spec[spec_key]

    def lock(self, uid: str) -> asyncio.Lock:
        """One lock per resource, so a handler and drift repair never act at the same time."""
        return self._locks.setdefault(uid, asyncio.Lock())

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid", ""))
        if not uid:
            return
        existing = self._by_uid.get(uid)
        if existing is not None:
            self._index(uid, existing, present=False)
        if event_type == "DELETED":
            self._by_uid.pop(uid, None)
            self._locks.pop(uid, None)
            return
        kept = slim_body(body)
        if existing is None:
            owner = Owner(str(metadata.get("namespace", "")), str(metadata.get("name", "")), uid)
            existing = self._by_uid[uid] = TrackedResource(owner, kept, self.lock(uid))
        else:
            existing.body = kept
        self._index(uid, existing, present=True)

    def announce(self, body: Mapping[str, Any]) -> None:
        """A creation the watch just brought, known before kopf's worker for it starts (under a
        worker limit, seconds later), so a new stream's handler counts a consumer applied
        with it and a consumer finds the Stream it names. Never over what kopf delivered."""
        uid = str((body.get("metadata") or {}).get("uid", ""))
        if uid and uid not in self._by_uid:
            self.observe("ADDED", body)

    def get(self, uid: str) -> TrackedResource | None:
        return self._by_uid.get(uid)

    def named(self, namespace: str, name: str) -> TrackedResource | None:
        uid = self._by_name.get((namespace, name))
        return self._by_uid.get(uid) if uid is not None else None

    def in_namespace(self, namespace: str) -> list[TrackedResource]:
        uids = self._by_namespace.get(namespace, ())
        return [self._by_uid[uid] for uid in uids if uid in self._by_uid]

    def with_spec(self, key: str, value: str) -> list[TrackedResource]:
        if key in INDEXED_SPEC_KEYS:
            uids = self._by_spec.get((key, value), ())
            return [self._by_uid[uid] for uid in uids if uid in self._by_uid]
        return [item for item in self._by_uid.values() if item.spec_text(key) == value]

    def __iter__(self) -> Iterator[TrackedResource]:
        return iter(list(self._by_uid.values()))

    def __len__(self) -> int:
        return len(self._by_uid)


def declaring(
    stream: str, backed: Mapping[StreamBackedKind, ResourceRegistry]
) -> list[tuple[StreamBackedKind, TrackedResource]]:
    """The resources, of every kind holding a stream, that declare this NATS stream."""
    found = []
    for kind, registry in backed.items():
        name = kind.name_in_stream(stream)
        if name is not None:
            found += [(kind, resource) for resource in registry.with_spec(kind.name_field, name)]
    return found


def consumers_of(
    stream: str, consumers: ResourceRegistry, streams: ResourceRegistry
) -> list[TrackedResource]:
    """Consumer resources on one NATS stream: named directly, or through a Stream resource."""
    found = list(consumers.with_spec("streamName", stream))
    for declared in streams.with_spec("name", stream):
        found += [
            consumer
            for consumer in consumers.with_spec("streamRef", declared.owner.name)
            if consumer.owner.namespace == declared.owner.namespace
            and not consumer.spec_text("streamName")
        ]
    return found


def consumer_stream(consumer: TrackedResource, streams: ResourceRegistry) -> str | None:
    """The NATS stream a Consumer resource names, directly or through its streamRef."""
    direct = consumer.spec_text("streamName")
    if direct:
        return direct
    reference = consumer.spec_text("streamRef")
    if reference is None:
        return None
    target = streams.named(consumer.owner.namespace, reference)
    return target.spec_text("name") if target is not None else None


ConnectionKey = tuple[str, str] | None
"""None for the operator's default connection, else (namespace, NatsConnection name)."""


def connection_key(resource: TrackedResource) -> ConnectionKey:
    return spec_connection_key(resource.owner.namespace, resource.spec)


CLUSTER_SCOPE = ""
"""The namespace part of a ClusterNatsConnection's key: it has none."""


def spec_connection_key(namespace: str, spec: Mapping[str, Any]) -> ConnectionKey:
    """(namespace, NatsConnection), (CLUSTER_SCOPE, ClusterNatsConnection), or None for the
    operator's default connection."""
    clusterwide = spec.get("clusterConnectionRef")
    if isinstance(clusterwide, str) and clusterwide:
        return (CLUSTER_SCOPE, clusterwide)
    reference = spec.get("connectionRef")
    return (namespace, reference) if isinstance(reference, str) and reference else None


def ready_counts(registries: Mapping[str, ResourceRegistry]) -> list[tuple[str, str, int]]:
    """(kind, Ready status, count) over every registry, for the resources gauge."""
    counts: dict[tuple[str, str], int] = {}
    for kind, registry in registries.items():
        for resource in registry:
            ready = "Unknown"
            for condition in resource.status.get("conditions") or []:
                if condition.get("type") == "Ready":
                    ready = str(condition.get("status"))
            counts[(kind, ready)] = counts.get((kind, ready), 0) + 1
    return [(kind, ready, count) for (kind, ready), count in sorted(counts.items())]
