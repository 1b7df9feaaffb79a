"""What a real nats-server answers to a create, which a resource's first pass relies on when it
creates without looking first: the create of a stream or consumer identical to one the server
holds is answered with what it holds (and its age shows in the reply), a different one is
refused with the codes the handlers look for, on a single server and on a 3-node cluster."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from jetstream_operator.metrics import REGISTRY
from jetstream_operator.nats.jsapi import (
    CONSUMER_EXISTS,
    STREAM_NAME_IN_USE,
    JetStreamApi,
    JetStreamError,
)
from jetstream_operator.reconcile.consumer_config import consumer_request
from jetstream_operator.reconcile.live_state import existed_before

pytestmark = [pytest.mark.integration]


def found_there(operation: str) -> float:
    """Creates refused because the object is there: counted apart from the failures."""
    labels = {"operation": operation, "error": "exists"}
    return REGISTRY.get_sample_value("jetstream_operator_nats_request_errors_total", labels) or 0.0


async def _answers(jetstream: JetStreamApi, replicas: int) -> None:
    name = f"ANSWERS_{uuid.uuid4().hex[:8].upper()}"
    config: dict[str, Any] = {
        "name": name,
        "subjects": [f"{name.lower()}.>"],
        "num_replicas": replicas,
        "metadata": {"owner": "ns/a/uid-1"},
    }
    consumer = {
        "durable_name": "READER",
        "name": "READER",
        "ack_policy": "explicit",
        "num_replicas": replicas,
    }
    made = await jetstream.create_stream(config)
    assert not existed_before(made, older_than=0.5)
    await jetstream.create_consumer(name, consumer_request(name, consumer, "create"))
    try:
        await asyncio.sleep(1.0)
        again = await jetstream.create_stream(config)
        assert again["created"] == made["created"]
        assert existed_before(again, older_than=0.5)
        counted = found_there("STREAM.CREATE")
        with pytest.raises(JetStreamError) as refused:
            await jetstream.create_stream({**config, "metadata": {"owner": "ns/a/uid-2"}})
        assert refused.value.err_code == STREAM_NAME_IN_USE
        assert found_there("STREAM.CREATE") == counted + 1

        same = await jetstream.create_consumer(name, consumer_request(name, consumer, "create"))
        assert existed_before(same, older_than=0.5)
        counted = found_there("CONSUMER.CREATE")
        with pytest.raises(JetStreamError) as taken:
            other = {**consumer, "description": "another"}
            await jetstream.create_consumer(name, consumer_request(name, other, "create"))
        assert taken.value.err_code == CONSUMER_EXISTS
        assert found_there("CONSUMER.CREATE") == counted + 1
    finally:
        await jetstream.delete_stream(name)


async def test_a_single_server_answers_an_identical_create_and_refuses_another(
    nc: Client,
) -> None:
    await _answers(JetStreamApi(nc), replicas=1)


async def test_a_cluster_answers_an_identical_create_and_refuses_another(nats_cluster: Any) -> None:
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        await _answers(JetStreamApi(connection), replicas=3)
    finally:
        await connection.close()
