"""The ClusterNatsConnection custom resource: a connection the platform team owns, which the
namespaces it selects use by `clusterConnectionRef`, each within the connection's tenancy.

Its Secrets are read from the operator's own namespace, which tenants cannot read or write."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, JsonValue

from .base import ResourceModel, cel
from .connection import (
    AUTHENTICATED,
    CONNECTION_RULES,
    ENCRYPTED_SERVER,
    NatsConnectionSpec,
    NatsConnectionStatus,
)
from .selector import LabelSelector
from .stream import ConnectionRef
from .tenancy import Tenancy

ACCOUNT_RULES: list[JsonValue] = [
    cel(
        "!has(self.account) || !" + AUTHENTICATED,
        "spec.account authenticates as the operator's user of that NatsAccount: leave out "
        "userPassword, token, nkey and creds",
    ),
    cel(
        "!has(self.account) || (has(self.allowPlaintext) && self.allowPlaintext) || "
        f"has(self.tls) || self.servers.all(s, {ENCRYPTED_SERVER})",
        "spec.servers: the account's credentials would travel unencrypted: use tls:// or "
        "wss:// URLs, spec.tls, or spec.allowPlaintext: true on loopback in development",
    ),
]


class ClusterNatsConnectionSpec(NatsConnectionSpec):
    """A NatsConnection's fields (Secrets in the operator's namespace), the namespaces it
    serves, and what each of them may do through it."""

    model_config = ConfigDict(
        **{
            **NatsConnectionSpec.model_config,
            "json_schema_extra": {"x-kubernetes-validations": [*CONNECTION_RULES, *ACCOUNT_RULES]},
        }
    )

    namespace_selector: LabelSelector | None = None
    """The namespaces whose resources may use this connection; absent: none, `{}`: every
    namespace (as Kubernetes selectors read)."""
    account: ConnectionRef | None = None
    """A NatsAccount: authenticate as the operator's own user of that account (its keys
    Secret's operator.creds), so resources on this connection are made inside it. Instead of
    userPassword, token, nkey and creds."""
    system_account: bool = False
    """It authenticates as a user of the system account: checked by connecting (a system
    account has no JetStream), and only NatsAccounts use it, to reach the resolver."""
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
