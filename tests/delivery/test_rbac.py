"""The chart's RBAC is enough for the operator and no more: the operator runs with the chart's
ServiceAccount token (cluster-wide and namespaced), and what the chart does not grant is refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kopf._cogs.clients.errors import APIForbiddenError
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.k8s.client import ApiError
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.integration.helpers import Resources, eventually, is_ready

from .conftest import Release, ensure_namespace, upgrade_release
from .helpers import (
    CHART,
    GROUP,
    ApiServer,
    Helm,
    as_dict,
    can_i,
    first_run_log,
    new_client,
    operator_as,
    service_account_kubeconfig,
    wait_until_allowed,
)
from .lua import argocd_health

pytestmark = pytest.mark.integration

NAMESPACED_RELEASE = "jso-ns"
NAMESPACED_RELEASE_NAMESPACE = "jso-ns-system"
WATCHED = "jso-ns-watched"
UNWATCHED = "jso-ns-unwatched"
# How a refusal by RBAC reads in the operator's log: kopf's error class, our client's
# ApiError ("PATCH ...: 403 Forbidden: ..."), the API server's own words, the Status code. Not a
# bare 403 or "forbidden": resource versions ('403'), timestamps (",403]") and NATS errors
# ("subject delete markers forbidden on mirrors") in the log of earlier tests' resources.
PERMISSION_ERROR = re.compile(
    r"APIForbiddenError|\b403 Forbidden\b|forbidden: User|['\"]code['\"]:\s*403\b"
)


# Not passed on to the local operator: the test's NATS is reached directly, and the metrics
# port would bind all interfaces of this machine.
LOCAL_ONLY = {"JETSTREAM_OPERATOR_NATS_URL", "JETSTREAM_OPERATOR_METRICS_PORT"}


def _chart_nats_url(api: client.ApiClient, release: Release) -> str:
    apps = client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment(release.fullname, release.namespace)
    container = as_dict(api, deployment)["spec"]["template"]["spec"]["containers"][0]
    return str(
        next(e["value"] for e in container["env"] if e["name"] == "JETSTREAM_OPERATOR_NATS_URL")
    )


def _chart_env(api: client.ApiClient, release: str, namespace: str) -> dict[str, str]:
    """The operator settings the installed Deployment gives the container (but LOCAL_ONLY and
    values from the downward API)."""
    deployment = as_dict(api, client.AppsV1Api(api).read_namespaced_deployment(release, namespace))
    return {
        item["name"]: item["value"]
        for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in item and item["name"] not in LOCAL_ONLY
    }


async def _stream_lifecycle(resources: Resources, nc: Client, name: str) -> dict[str, Any]:
    """Create a Stream, see it Ready and in NATS, delete it and see it gone: the operator's
    whole cycle (watch, patch, status, events, finalizer). Returns the Ready object."""
    resource = name.lower().replace("_", "-")
    resources.create(
        "streams",
        {
            "kind": "Stream",
            "metadata": {"name": resource},
            "spec": {"name": name, "subjects": [f"{resource}.>"], "storage": "memory"},
        },
    )

    async def ready() -> dict[str, Any] | None:
        found = resources.get("streams", resource)
        return found if is_ready(found) else None

    live = await eventually(ready, timeout=30)
    assert live is not None
    jetstream = JetStreamApi(nc)
    assert await jetstream.stream_info(name) is not None
    resources.delete("streams", resource)

    async def deleted() -> bool:
        return resources.get("streams", resource) is None and (
            await jetstream.stream_info(name) is None
        )

    await eventually(deleted, timeout=30)
    return live


@pytest.mark.parametrize("replicas", [1, 2], ids=["standalone", "active-standby"])
async def test_operator_works_with_the_cluster_wide_service_account(
    replicas: int,
    cluster_release: Release,
    helm: Helm,
    kubeconfig: Path,
    operator_process: OperatorProcess,
    api_client: client.ApiClient,
    control_plane: ApiServer,
    resources: Resources,
    nc: Client,
    tmp_path: Path,
) -> None:
    """With 2 replicas the chart adds kopf peering (and its RBAC); one peer must act alone."""
    nats_url = _chart_nats_url(api_client, cluster_release)
    if replicas > 1:
        upgrade_release(helm, cluster_release, kubeconfig, "replicaCount=2", f"nats.url={nats_url}")
    try:
        sa_kubeconfig = service_account_kubeconfig(
            api_client,
            control_plane,
            cluster_release.namespace,
            cluster_release.service_account,
            tmp_path / "kubeconfig",
        )
        checks = [("patch", "streams", GROUP, "any"), ("watch", "customresourcedefinitions",
                  "apiextensions.k8s.io", None)]  # fmt: skip
        if replicas > 1:
            checks.append(("patch", "clusterkopfpeerings", "kopf.dev", None))
        wait_until_allowed(new_client(sa_kubeconfig), checks)
        env = _chart_env(api_client, cluster_release.fullname, cluster_release.namespace)
        if replicas > 1:
            env["JETSTREAM_OPERATOR_PRIORITY"] = "1"  # what the pod's command derives
        offset = operator_process.log_file.stat().st_size
        with operator_as(operator_process, sa_kubeconfig, **env):
            live = await _stream_lifecycle(resources, nc, f"RBAC_CLUSTER_{replicas}")
    finally:
        if replicas > 1:
            upgrade_release(helm, cluster_release, kubeconfig, f"nats.url={nats_url}")
    # The Argo CD health check agrees on the live object.
    assert argocd_health(live)["status"] == "Healthy"
    log = first_run_log(operator_process.log_file, offset)
    assert not [line for line in log.splitlines() if PERMISSION_ERROR.search(line)]
    if replicas > 1:
        assert f"Keep-alive in '{cluster_release.fullname}' cluster-wide" in log


@pytest.fixture
def namespaced_release(
    cluster_release: Release, helm: Helm, kubectl: Path, kubeconfig: Path
) -> Iterator[Release]:
    """A second install in namespaced mode, watching one namespace; CRDs stay the first's."""
    for name in (WATCHED, UNWATCHED):
        ensure_namespace(kubectl, kubeconfig, name)
    installed = helm(
        "install",
        NAMESPACED_RELEASE,
        CHART,
        "--namespace",
        NAMESPACED_RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        "rbac.scope=namespaced",
        "--set",
        f"watchNamespaces={{{WATCHED}}}",
        "--set",
        "crds.enabled=false",
        kubeconfig=kubeconfig,
    )
    assert installed.returncode == 0, installed.stderr
    fullname = f"{NAMESPACED_RELEASE}-jetstream-operator"
    try:
        yield Release(NAMESPACED_RELEASE, NAMESPACED_RELEASE_NAMESPACE, fullname, fullname)
    finally:
        helm(
            "uninstall",
            NAMESPACED_RELEASE,
            "--namespace",
            NAMESPACED_RELEASE_NAMESPACE,
            kubeconfig=kubeconfig,
        )


