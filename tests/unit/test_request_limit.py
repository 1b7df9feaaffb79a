"""kopf's API requests in flight are capped, and watches are never held back by the cap."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from yarl import URL

from jetstream_operator.k8s.login import AdaptiveLimit, RequestLimit
from jetstream_operator.metrics import REGISTRY

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


def request(url: str, method: str = "PATCH") -> Any:
    return SimpleNamespace(url=URL(url), method=method)


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


async def test_a_cancelled_waiter_gives_up_its_turn_without_leaking_a_place() -> None:
    limit, server = RequestLimit(1), Server()
    held = asyncio.create_task(limit(request(f"{BASE}/s0"), server))
    waiting = [asyncio.create_task(limit(request(f"{BASE}/s{i}"), server)) for i in (1, 2)]
    await asyncio.sleep(0.05)
    waiting[0].cancel()
    server.release.set()
    await asyncio.gather(held, waiting[1])
    assert waiting[0].cancelled()
    assert server.most == 1
    assert await limit(request(f"{BASE}/s3"), server) == URL(f"{BASE}/s3")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def answer(self, capacity: AdaptiveLimit, seconds: float, count: int = 1) -> None:
        for _ in range(count):
            self.now += 0.001
            capacity.answered("PATCH", seconds, self.now)


def test_slow_answers_shrink_the_limit_and_fast_ones_grow_it_back() -> None:
    capacity, clock = AdaptiveLimit(32), Clock()
    clock.answer(capacity, 0.005, 100)
    assert capacity.limit == 32
    clock.answer(capacity, 0.100, 500)
    assert capacity.limit == 1
    clock.answer(capacity, 0.005, 600)
    assert capacity.limit == 32


def test_answers_within_the_tolerance_leave_the_limit_alone() -> None:
    capacity, clock = AdaptiveLimit(32, tolerance=3.0), Clock()
    clock.answer(capacity, 0.005, 10)
    clock.answer(capacity, 0.014, 1000)
    assert capacity.limit == 32


def test_a_server_that_stays_slower_becomes_the_new_normal() -> None:
    capacity, clock = AdaptiveLimit(32, memory=30.0), Clock()
    clock.answer(capacity, 0.005, 10)
    clock.answer(capacity, 0.050, 500)
    assert capacity.limit == 1
    clock.now += 120  # four memories: the fastest answer counts 16 times slower by now
    clock.answer(capacity, 0.050, 600)
    assert capacity.limit == 32


def test_each_kind_of_request_has_its_own_fastest_answer() -> None:
    capacity, now = AdaptiveLimit(32), 0.0
    for _ in range(1000):
        now += 0.001
        capacity.answered("GET", 0.002, now)
        capacity.answered("PATCH", 0.020, now)  # a patch is slower, not a sign of load
    assert capacity.limit == 32


async def test_an_adaptive_limit_holds_requests_back_while_answers_are_slow() -> None:
    limit = RequestLimit(8, adaptive=True)
    in_flight, most = 0, 0

    async def server(request: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.002 * in_flight)  # a server that slows down with its load
        in_flight -= 1
        return request.url

    for i in range(20):  # one at a time: how fast it answers when nothing else runs
        await limit(request(f"{BASE}/s{i}"), server)
    assert limit.limit == 8
    await asyncio.gather(*(limit(request(f"{BASE}/s{i}"), server) for i in range(400)))
    assert limit.limit < 8
    assert REGISTRY.get_sample_value("jetstream_operator_kube_requests_limit") == limit.limit
    assert REGISTRY.get_sample_value("jetstream_operator_kube_requests_waiting") == 0
