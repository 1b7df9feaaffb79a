"""Faults: NATS, the API server and the operator itself die mid-run; nothing is lost.

Sizes are small in `make test`; `make chaos` runs the same tests at full size
(JETSTREAM_OPERATOR_FAULT_SCALE=5).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamUnavailable

from .helpers import Resources, eventually, is_ready, json_body, stream_manifest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.local_servers,
    pytest.mark.usefixtures("operator_process"),
]

SCALE = int(os.environ.get("JETSTREAM_OPERATOR_FAULT_SCALE", "1"))


def consumer(name: str, stream_name: str) -> dict[str, Any]:
    return {
        "kind": "Consumer",
        "metadata": {"name": name},
        "spec": {"durableName": name.upper(), "streamName": stream_name},
    }


async def all_ready(resources: Resources, plural: str, names: list[str]) -> bool:
    listed = json_body(
        resources.api.list_namespaced_custom_object(
            "jetstream-operator.io", "v1alpha1", resources.namespace, plural
        )
    )["items"]
    ready = {item["metadata"]["name"] for item in listed if is_ready(item)}
    return set(names) <= ready


async def server_streams(url: str, prefix: str) -> dict[str, dict[str, Any]]:
    nc = await nats.connect(url)
    try:
        infos = await JetStreamApi(nc).list_streams()
        return {i["config"]["name"]: i for i in infos if i["config"]["name"].startswith(prefix)}
    finally:
        await nc.close()


async def test_nats_restart_while_creating_many_resources(
    resources: Resources, nats_server: Any, namespace: str
) -> None:
    count = 40 * SCALE
    prefix = namespace.replace("-", "_").upper()[:20]
    names = [f"s{index}" for index in range(count)]
    for index, name in enumerate(names):
        resources.create("streams", stream_manifest(name, f"{prefix}_{index}"))
        resources.create("consumers", consumer(f"c{index}", f"{prefix}_{index}"))
        if index == count // 3:
            nats_server.kill()
        if index == count // 2:
            nats_server.start()
    await eventually(lambda: all_ready(resources, "streams", names), timeout=120)
    await eventually(
        lambda: all_ready(resources, "consumers", [f"c{i}" for i in range(count)]), timeout=120
    )
    streams = await server_streams(nats_server.url, f"{prefix}_")
    assert sorted(streams) == sorted(f"{prefix}_{i}" for i in range(count)), "exactly declared"
    assert all(info["state"]["consumer_count"] == 1 for info in streams.values())


async def test_operator_killed_and_api_server_restarted_lose_nothing(
    resources: Resources,
    nc: Client,
    namespace: str,
    operator_process: OperatorProcess,
    control_plane: Any,
) -> None:
    count = 10 * SCALE
    prefix = namespace.replace("-", "_").upper()[:20]
    for index in range(count):
        resources.create("streams", stream_manifest(f"k{index}", f"{prefix}_{index}"))
    names = [f"k{index}" for index in range(count)]
    await eventually(lambda: all_ready(resources, "streams", names), timeout=60)
    js = nc.jetstream()
    for index in range(count):
        await js.publish(f"{prefix.lower()}_{index}.data", b"kept")
    jetstream = JetStreamApi(nc)
    created = {
        index: (await jetstream.stream_info(f"{prefix}_{index}") or {}).get("created")
        for index in range(count)
    }

    operator_process.kill()
    resources.patch_spec("streams", "k0", {"maxMsgs": 100})
    operator_process.start()
    control_plane.restart_apiserver()
    for index in range(count, count + 3):
        resources.create("streams", stream_manifest(f"k{index}", f"{prefix}_{index}"))
    names += [f"k{index}" for index in range(count, count + 3)]
    await eventually(lambda: all_ready(resources, "streams", names), timeout=120)

    async def patched() -> bool:
        info = await jetstream.stream_info(f"{prefix}_0")
        return info is not None and info["config"]["max_msgs"] == 100

    await eventually(patched, timeout=60)
    for index in range(count):
        info = await jetstream.stream_info(f"{prefix}_{index}")
        assert info is not None
        assert info["state"]["messages"] == 1, "messages stored before the faults are kept"
        assert info["created"] == created[index], "no stream was recreated"


async def test_watch_restarts_never_delete_anything(
    resources: Resources,
    nc: Client,
    namespace: str,
    operator_process: OperatorProcess,
    control_plane: Any,
) -> None:
    """The operator sees an empty world for a while (API server down, operator restarted):
    streams it manages are never deleted for it."""
    prefix = namespace.replace("-", "_").upper()[:20]
    resources.create("streams", stream_manifest("survivor", f"{prefix}_S"))

    async def ready() -> bool:
        return is_ready(resources.get("streams", "survivor"))

    await eventually(ready)
    control_plane.stop_apiserver()
    operator_process.kill()
    # It cannot become healthy without the API server; it must still not delete anything.
    with contextlib.suppress(TimeoutError, RuntimeError):
        operator_process.start(timeout=5)
    await asyncio.sleep(3)
    jetstream = JetStreamApi(nc)
    assert await jetstream.stream_info(f"{prefix}_S") is not None
    control_plane.start_apiserver()
    operator_process.stop()
    operator_process.start()
    await eventually(ready, timeout=60)
    assert await jetstream.stream_info(f"{prefix}_S") is not None


async def test_deleting_while_nats_is_down_cleans_up_when_it_returns(
    resources: Resources, nats_server: Any, namespace: str
) -> None:
    count = 5 * SCALE
    prefix = namespace.replace("-", "_").upper()[:20]
    names = [f"d{index}" for index in range(count)]
    for index, name in enumerate(names):
        resources.create("streams", stream_manifest(name, f"{prefix}_{index}"))
    await eventually(lambda: all_ready(resources, "streams", names), timeout=60)
    nats_server.stop()
    try:
        for name in names:
            resources.delete("streams", name)
        await asyncio.sleep(2)
        assert all(resources.get("streams", name) is not None for name in names)
    finally:
        nats_server.start()

    async def gone() -> bool:
        if any(resources.get("streams", name) is not None for name in names):
            return False
        try:
            return not await server_streams(nats_server.url, f"{prefix}_")
        except JetStreamUnavailable:
            return False

    await eventually(gone, timeout=90)
