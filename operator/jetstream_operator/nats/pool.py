"""NATS connections shared by every resource that uses the same servers."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import nats
from nats.aio.client import Client

from .jsapi import JetStreamApi, JetStreamUnavailable

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionTarget:
    """Everything that makes two connections different; the pool's key."""

    servers: tuple[str, ...]
    api_prefix: str = "$JS.API"


class ConnectionPool:
    """Opens one connection per target on first use and keeps it; closes all at shutdown."""

    def __init__(self, request_timeout: float = 5.0, connect_timeout: float = 3.0) -> None:
        self._connections: dict[ConnectionTarget, Client] = {}
        self._lock = asyncio.Lock()
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout

    async def jetstream(self, target: ConnectionTarget) -> JetStreamApi:
        connection = await self.connection(target)
        return JetStreamApi(connection, target.api_prefix, self._request_timeout)

    async def connection(self, target: ConnectionTarget) -> Client:
        """The shared connection itself, for subscriptions."""
        async with self._lock:
            existing = self._connections.get(target)
            if existing is not None and not existing.is_closed:
                return existing
            try:
                connection = await nats.connect(
                    servers=list(target.servers),
                    name="jetstream-operator",
                    connect_timeout=self._connect_timeout,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=1,
                    error_cb=_log_error,
                )
            except Exception as error:  # nats-py raises several unrelated types here
                raise JetStreamUnavailable(
                    f"cannot connect to NATS at {', '.join(target.servers)}: {error}"
                ) from error
            self._connections[target] = connection
            return connection

    async def close(self) -> None:
        async with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            try:
                await connection.drain()
            except Exception:  # closing on shutdown; nothing left to do with the error
                await connection.close()


async def _log_error(error: Exception) -> None:
    logger.warning("NATS connection problem: %s", error)
