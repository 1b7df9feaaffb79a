"""The chart's whole life on the project's own node, with the image built from this checkout.

Two replicas with kopf peering are installed; a Stream and a Consumer become Ready through them;
deleting the active pod hands over to the standby; an upgrade to a new image tag and a CRD with
a new optional field keeps every resource Ready; `helm uninstall` and deleting the namespaces
leave nothing behind but the CRDs the chart keeps on purpose (`crds.keep`).

Only on the node this suite starts: it changes CRDs and deletes namespaces, which an existing
cluster named by JETSTREAM_OPERATOR_E2E_* must not suffer.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from jetstream_devtools.containers import Docker
from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.node import Node, ctr
from jetstream_devtools.paths import project_version
from jetstream_devtools.registry import Registry
from jetstream_devtools.release import oci_archive, push_chart, push_oci_archive
from jetstream_operator import GROUP, VERSION
from tests.delivery.helpers import CHART, ROOT, Helm, new_client, spec_schema
from tests.e2e_image.test_image_in_cluster import consumer_exists, stream_exists
from tests.integration.helpers import json_body, name_of, present
from tests.support.targets import existing_target

pytestmark = [pytest.mark.node, pytest.mark.go_tools("registry")]

RELEASE = "jso-life"
UPGRADED_TAG = "test-upgrade"
NEW_FIELD = "e2eNote"


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


@pytest.fixture(scope="module")
def own_node(request: pytest.FixtureRequest) -> Node:
    if existing_target() is not None:
        pytest.skip("changes CRDs and deletes namespaces: runs only on the suite's own node")
    node: Node = request.getfixturevalue("node")
    return node


def chart_with_new_crd_field(destination: Path) -> Path:
    """A copy of the chart whose Stream CRD has one more optional field (a later chart)."""
    chart = destination / "jetstream-operator"
    shutil.copytree(CHART, chart)
    crd_file = chart / "files" / "crds" / "streams.jetstream-operator.io.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"][NEW_FIELD] = {"type": "string", "description": "added by a later chart"}
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


@pytest.mark.timeout(900)  # about 150 s alone; a loaded CI machine may take several times that
def test_install_failover_upgrade_uninstall(
    own_node: Node, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Asked for only now: against an existing cluster the test is skipped before any set-up.
    node_nats: NatsServer = request.getfixturevalue("node_nats")
    docker: Docker = request.getfixturevalue("docker")
    operator_image: str = request.getfixturevalue("operator_image")
    kubeconfig = own_node.control_plane.kubeconfig
    helm = Helm(ensure_tools(["helm"])["helm"], tmp_path / "helm")
    api = new_client(kubeconfig)
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    watched = f"jso-life-{uuid.uuid4().hex[:6]}"
    system = f"{watched}-system"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=watched)))
    # As a user installs a release: the image and the chart from an OCI registry (a real one on
    # loopback), which the node's containerd is configured to pull from.
    registry = Registry(tmp_path / "registry")
    registry.start()
    request.addfinalizer(registry.stop)
    own_node.trust_registry(registry.host)
    version = project_version(ROOT)
    assert version is not None
    major, minor, patch = (int(part) for part in version.split("-")[0].split(".")[:3])
    later_version = f"{major}.{minor}.{patch + 1}-e2e"
    archive = oci_archive(
        docker.save(operator_image, tmp_path / "saved.tar"), version, tmp_path / "image.oci.tar"
    )
    repository = f"{registry.host}/jetstream-operator"
    for tag in (version, UPGRADED_TAG):
        push_oci_archive(archive, registry.host, "jetstream-operator", tag)
    chart_ref = ""
    charts = tmp_path / "charts"
    later_chart = chart_with_new_crd_field(tmp_path)
    for chart_dir, chart_version in ((CHART, version), (later_chart, later_version)):
        package = helm(
            "package",
            chart_dir,
            "--version",
            chart_version,
            "--app-version",
            chart_version,
            "--destination",
            charts,
        )
        assert package.returncode == 0, package.stderr
        packaged = charts / f"jetstream-operator-{chart_version}.tgz"
        chart_ref = push_chart(packaged, registry.host)
    common = [
        "--namespace",
        system,
        "--wait",
        "--timeout",
        "5m",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"nats.url={node_nats.url}",
        "--set-json",
        "nats.namespaceSelector={}",  # one team: the default connection serves every namespace
        "--set",
        f"watchNamespaces={{{watched}}}",
        "--set",
        "replicaCount=2",
    ]

    def helm_ok(*args: str | Path) -> None:
        result = helm(*args, kubeconfig=kubeconfig)
        assert result.returncode == 0, result.stdout + result.stderr

    def ready(plural: str, name: str) -> bool:
        item = json_body(
            objects.get_namespaced_custom_object(GROUP, VERSION, watched, plural, name)
        )
        conditions = (item.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def create_stream(name: str) -> str:
        stream = f"LIFE_{name.upper()}_{watched[-6:].upper()}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Stream",
            "metadata": {"name": name},
            "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"]},
        }
        objects.create_namespaced_custom_object(GROUP, VERSION, watched, "streams", body)
        wait_for(lambda: ready("streams", name), 180, f"Stream {name} Ready")
        return stream

    def operator_pods() -> list[client.V1Pod]:
        pods = core.list_namespaced_pod(system).items
        return [pod for pod in pods if present(pod.metadata).deletion_timestamp is None]

    # Install: two replicas with peering, the chart and the image from the registry.
    helm_ok(
        "install",
        RELEASE,
        chart_ref,
        "--version",
        version,
        "--plain-http",
        "--create-namespace",
        "--set",
        f"image.tag={version}",
        *common,
    )
    assert len(operator_pods()) == 2
    pulled = {
        status.image_id
        for pod in operator_pods()
        for status in present(pod.status).container_statuses or []
    }
    assert pulled and all(image.startswith(f"{repository}@sha256:") for image in pulled), pulled
    orders = create_stream("orders")
    consumer = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Consumer",
        "metadata": {"name": "worker"},
        "spec": {"durableName": "WORKER", "streamRef": "orders"},
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, watched, "consumers", consumer)
    wait_for(lambda: ready("consumers", "worker"), 180, "Consumer worker Ready")
    assert asyncio.run(consumer_exists(node_nats.url, orders, "WORKER"))

    # Failover: the active pod (kopf's highest priority peer) goes; the standby takes over.
    peering = wait_for(lambda: active_peer(objects, operator_pods()), 60, "an active peer")
    core.delete_namespaced_pod(peering, system)
    wait_for(
        lambda: peering not in {present(p.metadata).name for p in operator_pods()}, 120, "pod gone"
    )
    try:
        create_stream("after-failover")
    except AssertionError as error:
        state = operator_state(core, objects, system, watched)
        raise AssertionError(f"{error}\n{state}") from None

    # Upgrade to the later chart version from the registry: a new image tag and a CRD with a
    # new optional field; everything stays Ready.
    helm_ok(
        "upgrade",
        RELEASE,
        chart_ref,
        "--version",
        later_version,
        "--plain-http",
        "--set",
        f"image.tag={UPGRADED_TAG}",
        *common,
    )
    images = {c.image for pod in operator_pods() for c in present(pod.spec).containers}
    assert images == {f"{repository}:{UPGRADED_TAG}"}
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"streams.{GROUP}")
    schema = spec_schema(crd)
    assert NEW_FIELD in (schema.properties or {})
    create_stream("after-upgrade")
    for plural, name in (
        ("streams", "orders"),
        ("streams", "after-failover"),
        ("consumers", "worker"),
    ):
        assert ready(plural, name), f"{plural}/{name} not Ready after the upgrade"

    # Uninstall: resources first (their finalizers need the operator), then the release and
    # the namespaces; the namespace controller really removes them.
    for plural in ("consumers", "streams"):
        objects.delete_collection_namespaced_custom_object(GROUP, VERSION, watched, plural)

        def emptied(plural: str = plural) -> bool:
            listed = json_body(
                objects.list_namespaced_custom_object(GROUP, VERSION, watched, plural)
            )
            return not listed["items"]

        wait_for(emptied, 120, f"{plural} deleted through their finalizers")
    assert not asyncio.run(stream_exists(node_nats.url, orders))
    helm_ok("uninstall", RELEASE, "--namespace", system, "--wait")
    for namespace in (watched, system):
        core.delete_namespace(namespace)
    wait_for(
        lambda: (
            not {watched, system}
            & {present(ns.metadata).name for ns in core.list_namespace().items}
        ),
        180,
        f"namespaces {watched} and {system} removed",
    )
    assert leftovers(api) == []
    # The node ran nothing of the release any more: only containers of other pods may remain.
    wait_for(lambda: not ctr("tasks", "list", "--quiet").split(), 120, "no container left")


def active_peer(objects: client.CustomObjectsApi, pods: list[client.V1Pod]) -> str | None:
    """The pod holding the highest priority in the ClusterKopfPeering, once both took part."""
    peerings = json_body(
        objects.list_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings")
    )
    names = {name_of(pod) for pod in pods}
    best: tuple[int, str] | None = None
    for peering in peerings["items"]:
        for peer_id, info in (peering.get("status") or {}).items():
            pod = next((name for name in names if name in peer_id), None)
            if pod is not None and isinstance(info, dict):
                candidate = (int(info.get("priority", 0)), pod)
                best = candidate if best is None or candidate > best else best
    return best[1] if best is not None else None


def operator_state(
    core: client.CoreV1Api, objects: client.CustomObjectsApi, system: str, watched: str
) -> str:
    """The peering records, the Streams' metadata and status, and each operator pod's phase
    and last log lines: what a failed hand-over needs to be understood."""
    peerings = json_body(
        objects.list_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings")
    )
    lines = [f"peerings: {[item.get('status') for item in peerings['items']]}"]
    streams = json_body(objects.list_namespaced_custom_object(GROUP, VERSION, watched, "streams"))
    for stream in streams["items"]:
        metadata = stream["metadata"]
        lines.append(
            f"stream {metadata['name']}: finalizers {metadata.get('finalizers')}, annotations "
            f"{metadata.get('annotations')}, status {stream.get('status')}"
        )
    for pod in core.list_namespaced_pod(system).items:
        lines.append(f"--- pod {present(pod.metadata).name} ({present(pod.status).phase})")
        try:
            lines.append(core.read_namespaced_pod_log(name_of(pod), system, tail_lines=80))
        except client.ApiException as error:
            lines.append(f"no log: {error.status} {error.reason}")
    return "\n".join(lines)


def leftovers(api: client.ApiClient) -> list[str]:
    """Cluster-scoped objects of the release still present (CRDs are kept on purpose)."""
    selector = f"app.kubernetes.io/instance={RELEASE}"
    rbac = client.RbacAuthorizationV1Api(api)
    found = [f"clusterrole/{present(r.metadata).name}" for r in rbac.list_cluster_role(
        label_selector=selector).items]  # fmt: skip
    found += [
        f"clusterrolebinding/{present(b.metadata).name}"
        for b in rbac.list_cluster_role_binding(label_selector=selector).items
    ]
    return found
