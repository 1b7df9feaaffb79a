"""A spec that now names another object in NATS than the one its resource manages.

The admission policies refuse such a change. Where they are not in effect (a cluster before
1.30, `crds/` applied without its policy files), the operator would otherwise make a new object
under the new name and leave the old one, with its data, behind. Pure: the caller passes the
name its status recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

IMMUTABLE_FIELD_CHANGED = "ImmutableFieldChanged"
"""The reason of every refusal of a change the server cannot make in place."""


@dataclass(frozen=True)
class Renamed:
    field: str
    """The spec field naming the object: "name", "bucket", "durableName"."""
    managed: str
    """Its value for the object this resource manages in NATS."""
    declared: str
    """Its value in the spec now."""
    noun: str
    """What a person calls the object: "stream", "key-value bucket", "consumer"."""
    kind: str
    """The resource's kind, for the way out."""
    reason: str = IMMUTABLE_FIELD_CHANGED

    def message(self) -> str:
        return (
            f"spec.{self.field} changed from {self.managed!r} to {self.declared!r}, but this "
            f"resource manages {self.noun} {self.managed!r} in NATS, which cannot be renamed: a "
            f"new {self.noun} would be made and {self.managed!r} left behind with its data. Set "
            f"spec.{self.field} back to {self.managed!r}, or create a new {self.kind} resource "
            f"for {self.declared!r} (the admission policy that refuses this change is not in "
            "effect on this cluster)"
        )


def renamed(
    field: str, managed: object, declared: str | None, noun: str, kind: str
) -> Renamed | None:
    """The rename, when the status recorded a managed object and the spec names another."""
    if not isinstance(managed, str) or not managed or declared is None or managed == declared:
        return None
    return Renamed(field, managed, declared, noun, kind)


CONNECTION_KEY = "connectionRef"
"""The status key recording the connection a resource's object was made through: the spec's
`connectionRef` then, "" for the operator's default connection."""
MANAGED_KEYS = ("streamName", "consumerName")
"""Status keys present once a resource manages an object in NATS."""


def declared_connection(spec: Mapping[str, Any]) -> str:
    return str(spec.get(CONNECTION_KEY) or "")


def _describe_connection(reference: str) -> str:
    return f"NatsConnection {reference!r}" if reference else "the operator's default connection"


@dataclass(frozen=True)
class Moved:
    """A spec naming another connection than the one its resource's object lives behind."""

    managed: str
    declared: str
    what: str
    """The object as a person calls it: "stream 'ORDERS'"."""
    kind: str
    reason: str = IMMUTABLE_FIELD_CHANGED

    def message(self) -> str:
        return (
            f"spec.connectionRef changed from {self.managed!r} to {self.declared!r}, but this "
            f"resource manages {self.what} through {_describe_connection(self.managed)}: it "
            f"would be made again through {_describe_connection(self.declared)} and left "
            f"behind with its data. Set spec.connectionRef back to {self.managed!r}, or create "
            f"a new {self.kind} resource for the other system (the admission policy that "
            "refuses this change is not in effect on this cluster)"
        )


def recorded_connection(status: Mapping[str, Any]) -> str | None:
    """The connection status recorded for a managed object; None when it recorded none (status
    written before the record existed, or no object made yet)."""
    if CONNECTION_KEY not in status or not any(status.get(key) for key in MANAGED_KEYS):
        return None
    return str(status.get(CONNECTION_KEY) or "")


def moved(spec: Mapping[str, Any], status: Mapping[str, Any], kind: str) -> Moved | None:
    """The move, when status recorded the connection of a managed object and the spec names
    another. The kopf handlers and drift repair both ask, so it words itself: one message, one
    Warning."""
    managed, declared = recorded_connection(status), declared_connection(spec)
    if managed is None or managed == declared:
        return None
    name = spec.get("name") or spec.get("bucket") or spec.get("durableName")
    return Moved(managed, declared, f"{kind.lower()} {name!r}", kind)


def managed_connection(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec with the connection its object lives behind, for deleting that object where a
    move was refused; the spec itself otherwise."""
    managed = recorded_connection(status)
    if managed is None or managed == declared_connection(spec):
        return spec
    return {**spec, CONNECTION_KEY: managed or None}


def connection_record(
    spec: Mapping[str, Any], previous: Mapping[str, Any], changes: Mapping[str, Any]
) -> dict[str, Any]:
    """The connection to record beside a status write that shows a managed object and has none
    recorded yet. Only beside a write made anyway: resources made before the record existed
    gain it with their next change, not with a write of its own."""
    if not changes or CONNECTION_KEY in previous:
        return {}
    if not any({**previous, **changes}.get(key) for key in MANAGED_KEYS):
        return {}
    return {CONNECTION_KEY: declared_connection(spec)}
