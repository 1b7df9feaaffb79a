"""The Stream custom resource: one JetStream stream, described completely by its spec.

Field names and value formats follow NACK's `jetstream.nats.io/v1beta2` Stream, so its manifests
apply after changing only the apiVersion. Rules the API server can check are CEL rules here, so
bad input is refused at `kubectl apply` time rather than discovered while reconciling.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, ConfigDict, Field, JsonValue

from .base import Duration, ResourceModel, cel, cel_is, cel_on, left_unset_in_crd
from .selector import LabelSelector
from .status import OperatorStatus

STREAM_NAME_PATTERN = r"^[^.*>/\\\s]+$"
StreamName = Annotated[str, Field(min_length=1, max_length=255, pattern=STREAM_NAME_PATTERN)]
Subject = Annotated[str, Field(min_length=1, max_length=1024)]
Limit = Annotated[int, Field(ge=-1)]
ShortText = Annotated[str, Field(max_length=4096)]
Metadata = dict[Annotated[str, Field(max_length=256)], Annotated[str, Field(max_length=4096)]]


class SubjectTransform(ResourceModel):
    """Rewrites subjects matching `source` into `dest`."""

    source: Subject
    """Subject filter the transform applies to."""
    dest: Subject
    """Destination subject, using {{wildcard(n)}} for tokens of the source."""


class SourceConsumer(ResourceModel):
    """A durable consumer on the origin that the copy uses (nats-server 2.14+)."""

    name: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^.*>/\\\s]+$")]
    """Name of the durable consumer on the origin stream."""
    deliver_subject: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^[^*>\s]+$")]
    """Literal subject the consumer delivers the copy to."""


class StreamSource(ResourceModel):
    """Another stream to copy messages from (the shape of NACK's mirror and sources)."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.consumer) || !(has(self.optStartSeq) && self.optStartSeq > 0 || "
                    "has(self.optStartTime) || has(self.filterSubject))",
                    "a copy through a durable consumer starts and filters as that consumer "
                    "does: remove optStartSeq, optStartTime and filterSubject",
                )
            ]
        },
    )

    name: StreamName
    """Name of the origin stream."""
    opt_start_seq: Annotated[int, Field(ge=0)] | None = None
    """Start copying at this sequence of the origin."""
    opt_start_time: AwareDatetime | None = None
    """Start copying at messages from this time on (RFC 3339)."""
    filter_subject: Subject | None = None
    """Copy only messages on this subject."""
    subject_transforms: Annotated[list[SubjectTransform], Field(max_length=32)] = Field(
        default_factory=list
    )
    """Subject filters with rewrites; replaces filterSubject when set."""
    external_api_prefix: Annotated[str, Field(max_length=255)] | None = None
    """JetStream API prefix of the origin's domain or account, e.g. "$JS.hub.API"."""
    external_deliver_prefix: Annotated[str, Field(max_length=255)] | None = None
    """Delivery subject prefix used for the copy across domains or accounts."""
    consumer: SourceConsumer | None = None
    """Copy through this durable consumer on the origin (nats-server 2.14+; older servers
    refuse the request)."""


class Placement(ResourceModel):
    """Where the stream's replicas live in a super-cluster."""

    cluster: Annotated[str, Field(max_length=255)] | None = None
    """Cluster to place the stream in."""
    tags: Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=32)] = Field(
        default_factory=list
    )
    """Servers must carry all these tags."""


class Republish(ResourceModel):
    """Republishes every stored message to another subject, for lightweight fan-out."""

    source: Subject = ">"
    """Subjects of the stream to republish."""
    destination: Subject
    """Where to republish them."""
    headers_only: bool = False
    """Republish only the headers, not the payload."""
    nack_headers_only: bool = Field(default=False, alias="headers_only")
    """NACK's spelling of headersOnly, accepted so NACK manifests apply unchanged."""

    def only_headers(self) -> bool:
        return self.headers_only or self.nack_headers_only


class ConsumerLimits(ResourceModel):
    """Defaults and ceilings for the stream's consumers."""

    inactive_threshold: Duration | None = None
    """Longest inactivity before an ephemeral consumer is removed."""
    max_ack_pending: Annotated[int, Field(ge=-1)] | None = None
    """Largest maxAckPending a consumer of this stream may have."""


