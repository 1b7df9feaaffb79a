"""The ObjectStore custom resource: one JetStream Object Store (the stream `OBJ_<bucket>`).

Field names follow NACK's `jetstream.nats.io/v1beta2` ObjectStore; the stream follows the NATS
clients' conventions (nats.go's prepareObjectStoreConfig), so stores made by `nats object add`,
nats.go or nats-py are adopted without a change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue

from .base import Duration, ResourceModel, left_unset_in_crd
from .keyvalue import BucketName, bucket_rule
from .stream import (
    Metadata,
    Placement,
    ShortText,
    StreamBackedSpec,
    StreamBackedStatus,
    connection_rules,
    storage_rule,
)

OBJECT_STORE_RULES: list[JsonValue] = [
    bucket_rule("ObjectStore"),
    storage_rule(),
    *connection_rules("ObjectStore"),
]


class ObjectStoreSpec(StreamBackedSpec):
    """Desired state of an Object Store. Fields left out take the clients' defaults."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": OBJECT_STORE_RULES},
    )

    bucket: BucketName
    """Name of the store (letters, digits, '-' and '_'); its stream is OBJ_<bucket>. Immutable."""
    description: ShortText | None = None
    """Free text shown by `nats object info`."""
    ttl: Duration | None = None
    """How long an object is kept, as a duration such as "720h"; unset for ever."""
    max_bytes: Annotated[int, Field(ge=-1)] = -1
    """Bytes the store may hold; -1 for no limit. Writes are refused when full."""
    storage: Literal["file", "memory"] = Field("file", json_schema_extra=left_unset_in_crd())
    """Where objects are kept. Cannot be changed after creation. Unset: file for a new store,
    whatever an existing (adopted) store has."""
    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    """Copies kept in a clustered JetStream (1 to 5)."""
    placement: Placement | None = None
    """Cluster and server tags the store is placed on."""
    compression: bool = False
    """Compress file storage with S2."""
    metadata: Metadata = Field(default_factory=dict)
    """Free key/value pairs stored with the store (server 2.10+)."""


class ObjectStoreStatus(StreamBackedStatus):
    """Observed state of the store, written only by the operator."""

    objects: int | None = None
    """Objects named in the store, deleted ones included until their markers go."""
    sealed: bool | None = None
    """Whether the store was sealed (read-only for good) by a client."""
    last_sequence: int | None = None
    """Sequence of the newest message when the objects were counted."""
