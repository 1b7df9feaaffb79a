"""`helm install` and `helm upgrade` against the real API server: objects, CRDs, HA, examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .conftest import Release, crd_names, ensure_namespace, upgrade_release
from .helpers import CHART, ROOT, Helm, as_dict, run

pytestmark = pytest.mark.integration

STREAMS_CRD = "streams.jetstream-operator.io"
ADDED_SHORT_NAME = "jssupgraded"


def _short_names(api: client.ApiClient) -> list[str]:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(STREAMS_CRD)
    return list(as_dict(api, crd)["spec"]["names"].get("shortNames", []))


def _deployment(api: client.ApiClient, release: Release) -> dict[str, Any]:
    apps = client.AppsV1Api(api)
    return as_dict(api, apps.read_namespaced_deployment(release.fullname, release.namespace))


def test_install_creates_operator_rbac_and_crds(
    cluster_release: Release, api_client: client.ApiClient
) -> None:
    pod = _deployment(api_client, cluster_release)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == cluster_release.service_account
    assert pod["containers"][0]["image"] == "jetstream-operator:0.1.0"
    client.CoreV1Api(api_client).read_namespaced_service_account(
        cluster_release.service_account, cluster_release.namespace
    )
    rbac = client.RbacAuthorizationV1Api(api_client)
    binding = as_dict(api_client, rbac.read_cluster_role_binding(cluster_release.fullname))
    assert binding["roleRef"]["name"] == cluster_release.fullname
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": cluster_release.service_account,
            "namespace": cluster_release.namespace,
        }
    ]
    extensions = client.ApiextensionsV1Api(api_client)
    for name in crd_names():
        crd = as_dict(api_client, extensions.read_custom_resource_definition(name))
        annotations = crd["metadata"].get("annotations", {})
        assert annotations.get("meta.helm.sh/release-name") == cluster_release.name, name
        assert annotations.get("helm.sh/resource-policy") == "keep", name


def test_upgrade_changes_crds_and_turns_on_ha(
    cluster_release: Release,
    helm: Helm,
    kubeconfig: Path,
    api_client: client.ApiClient,
    chart_copy: Path,
) -> None:
    """A new chart version's CRD reaches the API server by `helm upgrade`, as do HA objects."""
    crd_file = chart_copy / "files" / "crds" / f"{STREAMS_CRD}.yaml"
    text = crd_file.read_text()
    assert "    shortNames:\n    - jss\n" in text
    crd_file.write_text(text.replace("    - jss\n", f"    - jss\n    - {ADDED_SHORT_NAME}\n", 1))
    assert ADDED_SHORT_NAME not in _short_names(api_client)

    def upgrade(chart: Path, *values: str) -> None:
        upgrade_release(helm, cluster_release, kubeconfig, *values, chart=chart)

    container = _deployment(api_client, cluster_release)["spec"]["template"]["spec"]["containers"]
    nats_url = next(
        e["value"] for e in container[0]["env"] if e["name"] == "JETSTREAM_OPERATOR_NATS_URL"
    )
    try:
        upgrade(chart_copy, "replicaCount=2", f"nats.url={nats_url}")
        assert ADDED_SHORT_NAME in _short_names(api_client)
        policy = client.PolicyV1Api(api_client)
        pdb = policy.read_namespaced_pod_disruption_budget(
            cluster_release.fullname, cluster_release.namespace
        )
        assert as_dict(api_client, pdb)["spec"]["minAvailable"] == 1
        objects = client.CustomObjectsApi(api_client)
        peering = as_dict(
            api_client,
            objects.get_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", cluster_release.fullname
            ),
        )
        deployment = _deployment(api_client, cluster_release)
        assert deployment["spec"]["replicas"] == 2
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["JETSTREAM_OPERATOR_PEERING"] == cluster_release.fullname

        # Upgrading again leaves the peering object alone (running operators rely on it).
        upgrade(chart_copy, "replicaCount=2", f"nats.url={nats_url}")
        again = as_dict(
            api_client,
            objects.get_cluster_custom_object(
                "kopf.dev", "v1", "clusterkopfpeerings", cluster_release.fullname
            ),
        )
        assert again["metadata"]["uid"] == peering["metadata"]["uid"]
    finally:
        upgrade(CHART, f"nats.url={nats_url}")
    assert ADDED_SHORT_NAME not in _short_names(api_client)
    with pytest.raises(ApiException) as gone:
        client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(
            cluster_release.fullname, cluster_release.namespace
        )
    assert gone.value.status == 404


def test_install_output_says_how_to_check(
    cluster_release: Release, helm: Helm, kubeconfig: Path
) -> None:
    status = helm(
        "status",
        cluster_release.name,
        "--namespace",
        cluster_release.namespace,
        "--show-resources=false",
        kubeconfig=kubeconfig,
    )
    assert status.returncode == 0, status.stderr
    assert "STATUS: deployed" in status.stdout
    assert f"rollout status deployment/{cluster_release.fullname}" in status.stdout
    assert "kubectl get streams" in status.stdout


def test_argocd_example_resources_fit_the_installed_crds(
    cluster_release: Release, kubectl: Path, kubeconfig: Path
) -> None:
    """examples/argocd/resources are valid for the CRDs the chart installed (server dry run)."""
    ensure_namespace(kubectl, kubeconfig, "orders")
    applied = run(
        [
            kubectl,
            "--kubeconfig",
            kubeconfig,
            "apply",
            "--dry-run=server",
            "--namespace",
            "orders",
            "-f",
            ROOT / "examples" / "argocd" / "resources",
        ]
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == 3, applied.stdout