def _unchanged(field: str) -> str:
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


def _never_turned_off(field: str) -> str:
    return f"!(has(oldSelf.{field}) && oldSelf.{field}) || (has(self.{field}) && self.{field})"


ConnectionRef = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]


def connection_rules(kind: str) -> list[JsonValue]:
    """A resource names at most one connection, and keeps it: moved, its object would be left
    behind on the old system."""
    return [
        cel(
            f"({_unchanged('connectionRef')}) && ({_unchanged('clusterConnectionRef')})",
            "spec.connectionRef and spec.clusterConnectionRef are immutable: the object would be "
            f"left behind on the old system; create a new {kind} resource for the other "
            "connection",
        ),
        cel(
            "!has(self.connectionRef) || !has(self.clusterConnectionRef)",
            "spec.connectionRef (a NatsConnection of this namespace) and "
            "spec.clusterConnectionRef (a ClusterNatsConnection) are mutually exclusive: name "
            "one of them",
        ),
    ]


def storage_rule() -> JsonValue:
    return cel(
        # Left out, storage follows the object in NATS; written later, it must be what was
        # there: the old value, or file (the default of an object this operator created).
        "!has(self.storage) || self.storage == (has(oldSelf.storage) ? oldSelf.storage : 'file')",
        "spec.storage cannot change after creation: create a new one and move the data",
    )


def mirror_rule() -> JsonValue:
    return cel(
        "!has(self.mirror) || (has(oldSelf.mirror) && self.mirror == oldSelf.mirror)",
        "spec.mirror cannot be added or changed after creation; it may only be removed "
        "(which promotes the mirror to a normal stream)",
    )


NamespaceName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]


class StreamBackedSpec(ResourceModel):
    """What every kind holding one JetStream stream (Stream, KeyValue, ObjectStore) has in common:
    how the resource relates to the object in NATS, not what the object holds."""

    deletion_policy: Literal["Delete", "Retain", "DeleteIfEmpty"] | None = None
    """On deleting the resource: Delete the object in NATS and its data (default), Retain
    them, or DeleteIfEmpty: delete only once it holds no message and no consumer that no
    resource manages; until then the resource stays, saying so (reason NotEmpty)."""
    prevent_delete: bool = False
    """NACK's spelling of deletionPolicy: Retain."""
    prevent_update: bool = False
    """NACK's switch to create the object but never update it afterwards."""
    adoption: Literal["Never", "IfUnowned"] = "Never"
    """Take over an object that already exists in NATS and has no owner (IfUnowned), or never."""
    connection_ref: ConnectionRef | None = None
    """NatsConnection in this namespace to use; unset for the operator's default connection."""
    cluster_connection_ref: ConnectionRef | None = None
    """ClusterNatsConnection to use, where it selects this namespace (instead of
    connectionRef)."""
    shared_with: Annotated[list[NamespaceName], Field(max_length=256)] = Field(default_factory=list)
    """Namespaces whose Consumers, mirrors and sources may read this stream through a
    connection shared under a tenancy (docs/tenancy.md); other namespaces are refused."""
    shared_with_selector: LabelSelector | None = None
    """Namespaces, by their labels, that may read this stream as those in sharedWith may
    (`{}`: every namespace on the connection)."""

    def deletes_only_empty(self) -> bool:
        return self.deletion_policy == "DeleteIfEmpty"

    def retains_data(self) -> bool:
        """Whether deleting the resource must leave the object in NATS."""
        if self.deletion_policy is not None:
            return self.deletion_policy == "Retain"
        return self.prevent_delete


