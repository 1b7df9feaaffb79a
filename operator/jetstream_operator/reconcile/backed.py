"""The kinds whose resources each hold one JetStream stream: Stream, KeyValue and ObjectStore.

One planner, one handler, one drift repair and one ownership rule serve them all; a kind only
says how its spec becomes a stream, how its stream is named, and what its status shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..api.kinds import KEY_VALUE, OBJECT_STORE, STREAM, ResourceKind
from ..api.stream import StreamSpec
from .bucket_config import (
    KV_STREAM_PREFIX,
    OBJ_STREAM_PREFIX,
    keyvalue_stream_spec,
    objectstore_stream_spec,
)
from .live_state import keyvalue_live_state, objectstore_live_state, stream_live_state
from .renames import Refused, renamed


def _as_stream(spec: Any) -> StreamSpec:
    assert isinstance(spec, StreamSpec)
    return spec


@dataclass(frozen=True, eq=False)
class StreamBackedKind:
    """How one kind maps onto the stream it holds. Compared and hashed by identity: there is
    one of each."""

    resource: ResourceKind
    noun: str
    """What a person calls it in a message: "stream", "key-value bucket", "object store"."""
    name_field: str
    """The spec field naming it; immutable."""
    stream_prefix: str
    """Its stream's name is this prefix and the name."""
    to_stream: Callable[[Any], StreamSpec]
    live_state: Callable[[dict[str, Any]], dict[str, Any]]
    counts_objects: bool = False
    """Status shows an object count, which needs a STREAM.INFO of its own."""

    def stream_spec(self, spec: Mapping[str, Any]) -> StreamSpec:
        """Validate the resource's spec and translate it; raises pydantic's ValidationError."""
        return self.to_stream(self.resource.spec_model.model_validate(dict(spec)))

    def declared_name(self, spec: Mapping[str, Any]) -> str | None:
        value = spec.get(self.name_field)
        return value if isinstance(value, str) and value else None

    def stream_name(self, spec: Mapping[str, Any]) -> str | None:
        """The stream a resource of this kind declares, from its spec alone."""
        name = self.declared_name(spec)
        return self.stream_prefix + name if name is not None else None

    def name_in_stream(self, stream: str) -> str | None:
        """The spec value that would declare this stream, or None when no resource of this
        kind can (a stream without the kind's prefix)."""
        if not stream.startswith(self.stream_prefix) or stream == self.stream_prefix:
            return None
        return stream[len(self.stream_prefix) :]

    def renamed(self, spec: Mapping[str, Any], status: Mapping[str, Any]) -> Refused | None:
        """The spec naming another stream than the one its status shows this resource
        manages."""
        managed = status.get("streamName")
        was = self.name_in_stream(managed) if isinstance(managed, str) else None
        return renamed(
            self.name_field, was, self.declared_name(spec), self.noun, self.resource.kind
        )

    def managed_stream(self, spec: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
        """The stream this resource manages: the one its status shows, else the spec's. They
        differ only where a rename was refused (renamed above)."""
        managed = status.get("streamName")
        if isinstance(managed, str) and self.name_in_stream(managed) is not None:
            return managed
        return self.stream_name(spec)

    def describe(self, spec: Mapping[str, Any], *, quoted: bool = False) -> str:
        name = self.declared_name(spec) or "?"
        return f"{self.noun} {name!r}" if quoted else f"{self.noun} {name}"

    def describe_with_stream(self, spec: Mapping[str, Any], *, quoted: bool = False) -> str:
        """As describe, naming the stream too where it differs from the resource's name."""
        if not self.stream_prefix:
            return self.describe(spec, quoted=quoted)
        return f"{self.describe(spec, quoted=quoted)} (stream {self.stream_name(spec)})"


STREAM_KIND = StreamBackedKind(STREAM, "stream", "name", "", _as_stream, stream_live_state)
KEY_VALUE_KIND = StreamBackedKind(
    KEY_VALUE,
    "key-value bucket",
    "bucket",
    KV_STREAM_PREFIX,
    keyvalue_stream_spec,
    keyvalue_live_state,
)
OBJECT_STORE_KIND = StreamBackedKind(
    OBJECT_STORE,
    "object store",
    "bucket",
    OBJ_STREAM_PREFIX,
    objectstore_stream_spec,
    objectstore_live_state,
    counts_objects=True,
)
STREAM_BACKED: tuple[StreamBackedKind, ...] = (STREAM_KIND, KEY_VALUE_KIND, OBJECT_STORE_KIND)
