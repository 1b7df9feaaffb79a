"""kopf's API requests in flight are capped, and watches are never held back by the cap."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from yarl import URL

from jetstream_operator.k8s.login import RequestLimit

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


def request(url: str) -> Any:
    return SimpleNamespace(url=URL(url))


async def test_requests_beyond_the_limit_wait() -> None:
    limit, server = RequestLimit(3), Server()
    calls = [asyncio.create_task(limit(request(f"{BASE}/s{i}"), server)) for i in range(10)]
    await asyncio.sleep(0.05)
    assert server.in_flight == 3
    server.release.set()
    answers = await asyncio.gather(*calls)
    assert server.most == 3
    assert len(answers) == 10


async def test_watches_pass_a_full_limit() -> None:
    limit, server = RequestLimit(1), Server()
    held = asyncio.create_task(limit(request(f"{BASE}/s0"), server))
    watches = [
        asyncio.create_task(limit(request(f"{BASE}?watch=true&resourceVersion=1"), server)),
        asyncio.create_task(limit(request(f"{BASE}?watch=1"), server)),
    ]
    await asyncio.sleep(0.05)
    assert server.in_flight == 3  # the held request and both watches
    server.release.set()
    await asyncio.gather(held, *watches)
