"""JETSTREAM_OPERATOR_EVENTS=warnings: a resource is created, updated, repaired after drift and
Ready without a single Normal Event, and a failure still posts its Warning (read from the API
server's Event list)."""

from __future__ import annotations

from typing import Any

import nats
import pytest
from kubernetes import client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration]


async def test_warnings_only_posts_no_normal_event(
    operator_process: OperatorProcess,
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    nats_server: Any,
) -> None:
    name = namespace.replace("-", "_").upper()
    with operator_variant(operator_process, JETSTREAM_OPERATOR_EVENTS="warnings"):
        resources.create(
            "streams", {"kind": "Stream", "metadata": {"name": "calm"}, "spec": {"name": name}}
        )

        async def ready() -> bool:
            return is_ready(resources.get("streams", "calm"))

        await eventually(ready, timeout=30)
        resources.patch_spec("streams", "calm", {"maxMsgs": 10})

        async def updated() -> bool:
            resource = resources.get("streams", "calm") or {}
            ready = condition(resource)
            return is_ready(resource) and ready.get("observedGeneration") == 2

        await eventually(updated, timeout=30)
        connection = await nats.connect(nats_server.url)
        try:
            jetstream = JetStreamApi(connection)
            await jetstream.delete_stream(name)  # out of band: drift repair makes it again

            async def repaired() -> bool:
                return await jetstream.stream_info(name) is not None

            await eventually(repaired, timeout=30)
        finally:
            await connection.close()
        # A Warning posted after the repair: Events go in order, so a Normal Event of the
        # repair would be listed by then.
        resources.create(
            "streams", {"kind": "Stream", "metadata": {"name": "second"}, "spec": {"name": name}}
        )

        async def conflict() -> bool:
            return condition(resources.get("streams", "second")).get("reason") == "Conflict"

        await eventually(conflict, timeout=30)

        def events() -> list[client.CoreV1Event]:
            return list(client.CoreV1Api(api_client).list_namespaced_event(namespace).items)

        async def warned() -> bool:
            return any(event.reason == "Conflict" for event in events())

        await eventually(warned, timeout=30)
        assert {event.type for event in events()} == {"Warning"}, [
            (event.type, event.reason) for event in events()
        ]
