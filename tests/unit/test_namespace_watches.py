"""NamespaceWatches, the list-then-watch of NatsConnections where kopf does not watch them:
what it reports from listings and watch events, against a scripted API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from jetstream_operator.k8s.client import ApiError, KubeApi
from jetstream_operator.k8s.watch import NamespaceWatches


def item(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


class ScriptedApi:
    """Answers listings and watches from scripts; a watch past its script waits forever."""

    def __init__(self, listings: list[Any], watches: list[list[dict[str, Any]] | Exception]):
        self.listings = listings
        self.watches = watches
        self.watched_from: list[str] = []
        self.closed = False

    async def request(self, method: str, path: str) -> Any:
        assert (method, path) == ("GET", "/apis/jetstream-operator.io/v1alpha1/namespaces/ns/x")
        answer = self.listings.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(self, path: str, version: str) -> AsyncIterator[dict[str, Any]]:
        self.watched_from.append(version)
        if not self.watches:
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event

    async def close(self) -> None:
        self.closed = True


async def test_changes_come_from_listings_and_watches_and_a_410_lists_again(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr("jetstream_operator.k8s.watch.SHORTEST_WATCH", 0.0)
    api = ScriptedApi(
        listings=[
            {"metadata": {"resourceVersion": "10"}, "items": [item("a", "1"), item("b", "2")]},
            # After the 410: b went while nobody watched, a is unchanged, c is new.
            {"metadata": {"resourceVersion": "30"}, "items": [item("a", "11"), item("c", "25")]},
        ],
        watches=[
            [
                {"type": "MODIFIED", "object": item("a", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            ],  # ends as the server's timeout ends it: watch again from the bookmark
            [{"type": "ERROR", "object": {"code": 410}}],
        ],
    )
    seen: list[tuple[str, str]] = []

    async def observe(event_type: str, body: dict[str, Any]) -> None:
        seen.append((event_type, body["metadata"]["name"]))

    watches = NamespaceWatches(cast(KubeApi, api), "x", observe)
    assert await watches.follow("ns")
    for _ in range(50):
        if len(api.watched_from) == 3:
            break
        await asyncio.sleep(0.01)
    await watches.stop()
    assert api.watched_from == ["10", "12", "30"]
    assert seen == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("ADDED", "c"),
    ]
    assert api.closed


async def test_a_failed_first_listing_is_reported_and_tried_again(monkeypatch: Any) -> None:
    monkeypatch.setattr("jetstream_operator.k8s.watch.FIRST_LISTING_TIMEOUT", 0.05)
    monkeypatch.setattr("jetstream_operator.k8s.watch.RETRY_SECONDS", (0.1, 0.1))
    refused = ApiError("GET", "/x", 403, "Forbidden", "no")
    api = ScriptedApi(
        listings=[refused, {"metadata": {"resourceVersion": "5"}, "items": [item("a", "1")]}],
        watches=[],
    )
    seen: list[str] = []

    async def observe(event_type: str, body: dict[str, Any]) -> None:
        seen.append(event_type)

    watches = NamespaceWatches(cast(KubeApi, api), "x", observe)
    assert not await watches.follow("ns")
    deadline = asyncio.get_running_loop().time() + 10  # a loaded machine is slow, not wrong
    while not await watches.follow("ns"):  # the same task, listed on its second try
        assert asyncio.get_running_loop().time() < deadline
    assert seen == ["ADDED"]
    await watches.stop()


async def test_watches_that_end_at_once_are_not_asked_again_in_a_tight_loop(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr("jetstream_operator.k8s.watch.SHORTEST_WATCH", 0.2)
    api = ScriptedApi(
        listings=[{"metadata": {"resourceVersion": "1"}, "items": []}],
        watches=[[] for _ in range(100)],  # each ends at once, with no event
    )

    async def observe(event_type: str, body: dict[str, Any]) -> None:
        raise AssertionError("nothing changed")

    watches = NamespaceWatches(cast(KubeApi, api), "x", observe)
    assert await watches.follow("ns")
    await asyncio.sleep(0.5)
    await watches.stop()
    assert 2 <= len(api.watched_from) <= 4, api.watched_from
