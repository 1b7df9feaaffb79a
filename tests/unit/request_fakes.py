"""The API server fake, requests and watch bodies shared by test_request_limit.py and
test_event_posting.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from yarl import URL

from jetstream_operator.k8s.throttle import (
    RequestLimit,
)

BASE = "https://127.0.0.1:6443/apis/jetstream-operator.io/v1alpha1/streams"


class Server:
    """A handler that holds every request until released, counting those in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.release = asyncio.Event()

    async def __call__(self, request: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await self.release.wait()
        finally:
            self.in_flight -= 1
        return request.url

    @staticmethod
    async def answer(request: Any) -> Any:
        return request.url


def request(url: str, method: str = "PATCH") -> Any:
    return SimpleNamespace(url=URL(url), method=method)


class WatchBody:
    """A watch response's body as aiohttp gives it, in the chunks the server sent."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def _chunks(self) -> Any:
        for chunk in self.chunks:
            yield chunk

    def iter_chunked(self, size: int) -> Any:
        return self._chunks()

    def exception(self) -> None:
        return None


def added(name: str) -> bytes:
    return b'{"type":"ADDED","object":{"metadata":{"name":"%s"}}}\n' % name.encode()


async def read_watch(limit: RequestLimit, url: str, chunks: list[bytes]) -> bytes:
    async def server(request: Any) -> Any:
        return SimpleNamespace(content=WatchBody(chunks))

    response = await limit(request(url, "GET"), server)
    return b"".join([chunk async for chunk in response.content.iter_chunked(1024)])


def event(kind: str, uid: str, deleting: bool = True) -> bytes:
    stamp = ',"deletionTimestamp":"2026-11-27T15:00:00Z"' if deleting else ""
    return b'{"type":"%s","object":{"metadata":{"name":"%s","uid":"%s"%s}}}\n' % (
        kind.encode(),
        uid.encode(),
        uid.encode(),
        stamp.encode(),
    )
