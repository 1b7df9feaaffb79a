"""Safe across restores: a resource back under the same namespace/name with a new UID (a Velero
restore, a rebuilt cluster) re-attaches to its stream and consumer; another name still
conflicts; a stream that vanished holding data comes back with a Warning saying what was lost."""

from __future__ import annotations

from typing import Any

import nats
import pytest
from kubernetes import client

from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY

from .helpers import Resources, condition, event_posted, eventually, is_ready, json_body

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


def vanish(api_client: client.ApiClient, namespace: str, plural: str, name: str) -> None:
    """Remove a resource without the operator finalizing it, as a cluster that is lost does.

    The running operator puts its finalizer back on a resource that lacks one, so the delete
    is made conditional on the version without finalizers and tried again if it was beaten.
    """
    objects = client.CustomObjectsApi(api_client)
    for _ in range(20):
        stripped = json_body(
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, {"metadata": {"finalizers": None}}
            )
        )
        precondition = client.V1Preconditions(
            resource_version=stripped["metadata"]["resourceVersion"]
        )
        try:
            objects.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body=client.V1DeleteOptions(preconditions=precondition),
            )
            return
        except client.ApiException as error:
            if error.status != 409:
                raise
    raise AssertionError(f"{plural}/{name} kept getting a finalizer back")


def events_of(api_client: client.ApiClient, namespace: str, name: str) -> list[Any]:
    items = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    return [event for event in items if event.involved_object.name == name]


async def test_a_restored_resource_reattaches_and_another_name_still_conflicts(
    resources: Resources, api_client: client.ApiClient, namespace: str, nats_server: Any
) -> None:
    name = namespace.replace("-", "_").upper()
    stream = {"kind": "Stream", "metadata": {"name": "orders"}, "spec": {"name": name}}
    consumer = {
        "kind": "Consumer",
        "metadata": {"name": "worker"},
        "spec": {"durableName": "WORKER", "streamRef": "orders"},
    }
    resources.create("streams", stream)
    resources.create("consumers", consumer)
    await eventually(lambda: _ready(resources, "consumers", "worker"), timeout=30)
    old_uid = resources.get("streams", "orders")["metadata"]["uid"]  # type: ignore[index]

    for plural, resource in (("consumers", "worker"), ("streams", "orders")):
        vanish(api_client, namespace, plural, resource)
    resources.create("streams", stream)  # the restore: same namespace/name, new UID
    resources.create("consumers", consumer)
    await eventually(lambda: _ready(resources, "streams", "orders"), timeout=30)
    await eventually(lambda: _ready(resources, "consumers", "worker"), timeout=30)
    new_uid = resources.get("streams", "orders")["metadata"]["uid"]  # type: ignore[index]
    assert new_uid != old_uid
    connection = await nats.connect(nats_server.url)
    try:
        jetstream = JetStreamApi(connection)
        info = await jetstream.stream_info(name)
        assert info is not None
        assert info["config"]["metadata"][OWNER_METADATA_KEY].endswith(f"/orders/{new_uid}")
        consumer_info = await jetstream.consumer_info(name, "WORKER")
        assert consumer_info is not None
        assert consumer_info["config"]["metadata"][OWNER_METADATA_KEY].split("/")[1] == "worker"
    finally:
        await connection.close()
    for resource in ("orders", "worker"):
        await event_posted(api_client, namespace, resource, "Reattached")

    resources.create(
        "streams", {"kind": "Stream", "metadata": {"name": "intruder"}, "spec": {"name": name}}
    )

    async def conflict() -> bool:
        return condition(resources.get("streams", "intruder")).get("reason") == "Conflict"

    await eventually(conflict, timeout=30)


async def test_a_stream_that_vanished_with_data_comes_back_with_a_warning(
    resources: Resources, api_client: client.ApiClient, namespace: str, nats_server: Any
) -> None:
    name = namespace.replace("-", "_").upper()
    subject = f"{namespace}.events"
    resources.create(
        "streams",
        {
            "kind": "Stream",
            "metadata": {"name": "ledger"},
            "spec": {"name": name, "subjects": [subject]},
        },
    )
    await eventually(lambda: _ready(resources, "streams", "ledger"), timeout=30)
    connection = await nats.connect(nats_server.url)
    try:
        js = connection.jetstream()
        for index in range(7):
            await js.publish(subject, str(index).encode())

        async def counted() -> bool:
            status = (resources.get("streams", "ledger") or {}).get("status") or {}
            return status.get("lastSequence") == 7

        await eventually(counted, timeout=30)
        await JetStreamApi(connection).delete_stream(name)  # out of band, data and all

        async def warned() -> list[Any]:
            return [
                event
                for event in events_of(api_client, namespace, "ledger")
                if event.reason == "RecreatedAfterLoss"
            ]

        found = await eventually(warned, timeout=30)
        assert found[0].type == "Warning"
        assert "7 messages" in found[0].message and "1..7" in found[0].message
        info = await JetStreamApi(connection).stream_info(name)
        assert info is not None and info["state"]["messages"] == 0
    finally:
        await connection.close()


async def _ready(resources: Resources, plural: str, name: str) -> bool:
    return is_ready(resources.get(plural, name))
