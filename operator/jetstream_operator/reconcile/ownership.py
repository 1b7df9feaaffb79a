"""Which resource owns a stream, recorded in the stream's own metadata on the server.

Recording it on the server (not only in Kubernetes) lets the operator tell its own streams from
pre-existing ones, so it never silently takes over or deletes a stream it did not create.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OWNER_METADATA_KEY = "jetstream-operator.io/owner"
RETAINED_METADATA_KEY = "jetstream-operator.io/retained-by"
"""Left in place of the owner record by a deletion that retained the object: the same
namespace/name re-attaches to it; any other resource needs adoption."""
START_SEQUENCE_KEY = "jetstream-operator.io/start-sequence"
"""Consumer metadata: the stream sequence the operator recreated the consumer at
(`consumer_reset`)."""
START_FOR_KEY = "jetstream-operator.io/start-for"
"""Consumer metadata: the spec's start fields that position stands in for."""
RECORD_KEYS = frozenset(
    {OWNER_METADATA_KEY, RETAINED_METADATA_KEY, START_SEQUENCE_KEY, START_FOR_KEY}
)
"""The operator's own records in an object's metadata, never the user's."""
OWNER_FIELD = "owner"
"""The name a renewed owner record goes by in a plan's differences."""


@dataclass(frozen=True)
class Owner:
    """The custom resource a stream belongs to."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): "" for the namespace of a cluster-scoped resource."""
        return (self.namespace, self.name)

    def encode(self) -> str:
        return f"{self.namespace}/{self.name}/{self.uid}"

    @classmethod
    def decode(cls, text: str) -> Owner | None:
        parts = text.split("/")
        if len(parts) != 3 or not all(parts):
            return None
        return cls(*parts)

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def same_resource(self, other: Owner | None) -> bool:
        """Whether `other` names the same resource: namespace and name identify an owner.

        The UID is not part of the identity, because a backup restore or a rebuilt cluster gives
        the same namespace/name a new UID; such a resource re-attaches to what it owned."""
        return other is not None and (other.namespace, other.name) == (self.namespace, self.name)

    def reattaching(self, recorded: Owner | None) -> bool:
        """The same resource under a new UID (restored or rebuilt): the record must be renewed."""
        return recorded is not None and self.same_resource(recorded) and recorded.uid != self.uid


def recorded_owner(server_config: dict[str, Any]) -> Owner | None:
    """The owner written in a stream's metadata, if any."""
    metadata = server_config.get("metadata") or {}
    value = metadata.get(OWNER_METADATA_KEY)
    return Owner.decode(value) if isinstance(value, str) else None


def retained_by(server_config: dict[str, Any]) -> Owner | None:
    """The resource whose deletion retained the object, if its record is there."""
    metadata = server_config.get("metadata") or {}
    value = metadata.get(RETAINED_METADATA_KEY)
    return Owner.decode(value) if isinstance(value, str) else None


def claimed_owner(owner: Owner, server_config: dict[str, Any]) -> Owner | None:
    """The owner the object answers to for `owner`: its owner record, or, where it has none,
    the record of the resource that retained it when that is `owner` again (re-applied after
    its deletion, or restored): re-attaching to what it retained needs no adoption."""
    recorded = recorded_owner(server_config)
    if recorded is not None:
        return recorded
    retainer = retained_by(server_config)
    return retainer if owner.same_resource(retainer) else None


def still_holding(info: Mapping[str, Any], consumers: Sequence[Mapping[str, Any]]) -> str | None:
    """What keeps a stream under deletionPolicy DeleteIfEmpty: its messages, and consumers no
    resource manages (no owner record); None when it is empty."""
    held = []
    messages = int(((info.get("state") or {}).get("messages")) or 0)
    if messages:
        held.append(f"{messages} message{'s' if messages != 1 else ''}")
    unmanaged = sorted(
        str((consumer.get("config") or {}).get("name") or consumer.get("name") or "")
        for consumer in consumers
        if recorded_owner(dict(consumer.get("config") or {})) is None
    )
    if unmanaged:
        shown = ", ".join(unmanaged[:5]) + (
            f" and {len(unmanaged) - 5} more" if len(unmanaged) > 5 else ""
        )
        held.append(f"consumers no resource manages ({shown})")
    return " and ".join(held) or None
