"""The operator's services, built once at start (`wiring.start`) and handed to every handler as
kopf's memo. Typed here so that no handler casts what it reads back from an untyped memo."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import kopf

if TYPE_CHECKING:
    from .handlers.arrivals import StreamArrivals
    from .handlers.connection_directory import ConnectionDirectory
    from .handlers.failures import FailureMemories
    from .handlers.pacing import Pace
    from .handlers.registry import ResourceRegistry
    from .handlers.resource_figures import LiveFigures
    from .handlers.status_writes import StatusBudget
    from .handlers.tenancy_gate import TenancyGate
    from .k8s.client import KubeApi
    from .k8s.namespaces import NamespaceLabels
    from .k8s.owned_secrets import OwnedSecrets
    from .k8s.secrets import SecretReader
    from .k8s.status import EventPoster, ResourceWriter
    from .k8s.throttle import RequestLimit
    from .k8s.watch import NamespaceWatches
    from .nats.account_keys import AccountKeys
    from .nats.pool import ConnectionPool
    from .settings import OperatorSettings
    from .triggers.watchers import WatcherSet


class SharedMemo(kopf.Memo):
    """The operator's memo, handed to every resource's handlers as is. kopf gives each object
    a shallow copy of it, kept as long as the object exists: about 0.9 KiB per resource for
    two dozen references the handlers only read. Per-object state lives in the registries.

    kopf's memo is a dict read by attribute; the annotations below only type those reads."""

    settings: OperatorSettings
    kube_request_limit: RequestLimit
    """One limit for all Kubernetes requests, kopf's and ours (`wiring.request_limit`)."""
    kubernetes: KubeApi
    writer: ResourceWriter
    events: EventPoster
    secrets: SecretReader
    pool: ConnectionPool
    backed: dict[str, ResourceRegistry]
    """The registry of each kind holding a stream, by kind (Stream, KeyValue, ObjectStore)."""
    streams: ResourceRegistry
    consumers: ResourceRegistry
    natsconnections: ResourceRegistry
    clusterconnections: ResourceRegistry
    accounts: ResourceRegistry
    natsusers: ResourceRegistry
    account_locks: dict[str, asyncio.Lock]
    account_keys: dict[str, AccountKeys]
    account_signers: dict[str, str]
    """The operator signing key (public) of each NatsAccount's last push."""
    """Each NatsAccount's keys as last read or written (the operator is their only writer)."""
    """One per NatsAccount: its pass and its users' revocations change the same JWT."""
    owned_secrets: OwnedSecrets
    """ClusterNatsConnections, under the namespace "" (handlers/registry.CLUSTER_SCOPE)."""
    namespace_labels: NamespaceLabels
    """Every namespace's labels, for the connections' namespace selectors."""
    tenancy: TenancyGate
    """What each connection's tenancy allows the namespaces it serves."""
    figures: LiveFigures
    """The latest figures of resources with metrics of their own."""
    arrivals: StreamArrivals
    resume_pace: Pace
    failures: FailureMemories
    budget: StatusBudget
    directory: ConnectionDirectory
    watchers: WatcherSet
    connection_watches: NamespaceWatches | None
    """Where NatsConnections are only read (not managed here): their own watch."""
    connection_probed: dict[tuple[str, str], tuple[float, int]]
    """When each connection last asked JetStream, and the pool's count of account changes then."""
    explained: dict[str, str]
    """Why a Consumer's streamRef is served by another deployment, by the Consumer's uid."""
    unresolved: set[tuple[str, str]]
    """Connections named by resources but not usable yet, retried with the rechecks."""
    background: set[asyncio.Task[None]]
    trimmer: asyncio.Task[None]
    follower: asyncio.Task[None] | None

    def __copy__(self) -> SharedMemo:
        return self
