"""A new consumer applied with its Stream waits a moment for the Stream's watch event, which
comes on its own watch and may reach the operator just after the consumer's."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import kopf

from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.passes.consumer import STREAM_REF_WAIT, stream_of_new_consumer
from jetstream_operator.reconcile.ownership import Owner


def body(uid: str, resource: str, **spec: Any) -> Any:
    return {"metadata": {"uid": uid, "name": resource, "namespace": "ns"}, "spec": spec}


def memo() -> Any:
    return SimpleNamespace(streams=ResourceRegistry(), consumers=ResourceRegistry())


async def test_the_stream_arriving_a_moment_later_is_found() -> None:
    shared = memo()
    consumer = body("c1", "reader", durableName="R", streamRef="orders")
    shared.consumers.observe("ADDED", consumer)
    later = asyncio.get_running_loop().call_later(
        0.1, shared.streams.observe, "ADDED", body("s1", "orders", name="ORDERS")
    )
    try:
        found = await stream_of_new_consumer(
            shared,
            Owner("ns", "reader", "c1"),
            kopf.Body(consumer).spec,
            kopf.Body(consumer).status,
        )
    finally:
        later.cancel()
    assert found == "ORDERS"


async def test_a_consumer_with_a_status_does_not_wait() -> None:
    """Its stream is really missing (StreamNotFound before): a retry reports it at once."""
    shared = memo()
    consumer = body("c1", "reader", durableName="R", streamRef="orders")
    shared.consumers.observe("ADDED", consumer)
    loop = asyncio.get_running_loop()
    started = loop.time()
    consumer["status"] = {"conditions": [{"type": "Ready"}]}
    handled = kopf.Body(consumer)
    found = await stream_of_new_consumer(
        shared, Owner("ns", "reader", "c1"), handled.spec, handled.status
    )
    assert found is None and loop.time() - started < STREAM_REF_WAIT / 4
