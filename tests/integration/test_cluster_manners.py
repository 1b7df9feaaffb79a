"""On the 3-node cluster: settled R1 and R3 streams and their consumers write nothing while idle
and stay within the status budget while busy; a meta leader lost during a batch of creates and
updates is Reconciling, never Stalled. Writes come from kube-apiserver's own /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from kubernetes import client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import apiserver_writes, difference
from .helpers import Resources, condition, eventually, is_ready, json_body

pytestmark = [pytest.mark.integration, pytest.mark.local_servers]

STATUS_INTERVAL = 4.0


@pytest.fixture
def cluster_operator(
    operator_process: OperatorProcess,
    nats_cluster: Any,
    namespace: str,
    api_client: client.ApiClient,
) -> Iterator[None]:
    """The operator on the cluster, for this namespace only, with a short status interval."""
    with operator_variant(
        operator_process,
        nats_url=",".join(nats_cluster.urls),
        JETSTREAM_OPERATOR_NAMESPACES=namespace,
        JETSTREAM_OPERATOR_RESYNC_INTERVAL="1",
        JETSTREAM_OPERATOR_STATUS_INTERVAL=str(STATUS_INTERVAL),
    ):
        yield
        # Leave the shared cluster as the next test expects it: no load of ours, every node
        # back and current.
        objects = client.CustomObjectsApi(api_client)
        for plural in ("consumers", "streams"):
            listed = json_body(
                objects.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
            )
            for item in listed["items"]:
                objects.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, item["metadata"]["name"]
                )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            json_body(objects.list_namespaced_custom_object(GROUP, VERSION, namespace, plural))[
                "items"
            ]
            for plural in ("consumers", "streams")
        ):
            time.sleep(0.5)
    nats_cluster.wait_ready(timeout=120)


def event_count(api_client: client.ApiClient, namespace: str) -> int:
    return len(client.CoreV1Api(api_client).list_namespaced_event(namespace).items)


async def all_ready(resources: Resources, plural: str, names: list[str]) -> bool:
    return all(is_ready(resources.get(plural, name)) for name in names)


@pytest.mark.usefixtures("cluster_operator")
async def test_settled_resources_write_nothing_idle_and_little_busy(
    resources: Resources,
    nats_cluster: Any,
    namespace: str,
    control_plane: Any,
    api_client: client.ApiClient,
) -> None:
    prefix = namespace.replace("-", "_").upper()
    names = []
    for replicas in (1, 3):
        name = f"r{replicas}"
        names.append(name)
        resources.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": name},
                "spec": {
                    "name": f"{prefix}_{name.upper()}",
                    "replicas": replicas,
                    "subjects": [f"{namespace}.{name}.>"],
                },
            },
        )
        resources.create(
            "consumers",
            {
                "kind": "Consumer",
                "metadata": {"name": f"{name}-reader"},
                "spec": {"durableName": "READER", "streamRef": name, "replicas": replicas},
            },
        )
    consumers = [f"{name}-reader" for name in names]
    await eventually(lambda: all_ready(resources, "streams", names), timeout=60)
    await eventually(lambda: all_ready(resources, "consumers", consumers), timeout=60)

    async def counts_complete() -> bool:
        return all(
            ((resources.get("streams", name) or {}).get("status") or {}).get("consumerCount") == 1
            for name in names
        )

    await eventually(counts_complete, timeout=15)  # within seconds of Ready, not a resync later
    await asyncio.sleep(STATUS_INTERVAL + 2)  # let the last counter writes land

    before, events_before = apiserver_writes(control_plane), event_count(api_client, namespace)
    await asyncio.sleep(10)  # ten resyncs
    assert difference(apiserver_writes(control_plane), before) == {}
    assert event_count(api_client, namespace) == events_before

    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        js = connection.jetstream()
        before = apiserver_writes(control_plane)
        published = 0
        window = 12.0
        loop = asyncio.get_running_loop()
        until = loop.time() + window
        while loop.time() < until:
            await js.publish(f"{namespace}.r3.busy", b"x")
            published += 1
            await asyncio.sleep(0.05)
        written = difference(apiserver_writes(control_plane), before)
    finally:
        await connection.close()
    status_writes = written.get("PATCH streams/status", 0) + written.get(
        "PATCH consumers/status", 0
    )
    # The busy stream and its consumer: at most one write per interval each (and one more
    # for the window's edges); the idle R1 pair writes nothing.
    assert 1 <= status_writes <= 2 * (window / STATUS_INTERVAL + 1), (written, published)
    assert set(written) <= {"PATCH streams/status", "PATCH consumers/status"}, written


@pytest.mark.usefixtures("cluster_operator")
async def test_a_meta_leader_lost_during_creates_and_updates_is_reconciling_not_stalled(
    resources: Resources, nats_cluster: Any, namespace: str
) -> None:
    prefix = namespace.replace("-", "_").upper()
    names = [f"s{index}" for index in range(6)]
    seen: dict[str, set[str]] = {name: set() for name in names}

    async def watch_conditions() -> None:
        while True:
            for name in names:
                resource = resources.get("streams", name)
                for kind in ("Ready", "Stalled"):
                    found = condition(resource, kind)
                    if found.get("status") == "True" and kind == "Stalled":
                        seen[name].add(f"Stalled:{found.get('reason')}")
                    if kind == "Ready" and found.get("status") == "False":
                        seen[name].add(str(found.get("reason")))
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch_conditions())
    leader = nats_cluster.meta_leader()
    assert leader is not None
    try:
        for name in names[:3]:
            resources.create("streams", _stream(name, prefix, 3))
        nats_cluster.node(leader).kill()
        for name in names[3:]:
            resources.create("streams", _stream(name, prefix, 3))
        for name in names[:3]:
            resources.patch_spec("streams", name, {"maxMsgs": 1000})
        await asyncio.sleep(5)
        nats_cluster.node(leader).start()
        await eventually(lambda: all_ready(resources, "streams", names), timeout=120, interval=1)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if not nats_cluster.node(leader).running:
            nats_cluster.node(leader).start()
    stalled = {
        name: reasons for name, reasons in seen.items() if any("Stalled" in r for r in reasons)
    }
    assert stalled == {}, seen
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        jetstream = JetStreamApi(connection)
        for name in names[:3]:  # the updates landed too
            info = await jetstream.stream_info(f"{prefix}_{name.upper()}")
            assert info is not None and info["config"]["max_msgs"] == 1000
    finally:
        await connection.close()


def _stream(name: str, prefix: str, replicas: int) -> dict[str, Any]:
    return {
        "kind": "Stream",
        "metadata": {"name": name},
        "spec": {"name": f"{prefix}_{name.upper()}", "replicas": replicas},
    }