async def test_operator_works_with_the_namespaced_service_account(
    namespaced_release: Release,
    operator_process: OperatorProcess,
    api_client: client.ApiClient,
    control_plane: ApiServer,
    nc: Client,
    tmp_path: Path,
) -> None:
    kubeconfig = service_account_kubeconfig(
        api_client,
        control_plane,
        namespaced_release.namespace,
        namespaced_release.service_account,
        tmp_path / "kubeconfig",
    )
    wait_until_allowed(
        new_client(kubeconfig),
        [("patch", "streams", GROUP, WATCHED), ("list", "namespaces", "", None)],
    )
    env = _chart_env(api_client, namespaced_release.fullname, namespaced_release.namespace)
    assert env["JETSTREAM_OPERATOR_NAMESPACES"] == WATCHED
    offset = operator_process.log_file.stat().st_size
    watched = Resources(api_client, WATCHED)
    with operator_as(operator_process, kubeconfig, **env):
        await _stream_lifecycle(watched, nc, "RBAC_NAMESPACED")
    log = first_run_log(operator_process.log_file, offset)
    assert not [line for line in log.splitlines() if PERMISSION_ERROR.search(line)]
    assert f"watch-stream for streams.v1alpha1.{GROUP} in '{WATCHED}'" in log
    for plural in ("streams", "consumers", "natsconnections", "keyvalues", "objectstores"):
        assert f"for {plural}.v1alpha1.{GROUP} cluster-wide" not in log
    # The one cluster-scoped kind is watched cluster-wide, as it can only be.
    assert f"clusternatsconnections.v1alpha1.{GROUP} cluster-wide" in log

    # The namespaced service account reaches nothing outside its namespace.
    as_operator = new_client(kubeconfig)
    assert can_i(as_operator, "patch", "streams", group=GROUP, namespace=WATCHED)
    assert can_i(as_operator, "get", "secrets", namespace=WATCHED)
    assert can_i(as_operator, "watch", "customresourcedefinitions", group="apiextensions.k8s.io")
    for namespace in (UNWATCHED, namespaced_release.namespace):
        assert not can_i(as_operator, "list", "streams", group=GROUP, namespace=namespace)
        assert not can_i(as_operator, "create", "events", namespace=namespace)
    assert not can_i(as_operator, "get", "secrets", namespace=UNWATCHED)
    # Its own namespace's Secrets are those of ClusterNatsConnections: get and patch only.
    assert can_i(as_operator, "get", "secrets", namespace=namespaced_release.namespace)
    assert not can_i(as_operator, "list", "secrets", namespace=namespaced_release.namespace)
    assert not can_i(as_operator, "list", "streams", group=GROUP)  # cluster-wide
    assert can_i(as_operator, "watch", "clusternatsconnections", group=GROUP)


