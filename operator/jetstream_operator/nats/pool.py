"""NATS connections shared by every resource that uses the same servers and credentials.

The pool is keyed by the effective settings *including the secret material*, so a rotated
credential yields a new key, a new connection, and the old one is closed once nothing uses it.
Secret values are kept out of every repr, log line and error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nats.aio.client import Client, RawCredentials
from nats.errors import SlowConsumerError

from .jsapi import JetStreamApi, JetStreamUnavailable

logger = logging.getLogger(__name__)

AuthKind = Literal["userPassword", "token", "nkey", "creds"]


@dataclass(frozen=True)
class AuthMaterial:
    """One authentication method with its secret values (never shown in a repr)."""

    kind: AuthKind
    user: str = field(default="", repr=False)
    secret: str = field(default="", repr=False)


@dataclass(frozen=True)
class TlsMaterial:
    """PEM material for TLS (never shown in a repr)."""

    ca: bytes | None = field(default=None, repr=False)
    cert: bytes | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    handshake_first: bool = False


def redacted(url: str) -> str:
    """A server URL as it may be shown in status, Events, logs and metrics: whatever was
    written before an `@` (a user and password, a token) is replaced."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    host = authority.rpartition("@")[2]
    return f"{scheme}{separator}REDACTED@{host}{slash}{path}"


@dataclass(frozen=True)
class ConnectionTarget:
    """Everything that makes two connections different; the pool's key."""

    servers: tuple[str, ...] = field(repr=False)
    api_prefix: str = "$JS.API"
    auth: AuthMaterial | None = None
    tls: TlsMaterial | None = None
    label: str = field(default="default", compare=False)
    """Who uses it, for messages: "default" or "namespace/NatsConnection"."""

    @property
    def where(self) -> str:
        """The servers, for messages: never a credential written into a URL."""
        return ", ".join(redacted(server) for server in self.servers)


UNREACHABLE = "Unreachable"
"""The reason of a connection that could not reach any server: an outage, not a mistake."""


class ConnectFailure(JetStreamUnavailable):
    """NATS could not be reached with these settings; `reason` is a condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def classify(target: ConnectionTarget, problems: list[str]) -> ConnectFailure:
    """Turn what nats-py reported into words a person can act on."""
    seen = " ".join(problems)
    where = target.where
    if "Authorization Violation" in seen or "Authentication" in seen:
        expired = "expired" in seen.lower()
        return ConnectFailure(
            "CredentialsExpired" if expired else "AuthFailed",
            f"NATS at {where} refused the credentials of connection {target.label}"
            + (" (they have expired)" if expired else "")
            + ": check the user, password, token, NKey or creds in its Secret",
        )
    if "SSL" in seen or "CERTIFICATE" in seen.upper() or "tls" in seen.lower():
        return ConnectFailure(
            "TLSFailed",
            f"TLS with NATS at {where} failed for connection {target.label}: check the CA "
            "certificate (and client certificate) in its Secret",
        )
    return ConnectFailure(
        UNREACHABLE,
        f"cannot reach NATS at {where} for connection {target.label}: check the server URLs "
        "and that NATS is running",
    )


def _tls_context(material: TlsMaterial) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=material.ca.decode() if material.ca else None)
    if material.cert and material.key:
        # load_cert_chain wants files: write them privately, load, and remove at once.
        with tempfile.TemporaryDirectory(prefix="jso-tls-") as directory:
            cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert_file.write_bytes(material.cert)
            key_file.touch(mode=0o600)
            key_file.write_bytes(material.key)
            context.load_cert_chain(cert_file, key_file)
    return context


def connect_options(target: ConnectionTarget) -> dict[str, Any]:
    """nats-py connect() arguments for a target's TLS and authentication."""
    options: dict[str, Any] = {}
    if target.tls is not None:
        options["tls"] = _tls_context(target.tls)
        options["tls_handshake_first"] = target.tls.handshake_first
    auth = target.auth
    if auth is None:
        return options
    if auth.kind == "userPassword":
        options.update(user=auth.user, password=auth.secret)
    elif auth.kind == "token":
        options["token"] = auth.secret
    elif auth.kind == "nkey":
        options["nkeys_seed_str"] = auth.secret
    else:
        options["user_credentials"] = RawCredentials(auth.secret)
    return options


