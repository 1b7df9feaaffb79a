"""What a connection's tenancy allows one resource, decided from its spec and its namespace's
other resources, before anything is asked of NATS. Pure: `handlers/tenancy_gate.py` brings
the registries."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..api.tenancy import NAMESPACE_PLACEHOLDER, Tenancy
from .renames import Refused

NOT_PERMITTED = "NotPermitted"
QUOTA_EXCEEDED = "QuotaExceeded"

QUOTA_OF_KIND = {
    "Stream": ("streams", "streams"),
    "Consumer": ("consumers", "consumers"),
    "KeyValue": ("key_values", "key-value buckets"),
    "ObjectStore": ("object_stores", "object stores"),
}
"""Each kind's count quota: the field of `Quotas`, and its words."""


@dataclass(frozen=True)
class Resource:
    """One resource as tenancy reads it: its kind and spec, and the NATS stream a Consumer's
    streamRef resolves to (None: unresolved, or not a Consumer)."""

    kind: str
    name: str
    spec: Mapping[str, Any]
    stream: str | None = None


def rendered(template: str, namespace: str) -> str:
    return template.replace(NAMESPACE_PLACEHOLDER, namespace)


def names(resource: Resource) -> Iterator[tuple[str, str]]:
    """(field, NATS name) of what the resource makes: they carry the namespace's prefix."""
    spec = resource.spec
    field = {"Stream": "name", "Consumer": "durableName"}.get(resource.kind, "bucket")
    value = spec.get(field)
    if isinstance(value, str):
        yield f"spec.{field}", value


def streams_read(resource: Resource) -> Iterator[tuple[str, str]]:
    """(field, stream) of the streams the resource reads from: a consumer's, a mirror's, the
    sources'. A bucket's mirror or sources name buckets (their streams carry the prefix after
    `KV_`), which carry the prefix as bucket names do."""
    spec = resource.spec
    if resource.kind == "Consumer":
        stream = resource.stream or spec.get("streamName")
        if isinstance(stream, str):
            yield "the consumer's stream", stream
        return
    mirror = spec.get("mirror")
    if isinstance(mirror, Mapping) and isinstance(mirror.get("name"), str):
        yield "spec.mirror.name", mirror["name"]
    for index, source in enumerate(spec.get("sources") or []):
        if isinstance(source, Mapping) and isinstance(source.get("name"), str):
            yield f"spec.sources[{index}].name", source["name"]


def subjects(resource: Resource) -> Iterator[tuple[str, str]]:
    """(field, subject) of every subject the resource binds, republishes or transforms to,
    delivers to, or mirrors and sources by."""
    spec = resource.spec
    for index, subject in enumerate(spec.get("subjects") or []):
        yield f"spec.subjects[{index}]", str(subject)
    for field, key in (("republish", "destination"), ("subjectTransform", "dest")):
        value = spec.get(field)
        if isinstance(value, Mapping) and value.get(key):
            yield f"spec.{field}.{key}", str(value[key])
    if spec.get("deliverSubject"):
        yield "spec.deliverSubject", str(spec["deliverSubject"])
    origins = [("spec.mirror", spec.get("mirror"))] + [
        (f"spec.sources[{index}]", source) for index, source in enumerate(spec.get("sources") or [])
    ]
    for where, origin in origins:
        if not isinstance(origin, Mapping):
            continue
        if origin.get("filterSubject"):
            yield f"{where}.filterSubject", str(origin["filterSubject"])
        for index, transform in enumerate(origin.get("subjectTransforms") or []):
            if isinstance(transform, Mapping):
                yield f"{where}.subjectTransforms[{index}].source", str(transform.get("source"))
                yield f"{where}.subjectTransforms[{index}].dest", str(transform.get("dest"))


def stored_bytes(resource: Resource) -> tuple[str, int] | None:
    """(storage, maxBytes) of a stream or bucket; maxBytes -1 when unlimited."""
    if resource.kind == "Consumer":
        return None
    storage = str(resource.spec.get("storage") or "file")
    return storage, int(resource.spec.get("maxBytes", -1) or -1)


Shared = Callable[[str], bool | None]
"""Whether the stream a resource reads (as its spec names it) is shared with the resource's
namespace: True (its own, or in spec.sharedWith), False (another namespace's, not shared), or
None (no resource on the connection declares it)."""


def nobody_declares(_: str) -> bool | None:
    return None


def refusal(
    tenancy: Tenancy,
    namespace: str,
    resource: Resource,
    ahead: Iterable[Resource],
    *,
    made: bool = False,
    shared: Shared = nobody_declares,
) -> Refused | None:
    """Why the tenancy refuses the resource, or None. `ahead` are the namespace's resources on
    the same connection that count against its quotas before this one (those already made in
    NATS, then those created earlier), read only where a quota applies: each pass under a
    quota reads its namespace's resources once. A resource already `made` is not counted
    again: a lowered quota refuses new resources, and the bytes of a made one's changes."""
    broken = rule_broken(tenancy, namespace, resource, shared)
    if broken is not None or not limits_apply(tenancy, resource, made):
        return broken  # the namespace's other resources are not even looked at
    return quota_exceeded(tenancy, namespace, resource, list(ahead), made=made)


def limits_apply(tenancy: Tenancy, resource: Resource, made: bool) -> bool:
    """Whether a quota counting the namespace's resources applies to this one."""
    quotas = tenancy.quotas
    counted = not made and getattr(quotas, QUOTA_OF_KIND[resource.kind][0]) is not None
    stored = stored_bytes(resource)
    if stored is None:
        return counted
    byte_limit = quotas.max_bytes_file if stored[0] == "file" else quotas.max_bytes_memory
    return counted or byte_limit is not None


