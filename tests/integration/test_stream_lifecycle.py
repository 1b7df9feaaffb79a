"""The walking skeleton end to end: a Stream applied through the real API server becomes a real
stream in the real nats-server, follows spec changes, and goes away with its resource."""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition, eventually, is_ready, stream_manifest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


async def server_config(nc: Client, stream: str) -> dict[str, Any] | None:
    info = await JetStreamApi(nc).stream_info(stream)
    return None if info is None else dict(info["config"])


async def test_applied_stream_is_created_with_its_config(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = f"S_{namespace}".replace("-", "_")
    resources.create(
        "streams",
        stream_manifest(
            "orders", stream, storage="memory", maxMsgs=100, maxBytes=4096, maxAge="1h", replicas=1
        ),
    )

    async def created() -> dict[str, Any] | None:
        return await server_config(nc, stream)

    config = await eventually(created)
    assert config["subjects"] == [f"{stream.lower()}.>"]
    assert config["storage"] == "memory"
    assert config["max_msgs"] == 100
    assert config["max_bytes"] == 4096
    assert config["max_age"] == 3_600_000_000_000
    assert config["num_replicas"] == 1
    assert config["metadata"]["jetstream-operator.io/owner"].startswith(f"{namespace}/orders/")

    async def ready() -> dict[str, Any] | None:
        resource = resources.get("streams", "orders")
        return resource if is_ready(resource) else None

    resource = await eventually(ready)
    assert resource["status"]["streamName"] == stream
    assert resource["status"]["messages"] == 0
    assert condition(resource, "Stalled")["status"] == "False"


async def test_patched_limit_reaches_the_server(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = f"S_{namespace}".replace("-", "_")
    resources.create("streams", stream_manifest("limits", stream, maxMsgs=10))

    async def has_limit(limit: int) -> bool:
        config = await server_config(nc, stream)
        return config is not None and config["max_msgs"] == limit

    await eventually(lambda: has_limit(10))
    resources.patch_spec("streams", "limits", {"maxMsgs": 25})
    await eventually(lambda: has_limit(25))

    async def observed() -> bool:
        resource = resources.get("streams", "limits")
        return (
            is_ready(resource)
            and resource is not None
            and (resource["metadata"]["generation"] == 2)
        )

    await eventually(observed)


@pytest.mark.usefixtures("operator_with_slow_resync")
async def test_replaced_without_the_finalizer_the_new_spec_is_applied(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """`kubectl replace` of a manifest drops the finalizer while it changes the spec. kopf's
    first pass only puts the finalizer back, and the change is handled on that write's echo,
    which the operator must not keep from kopf (queueing.EventObservers)."""
    stream = f"S_{namespace}".replace("-", "_")
    resources.create("streams", stream_manifest("replaced", stream, maxMsgs=10))

    async def ready_at(generation: int) -> dict[str, Any] | None:
        resource = resources.get("streams", "replaced")
        if not is_ready(resource) or resource is None:
            return None
        if resource["status"].get("observedGeneration") != generation:
            return None
        return resource if resource["metadata"].get("finalizers") else None

    body = await eventually(lambda: ready_at(1))
    body["metadata"].pop("finalizers")
    body["spec"]["maxMsgs"] = 25
    resources.replace("streams", "replaced", body)

    async def has_limit(limit: int) -> bool:
        config = await server_config(nc, stream)
        return config is not None and config["max_msgs"] == limit

    await eventually(lambda: has_limit(25))
    await eventually(lambda: ready_at(2))


async def test_deleted_resource_removes_stream_and_finalizer(
    resources: Resources, nc: Client, namespace: str, operator_process: OperatorProcess
) -> None:
    stream = f"S_{namespace}".replace("-", "_")
    resources.create("streams", stream_manifest("doomed", stream))

    async def created() -> bool:
        resource = resources.get("streams", "doomed")
        finalizers = (resource or {}).get("metadata", {}).get("finalizers") or []
        return await server_config(nc, stream) is not None and bool(finalizers)

    await eventually(created)
    resources.delete("streams", "doomed")

    async def gone() -> bool:
        return resources.get("streams", "doomed") is None and (
            await server_config(nc, stream) is None
        )

    await eventually(gone)


async def test_existing_stream_is_not_taken_over(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = f"S_{namespace}".replace("-", "_")
    jetstream = JetStreamApi(nc)
    await jetstream.create_stream({"name": stream, "subjects": ["foreign.>"], "max_msgs": 7})
    resources.create("streams", stream_manifest("intruder", stream, maxMsgs=1))

    async def conflict() -> dict[str, Any] | None:
        resource = resources.get("streams", "intruder")
        ready = condition(resource)
        return ready if ready.get("reason") == "Conflict" else None

    ready = await eventually(conflict)
    assert ready["status"] == "False"
    assert "not created by this operator" in ready["message"]
    config = await server_config(nc, stream)
    assert config is not None and config["max_msgs"] == 7 and config["subjects"] == ["foreign.>"]

    resources.delete("streams", "intruder")
    await eventually(lambda: _absent(resources, "intruder"))
    assert await server_config(nc, stream) is not None, "a stream we do not own was deleted"


async def _absent(resources: Resources, name: str) -> bool:
    return resources.get("streams", name) is None