class ConnectionPool:
    """Opens one connection per target on first use and keeps it; closes what is unused."""

    def __init__(self, request_timeout: float = 5.0, connect_timeout: int = 3) -> None:
        self._connections: dict[ConnectionTarget, Client] = {}
        # One lock per target: a slow or failing connect must not hold up the others.
        self._locks: dict[ConnectionTarget, asyncio.Lock] = {}
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._dropped: dict[ConnectionTarget, int] = {}
        self._account_changes: dict[ConnectionTarget, int] = {}

    async def jetstream(self, target: ConnectionTarget) -> JetStreamApi:
        connection = await self.connection(target)

        def account_changed() -> None:
            self._account_changes[target] = self._account_changes.get(target, 0) + 1

        return JetStreamApi(connection, target.api_prefix, self._request_timeout, account_changed)

    def account_changes(self, target: ConnectionTarget) -> int:
        """Streams and consumers this operator created or deleted through `target` since the
        pool started: a NatsConnection's account figures are stale when this moved."""
        return self._account_changes.get(target, 0)

    async def connection(self, target: ConnectionTarget) -> Client:
        """The shared connection itself, for subscriptions."""
        async with self._locks.setdefault(target, asyncio.Lock()):
            existing = self._connections.get(target)
            if existing is not None and not existing.is_closed:
                return existing
            connection = await self._connect(target)
            self._connections[target] = connection
            return connection

    async def _connect(self, target: ConnectionTarget) -> Client:
        problems: list[str] = []

        async def on_error(error: Exception) -> None:
            if isinstance(error, SlowConsumerError):
                # nats-py dropped a message it could not queue: an advisory may be lost.
                self._dropped[target] = self._dropped.get(target, 0) + 1
            problems.append(f"{type(error).__name__}: {error}")
            logger.warning("NATS connection %s: %s", target.label, type(error).__name__)

        connection = Client()
        try:
            options = connect_options(target)
        except (ssl.SSLError, ValueError) as error:
            raise ConnectFailure(
                "TLSFailed",
                f"the TLS material of connection {target.label} cannot be loaded "
                f"({type(error).__name__}): check the PEM data in its Secret",
            ) from None
        try:
            # nats-py retries a first connect forever; bound it and report why it failed.
            await asyncio.wait_for(
                connection.connect(
                    servers=list(target.servers),
                    name=connection_name(),
                    connect_timeout=self._connect_timeout,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    error_cb=on_error,
                    **options,
                ),
                timeout=self._connect_timeout * 2 + 1,
            )
        except Exception as error:  # TimeoutError, or whatever nats-py raised
            problems.append(f"{type(error).__name__}: {error}")
            await connection.close()
            raise classify(target, problems) from None
        return connection

    def dropped_messages(self, target: ConnectionTarget) -> int:
        """Messages nats-py dropped on this target's connection because a subscriber fell
        behind (slow consumer), counted since the pool started."""
        return self._dropped.get(target, 0)

    def is_connected(self, target: ConnectionTarget) -> bool:
        connection = self._connections.get(target)
        return connection is not None and connection.is_connected

    async def retain(self, targets: Iterable[ConnectionTarget]) -> None:
        """Close connections no longer used by anything (e.g. after a credential rotation)."""
        keep = set(targets)
        stale = [target for target in self._connections if target not in keep]
        closing = [self._connections.pop(target) for target in stale]
        # Also the locks of targets that never connected (e.g. a Secret with a typo, since
        # fixed), unless a connect attempt holds one right now.
        for target in [t for t, lock in self._locks.items() if t not in keep and not lock.locked()]:
            del self._locks[target]
        for connection in closing:
            await _close(connection)

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await _close(connection)


def connection_name() -> str:
    """Names the replica in the server's connection list (`connz`), so a person (or a test)
    can tell which replica of an active/standby pair is talking to NATS."""
    replica = os.environ.get("POD_ID") or f"{socket.gethostname()}-{os.getpid()}"
    return f"jetstream-operator/{replica}"


async def _close(connection: Client) -> None:
    """Drain, or at least close; a connection to a server that is gone may fail both."""
    try:
        await connection.drain()
    except Exception:  # closing; nothing left to do with the error
        with contextlib.suppress(Exception):
            await connection.close()
