"""The dev environment itself: the real control plane, NATS nodes and `dev up/down` behave."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import nats
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_devtools import environment, pki
from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.natsserver import NatsCluster, NatsServer
from jetstream_devtools.paths import kubernetes_version
from jetstream_devtools.processes import http_get

from .helpers import new_client, present

pytestmark = [pytest.mark.integration, pytest.mark.local_servers]


def test_apiserver_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    status, body = http_get(f"{control_plane.url}/version", control_plane.ssl_context())
    assert status == 200
    assert json.loads(body)["gitVersion"] == kubernetes_version()


def test_rbac_refuses_a_user_without_bindings(control_plane: ControlPlane, tmp_path: Path) -> None:
    nobody = pki.issue_client_cert(control_plane.pki.load_ca(), "nobody", ["nobodies"])
    cert, key = nobody.write(tmp_path, "nobody")
    context = ssl.create_default_context(cafile=str(control_plane.ca_file))
    context.load_cert_chain(str(cert), str(key))
    namespaces = f"{control_plane.url}/api/v1/namespaces"

    status, body = http_get(namespaces, context)
    assert status == 403, body
    # Authenticated as the certificate's user, then denied by RBAC.
    assert 'User "nobody" cannot list' in json.loads(body)["message"]
    assert http_get(namespaces, control_plane.ssl_context())[0] == 200


def core_api(kubeconfig: Path) -> client.CoreV1Api:
    return client.CoreV1Api(new_client(kubeconfig))


def create_namespace(api: client.CoreV1Api, name: str) -> None:
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))


def namespace_phase(api: client.CoreV1Api, name: str) -> str | None:
    status = api.read_namespace(name).status
    return None if status is None else status.phase


def test_namespace_round_trip_with_the_kubernetes_client(kubeconfig: Path) -> None:
    api = core_api(kubeconfig)
    name = f"devenv-{uuid.uuid4().hex[:8]}"
    create_namespace(api, name)
    assert namespace_phase(api, name) == "Active"
    assert namespace_phase(api, "default") == "Active"


def test_kubectl_works_with_the_kubeconfig(kubeconfig: Path, kubectl: Path) -> None:
    result = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "namespace", "default", "-o=name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "namespace/default"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.5)


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def config_map(name: str, owner: client.V1ConfigMap | None = None) -> client.V1ConfigMap:
    references = None
    if owner is not None:
        metadata = present(owner.metadata)
        references = [
            client.V1OwnerReference(
                api_version="v1",
                kind="ConfigMap",
                name=present(metadata.name),
                uid=present(metadata.uid),
            )
        ]
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, owner_references=references), data={"k": "v"}
    )


def test_deleted_namespace_is_emptied_and_removed(kubeconfig: Path) -> None:
    """kube-controller-manager's namespace controller runs: a namespace with content goes away."""
    api = core_api(kubeconfig)
    rbac = client.RbacAuthorizationV1Api(api.api_client)
    name = f"doomed-{uuid.uuid4().hex[:8]}"
    create_namespace(api, name)
    api.create_namespaced_config_map(name, config_map("settings"))
    api.create_namespaced_secret(
        name, client.V1Secret(metadata=client.V1ObjectMeta(name="token"), string_data={"a": "b"})
    )
    rbac.create_namespaced_role(
        name, client.V1Role(metadata=client.V1ObjectMeta(name="reader"), rules=[])
    )

    api.delete_namespace(name)

    wait_for(lambda: gone(lambda: api.read_namespace(name)), 120, f"namespace {name} removed")
    # Recreated under the same name, it starts empty: the content was deleted, not hidden.
    create_namespace(api, name)
    try:
        assert api.list_namespaced_config_map(name).items == []
        assert api.list_namespaced_secret(name).items == []
        assert rbac.list_namespaced_role(name).items == []
    finally:
        api.delete_namespace(name)


