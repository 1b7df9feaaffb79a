"""Deletion: Retain keeps the data, Delete removes it, and NATS being down keeps the finalizer."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, RETAINED_METADATA_KEY

from .helpers import Resources, condition, event_posted, eventually, is_ready


def manifest(name: str, stream: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream, **spec}}


async def _publish(nc: Client, subject: str, count: int) -> None:
    js = nc.jetstream()
    for index in range(count):
        await js.publish(subject, f"message {index}".encode())


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process")
@pytest.mark.parametrize("policy", [{"deletionPolicy": "Retain"}, {"preventDelete": True}])
async def test_retain_leaves_the_stream_and_its_messages(
    resources: Resources, nc: Client, namespace: str, policy: dict[str, Any], api_client: Any
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("keep", stream, subjects=[f"{stream}.in"], **policy))
    await eventually(lambda: _ready(resources, "keep"))
    await _publish(nc, f"{stream}.in", 3)
    resources.delete("streams", "keep")
    await eventually(lambda: _absent(resources, "keep"))
    info = await JetStreamApi(nc).stream_info(stream)
    assert info is not None, "Retain must keep the stream"
    assert info["state"]["messages"] == 3
    metadata = info["config"].get("metadata") or {}
    assert OWNER_METADATA_KEY not in metadata
    assert metadata[RETAINED_METADATA_KEY].startswith(f"{namespace}/keep/")
    # The object is gone with its status; the Event says what became of the stream.
    await event_posted(api_client, namespace, "keep", "Retained")
    # Another resource finds it kept by someone else: no adoption, no change.
    resources.create("streams", manifest("other", stream, subjects=[f"{stream}.in"]))

    async def conflict() -> bool:
        ready = condition(resources.get("streams", "other"))
        return (
            "deletionPolicy: Retain" in str(ready.get("message"))
            and ready.get("reason") == "Conflict"
        )

    await eventually(conflict)
    resources.delete("streams", "other")
    await eventually(lambda: _absent(resources, "other"))
    # The same manifest applied again takes its stream back, messages and all.
    resources.create("streams", manifest("keep", stream, subjects=[f"{stream}.in"], **policy))
    await eventually(lambda: _ready(resources, "keep"))
    info = await JetStreamApi(nc).stream_info(stream)
    assert info is not None and info["state"]["messages"] == 3
    metadata = info["config"].get("metadata") or {}
    assert RETAINED_METADATA_KEY not in metadata and metadata[OWNER_METADATA_KEY]
    await event_posted(api_client, namespace, "keep", "Reattached")


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process")
async def test_a_stream_the_resource_did_not_make_is_left_with_an_event(
    resources: Resources, nc: Client, namespace: str, api_client: Any
) -> None:
    stream = namespace.replace("-", "_").upper()
    await JetStreamApi(nc).create_stream({"name": stream, "subjects": [f"{stream}.in"]})
    resources.create("streams", manifest("theirs", stream, subjects=[f"{stream}.in"]))

    async def refused() -> bool:
        ready = condition(resources.get("streams", "theirs"))
        return ready.get("status") == "False" and ready.get("observedGeneration") == 1

    await eventually(refused)  # adoption is not asked for, so it is not taken over
    resources.delete("streams", "theirs")
    await eventually(lambda: _absent(resources, "theirs"))
    assert await JetStreamApi(nc).stream_info(stream) is not None

    async def recorded() -> bool:
        events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        return any(e.reason == "NotOwned" and e.involved_object.name == "theirs" for e in events)

    await eventually(recorded, timeout=10)


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process")
async def test_delete_policy_removes_the_data(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("drop", stream, deletionPolicy="Delete"))
    await eventually(lambda: _ready(resources, "drop"))
    resources.delete("streams", "drop")
    await eventually(lambda: _absent(resources, "drop"))
    assert await JetStreamApi(nc).stream_info(stream) is None


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process")
async def test_delete_if_empty_keeps_a_stream_that_holds_data_until_it_is_empty(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """deletionPolicy: DeleteIfEmpty: a stray `kubectl delete` of a stream with messages, or
    with a consumer no resource manages, deletes nothing and says why; once it is empty the
    deletion completes by itself."""
    stream = namespace.replace("-", "_").upper()
    jetstream = JetStreamApi(nc)
    resources.create(
        "streams",
        manifest("careful", stream, subjects=[f"{stream}.in"], deletionPolicy="DeleteIfEmpty"),
    )
    await eventually(lambda: _ready(resources, "careful"))
    await _publish(nc, f"{stream}.in", 2)
    await nc.jetstream().add_consumer(stream, durable_name="app_reader")
    resources.delete("streams", "careful")

    async def kept() -> str | None:
        ready = condition(resources.get("streams", "careful"))
        return str(ready.get("message")) if ready.get("reason") == "NotEmpty" else None

    message = await eventually(kept, timeout=30)
    assert "still holds 2 messages and consumers no resource manages (app_reader)" in message
    info = await jetstream.stream_info(stream)
    assert info is not None and info["state"]["messages"] == 2
    await jetstream.purge_stream(stream, {})

    async def only_the_consumer_keeps_it() -> bool:
        return "still holds consumers no resource manages" in str(await kept())

    await eventually(only_the_consumer_keeps_it, timeout=30)
    await jetstream.delete_consumer(stream, "app_reader")
    await eventually(lambda: _absent(resources, "careful"), timeout=60)
    assert await jetstream.stream_info(stream) is None


@pytest.mark.integration
@pytest.mark.local_servers
@pytest.mark.usefixtures("operator_process")
async def test_nats_down_during_deletion_keeps_the_finalizer_and_says_why(
    resources: Resources, nats_server: Any, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("stuck", stream))
    await eventually(lambda: _ready(resources, "stuck"))
    nats_server.stop()
    try:
        resources.delete("streams", "stuck")

        async def blocked() -> dict[str, Any] | None:
            ready = condition(resources.get("streams", "stuck"))
            return ready if ready.get("reason") == "DeletionBlocked" else None

        ready = await eventually(blocked, timeout=30)
        assert "finalizer stays" in ready["message"]
        resource = resources.get("streams", "stuck")
        assert resource is not None and resource["metadata"]["finalizers"]
    finally:
        nats_server.start()
    await eventually(lambda: _absent(resources, "stuck"), timeout=60)


async def _ready(resources: Resources, name: str) -> bool:
    return is_ready(resources.get("streams", name))


async def _absent(resources: Resources, name: str) -> bool:
    return resources.get("streams", name) is None
