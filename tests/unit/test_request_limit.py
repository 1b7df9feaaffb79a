"""kopf's API requests in flight are capped, and watches are never held back by the cap."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from yarl import URL

from jetstream_operator.k8s.client import ApiError
from jetstream_operator.k8s.status import EVENT_ATTEMPTS, EventPoster
from jetstream_operator.k8s.throttle import (
    ADAPTIVE_LEAST,
    AdaptiveLimit,
    Burst,
    DeletionRequests,
    RequestLimit,
    WritesLull,
)
from jetstream_operator.metrics import REGISTRY

from .fakes import Clock

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


def event(kind: str, uid: str, deleting: bool = True) -> bytes:
    stamp = ',"deletionTimestamp":"2026-11-27T15:00:00Z"' if deleting else ""
    return b'{"type":"%s","object":{"metadata":{"name":"%s","uid":"%s"%s}}}\n' % (
        kind.encode(),
        uid.encode(),
        uid.encode(),
        stamp.encode(),
    )


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
    burst = Burst(2.0, threshold=1, quiet=0.1)
    limit, server = RequestLimit(0, burst=burst), Server()
    await read_watch(limit, f"{BASE}?watch=true", [added("s0")])
    calls = [asyncio.create_task(limit(request(f"{BASE}/s{i}"), server)) for i in range(50)]
    await asyncio.sleep(0.02)
    assert server.in_flight == 0
    await asyncio.sleep(0.3)
    assert server.in_flight == 50  # no cap on how many go at once afterwards
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


EVENTS = "https://127.0.0.1:6443/api/v1/namespaces/ns/events"
STREAM = {"apiVersion": "v", "kind": "Stream", "metadata": {"name": "s", "namespace": "ns"}}


class Arrivals:
    """A handler that records which requests reached the server, and when."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    async def __call__(self, request: Any) -> Any:
        self.seen.append((request.url.path.rsplit("/", 1)[-1], asyncio.get_running_loop().time()))
        return request.url


