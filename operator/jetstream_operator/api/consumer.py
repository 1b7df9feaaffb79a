"""The Consumer custom resource: one durable JetStream consumer, described completely by its spec.

Field names and value formats follow NACK's `jetstream.nats.io/v1beta2` Consumer, so its manifests
apply after changing only the apiVersion. Unlike NACK, ackWait is not defaulted to 1ns (which
redelivers at once): left out, it takes the server's 30s. Rules the API server can check are CEL
rules here, so a change the server would refuse fails at `kubectl apply` time with a hint, rather
than being retried forever while reconciling.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, JsonValue, WithJsonSchema

from .base import GO_DURATION_PATTERN, Duration, ResourceModel, cel, cel_is, cel_on
from .status import OperatorStatus
from .stream import ConnectionRef, LastStepDown, StreamName, Subject, connection_rules

# The server refuses '.', '*', '>', '/' and '\' in consumer names (isValidAssetName); whitespace
# would make the API subject ambiguous.
CONSUMER_NAME_PATTERN = r"^[^.*>/\\\s]+$"
ConsumerName = Annotated[str, Field(min_length=1, max_length=255, pattern=CONSUMER_NAME_PATTERN)]
# A Kubernetes object name (RFC 1123 subdomain), for streamRef.
ResourceName = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
]
# Push consumers deliver to one literal subject: no wildcards.
DeliverSubject = Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^*>\s]+$")]
# The server's own rule for priority group names (validGroupName).
PriorityGroup = Annotated[str, Field(pattern=r"^[a-zA-Z0-9/_=-]{1,16}$", max_length=16)]
ShortText = Annotated[str, Field(max_length=4096)]
SampleFrequency = Annotated[str, Field(pattern=r"^(100|[1-9]?[0-9])%?$", max_length=4)]
# Bounded on the wire so CEL rules comparing them stay cheap for the API server's cost budget.
BoundedDuration = Annotated[
    Duration, WithJsonSchema({"type": "string", "pattern": GO_DURATION_PATTERN, "maxLength": 64})
]
Timestamp = Annotated[
    AwareDatetime, WithJsonSchema({"type": "string", "format": "date-time", "maxLength": 64})
]

RECREATE_HINT = (
    "revert it, or set spec.recreateOnImmutableChange: true to delete and recreate the consumer "
    "(it then loses its position and unacknowledged messages)"
)
_OPTED_IN = "(has(self.recreateOnImmutableChange) && self.recreateOnImmutableChange)"


def _unchanged(field: str) -> str:
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


_IMMUTABLE_UNLESS_OPTED_IN = (
    "deliverPolicy",
    "optStartSeq",
    "optStartTime",
    "ackPolicy",
    "replayPolicy",
    "maxWaiting",
    "flowControl",
    "heartbeatInterval",
    "memStorage",
)


def _immutable_unless_opted_in(fields: tuple[str, ...]) -> JsonValue:
    """One rule for all of them: it reads the opt-in once where one per field read it each time
    (this mattered most while the rules ran on every status write, in the CRD). Only when it
    fails does the message expression name the fields that changed."""
    unchanged = " && ".join(f"({_unchanged(field)})" for field in fields)
    # Plain concatenation: a list with filter() and join() is beyond the API server's cost
    # estimate for a message.
    changed = " + ".join(f"(({_unchanged(field)}) ? '' : ', spec.{field}')" for field in fields)
    return {
        "rule": f"{_OPTED_IN} || ({unchanged})",
        "messageExpression": f"({changed}).substring(2) + "
        f"' cannot change on an existing consumer: {RECREATE_HINT}'",
        "message": "fields that cannot change on an existing consumer changed: " + RECREATE_HINT,
    }


def _set(field: str) -> str:
    """A field present with a non-zero value; zero values mean the same as absent."""
    return f"(has(self.{field}) && self.{field} != 0)"


_on, _policy = cel_on, cel_is


_PUSH = "has(self.deliverSubject)"
_HAS_FILTERS = "(has(self.filterSubjects) && size(self.filterSubjects) > 0)"
_HAS_GROUPS = "(has(self.priorityGroups) && size(self.priorityGroups) > 0)"
_HAS_BACKOFF = "(has(self.backoff) && size(self.backoff) > 0)"
_PRIORITY = "(has(self.priorityPolicy) && self.priorityPolicy != 'none')"

IDENTITY_RULES: list[JsonValue] = [
    cel(
        "self.durableName == oldSelf.durableName",
        "spec.durableName is immutable: create a new Consumer resource for the new name "
        "(renaming would orphan the old consumer)",
    ),
    cel(
        f"{_unchanged('streamName')} && {_unchanged('streamRef')}",
        "spec.streamName and spec.streamRef are immutable: create a new Consumer resource to "
        "consume another stream",
    ),
    *connection_rules("Consumer"),
]

IMMUTABLE_RULES: list[JsonValue] = [
    _immutable_unless_opted_in(_IMMUTABLE_UNLESS_OPTED_IN),
    cel(
        f"{_OPTED_IN} || has(self.deliverSubject) == has(oldSelf.deliverSubject)",
        "a consumer cannot switch between push (spec.deliverSubject set) and pull: "
        + RECREATE_HINT,
    ),
]

SPEC_RULES: list[JsonValue] = [
    cel(
        "has(self.streamName) != has(self.streamRef)",
        "set exactly one of spec.streamName (the stream's name in NATS) and spec.streamRef "
        "(the name of a Stream resource in this namespace)",
    ),
    cel(
        f"!has(self.filterSubject) || !{_HAS_FILTERS}",
        "spec.filterSubject and spec.filterSubjects are mutually exclusive: put every subject "
        "in filterSubjects",
    ),
    cel(
        f"{_policy('deliverPolicy', 'byStartSequence')} == has(self.optStartSeq)",
        "spec.optStartSeq goes with deliverPolicy: byStartSequence, which needs it: set both, "
        "or neither",
    ),
    cel(
        f"{_policy('deliverPolicy', 'byStartTime')} == has(self.optStartTime)",
        "spec.optStartTime goes with deliverPolicy: byStartTime, which needs it: set both, "
        "or neither",
    ),
    cel(
        f"!{_policy('deliverPolicy', 'lastPerSubject')} || has(self.filterSubject) || "
        f"{_HAS_FILTERS}",
        "deliverPolicy: lastPerSubject needs spec.filterSubject or spec.filterSubjects",
    ),
    cel(
        f"{_PUSH} || !(has(self.deliverGroup) || {_on('flowControl')} || "
        f"has(self.heartbeatInterval) || {_set('rateLimitBps')})",
        "spec.deliverGroup, flowControl, heartbeatInterval and rateLimitBps apply only to push "
        "consumers: set spec.deliverSubject, or remove them",
    ),
    cel(
        f"!{_PUSH} || !({_set('maxWaiting')} || {_set('maxRequestBatch')} || "
        f"has(self.maxRequestExpires) || {_set('maxRequestMaxBytes')})",
        "spec.maxWaiting, maxRequestBatch, maxRequestExpires and maxRequestMaxBytes apply only "
        "to pull consumers: remove them, or remove spec.deliverSubject",
    ),
    cel(
        f"!{_PUSH} || !({_PRIORITY} || {_HAS_GROUPS} || has(self.pinnedTtl))",
        "spec.priorityPolicy, priorityGroups and pinnedTtl apply only to pull consumers: "
        "remove them, or remove spec.deliverSubject",
    ),
    cel(
        f"!{_on('flowControl')} || has(self.heartbeatInterval)",
        "spec.flowControl needs spec.heartbeatInterval (for example 30s)",
    ),
    cel(
        f"{_PRIORITY} == {_HAS_GROUPS}",
        "spec.priorityPolicy and spec.priorityGroups go together: a policy other than none "
        "needs at least one group, and groups need a policy",
    ),
    cel(
        f"!has(self.pinnedTtl) || {_policy('priorityPolicy', 'pinned_client')}",
        "spec.pinnedTtl applies only to priorityPolicy: pinned_client",
    ),
    cel(
        f"!{_HAS_BACKOFF} || !has(self.maxDeliver) || self.maxDeliver <= 0 || "
        "size(self.backoff) <= self.maxDeliver",
        "spec.backoff has more entries than spec.maxDeliver allows deliveries: raise maxDeliver "
        "or shorten backoff",
    ),
    cel(
        f"!{_policy('ackPolicy', 'flow_control')} || ({_PUSH} && has(self.maxAckPending) && "
        "self.maxAckPending > 0 && !has(self.ackWait) && "
        f"!{_HAS_BACKOFF} && !(has(self.maxDeliver) && self.maxDeliver > 0) && "
        "(!has(self.heartbeatInterval) || self.heartbeatInterval == '1s'))",
        "ackPolicy: flow_control (nats-server 2.14+) needs a push consumer (spec.deliverSubject) "
        "and maxAckPending > 0, and takes no ackWait, backoff or maxDeliver; its heartbeat is 1s",
    ),
    cel(
        f"!{_PUSH} || !{_policy('ackPolicy', 'none')} || !{_set('maxAckPending')}",
        "spec.maxAckPending on a push consumer needs ackPolicy explicit or all",
    ),
]


class ConsumerSpec(ResourceModel):
    """Desired state of a durable JetStream consumer. Fields left out take the server's defaults."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={
            "x-kubernetes-validations": [*IDENTITY_RULES, *IMMUTABLE_RULES, *SPEC_RULES]
        },
    )

    durable_name: ConsumerName
    """Name of the consumer in NATS; no '.', '*', '>', '/', '\\' or whitespace. Immutable."""
    stream_name: StreamName | None = None
    """Name of the stream in NATS to consume. Set this or streamRef. Immutable."""
    stream_ref: ResourceName | None = None
    """A Stream resource in this namespace to consume (waits for it). Or streamName. Immutable."""
    description: ShortText | None = None
    """Free text shown by `nats consumer info`."""
    deliver_policy: Literal[
        "all", "last", "new", "byStartSequence", "byStartTime", "lastPerSubject"
    ] = "all"
    """Where delivery starts. Immutable unless recreateOnImmutableChange."""
    opt_start_seq: Annotated[int, Field(ge=1)] | None = None
    """First stream sequence to deliver, with deliverPolicy byStartSequence."""
    opt_start_time: Timestamp | None = None
    """Deliver messages from this time on (RFC 3339), with deliverPolicy byStartTime."""
    ack_policy: Literal["none", "all", "explicit", "flow_control"] = "explicit"
    """How messages are acknowledged (flow_control: acks by flow control, push only, nats-server
    2.14+). Immutable unless recreateOnImmutableChange."""
    ack_wait: BoundedDuration | None = None
    """Wait for an ack this long before redelivering (default 30s; backoff[0] if backoff)."""
    max_deliver: Annotated[int, Field(ge=-1)] | None = None
    """How many times a message is delivered at most; -1 (or unset) for no limit."""
    backoff: Annotated[list[BoundedDuration], Field(max_length=64)] = Field(default_factory=list)
    """Redelivery delays, one per attempt (the last one repeats); needs maxDeliver > entries."""
    filter_subject: Subject | None = None
    """Deliver only messages on this subject (wildcards allowed)."""
    filter_subjects: Annotated[list[Subject], Field(max_length=256)] = Field(default_factory=list)
    """Deliver only messages on these subjects; exclusive with filterSubject."""
    replay_policy: Literal["instant", "original"] = "instant"
    """Replay at once, or at the original pace. Immutable unless recreateOnImmutableChange."""
    sample_freq: SampleFrequency | None = None
    """Percentage of acks sampled into advisories, such as "50%" or "50"."""
    rate_limit_bps: Annotated[int, Field(ge=0)] | None = None
    """Delivery rate limit in bits per second (push only)."""
    max_ack_pending: Annotated[int, Field(ge=-1)] | None = None
    """Most unacked messages outstanding; -1: no limit. Default 1000 or the stream's limit."""
    max_waiting: Annotated[int, Field(ge=0)] | None = None
    """Most pull requests waiting (pull only; default 512). Immutable unless opted in."""
    deliver_subject: DeliverSubject | None = None
    """Subject to push messages to; makes this a push consumer. Unset: a pull consumer."""
    deliver_group: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """Queue group that shares the pushed messages (push only)."""
    flow_control: bool = False
    """Flow control (push only; needs heartbeatInterval). Immutable unless opted in."""
    heartbeat_interval: BoundedDuration | None = None
    """Idle heartbeat interval (push only). Immutable unless recreateOnImmutableChange."""
    headers_only: bool = False
    """Deliver only the headers, with the payload size in Nats-Msg-Size."""
    max_request_batch: Annotated[int, Field(ge=0)] | None = None
    """Largest batch a pull request may ask for (pull only)."""
    max_request_expires: BoundedDuration | None = None
    """Longest expiry a pull request may ask for (pull only)."""
    max_request_max_bytes: Annotated[int, Field(ge=0)] | None = None
    """Largest max_bytes a pull request may ask for (pull only)."""
    inactive_threshold: BoundedDuration | None = None
    """The server deletes the consumer after this long idle (it is then recreated). Unset: never."""
    replicas: Annotated[int, Field(ge=0, le=5)] | None = None
    """Replicas of the consumer's state; unset or 0 follows the stream."""
    mem_storage: bool = False
    """Keep the consumer's state in memory. Immutable unless recreateOnImmutableChange."""
    metadata: dict[
        Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=4096)]
    ] = Field(default_factory=dict)
    """Free key/value pairs stored with the consumer (server 2.10+)."""
    pause_until: Timestamp | None = None
    """Deliver nothing until this time (RFC 3339, server 2.11+); remove to resume."""
    priority_policy: Literal["none", "pinned_client", "overflow", "prioritized"] = "none"
    """How pull requests of a priority group are served (pull only, server 2.11+)."""
    pinned_ttl: BoundedDuration | None = None
    """Idle time before another client is pinned (default 2m); priorityPolicy pinned_client."""
    priority_groups: Annotated[list[PriorityGroup], Field(max_length=16)] = Field(
        default_factory=list
    )
    """Priority groups (one or more, distinct), with a priorityPolicy other than none."""
    deletion_policy: Literal["Delete", "Retain"] | None = None
    """On deleting the resource: Delete the consumer (default) or Retain it."""
    prevent_delete: bool = False
    """NACK's spelling of deletionPolicy: Retain."""
    prevent_update: bool = False
    """NACK's switch to create the consumer but never update it afterwards."""
    adoption: Literal["Never", "IfUnowned"] = "Never"
    """Take over a consumer that already exists and has no owner (IfUnowned), or never do."""
    recreate_on_immutable_change: bool = False
    """Apply immutable changes by delete+recreate; loses the position and unacked messages."""
    connection_ref: ConnectionRef | None = None
    """NatsConnection in this namespace to use; unset for the operator's default connection."""
    cluster_connection_ref: ConnectionRef | None = None
    """ClusterNatsConnection to use, where it selects this namespace (instead of
    connectionRef)."""

    def retains_consumer(self) -> bool:
        """Whether deleting the resource must leave the consumer in NATS."""
        if self.deletion_policy is not None:
            return self.deletion_policy == "Retain"
        return self.prevent_delete

    def is_push(self) -> bool:
        """Push consumers deliver to a subject; pull consumers wait for requests."""
        return self.deliver_subject is not None


