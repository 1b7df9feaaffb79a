"""The chart's finalizer policy (templates/finalizer-policy.yaml), rendered by Helm and applied
where the operator runs without a Helm install: the benchmark, and tests of the policy.

Rendering the chart's own template keeps it the one source of the policy; the control plane
serves the API as v1beta1 (kube-apiserver 1.34 with the MutatingAdmissionPolicy feature gate).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_operator import GROUP, VERSION

from .paths import CHART_DIR, kubernetes_version

CHART = CHART_DIR
POLICY_TEMPLATE = "templates/finalizer-policy.yaml"
SERVED_POLICY_API = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
FINALIZER = f"{GROUP}/finalizer"
"""The operator's (marks.FINALIZER), named here without importing the operator."""


def render_finalizer_policy(
    helm: Path, namespaces: Sequence[str] = (), release: str = "jso"
) -> list[dict[str, Any]]:
    """The policy and its binding as the chart makes them for `watchNamespaces: namespaces`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump({"watchNamespaces": list(namespaces)}, values)
        values.flush()
        rendered = subprocess.run(
            [
                str(helm),
                "template",
                release,
                str(CHART),
                "--kube-version",
                kubernetes_version(),
                "--api-versions",
                SERVED_POLICY_API,
                "--show-only",
                POLICY_TEMPLATE,
                "--values",
                values.name,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if rendered.returncode != 0:
        raise RuntimeError(f"helm template failed: {rendered.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def _kind(document: dict[str, Any]) -> str:
    """The client's method suffix for a rendered document."""
    return "policy_binding" if document["kind"].endswith("Binding") else "policy"


def install(api: client.ApiClient, documents: Sequence[dict[str, Any]]) -> None:
    """Create (or replace) the policy and binding."""
    admission = client.AdmissionregistrationV1beta1Api(api)
    for document in documents:
        kind, name = _kind(document), document["metadata"]["name"]
        try:
            getattr(admission, f"create_mutating_admission_{kind}")(document)
        except ApiException as error:
            if error.status != 409:
                raise
            current = getattr(admission, f"read_mutating_admission_{kind}")(name)
            metadata = {
                **document["metadata"],
                "resourceVersion": current.metadata.resource_version,
            }
            getattr(admission, f"replace_mutating_admission_{kind}")(
                name, {**document, "metadata": metadata}
            )


def uninstall(api: client.ApiClient, documents: Sequence[dict[str, Any]]) -> None:
    admission = client.AdmissionregistrationV1beta1Api(api)
    for document in documents:
        try:
            getattr(admission, f"delete_mutating_admission_{_kind(document)}")(
                document["metadata"]["name"]
            )
        except ApiException as error:
            if error.status != 404:
                raise


def adds_finalizer(api: client.ApiClient, namespace: str) -> bool:
    """Whether a Stream created in `namespace` now gets the finalizer at admission, asked with a
    dry run. The policy takes effect once the API server's informers have it; until its schema
    poll (every 5 s) has seen a newly made CRD, it refuses creations with 503."""
    probe = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stream",
        "metadata": {"generateName": "admission-probe-"},
        "spec": {"name": "ADMISSION_PROBE", "subjects": ["admission.probe"]},
    }
    try:
        created = client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "streams", probe, dry_run="All"
        )
    except ApiException as error:
        if error.status == 503:
            return False
        raise
    metadata: dict[str, Any] = cast(dict[str, Any], created)["metadata"]
    return FINALIZER in (metadata.get("finalizers") or [])


def wait_until_effective(api: client.ApiClient, namespace: str, timeout: float = 30.0) -> None:
    """Until new Streams in `namespace` get the finalizer at admission."""
    deadline = time.monotonic() + timeout
    while not adds_finalizer(api, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"finalizer not added at admission in {namespace} after {timeout} s")
        time.sleep(0.1)
