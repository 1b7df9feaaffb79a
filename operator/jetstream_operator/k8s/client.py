"""The operator's own Kubernetes API requests (kopf keeps its own): plain JSON over one aiohttp
session, so the operator process never imports the `kubernetes` client (~35 MiB)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp
import kopf
from aiohttp.client_middlewares import ClientMiddlewareType

logger = logging.getLogger(__name__)

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

CONNECTIONS = 8
"""Open connections at most: status writes, Events and Secret reads queue behind these rather
than open one per resource when thousands need a write at once."""
CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the API server."""
WATCH_SECONDS = 45
"""How long the API server keeps one of the operator's watches open: less than READ_TIMEOUT, so
a quiet watch ends by the server's choice, not as a timeout."""
READ_TIMEOUT = 60.0
"""Seconds an open request may go without an answer: no hung request holds a watcher or a
handler for longer. Neither counts the wait for one of the CONNECTIONS: aiohttp's `connect` and
`total` timeouts do, and under a burst (5,000 consumers each refreshing its stream's count)
queued writes failed with ConnectionTimeoutError after 10 s instead of waiting their turn."""


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, method: str, path: str, status: int, reason: str, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason


Login = Callable[[], kopf.ConnectionInfo]


class KubeApi:
    """Requests with the credentials `login` gives; on a 401 (an expired or rotated token) it
    logs in again once and retries, as kopf does for its own requests."""

    def __init__(
        self,
        login: Login,
        connections: int = CONNECTIONS,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        middlewares: Sequence[ClientMiddlewareType] = (),
    ) -> None:
        self._login = login
        self._connections = connections
        self._middlewares = tuple(middlewares)
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self._lock = asyncio.Lock()
        self._retired: set[asyncio.Task[None]] = set()

    async def request(
        self, method: str, path: str, body: Any = None, content_type: str = JSON
    ) -> Any:
        """The decoded JSON answer; ApiError for an error status."""
        data = None if body is None else json.dumps(body)
        rejected: aiohttp.ClientSession | None = None
        while True:
            session, server = await self._connected(rejected)
            headers = {"Content-Type": content_type} if data is not None else None
            async with session.request(method, server + path, data=data, headers=headers) as answer:
                if answer.status == 401 and rejected is None:
                    rejected = session
                    continue
                if answer.status >= 400:
                    raise ApiError(
                        method,
                        path,
                        answer.status,
                        answer.reason or "",
                        _message(await answer.text()),
                    )
                return await answer.json(content_type=None)

    async def watch(
        self, path: str, resource_version: str, seconds: int = WATCH_SECONDS
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a collection from `resource_version` on (bookmarks included), until
        the API server ends the watch after `seconds`; ApiError for an error status."""
        query = urlencode(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(seconds),
            }
        )
        rejected: aiohttp.ClientSession | None = None
        while True:
            session, server = await self._connected(rejected)
            async with session.get(f"{server}{path}?{query}") as answer:
                if answer.status == 401 and rejected is None:
                    rejected = session
                    continue
                if answer.status >= 400:
                    raise ApiError(
                        "GET",
                        path,
                        answer.status,
                        answer.reason or "",
                        _message(await answer.text()),
                    )
                partial = b""
                # iter_chunked: the request limit's tap of our group's watches serves only it.
                async for data in answer.content.iter_chunked(1 << 16):
                    lines = (partial + data).split(b"\n")
                    partial = lines.pop()
                    for line in lines:
                        if line.strip():
                            yield json.loads(line)
                return

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        retired = list(self._retired)
        for task in retired:
            task.cancel()
        await asyncio.gather(*retired, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _connected(
        self, rejected: aiohttp.ClientSession | None
    ) -> tuple[aiohttp.ClientSession, str]:
        """The current session; a new one (fresh credentials) when `rejected` is current."""
        async with self._lock:
            if self._session is None or self._session is rejected:
                if self._session is not None:
                    logger.info("the Kubernetes API refused the credentials; logging in again")
                    self._retire(self._session)
                # In a thread: logging in and loading certificates read files (or run a plugin).
                info, tls = await asyncio.to_thread(self._credentials)
                self._session = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=self._connections, ssl=tls),
                    headers={
                        **info.as_http_headers(),
                        "Accept": JSON,
                        "User-Agent": "jetstream-operator",
                    },
                    timeout=self._timeout,
                    proxy=info.proxy_url,
                    trust_env=info.trust_env,
                    middlewares=self._middlewares,
                )
                self._server = info.server.rstrip("/")
            return self._session, self._server

    def _credentials(self) -> tuple[kopf.ConnectionInfo, ssl.SSLContext]:
        info = self._login()
        return info, info.as_ssl_context()

    def _retire(self, session: aiohttp.ClientSession) -> None:
        """Close an old session once the requests still running on it are done or timed out."""

        async def close_later() -> None:
            try:
                await asyncio.sleep(READ_TIMEOUT)
            finally:
                await session.close()

        task = asyncio.create_task(close_later())
        self._retired.add(task)
        task.add_done_callback(self._retired.discard)


def _message(text: str) -> str:
    """The `message` of a Kubernetes Status answer, else the text itself (shortened)."""
    try:
        status = json.loads(text)
    except ValueError:
        return text[:200]
    return str(status.get("message", text[:200])) if isinstance(status, dict) else text[:200]
