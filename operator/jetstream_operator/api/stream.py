"""The Stream custom resource: one JetStream stream, described completely by its spec."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import Duration, ResourceModel
from .status import Condition

STREAM_NAME_PATTERN = r"^[^.*>\s]+$"
StreamName = Annotated[str, Field(min_length=1, max_length=255, pattern=STREAM_NAME_PATTERN)]
Limit = Annotated[int, Field(ge=-1)]


class StreamSpec(ResourceModel):
    """Desired state of a JetStream stream. Fields left out take the server's defaults."""

    name: StreamName
    """Name of the stream in NATS. Must not contain '.', '*', '>' or whitespace."""
    description: str | None = None
    """Free text shown by `nats stream info`."""
    subjects: list[str] = Field(default_factory=list)
    """Subjects the stream captures; wildcards allowed."""
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    """When messages go: at the limits, once all interested consumers acked, or at first ack."""
    storage: Literal["file", "memory"] = "file"
    """Where messages are kept. Cannot be changed after creation."""
    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    """Copies kept in a clustered JetStream (1 to 5)."""
    max_consumers: Limit = -1
    """How many consumers the stream may have; -1 for no limit."""
    max_msgs: Limit = -1
    """How many messages the stream keeps; -1 for no limit."""
    max_bytes: Limit = -1
    """How many bytes the stream keeps; -1 for no limit."""
    max_age: Duration = 0
    """Oldest message kept, as a duration such as "24h"; "0" or unset for no limit."""
    max_msg_size: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1
    """Largest message accepted, in bytes; -1 for the server's limit."""
    max_msgs_per_subject: Limit = -1
    """How many messages kept per subject; -1 for no limit."""
    discard: Literal["old", "new"] = "old"
    """What happens at a limit: drop the oldest messages, or refuse new ones."""
    duplicate_window: Duration | None = None
    """How long message ids are remembered to drop duplicates; the server's default is 2m."""
    no_ack: bool = False
    """Do not acknowledge publishes."""


class StreamStatus(ResourceModel):
    """Observed state of the stream, written only by the operator."""

    observed_generation: int | None = None
    """The metadata.generation the operator last acted on."""
    conditions: list[Condition] = Field(default_factory=list)
    """Ready, Reconciling and Stalled, following kstatus."""
    stream_name: str | None = None
    """The name of the stream in NATS that this resource manages."""
    messages: int | None = None
    """Messages stored now."""
    bytes: int | None = None
    """Bytes stored now."""
    first_sequence: int | None = None
    """Sequence of the oldest message stored."""
    last_sequence: int | None = None
    """Sequence of the newest message stored."""
    consumer_count: int | None = None
    """Consumers of the stream on the server."""
    replicas: int | None = None
    """Replicas the server reports for the stream."""
