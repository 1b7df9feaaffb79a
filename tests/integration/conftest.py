"""The operator under test, running as a real process against the real control plane and NATS."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.crds import install_api
from jetstream_devtools.natsserver import NatsCluster, NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from tests.conftest import TARGET
from tests.support.targets import ExistingNats

from .helpers import Resources, new_client

_namespaces = itertools.count()
CLUSTER_NAMESPACE_PREFIX = "cl"
"""Namespaces of tests on the 3-node cluster, the only ones its operator serves."""


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> client.ApiClient:
    api = new_client(kubeconfig)
    install_api(api)
    return api


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
    process = OperatorProcess(kubeconfig, nats_server.url, log_file, extra_env=SESSION_OPERATOR_ENV)
    process.start()
    try:
        yield process
    finally:
        process.stop()


# Short resync and retry delays keep the tests quick; production defaults are slower.
SESSION_OPERATOR_ENV = {
    "JETSTREAM_OPERATOR_RESYNC_INTERVAL": "2",
    "JETSTREAM_OPERATOR_CONSUMER_RESYNC_INTERVAL": "2",
    "JETSTREAM_OPERATOR_RETRY_BASE_DELAY": "0.5",
    "JETSTREAM_OPERATOR_RETRY_MAX_DELAY": "5",
    # Live counters follow within a resync; the budget itself is tested with its defaults.
    "JETSTREAM_OPERATOR_STATUS_INTERVAL": "1",
}


@contextlib.contextmanager
def operator_variant(
    process: OperatorProcess, nats_url: str | None = None, **env: str
) -> Iterator[OperatorProcess]:
    """Run the session's operator with other settings for one test, then restore it."""
    original_url, original_env = process.nats_url, dict(process.extra_env)
    process.stop()
    process.nats_url = nats_url or original_url
    process.extra_env = {**original_env, **env}
    process.start()
    try:
        yield process
    finally:
        process.stop()
        process.nats_url, process.extra_env = original_url, original_env
        process.start()


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

    Started after the test's namespace exists: kopf (1.45) lists namespaces, then lists again
    to start its namespace watch and ignores what that second list holds, so a namespace made
    between the two, milliseconds after start-up, is never watched."""
    urls = ",".join(nats_cluster.urls)
    namespaces = f"{CLUSTER_NAMESPACE_PREFIX}*"
    with operator_variant(
        operator_process, nats_url=urls, JETSTREAM_OPERATOR_NAMESPACES=namespaces
    ) as process:
        yield process


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, so tests never see each other's resources.

    On an existing cluster it is deleted afterwards, while the operator still runs to finalize
    what is in it; the suite's own API server has no namespace controller, so there it stays.
    """
    readable = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))
    prefix = CLUSTER_NAMESPACE_PREFIX if "nats_cluster" in request.fixturenames else "t"
    name = f"{prefix}{next(_namespaces)}-{readable}"[:60].rstrip("-")
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    if TARGET is not None:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


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