STREAM_RULES: list[JsonValue] = [
    cel(
        "self.name == oldSelf.name",
        "spec.name is immutable: create a new Stream resource for the new name "
        "(renaming would orphan the old stream)",
    ),
    storage_rule(),
    cel(
        "!has(self.retention) || "
        "(self.retention == 'workqueue') == (has(oldSelf.retention) && "
        "oldSelf.retention == 'workqueue')",
        "spec.retention cannot change to or from workqueue; only limits <-> interest is allowed",
    ),
    mirror_rule(),
    cel(_unchanged("firstSequence"), "spec.firstSequence applies only when the stream is created"),
    cel(_never_turned_off("sealed"), "a sealed stream cannot be unsealed"),
    cel(_never_turned_off("denyDelete"), "spec.denyDelete cannot be turned off once on"),
    cel(_never_turned_off("denyPurge"), "spec.denyPurge cannot be turned off once on"),
    cel(_never_turned_off("allowMsgTtl"), "spec.allowMsgTtl cannot be turned off once on"),
    cel(
        _never_turned_off("allowMsgSchedules"),
        "spec.allowMsgSchedules cannot be turned off once on",
    ),
    cel(
        "!has(self.allowMsgCounter) || "
        "self.allowMsgCounter == (has(oldSelf.allowMsgCounter) && oldSelf.allowMsgCounter)",
        "spec.allowMsgCounter cannot change after creation",
    ),
    cel(_unchanged("persistMode"), "spec.persistMode cannot change after creation"),
    *connection_rules("Stream"),
]


_on, _is = cel_on, cel_is
_MIRROR = "has(self.mirror)"
_SOURCES = "(has(self.sources) && size(self.sources) > 0)"

# Combinations the server refuses whatever else the spec says (checkStreamCfg), refused here
# with what to write instead; see docs/server-rewrites.md.
SERVER_RULES: list[JsonValue] = [
    cel(
        f"!({_on('denyPurge')} && {_on('allowRollup')})",
        "spec.allowRollup needs the purge permission: remove spec.denyPurge or spec.allowRollup",
    ),
    cel(
        f"!{_on('allowMsgSchedules')} || !({_on('denyPurge')} || {_is('discard', 'new')} || "
        f"{_MIRROR} || {_SOURCES})",
        "spec.allowMsgSchedules needs rollups (the server turns allowRollup on, which needs the "
        "purge permission) and discard: old, and cannot go with a mirror or sources: remove "
        "spec.denyPurge, discard: new, spec.mirror or spec.sources, or allowMsgSchedules",
    ),
    cel(
        f"!{_on('allowMsgCounter')} || !({_is('discard', 'new')} || {_on('allowMsgTtl')} || "
        f"{_on('allowMsgSchedules')} || {_MIRROR} || "
        "(has(self.retention) && self.retention != 'limits'))",
        "spec.allowMsgCounter needs retention: limits and discard: old, and cannot go with "
        "allowMsgTtl, allowMsgSchedules or a mirror: remove those, or allowMsgCounter",
    ),
    cel(
        f"!{_MIRROR} || !({_on('allowAtomicPublish')} || {_on('allowBatchPublish')} || "
        "has(self.subjectDeleteMarkerTtl) || "
        "(has(self.firstSequence) && self.firstSequence > 0))",
        "a mirror copies its origin's sequence: spec.allowAtomicPublish, allowBatchPublish, "
        "subjectDeleteMarkerTtl and firstSequence do not apply to it; remove them",
    ),
    cel(
        f"!{_is('persistMode', 'async')} || !({_is('storage', 'memory')} || "
        f"(has(self.replicas) && self.replicas > 1) || {_on('allowAtomicPublish')})",
        "persistMode: async needs file storage, replicas: 1 and no allowAtomicPublish",
    ),
]

SPEC_RULES: list[JsonValue] = [
    cel(
        "!has(self.mirror) || !has(self.subjects) || size(self.subjects) == 0",
        "a mirror takes its subjects from the origin: remove spec.subjects or spec.mirror",
    ),
    cel(
        "!has(self.mirror) || !has(self.sources) || size(self.sources) == 0",
        "spec.mirror and spec.sources are mutually exclusive",
    ),
    cel(
        "!has(self.discardPerSubject) || !self.discardPerSubject || "
        "(self.discard == 'new' && has(self.maxMsgsPerSubject) && self.maxMsgsPerSubject > 0)",
        "spec.discardPerSubject needs discard: new and maxMsgsPerSubject > 0",
    ),
    cel(
        "!has(self.subjectDeleteMarkerTtl) || "
        "(has(self.allowMsgTtl) && self.allowMsgTtl && has(self.allowRollup) && self.allowRollup)",
        "spec.subjectDeleteMarkerTtl needs allowMsgTtl: true and allowRollup: true",
    ),
    cel(
        "!has(self.mirrorDirect) || !self.mirrorDirect || has(self.mirror)",
        "spec.mirrorDirect applies only to a mirror",
    ),
]


