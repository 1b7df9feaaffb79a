"""The worker setting reaches kopf: a limit when set, none for 0, and workers that let go of
their place soon after their last event (a place held idle for kopf's 5 s would throttle a
limited operator to a few resources a second)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from jetstream_operator.queueing import WORKER_IDLE_TIMEOUT, release_deleted_workers, tune_queueing


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
    key = ("streams", "uid-1")
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


def event(kind: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"uid": "uid-1", "resourceVersion": version}}}


async def test_a_deleted_resource_frees_its_workers_place_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finalizer's removal is answered with a version kopf marks as never arriving; its
    worker waited 5 s for it after the DELETED event, holding a place under the limit."""
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)  # restored afterwards
    assert release_deleted_workers()
    assert release_deleted_workers()  # twice wraps once
    seen = await run_worker(
        [event("MODIFIED", "5"), event("DELETED", "6")], ["5~which~never~arrives", None]
    )
    assert seen == ["MODIFIED", "DELETED"]


async def test_a_live_resource_keeps_its_worker_for_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kopf._core.reactor import queueing

    monkeypatch.setattr(queueing, "worker", queueing.worker)
    assert release_deleted_workers()
    seen = await run_worker([event("ADDED", "5"), event("MODIFIED", "6")], [None, None])
    assert seen == ["ADDED", "MODIFIED"]
