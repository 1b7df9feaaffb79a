"""The ClusterNatsConnection custom resource: a connection the platform team owns, which the
namespaces it selects use by `clusterConnectionRef`, each within the connection's tenancy.

Its Secrets are read from the operator's own namespace, which tenants cannot read or write."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import ResourceModel
from .connection import NatsConnectionSpec, NatsConnectionStatus
from .selector import LabelSelector
from .tenancy import Tenancy


class ClusterNatsConnectionSpec(NatsConnectionSpec):
    """A NatsConnection's fields (Secrets in the operator's namespace), the namespaces it
    serves, and what each of them may do through it."""

    namespace_selector: LabelSelector | None = None
    """The namespaces whose resources may use this connection; absent: none, `{}`: every
    namespace (as Kubernetes selectors read)."""
    tenancy: Tenancy = Field(default_factory=Tenancy)
    """Names, subjects, adoption and quotas per namespace (docs/tenancy.md). Left out, the
    defaults still hold: no adoption, and another namespace's streams only where shared."""


class NamespaceUsage(ResourceModel):
    """What one namespace's resources on this connection hold, as its quotas count them."""

    namespace: str
    streams: int = 0
    consumers: int = 0
    key_values: int = 0
    object_stores: int = 0
    max_bytes_file: int = 0
    """spec.maxBytes summed over the namespace's file-backed streams and buckets."""
    max_bytes_memory: int = 0
    """spec.maxBytes summed over the namespace's memory-backed streams and buckets."""


class ClusterNatsConnectionStatus(NatsConnectionStatus):
    """A NatsConnection's status, and the usage of each namespace with resources on it."""

    namespaces: Annotated[list[NamespaceUsage], Field(max_length=10_000)] = Field(
        default_factory=list
    )
    """By namespace name; only namespaces with at least one resource on the connection."""