class StreamSpec(StreamBackedSpec):
    """Desired state of a JetStream stream. Fields left out take the server's defaults."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": [*STREAM_RULES, *SPEC_RULES, *SERVER_RULES]},
    )

    name: StreamName
    """Name of the stream in NATS. Must not contain '.', '*', '>' or whitespace. Immutable."""
    description: ShortText | None = None
    """Free text shown by `nats stream info`."""
    subjects: Annotated[list[Subject], Field(max_length=1000)] = Field(default_factory=list)
    """Subjects the stream captures; wildcards allowed. Empty: the stream's own name."""
    retention: Literal["limits", "interest", "workqueue"] = Field(
        "limits", json_schema_extra=left_unset_in_crd()
    )
    """When messages go: at the limits, once all interested consumers acked, or at first ack.
    Unset: limits, or workqueue when the existing stream has it."""
    storage: Literal["file", "memory"] = Field("file", json_schema_extra=left_unset_in_crd())
    """Where messages are kept. Cannot be changed after creation. Unset: file for a new stream,
    whatever an existing (adopted) stream has."""
    replicas: Annotated[int, Field(ge=1, le=5)] = 1
    """Copies kept in a clustered JetStream (1 to 5)."""
    max_consumers: Limit = -1
    """How many consumers the stream may have; -1 for no limit."""
    max_msgs: Limit = -1
    """How many messages the stream keeps; -1 for no limit."""
    max_bytes: Limit = -1
    """How many bytes the stream keeps; -1 for no limit."""
    max_age: Duration | None = None
    """Oldest message kept, as a duration such as "24h"; "0" or unset for no limit."""
    max_msg_size: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1
    """Largest message accepted, in bytes; -1 for the server's limit."""
    max_msgs_per_subject: Limit = -1
    """How many messages kept per subject; -1 for no limit."""
    discard: Literal["old", "new"] = "old"
    """What happens at a limit: drop the oldest messages, or refuse new ones."""
    discard_per_subject: bool = False
    """Apply discard: new per subject (needs maxMsgsPerSubject > 0)."""
    duplicate_window: Duration | None = None
    """How long message ids are remembered to drop duplicates. Unset: the server's default (2m,
    or maxAge when shorter; a mirror keeps none, sources take the server's choice)."""
    no_ack: bool = False
    """Do not acknowledge publishes."""
    placement: Placement | None = None
    """Cluster and server tags the stream is placed on."""
    mirror: StreamSource | None = None
    """Make this stream a read-only copy of another. Cannot be added later; may be removed."""
    sources: Annotated[list[StreamSource], Field(max_length=256)] = Field(default_factory=list)
    """Streams whose messages are copied into this one."""
    compression: Literal["none", "s2"] = "none"
    """Compress file storage (applies to new blocks)."""
    first_sequence: Annotated[int, Field(ge=0)] | None = None
    """First sequence number of a new stream. Used only at creation."""
    subject_transform: SubjectTransform | None = None
    """Rewrite subjects of incoming messages before storing them."""
    republish: Republish | None = None
    """Republish stored messages to another subject."""
    sealed: bool = False
    """Seal the stream: no more messages, deletes or purges. Cannot be undone. The server then
    stores maxAge 0, discard new, denyDelete, denyPurge and no rollups; a new stream is created
    open and sealed right after."""
    deny_delete: bool = False
    """Refuse deleting single messages. Cannot be turned off."""
    deny_purge: bool = False
    """Refuse purging the stream. Cannot be turned off."""
    allow_rollup: bool = False
    """Allow the Nats-Rollup header to replace a subject's or the stream's content."""
    allow_direct: bool = False
    """Allow direct get of messages, answered by any replica."""
    mirror_direct: bool = False
    """Let a mirror answer direct gets for its origin (the server copies the origin's
    allowDirect when it can see the origin)."""
    allow_msg_ttl: bool = False
    """Allow per-message TTLs (Nats-TTL header, server 2.11+). Cannot be turned off."""
    subject_delete_marker_ttl: Duration | None = None
    """Leave a delete marker for this long when limits remove a subject's last message (2.11+)."""
    allow_msg_counter: bool = Field(False, json_schema_extra=left_unset_in_crd())
    """Make the stream a distributed counter (server 2.12+). Set only at creation. Unset:
    whatever an existing stream has."""
    allow_atomic_publish: bool = False
    """Allow atomic batch publishes (server 2.12+)."""
    allow_batch_publish: bool = False
    """Allow fast (non-atomic) batch publishes (server 2.14+; older servers refuse it)."""
    allow_msg_schedules: bool = False
    """Allow scheduled messages (server 2.12+; turns allowRollup on). Cannot be turned off."""
    persist_mode: Literal["default", "async"] | None = None
    """File store write mode (server 2.12+): default (synced) or async. Set only at creation."""
    consumer_limits: ConsumerLimits | None = None
    """Defaults and ceilings applied to the stream's consumers."""
    metadata: Metadata = Field(default_factory=dict)
    """Free key/value pairs stored with the stream (server 2.10+)."""


