"""kopf's API requests in flight are capped, and watches are never held back by the cap.

The cap adapts to how fast answers come, and writes wait while our watches bring a burst of
creations or deletions. How events are posted around our writes is in test_event_posting.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from yarl import URL

from jetstream_operator.k8s.throttle import (
    ADAPTIVE_LEAST,
    AdaptiveLimit,
    Burst,
    DeletionRequests,
    RequestLimit,
)
from jetstream_operator.metrics import REGISTRY

from .fakes import Clock
from .request_fakes import BASE, Server, added, event, read_watch, request


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


class Answers:
    """Answers to the limit, each a millisecond after the one before."""

    def __init__(self) -> None:
        self.now = 0.0

    def answer(self, capacity: AdaptiveLimit, seconds: float, count: int = 1) -> None:
        for _ in range(count):
            self.now += 0.001
            capacity.answered("PATCH", seconds, self.now)


def test_slow_answers_shrink_the_limit_and_fast_ones_grow_it_back() -> None:
    capacity, clock = AdaptiveLimit(32), Answers()
    clock.answer(capacity, 0.005, 100)
    assert capacity.limit == 32
    clock.answer(capacity, 0.100, 500)
    assert capacity.limit == 1
    clock.answer(capacity, 0.005, 600)
    assert capacity.limit == 32


def test_answers_within_the_tolerance_leave_the_limit_alone() -> None:
    capacity, clock = AdaptiveLimit(32, tolerance=3.0), Answers()
    clock.answer(capacity, 0.005, 10)
    clock.answer(capacity, 0.014, 1000)
    assert capacity.limit == 32


def test_a_server_that_stays_slower_becomes_the_new_normal() -> None:
    capacity, clock = AdaptiveLimit(32, memory=30.0), Answers()
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
    """...down to ADAPTIVE_LEAST, where the operator's own backlog still gets written."""
    limit = RequestLimit(32, adaptive=True)
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
    assert limit.limit == 32
    await asyncio.gather(*(limit(request(f"{BASE}/s{i}"), server) for i in range(400)))
    assert limit.limit == ADAPTIVE_LEAST
    assert most <= 32
    assert REGISTRY.get_sample_value("jetstream_operator_kube_requests_limit") == limit.limit
    assert REGISTRY.get_sample_value("jetstream_operator_kube_requests_waiting") == 0


def test_a_burst_of_creations_holds_until_it_has_been_quiet() -> None:
    clock = Clock()
    burst = Burst(5.0, threshold=32, window=1.0, quiet=0.25, clock=clock)
    for _ in range(8):
        burst.seen(5)
        clock.now += 0.1
    assert burst.holding()
    clock.now += 0.2  # 0.3 s since the last creation
    assert not burst.holding()


def test_a_few_creations_hold_nothing() -> None:
    clock = Clock()
    burst = Burst(5.0, threshold=32, clock=clock)
    burst.seen(31)
    assert not burst.holding()
    clock.now += 1.5  # the first 31 are out of the window by the time more come
    burst.seen(31)
    assert not burst.holding()
    burst.seen(1)
    assert burst.holding()


def test_a_burst_that_never_ends_holds_writes_once_for_at_most_its_hold() -> None:
    clock = Clock()
    burst = Burst(30.0, threshold=32, clock=clock)
    held = []
    for _ in range(600):  # 50 creations a second for a minute
        burst.seen(5)
        clock.now += 0.1
        held.append(burst.holding())
    assert not held[5] and held[6]  # from the 32nd creation within a second
    assert 299 <= sum(held) <= 301  # for 30 s, then no more
    clock.now += 1.0  # a quiet second ends the burst; the next one holds again
    for _ in range(10):
        burst.seen(5)
        clock.now += 0.1
    assert burst.holding()


async def test_a_write_waits_for_the_rest_of_the_burst_only() -> None:
    burst = Burst(0.3, threshold=1, quiet=0.05)

    async def creating() -> None:
        while True:
            burst.seen(1)
            await asyncio.sleep(0.01)

    creator = asyncio.create_task(creating())
    await asyncio.sleep(0.02)
    try:
        first = await burst.wait()
        later = await burst.wait()  # the burst goes on, but has had its hold
    finally:
        creator.cancel()
    assert 0.25 <= first < 0.6
    assert later == 0.0


