"""A real Argo CD (repo-server + application-controller) against the session's control plane.

Argo CD is built before any test runs (pytest_collection_finish, below), so a cold build of
about 15 minutes never counts against a test's timeout. Like tests/delivery, the API client and
the operator are package-scoped here, so this directory's operator stops with it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from jetstream_devtools import argocd as argocd_env
from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.operator_process import OperatorProcess
from tests.conftest import TARGET
from tests.delivery.helpers import CHART, ROOT
from tests.integration.conftest import (  # noqa: F401  (fixtures, found by name)
    namespace,
    nc,
    resources,
)
from tests.integration.helpers import json_body
from tests.support.operator import admin_client, operator_running

ARGOCD_CM_PATCH = ROOT / "docs" / "argocd" / "argocd-cm.yaml"
HERE = Path(__file__).parent
_unavailable: list[str] = []
"""Why Argo CD cannot run here, found while building it before the tests."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install redis-server and git, and build Argo CD, before the first test of this directory."""
    if TARGET is not None or not any(HERE in Path(item.path).parents for item in session.items):
        return
    try:
        argocd_env.ensure_packages()
        argocd_env.ensure_argocd()
    except (argocd_env.ArgoCDBuildError, argocd_env.ArgoCDUnavailable) as error:
        _unavailable.append(str(error))


@pytest.fixture(scope="package")
def api_client(kubeconfig: Path) -> client.ApiClient:
    return admin_client(kubeconfig)


@pytest.fixture(scope="package")
def operator_process(
    api_client: client.ApiClient,
    kubeconfig: Path,
    nats_server: Any,
    tmp_path_factory: pytest.TempPathFactory,
    process_logs: dict[str, Path],
) -> Iterator[OperatorProcess]:
    """The operator from the checkout, as the integration suite runs it."""
    log_file = tmp_path_factory.mktemp("argocd-operator") / "operator.log"
    process_logs["operator (argocd)"] = log_file
    with operator_running(kubeconfig, nats_server.url, log_file) as process:
        yield process


@pytest.fixture(scope="package")
def argocd(
    control_plane: Any,
    api_client: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
    process_logs: dict[str, Path],
) -> Iterator[argocd_env.ArgoCD]:
    if TARGET is not None:
        pytest.skip(
            "Argo CD runs next to the suite's own kube-apiserver (its components reach it "
            "through a relay into their network namespace); an existing cluster is not used"
        )
    if _unavailable:
        pytest.skip(f"Argo CD cannot run here: {_unavailable[0]}")
    assert isinstance(control_plane, ControlPlane)
    instance = argocd_env.ArgoCD(
        tmp_path_factory.mktemp("argocd"), control_plane.kubeconfig, control_plane.url
    )
    try:
        try:
            instance.start([ARGOCD_CM_PATCH])
        except argocd_env.ArgoCDUnavailable as error:  # a missing prerequisite of the machine
            pytest.skip(f"Argo CD cannot run here: {error}")
        process_logs.update({f"argocd {name}": log for name, log in instance.logs().items()})
        yield instance
    finally:
        instance.stop()


@dataclass
class GitRepo:
    """A Git repository on this machine, which Argo CD reads as file:///path."""

    path: Path

    @property
    def url(self) -> str:
        return f"file://{self.path}"

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def write(self, relative: str, *documents: dict[str, Any]) -> None:
        target = self.path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump_all(documents, sort_keys=False))

    def remove(self, relative: str) -> None:
        self.git("rm", "-q", relative)

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture(scope="package")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    """The operator's chart and, per test, a directory of Stream and Consumer manifests."""
    path = tmp_path_factory.mktemp("gitops")
    repo = GitRepo(path)
    repo.git("init", "-q", "-b", "main")
    repo.git("config", "user.email", "tests@jetstream-operator.invalid")
    repo.git("config", "user.name", "tests")
    shutil.copytree(CHART, path / "charts" / "jetstream-operator")
    repo.commit("the operator's chart")
    return repo


class Applications:
    """Argo CD Applications, read and changed through the API server as a user's tools do."""

    GROUP, VERSION, PLURAL = "argoproj.io", "v1alpha1", "applications"

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.created: list[str] = []

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(
            self.GROUP, self.VERSION, argocd_env.NAMESPACE, self.PLURAL, body
        )
        self.created.append(body["metadata"]["name"])

    def get(self, name: str) -> dict[str, Any]:
        return json_body(
            self.custom.get_namespaced_custom_object(
                self.GROUP, self.VERSION, argocd_env.NAMESPACE, self.PLURAL, name
            )
        )

    def patch(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            self.GROUP, self.VERSION, argocd_env.NAMESPACE, self.PLURAL, name, patch
        )

    def refresh(self, name: str) -> None:
        """What `argocd app get --refresh` does: look at Git again now."""
        self.patch(name, {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}})

    def delete(self, name: str) -> None:
        """Without the resources-finalizer: the Application goes, its resources stay."""
        self.custom.delete_namespaced_custom_object(
            self.GROUP, self.VERSION, argocd_env.NAMESPACE, self.PLURAL, name
        )

    def wait(
        self,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float = 120.0,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                app = self.get(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise
                app = {}
            if app and condition(app):
                return app
            if time.monotonic() > deadline:
                status = yaml.safe_dump(app.get("status", {}), sort_keys=False)[-3000:]
                raise AssertionError(f"{name}: not {what} within {timeout:.0f}s; status:\n{status}")
            time.sleep(1)


@pytest.fixture
def applications(argocd: argocd_env.ArgoCD, api_client: client.ApiClient) -> Iterator[Applications]:
    apps = Applications(api_client)
    yield apps
    for name in apps.created:
        try:
            apps.delete(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
