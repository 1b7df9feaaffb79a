"""NatsAccount and NatsUser: NATS accounts the platform team declares, and the users teams
declare in them, for a NATS system in operator mode (decentralized JWT authentication).

A NatsAccount is cluster-scoped: it signs with the operator's signing key, which only the
platform team's namespace holds, and it says which namespaces may have users in it. A
NatsUser lives in its team's namespace, and its permissions follow from what it references."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, JsonValue

from .base import Duration, ResourceModel, cel
from .connection import SecretKey, SecretName
from .consumer import BoundedDuration, ResourceName
from .selector import LabelSelector
from .status import OperatorStatus
from .stream import ConnectionRef, Subject

Limit = Annotated[int, Field(ge=-1)]
"""-1: no limit, as NATS says it."""
PublicKey = Annotated[str, Field(max_length=64)]
SubjectTemplate = Annotated[str, Field(min_length=1, max_length=255)]


class SecretKeyRef(ResourceModel):
    """One key of a Secret in the operator's namespace."""

    secret_name: SecretName
    key: SecretKey = "seed"


class JetStreamLimits(ResourceModel):
    """What the account's streams may hold; -1: no limit."""

    memory_storage: Limit = -1
    """Bytes in memory over all the account's streams."""
    file_storage: Limit = -1
    """Bytes on disk over all the account's streams."""
    streams: Limit = -1
    consumers: Limit = -1
    max_ack_pending: Limit = -1
    """The most unacknowledged messages one consumer may have."""
    memory_max_stream_bytes: Limit = 0
    """The most bytes one memory stream may declare (0: no limit)."""
    file_max_stream_bytes: Limit = 0
    """The most bytes one file stream may declare (0: no limit)."""
    max_bytes_required: bool = False
    """Refuse streams that declare no max bytes, so storage limits can be planned."""


class TierLimits(JetStreamLimits):
    """The limits of the streams with one replica count."""

    replicas: Annotated[int, Field(ge=1, le=5)]


class AccountJetStream(JetStreamLimits):
    """JetStream for the account: its limits, and optionally per replica count."""

    tiers: Annotated[list[TierLimits], Field(max_length=5)] = Field(default_factory=list)
    """Limits per replica count (NATS's tiers R1, R3, ...): a stream counts against its
    tier's. Set, they replace the limits above, as NATS reads them."""


class ConnectionLimits(ResourceModel):
    """Client limits of the account; -1: no limit."""

    connections: Limit = -1
    leaf_nodes: Limit = -1
    subscriptions: Limit = -1
    payload: Limit = -1
    """The largest message one client may publish, in bytes."""
    data: Limit = -1
    """Bytes a client may have in flight."""


class Export(ResourceModel):
    """Subjects other accounts may import from this one."""

    subject: Subject
    type: Literal["stream", "service"] = "stream"
    name: Annotated[str, Field(max_length=255)] | None = None


class Import(ResourceModel):
    """Subjects of another account's export, made available in this one."""

    account: PublicKey
    """The exporting account's public key ("A...")."""
    subject: Subject
    type: Literal["stream", "service"] = "stream"
    local_subject: Subject | None = None
    name: Annotated[str, Field(max_length=255)] | None = None


ACCOUNT_RULES: list[JsonValue] = [
    cel(
        "!has(self.userSubjectPrefixes) || self.userSubjectPrefixes.all(p, "
        "p.contains('{namespace}') && !p.matches('[ \\t*>]'))",
        "userSubjectPrefixes: each needs {namespace} and no spaces or wildcards, or every "
        "namespace's users would share the subjects: write, for example, '{namespace}.'",
    ),
]


class NatsAccountSpec(ResourceModel):
    """An account in a NATS system run in operator mode."""

    model_config = ConfigDict(
        **ResourceModel.model_config, json_schema_extra={"x-kubernetes-validations": ACCOUNT_RULES}
    )

    system_connection_ref: ConnectionRef
    """The ClusterNatsConnection that authenticates as a user of the system account: through
    it the account's JWT reaches the servers' resolver ($SYS.REQ.CLAIMS.UPDATE)."""
    operator_signing_key: SecretKeyRef
    """The operator's signing key seed ("SO..."), in a Secret of the operator's namespace
    labelled jetstream-operator.io/connection-secret=true."""
    namespace_selector: LabelSelector | None = None
    """The namespaces whose NatsUsers this account issues; absent: none, `{}`: every one."""
    user_subject_prefixes: Annotated[list[SubjectTemplate], Field(max_length=32)] = Field(
        default_factory=list
    )
    """The explicit publish and subscribe subjects of a namespace's NatsUsers start with one of
    these (`{namespace}` replaced); empty: any subject. Subjects of referenced streams,
    consumers and buckets are always allowed."""
    jetstream: AccountJetStream | None = None
    """Absent: JetStream is not enabled for the account."""
    limits: ConnectionLimits = Field(default_factory=ConnectionLimits)
    """Connections, subscriptions and message sizes of the account's clients."""
    exports: Annotated[list[Export], Field(max_length=256)] = Field(default_factory=list)
    """Subjects this account offers other accounts."""
    imports: Annotated[list[Import], Field(max_length=256)] = Field(default_factory=list)
    """Subjects of other accounts' exports made available here."""