def test_the_log_check_tells_a_refusal_from_look_alikes() -> None:
    """The check above must still see the refusals both clients of the operator log."""
    denial = (
        'streams.jetstream-operator.io "s" is forbidden: User '
        '"system:serviceaccount:jso-ns-system:jso-ns" cannot patch resource "streams"'
    )
    status = {"kind": "Status", "reason": "Forbidden", "message": denial, "code": 403}
    refusals = [
        f"[ERROR ] {ApiError('PATCH', '/apis/x/streams/s', 403, 'Forbidden', denial)}",
        f"[ERROR ] Request failed: {APIForbiddenError(status, status=403, headers={})!r}",  # type: ignore[arg-type]
    ]
    look_alikes = [
        "[2026-11-26 07:25:22,403] kopf.objects [DEBUG ] ...",
        "Resuming is in progress: {'metadata': {'resourceVersion': '403'}}",
        "NATS refused the config: subject delete markers forbidden on mirrors (error 10052)",
    ]
    assert all(PERMISSION_ERROR.search(line) for line in refusals), refusals
    assert not any(PERMISSION_ERROR.search(line) for line in look_alikes)


def _rule_set(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def test_cluster_wide_rbac_is_exactly_what_the_operator_needs(
    cluster_release: Release,
    api_client: client.ApiClient,
    control_plane: ApiServer,
    tmp_path: Path,
) -> None:
    kinds = (
        "streams",
        "consumers",
        "natsconnections",
        "keyvalues",
        "objectstores",
        "clusternatsconnections",
        "natsaccounts",
        "natsusers",
    )
    expected = (
        {
            (GROUP, kind, verb)
            for kind in kinds
            for verb in ("get", "list", "watch", "patch", "update")
        }
        | {(GROUP, f"{kind}/status", verb) for kind in kinds for verb in ("get", "patch", "update")}
        | {("", "events", "create"), ("", "events", "patch")}
        | {("", "secrets", "get"), ("", "secrets", "patch"), ("", "secrets", "create")}
        | {("", "namespaces", "list"), ("", "namespaces", "watch")}
        | {
            ("apiextensions.k8s.io", "customresourcedefinitions", verb)
            for verb in ("list", "watch")
        }
    )
    role = client.RbacAuthorizationV1Api(api_client).read_cluster_role(cluster_release.fullname)
    assert _rule_set(as_dict(api_client, role)) == expected

    kubeconfig = service_account_kubeconfig(
        api_client,
        control_plane,
        cluster_release.namespace,
        cluster_release.service_account,
        tmp_path / "kubeconfig",
    )
    as_operator = new_client(kubeconfig)
    wait_until_allowed(as_operator, [("patch", "streams", GROUP, "anywhere")])
    assert can_i(
        as_operator, "update", "consumers", group=GROUP, subresource="status", namespace="anywhere"
    )
    refused = [
        ("delete", "secrets", ""),
        ("list", "secrets", ""),
        ("create", "deployments", "apps"),
        ("create", "pods", ""),
        ("get", "configmaps", ""),
        ("create", "streams", GROUP),
        ("delete", "streams", GROUP),
        ("delete", "customresourcedefinitions", "apiextensions.k8s.io"),
        ("patch", "customresourcedefinitions", "apiextensions.k8s.io"),
        ("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
        ("patch", "clusterkopfpeerings", "kopf.dev"),
    ]
    for verb, resource, group in refused:
        assert not can_i(as_operator, verb, resource, group=group, namespace="anywhere"), (
            verb,
            resource,
        )
    _only_its_finalizer_on_secrets(api_client, as_operator, cluster_release.namespace)


def _only_its_finalizer_on_secrets(
    admin: client.ApiClient, as_operator: client.ApiClient, namespace: str
) -> None:
    """The chart's Secret policy: `patch` on Secrets, which RBAC grants for the finalizer,
    changes nothing else, whatever the operator's ServiceAccount sends."""
    name = "held-credentials"
    client.CoreV1Api(admin).create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data={"token": "t"}),
    )
    core = client.CoreV1Api(as_operator)
    deadline = time.monotonic() + 30  # the policy applies once the API server loaded it
    while True:
        try:
            core.patch_namespaced_secret(name, namespace, {"stringData": {"token": "stolen"}})
        except client.ApiException as error:
            assert error.status == 403, error
            assert "may only add or remove its own finalizer" in str(error.body)
            break
        assert time.monotonic() < deadline, "the operator rewrote a Secret's data"
        client.CoreV1Api(admin).patch_namespaced_secret(
            name, namespace, {"stringData": {"token": "t"}}
        )
        time.sleep(0.5)
    for change in ({"metadata": {"labels": {"x": "y"}}}, {"metadata": {"finalizers": ["other/x"]}}):
        try:
            core.patch_namespaced_secret(name, namespace, change)
            raise AssertionError(f"admitted: {change}")
        except client.ApiException as error:
            assert error.status == 403, error
    held = {"metadata": {"finalizers": ["jetstream-operator.io/in-use"]}}
    core.patch_namespaced_secret(name, namespace, held)
    core.patch_namespaced_secret(name, namespace, {"metadata": {"finalizers": None}})
    secret = client.CoreV1Api(admin).read_namespaced_secret(name, namespace)
    assert secret.data == {"token": "dA=="}
    assert secret.metadata is not None and not secret.metadata.finalizers
    # Labelling someone's Secret as one of its own does not make it the operator's.
    own_labels = {
        "app.kubernetes.io/managed-by": "jetstream-operator",
        "jetstream-operator.io/natsuser": "app",
    }
    try:
        core.patch_namespaced_secret(name, namespace, {"metadata": {"labels": own_labels}})
        raise AssertionError("the operator took over a Secret by labelling it")
    except client.ApiException as error:
        assert error.status == 403, error
    client.CoreV1Api(admin).delete_namespaced_secret(name, namespace)
    _writes_only_the_secrets_it_makes(core, namespace, own_labels)


