"""Decide what to do about one Stream, given what the server has. Pure: the caller does the I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.stream import StreamSpec
from .ownership import OWNER_METADATA_KEY, Owner, recorded_owner
from .stream_config import (
    FieldDifference,
    ServerConfig,
    config_differences,
    desired_stream_config,
    owner_difference,
    without_create_only,
)


@dataclass(frozen=True)
class CreateStream:
    config: ServerConfig


@dataclass(frozen=True)
class UpdateStream:
    config: ServerConfig
    differences: list[FieldDifference] = field(default_factory=list)

    def summary(self) -> str:
        return ", ".join(difference.field for difference in self.differences)


@dataclass(frozen=True)
class InSync:
    pass


@dataclass(frozen=True)
class UpdatesPrevented:
    """The spec asks for updates to be skipped (NACK's preventUpdate), and the server differs."""

    differences: list[FieldDifference]


@dataclass(frozen=True)
class OwnedElsewhere:
    """The stream exists but belongs to another resource, or to nobody we know of."""

    stream: str
    owner: Owner | None

    def message(self) -> str:
        if self.owner is None:
            return (
                f"stream {self.stream!r} already exists in NATS and was not created by this "
                "operator; it is left untouched. To manage it, set spec.adoption: IfUnowned; "
                "otherwise choose another spec.name."
            )
        return (
            f"stream {self.stream!r} is managed by {self.owner.describe()}; it is left untouched. "
            "Choose another spec.name, or delete the other resource first."
        )


StreamAction = CreateStream | UpdateStream | InSync | OwnedElsewhere | UpdatesPrevented


def plan_stream(spec: StreamSpec, owner: Owner, info: dict[str, Any] | None) -> StreamAction:
    """What must happen next for the server to match the spec (one request at a time)."""
    desired = desired_stream_config(spec, owner)
    if info is None:
        return CreateStream(desired)
    actual: ServerConfig = info.get("config") or {}
    current_owner = recorded_owner(actual)
    adoptable = current_owner is None and spec.adoption == "IfUnowned"
    if not adoptable and not owner.same_resource(current_owner):
        return OwnedElsewhere(spec.name, current_owner)
    differences = [*config_differences(desired, actual), *owner_difference(owner, current_owner)]
    if not differences:
        return InSync()
    if spec.prevent_update and not adoptable:
        return UpdatesPrevented(differences)
    request = without_create_only(desired)
    changed = {difference.field for difference in differences}
    if {"num_replicas", "placement"} <= changed:
        # The server refuses both in one update (error 10123): replicas first, placement next.
        request["placement"] = actual.get("placement")
        differences = [d for d in differences if d.field != "placement"]
    return UpdateStream(request, differences)


def may_delete(owner: Owner, info: dict[str, Any] | None) -> bool:
    """Only a stream this resource (by namespace/name) created may be deleted with it."""
    if info is None:
        return False
    current = recorded_owner(info.get("config") or {})
    return owner.same_resource(current)


def release_request(owner: Owner, info: dict[str, Any]) -> ServerConfig | None:
    """The update that removes our ownership mark from a retained stream, so it can be adopted
    later; None when the stream is not ours."""
    if not may_delete(owner, info):
        return None
    config = dict(info.get("config") or {})
    metadata = {
        key: value
        for key, value in (config.get("metadata") or {}).items()
        if key != OWNER_METADATA_KEY and not key.startswith("_nats")
    }
    config["metadata"] = metadata
    return without_create_only(config)


def live_state(info: dict[str, Any]) -> dict[str, Any]:
    """The status fields that show the stream's live state."""
    state = info.get("state") or {}
    config = info.get("config") or {}
    cluster = info.get("cluster") or {}
    return {
        "streamName": config.get("name"),
        "cluster": cluster.get("name"),
        "leader": cluster.get("leader"),
        "replicaStates": [
            {
                "name": replica.get("name", ""),
                "current": bool(replica.get("current")),
                "lag": replica.get("lag", 0),
            }
            for replica in cluster.get("replicas") or []
        ],
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "firstSequence": state.get("first_seq", 0),
        "lastSequence": state.get("last_seq", 0),
        "consumerCount": state.get("consumer_count", 0),
        "replicas": config.get("num_replicas"),
    }
