"""The Helm chart as rendered: lint, values schema, CRD copies, hardening, and server dry-run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetstream_devtools.chartdocs import UndocumentedValue, rewritten_readme, values_markdown
from jetstream_devtools.paths import OLDEST_KUBERNETES_VERSION
from jetstream_operator.k8s.peering import PEERING_GROUP, peering_crds
from jetstream_operator.settings import OperatorSettings

from .conftest import ensure_namespace
from .helpers import (
    CHART,
    CHART_CRDS,
    CRDS,
    ROOT,
    Helm,
    container_env,
    crd_paths,
    find,
    one,
    policy_paths,
    run,
)

pytestmark = pytest.mark.integration

WATCHED = ("jso-watch-a", "jso-watch-b")
NAMESPACED = {
    "rbac.scope": "namespaced",
    "watchNamespaces": "{" + ",".join(WATCHED) + "}",
}


def test_chart_crd_files_are_byte_identical_to_crds_dir() -> None:
    """The chart ships crds/ unchanged; `make crds` refreshes the copy."""
    generated = {path.name: path.read_bytes() for path in CRDS.glob("*.yaml")}
    shipped = {path.name: path.read_bytes() for path in CHART_CRDS.glob("*.yaml")}
    assert generated, "crds/ is empty"
    assert sorted(shipped) == sorted(generated), "run `make crds` to refresh the chart's copy"
    different = [name for name in generated if shipped[name] != generated[name]]
    assert not different, f"chart copies differ from crds/: {different}; run `make crds`"


@pytest.mark.parametrize(
    "values",
    [
        {},
        NAMESPACED,
        {
            "replicaCount": "2",
            "metrics.enabled": "true",
            "metrics.serviceMonitor.enabled": "true",
            "nats.credentialsSecret.name": "nats-creds",
            "nats.tlsSecret.name": "nats-tls",
            "nats.tlsSecret.certKey": "tls.crt",
            "nats.tlsSecret.keyKey": "tls.key",
        },
    ],
    ids=["defaults", "namespaced", "ha-metrics-secrets"],
)
def test_helm_lint_is_clean(helm: Helm, values: dict[str, str]) -> None:
    args = [f"--set={key}={value}" for key, value in values.items()]
    linted = helm("lint", "--strict", CHART, *args)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "0 chart(s) failed" in linted.stdout
    assert "[WARNING]" not in linted.stdout and "[ERROR]" not in linted.stdout


def test_rendered_crds_are_the_files_plus_the_keep_policy(helm: Helm) -> None:
    files = {
        doc["metadata"]["name"]: doc
        for doc in (yaml.safe_load(path.read_text()) for path in crd_paths(CHART_CRDS))
    }
    kept = find(helm.render(), "CustomResourceDefinition")
    assert {crd["metadata"]["name"] for crd in kept} == set(files)
    for crd in kept:
        annotations = crd["metadata"].pop("annotations")
        assert annotations == {"helm.sh/resource-policy": "keep"}
        assert crd == files[crd["metadata"]["name"]]
    unkept = find(helm.render({"crds.keep": "false"}), "CustomResourceDefinition")
    assert {crd["metadata"]["name"]: crd for crd in unkept} == files
    assert not find(helm.render({"crds.enabled": "false"}), "CustomResourceDefinition")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCont": "2"}, "additional properties 'replicaCont' not allowed"),
        ({"nats.ulr": "nats://x:4222"}, "at '/nats': additional properties 'ulr' not allowed"),
        ({"replicaCount": "0"}, "at '/replicaCount': minimum"),
        ({"rbac.scope": "cluster-wide"}, "at '/rbac/scope': value must be one of"),
        ({"nats.url": "http://nats:4222"}, "at '/nats/url'"),
        ({"extraEnv[0].name": "X", "extraEnv[0].value": "1"}, "at '/extraEnv/0/value'"),
        ({"rbac.scope": "namespaced"}, "rbac.scope=namespaced needs watchNamespaces"),
        (
            {"rbac.scope": "namespaced", "watchNamespaces": "{team-*}"},
            "cannot make Roles for globs or negations",
        ),
        (
            {"nats.tlsSecret.name": "tls", "nats.tlsSecret.certKey": "tls.crt"},
            "certKey and nats.tlsSecret.keyKey go together",
        ),
    ],
    ids=[
        "typo",
        "nested-typo",
        "range",
        "enum",
        "url",
        "env-not-string",
        "namespaced-empty",
        "globs",
        "tls-pair",
    ],
)
def test_bad_values_fail_with_a_clear_message(
    helm: Helm, values: dict[str, str], message: str
) -> None:
    rendered = helm.template(values)
    assert rendered.returncode != 0
    assert message in rendered.stderr, rendered.stderr


def test_deployment_is_hardened_and_probed(helm: Helm) -> None:
    # --set splits on commas: a list of servers is escaped.
    objects = helm.render({"nats.url": "nats://a:4222\\,nats://b:4222"})
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "command" not in container  # the image's entrypoint: jetstream-operator run
    assert container["args"] == ["--liveness=http://0.0.0.0:8080/healthz"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["ports"] == [
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # One operator without peering must never overlap with its replacement.
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    env = container_env(deployment)
    assert env["JETSTREAM_OPERATOR_NATS_URL"] == "nats://a:4222,nats://b:4222"
    assert env["JETSTREAM_OPERATOR_RESYNC_INTERVAL"] == "30"
    assert env["JETSTREAM_OPERATOR_READ_ONLY"] == "false"
    assert env["JETSTREAM_OPERATOR_ADVISORIES"] == "true"
    assert "JETSTREAM_OPERATOR_NAMESPACES" not in env
    assert env["JETSTREAM_OPERATOR_METRICS_PORT"] == "9090"
    assert "JETSTREAM_OPERATOR_PEERING" not in env
    assert not find(objects, "PodDisruptionBudget")
    assert not find(objects, "ServiceMonitor")


def test_scheduling_and_extras_reach_the_pod(helm: Helm) -> None:
    deployment = one(
        helm.render(
            {
                "nodeSelector.disk": "ssd",
                "tolerations[0].key": "dedicated",
                "tolerations[0].operator": "Exists",
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms[0].matchExpressions[0].key": "zone",
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms[0].matchExpressions[0].operator": "Exists",
                "priorityClassName": "system-cluster-critical",
                "extraEnv[0].name": "JETSTREAM_OPERATOR_RETRY_MAX_DELAY",
                "extraVolumes[0].name": "scratch",
                "extraVolumes[0].emptyDir.medium": "Memory",
                "extraVolumeMounts[0].name": "scratch",
                "extraVolumeMounts[0].mountPath": "/scratch",
            },
            "--set-string",
            "extraEnv[0].value=60",
        ),
        "Deployment",
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert "nodeAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert container_env(deployment)["JETSTREAM_OPERATOR_RETRY_MAX_DELAY"] == "60"
    assert {"name": "scratch", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "scratch", "mountPath": "/scratch"} in pod["containers"][0]["volumeMounts"]


def test_nats_secrets_are_mounted_and_named_in_env(helm: Helm) -> None:
    deployment = one(
        helm.render(
            {
                "nats.credentialsSecret.name": "nats-creds",
                "nats.tlsSecret.name": "nats-tls",
                "nats.tlsSecret.certKey": "tls.crt",
                "nats.tlsSecret.keyKey": "tls.key",
            }
        ),
        "Deployment",
    )
    env = container_env(deployment)
    assert env["JETSTREAM_OPERATOR_NATS_CREDS_FILE"] == (
        "/etc/jetstream-operator/nats-credentials/nats.creds"
    )
    assert env["JETSTREAM_OPERATOR_NATS_TLS_CA"] == "/etc/jetstream-operator/nats-tls/ca.crt"
    assert env["JETSTREAM_OPERATOR_NATS_TLS_CERT"] == "/etc/jetstream-operator/nats-tls/tls.crt"
    assert env["JETSTREAM_OPERATOR_NATS_TLS_KEY"] == "/etc/jetstream-operator/nats-tls/tls.key"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["nats-credentials"]["secret"]["secretName"] == "nats-creds"
    assert [item["key"] for item in volumes["nats-tls"]["secret"]["items"]] == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert all(m.get("readOnly") for m in mounts if m["name"].startswith("nats-"))


def test_replicas_mean_peering_a_pdb_and_rolling_updates(helm: Helm) -> None:
    objects = helm.render({"replicaCount": "2"})
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert container_env(deployment)["JETSTREAM_OPERATOR_PEERING"] == "jso-jetstream-operator"
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == (deployment["spec"]["selector"]["matchLabels"])
    peering = one(objects, "ClusterKopfPeering", "jso-jetstream-operator")
    assert peering["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    crds = {crd["metadata"]["name"] for crd in find(objects, "CustomResourceDefinition")}
    assert {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= crds
    rules = one(objects, "ClusterRole", "jso-jetstream-operator")["rules"]
    assert {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    } in rules
    # The operator peers through a ClusterKopfPeering also when restricted to namespaces.
    namespaced = helm.render({**NAMESPACED, "replicaCount": "2"})
    one(namespaced, "ClusterKopfPeering", "jso-jetstream-operator")
    assert {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    } in one(namespaced, "ClusterRole", "jso-jetstream-operator-discovery")["rules"]
    assert not find(
        helm.render({"replicaCount": "2", "peering.installCRDs": "false"}),
        "CustomResourceDefinition",
        "kopfpeerings.kopf.dev",
    )


def test_each_replica_gets_its_own_peering_priority(helm: Helm, tmp_path: Path) -> None:
    """kopf pauses all peers of equal priority; the pod command derives one from the pod name.

    The rendered command runs here under /bin/sh with a stand-in `jetstream-operator`.
    """
    container = one(helm.render({"replicaCount": "2", "operator.verbose": "true"}), "Deployment")[
        "spec"
    ]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c"]
    stand_in = tmp_path / "jetstream-operator"
    stand_in.write_text('#!/bin/sh\necho "$JETSTREAM_OPERATOR_PRIORITY $*"\n')
    stand_in.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    seen = {}
    for pod in ("jso-jetstream-operator-7d9f8-abcde", "jso-jetstream-operator-7d9f8-fghij"):
        ran = run([*container["command"], *container["args"]], env={"POD_NAME": pod, "PATH": path})
        assert ran.returncode == 0, ran.stderr
        priority, arguments = ran.stdout.strip().split(" ", 1)
        assert arguments == "run --liveness=http://0.0.0.0:8080/healthz --verbose"
        seen[pod] = int(priority)
    assert len(set(seen.values())) == 2
    fixed = run(
        [*container["command"], *container["args"]],
        env={"POD_NAME": "x", "PATH": path, "JETSTREAM_OPERATOR_PRIORITY": "7"},
    )
    assert fixed.stdout.startswith("7 ")


def test_every_operator_variable_is_an_operator_setting(helm: Helm) -> None:
    """Each JETSTREAM_OPERATOR_* the chart can set is a field of OperatorSettings (no typos)."""
    deployment = one(
        helm.render(
            {
                "replicaCount": "2",
                "watchNamespaces": "{a}",
                "selector.matchLabels.shard": "a",
                "nats.credentialsSecret.name": "creds",
                "nats.tlsSecret.name": "tls",
                "nats.tlsSecret.certKey": "tls.crt",
                "nats.tlsSecret.keyKey": "tls.key",
            }
        ),
        "Deployment",
    )
    names = {name for name in container_env(deployment) if name.startswith("JETSTREAM_")}
    prefix = OperatorSettings.model_config.get("env_prefix", "")
    fields = {prefix + field.upper() for field in OperatorSettings.model_fields}
    settings = {
        "NATS_URL", "NAMESPACES", "RESYNC_INTERVAL", "CONSUMER_RESYNC_INTERVAL", "READ_ONLY",
        "CONSUMER_IDLE_RESYNC_INTERVAL", "WORKERS", "KUBE_REQUESTS",
        "KUBE_REQUESTS_ADAPTIVE", "YIELD_TO_CREATIONS", "YIELD_TO_DELETIONS",
        "EVENTS_YIELD_TO_WRITES",
        "STATUS_INTERVAL", "STATUS_WRITES_PER_SECOND", "EVENTS",
        "ADVISORIES",
        "REQUIRE_CONNECTION_REF", "SELECTOR", "MANAGE_CONNECTIONS",
        "LOG_FORMAT", "NATS_CREDS_FILE", "NATS_TLS_CA",
        "NATS_TLS_CERT", "NATS_TLS_KEY", "METRICS_PORT", "PEERING", "PEERING_LIFETIME",
    }  # fmt: skip
    assert names == {f"JETSTREAM_OPERATOR_{name}" for name in settings}
    assert names <= fields, names - fields


def test_metrics_service_and_service_monitor(helm: Helm) -> None:
    objects = helm.render(
        {
            "metrics.enabled": "true",
            "metrics.port": "9102",
            "metrics.serviceMonitor.enabled": "true",
        }
    )
    deployment = one(objects, "Deployment")
    assert container_env(deployment)["JETSTREAM_OPERATOR_METRICS_PORT"] == "9102"
    service = one(objects, "Service", "jso-jetstream-operator-metrics")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9102, "targetPort": "metrics", "protocol": "TCP"}
    ]
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert selector["app.kubernetes.io/component"] == "metrics"
    assert not find(helm.render({"metrics.enabled": "true"}), "ServiceMonitor")


def test_names_fit_in_63_characters(helm: Helm) -> None:
    release = "r" * 53  # Helm's longest release name
    objects = helm.render(
        {**NAMESPACED, "replicaCount": "2", "metrics.enabled": "true"}, release=release
    )
    for obj in objects:
        if obj["kind"] != "CustomResourceDefinition":
            name = obj["metadata"]["name"]
            assert len(name) <= 63 and not name.endswith("-"), (obj["kind"], name)
    names = {obj["metadata"]["name"] for obj in objects}
    assert any(name.endswith("-discovery") for name in names)
    assert any(name.endswith("-metrics") for name in names)


def test_argocd_example_application_values_are_valid(helm: Helm, tmp_path: Path) -> None:
    application = yaml.safe_load((ROOT / "examples/argocd/application-operator.yaml").read_text())
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(application["spec"]["source"]["helm"]["valuesObject"]))
    rendered = helm.template(None, "--values", str(values))
    assert rendered.returncode == 0, rendered.stderr


def test_chart_readme_values_are_generated_from_values_and_schema() -> None:
    """The values tables are chartdocs' output: every value of values.yaml with its default and
    its schema description, so a value added, renamed or given a new default shows up here."""
    readme = (CHART / "README.md").read_text()
    assert readme == rewritten_readme(readme, values_markdown()), (
        "charts/jetstream-operator/README.md's values tables differ from values.yaml and "
        "values.schema.json: python -m jetstream_devtools.chartdocs --write"
    )


def test_a_value_without_a_description_or_a_section_is_refused(tmp_path: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    values["operator"]["newValue"] = 1
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    (tmp_path / "values.schema.json").write_text(json.dumps(schema))
    with pytest.raises(UndocumentedValue, match=r"operator\.newValue has no description"):
        values_markdown(tmp_path)
    del values["operator"]["newValue"]
    values["newValue"] = 1
    schema["properties"]["newValue"] = {"type": "integer", "description": "A new value."}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    (tmp_path / "values.schema.json").write_text(json.dumps(schema))
    with pytest.raises(UndocumentedValue, match=r"no README section: \['newValue'\]"):
        values_markdown(tmp_path)


def _documents(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


@pytest.mark.parametrize(
    ("values", "extra"),
    [
        ({"metrics.enabled": "true", "networkPolicy.enabled": "true"}, []),
        # HA without hooks: the peering object needs its CRD to exist first, which a dry run
        # cannot give it (the install test creates it for real).
        ({**NAMESPACED, "replicaCount": "2", "crds.enabled": "false"}, ["--no-hooks"]),
    ],
    ids=["cluster-wide", "namespaced"],
)
def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm,
    kubectl: Path,
    kubeconfig: Path,
    values: dict[str, str],
    extra: list[str],
) -> None:
    """The real API server (admission, schema, RBAC escalation checks) accepts every object."""
    for name in ("jso-dry-run", *WATCHED):
        ensure_namespace(kubectl, kubeconfig, name)
    rendered = helm.template(values, *extra, namespace="jso-dry-run", release="jso-dry")
    assert rendered.returncode == 0, rendered.stderr
    applied = run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-"],
        stdin=rendered.stdout,
    )
    assert applied.returncode == 0, applied.stderr
    expected = len(_documents(rendered.stdout))
    assert applied.stdout.count("(server dry run)") == expected, applied.stdout


def test_chart_peering_crds_are_the_ones_tests_and_dev_install(helm: Helm) -> None:
    """kopf's peering CRDs are written twice (the chart's template and k8s/peering.py for tests
    and `dev up`); this keeps the two the same apart from the chart's labels."""
    rendered = find(helm.render({"replicaCount": "2"}), "CustomResourceDefinition")
    chart = {
        crd["metadata"]["name"]: {**crd, "metadata": {"name": crd["metadata"]["name"]}}
        for crd in rendered
        if crd["spec"]["group"] == PEERING_GROUP
    }
    assert chart == {crd["metadata"]["name"]: crd for crd in peering_crds()}


