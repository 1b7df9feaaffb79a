"""The Stream handlers' part in announcements, as registered with kopf: a first pass that made
nothing announces its stream (the consumers applied with it look now), and the finalizer forgets
the announcement (a consumer applied after the deletion waits for the next creation rather than
look at once and report StreamNotFound)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from jetstream_operator import main
from jetstream_operator.handlers.arrivals import StreamArrivals
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.passes import stream_backed


def stream_resource() -> kopf.Body:
    raw: Any = {
        "metadata": {"uid": "u1", "name": "orders", "namespace": "ns", "generation": 1},
        "spec": {"name": "ORDERS", "subjects": ["orders.>"]},
    }
    return kopf.Body(raw)


async def call(handler: Any, body: kopf.Body, memo: Any, reason: str) -> None:
    await handler(
        spec=body.spec,
        meta=body.metadata,
        status=body.status,
        memo=memo,
        body=body,
        patch=kopf.Patch(),
        namespace="ns",
        name="orders",
        reason=reason,
    )


async def test_the_stream_finalizer_forgets_the_announcement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: list[bool] = []

    async def without_work(*_: Any, deleting: bool, **__: Any) -> None:
        passes.append(deleting)  # the pass's own work (NATS, status) is not what is tested

    monkeypatch.setattr(stream_backed, "run_pass", without_work)
    arrivals = StreamArrivals()
    memo = SimpleNamespace(arrivals=arrivals, backed={"Stream": ResourceRegistry()})
    handlers = main.STREAM_BACKED_HANDLERS["Stream"]
    body = stream_resource()

    await call(handlers.reconcile, body, memo, kopf.Reason.CREATE)
    assert await arrivals.wait("ORDERS", timeout=0) is True

    await call(handlers.finalize, body, memo, kopf.Reason.DELETE)
    assert passes == [False, True]
    assert await arrivals.wait("ORDERS", timeout=0) is False
