"""A spec that now names another object in NATS than the one its resource manages.

The admission policies refuse such a change. Where they are not in effect (a cluster before
1.30, `crds/` applied without its policy files), the operator would otherwise make a new object
under the new name and leave the old one, with its data, behind. Pure: the caller passes the
name its status recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

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
