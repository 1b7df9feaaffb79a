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


POLICY_ABSENT = "(the admission policy that refuses this change is not in effect on this cluster)"


@dataclass(frozen=True)
class Refused:
    """A spec change the operator refuses itself: the object it manages in NATS cannot follow
    it, and following it would leave that object behind. Both the kopf handlers and drift
    repair ask, so the refusal words itself: one message, one Warning."""

    text: str
    reason: str = IMMUTABLE_FIELD_CHANGED

    def message(self) -> str:
        return self.text


def renamed(
    field: str, managed: object, declared: str | None, noun: str, kind: str
) -> Refused | None:
    """The rename, when the status recorded a managed object and the spec names another.
    `field` names the object ("name", "bucket", "durableName"); `noun` is what a person calls
    it ("stream", "key-value bucket", "consumer"); `kind` is the resource's, for the way out."""
    if not isinstance(managed, str) or not managed or declared is None or managed == declared:
        return None
    return Refused(
        f"spec.{field} changed from {managed!r} to {declared!r}, but this resource manages "
        f"{noun} {managed!r} in NATS, which cannot be renamed: a new {noun} would be made and "
        f"{managed!r} left behind with its data. Set spec.{field} back to {managed!r}, or "
        f"create a new {kind} resource for {declared!r} {POLICY_ABSENT}"
    )


def restreamed(
    spec: Mapping[str, Any], status: Mapping[str, Any], declared: str | None
) -> Refused | None:
    """The move to another stream, when status recorded the stream of a managed consumer and
    the spec now names another (`declared`, as resolved; None while a streamRef finds none)."""
    managed = managed_stream(status)
    if managed is None or declared is None or declared == managed:
        return None
    field = "streamName" if spec.get("streamName") else "streamRef"
    consumer = status["consumerName"]
    return Refused(
        f"spec.{field} now names stream {declared!r}, but this resource manages consumer "
        f"{consumer!r} of stream {managed!r} in NATS, which cannot move to another stream: a "
        f"new consumer would be made on {declared!r} and {consumer!r} left behind on "
        f"{managed!r} with its position. Set spec.{field} back to name stream {managed!r}, or "
        f"create a new Consumer resource for stream {declared!r} {POLICY_ABSENT}"
    )


def managed_stream(status: Mapping[str, Any]) -> str | None:
    """The stream a managed consumer lives on, as status recorded it; None until a consumer is
    managed. A deletion looks there, whatever stream the spec names now."""
    managed, consumer = status.get("streamName"), status.get("consumerName")
    if not isinstance(managed, str) or not managed or not isinstance(consumer, str) or not consumer:
        return None
    return managed


CONNECTION_KEY = "connectionRef"
"""The status key recording the connection a resource's object was made through: the spec's
`connectionRef` then, "" for the operator's default connection, CLUSTER_RECORD + the name for a
`clusterConnectionRef` (a NatsConnection's name holds no "/")."""
CLUSTER_KEY = "clusterConnectionRef"
CLUSTER_RECORD = "ClusterNatsConnection/"
MANAGED_KEYS = ("streamName", "consumerName")
"""Status keys present once a resource manages an object in NATS."""


def declared_connection(spec: Mapping[str, Any]) -> str:
    """The spec's connection, as status records it."""
    clusterwide = spec.get(CLUSTER_KEY)
    if clusterwide:
        return f"{CLUSTER_RECORD}{clusterwide}"
    return str(spec.get(CONNECTION_KEY) or "")


def _describe_connection(reference: str) -> str:
    if reference.startswith(CLUSTER_RECORD):
        return f"ClusterNatsConnection {reference.removeprefix(CLUSTER_RECORD)!r}"
    return f"NatsConnection {reference!r}" if reference else "the operator's default connection"


def _spec_field(reference: str) -> str:
    """How a spec names the recorded connection."""
    if reference.startswith(CLUSTER_RECORD):
        return f"spec.clusterConnectionRef: {reference.removeprefix(CLUSTER_RECORD)}"
    return f"spec.connectionRef: {reference}" if reference else "no spec.connectionRef"


def recorded_connection(status: Mapping[str, Any]) -> str | None:
    """The connection status recorded for a managed object; None when it recorded none (status
    written before the record existed, or no object made yet)."""
    if CONNECTION_KEY not in status or not any(status.get(key) for key in MANAGED_KEYS):
        return None
    return str(status.get(CONNECTION_KEY) or "")


def moved(spec: Mapping[str, Any], status: Mapping[str, Any], kind: str) -> Refused | None:
    """The move, when status recorded the connection of a managed object and the spec names
    another."""
    managed, declared = recorded_connection(status), declared_connection(spec)
    if managed is None or managed == declared:
        return None
    name = spec.get("name") or spec.get("bucket") or spec.get("durableName")
    clusterwide = CLUSTER_RECORD in managed + declared
    field = "the spec's connection" if clusterwide else "spec.connectionRef"
    return Refused(
        f"{field} changed from {managed!r} to {declared!r}, but this resource "
        f"manages {kind.lower()} {name!r} through {_describe_connection(managed)}: it would be "
        f"made again through {_describe_connection(declared)} and left behind with its data. "
        f"Write {_spec_field(managed)} again, or create a new {kind} resource for the other "
        f"system {POLICY_ABSENT}"
    )


def managed_connection(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The spec with the connection its object lives behind, for deleting that object where a
    move was refused; the spec itself otherwise."""
    managed = recorded_connection(status)
    if managed is None or managed == declared_connection(spec):
        return spec
    if managed.startswith(CLUSTER_RECORD):
        return {**spec, CONNECTION_KEY: None, CLUSTER_KEY: managed.removeprefix(CLUSTER_RECORD)}
    others = {key: value for key, value in spec.items() if key != CLUSTER_KEY}
    return {**others, CONNECTION_KEY: managed or None}


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
