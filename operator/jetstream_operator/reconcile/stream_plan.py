"""Decide what to do about one Stream, given what the server has. Pure: the caller does the I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.stream import StreamSpec
from .ownership import Owner, recorded_owner
from .stream_config import FieldDifference, ServerConfig, config_differences, desired_stream_config


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
class OwnedElsewhere:
    """The stream exists but belongs to another resource, or to nobody we know of."""

    stream: str
    owner: Owner | None

    def message(self) -> str:
        if self.owner is None:
            return (
                f"stream {self.stream!r} already exists in NATS and was not created by this "
                "operator; it is left untouched. Delete it, or choose another spec.name."
            )
        return (
            f"stream {self.stream!r} is managed by {self.owner.describe()}; it is left untouched. "
            "Choose another spec.name, or delete the other resource first."
        )


StreamAction = CreateStream | UpdateStream | InSync | OwnedElsewhere


def plan_stream(spec: StreamSpec, owner: Owner, info: dict[str, Any] | None) -> StreamAction:
    """What must happen for the server to match the spec."""
    desired = desired_stream_config(spec, owner)
    if info is None:
        return CreateStream(desired)
    actual: ServerConfig = info.get("config") or {}
    current_owner = recorded_owner(actual)
    if current_owner is None or current_owner.uid != owner.uid:
        return OwnedElsewhere(spec.name, current_owner)
    differences = config_differences(desired, actual)
    if differences:
        return UpdateStream(desired, differences)
    return InSync()


def may_delete(owner: Owner, info: dict[str, Any] | None) -> bool:
    """Only a stream this very resource created may be deleted with it."""
    if info is None:
        return False
    current = recorded_owner(info.get("config") or {})
    return current is not None and current.uid == owner.uid


def live_state(info: dict[str, Any]) -> dict[str, Any]:
    """The status fields that show the stream's live state."""
    state = info.get("state") or {}
    config = info.get("config") or {}
    return {
        "streamName": config.get("name"),
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "firstSequence": state.get("first_seq", 0),
        "lastSequence": state.get("last_seq", 0),
        "consumerCount": state.get("consumer_count", 0),
        "replicas": config.get("num_replicas"),
    }
