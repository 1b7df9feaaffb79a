"""The container image, installed by the chart, runs the operator inside a cluster.

By default the cluster is the one-node Kubernetes this project starts itself (`node` fixture:
kubelet, containerd, the image built from this checkout and loaded into it, NATS on the node's
address). With JETSTREAM_OPERATOR_E2E_KUBECONFIG, ..._NATS_URL and ..._IMAGE set (`make
e2e-image`), an existing cluster instead; the image must then be pullable by it. Against an
existing cluster, run it on its own: any other operator process watching the cluster (such as the
integration suite's) would reconcile the same resources.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from kubernetes import client

from jetstream_devtools.figures import parse_metrics
from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.node import Node
from jetstream_operator import GROUP, VERSION
from jetstream_operator.marks import METRICS_LABEL
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.conftest import TEST_IMAGE
from tests.delivery.helpers import CHART, Helm, new_client
from tests.integration.helpers import json_body, present
from tests.support.targets import ExistingTarget, existing_target

TARGET = existing_target()
pytestmark = pytest.mark.node
RELEASE = "jso-image"
METRICS_PORT = 9090
"""The chart's metrics.port default."""

NEEDS = (
    "needs an existing cluster and an image it can pull "
    "(JETSTREAM_OPERATOR_E2E_KUBECONFIG, _NATS_URL and _IMAGE; `make e2e` sets them)"
)


def image_values(image: str) -> list[str]:
    """--set arguments for an image reference (repository[:tag] or repository@digest)."""
    if "@" in image:
        repository, digest = image.split("@", 1)
        return ["--set", f"image.repository={repository}", "--set", f"image.digest={digest}"]
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = image, "latest"
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest) -> ExistingTarget:
    """The existing cluster named by the environment, or else the project's own node."""
    if TARGET is not None:
        if not TARGET.image:
            pytest.skip(NEEDS)
        return TARGET
    node: Node = request.getfixturevalue("node")
    nats_server: NatsServer = request.getfixturevalue("node_nats")
    return ExistingTarget(
        kubeconfig=node.control_plane.kubeconfig,
        nats_url=nats_server.url,
        in_cluster_nats_url=nats_server.url,
        image=TEST_IMAGE,
    )