def test_chart_needs_kubernetes_1_30_for_the_crds_admission_policies(helm: Helm) -> None:
    policies = "\n".join(path.read_text() for path in policy_paths(CHART_CRDS))
    assert "apiVersion: admissionregistration.k8s.io/v1\n" in policies  # the reason for the floor
    old = helm.template(None, "--kube-version", "v1.29.15")
    assert old.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in old.stderr
    assert helm.template(None, "--kube-version", "v1.30.0").returncode == 0


def test_the_matrix_tests_the_oldest_kubernetes_the_chart_accepts() -> None:
    """`make test-matrix` runs on OLDEST_KUBERNETES_VERSION: it must be the chart's floor, so a
    raised floor moves the tested version with it (and the other way round)."""
    floor = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    major, minor = OLDEST_KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    assert floor == f">={major}.{minor}.0-0"
    table = (ROOT / "docs" / "versioning.md").read_text()
    assert f"{OLDEST_KUBERNETES_VERSION.lstrip('v')} (kube-apiserver" in table


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert match, f"memory {quantity!r} is not in Ki/Mi/Gi"
    return int(match[1]) * units[match[2]]


def test_memory_request_and_limit_fit_the_measured_rss(helm: Helm) -> None:
    """The defaults follow docs/benchmarks.md: the request covers the RSS up to 2,000
    resources, the limit the largest measured size with 20 % headroom (an OOM kill restarts
    the operator, which then lists everything again)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    measured = {
        int(count.replace(",", "")): int(mib)
        for mib, count in re.findall(r"(\d+) MiB at \**([\d,]+)", text)
    }
    assert {200, 2000, 10000} <= set(measured), measured
    resources = one(helm.render(), "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    assert _mebibytes(resources["requests"]["memory"]) >= measured[2000]
    assert _mebibytes(resources["limits"]["memory"]) >= 1.2 * max(measured.values())