class ReplicaState(ResourceModel):
    """One replica of a clustered stream, as the leader sees it."""

    name: str
    """Server name of the replica."""
    current: bool
    """Whether the replica is up to date."""
    active: str | None = None
    """How long ago the leader last heard from it."""
    lag: int | None = None
    """Operations the replica is behind."""


class LastPurge(ResourceModel):
    """The last purge requested with the jetstream-operator.io/purge annotation."""

    token: str
    """The annotation's value; a purge with this token is never repeated."""
    purged: int | None = None
    """Messages removed."""
    subject: str | None = None
    """Subject the purge was limited to."""
    keep: int | None = None
    """Messages kept at the end of the stream (or subject)."""
    time: str | None = None
    """When the purge ran (RFC 3339)."""
    error: str | None = None
    """Why NATS refused the purge, if it did."""


class LastStepDown(ResourceModel):
    """The last leader step-down requested with the jetstream-operator.io/step-down
    annotation."""

    token: str
    """The annotation's value; a step-down with this token is never repeated."""
    from_leader: str | None = None
    """The server that led the stream (or consumer) before."""
    to_leader: str | None = None
    """The server leading it after (None: no new leader seen within a few seconds)."""
    time: str | None = None
    """When the step-down was asked (RFC 3339)."""
    error: str | None = None
    """Why NATS refused it, if it did."""


class StreamBackedStatus(OperatorStatus):
    """What the status of every kind holding one JetStream stream shows."""

    stream_name: str | None = None
    """The name of the stream in NATS that this resource manages."""
    connection_ref: str | None = None
    """The connection the object was made through: the spec's connectionRef, "" for the
    operator's default connection, `ClusterNatsConnection/NAME` for a clusterConnectionRef; a
    spec naming another is refused, as the object would be left behind."""
    bytes: int | None = None
    """Bytes stored now."""
    size: str | None = None
    """The same for people ("1.5 MiB"), for `kubectl get`, whose columns cannot format one."""
    replicas: int | None = None
    """Replicas the server reports for the stream."""
    cluster: str | None = None
    """Cluster the stream lives in."""
    leader: str | None = None
    """Server currently leading the stream."""
    replica_states: list[ReplicaState] = Field(default_factory=list)
    """Each follower replica: current or lagging."""
    last_purge: LastPurge | None = None
    """The last purge handled (the jetstream-operator.io/purge annotation)."""
    last_step_down: LastStepDown | None = None
    """The last leader step-down handled (the jetstream-operator.io/step-down annotation)."""


class StreamStatus(StreamBackedStatus):
    """Observed state of the stream, written only by the operator."""

    messages: int | None = None
    """Messages stored now."""
    first_sequence: int | None = None
    """Sequence of the oldest message stored."""
    last_sequence: int | None = None
    """Sequence of the newest message stored."""
    consumer_count: int | None = None
    """Consumers of the stream on the server."""