@pytest.fixture(scope="module")
def installed(target: ExistingTarget, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The chart with the image, watching one fresh namespace; uninstalled afterwards."""
    helm = Helm(ensure_tools(["helm"])["helm"], tmp_path_factory.mktemp("helm"))
    watched = f"jso-image-{uuid.uuid4().hex[:6]}"
    api = new_client(target.kubeconfig)
    core = client.CoreV1Api(api)
    # Its resources opt in to metrics of their own.
    labels = {METRICS_LABEL: "true"}
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=watched, labels=labels))
    )
    system = f"{watched}-system"
    result = helm(
        "install",
        RELEASE,
        CHART,
        "--namespace",
        system,
        "--create-namespace",
        "--take-ownership",
        "--wait",
        "--timeout",
        "5m",
        *image_values(target.image),
        "--set",
        f"nats.url={target.in_cluster_nats_url}",
        "--set-json",
        "nats.namespaceSelector={}",  # one team: the default connection serves every namespace
        "--set",
        f"watchNamespaces={{{watched}}}",
        kubeconfig=target.kubeconfig,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        yield watched
    finally:
        helm("uninstall", RELEASE, "--namespace", system, kubeconfig=target.kubeconfig)
        core.delete_namespace(watched)
        core.delete_namespace(system)


def test_the_image_reconciles_a_stream_and_consumer(target: ExistingTarget, installed: str) -> None:
    api = new_client(target.kubeconfig)
    objects = client.CustomObjectsApi(api)
    stream = f"IMAGE_E2E_{installed[-6:].upper()}"
    manifests = [
        ("streams", {"kind": "Stream", "metadata": {"name": "orders"},
                     "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"]}}),
        ("consumers", {"kind": "Consumer", "metadata": {"name": "worker"},
                       "spec": {"durableName": "WORKER", "streamRef": "orders"}}),
    ]  # fmt: skip
    for plural, body in manifests:
        objects.create_namespaced_custom_object(
            GROUP, VERSION, installed, plural, {"apiVersion": f"{GROUP}/{VERSION}", **body}
        )

    def ready(plural: str, name: str) -> bool:
        item = json_body(
            objects.get_namespaced_custom_object(GROUP, VERSION, installed, plural, name)
        )
        conditions = (item.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(lambda: ready("streams", "orders"), 120, "the Stream was not Ready")
    wait_for(lambda: ready("consumers", "worker"), 120, "the Consumer was not Ready")
    assert asyncio.run(consumer_exists(target.nats_url, stream, "WORKER"))
    asyncio.run(publish(target.nats_url, f"{stream.lower()}.new", 3))
    # The namespace opted in to per-resource metrics: the pod's own /metrics, through the API
    # server's proxy, shows the stream's messages and the consumer's lag.
    consumer = {"namespace": installed, "name": "worker", "stream": stream, "consumer": "WORKER"}
    orders = {"namespace": installed, "name": "orders", "kind": "Stream", "stream": stream}
    wait_for(
        lambda: pod_metric(api, installed, "jetstream_operator_consumer_pending", consumer) == 3,
        120,
        "the consumer's lag was not in the pod's metrics",
    )
    assert pod_metric(api, installed, "jetstream_operator_stream_messages", orders) == 3
    # The pod that did it is the chart's, running the image.
    pods = client.CoreV1Api(api).list_namespaced_pod(f"{installed}-system").items
    assert pods and all(
        present(container.image).startswith(target.image.split("@")[0].rsplit(":", 1)[0])
        for pod in pods
        for container in present(pod.spec).containers
    )
    # Consumer first, each until its finalizer is gone: once the chart is uninstalled nothing
    # would remove a finalizer, and the namespace could never be deleted.
    for plural, name in (("consumers", "worker"), ("streams", "orders")):
        objects.delete_namespaced_custom_object(GROUP, VERSION, installed, plural, name)

        def gone(plural: str = plural, name: str = name) -> bool:
            try:
                objects.get_namespaced_custom_object(GROUP, VERSION, installed, plural, name)
            except client.ApiException as error:
                return bool(error.status == 404)
            return False

        wait_for(gone, 120, f"{plural}/{name} kept its finalizer")
    assert not asyncio.run(stream_exists(target.nats_url, stream))


def pod_metric(
    api: client.ApiClient, watched: str, name: str, labels: dict[str, str]
) -> float | None:
    """One sample of the operator pod's /metrics, read through the API server's pod proxy."""
    core = client.CoreV1Api(api)
    [pod] = core.list_namespaced_pod(f"{watched}-system").items
    pod_name = present(pod.metadata).name
    text = core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod_name}:{METRICS_PORT}", f"{watched}-system", "metrics"
    )
    found = [
        sample.value
        for sample in parse_metrics(str(text))
        if sample.name == name and sample.labels == labels
    ]
    return found[0] if found else None


async def publish(url: str, subject: str, count: int) -> None:
    connection = await nats.connect(url)
    try:
        for index in range(count):
            await connection.jetstream().publish(subject, str(index).encode())
    finally:
        await connection.close()


async def consumer_exists(url: str, stream: str, durable: str) -> bool:
    connection = await nats.connect(url)
    try:
        return await JetStreamApi(connection).consumer_info(stream, durable) is not None
    finally:
        await connection.close()


async def stream_exists(url: str, stream: str) -> bool:
    connection = await nats.connect(url)
    try:
        return await JetStreamApi(connection).stream_info(stream) is not None
    finally:
        await connection.close()


def test_image_values() -> None:
    assert image_values("kind.local/jso:dev")[1::2] == [
        "image.repository=kind.local/jso",
        "image.tag=dev",
    ]
    assert image_values("localhost:5000/jso")[1::2] == [
        "image.repository=localhost:5000/jso",
        "image.tag=latest",
    ]
