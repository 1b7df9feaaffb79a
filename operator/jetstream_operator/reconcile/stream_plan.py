"""Decide what to do about one Stream, given what the server has. Pure: the caller does the I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.stream import StreamSpec
from .ownership import (
    RECORD_KEYS,
    RETAINED_METADATA_KEY,
    Owner,
    claimed_owner,
    recorded_owner,
    retained_by,
)
from .renames import Refused
from .stream_config import (
    FieldDifference,
    ServerConfig,
    config_differences,
    desired_stream_config,
    newer_flags_off,
    owner_difference,
    server_chosen_fields,
    without_create_only,
)

# Spec fields the server never changes in place -> the server field holding them. Left out of a
# spec, they follow the stream that exists (one adopted from NACK, whose CRD defaults storage to
# memory), instead of asking for a change the user never wrote and the server refuses.
_IMMUTABLE_FOLLOWED: dict[str, str] = {
    "storage": "storage",
    # One-way: a bucket made by nats-py has message TTLs on, which nothing can turn off again.
    "allow_msg_ttl": "allow_msg_ttl",
    "persist_mode": "persist_mode",
    "allow_msg_counter": "allow_msg_counter",
}


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
    asking: str = ""
    """The namespace of the resource that asked: another namespace's owner is not named."""
    retained: bool = False
    """Unowned because another resource's deletion retained it."""

    def message(self, what: str = "", name_field: str = "name") -> str:
        """`what` names the object as its kind does ("key-value bucket 'orders'")."""
        what = what or f"stream {self.stream!r}"
        return unowned_or_taken(what, name_field, self.owner, self.asking, self.retained)


def unowned_or_taken(
    what: str, name_field: str, owner: Owner | None, asking: str, retained: bool
) -> str:
    """Why an object in NATS is not this resource's, in words that name no other namespace."""
    if owner is not None and owner.namespace != asking:
        return taken_elsewhere(what, name_field)
    if owner is None and retained:
        return (
            f"{what} was kept in NATS when another resource that managed it was deleted "
            "(deletionPolicy: Retain); it is left untouched. To manage it, set spec.adoption: "
            f"IfUnowned; otherwise choose another spec.{name_field}."
        )
    if owner is None:
        return (
            f"{what} already exists in NATS and was not created by this operator; it is "
            "left untouched. To manage it, set spec.adoption: IfUnowned; otherwise choose "
            f"another spec.{name_field}."
        )
    return (
        f"{what} is managed by {owner.describe()}; it is left untouched. "
        f"Choose another spec.{name_field}, or delete the other resource first."
    )


def taken_elsewhere(what: str, name_field: str) -> str:
    """A name another namespace's resource holds, said without naming that resource: which
    namespaces exist and what they call their resources is theirs to know."""
    return (
        f"{what} is managed by a resource of another namespace; it is left untouched. "
        f"Choose another spec.{name_field}."
    )


StreamAction = CreateStream | UpdateStream | InSync | OwnedElsewhere | UpdatesPrevented | Refused


def first_sequence_refusal(spec: StreamSpec, info: dict[str, Any]) -> Refused | None:
    """spec.firstSequence where the existing stream certainly did not start: the server takes
    it only at creation and ignores it in an update, so the spec could never be met.

    Certain when the config records another first_seq; where it records none (a stream made
    without it, or one whose first_seq an update before f9dd80f dropped), when the last
    sequence lies below it, as a stream started at N never does. Otherwise it may be the
    stream's own start, and nothing is refused."""
    asked = spec.first_sequence or 0
    recorded = int((info.get("config") or {}).get("first_seq") or 0)
    last = int((info.get("state") or {}).get("last_seq") or 0)
    certain = recorded != asked if recorded else last < asked - 1
    if not asked or not certain:
        return None
    # Nothing that moves with the stream's messages: the message is the failure's identity,
    # and a new one would post another Warning and write status at every retry.
    started = f"at sequence {recorded}" if recorded else f"before sequence {asked}"
    keep = f"set it back to {recorded} or remove it" if recorded else "remove it"
    return Refused(
        f"spec.firstSequence is {asked}, but stream {spec.name!r} started {started}, and NATS "
        f"takes spec.firstSequence only when a stream is created: {keep}, or create a new "
        "Stream resource (another spec.name) for a stream starting there"
    )


def following_server(spec: StreamSpec, actual: ServerConfig) -> StreamSpec:
    """The spec with the immutable fields it leaves out taken from the existing stream.

    Retention follows only to or from workqueue (the change the server refuses); limits <->
    interest stays the spec's default, so drift there is still repaired."""
    update: dict[str, Any] = {
        field: actual[key]
        for field, key in _IMMUTABLE_FOLLOWED.items()
        if field not in spec.model_fields_set and actual.get(key) not in (None, "")
    }
    retention = actual.get("retention")
    if "retention" not in spec.model_fields_set and "workqueue" in (retention, spec.retention):
        update["retention"] = retention
    if not update:
        return spec
    return spec.model_copy(update=update)


def sealing_request(spec: StreamSpec, owner: Owner) -> ServerConfig:
    """The update that seals an open stream: its open config with sealed: true. The server
    applies the sealed shape itself; sending that shape instead would be refused where the open
    config needs rollups (message schedules, delete markers: pedantic refuses them without
    rollups, and rollups without the purge permission are refused outright)."""
    return {**open_config(spec, owner), "sealed": True}


def open_config(spec: StreamSpec, owner: Owner) -> ServerConfig:
    """The config of the spec before any sealing: what a new stream is created with."""
    return desired_stream_config(spec.model_copy(update={"sealed": False}), owner)


def plan_stream(spec: StreamSpec, owner: Owner, info: dict[str, Any] | None) -> StreamAction:
    """What must happen next for the server to match the spec (one request at a time)."""
    if info is None:
        # The server refuses to create a sealed stream: create it open, seal it next.
        return CreateStream(open_config(spec, owner))
    actual: ServerConfig = info.get("config") or {}
    spec = following_server(spec, actual)
    desired = newer_flags_off(desired_stream_config(spec, owner), actual)
    current_owner = claimed_owner(owner, actual)
    adoptable = current_owner is None and spec.adoption == "IfUnowned"
    if not adoptable and not owner.same_resource(current_owner):
        retained = retained_by(actual) is not None
        return OwnedElsewhere(spec.name, current_owner, owner.namespace, retained)
    if refusal := first_sequence_refusal(spec, info):
        return refusal
    chosen = server_chosen_fields(spec)
    differences = [
        *config_differences(desired, actual, chosen),
        *owner_difference(owner, current_owner),
    ]
    if not differences:
        return InSync()
    if spec.prevent_update and not adoptable:
        return UpdatesPrevented(differences)
    request = without_create_only(desired, actual)
    if spec.sealed and not actual.get("sealed"):
        request = without_create_only(sealing_request(spec, owner), actual)
    # What is not compared is not changed either: an adopted mirror keeps the window its
    # client gave it (nats.go: 2m) instead of getting ours with the owner record.
    request.update({key: actual[key] for key in chosen if key in actual})
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
    """The update that turns our owner record on a retained stream into a record of who
    retained it: the same namespace/name re-attaches later, any other resource must adopt
    it; None when the stream is not ours."""
    if not may_delete(owner, info):
        return None
    config = dict(info.get("config") or {})
    metadata = {
        key: value
        for key, value in (config.get("metadata") or {}).items()
        if key not in RECORD_KEYS and not key.startswith("_nats")
    }
    config["metadata"] = {**metadata, RETAINED_METADATA_KEY: owner.encode()}
    return without_create_only(config, config)