def _writes_only_the_secrets_it_makes(
    core: client.CoreV1Api, namespace: str, own_labels: dict[str, str]
) -> None:
    """A NatsUser's creds file, labelled as the operator's from its creation, may be created
    and rewritten; a Secret without those labels may not be created."""
    try:
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(metadata=client.V1ObjectMeta(name="plain"), string_data={"a": "b"}),
        )
        raise AssertionError("the operator created a Secret not labelled as its own")
    except client.ApiException as error:
        assert error.status == 403, error
    made = client.V1Secret(
        metadata=client.V1ObjectMeta(name="app-nats-creds", labels=own_labels),
        string_data={"user.creds": "one"},
    )
    core.create_namespaced_secret(namespace, made)
    core.patch_namespaced_secret("app-nats-creds", namespace, {"stringData": {"user.creds": "two"}})
    without = {"metadata": {"labels": {"jetstream-operator.io/natsuser": None}}}
    try:
        core.patch_namespaced_secret("app-nats-creds", namespace, without)
        raise AssertionError("the operator unlabelled its Secret")
    except client.ApiException as error:
        assert error.status == 403, error


def _aggregation_runs(api: client.ApiClient) -> bool:
    """Whether kube-controller-manager's clusterrole-aggregation-controller fills the built-in
    roles: the API server creates `view` with an aggregationRule and no rules of its own."""
    rbac = client.RbacAuthorizationV1Api(api)
    deadline = time.monotonic() + 10
    while not rbac.read_cluster_role("view").rules:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _impersonating(kubeconfig: Path, user: str) -> client.ApiClient:
    """An admin client that acts as `user` (Impersonate-User), so the real authorizer decides."""
    api = new_client(kubeconfig)
    api.set_default_header("Impersonate-User", user)  # type: ignore[no-untyped-call]  # untyped in kubernetes
    return api


