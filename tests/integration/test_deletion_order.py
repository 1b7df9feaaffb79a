"""Clean when deleted: a namespace deletion (Secret, NatsConnection, Stream and Consumer all at
once, the operator restarted in the middle) completes with the NATS objects deleted; a
connection in use waits for its users; a Consumer whose Stream resource went first still
deletes its consumer; a person can release a finalizer when NATS is gone for good."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.marks import CONNECTION_SECRET_LABEL
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition, event_posted, eventually, is_ready, present

pytestmark = [
    pytest.mark.integration,
    pytest.mark.local_servers,
    pytest.mark.usefixtures("operator_process"),
]

TOKEN = "deletion-t0ken-5e4d3c"


@pytest.fixture
def token_nats(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats", extra_config=f'authorization {{ token: "{TOKEN}" }}')
    server.start()
    try:
        yield server
    finally:
        server.stop()


def put_token_secret(api_client: client.ApiClient, namespace: str) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name="nats-token", labels={CONNECTION_SECRET_LABEL: "true"}),
        data={"token": base64.b64encode(TOKEN.encode()).decode()},
    )
    client.CoreV1Api(api_client).create_namespaced_secret(namespace, body)


def token_connection(server: NatsServer) -> dict[str, Any]:
    return {
        "kind": "NatsConnection",
        "metadata": {"name": "tenant"},
        "spec": {
            "servers": [server.url],
            "allowPlaintext": True,  # loopback, no TLS
            "token": {"secretName": "nats-token", "key": "token"},
        },
    }


def stream(name: str, stream_name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream_name, **spec}}


async def ready(resources: Resources, plural: str, name: str) -> bool:
    return is_ready(resources.get(plural, name))


async def gone(resources: Resources, plural: str, name: str) -> bool:
    return resources.get(plural, name) is None


async def nats_stream(server_url: str, name: str, **connect: Any) -> dict[str, Any] | None:
    connection = await nats.connect(servers=[server_url], **connect)
    try:
        return await JetStreamApi(connection).stream_info(name)
    finally:
        await connection.close()


async def test_namespace_deletion_with_a_restart_in_the_middle_leaves_nothing(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    token_nats: NatsServer,
    operator_process: OperatorProcess,
) -> None:
    put_token_secret(api_client, namespace)
    resources.create("natsconnections", token_connection(token_nats))
    name = namespace.replace("-", "_").upper()
    resources.create("streams", stream("orders", name, connectionRef="tenant"))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "worker"},
            "spec": {"durableName": "WORKER", "streamRef": "orders", "connectionRef": "tenant"},
        },
    )
    await eventually(lambda: ready(resources, "consumers", "worker"), timeout=30)
    core = client.CoreV1Api(api_client)
    secret = core.read_namespaced_secret("nats-token", namespace)
    assert "jetstream-operator.io/in-use" in (present(secret.metadata).finalizers or [])

    operator_process.stop()
    try:
        core.delete_namespace(namespace)

        async def secret_deleting() -> bool:
            found = core.read_namespaced_secret("nats-token", namespace)
            return present(found.metadata).deletion_timestamp is not None

        # The namespace controller deleted everything at once; the Secret stays readable.
        await eventually(secret_deleting, timeout=60)
    finally:
        operator_process.start()

    async def namespace_gone() -> bool:
        try:
            core.read_namespace(namespace)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    await eventually(namespace_gone, timeout=120, interval=1.0)
    assert await nats_stream(token_nats.url, name, token=TOKEN) is None


async def test_a_connection_in_use_waits_and_a_person_can_release_a_finalizer(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    token_nats: NatsServer,
) -> None:
    put_token_secret(api_client, namespace)
    resources.create("natsconnections", token_connection(token_nats))
    name = namespace.replace("-", "_").upper()
    resources.create("streams", stream("orders", name, connectionRef="tenant"))
    bucket = {"bucket": name, "connectionRef": "tenant"}
    resources.create(
        "keyvalues", {"kind": "KeyValue", "metadata": {"name": "cache"}, "spec": bucket}
    )
    await eventually(lambda: ready(resources, "streams", "orders"), timeout=30)
    await eventually(lambda: ready(resources, "keyvalues", "cache"), timeout=30)
    assert await nats_stream(token_nats.url, f"KV_{name}", token=TOKEN) is not None

    resources.delete("natsconnections", "tenant")

    async def in_use() -> bool:
        message = condition(resources.get("natsconnections", "tenant")).get("message", "")
        return "Stream orders" in message and "KeyValue cache" in message

    await eventually(in_use, timeout=30)
    resources.delete("keyvalues", "cache")  # deleted in NATS through the tenant's connection
    await eventually(lambda: gone(resources, "keyvalues", "cache"), timeout=30)
    assert await nats_stream(token_nats.url, f"KV_{name}", token=TOKEN) is None

    token_nats.stop()  # NATS gone for good
    resources.delete("streams", "orders")

    async def blocked() -> bool:
        return condition(resources.get("streams", "orders")).get("reason") == "DeletionBlocked"

    await eventually(blocked, timeout=60)
    resources.annotate("streams", "orders", {"jetstream-operator.io/release-finalizer": "true"})
    await eventually(lambda: gone(resources, "streams", "orders"), timeout=30)
    await event_posted(api_client, namespace, "orders", "Released")
    # Its last user gone, the connection goes too, and lets go of its Secret.
    await eventually(lambda: gone(resources, "natsconnections", "tenant"), timeout=60)
    secret = client.CoreV1Api(api_client).read_namespaced_secret("nats-token", namespace)
    assert "jetstream-operator.io/in-use" not in (present(secret.metadata).finalizers or [])


async def test_a_consumer_deletes_its_nats_consumer_after_its_stream_resource_went(
    resources: Resources, namespace: str, nats_server: Any
) -> None:
    name = namespace.replace("-", "_").upper()
    resources.create("streams", stream("kept", name, deletionPolicy="Retain"))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "reader"},
            "spec": {"durableName": "READER", "streamRef": "kept"},
        },
    )
    await eventually(lambda: ready(resources, "consumers", "reader"), timeout=30)
    resources.delete("streams", "kept")
    await eventually(lambda: gone(resources, "streams", "kept"), timeout=30)
    connection = await nats.connect(nats_server.url)
    try:
        jetstream = JetStreamApi(connection)
        assert await jetstream.consumer_info(name, "READER") is not None
        resources.delete("consumers", "reader")
        await eventually(lambda: gone(resources, "consumers", "reader"), timeout=30)
        assert await jetstream.stream_info(name) is not None  # retained, as asked
        assert await jetstream.consumer_info(name, "READER") is None  # not leaked
    finally:
        await connection.close()
