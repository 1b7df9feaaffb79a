"""Events are posted in the pauses of our writes, under the request limit, and retried or
dropped by what the API server answers.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from jetstream_operator.k8s.client import ApiError
from jetstream_operator.k8s.status import EVENT_ATTEMPTS, EventPoster
from jetstream_operator.k8s.throttle import (
    Burst,
    RequestLimit,
    WritesLull,
)
from jetstream_operator.metrics import REGISTRY

from .request_fakes import BASE, Server, added, read_watch, request

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