class Writer:
    """ResourceWriter's post_event, recording each Event's reason and time, and when it went."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, datetime | None, float]] = []

    async def post_event(
        self, reference: Any, event_type: str, reason: str, message: str, at: Any = None
    ) -> None:
        self.posted.append((reason, at, asyncio.get_running_loop().time()))


def poster(lull: WritesLull | None) -> tuple[EventPoster, Writer]:
    writer = Writer()
    return EventPoster(writer, lull), writer  # type: ignore[arg-type]


async def status_held(
    most_wait: float,
) -> tuple[EventPoster, Writer, Server, asyncio.Task[Any]]:
    """An EventPoster whose lull waits up to `most_wait`, and a status write the server holds."""
    lull = WritesLull(most_wait, quiet=0.05)
    limit, server = RequestLimit(0, lull=lull), Server()
    events, writer = poster(lull)
    write = asyncio.create_task(limit(request(f"{BASE}/s0/status"), server))
    await asyncio.sleep(0.01)
    return events, writer, server, write


async def test_an_event_waits_for_a_pause_in_our_writes() -> None:
    events, writer, server, write = await status_held(5.0)
    events.post(STREAM, "Normal", "Created", "made")
    await asyncio.sleep(0.1)
    assert writer.posted == []  # the status is still being written
    loop = asyncio.get_running_loop()
    server.release.set()
    await write
    written = loop.time()
    await asyncio.sleep(0.2)
    [(reason, _, posted)] = writer.posted
    assert reason == "Created"
    assert 0.04 <= posted - written < 0.2  # after the quiet, long before the bound


async def test_an_event_goes_at_once_when_nothing_is_written() -> None:
    """Reads, watches and writes outside our resources (a Secret's finalizer) are no writes
    to wait for."""
    lull = WritesLull(5.0, quiet=0.05)
    limit, server = RequestLimit(0, lull=lull), Server()
    events, writer = poster(lull)
    others = [
        asyncio.create_task(limit(request(f"{BASE}/s0", "GET"), server)),
        asyncio.create_task(limit(request(f"{BASE}?watch=true", "GET"), server)),
        asyncio.create_task(
            limit(request("https://127.0.0.1:6443/api/v1/namespaces/ns/secrets/a"), server)
        ),
    ]
    await asyncio.sleep(0.02)
    events.post(STREAM, "Normal", "Created", "made")
    await asyncio.sleep(0.02)
    assert len(writer.posted) == 1
    server.release.set()
    await asyncio.gather(*others)


async def test_writes_that_never_pause_hold_an_event_for_its_bound_only() -> None:
    """...which counts from when it happened, the time it carries."""
    lull = WritesLull(0.3, quiet=0.05)
    limit = RequestLimit(0, lull=lull)
    events, writer = poster(lull)
    writing = True

    async def answer_soon(request: Any) -> Any:
        await asyncio.sleep(0.01)
        return request.url

    async def write_on() -> None:
        while writing:  # one write always in flight, each a new one
            await limit(request(f"{BASE}/s0/status"), answer_soon)

    writer_task = asyncio.create_task(write_on())
    await asyncio.sleep(0.02)
    loop = asyncio.get_running_loop()
    started, happened = loop.time(), datetime.now(UTC)
    events.post(STREAM, "Normal", "Created", "made")
    try:
        while not writer.posted and loop.time() - started < 2.0:
            await asyncio.sleep(0.01)
    finally:
        writing = False
        await writer_task
    [(_, at, posted)] = writer.posted
    assert 0.25 <= posted - started < 1.0
    assert at is not None and abs((at - happened).total_seconds()) < 0.05


async def test_writes_held_by_a_burst_hold_events_too() -> None:
    """The writes a burst of creations holds are writes to come: an Event must not take their
    turn the moment the burst ends."""
    burst, lull = Burst(2.0, threshold=1, quiet=0.1), WritesLull(5.0, quiet=0.05)
    limit, arrivals = RequestLimit(0, burst=burst, lull=lull), Arrivals()
    events, writer = poster(lull)
    await read_watch(limit, f"{BASE}?watch=true", [added("s0")])
    write = asyncio.create_task(limit(request(f"{BASE}/s0/status"), arrivals))
    await asyncio.sleep(0.01)
    events.post(STREAM, "Normal", "Created", "made")
    await write
    await asyncio.sleep(0.2)
    [(_, written)] = arrivals.seen
    [(_, _, posted)] = writer.posted
    assert posted - written >= 0.04


async def test_shutting_down_posts_what_is_queued_at_once() -> None:
    events, writer, server, write = await status_held(30.0)
    for reason in ("Created", "Updated"):
        events.post(STREAM, "Normal", reason, "")
    await asyncio.sleep(0.05)
    await events.close()
    assert [reason for reason, _, _ in writer.posted] == ["Created", "Updated"]
    server.release.set()
    await write


async def test_a_place_under_the_limit_goes_to_other_requests_before_events() -> None:
    limit, server = RequestLimit(1, lull=WritesLull(5.0)), Server()
    arrivals = Arrivals()
    read = asyncio.create_task(limit(request(f"{BASE}/s0", "GET"), server))  # the one place
    await asyncio.sleep(0.01)
    event = asyncio.create_task(limit(request(EVENTS, "POST"), arrivals))
    await asyncio.sleep(0.01)
    write = asyncio.create_task(limit(request(f"{BASE}/s1/status"), arrivals))
    await asyncio.sleep(0.01)
    server.release.set()
    await asyncio.gather(read, event, write)
    assert [name for name, _ in arrivals.seen] == ["status", "events"]


class Failing(Writer):
    """Fails the first `failures[reason]` posts of an Event with that reason, with `error`."""

    def __init__(self, error: Exception, failures: dict[str, int]) -> None:
        super().__init__()
        self.error = error
        self.failures = dict(failures)
        self.tries: list[str] = []

    async def post_event(
        self, reference: Any, event_type: str, reason: str, message: str, at: Any = None
    ) -> None:
        self.tries.append(reason)
        if self.failures.get(reason, 0) > 0:
            self.failures[reason] -= 1
            raise self.error
        await super().post_event(reference, event_type, reason, message, at)


def failed(outcome: str) -> float:
    return (
        REGISTRY.get_sample_value("jetstream_operator_events_failed_total", {"outcome": outcome})
        or 0.0
    )


def retrying(writer: Failing) -> EventPoster:
    """A poster that waits 0.05 s before its first retry, doubling up to 0.2 s, unjittered."""
    return EventPoster(writer, None, jitter=lambda: 1.0, retry_seconds=(0.05, 0.2))  # type: ignore[arg-type]


async def test_an_event_refused_by_the_api_server_is_dropped_and_the_rest_go_on() -> None:
    writer = Failing(
        ApiError("POST", EVENTS, 403, "Forbidden", "namespace ns is terminating"), {"Broken": 1}
    )
    events = retrying(writer)
    dropped = failed("dropped")
    for reason in ("Created", "Broken", "Updated"):
        events.post(STREAM, "Normal", reason, "")
    await asyncio.sleep(0.3)
    assert [reason for reason, _, _ in writer.posted] == ["Created", "Updated"]
    assert writer.tries.count("Broken") == 1  # a refusal would be refused again
    assert failed("dropped") - dropped == 1
    events.post(STREAM, "Normal", "Deleted", "")  # the poster still runs
    await asyncio.sleep(0.05)
    assert writer.posted[-1][0] == "Deleted"


async def test_an_event_the_api_server_could_not_take_is_tried_again_with_its_own_time() -> None:
    """Unreachable, throttled or failing: a Warning may be the only word of a failure."""
    for error in (
        ConnectionResetError("the API server went away"),
        ApiError("POST", EVENTS, 503, "Service Unavailable", "etcd is not ready"),
        ApiError("POST", EVENTS, 429, "Too Many Requests", "slow down"),
    ):
        writer = Failing(error, {"Stalled": 2})
        events = retrying(writer)
        retried = failed("retried")
        happened = datetime.now(UTC)
        events.post(STREAM, "Warning", "Stalled", "")
        events.post(STREAM, "Normal", "Created", "")
        await asyncio.sleep(0.03)
        assert [reason for reason, _, _ in writer.posted] == ["Created"]  # not held up by it
        await asyncio.sleep(0.3)  # retried after 0.05 s, then after 0.1 s
        assert writer.tries == ["Stalled", "Created", "Stalled", "Stalled"]
        [(_, at, _)] = [each for each in writer.posted if each[0] == "Stalled"]
        assert at is not None and abs((at - happened).total_seconds()) < 0.02
        assert failed("retried") - retried == 2


async def test_an_event_that_keeps_failing_is_dropped_after_its_last_try() -> None:
    writer = Failing(ConnectionResetError("the API server went away"), {"Stalled": 100})
    events = retrying(writer)
    dropped = failed("dropped")
    events.post(STREAM, "Warning", "Stalled", "")
    await asyncio.sleep(1.0)  # waits of 0.05, 0.1, 0.2 and 0.2 s
    assert writer.tries == ["Stalled"] * EVENT_ATTEMPTS
    assert writer.posted == [] and events.waiting == 0
    assert failed("dropped") - dropped == 1


async def test_shutting_down_tries_an_event_waiting_for_its_retry_once_more() -> None:
    writer = Failing(ConnectionResetError("the API server went away"), {"Stalled": 1})
    events = EventPoster(writer, None, retry_seconds=(30.0, 30.0))  # type: ignore[arg-type]
    events.post(STREAM, "Warning", "Stalled", "")
    await asyncio.sleep(0.05)
    assert writer.posted == [] and events.waiting == 1
    await events.close()
    assert [reason for reason, _, _ in writer.posted] == ["Stalled"]


async def test_shutting_down_while_a_retry_is_in_flight_tries_it_once_more() -> None:
    """The retry's request is cut by the shutdown: the Event is still posted, not lost."""

    class Hanging(Failing):
        async def post_event(
            self, reference: Any, event_type: str, reason: str, message: str, at: Any = None
        ) -> None:
            if self.tries.count(reason) == 1:  # the retry: never answered
                self.tries.append(reason)
                await asyncio.Event().wait()
            await super().post_event(reference, event_type, reason, message, at)

    writer = Hanging(ConnectionResetError("the API server went away"), {"Stalled": 1})
    events = EventPoster(writer, None, jitter=lambda: 1.0, retry_seconds=(0.01, 0.01))  # type: ignore[arg-type]
    events.post(STREAM, "Warning", "Stalled", "")
    await asyncio.sleep(0.1)
    assert writer.tries == ["Stalled", "Stalled"] and writer.posted == []
    await events.close()
    assert [reason for reason, _, _ in writer.posted] == ["Stalled"]


async def test_with_warnings_only_a_normal_event_is_not_queued() -> None:
    writer = Writer()
    events = EventPoster(writer, None, normal=False)  # type: ignore[arg-type]
    events.post(STREAM, "Normal", "Created", "")
    events.post(STREAM, "Warning", "ServerRejected", "")
    await asyncio.sleep(0.05)
    assert [reason for reason, _, _ in writer.posted] == ["ServerRejected"]


async def test_each_event_that_waited_counts_once_with_its_wait() -> None:
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    counted, seconds = (
        "jetstream_operator_events_deferred_total",
        "jetstream_operator_events_deferred_seconds_total",
    )
    before = sample(counted), sample(seconds)
    events, writer, server, write = await status_held(5.0)
    for reason in ("Created", "Updated", "Deleted"):
        events.post(STREAM, "Normal", reason, "")
    await asyncio.sleep(0.1)
    server.release.set()
    await write
    await asyncio.sleep(0.2)
    assert len(writer.posted) == 3
    assert sample(counted) - before[0] == 3
    assert sample(seconds) - before[1] >= 3 * 0.1
    events.post(STREAM, "Normal", "Synced", "")  # nothing written now: not held, not counted
    await asyncio.sleep(0.05)
    assert len(writer.posted) == 4
    assert sample(counted) - before[0] == 3
