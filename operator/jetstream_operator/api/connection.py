"""The NatsConnection custom resource: how Streams and Consumers in a namespace reach NATS.

Credentials never appear in the resource itself: every secret value is read from a Secret in the
same namespace, so RBAC on Secrets keeps deciding who may use which credentials.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, JsonValue, field_validator

from .base import ResourceModel, cel
from .status import OperatorStatus

SecretName = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]
SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
CaKey = Annotated[str, Field(max_length=253, pattern=r"^[-._a-zA-Z0-9]*$")]
"""A Secret key, or "" for none (nullable in the CRD: a null is kept, not defaulted)."""
ServerUrl = Annotated[
    str, Field(min_length=1, max_length=1024, pattern=r"^(nats|tls|wss?)://[^\s]+$")
]


class TlsSecret(ResourceModel):
    """TLS material from one Secret, laid out like a kubernetes.io/tls Secret plus ca.crt."""

    secret_name: SecretName
    """Secret in the same namespace."""
    ca_key: CaKey | None = Field("ca.crt", json_schema_extra={"nullable": True})
    """Key of the CA bundle that signs the servers' certificates; "" or null to use the system
    CAs ("" survives any apply; a merge patch's null removes the field, bringing ca.crt back)."""
    cert_key: SecretKey | None = None
    """Key of the client certificate, for servers that verify clients (e.g. "tls.crt")."""
    key_key: SecretKey | None = None
    """Key of the client certificate's private key (e.g. "tls.key")."""

    @field_validator("ca_key")
    @classmethod
    def _system_cas(cls, value: str | None) -> str | None:
        """ "" and null both mean the system CAs: no key to read."""
        return value or None


class UserPasswordSecret(ResourceModel):
    """A user name and password from a Secret."""

    secret_name: SecretName
    """Secret in the same namespace."""
    username_key: SecretKey = "username"
    """Key holding the user name."""
    password_key: SecretKey = "password"
    """Key holding the password."""


class SecretValue(ResourceModel):
    """One value from a Secret: a token, an NKey seed, or a creds file."""

    secret_name: SecretName
    """Secret in the same namespace."""
    key: SecretKey
    """Key holding the value."""


AUTHENTICATED = "(has(self.userPassword) || has(self.token) || has(self.nkey) || has(self.creds))"
ENCRYPTED_SERVER = (
    "s.startsWith('tls://') || s.startsWith('wss://') "
    "|| (s.startsWith('nats://') && has(self.tlsFirst) && self.tlsFirst)"
)

CONNECTION_RULES: list[JsonValue] = [
    cel(
        "self.servers.all(s, !s.matches('^[a-z]+://[^/]*@'))",
        "spec.servers: a server URL holds credentials (user:password@ or token@), which would "
        "show wherever the URL does: put them in a Secret and name it in spec.userPassword or "
        "spec.token",
    ),
    cel(
        f"!{AUTHENTICATED} || (has(self.allowPlaintext) && self.allowPlaintext) || "
        f"has(self.tls) || self.servers.all(s, {ENCRYPTED_SERVER})",
        "spec.servers: credentials would travel unencrypted to a nats:// or ws:// server: use "
        "tls:// or wss:// URLs, spec.tls, or nats:// with spec.tlsFirst: true; or set "
        "spec.allowPlaintext: true for a server on loopback in development",
    ),
    cel(
        "(has(self.userPassword) ? 1 : 0) + (has(self.token) ? 1 : 0) + "
        "(has(self.nkey) ? 1 : 0) + (has(self.creds) ? 1 : 0) <= 1",
        "choose one authentication method: userPassword, token, nkey or creds",
    ),
    cel(
        "!has(self.jsDomain) || !has(self.apiPrefix)",
        "spec.jsDomain and spec.apiPrefix are mutually exclusive (a domain implies the prefix)",
    ),
    cel(
        "!has(self.tls) || (has(self.tls.certKey) == has(self.tls.keyKey))",
        "spec.tls.certKey and spec.tls.keyKey go together",
    ),
]


SECRET_FIELDS = ("tls", "userPassword", "token", "nkey", "creds")
"""The spec's fields naming a Secret (each by `secretName`)."""

_NAMED_SECRETS = (
    "["
    + ", ".join(
        f"has(object.spec.{field}) ? object.spec.{field}.secretName : ''" for field in SECRET_FIELDS
    )
    + "].filter(n, n != '')"
)
_MAY_GET = (
    "authorizer.group('').resource('secrets').namespace(request.namespace).name({name})"
    ".check('get').allowed()"
)
SECRETS_READABLE_BY_REQUESTER = (
    f"{_NAMED_SECRETS}.all(n, {_MAY_GET.format(name='n')})",
    # A message expression cannot ask the authorizer (v1.34): it names every Secret named.
    f"'spec names Secret ' + {_NAMED_SECRETS}.join(', ') + ', and you may not read (get) "
    "each of them: the operator would send what a Secret holds to the servers you name. Name "
    "Secrets you may read, or ask for get on them'",
)
"""(expression, message) on the request: whoever writes a NatsConnection may read every Secret
it names. Without it, a user allowed to write NatsConnections but not to read Secrets could
have the operator send a Secret's credentials to a server of their choosing."""


class NatsConnectionSpec(ResourceModel):
    """Servers, TLS and one authentication method, read from Secrets in this namespace."""

    model_config = ConfigDict(
        **ResourceModel.model_config,
        json_schema_extra={"x-kubernetes-validations": CONNECTION_RULES},
    )

    servers: Annotated[list[ServerUrl], Field(min_length=1, max_length=32)]
    """NATS server URLs, e.g. nats://nats.nats.svc:4222."""
    tls: TlsSecret | None = None
    """Verify the servers (and optionally present a client certificate)."""
    tls_first: bool = False
    """Start with the TLS handshake (server option handshake_first)."""
    allow_plaintext: bool = False
    """Let credentials go to nats:// or ws:// servers without TLS: only for a server on
    loopback in development. Without it, a connection with credentials needs spec.tls, tls://
    or wss:// URLs, or tlsFirst, so that no one on the way reads them. (The client upgrades to
    TLS when the server requires it; tlsFirst and wss:// always start with TLS.)"""
    user_password: UserPasswordSecret | None = None
    """Authenticate with a user name and password."""
    token: SecretValue | None = None
    """Authenticate with a token."""
    nkey: SecretValue | None = None
    """Authenticate with an NKey seed (the key holds the seed, starting with "SU")."""
    creds: SecretValue | None = None
    """Authenticate with a creds file (JWT and seed), as issued by nsc."""
    js_domain: Annotated[str, Field(max_length=255, pattern=r"^[^.*>\s]+$")] | None = None
    """JetStream domain to manage (leaf node setups)."""
    api_prefix: (
        Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^.*>\s]+(\.[^.*>\s]+)*$")]
        | None
    ) = None
    """JetStream API prefix, for accounts that import the API under another subject: a subject
    without wildcards or a trailing dot (e.g. $JS.hub.API)."""

    def exposure(self) -> str | None:
        """What admission refuses about sending credentials (CONNECTION_RULES), checked again
        by the operator where the policy is missing: a server URL holding credentials, or
        credentials bound for a server without TLS. None when neither."""
        if any(re.match(r"^[a-z]+://[^/]*@", server) for server in self.servers):
            return (
                "spec.servers: a server URL holds credentials; put them in a Secret and name it "
                "in spec.userPassword or spec.token"
            )
        authenticated = any((self.user_password, self.token, self.nkey, self.creds))
        if not authenticated or self.allow_plaintext or self.tls is not None:
            return None
        if all(_encrypted(server, self.tls_first) for server in self.servers):
            return None
        return (
            "spec.servers: credentials would travel unencrypted to a nats:// or ws:// server: use "
            "tls:// or wss:// URLs, spec.tls, or nats:// with spec.tlsFirst: true; or set "
            "spec.allowPlaintext: true for a server on loopback in development"
        )

    def secret_names(self) -> set[str]:
        """Every Secret this connection reads; the operator needs `get` on exactly these."""
        refs = (self.tls, self.user_password, self.token, self.nkey, self.creds)
        return {ref.secret_name for ref in refs if ref is not None}


def _encrypted(server: str, tls_first: bool) -> bool:
    return server.startswith(("tls://", "wss://")) or (server.startswith("nats://") and tls_first)


class AccountUsage(ResourceModel):
    """The account's JetStream usage against its limits (-1: unlimited)."""

    memory: int = 0
    """Bytes of memory storage used."""
    storage: int = 0
    """Bytes of file storage used."""
    streams: int = 0
    """Streams in the account."""
    consumers: int = 0
    """Consumers in the account."""
    max_memory: int | None = None
    """Memory storage limit."""
    max_storage: int | None = None
    """File storage limit."""
    max_streams: int | None = None
    """Stream limit."""
    max_consumers: int | None = None
    """Consumer limit."""


class NatsConnectionStatus(OperatorStatus):
    """Whether the operator can reach JetStream with this connection, and what it saw there."""

    server_version: str | None = None
    """Version of the server the operator is connected to."""
    cluster: str | None = None
    """Name of the NATS cluster, when the servers form one."""
    jetstream_domain: str | None = None
    """JetStream domain reported by the server."""
    account: AccountUsage | None = None
    """The account's JetStream usage and limits."""
