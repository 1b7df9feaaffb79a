"""Decide what to do about one Consumer, given what the server has. Pure: the caller does the I/O.

The server ignores pause_until in an update (it keeps the current value), so a pause change is
its own step through `$JS.API.CONSUMER.PAUSE`, after any other update. Ownership works as for
streams (the owner is recorded under the same metadata key in the consumer's own config), so
`may_delete` and `release_request` are the stream ones, re-exported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.consumer import ConsumerSpec
from .consumer_config import (
    IMMUTABLE_CONSUMER_FIELDS,
    consumer_differences,
    desired_consumer_config,
    immutable_changes,
)
from .consumer_reset import START_FIELDS, kept_position, positioned_config, sequence_after_ack_floor
from .ownership import Owner, claimed_owner, retained_by
from .renames import IMMUTABLE_FIELD_CHANGED
from .stream_config import FieldDifference, ServerConfig, owner_difference
from .stream_plan import InSync, UpdatesPrevented, may_delete, release_request, unowned_or_taken

__all__ = [
    "AdoptionRefused",
    "ConsumerAction",
    "CreateConsumer",
    "ImmutableChangeRefused",
    "InSync",
    "OwnedElsewhere",
    "PauseConsumer",
    "RecreateConsumer",
    "StreamMissing",
    "UpdateConsumer",
    "UpdatesPrevented",
    "consumer_live_state",
    "may_delete",
    "plan_consumer",
    "release_request",
]


@dataclass(frozen=True)
class StreamMissing:
    """The stream does not exist (yet): wait for it instead of failing, unlike NACK."""

    stream: str
    """The stream in NATS, or the Stream resource when streamRef could not be resolved."""
    from_ref: bool = False
    reason: str = "StreamNotFound"

    def message(self) -> str:
        if self.from_ref:
            return (
                f"Stream resource {self.stream!r} was not found in this namespace, or has not "
                "created its stream yet; waiting for it"
            )
        return f"stream {self.stream!r} does not exist in NATS; waiting for it to be created"


@dataclass(frozen=True)
class CreateConsumer:
    stream: str
    config: ServerConfig


@dataclass(frozen=True)
class UpdateConsumer:
    stream: str
    config: ServerConfig
    differences: list[FieldDifference] = field(default_factory=list)

    def summary(self) -> str:
        return ", ".join(difference.field for difference in self.differences)


@dataclass(frozen=True)
class PauseConsumer:
    """Only pauseUntil differs: pause or resume through `$JS.API.CONSUMER.PAUSE.<stream>.<name>`."""

    stream: str
    consumer: str
    pause_until: str | None
    """RFC 3339 in UTC; None resumes delivery."""

    def request(self) -> dict[str, Any]:
        """The PAUSE request body: an empty one resumes."""
        return {"pause_until": self.pause_until} if self.pause_until else {}

    def subject(self) -> str:
        """The API subject, after the `$JS.API.` prefix."""
        return f"CONSUMER.PAUSE.{self.stream}.{self.consumer}"


@dataclass(frozen=True)
class RecreateConsumer:
    """Immutable fields changed and the spec opted in: delete the consumer, then create it."""

    stream: str
    config: ServerConfig
    fields: list[str]
    kept_from: int | None = None
    """The stream sequence it starts at again (just after its ack floor); None when the
    start fields changed, so that it starts where the spec now says."""
    reason: str = "Recreating"

    def message(self) -> str:
        why = (
            f"recreating consumer {self.config['name']!r} because {', '.join(self.fields)} "
            "changed (spec.recreateOnImmutableChange: true)"
        )
        if self.kept_from is None:
            return f"{why}; it starts where the spec's new start fields say"
        return (
            f"{why}; it keeps its position: it starts again at stream sequence "
            f"{self.kept_from}, just after its ack floor, so what was delivered but not "
            "acknowledged is delivered again"
        )


@dataclass(frozen=True)
class ImmutableChangeRefused:
    """Immutable fields changed and the spec did not opt in to recreating the consumer."""

    consumer: str
    fields: list[str]
    reason: str = IMMUTABLE_FIELD_CHANGED

    def names(self) -> str:
        return ", ".join(f"spec.{name}" for name in self.fields)

    def message(self) -> str:
        return (
            f"{self.names()} differ from consumer {self.consumer!r} in NATS, and the server cannot "
            "change them in place: make the spec match again, or set "
            "spec.recreateOnImmutableChange: true to delete and recreate the consumer (it then "
            "starts again just after its ack floor, unless its start fields changed)"
        )


@dataclass(frozen=True)
class AdoptionRefused(ImmutableChangeRefused):
    """An unowned consumer (one NACK made, say) differs in fields the server cannot change:
    adopting it would mean recreating someone else's consumer, so the spec must match first."""

    def message(self) -> str:
        return (
            f"consumer {self.consumer!r} exists in NATS with other {self.names()} than the spec, "
            "and the server cannot change them in place; it is not adopted. Write its current "
            "values into the spec (NACK's CRD defaulted ackPolicy to none) to adopt it."
        )