class LastReset(ResourceModel):
    """The last reset requested with the jetstream-operator.io/reset annotation."""

    token: str
    """The annotation's value; a reset with this token is never repeated."""
    sequence: int | None = None
    """The stream sequence the consumer delivers next after the reset."""
    method: Literal["ResetAPI", "Recreated"] | None = None
    """ResetAPI: moved in place by the server (nats-server 2.14 and later). Recreated: deleted
    and created again at that sequence, on older servers or where the API refused."""
    time: str | None = None
    """When the reset ran (RFC 3339)."""
    error: str | None = None
    """Why it was not done, if it was not."""


class ConsumerStatus(OperatorStatus):
    """Observed state of the consumer, written only by the operator."""

    stream_name: str | None = None
    """The stream in NATS the consumer reads."""
    consumer_name: str | None = None
    """The name of the consumer in NATS that this resource manages."""
    connection_ref: str | None = None
    """The connection the object was made through: the spec's connectionRef, "" for the
    operator's default connection, `ClusterNatsConnection/NAME` for a clusterConnectionRef; a
    spec naming another is refused, as the object would be left behind."""
    num_pending: int | None = None
    """Messages matching the filter not yet delivered."""
    num_ack_pending: int | None = None
    """Messages delivered and not yet acknowledged."""
    num_redelivered: int | None = None
    """Messages delivered more than once and not yet acknowledged."""
    num_waiting: int | None = None
    """Pull requests waiting (pull consumers)."""
    delivered_stream_seq: int | None = None
    """Stream sequence of the last message delivered."""
    delivered_consumer_seq: int | None = None
    """Consumer sequence of the last message delivered."""
    ack_floor_stream_seq: int | None = None
    """Stream sequence below which every message is acknowledged."""
    ack_floor_consumer_seq: int | None = None
    """Consumer sequence below which every message is acknowledged."""
    paused: bool | None = None
    """Whether delivery is paused (pauseUntil in the future)."""
    leader: str | None = None
    """Server currently leading the consumer."""
    push_bound: bool | None = None
    """Whether a subscriber listens on the deliver subject (push consumers)."""
    last_reset: LastReset | None = None
    """The last reset handled (the jetstream-operator.io/reset annotation)."""
    last_step_down: LastStepDown | None = None
    """The last leader step-down handled (the jetstream-operator.io/step-down annotation)."""