class NatsAccountStatus(OperatorStatus):
    """Where the account stands in NATS; no seed or key material but public keys."""

    public_key: PublicKey | None = None
    """The account's public key ("A..."), as clients and imports name it."""
    signing_key: PublicKey | None = None
    """The public key that signs its users."""
    keys_secret: str | None = None
    """The Secret in the operator's namespace holding the account's seeds and the operator's
    own user (key operator.creds), which a ClusterNatsConnection names with spec.account."""
    pushed_at: str | None = None
    """When the resolver last accepted the account's JWT."""
    server_answer: Annotated[str, Field(max_length=1024)] | None = None
    """The resolver's answer to the last push."""
    revoked_users: int = 0
    """Users revoked in the account's JWT."""


class StreamGrant(ResourceModel):
    """A Stream resource of the namespace, and what the user may do with it."""

    name: ResourceName
    access: Literal["Read", "Publish", "ReadWrite"] = "ReadWrite"
    """Read: consume and read messages; Publish: publish to its subjects; ReadWrite: both."""


class ConsumerGrant(ResourceModel):
    """A Consumer resource of the namespace the user pulls from (or is delivered to)."""

    name: ResourceName


class BucketGrant(ResourceModel):
    """A KeyValue or ObjectStore resource of the namespace."""

    name: ResourceName
    access: Literal["Read", "ReadWrite"] = "Read"


USER_RULES: list[JsonValue] = [
    cel(
        "!has(self.rotationPeriod) || (has(self.validFor) && self.validFor != '0')",
        "spec.rotationPeriod needs spec.validFor: the old credentials stay valid until they "
        "expire, which is what makes the rotation gapless",
    ),
    cel("self.accountRef == oldSelf.accountRef", "spec.accountRef is immutable"),
]


class NatsUserSpec(ResourceModel):
    """A user of a NatsAccount, for an application of this namespace."""

    model_config = ConfigDict(
        **ResourceModel.model_config, json_schema_extra={"x-kubernetes-validations": USER_RULES}
    )

    account_ref: ConnectionRef
    """The NatsAccount, which must select this namespace."""
    streams: Annotated[list[StreamGrant], Field(max_length=256)] = Field(default_factory=list)
    """Stream resources of this namespace: publish to their subjects, read them, or both."""
    consumers: Annotated[list[ConsumerGrant], Field(max_length=256)] = Field(default_factory=list)
    """Consumer resources of this namespace to pull from (next message, ack, flow control
    subjects only), or to be delivered to (a push consumer's deliver subject)."""
    key_values: Annotated[list[BucketGrant], Field(max_length=256)] = Field(default_factory=list)
    """KeyValue resources of this namespace, to read or to read and write."""
    object_stores: Annotated[list[BucketGrant], Field(max_length=256)] = Field(default_factory=list)
    """ObjectStore resources of this namespace, to read or to read and write."""
    publish: Annotated[list[Subject], Field(max_length=256)] = Field(default_factory=list)
    """More subjects to publish to, within the account's userSubjectPrefixes."""
    subscribe: Annotated[list[Subject], Field(max_length=256)] = Field(default_factory=list)
    """More subjects to subscribe to, within the account's userSubjectPrefixes."""
    allow_responses: bool = False
    """Reply once to each request received (a service), without publish rights on replies."""
    valid_for: BoundedDuration | None = None
    """How long each issued credential is valid; absent: until revoked."""
    rotation_period: BoundedDuration | None = None
    """Issue new credentials this long after the last ones; the old ones stay valid until
    they expire, so clients have validFor - rotationPeriod to pick the new ones up."""
    secret_name: SecretName | None = None
    """The Secret to write (keys user.creds and publicKey); default: <name>-nats-creds."""


class PreviousCredentials(ResourceModel):
    """The credentials a rotation replaced, valid until they expire."""

    public_key: PublicKey
    expires_at: str | None = None


class NatsUserStatus(OperatorStatus):
    """The user's current credentials; no seed, only public keys and times."""

    public_key: PublicKey | None = None
    account: PublicKey | None = None
    account_ref: str | None = None
    """The NatsAccount the credentials were issued in (spec.accountRef cannot move them)."""
    secret_name: str | None = None
    issued_at: str | None = None
    expires_at: str | None = None
    """Absent: valid until revoked."""
    rotated_at: str | None = None
    previous: PreviousCredentials | None = None
    permissions_hash: str | None = None
    """Which permissions the current credentials carry, to tell when to issue new ones."""


def rotation_seconds(spec: NatsUserSpec) -> tuple[int | None, int | None]:
    """(validity, rotation period) in whole seconds, None where not set."""

    def seconds(value: Duration | None) -> int | None:
        return None if not value else int(value) // 1_000_000_000

    return seconds(spec.valid_for), seconds(spec.rotation_period)
