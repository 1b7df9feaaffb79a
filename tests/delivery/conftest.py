"""Fixtures of the delivery tests: Helm, the chart installed in the real API server, the operator.

The integration suite's function-scoped fixtures are reused as they are. Its session-scoped
`api_client` and `operator_process` are not: a second session-scoped copy here would keep a
second operator running next to the integration suite's for the rest of a full `pytest tests`
run. Here they are package-scoped, so they end with this directory, and the CRDs come from the
chart instead of being applied directly.

The servers are the session's (tests/conftest.py): its own kube-apiserver and nats-server, or an
existing cluster and NATS named by JETSTREAM_OPERATOR_E2E_KUBECONFIG and ..._NATS_URL.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from jetstream_devtools.crds import wait_established, wait_policies_in_effect
from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.operator_process import OperatorProcess
from tests.integration.conftest import (  # noqa: F401  (fixtures, found by name)
    namespace,
    nc,
    resources,
)
from tests.support.operator import operator_running

from .helpers import CHART, CHART_CRDS, Helm, NatsTarget, crd_paths, new_client, run

CLUSTER_RELEASE = "jso"
CLUSTER_RELEASE_NAMESPACE = "jso-system"


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(ensure_tools(["helm"])["helm"], tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="package")
def api_client(kubeconfig: Path) -> client.ApiClient:
    """An admin client. The CRDs are the chart's: request `cluster_release` to have them."""
    return new_client(kubeconfig)


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    service_account: str
    fullname: str


def crd_names() -> list[str]:
    return sorted(path.name.removesuffix(".yaml") for path in crd_paths(CHART_CRDS))


@pytest.fixture(scope="package")
def cluster_release(
    helm: Helm, kubeconfig: Path, api_client: client.ApiClient, nats_server: NatsTarget
) -> Iterator[Release]:
    """The chart installed cluster-wide (CRDs included), as `helm install` would for a user.

    --take-ownership: in a full run the CRDs may already exist, applied by another suite.
    """
    installed = helm(
        "install",
        CLUSTER_RELEASE,
        CHART,
        "--namespace",
        CLUSTER_RELEASE_NAMESPACE,
        "--create-namespace",
        "--take-ownership",
        "--set",
        f"nats.url={nats_server.url}",
        kubeconfig=kubeconfig,
    )
    assert installed.returncode == 0, installed.stderr
    extensions = client.ApiextensionsV1Api(api_client)
    for name in crd_names():
        wait_established(extensions, name)
    wait_policies_in_effect(api_client)  # served and enforced, not only Established
    fullname = f"{CLUSTER_RELEASE}-jetstream-operator"
    try:
        yield Release(CLUSTER_RELEASE, CLUSTER_RELEASE_NAMESPACE, fullname, fullname)
    finally:
        # The CRDs stay (helm.sh/resource-policy: keep), as they would for a user.
        helm(
            "uninstall",
            CLUSTER_RELEASE,
            "--namespace",
            CLUSTER_RELEASE_NAMESPACE,
            kubeconfig=kubeconfig,
        )


@pytest.fixture(scope="package")
def operator_process(
    cluster_release: Release,
    kubeconfig: Path,
    nats_server: NatsTarget,
    tmp_path_factory: pytest.TempPathFactory,
    process_logs: dict[str, Path],
) -> Iterator[OperatorProcess]:
    """The operator as a process (as in the integration suite), stopped with this package."""
    log_file = tmp_path_factory.mktemp("delivery-operator") / "operator.log"
    process_logs["operator (delivery)"] = log_file
    with operator_running(kubeconfig, nats_server.url, log_file) as process:
        yield process


def upgrade_release(
    helm: Helm, release: Release, kubeconfig: Path, *values: str, chart: Path = CHART
) -> None:
    """`helm upgrade` with exactly these values (--reset-values: with no --set at all, Helm
    would otherwise reuse the previous ones)."""
    upgraded = helm(
        "upgrade",
        release.name,
        chart,
        "--namespace",
        release.namespace,
        "--take-ownership",
        "--reset-values",
        *[arg for value in values for arg in ("--set", value)],
        kubeconfig=kubeconfig,
    )
    assert upgraded.returncode == 0, upgraded.stderr


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    """A scratch copy of the chart, to change files of it (e.g. a CRD) for one test."""
    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    return copy


def ensure_namespace(kubectl: Path, kubeconfig: Path, name: str) -> None:
    created = run([kubectl, "--kubeconfig", kubeconfig, "create", "namespace", name])
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
