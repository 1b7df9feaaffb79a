"""The worker setting reaches kopf: a limit when set, none for 0, and workers that let go of
their place soon after their last event (a place held idle for kopf's 5 s would throttle a
limited operator to a few resources a second)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from jetstream_operator.kopf_adaptations import STREAMLINED_WORKERS
from jetstream_operator.queueing import (
    WORKER_IDLE_TIMEOUT,
    EventObservers,
    observe_events,
    tune_queueing,
)

GROUP = "example.io"


@pytest.mark.parametrize(("workers", "limit"), [(0, None), (1, 1), (16, 16)])
def test_workers_become_kopfs_limit(workers: int, limit: int | None) -> None:
    settings = kopf.OperatorSettings()
    tune_queueing(settings, workers)
    assert settings.queueing.worker_limit == limit
    assert settings.queueing.idle_timeout == WORKER_IDLE_TIMEOUT < 1.0


async def run_worker(events: list[dict[str, Any]], versions: list[str | None]) -> list[str]:
    """kopf's own worker on one resource's events, with a processor that answers each event
    with the patched version given for it; the event types it saw, in order."""
    from kopf._core.reactor import queueing

    settings = kopf.OperatorSettings()
    settings.queueing.idle_timeout = WORKER_IDLE_TIMEOUT
    key = (kopf.Resource(GROUP, "v1", "streams"), "uid-1")
    backlog: asyncio.Queue[Any] = asyncio.Queue()
    for event in events:
        backlog.put_nowait(event)
    streams = {key: queueing.Stream(backlog=backlog, pressure=asyncio.Event())}
    seen: list[str] = []
    answers = iter(versions)

    async def processor(*, raw_event: dict[str, Any], **_: Any) -> str | None:
        seen.append(raw_event["type"])
        return next(answers)

    worker: Any = queueing.worker  # the wrapped one, when patched; fed plain test doubles
    await asyncio.wait_for(
        worker(
            signaller=asyncio.Condition(),
            settings=settings,
            processor=processor,
            streams=streams,
            key=key,
        ),
        timeout=2.0,  # kopf's consistency wait alone is 5 s
    )
    assert key not in streams, "the worker gave up its stream"
    return seen


HANDLED = '{"spec": {"name": "ORDERS"}}'
"""A configuration as kopf stores it once its handlers have run."""


def event(kind: str, version: str, stored: str | None = None, **metadata: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"uid": "uid-1", "resourceVersion": version, **metadata}}
    if stored is not None:
        body["status"] = {"lastHandledConfiguration": stored}
    return {"type": kind, "object": body}


async def test_a_deleted_resource_frees_its_workers_place_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finalizer's removal is answered with a version kopf marks as never arriving; its
    worker waited 5 s for it after the DELETED event, holding a place under the limit."""
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)  # restored afterwards
    assert STREAMLINED_WORKERS.apply()
    assert STREAMLINED_WORKERS.apply()  # twice wraps once
    seen = await run_worker(
        [event("MODIFIED", "5"), event("DELETED", "6")], ["5~which~never~arrives", None]
    )
    assert seen == ["MODIFIED", "DELETED"]


async def test_a_live_resource_keeps_its_worker_for_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)
    assert STREAMLINED_WORKERS.apply()
    seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6")], [None, None])
    assert seen == ["ADDED", "MODIFIED"]


@pytest.fixture
def echoes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The worker streamlined, and the versions of streams' events told to a list."""
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)
    assert STREAMLINED_WORKERS.apply()
    observed: list[str] = []
    observe_events(
        EventObservers(
            GROUP,
            {"streams": lambda raw: observed.append(raw["object"]["metadata"]["resourceVersion"])},
            "status.lastHandledConfiguration",
            progress_prefix="kopf.example.io",
        )
    )
    yield observed
    observe_events(None)


async def test_the_echo_of_kopfs_own_patch_goes_to_the_observer_not_kopf(
    echoes: list[str],
) -> None:
    seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6", HANDLED)], ["6", None])
    assert seen == ["ADDED"]
    assert echoes == ["5", "6"]


@pytest.mark.parametrize(
    ("events", "why"),
    [
        # Someone wrote between the handled event and the echo: kopf diffs the echo against the
        # configuration it stored from the handled event, and must run the update handler.
        (
            [event("ADDED", "5"), event("MODIFIED", "6"), event("MODIFIED", "7", HANDLED)],
            "written between",
        ),
        (
            [
                event("ADDED", "5"),
                event("MODIFIED", "7", HANDLED, deletionTimestamp="2026-11-28T03:00:00Z"),
            ],
            "being deleted",
        ),
        (
            [
                event("ADDED", "5"),
                event("MODIFIED", "7", HANDLED, annotations={"kopf.example.io/r": "{}"}),
            ],
            "a handler to retry",
        ),
        # kopf patched without running handlers (it added its finalizer, or patched while it
        # waited for consistency): the stored configuration is as before, and the spec may
        # differ from it, so the handlers run on the echo.
        (
            [event("MODIFIED", "5", HANDLED), event("MODIFIED", "7", HANDLED)],
            "a patch that stored no configuration",
        ),
    ],
)
async def test_kopf_sees_every_event_that_is_not_a_plain_echo(
    echoes: list[str], events: list[dict[str, Any]], why: str
) -> None:
    seen = await run_worker(events, ["7"] + [None] * (len(events) - 1))
    assert len(seen) == len(events), why
    assert echoes == [raw["object"]["metadata"]["resourceVersion"] for raw in events]


async def test_an_echo_without_the_stored_configuration_goes_to_kopf(echoes: list[str]) -> None:
    """kopf's first patch of a resource without the finalizer adds only the finalizer; the
    handlers run on its echo."""
    seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6")], ["6", None])
    assert seen == ["ADDED", "MODIFIED"]
    assert echoes == ["5", "6"]


async def test_kinds_without_an_observer_see_their_echoes(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)
    assert STREAMLINED_WORKERS.apply()
    observe_events(EventObservers(GROUP, {}, "status.lastHandledConfiguration", "kopf.example.io"))
    try:
        seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6", HANDLED)], ["6", None])
    finally:
        observe_events(None)
    assert seen == ["ADDED", "MODIFIED"]


async def test_a_failing_observer_leaves_kopf_its_events(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf._core.reactor import queueing

    def observer(raw: Any) -> None:
        raise ValueError("a bug in the observer")

    monkeypatch.setattr(queueing, "worker", queueing.worker)
    assert STREAMLINED_WORKERS.apply()
    observe_events(
        EventObservers(GROUP, {"streams": observer}, "status.lastHandledConfiguration", "k")
    )
    try:
        seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6")], [None, None])
    finally:
        observe_events(None)
    assert seen == ["ADDED", "MODIFIED"]


def test_only_the_observed_kinds_of_the_operators_group_are_observed() -> None:
    observers = EventObservers(GROUP, {"streams": print}, "status.lastHandledConfiguration", "k")
    assert observers.observer(kopf.Resource(GROUP, "v1", "streams")) is print
    assert observers.observer(kopf.Resource("jetstream.nats.io", "v1beta2", "streams")) is None
    assert observers.observer(kopf.Resource(GROUP, "v1", "natsconnections")) is None