def _bind(api: client.ApiClient, namespace: str, user: str, cluster_role: str) -> None:
    binding = client.V1RoleBinding(
        api_version="rbac.authorization.k8s.io/v1",
        kind="RoleBinding",
        metadata=client.V1ObjectMeta(name=f"{user}-{cluster_role}"),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=cluster_role
        ),
        subjects=[
            client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=user)
        ],
    )
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, binding)


def _stream(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Stream",
        "metadata": {"name": name},
        "spec": {"name": name.upper().replace("-", "_"), "subjects": [f"{name}.>"]},
    }


def _user_can(api: client.ApiClient, namespace: str, name: str) -> tuple[bool, bool]:
    """(may list Streams, may create one), tried for real as the impersonated user."""
    custom = client.CustomObjectsApi(api)
    allowed = []
    attempts: tuple[Callable[[], object], ...] = (
        lambda: custom.list_namespaced_custom_object(GROUP, "v1alpha1", namespace, "streams"),
        lambda: custom.create_namespaced_custom_object(
            GROUP, "v1alpha1", namespace, "streams", _stream(name), dry_run="All"
        ),
    )
    for attempt in attempts:
        try:
            attempt()
            allowed.append(True)
        except client.ApiException as error:
            assert error.status == 403, error
            allowed.append(False)
    return allowed[0], allowed[1]


@pytest.mark.parametrize("through", ["chart-roles", "built-in-roles"])
def test_users_bound_to_view_read_and_to_edit_manage_our_kinds(
    through: str,
    cluster_release: Release,
    api_client: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
) -> None:
    """The chart's aggregated roles, bound directly and (what users do) through the built-in
    view/edit/admin roles they aggregate into."""
    if through == "built-in-roles" and not _aggregation_runs(api_client):
        pytest.skip(
            "the built-in `view` ClusterRole has no rules: kube-controller-manager's "
            "clusterrole-aggregation-controller, which fills view/edit/admin, does not run in "
            "this control plane (jetstream_devtools/controlplane.py DEFAULT_CONTROLLERS)"
        )
    prefix = cluster_release.fullname
    roles = {
        "viewer": f"{prefix}-view" if through == "chart-roles" else "view",
        "editor": f"{prefix}-edit" if through == "chart-roles" else "edit",
        "admin": f"{prefix}-edit" if through == "chart-roles" else "admin",
    }
    if through == "chart-roles":  # edit needs view's rules too, as aggregation gives them
        _bind(api_client, namespace, "editor", f"{prefix}-view")
        _bind(api_client, namespace, "admin", f"{prefix}-view")
    for user, role in roles.items():
        _bind(api_client, namespace, user, role)
    expected = {"viewer": (True, False), "editor": (True, True), "admin": (True, True)}

    deadline = time.monotonic() + 30  # RBAC (and aggregation) reach the authorizer by watch
    while True:
        seen = {
            user: _user_can(_impersonating(kubeconfig, user), namespace, f"rbac-{user}")
            for user in roles
        }
        if seen == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert seen == expected
    # Outside the bound namespace nothing is granted.
    assert _user_can(_impersonating(kubeconfig, "editor"), "default", "rbac-x") == (False, False)
