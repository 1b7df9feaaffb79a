"""The KeyValue custom resource: one JetStream Key-Value bucket (the stream `KV_<bucket>`).

Field names follow NACK's `jetstream.nats.io/v1beta2` KeyValue; the stream the bucket is built
on follows the NATS clients' conventions (nats.go's prepareKeyValueConfig), so buckets made by
`nats kv add`, nats.go or nats-py are adopted without a change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue

from .base import Duration, ResourceModel, cel, left_unset_in_crd
from .stream import (
    Metadata,
    Placement,
    Republish,
    ShortText,
    StreamBackedSpec,
    StreamBackedStatus,
    StreamSource,
    connection_rules,
    mirror_rule,
    storage_rule,
)

BUCKET_PATTERN = r"^[a-zA-Z0-9_-]+$"
BucketName = Annotated[str, Field(min_length=1, max_length=251, pattern=BUCKET_PATTERN)]
MAX_HISTORY = 64
"""The most values per key a bucket keeps (KeyValueMaxHistory of the clients)."""


def bucket_rule(kind: str) -> JsonValue:
    return cel(
        "self.bucket == oldSelf.bucket",
        f"spec.bucket is immutable: create a new {kind} resource for the new bucket "
        "(renaming would orphan the old one)",
    )


KEY_VALUE_RULES: list[JsonValue] = [
    bucket_rule("KeyValue"),
    storage_rule(),
    mirror_rule(),
    *connection_rules("KeyValue"),
    cel(
        # Limit markers need per-message TTLs, which the server never turns off again.
        "!has(oldSelf.limitMarkerTtl) || has(self.limitMarkerTtl)",
        "spec.limitMarkerTtl cannot be removed once set (the server cannot turn message TTLs "
        "off again); set another duration instead",
    ),
    cel(
        "!has(self.mirror) || !has(self.sources) || size(self.sources) == 0",
        "spec.mirror and spec.sources are mutually exclusive",
    ),
    cel(
        "!has(self.mirror) || !has(self.republish)",
        "a mirror bucket cannot republish: remove spec.republish or spec.mirror",
    ),
]


class KeyValueSpec(StreamBackedSpec):
    """Desired state of a Key-Value bucket. Fields left out take the clients' defaults."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": KEY_VALUE_RULES},
    )

    bucket: BucketName
    """Name of the bucket (letters, digits, '-' and '_'); its stream is KV_<bucket>. Immutable."""
    description: ShortText | None = None
    """Free text shown by `nats kv info`."""
    history: Annotated[int, Field(ge=1, le=MAX_HISTORY)] = 1
    """Values kept per key, the latest included (1 to 64)."""
    ttl: Duration | None = None
    """How long a value is kept, as a duration such as "24h"; unset for ever."""
    max_value_size: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1
    """Largest value accepted, in bytes; -1 for the server's limit."""
    max_bytes: Annotated[int, Field(ge=-1)] = -1
    """Bytes the bucket may hold; -1 for no limit. Writes are refused when full."""
    storage: Literal["file", "memory"] = Field("file", json_schema_extra=left_unset_in_crd())
    """Where values are kept. Cannot be changed after creation. Unset: file for a new bucket,
    whatever an existing (adopted) bucket has."""
    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    """Copies kept in a clustered JetStream (1 to 5)."""
    placement: Placement | None = None
    """Cluster and server tags the bucket is placed on."""
    republish: Republish | None = None
    """Republish every change to another subject. Source ">" (the default, as the clients
    store it) keeps the full subject ($KV.<bucket>.<key>) under the destination's wildcard;
    source $KV.<bucket>.> keeps only the key."""
    mirror: StreamSource | None = None
    """Make this bucket a read-only copy of another bucket (its name, with or without KV_).
    Cannot be added later."""
    sources: Annotated[list[StreamSource], Field(max_length=256)] = Field(default_factory=list)
    """Buckets whose keys are copied into this one (names with or without KV_). A source with
    subjectTransforms is taken as written, with its full stream name."""
    compression: bool = False
    """Compress file storage with S2."""
    limit_marker_ttl: Duration | None = None
    """How long a marker is kept when a key is removed by ttl, so watchers see the removal
    (server 2.11+). Turns per-message TTLs on, for good."""
    direct: bool = True
    """Let any replica answer reads (direct get), as the clients do by default."""
    metadata: Metadata = Field(default_factory=dict)
    """Free key/value pairs stored with the bucket (server 2.10+)."""


class KeyValueStatus(StreamBackedStatus):
    """Observed state of the bucket, written only by the operator."""

    values: int | None = None
    """Values stored now, older history and delete markers included."""
    keys: int | None = None
    """Distinct keys stored now, deleted keys' markers included."""
    history: int | None = None
    """Values kept per key, as the server has it."""