def rule_broken(
    tenancy: Tenancy, namespace: str, resource: Resource, shared: Shared = nobody_declares
) -> Refused | None:
    spec = resource.spec
    served = f"the connection's tenancy for namespace {namespace}"
    for field, stream in streams_read(resource):
        if shared(stream) is False:
            return Refused(
                f"{field} {stream!r} belongs to a resource of another namespace that does not "
                f"share it with namespace {namespace}: its owners can add {namespace} to its "
                "spec.sharedWith (or select it in spec.sharedWithSelector)",
                NOT_PERMITTED,
            )
    if tenancy.name_prefix:
        prefix = rendered(tenancy.name_prefix, namespace)
        for field, name in names(resource):
            if not name.startswith(prefix):
                return Refused(
                    f"{field} {name!r} does not start with {prefix!r}, the prefix of {served}: "
                    f"name it {prefix + name!r}",
                    NOT_PERMITTED,
                )
        for field, stream in streams_read(resource):
            if not stream.startswith(prefix) and not shared(stream):
                return Refused(
                    f"{field} {stream!r} is not a stream of namespace {namespace} (names start "
                    f"with {prefix!r} under {served}): another namespace's stream is readable "
                    "only when its resource shares it (spec.sharedWith)",
                    NOT_PERMITTED,
                )
    if tenancy.subject_prefixes:
        allowed = [rendered(prefix, namespace) for prefix in tenancy.subject_prefixes]
        for field, subject in subjects(resource):
            if not subject.startswith(tuple(allowed)):
                return Refused(
                    f"{field} {subject!r} is outside the subjects of {served}: use subjects "
                    f"starting with {' or '.join(repr(prefix) for prefix in allowed)}",
                    NOT_PERMITTED,
                )
    if tenancy.adoption == "Forbidden" and spec.get("adoption") == "IfUnowned":
        return Refused(
            f"spec.adoption: IfUnowned is not allowed by {served}: an object no resource owns "
            "may belong to another team. Remove spec.adoption, or ask the platform team",
            NOT_PERMITTED,
        )
    stored = stored_bytes(resource)
    if stored is not None:
        if tenancy.require_max_bytes and stored[1] < 0:
            return Refused(
                f"spec.maxBytes is required by {served}: set the most bytes the "
                f"{resource.kind} may hold",
                NOT_PERMITTED,
            )
        most = tenancy.quotas.max_replicas
        replicas = int(spec.get("replicas", 1) or 1)
        if most is not None and replicas > most:
            return Refused(
                f"spec.replicas {replicas} is more than the {most} allowed by {served}",
                QUOTA_EXCEEDED,
            )
    return None


def quota_exceeded(
    tenancy: Tenancy, namespace: str, resource: Resource, ahead: list[Resource], made: bool
) -> Refused | None:
    quotas = tenancy.quotas
    field, words = QUOTA_OF_KIND[resource.kind]
    limit = getattr(quotas, field)
    used = sum(1 for other in ahead if other.kind == resource.kind)
    if limit is not None and not made and used + 1 > limit:
        return Refused(
            f"namespace {namespace} has {used} {words} of the {limit} its quota allows on this "
            f"connection: delete one, or ask the platform team for more",
            QUOTA_EXCEEDED,
        )
    stored = stored_bytes(resource)
    if stored is None:
        return None
    storage, wanted = stored
    limit = quotas.max_bytes_file if storage == "file" else quotas.max_bytes_memory
    if limit is None:
        return None
    if wanted < 0:
        return Refused(
            f"spec.maxBytes is unset, but namespace {namespace} has a quota of {limit} bytes of "
            f"{storage} storage on this connection: set spec.maxBytes",
            QUOTA_EXCEEDED,
        )
    taken = sum(
        max(held[1], 0)
        for other in ahead
        if (held := stored_bytes(other)) is not None and held[0] == storage
    )
    if taken + wanted > limit:
        return Refused(
            f"spec.maxBytes {wanted} would bring namespace {namespace} to {taken + wanted} bytes "
            f"of {storage} storage, over its quota of {limit} ({taken} taken): lower it, or ask "
            "the platform team for more",
            QUOTA_EXCEEDED,
        )
    return None


def usage(resources: Iterable[tuple[str, Resource]]) -> list[dict[str, Any]]:
    """What each namespace's resources on a connection hold, as its quotas count them, by
    namespace name (a ClusterNatsConnection's status.namespaces)."""
    by_namespace: dict[str, dict[str, Any]] = {}
    for namespace, resource in resources:
        counted = by_namespace.get(namespace)
        if counted is None:
            # Every figure, zeros too: status compares equal to what the API server keeps.
            zeros = dict.fromkeys((*_USAGE_KEY.values(), "maxBytesFile", "maxBytesMemory"), 0)
            counted = by_namespace[namespace] = {"namespace": namespace, **zeros}
        counted[_USAGE_KEY[resource.kind]] += 1
        stored = stored_bytes(resource)
        if stored is not None and stored[1] > 0:
            counted["maxBytesFile" if stored[0] == "file" else "maxBytesMemory"] += stored[1]
    return [by_namespace[namespace] for namespace in sorted(by_namespace)]


_USAGE_KEY = {
    "Stream": "streams",
    "Consumer": "consumers",
    "KeyValue": "keyValues",
    "ObjectStore": "objectStores",
}
