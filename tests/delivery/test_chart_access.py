"""What the rendered Helm chart allows: its admission policies go with the CRDs, its network
policy lets through NATS, the API server, DNS and metrics only, and its RBAC roles cover every
kind and grant a release that only reads connections nothing more.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from .helpers import (
    CHART_CRDS,
    Helm,
    crd_paths,
    find,
    one,
    policy_paths,
)
from .test_chart_render import NAMESPACED, WATCHED

pytestmark = pytest.mark.integration


def test_rendered_policies_are_the_files_and_go_with_the_crds(helm: Helm) -> None:
    """A CRD without its policy would admit what the rules refuse; both follow crds.keep."""
    files = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for path in policy_paths(CHART_CRDS)
        for doc in yaml.safe_load_all(path.read_text())
    }
    assert len(files) == 2 * len(crd_paths(CHART_CRDS))
    for values, kept in (({}, True), ({"crds.keep": "false"}, False)):
        objects = helm.render(values)
        rendered = {
            (doc["kind"], doc["metadata"]["name"]): doc
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for doc in find(objects, kind)
            if not doc["metadata"]["name"].endswith(SECRET_POLICY_SUFFIX)
        }
        assert set(rendered) == set(files)
        for key, doc in rendered.items():
            annotations = doc["metadata"].pop("annotations", {})
            assert annotations == ({"helm.sh/resource-policy": "keep"} if kept else {})
            assert doc == files[key]
    without = helm.render({"crds.enabled": "false", "rbac.secrets": "false"})
    assert not find(without, "ValidatingAdmissionPolicy")
    assert not find(without, "CustomResourceDefinition")


SECRET_POLICY_SUFFIX = "-secrets"
"""The chart's own policy on the operator's Secret writes (templates/secret-policy.yaml)."""


def test_the_secret_policy_goes_with_the_operators_secret_rights(helm: Helm) -> None:
    """Where the chart grants patch on Secrets, its policy holds that patch to the finalizer."""
    for values, present in (({}, True), ({"rbac.secrets": "false"}, False)):
        names = [
            doc["metadata"]["name"]
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for doc in find(helm.render(values), kind)
            if doc["metadata"]["name"].endswith(SECRET_POLICY_SUFFIX)
        ]
        assert len(names) == (2 if present else 0), (values, names)


def test_network_policy_allows_nats_api_server_dns_and_metrics_only(helm: Helm) -> None:
    assert find(helm.render(), "NetworkPolicy")  # on by default
    assert not find(helm.render({"networkPolicy.enabled": "false"}), "NetworkPolicy")
    by_url = one(
        helm.render({"nats.url": r"tls://a.example:4443\, wss://b.example\, nats://c:4222"}),
        "NetworkPolicy",
    )
    assert [port["port"] for port in by_url["spec"]["egress"][0]["ports"]] == [4222, 4443, 443]
    nats_peer = '{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"nats"}}}'
    objects = helm.render(
        {"networkPolicy.enabled": "true", "networkPolicy.nats.ports": "{4222,4223}"},
        "--set-json",
        f"networkPolicy.nats.to=[{nats_peer}]",
    )
    policy = one(objects, "NetworkPolicy")
    deployment = one(objects, "Deployment")
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 9090, "protocol": "TCP"}]}]
    tcp = [{"port": port, "protocol": "TCP"} for port in (4222, 4223)]
    nats, api, dns = policy["spec"]["egress"]
    assert nats == {"ports": tcp, "to": [yaml.safe_load(nats_peer)]}
    assert api == {"ports": [{"port": p, "protocol": "TCP"} for p in (443, 6443)]}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    bare = one(
        helm.render(
            {
                "networkPolicy.enabled": "true",
                "networkPolicy.dns": "false",
                "metrics.enabled": "false",
            }
        ),
        "NetworkPolicy",
    )
    assert len(bare["spec"]["egress"]) == 2
    assert not bare["spec"]["ingress"]  # nothing may connect to the pod


def test_peering_without_helm_hook_or_lookup(helm: Helm) -> None:
    """For Argo CD: `helm template` output that does not depend on what the cluster holds, and
    no hook that would be deleted and created again on every sync."""
    values = {"replicaCount": "2", "peering.helmHook": "false"}
    fresh = helm.render(values)
    existing = helm.render(values, "--api-versions", "kopf.dev/v1/ClusterKopfPeering")
    assert fresh == existing
    peering = one(fresh, "ClusterKopfPeering", "jso-jetstream-operator")
    annotations = peering["metadata"]["annotations"]
    assert not [key for key in annotations if key.startswith("helm.sh/")]
    assert annotations["argocd.argoproj.io/sync-options"] == "SkipDryRunOnMissingResource=true"
    assert not find(helm.render({**values, "peering.create": "false"}), "ClusterKopfPeering")


def test_aggregated_roles_cover_every_kind(helm: Helm) -> None:
    crds = [yaml.safe_load(path.read_text())["spec"] for path in crd_paths(CHART_CRDS)]
    # Cluster-scoped kinds (ClusterNatsConnection) are the platform team's, not a namespace's.
    plurals = sorted(crd["names"]["plural"] for crd in crds if crd["scope"] == "Namespaced")
    assert len(plurals) < len(crds)
    objects = helm.render()
    view = one(objects, "ClusterRole", "jso-jetstream-operator-view")
    edit = one(objects, "ClusterRole", "jso-jetstream-operator-edit")
    prefix = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(prefix) and v} == {
        f"{prefix}view",
        f"{prefix}edit",
        f"{prefix}admin",
    }
    assert {k for k in edit["metadata"]["labels"] if k.startswith(prefix)} == {
        f"{prefix}edit",
        f"{prefix}admin",
    }
    assert sorted(view["rules"][0]["resources"]) == sorted(
        plurals + [f"{plural}/status" for plural in plurals]
    )
    assert sorted(edit["rules"][0]["resources"]) == plurals
    assert "escalate" not in edit["rules"][0]["verbs"]
    assert not find(
        helm.render({"rbac.aggregateToDefaultRoles": "false"}),
        "ClusterRole",
        "jso-jetstream-operator-view",
    )


def granted(rules: list[dict[str, Any]], resource: str) -> set[str]:
    """The verbs `rules` grant on a resource (such as `natsconnections/status`)."""
    return {verb for rule in rules if resource in rule["resources"] for verb in rule["verbs"]}


@pytest.mark.parametrize("values", [{}, NAMESPACED])
def test_a_release_that_only_reads_connections_may_only_read_them(
    helm: Helm, values: dict[str, str]
) -> None:
    """With operator.manageConnections=false another release writes the NatsConnections and
    holds their Secrets: the API server refuses this one's writes to them, not only its code."""
    kind = "Role" if values else "ClusterRole"  # namespaced: one Role per watched namespace
    managing = find(helm.render(values), kind, "jso-jetstream-operator")
    reading = find(
        helm.render({**values, "operator.manageConnections": "false"}),
        kind,
        "jso-jetstream-operator",
    )
    assert len(managing) == len(reading) == (len(WATCHED) if values else 1)
    for manager, reader in zip(managing, reading, strict=True):
        assert {"patch", "update"} <= granted(manager["rules"], "natsconnections/status")
        assert granted(manager["rules"], "secrets") == {"get", "patch", "create"}
        assert granted(reader["rules"], "natsconnections") == {"get", "list", "watch"}
        assert granted(reader["rules"], "natsconnections/status") == set()
        assert granted(reader["rules"], "secrets") == {"get"}
        for resource in ("streams", "streams/status", "consumers/status", "events"):
            assert granted(reader["rules"], resource) == granted(manager["rules"], resource)