async def test_writes_wait_while_our_watches_bring_a_burst_of_creations() -> None:
    burst = Burst(2.0, threshold=32, quiet=0.1)
    limit = RequestLimit(8, burst=burst)
    chunks = [b"".join(added(f"s{i}-{j}") for j in range(10)) for i in range(5)]
    body = await read_watch(limit, f"{BASE}?watch=true", chunks)
    assert body == b"".join(chunks)  # passed through unchanged
    assert burst.holding()

    loop = asyncio.get_running_loop()
    started = loop.time()
    await limit(request(f"{BASE}/s0", "GET"), Server.answer)
    assert loop.time() - started < 0.05  # reads go on
    peering = "https://127.0.0.1:6443/apis/kopf.dev/v1/clusterkopfpeerings/jetstream-operator"
    await limit(request(peering, "PATCH"), Server.answer)
    assert loop.time() - started < 0.05  # a peering keepalive must not wait
    await limit(request(f"{BASE}/s0/status", "PATCH"), Server.answer)
    assert 0.05 <= loop.time() - started < 1.0  # the write waited for the quiet


async def test_creations_of_other_kinds_hold_nothing() -> None:
    burst = Burst(2.0, threshold=1)
    limit = RequestLimit(8, burst=burst)
    events = [added(f"n{i}") for i in range(50)]
    await read_watch(limit, "https://127.0.0.1:6443/api/v1/namespaces?watch=true", events)
    assert not burst.holding()
    modified = [line.replace(b"ADDED", b"MODIFIED") for line in events]
    await read_watch(limit, f"{BASE}?watch=true", modified)
    assert not burst.holding()


def test_each_object_being_deleted_counts_once() -> None:
    """Writes to an object already being deleted (the operator's own among them) are not more
    deletion requests: only the first event with its deletionTimestamp counts."""
    clock = Clock()
    deletions = DeletionRequests(Burst(5.0, threshold=32, clock=clock), clock=clock)
    deletions.seen([event("MODIFIED", f"u{i}").rstrip() for i in range(31)])
    for _ in range(5):
        deletions.seen([event("MODIFIED", f"u{i}").rstrip() for i in range(31)])
    assert not deletions.burst.holding()
    deletions.seen([event("MODIFIED", "u31").rstrip()])
    assert deletions.burst.holding()


def test_an_object_is_forgotten_once_gone_or_after_a_while() -> None:
    clock = Clock()
    deletions = DeletionRequests(Burst(5.0, threshold=2, clock=clock), remember=60.0, clock=clock)
    deletions.seen([event("MODIFIED", "u0").rstrip(), event("DELETED", "u0").rstrip()])
    deletions.seen([event("MODIFIED", "u1").rstrip()])
    clock.now += 1.5  # out of the burst's window
    deletions.seen([event("MODIFIED", "u0").rstrip(), event("MODIFIED", "u1").rstrip()])
    assert not deletions.burst.holding()  # u0 is new again (it went); u1 was counted
    clock.now += 61.0
    deletions.seen([event("MODIFIED", "u1").rstrip(), event("MODIFIED", "u0").rstrip()])
    assert deletions.burst.holding()  # both forgotten after `remember`


async def test_writes_wait_while_our_watches_bring_a_burst_of_deletions() -> None:
    """kubectl delete -f of many resources: each object's event with its deletionTimestamp
    holds the operator's writes; changes to objects not being deleted hold nothing."""
    deletions = DeletionRequests(Burst(2.0, threshold=32, quiet=0.1))
    limit = RequestLimit(8, deletions=deletions)
    changed = [event("MODIFIED", f"s{i}", deleting=False) for i in range(50)]
    await read_watch(limit, f"{BASE}?watch=true", changed)
    assert not deletions.burst.holding()
    await read_watch(limit, f"{BASE}?watch=true", [event("MODIFIED", f"s{i}") for i in range(50)])
    assert deletions.burst.holding()

    loop = asyncio.get_running_loop()
    started = loop.time()
    await limit(request(f"{BASE}/s0", "GET"), Server.answer)
    assert loop.time() - started < 0.05  # reads go on
    await limit(request(f"{BASE}/s0", "PATCH"), Server.answer)
    assert 0.05 <= loop.time() - started < 1.0  # the finalizer's removal waited for the quiet


