"""The operator under test, running as a real process against the real control plane and NATS."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.natsserver import NatsCluster, NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP
from jetstream_operator.marks import CONNECTION_SECRET_LABEL
from tests.conftest import TARGET
from tests.support.operator import admin_client, new_client, operator_running, operator_variant
from tests.support.targets import ExistingNats

from .accounts_env import account_system, team  # noqa: F401  (fixtures of the account tests)
from .helpers import OUR_PLURALS, Resources, empty_namespace

TENANT = "tenant-alice"
"""The user a tenant's tests act as (`tenant`)."""

_namespaces = itertools.count()
CLUSTER_NAMESPACE_PREFIX = "cl"
"""Namespaces of tests on the 3-node cluster, the only ones its operator serves."""


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> client.ApiClient:
    return admin_client(kubeconfig)


@pytest.fixture(scope="session")
def operator_process(
    api_client: client.ApiClient,
    kubeconfig: Path,
    nats_server: NatsServer | ExistingNats,
    tmp_path_factory: pytest.TempPathFactory,
    process_logs: dict[str, Path],
) -> Iterator[OperatorProcess]:
    log_file = tmp_path_factory.mktemp("operator") / "operator.log"
    process_logs["operator"] = log_file
    with operator_running(kubeconfig, nats_server.url, log_file) as process:
        yield process


@pytest.fixture
def operator_without_advisories(operator_process: OperatorProcess) -> Iterator[OperatorProcess]:
    with operator_variant(operator_process, JETSTREAM_OPERATOR_ADVISORIES="false") as process:
        yield process


@pytest.fixture
def operator_with_slow_resync(operator_process: OperatorProcess) -> Iterator[OperatorProcess]:
    """Resources looked at again only every ten minutes: anything faster came from an event."""
    with operator_variant(operator_process, JETSTREAM_OPERATOR_RESYNC_INTERVAL="600") as process:
        yield process


@pytest.fixture
def operator_read_only(operator_process: OperatorProcess) -> Iterator[OperatorProcess]:
    with operator_variant(operator_process, JETSTREAM_OPERATOR_READ_ONLY="true") as process:
        yield process


@pytest.fixture
def operator_on_cluster(
    operator_process: OperatorProcess, nats_cluster: NatsCluster, namespace: str
) -> Iterator[OperatorProcess]:
    """The operator on the 3-node cluster, serving only the cluster tests' namespaces: with
    every earlier test's resources it would first fill the cluster with their streams, and a
    leader election under that load takes minutes on two cores.

    Started after the test's namespace exists. kopf (1.45) alone would miss a namespace made
    between its two listings at start-up; kopf_adaptations.notice_late_namespaces now serves
    it, and this order keeps the test independent of that adaptation."""
    urls = ",".join(nats_cluster.urls)
    namespaces = f"{CLUSTER_NAMESPACE_PREFIX}*"
    with operator_variant(
        operator_process, nats_url=urls, JETSTREAM_OPERATOR_NAMESPACES=namespaces
    ) as process:
        yield process


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, so tests never see each other's resources. At the end the
    test's objects are deleted and finalized by the operator (`empty_namespace`), so nothing
    accumulates on a worker's servers from test to test.

    On an existing cluster the namespace is deleted afterwards; the suite's own API server has
    no namespace controller, so there the empty namespace stays.
    """
    readable = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))
    prefix = CLUSTER_NAMESPACE_PREFIX if "nats_cluster" in request.fixturenames else "t"
    name = f"{prefix}{next(_namespaces)}-{readable}"[:60].rstrip("-")
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    empty_namespace(api_client, name)
    if TARGET is not None:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


@pytest.fixture
def tenant(kubeconfig: Path, api_client: client.ApiClient, namespace: str) -> Iterator[Any]:
    """A tenant's client (impersonated: the API server's RBAC decides): our kinds in
    `namespace`, and `get` on its Secret "mine" only ("theirs" exists beside it)."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rules = [
        client.V1PolicyRule(
            api_groups=[GROUP],
            resources=list(OUR_PLURALS),
            verbs=["get", "list", "watch", "create", "update", "patch", "delete"],
        ),
        client.V1PolicyRule(
            api_groups=[""], resources=["secrets"], verbs=["get"], resource_names=["mine"]
        ),
    ]
    rbac.create_namespaced_role(
        namespace, client.V1Role(metadata=client.V1ObjectMeta(name="tenant"), rules=rules)
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="tenant"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="tenant"
            ),
            subjects=[
                client.RbacV1Subject(
                    api_group="rbac.authorization.k8s.io", kind="User", name=TENANT
                )
            ],
        ),
    )
    core = client.CoreV1Api(api_client)
    for secret in ("mine", "theirs"):
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=secret, labels={CONNECTION_SECRET_LABEL: "true"}),
                string_data={"username": "u", "password": "p", "token": "t"},
            ),
        )
    api = new_client(kubeconfig)
    api.set_default_header("Impersonate-User", TENANT)  # type: ignore[no-untyped-call]  # untyped
    yield client.CustomObjectsApi(api)


@pytest.fixture
def resources(api_client: client.ApiClient, namespace: str) -> Resources:
    return Resources(api_client, namespace)


@pytest.fixture
async def nc(nats_server: NatsServer | ExistingNats) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_server.url)
    try:
        yield connection
    finally:
        await connection.close()