@dataclass(frozen=True)
class OwnedElsewhere:
    """The consumer exists but belongs to another resource, or to nobody we know of."""

    consumer: str
    stream: str
    owner: Owner | None
    asking: str = ""
    """The namespace of the resource that asked: another namespace's owner is not named."""
    retained: bool = False
    """Unowned because another resource's deletion retained it."""
    reason: str = "Conflict"

    def message(self) -> str:
        where = f"consumer {self.consumer!r} of stream {self.stream!r}"
        return unowned_or_taken(where, "durableName", self.owner, self.asking, self.retained)


ConsumerAction = (
    StreamMissing
    | CreateConsumer
    | UpdateConsumer
    | PauseConsumer
    | RecreateConsumer
    | ImmutableChangeRefused
    | OwnedElsewhere
    | UpdatesPrevented
    | InSync
)


def plan_consumer(
    spec: ConsumerSpec,
    owner: Owner,
    stream_info_exists: bool,
    consumer_info: Mapping[str, Any] | None,
    *,
    stream_name: str | None = None,
    stream_limits: Mapping[str, Any] | None = None,
) -> ConsumerAction:
    """What must happen next for the server to match the spec (one request at a time).

    `stream_name` is the resolved stream (defaults to spec.streamName; pass the referenced
    Stream's spec.name for streamRef, or None while it cannot be resolved). `stream_limits` is the
    stream's `consumer_limits`, which the server uses for some defaults.
    """
    stream = stream_name or spec.stream_name
    if stream is None:
        return StreamMissing(spec.stream_ref or "", from_ref=True)
    if not stream_info_exists:
        return StreamMissing(stream)
    desired = desired_consumer_config(spec, owner, stream, stream_limits=stream_limits)
    if consumer_info is None:
        return CreateConsumer(stream, desired)
    actual: Mapping[str, Any] = consumer_info.get("config") or {}
    spec_config, desired = desired, kept_position(desired, actual)
    current_owner = claimed_owner(owner, dict(actual))
    adoptable = current_owner is None and spec.adoption == "IfUnowned"
    if not adoptable and not owner.same_resource(current_owner):
        retained = retained_by(dict(actual)) is not None
        return OwnedElsewhere(
            spec.durable_name, stream, current_owner, owner.namespace, retained=retained
        )
    differences = [
        *consumer_differences(desired, actual),
        *owner_difference(owner, current_owner),
    ]
    if not differences:
        return InSync()
    if spec.prevent_update and not adoptable:
        return UpdatesPrevented(differences)
    immutable = immutable_changes(desired, actual)
    if immutable:
        if adoptable:
            # Never delete a consumer we do not own yet, whatever recreateOnImmutableChange says.
            return AdoptionRefused(spec.durable_name, immutable)
        if spec.recreate_on_immutable_change:
            if any(IMMUTABLE_CONSUMER_FIELDS[key] in immutable for key in START_FIELDS):
                return RecreateConsumer(stream, spec_config, immutable)
            kept_from = sequence_after_ack_floor(consumer_info)
            config = positioned_config(spec_config, kept_from)
            return RecreateConsumer(stream, config, immutable, kept_from)
        return ImmutableChangeRefused(spec.durable_name, immutable)
    in_place = [difference for difference in differences if difference.field != "pause_until"]
    if in_place:
        # The server would keep its pause anyway; saying so keeps the request honest.
        request = {**desired, "pause_until": actual.get("pause_until")}
        return UpdateConsumer(stream, request, in_place)
    return PauseConsumer(stream, spec.durable_name, desired["pause_until"])


def consumer_live_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields that show the consumer's live state (camelCase, as in the status)."""
    config = info.get("config") or {}
    delivered = info.get("delivered") or {}
    ack_floor = info.get("ack_floor") or {}
    cluster = info.get("cluster") or {}
    return {
        "streamName": info.get("stream_name"),
        "consumerName": info.get("name") or config.get("name") or config.get("durable_name"),
        "numPending": info.get("num_pending", 0),
        "numAckPending": info.get("num_ack_pending", 0),
        "numRedelivered": info.get("num_redelivered", 0),
        "numWaiting": info.get("num_waiting", 0),
        "deliveredStreamSeq": delivered.get("stream_seq", 0),
        "deliveredConsumerSeq": delivered.get("consumer_seq", 0),
        "ackFloorStreamSeq": ack_floor.get("stream_seq", 0),
        "ackFloorConsumerSeq": ack_floor.get("consumer_seq", 0),
        "paused": bool(info.get("paused")),
        "leader": cluster.get("leader"),
        "pushBound": bool(info.get("push_bound")) if config.get("deliver_subject") else None,
    }
