"""Which resource owns a stream, recorded in the stream's own metadata on the server.

Recording it on the server (not only in Kubernetes) lets the operator tell its own streams from
pre-existing ones, so it never silently takes over or deletes a stream it did not create.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OWNER_METADATA_KEY = "jetstream-operator.io/owner"
OWNER_FIELD = "owner"
"""The name a renewed owner record goes by in a plan's differences."""


@dataclass(frozen=True)
class Owner:
    """The custom resource a stream belongs to."""

    namespace: str
    name: str
    uid: str

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
