"""Scenarios a user walks through: the limits example of the NATS docs, replicas on a cluster,
purging by annotation, and pausing one resource."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi

from .figures import ApiAudit
from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration]


def manifest(name: str, stream: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream, **spec}}


async def _info(jetstream: JetStreamApi, stream: str) -> dict[str, Any]:
    info = await jetstream.stream_info(stream)
    assert info is not None
    return info


@pytest.mark.usefixtures("operator_process")
async def test_limits_example_from_the_nats_docs(resources: Resources, nc: Client) -> None:
    resources.create("streams", manifest("events", "events", subjects=["events.*"]))
    jetstream = JetStreamApi(nc)
    await eventually(lambda: jetstream.stream_info("events"))
    js = nc.jetstream()
    for kind in (
        "page_loaded",
        "mouse_clicked",
        "mouse_clicked",
        "page_loaded",
        "mouse_clicked",
        "input_focused",
    ):
        await js.publish(f"events.{kind}", b"")
    assert (await _info(jetstream, "events"))["state"]["messages"] == 6

    async def limit_applied(key: str, value: int) -> bool:
        return bool((await _info(jetstream, "events"))["config"][key] == value)

    resources.patch_spec("streams", "events", {"maxMsgs": 10})
    await eventually(lambda: limit_applied("max_msgs", 10))
    assert (await _info(jetstream, "events"))["state"]["messages"] == 6

    resources.patch_spec("streams", "events", {"maxBytes": 300})
    await eventually(lambda: limit_applied("max_bytes", 300))
    assert (await _info(jetstream, "events"))["state"]["bytes"] <= 300

    resources.patch_spec("streams", "events", {"maxAge": "100ms"})
    await eventually(lambda: limit_applied("max_age", 100_000_000))

    async def expired() -> bool:
        return bool((await _info(jetstream, "events"))["state"]["messages"] == 0)

    await eventually(expired, timeout=10)

    async def status_shows_empty() -> bool:
        resource = resources.get("streams", "events")
        return is_ready(resource) and (resource or {}).get("status", {}).get("messages") == 0

    await eventually(status_shows_empty, timeout=20)


@pytest.mark.usefixtures("operator_process")
async def test_purge_annotation_purges_once_per_token(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    subject = f"{stream.lower()}.purge"
    resources.create("streams", manifest("purgeable", stream, subjects=[f"{subject}.*"]))
    jetstream = JetStreamApi(nc)
    await eventually(lambda: jetstream.stream_info(stream))
    js = nc.jetstream()
    for index in range(5):
        await js.publish(f"{subject}.a", str(index).encode())
    for index in range(3):
        await js.publish(f"{subject}.b", str(index).encode())

    resources.annotate(
        "streams",
        "purgeable",
        {
            "jetstream-operator.io/purge": "first",
            "jetstream-operator.io/purge-subject": f"{subject}.a",
            "jetstream-operator.io/purge-keep": "1",
        },
    )

    async def purged() -> dict[str, Any] | None:
        resource = resources.get("streams", "purgeable")
        last = (resource or {}).get("status", {}).get("lastPurge") or {}
        return last if last.get("token") == "first" else None

    last = await eventually(purged)
    assert last["purged"] == 4
    assert (await _info(jetstream, stream))["state"]["messages"] == 4

    # A later unrelated spec change does not purge again.
    for index in range(2):
        await js.publish(f"{subject}.a", str(index).encode())
    resources.patch_spec("streams", "purgeable", {"maxMsgs": 1000})

    async def updated() -> bool:
        return bool((await _info(jetstream, stream))["config"]["max_msgs"] == 1000)

    await eventually(updated)
    assert (await _info(jetstream, stream))["state"]["messages"] == 6


@pytest.mark.usefixtures("operator_process")
async def test_paused_resource_is_left_alone_until_resumed(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("sleepy", stream, maxMsgs=10))
    jetstream = JetStreamApi(nc)
    await eventually(lambda: jetstream.stream_info(stream))
    resources.annotate("streams", "sleepy", {"jetstream-operator.io/paused": "true"})

    async def paused() -> bool:
        return condition(resources.get("streams", "sleepy")).get("reason") == "Paused"

    await eventually(paused)
    resources.patch_spec("streams", "sleepy", {"maxMsgs": 20})
    config = (await _info(jetstream, stream))["config"]
    # Listening before the out-of-band update: its own advisory is counted, always, rather than
    # only when the server sends it after a late subscription (a race that failed CI once).
    audit = await ApiAudit().start(nc)
    await jetstream.update_stream({**config, "max_msgs": 33})
    try:
        await asyncio.sleep(8)  # four resyncs, and the advisory of the update above
        assert audit.count("STREAM.UPDATE", stream) == 1, audit.subjects  # ours, none after
        assert audit.count("STREAM.CREATE", stream) == 0, audit.subjects
    finally:
        await audit.stop()
    assert await paused()
    assert (await _info(jetstream, stream))["config"]["max_msgs"] == 33

    resources.annotate("streams", "sleepy", {"jetstream-operator.io/paused": None})

    async def resumed() -> bool:
        return bool((await _info(jetstream, stream))["config"]["max_msgs"] == 20)

    await eventually(resumed)


@pytest.mark.usefixtures("operator_process")
async def test_nothing_is_written_while_nothing_changes(
    resources: Resources, nc: Client, namespace: str, api_client: Any
) -> None:
    """Several resync periods pass without a single write: no status patch, no Event."""
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("idle", stream, maxMsgs=10))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "idle-reader"},
            "spec": {"durableName": "IDLE", "streamRef": "idle"},
        },
    )

    async def settled() -> bool:
        return is_ready(resources.get("streams", "idle")) and is_ready(
            resources.get("consumers", "idle-reader")
        )

    await eventually(settled)
    await asyncio.sleep(3)  # let any follow-up write of the first pass land
    core = client.CoreV1Api(api_client)

    def snapshot() -> tuple[str, str, int]:
        stream_resource = resources.get("streams", "idle") or {}
        consumer_resource = resources.get("consumers", "idle-reader") or {}
        return (
            stream_resource["metadata"]["resourceVersion"],
            consumer_resource["metadata"]["resourceVersion"],
            len(core.list_namespaced_event(namespace).items),
        )

    before = snapshot()
    await asyncio.sleep(7)  # more than three resync periods of the test operator
    assert snapshot() == before
