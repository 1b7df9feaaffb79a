"""The kinds this operator serves, with everything the CRD and the handlers need to know of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from .. import GROUP, VERSION
from .account import NatsAccountSpec, NatsAccountStatus, NatsUserSpec, NatsUserStatus
from .cluster_connection import ClusterNatsConnectionSpec, ClusterNatsConnectionStatus
from .connection import SECRETS_READABLE_BY_REQUESTER, NatsConnectionSpec, NatsConnectionStatus
from .consumer import ConsumerSpec, ConsumerStatus
from .keyvalue import KeyValueSpec, KeyValueStatus
from .objectstore import ObjectStoreSpec, ObjectStoreStatus
from .stream import StreamSpec, StreamStatus


@dataclass(frozen=True)
class PrinterColumn:
    """One column of `kubectl get`."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""


@dataclass(frozen=True)
class ResourceKind:
    """A custom resource kind: its names, models and how kubectl shows it."""

    kind: str
    plural: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel]
    description: str
    short_names: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()
    categories: tuple[str, ...] = ("jetstream",)
    extra: dict[str, str] = field(default_factory=dict)
    request_checks: tuple[tuple[str, str], ...] = ()
    """(expression, messageExpression) pairs of the kind's admission policy that read the
    request as a whole (the requesting user's permissions), which no schema rule can."""
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def group(self) -> str:
        return GROUP

    @property
    def version(self) -> str:
        return VERSION


READY_COLUMN = PrinterColumn(
    "Ready", '.status.conditions[?(@.type=="Ready")].status', description="Ready condition"
)
REASON_COLUMN = PrinterColumn("Reason", '.status.conditions[?(@.type=="Ready")].reason', priority=1)
AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")

STREAM = ResourceKind(
    kind="Stream",
    plural="streams",
    spec_model=StreamSpec,
    status_model=StreamStatus,
    description="A NATS JetStream stream managed by jetstream-operator.",
    short_names=("jss",),
    columns=(
        READY_COLUMN,
        PrinterColumn("Stream", ".spec.name"),
        PrinterColumn("Messages", ".status.messages", type="integer"),
        PrinterColumn("Size", ".status.size"),
        PrinterColumn("Bytes", ".status.bytes", type="integer", priority=1),
        PrinterColumn("Replicas", ".spec.replicas", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

CONSUMER = ResourceKind(
    kind="Consumer",
    plural="consumers",
    spec_model=ConsumerSpec,
    status_model=ConsumerStatus,
    description="A durable NATS JetStream consumer managed by jetstream-operator.",
    short_names=("jsc",),
    columns=(
        READY_COLUMN,
        PrinterColumn("Stream", ".status.streamName"),
        PrinterColumn("Consumer", ".spec.durableName"),
        PrinterColumn("Pending", ".status.numPending", type="integer"),
        PrinterColumn("AckPending", ".status.numAckPending", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

NATS_CONNECTION = ResourceKind(
    kind="NatsConnection",
    plural="natsconnections",
    spec_model=NatsConnectionSpec,
    status_model=NatsConnectionStatus,
    description="How Streams and Consumers in this namespace connect to NATS.",
    short_names=("natsconn",),
    request_checks=(SECRETS_READABLE_BY_REQUESTER,),
    columns=(
        READY_COLUMN,
        PrinterColumn("Version", ".status.serverVersion"),
        PrinterColumn("Domain", ".status.jetstreamDomain", priority=1),
        PrinterColumn("Streams", ".status.account.streams", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

CLUSTER_NATS_CONNECTION = ResourceKind(
    kind="ClusterNatsConnection",
    plural="clusternatsconnections",
    spec_model=ClusterNatsConnectionSpec,
    status_model=ClusterNatsConnectionStatus,
    description=(
        "A connection to NATS owned by the platform team, for the namespaces it selects, each "
        "within its tenancy; its Secrets are in the operator's namespace."
    ),
    short_names=("clusternatsconn",),
    scope="Cluster",
    columns=(
        READY_COLUMN,
        PrinterColumn("Version", ".status.serverVersion"),
        PrinterColumn("Streams", ".status.account.streams", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

KEY_VALUE = ResourceKind(
    kind="KeyValue",
    plural="keyvalues",
    spec_model=KeyValueSpec,
    status_model=KeyValueStatus,
    description="A NATS JetStream Key-Value bucket managed by jetstream-operator.",
    short_names=("jskv",),
    columns=(
        READY_COLUMN,
        PrinterColumn("Bucket", ".spec.bucket"),
        PrinterColumn("Keys", ".status.keys", type="integer"),
        PrinterColumn("Values", ".status.values", type="integer"),
        PrinterColumn("Size", ".status.size"),
        PrinterColumn("Bytes", ".status.bytes", type="integer", priority=1),
        PrinterColumn("History", ".status.history", type="integer", priority=1),
        PrinterColumn("Replicas", ".spec.replicas", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

OBJECT_STORE = ResourceKind(
    kind="ObjectStore",
    plural="objectstores",
    spec_model=ObjectStoreSpec,
    status_model=ObjectStoreStatus,
    description="A NATS JetStream Object Store managed by jetstream-operator.",
    short_names=("jsobj",),
    columns=(
        READY_COLUMN,
        PrinterColumn("Bucket", ".spec.bucket"),
        PrinterColumn("Objects", ".status.objects", type="integer"),
        PrinterColumn("Size", ".status.size"),
        PrinterColumn("Bytes", ".status.bytes", type="integer", priority=1),
        PrinterColumn("Replicas", ".spec.replicas", type="integer"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

NATS_ACCOUNT = ResourceKind(
    kind="NatsAccount",
    plural="natsaccounts",
    spec_model=NatsAccountSpec,
    status_model=NatsAccountStatus,
    description=(
        "A NATS account of a system in operator mode, owned by the platform team: its limits, "
        "its keys, and the namespaces whose NatsUsers it issues."
    ),
    short_names=("natsacct",),
    scope="Cluster",
    columns=(
        READY_COLUMN,
        PrinterColumn("Account", ".status.publicKey"),
        PrinterColumn("Pushed", ".status.pushedAt", type="date"),
        PrinterColumn("Revoked", ".status.revokedUsers", type="integer", priority=1),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

NATS_USER = ResourceKind(
    kind="NatsUser",
    plural="natsusers",
    spec_model=NatsUserSpec,
    status_model=NatsUserStatus,
    description=(
        "A user of a NatsAccount with the permissions its references imply, its creds file "
        "in a Secret of this namespace."
    ),
    short_names=("natsuser",),
    columns=(
        READY_COLUMN,
        PrinterColumn("Account", ".spec.accountRef"),
        PrinterColumn("Secret", ".status.secretName"),
        PrinterColumn("Expires", ".status.expiresAt"),
        REASON_COLUMN,
        AGE_COLUMN,
    ),
)

ALL_KINDS: tuple[ResourceKind, ...] = (
    STREAM,
    CONSUMER,
    NATS_CONNECTION,
    KEY_VALUE,
    OBJECT_STORE,
    CLUSTER_NATS_CONNECTION,
    NATS_ACCOUNT,
    NATS_USER,
)
