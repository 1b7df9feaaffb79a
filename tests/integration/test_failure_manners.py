"""Calm when failing: a stalled resource posts one Warning and retries with growing pauses;
a fixed spec is acted on at once. Counted from the servers' own figures."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import ApiAudit, apiserver_writes, difference
from .helpers import Resources, condition, eventually, is_ready, nats_connection, warnings

pytestmark = pytest.mark.integration


@pytest.fixture
def patient_operator(operator_process: OperatorProcess, namespace: str) -> Iterator[None]:
    """Backoff from 1 s up to a minute, a resync every second, serving this namespace only."""
    with operator_variant(
        operator_process,
        JETSTREAM_OPERATOR_NAMESPACES=namespace,
        JETSTREAM_OPERATOR_RESYNC_INTERVAL="1",
        JETSTREAM_OPERATOR_RETRY_BASE_DELAY="1",
        JETSTREAM_OPERATOR_RETRY_MAX_DELAY="60",
    ):
        yield


@pytest.mark.usefixtures("patient_operator")
async def test_a_rejected_stream_warns_once_backs_off_and_recovers_when_fixed(
    resources: Resources,
    nc: Client,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Any,
) -> None:
    prefix = namespace.replace("-", "_").lower()
    jetstream = JetStreamApi(nc)
    foreign = f"{prefix.upper()}_FOREIGN"
    await jetstream.create_stream({"name": foreign, "subjects": [f"{prefix}.>"]})
    audit = await ApiAudit().start(nc)
    try:
        stream = f"{prefix.upper()}_MINE"
        resources.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": "overlapping"},
                "spec": {"name": stream, "subjects": [f"{prefix}.orders"]},
            },
        )

        async def stalled() -> bool:
            found = condition(resources.get("streams", "overlapping"), "Stalled")
            return found.get("status") == "True" and found.get("reason") == "ServerRejected"

        await eventually(stalled, timeout=30)
        writes_before = apiserver_writes(control_plane)
        creates_before = audit.count("STREAM.CREATE", stream)
        await asyncio.sleep(20)  # twenty resyncs
        attempts = audit.count("STREAM.CREATE", stream) - creates_before
        # Backoff of 1, 2, 4, 8, 16 s (jittered into half..full): at most 6 tries in 20 s,
        # where retrying on every resync would make 20.
        assert 1 <= attempts <= 6, audit.subjects[-40:]
        assert difference(apiserver_writes(control_plane), writes_before) == {}
        assert warnings(api_client, namespace, "overlapping") == ["ServerRejected"]

        resources.patch_spec("streams", "overlapping", {"subjects": [f"other{prefix}.orders"]})
        await eventually(lambda: _ready(resources, "overlapping"), timeout=15)
    finally:
        await audit.stop()


async def _ready(resources: Resources, name: str) -> bool:
    return is_ready(resources.get("streams", name))


async def test_an_outage_shows_as_reconciling_on_ready_resources_and_clears(
    resources: Resources, namespace: str, tmp_path: Path, operator_process: OperatorProcess
) -> None:
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        resources.create("natsconnections", nats_connection("own", [server.url]))
        name = namespace.replace("-", "_").upper()
        resources.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": "steady"},
                "spec": {"name": name, "connectionRef": "own"},
            },
        )
        await eventually(lambda: _ready(resources, "steady"), timeout=30)
        server.stop()

        async def shows_outage() -> bool:
            resource = resources.get("streams", "steady")
            return (
                condition(resource).get("status") == "False"
                and condition(resource, "Reconciling").get("status") == "True"
                and condition(resource, "Stalled").get("status") == "False"
            )

        try:
            await eventually(shows_outage, timeout=40)
        except AssertionError:
            print("STATUS", (resources.get("streams", "steady") or {}).get("status"))
            raise
        server.start()
        await eventually(lambda: _ready(resources, "steady"), timeout=40)
    finally:
        server.stop()