async def test_no_limit_still_yields_to_a_burst() -> None:
    # A quiet of a second: on a loaded machine the 50 requests may start later than 0.1 s
    # after the burst, when a shorter quiet would already have let them all go.
    burst = Burst(2.0, threshold=1, quiet=1.0)
    limit, server = RequestLimit(0, burst=burst), Server()
    await read_watch(limit, f"{BASE}?watch=true", [added("s0")])
    calls = [asyncio.create_task(limit(request(f"{BASE}/s{i}"), server)) for i in range(50)]
    await asyncio.sleep(0.02)
    assert server.in_flight == 0
    deadline = asyncio.get_running_loop().time() + 10  # a loaded machine is slow, not wrong
    while server.in_flight < 50:  # no cap on how many go at once afterwards
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    server.release.set()
    await asyncio.gather(*calls)


async def test_each_new_resource_is_told_as_its_watch_brings_it() -> None:
    """Before kopf queues it for a worker: the events come whole even when the server's chunks
    split them, with the resource of their watch; other events and groups tell nothing."""
    told: list[tuple[str, Any]] = []
    limit = RequestLimit(0, added=lambda plural, body: told.append((plural, body)))
    stream = b'{"type":"ADDED","object":{"metadata":{"name":"s0","uid":"u0"}}}\n'
    changed = b'{"type":"MODIFIED","object":{"metadata":{"name":"s1","uid":"u1"}}}\n'
    consumer = b'{"type":"ADDED","object":{"metadata":{"name":"c0","uid":"u2"}}}\n'
    events = stream + changed
    chunks = [events[:20], events[20:75], events[75:]]
    body = await read_watch(limit, f"{BASE}?watch=true", chunks)
    assert body == events  # passed through unchanged
    consumers = "https://127.0.0.1:6443/apis/jetstream-operator.io/v1alpha1/namespaces/a/consumers"
    await read_watch(limit, f"{consumers}?watch=true", [consumer])
    namespaces = "https://127.0.0.1:6443/api/v1/namespaces"
    await read_watch(limit, f"{namespaces}?watch=true", [consumer])
    assert told == [
        ("streams", {"metadata": {"name": "s0", "uid": "u0"}}),
        ("consumers", {"metadata": {"name": "c0", "uid": "u2"}}),
    ]


# -- one namespace's burst is its own ------------------------------------------------------------

NAMESPACED = "https://127.0.0.1:6443/apis/jetstream-operator.io/v1alpha1/namespaces/{}/streams"


def added_in(namespace: str, name: str) -> bytes:
    return b'{"type":"ADDED","object":{"metadata":{"name":"%s","namespace":"%s"}}}\n' % (
        name.encode(),
        namespace.encode(),
    )


async def test_a_burst_in_one_namespace_holds_only_that_namespaces_writes() -> None:
    """Team A applying hundreds of resources must not hold team B's status writes
    (docs/tenancy.md): a burst is counted, and waited out, per namespace."""
    burst = Burst(2.0, threshold=32, quiet=0.2)
    limit = RequestLimit(8, burst=burst)
    watch = "https://127.0.0.1:6443/apis/jetstream-operator.io/v1alpha1/streams?watch=true"
    await read_watch(limit, watch, [b"".join(added_in("team-a", f"s{i}") for i in range(50))])
    assert burst.holding("team-a") and not burst.holding("team-b")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await limit(request(NAMESPACED.format("team-b") + "/x/status"), Server.answer)
    assert loop.time() - started < 0.05  # B's write went at once
    await limit(request(NAMESPACED.format("team-a") + "/x/status"), Server.answer)
    assert loop.time() - started >= 0.1  # A's waited for its own burst's quiet
    assert await limit.after_creations("team-b") == 0.0


async def test_waiting_requests_are_served_a_namespace_at_a_time() -> None:
    """Under the cap, a namespace's one request is not queued behind another's backlog."""
    limit, server = RequestLimit(1), Server()
    order: list[str] = []

    async def call(namespace: str, index: int) -> None:
        await limit(request(NAMESPACED.format(namespace) + f"/s{index}"), server)
        order.append(namespace)

    backlog = [asyncio.create_task(call("team-a", i)) for i in range(20)]
    await asyncio.sleep(0.01)
    single = asyncio.create_task(call("team-b", 0))
    await asyncio.sleep(0.01)
    server.release.set()
    await asyncio.gather(*backlog, single)
    assert order.index("team-b") <= 2, order