def test_garbage_collector_follows_owner_references(kubeconfig: Path) -> None:
    """Dependents of a deleted owner are collected; with `Orphan` they stay, unowned."""
    api = core_api(kubeconfig)
    namespace = f"gc-{uuid.uuid4().hex[:8]}"
    create_namespace(api, namespace)
    try:
        owner = api.create_namespaced_config_map(namespace, config_map("owner"))
        api.create_namespaced_config_map(namespace, config_map("dependent", owner))
        kept_owner = api.create_namespaced_config_map(namespace, config_map("kept-owner"))
        api.create_namespaced_config_map(namespace, config_map("orphan", kept_owner))

        api.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
        api.delete_namespaced_config_map("kept-owner", namespace, propagation_policy="Orphan")

        wait_for(
            lambda: gone(lambda: api.read_namespaced_config_map("dependent", namespace)),
            120,
            "the dependent of a deleted owner collected",
        )
        wait_for(
            lambda: gone(lambda: api.read_namespaced_config_map("kept-owner", namespace)),
            120,
            "the owner deleted with Orphan removed once its dependents are released",
        )
        orphan = api.read_namespaced_config_map("orphan", namespace)
        assert not present(orphan.metadata).owner_references
    finally:
        api.delete_namespace(namespace)


def test_apiserver_restart_keeps_data_and_port(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "cp")
    try:
        plane.start()
        create_namespace(core_api(plane.kubeconfig), "survives-restart")
        url = plane.url
        plane.restart_apiserver()
        assert plane.url == url
        assert namespace_phase(core_api(plane.kubeconfig), "survives-restart") == "Active"
        # kube-controller-manager rode out the outage and still works against the new process.
        manager = plane.health_urls()["kube-controller-manager"]
        # Its health check asks the API server to authenticate the probe: give the new process
        # a moment (a single probe answered nothing on a loaded machine).
        wait_for(
            lambda: http_get(manager, plane.ssl_context())[0] == 200,
            60,
            "kube-controller-manager healthy after the API server restart",
        )
        core_api(plane.kubeconfig).delete_namespace("survives-restart")
        wait_for(
            lambda: gone(lambda: core_api(plane.kubeconfig).read_namespace("survives-restart")),
            120,
            "namespace removed after the API server restart",
        )
    finally:
        plane.stop()
    assert not plane.healthy()


async def test_cluster_places_a_three_replica_stream(nats_cluster: NatsCluster) -> None:
    nc = await nats.connect(servers=nats_cluster.urls)
    try:
        js = nc.jetstream()
        info = await js.add_stream(name="DEVENV_R3", subjects=["devenv.r3.>"], num_replicas=3)
        assert info.cluster is not None
        assert info.cluster.leader in {node.name for node in nats_cluster.nodes}
        assert len(info.cluster.replicas or []) == 2
        ack = await js.publish("devenv.r3.one", b"hello")
        assert ack.stream == "DEVENV_R3"
    finally:
        await nc.close()


async def test_killed_server_recovers_its_file_store(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats")
    try:
        server.start()
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(name="DURABLE", subjects=["durable.>"])
        await js.publish("durable.one", b"kept")
        await nc.close()
        port = server.port

        server.kill()
        assert not server.healthy()
        server.start()

        assert server.port == port
        nc = await nats.connect(server.url)
        info = await nc.jetstream().stream_info("DURABLE")
        assert info.state.messages == 1
        await nc.close()
    finally:
        server.stop()


def test_environment_up_is_detached_idempotent_and_down_stops_everything(tmp_path: Path) -> None:
    state_dir = tmp_path / "dev"
    # `dev up` runs in a process that exits, as from the CLI; its servers must stay up.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from jetstream_devtools import environment; "
            "environment.up(Path(sys.argv[1]))",
            str(state_dir),
        ],
        check=True,
        timeout=240,
    )
    state = environment.load_state(state_dir)
    assert state is not None
    try:
        assert {record.name for record in state.processes} == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "nats-0",
        }
        report = environment.status(state_dir)
        assert report.healthy, report.describe()
        assert state.kubeconfig.is_file()
        assert state.nats_url.startswith("nats://127.0.0.1:")

        again = environment.up(state_dir)
        assert [r.pid for r in again.processes] == [r.pid for r in state.processes]
    finally:
        stopped = environment.down(state_dir)

    assert sorted(stopped) == ["etcd", "kube-apiserver", "kube-controller-manager", "nats-0"]
    assert not any(record.is_running() for record in state.processes)
    assert not state_dir.exists()
    assert not environment.status(state_dir).healthy
