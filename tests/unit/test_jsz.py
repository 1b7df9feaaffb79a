"""Every consumer of an account from the servers' JetStream monitoring (JSZ): whose view of a
consumer counts, when a stream counts as covered, and that a resync lists only what the
monitoring did not cover."""

from __future__ import annotations

from typing import Any

from jetstream_operator.handlers.failures import FailureMemory
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.nats.jsz import AccountConsumers, gathered, stream_peers

from .test_handler_glue import FakeJetStream, RecordingWriter, as_api, stream_body, watcher


def answer(server: str, streams: dict[str, list[dict[str, Any]]], **extra: Any) -> dict[str, Any]:
    details = [{"name": name, "consumer_detail": consumers} for name, consumers in streams.items()]
    return {"server": {"name": server}, "data": {"stream_detail": details}, **extra}


def consumer(name: str, leader: str, pending: int) -> dict[str, Any]:
    return {"name": name, "num_pending": pending, "cluster": {"leader": leader}}


def clustered(leader: str | None, *replicas: str) -> dict[str, Any]:
    return {"cluster": {"leader": leader, "replicas": [{"name": name} for name in replicas]}}


def test_the_leaders_view_of_a_consumer_wins_whatever_the_order_of_answers() -> None:
    answers = [
        answer("n1", {"S": [consumer("C", "n2", 7)]}),
        answer("n2", {"S": [consumer("C", "n2", 5)]}),
        answer("n3", {"S": [consumer("C", "n2", 9)]}),
    ]
    for ordered in (answers, answers[::-1]):
        assert gathered(ordered).consumers["S"]["C"]["num_pending"] == 5


def test_without_its_leaders_answer_a_followers_view_stands_in() -> None:
    view = gathered([answer("n1", {"S": [consumer("C", "n2", 7)]})])
    assert view.consumers["S"]["C"]["num_pending"] == 7


def test_an_answer_with_an_error_is_not_counted_as_given() -> None:
    view = gathered(
        [
            answer("n1", {"S": []}),
            {"server": {"name": "n2"}, "error": {"code": 500, "description": "not enabled"}},
        ]
    )
    assert view.answered == {"n1"}


def test_a_stream_is_covered_only_when_every_peer_answered() -> None:
    view = gathered([answer("n1", {"S": [consumer("C", "n1", 1)]}), answer("n2", {})])
    assert view.covering("S", clustered("n1", "n2")) == {"C": view.consumers["S"]["C"]}
    assert view.covering("S", clustered("n1", "n2", "n3")) is None  # n3 may hold a consumer
    assert view.covering("S", clustered(None, "n1")) is None  # leaderless: nothing answers for it
    assert view.covering("T", clustered("n2")) == {}  # answered, and holds no consumer of T


def test_an_unclustered_stream_is_covered_by_the_lone_server_only() -> None:
    alone = gathered([answer("n1", {"S": [consumer("C", "n1", 1)]})])
    assert stream_peers({}) is None
    assert alone.covering("S", {}) is not None
    two = gathered([answer("n1", {}), answer("n2", {})])
    assert two.covering("S", {}) is None


async def test_a_resync_lists_only_the_streams_the_monitoring_did_not_cover() -> None:
    server = FakeJetStream()
    streams, consumers = ResourceRegistry(), ResourceRegistry()
    for name in ("a", "b"):
        streams.observe("ADDED", stream_body(name, f"uid-{name}", {"name": name.upper()}))
        body = stream_body(f"w-{name}", f"uid-w-{name}", {"name": "unused"})
        body["spec"] = {"durableName": "W", "streamName": name.upper()}
        consumers.observe("ADDED", body)
    asked: list[frozenset[str]] = []
    answers: list[AccountConsumers | None] = []

    async def monitoring(servers: frozenset[str]) -> AccountConsumers | None:
        asked.append(servers)
        found = answers.pop(0)
        if found is None:
            raise TimeoutError("no answer")
        return found

    drift = watcher(streams, RecordingWriter(), FailureMemory(), consumers, monitoring)
    await drift.resync(as_api(server))  # makes the streams, then their consumers
    assert asked == [] and server.sent("CONSUMER.CREATE") == 2
    answers.append(None)  # the monitoring fails: every stream's consumers are listed
    drift._sweep.everything_next()
    server.requests.clear()
    await drift.resync(as_api(server))
    assert server.sent("CONSUMERS") == 2
    server.requests.clear()

    held = server._consumer_info("A", "W")
    answers.append(gathered([answer("n1", {"A": [held]})]))
    drift._sweep.everything_next()
    await drift.resync(as_api(server))
    # A's consumer came from the monitoring, in sync: no request for it. B is covered too (the
    # lone server answered) without its W, which is looked up on its own before anything else.
    assert server.requests == ["LIST", "CONSUMER.INFO B W"]
    assert asked == [frozenset(), frozenset()]