def _grants_secrets(role: dict[str, Any]) -> bool:
    return any("secrets" in rule.get("resources", []) for rule in role["rules"])


def test_secrets_are_granted_only_where_the_operator_watches(helm: Helm) -> None:
    """With watchNamespaces of plain names, Secrets come from a Role in each of them (and in
    the release's namespace, for ClusterNatsConnections), never from the ClusterRole."""
    objects = helm.render({"watchNamespaces": "{team-a,team-b}"})
    assert not _grants_secrets(one(objects, "ClusterRole", "jso-jetstream-operator"))
    roles = {
        (role["metadata"]["namespace"], role["metadata"]["name"])
        for role in find(objects, "Role")
        if _grants_secrets(role)
    }
    assert roles == {
        ("team-a", "jso-jetstream-operator-secrets"),
        ("team-b", "jso-jetstream-operator-secrets"),
        ("jetstream-system", "jso-jetstream-operator-connection-secrets"),
    }
    for role in find(objects, "Role"):
        assert [rule["verbs"] for rule in role["rules"]] == [["get", "patch", "create"]]
    # Every namespace: the ClusterRole, as before; so with globs, where no Role can follow.
    for values in ({}, {"watchNamespaces": "{team-*}"}):
        rendered = helm.render(values)
        assert _grants_secrets(one(rendered, "ClusterRole", "jso-jetstream-operator")), values
        assert not [role for role in find(rendered, "Role") if _grants_secrets(role)], values
