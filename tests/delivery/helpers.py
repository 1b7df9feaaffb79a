"""Helm, kubectl and service-account helpers shared by the delivery tests."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_devtools.paths import KUBERNETES_VERSION
from jetstream_operator.api.crdgen import POLICY_SUFFIX
from tests.integration.helpers import present
from tests.support.operator import new_client as new_client
from tests.support.operator import operator_running as operator_running
from tests.support.operator import operator_variant

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "jetstream-operator"
CHART_CRDS = CHART / "files" / "crds"
CRDS = ROOT / "crds"
GROUP = "jetstream-operator.io"


def crd_paths(directory: Path) -> list[Path]:
    """The CRD files of crds/ or its chart copy, without the policy files beside them."""
    return sorted(p for p in directory.glob("*.yaml") if not p.name.endswith(POLICY_SUFFIX))


def policy_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{POLICY_SUFFIX}"))


class ApiServer(Protocol):
    """What the tests need of a control plane: the session's own, or an existing cluster."""

    @property
    def url(self) -> str: ...

    @property
    def ca_file(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...


class NatsTarget(Protocol):
    @property
    def url(self) -> str: ...


def run(
    argv: Sequence[str | Path],
    *,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run a command, never raising on a non-zero exit: the tests look at the outcome."""
    return subprocess.run(
        [str(arg) for arg in argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def set_args(values: dict[str, str] | None) -> list[str]:
    """`--set key=value` for each entry (lists as {a,b}, as Helm spells them)."""
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set", f"{key}={value}"]
    return args


@dataclass(frozen=True)
class Helm:
    """The helm binary with its own state directories, so nothing of the user's is touched."""

    binary: Path
    home: Path

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        env = {
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return env

    def __call__(
        self, *args: str | Path, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run([self.binary, *args], env=self.env(kubeconfig))

    def template(
        self,
        values: dict[str, str] | None = None,
        *extra: str,
        chart: Path = CHART,
        namespace: str = "jetstream-system",
        release: str = "jso",
    ) -> subprocess.CompletedProcess[str]:
        # The cluster's version, as `helm install` and Argo CD give it: our helm is built without
        # the ldflags that set its default (v1.20), below the chart's kubeVersion.
        return self(
            "template",
            release,
            chart,
            "--namespace",
            namespace,
            "--kube-version",
            KUBERNETES_VERSION,
            *set_args(values),
            *extra,
        )

    def render(
        self,
        values: dict[str, str] | None = None,
        *extra: str,
        namespace: str = "jetstream-system",
        release: str = "jso",
    ) -> list[dict[str, Any]]:
        """The chart's manifests as objects; fails the test with Helm's message if it cannot."""
        result = self.template(values, *extra, namespace=namespace, release=release)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def container_env(deployment: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or valueFrom) of the operator container's environment."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {
        item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])
    }


def service_account_kubeconfig(
    api: client.ApiClient,
    control_plane: ApiServer,
    namespace: str,
    service_account: str,
    path: Path,
) -> Path:
    """A kubeconfig that authenticates as the service account, with a TokenRequest token."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, request
    )
    assert answer.status is not None
    user = f"system:serviceaccount:{namespace}:{service_account}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": control_plane.url,
                    "certificate-authority": str(control_plane.ca_file),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": answer.status.token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def operator_as(
    process: OperatorProcess, kubeconfig: Path, **env: str
) -> Iterator[OperatorProcess]:
    """The session's operator restarted with another kubeconfig (and settings), then restored.

    `operator_variant` restores NATS URL and environment but not the kubeconfig, so the
    kubeconfig is swapped around it: set before it starts the variant, put back before it
    restarts the session's operator on exit.
    """
    original = process.kubeconfig
    process.kubeconfig = kubeconfig
    try:
        with operator_variant(process, **env) as running:
            process.kubeconfig = original  # read again only by the restart on exit
            yield running
    finally:
        process.kubeconfig = original


def spec_schema(crd: client.V1CustomResourceDefinition) -> client.V1JSONSchemaProps:
    """The schema of `spec` in the CRD's first version."""
    schema = present(crd.spec.versions[0].schema)
    return present(present(schema.open_apiv3_schema).properties)["spec"]


def as_dict(api: client.ApiClient, model: object) -> dict[str, Any]:
    """An API model as the JSON the server sent (camelCase keys), for plain indexing."""
    data: dict[str, Any] = api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return data


def first_run_log(path: Path, offset: int) -> str:
    """The log of the first operator run started after `offset` (up to the next start)."""
    with path.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    runs = re.split(r"(?m)^(?==== .* starting operator ===$)", text)
    started = [run for run in runs if run.startswith("=== ")]
    assert started, "the operator did not start"
    return started[0]


def wait_until_allowed(
    api: client.ApiClient,
    checks: Sequence[tuple[str, str, str, str | None]],
    timeout: float = 15.0,
) -> None:
    """Wait until each (verb, resource, group, namespace) is allowed: the API server's RBAC
    authorizer learns of new (Cluster)Roles and bindings from a watch, a moment after they are
    written, and an operator started before that would meet 403s."""
    deadline = time.monotonic() + timeout
    pending = list(checks)
    while pending:
        pending = [
            (verb, resource, group, namespace)
            for verb, resource, group, namespace in pending
            if not can_i(api, verb, resource, group=group, namespace=namespace)
        ]
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"still not allowed after {timeout}s: {pending}")
        if pending:
            time.sleep(0.2)


def can_i(
    api: client.ApiClient,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str | None = None,
    subresource: str | None = None,
) -> bool:
    """SelfSubjectAccessReview (what `kubectl auth can-i` asks) as whoever `api` is."""
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb,
                resource=resource,
                group=group,
                namespace=namespace,
                subresource=subresource,
            )
        )
    )
    answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    assert answer.status is not None
    return bool(answer.status.allowed)
