"""The chart's finalizer policy as rendered: which API version, what it matches, and that its
namespace conditions select exactly the namespaces the operator watches."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kopf._cogs.structs.references import NamespaceName, match_namespace

from jetstream_devtools import admission
from jetstream_operator.api.crdgen import all_crds
from jetstream_operator.marks import FINALIZER
from jetstream_operator.settings import OperatorSettings

from .helpers import Helm, container_env, find, one, run

pytestmark = pytest.mark.integration

V1 = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
V1BETA1 = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
POLICY = "templates/finalizer-policy.yaml"


def rendered(
    helm: Helm, values: dict[str, str], *served: str, kube_version: str | None = None
) -> list[dict[str, Any]]:
    """`served`: resource kinds as `helm install` discovers them (`--api-versions`)."""
    extra = [arg for api in served for arg in ("--api-versions", api)]
    if kube_version:
        extra += ["--kube-version", kube_version]  # after the helper's own: the last one counts
    return helm.render(values, *extra)


@pytest.mark.parametrize(
    ("setting", "served", "kube_version", "expected"),
    [
        ("auto", (), None, None),
        ("auto", (V1BETA1,), None, "admissionregistration.k8s.io/v1beta1"),
        ("auto", (V1, V1BETA1), None, "admissionregistration.k8s.io/v1"),
        # A plain `helm template` knows no kinds: from 1.36 the version decides.
        ("auto", (), "v1.36.0", "admissionregistration.k8s.io/v1"),
        # Kinds known, and the policy's not among them: turned off on this cluster.
        ("auto", ("apps/v1/Deployment",), "v1.36.0", None),
        ("true", (), None, "admissionregistration.k8s.io/v1"),
        ("true", (V1BETA1,), None, "admissionregistration.k8s.io/v1beta1"),
        ("false", (V1, V1BETA1), "v1.36.0", None),
    ],
)
def test_the_policy_is_made_where_the_api_is_served(
    helm: Helm,
    setting: str,
    served: tuple[str, ...],
    kube_version: str | None,
    expected: str | None,
) -> None:
    objects = rendered(helm, {"admissionFinalizer": setting}, *served, kube_version=kube_version)
    policies = find(objects, "MutatingAdmissionPolicy")
    bindings = find(objects, "MutatingAdmissionPolicyBinding")
    if expected is None:
        assert policies == [] and bindings == []
        return
    assert [p["apiVersion"] for p in policies + bindings] == [expected, expected]
    assert bindings[0]["spec"]["policyName"] == policies[0]["metadata"]["name"]


def test_the_policy_adds_the_operators_finalizer_to_every_kind_on_creation(helm: Helm) -> None:
    spec = one(rendered(helm, {}, V1), "MutatingAdmissionPolicy")["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    crds = all_crds()
    assert rule["apiGroups"] == sorted({crd["spec"]["group"] for crd in crds})
    assert sorted(rule["resources"]) == sorted(crd["spec"]["names"]["plural"] for crd in crds)
    # Creations only: an object being deleted must lose the finalizer when the operator is done.
    assert rule["operations"] == ["CREATE"]
    assert spec["failurePolicy"] == "Ignore"
    assert "matchConditions" not in spec  # every namespace, as the operator without a list
    (mutation,) = spec["mutations"]
    expression = mutation["applyConfiguration"]["expression"]
    assert f'finalizers: ["{FINALIZER}"]' in expression
    assert admission.FINALIZER == FINALIZER  # what the bench and tests wait for


CANDIDATES = [
    "default",
    "platform",
    "platform-x",
    "team-a-1",
    "team-a-x",
    "team-b",
    "team-b-1",
    "app-q1",
    "app-r1",
    "app-r",
    "kube-system",
]


@pytest.mark.parametrize(
    "namespaces",
    [
        ["platform"],
        ["team-a-*", "platform", "!team-a-x"],
        ["!kube-*", "!team-b*"],
        ["app-[!q]?", "team-?-1"],
        ["team-*", "!team-a-?"],
    ],
)
def test_the_policy_matches_exactly_the_watched_namespaces(
    helm: Helm, namespaces: list[str]
) -> None:
    """The chart turns kopf's globs into CEL; kopf's own matcher says what the operator serves."""
    values = {"watchNamespaces": "{" + ",".join(namespaces) + "}"}
    spec = one(rendered(helm, values, V1), "MutatingAdmissionPolicy")["spec"]
    conditions = [condition["expression"] for condition in spec["matchConditions"]]
    patterns = OperatorSettings(namespaces=namespaces).kopf_namespace_patterns()
    for name in CANDIDATES:
        served = any(match_namespace(NamespaceName(name), pattern) for pattern in patterns)
        assert admitted(conditions, name) == served, (name, conditions)


def admitted(conditions: list[str], namespace: str) -> bool:
    """Evaluates the two shapes of condition the chart writes:
    `request.namespace.matches('<re>')`, negated or not."""
    results = []
    for expression in conditions:
        found = re.fullmatch(r"(!?)request\.namespace\.matches\('(.*)'\)", expression)
        assert found, f"unexpected condition {expression!r}"
        negated, pattern = found.groups()
        matches = re.search(pattern, namespace) is not None
        results.append(matches != bool(negated))
    return all(results)


@pytest.mark.parametrize(
    "values",
    [
        {"watchNamespaces": "{team-a-*,platform,!team-a-x,app-[!q]?}"},
        {
            "selector.matchLabels.jetstream-operator\\.io/shard": "a",
            "selector.matchExpressions[0].key": "tier",
            "selector.matchExpressions[0].operator": "NotIn",
            "selector.matchExpressions[0].values": "{bronze}",
        },
    ],
    ids=["globs-and-negations", "selector"],
)
def test_the_api_server_accepts_the_policy(
    helm: Helm, kubectl: Path, kubeconfig: Path, tmp_path: Path, values: dict[str, str]
) -> None:
    """The CEL of the conditions compiles, and the binding's selector is taken, where it
    counts: a server-side dry run."""
    rendered_policy = helm.template(values, "--api-versions", V1BETA1, "--show-only", POLICY)
    assert rendered_policy.returncode == 0, rendered_policy.stderr
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(rendered_policy.stdout)
    applied = run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", manifest]
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == 2, applied.stdout


SELECTOR_VALUES = {
    "selector.matchLabels.jetstream-operator\\.io/shard": "a",
    "selector.matchExpressions[0].key": "tier",
    "selector.matchExpressions[0].operator": "In",
    "selector.matchExpressions[0].values": "{gold,silver}",
    "selector.matchExpressions[1].key": "legacy",
    "selector.matchExpressions[1].operator": "DoesNotExist",
}


def test_a_selector_reaches_the_operator_and_the_policy_binding(helm: Helm) -> None:
    """The operator's setting is the chart's selector in kubectl's syntax, which the operator
    takes; the binding adds the finalizer to the same labels only."""
    objects = rendered(helm, {**SELECTOR_VALUES, "admissionFinalizer": "true"})
    env = container_env(one(objects, "Deployment"))
    selector = env["JETSTREAM_OPERATOR_SELECTOR"]
    assert selector == "jetstream-operator.io/shard=a,tier in (gold,silver),!legacy"
    assert OperatorSettings(selector=selector).selector == selector
    binding = one(objects, "MutatingAdmissionPolicyBinding")["spec"]
    assert binding["matchResources"]["objectSelector"] == {
        "matchLabels": {"jetstream-operator.io/shard": "a"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert env["JETSTREAM_OPERATOR_MANAGE_CONNECTIONS"] == "true"
    plain = rendered(helm, {"admissionFinalizer": "true", "operator.manageConnections": "false"})
    plain_env = container_env(one(plain, "Deployment"))
    assert "JETSTREAM_OPERATOR_SELECTOR" not in plain_env
    assert plain_env["JETSTREAM_OPERATOR_MANAGE_CONNECTIONS"] == "false"
    assert "matchResources" not in one(plain, "MutatingAdmissionPolicyBinding")["spec"]


def test_a_selector_without_values_for_in_is_refused(helm: Helm) -> None:
    values = {
        "selector.matchExpressions[0].key": "tier",
        "selector.matchExpressions[0].operator": "In",
    }
    result = helm.template(values)
    assert result.returncode != 0
    assert "missing property 'values'" in result.stderr, result.stderr
