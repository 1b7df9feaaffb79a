"""Argo CD itself (application-controller + repo-server, built from its Go module) syncing
Streams and Consumers from a Git repository, with the health check installed in argocd-cm as
docs/argocd/README.md tells users to. The operator runs from the checkout.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.argocd import ArgoCD
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.delivery.helpers import CRDS, policy_paths, spec_schema
from tests.integration.helpers import Resources, eventually, json_body

from .conftest import Applications, GitRepo

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

GROUP = "jetstream-operator.io"
WAVE = "argocd.argoproj.io/sync-wave"
# Reconciling reasons for NATS away: no connection at all, or one that stopped answering.
OUTAGE_REASONS = ("Unreachable: ", "NatsUnavailable: ")


def nats_name(namespace: str, suffix: str) -> str:
    return f"{namespace}_{suffix}".upper().replace("-", "_")


def stream(name: str, nats: str, wave: int = 1, **spec: Any) -> dict[str, Any]:
    """A Stream as a user writes it: the defaults (storage, retention, ...) left out."""
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Stream",
        "metadata": {"name": name, "annotations": {WAVE: str(wave)}},
        "spec": {"name": nats, "subjects": [f"{nats.lower()}.>"], **spec},
    }


def consumer(name: str, stream_ref: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Consumer",
        "metadata": {"name": name, "annotations": {WAVE: "2"}},
        "spec": {"durableName": name, "streamRef": stream_ref, "ackPolicy": "explicit"},
    }


def application(
    argocd: ArgoCD, repo: GitRepo, path: str, namespace: str, *sync_options: str
) -> dict[str, Any]:
    """An automated Application for one directory, deploying into the registered cluster."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": namespace[:53], "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo.url, "targetRevision": "main", "path": path},
            "destination": {"server": argocd.apiserver_url, "namespace": namespace},
            "syncPolicy": {
                "automated": {"prune": True, "selfHeal": True},
                "syncOptions": list(sync_options),
                "retry": {
                    "limit": 10,
                    "refresh": True,
                    "backoff": {"duration": "2s", "factor": 2, "maxDuration": "20s"},
                },
            },
        },
    }


def synced(revision: str, health: str = "Healthy") -> Any:
    def check(app: dict[str, Any]) -> bool:
        """Synced at the revision with this health, and the sync operation finished: the sync
        status can read Synced while the operation that got there is still being recorded."""
        status = app.get("status", {})
        return (
            status.get("sync", {}).get("status") == "Synced"
            and status.get("sync", {}).get("revision") == revision
            and status.get("health", {}).get("status") == health
            and bool(status.get("operationState", {}).get("finishedAt"))
        )

    return check


def health_of(app: dict[str, Any], kind: str, name: str) -> dict[str, str]:
    """The resource's health in the Application's status; empty while it is not listed."""
    for resource in app.get("status", {}).get("resources", []):
        if resource["kind"] == kind and resource["name"] == name:
            return dict(resource.get("health", {}))
    return {}


def served_defaults(api: client.ApiClient, plural: str) -> set[str]:
    """The spec fields the served CRD gives a default: what the API server adds to manifests."""
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{plural}.{GROUP}")
    schema = spec_schema(crd)
    return {key for key, field in (schema.properties or {}).items() if field.default is not None}


def compared_again_without_drift(applications: Applications, app_name: str) -> dict[str, Any]:
    """Three refreshes, each waited for until Argo CD compared again: every time the
    Application and each of its resources are still Synced. Returns the last state."""
    app: dict[str, Any] = {}
    for _ in range(3):
        before = applications.get(app_name)["status"]["reconciledAt"]
        time.sleep(2)  # reconciledAt has whole seconds
        applications.refresh(app_name)

        def compared(app: dict[str, Any], before: str = before) -> bool:
            return bool(app["status"].get("reconciledAt", "") > before)

        app = applications.wait(app_name, compared, "compared again")
        assert app["status"]["sync"]["status"] == "Synced", app["status"]
        assert {r["status"] for r in app["status"]["resources"]} == {"Synced"}
    return app


def test_synced_and_healthy_then_no_churn_from_defaults_or_status(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    resources: Resources,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    path = f"apps/{namespace}"
    name = nats_name(namespace, "orders")
    git_repo.write(f"{path}/stream.yaml", stream("orders", name))
    git_repo.write(f"{path}/consumer.yaml", consumer("worker", "orders"))
    revision = git_repo.commit("orders stream and consumer")
    app_name = namespace[:53]
    applications.create(application(argocd, git_repo, path, namespace))

    app = applications.wait(app_name, synced(revision), "Synced and Healthy", timeout=180)
    stream_health = health_of(app, "Stream", "orders")
    assert stream_health["status"] == "Healthy"
    assert f"stream {name} matches the spec" in stream_health["message"]
    assert health_of(app, "Consumer", "worker")["status"] == "Healthy"

    # The API server filled in defaults the manifest leaves out, and the operator keeps writing
    # status (resync every 2 s here); neither may look like drift.
    live = resources.get("streams", "orders")
    assert live is not None
    defaulted = set(live["spec"]) - set(stream("orders", name)["spec"])
    assert defaulted & served_defaults(api_client, "streams"), live["spec"]
    history = len(app["status"]["history"])
    finished = app["status"]["operationState"]["finishedAt"]
    app = compared_again_without_drift(applications, app_name)
    assert len(app["status"]["history"]) == history
    assert app["status"]["operationState"]["finishedAt"] == finished


@pytest.mark.local_servers
def test_progressing_while_nats_is_down_and_healthy_when_it_returns(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    namespace: str,
    nats_server: Any,
) -> None:
    """A stream synced while NATS is down waits (Reconciling, NatsUnavailable): Progressing,
    not Degraded, and Healthy once NATS is back, without anyone touching the Application.

    A stream that was Ready before the outage keeps its last status while NATS is down: the
    operator postpones its drift checks and writes nothing, so Argo CD stays Healthy for it.
    """
    path = f"apps/{namespace}"
    git_repo.write(f"{path}/before.yaml", stream("before", nats_name(namespace, "before")))
    revision = git_repo.commit("a stream")
    app_name = namespace[:53]
    applications.create(application(argocd, git_repo, path, namespace))
    applications.wait(app_name, synced(revision), "Synced and Healthy", timeout=180)

    nats_server.stop()
    try:
        git_repo.write(f"{path}/during.yaml", stream("during", nats_name(namespace, "during")))
        revision = git_repo.commit("a stream while NATS is down")
        applications.refresh(app_name)

        def reported(app: dict[str, Any]) -> bool:
            """Argo CD shows what the operator wrote (not only that it wrote nothing yet)."""
            message = health_of(app, "Stream", "during").get("message", "")
            return synced(revision, "Progressing")(app) and message.startswith(OUTAGE_REASONS)

        app = applications.wait(app_name, reported, "Progressing without NATS", timeout=90)
        health = health_of(app, "Stream", "during")
        assert health["status"] == "Progressing", health
        assert "retrying" in health["message"], health
    finally:
        nats_server.start()
    applications.wait(app_name, synced(revision), "Healthy again", timeout=120)


async def test_degraded_for_a_stalled_stream(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    namespace: str,
    nc: Client,
) -> None:
    """A stream of the same name that the operator did not create: Conflict, Stalled."""
    name = nats_name(namespace, "legacy")
    await nc.jetstream().add_stream(name=name, subjects=[f"{name.lower()}.other.>"])
    path = f"apps/{namespace}"
    git_repo.write(f"{path}/stream.yaml", stream("legacy", name))
    revision = git_repo.commit("a stream that exists already")
    app_name = namespace[:53]
    applications.create(application(argocd, git_repo, path, namespace))
    app = applications.wait(app_name, synced(revision, "Degraded"), "Degraded", timeout=180)
    health = health_of(app, "Stream", "legacy")
    assert health["status"] == "Degraded"
    assert health["message"].startswith("Conflict: "), health


async def test_pruned_streams_follow_their_deletion_policy(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    resources: Resources,
    namespace: str,
    nc: Client,
) -> None:
    path = f"apps/{namespace}"
    deleted, retained = nats_name(namespace, "deleted"), nats_name(namespace, "retained")
    git_repo.write(f"{path}/deleted.yaml", stream("deleted", deleted, deletionPolicy="Delete"))
    git_repo.write(f"{path}/retained.yaml", stream("retained", retained, deletionPolicy="Retain"))
    # Something that stays, so the directory is never empty.
    git_repo.write(
        f"{path}/config.yaml",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}, "data": {}},
    )
    revision = git_repo.commit("two streams")
    app_name = namespace[:53]
    # Foreground deletion (Argo CD's default) is completed by kube-controller-manager's garbage
    # collector; background does not depend on it, and the finalizer runs the same either way.
    applications.create(
        application(argocd, git_repo, path, namespace, "PrunePropagationPolicy=background")
    )
    applications.wait(app_name, synced(revision), "Synced and Healthy", timeout=180)
    jetstream = JetStreamApi(nc)
    assert await jetstream.stream_info(deleted) is not None
    assert await jetstream.stream_info(retained) is not None

    git_repo.remove(f"{path}/deleted.yaml")
    git_repo.remove(f"{path}/retained.yaml")
    pruned = git_repo.commit("remove both streams")
    applications.refresh(app_name)
    applications.wait(app_name, synced(pruned), "pruned and Synced", timeout=120)

    async def gone() -> bool:
        return all(resources.get("streams", n) is None for n in ("deleted", "retained"))

    await eventually(gone, timeout=60)
    assert await jetstream.stream_info(deleted) is None
    assert await jetstream.stream_info(retained) is not None


@pytest.fixture
def release_policies_removed(api_client: client.ApiClient, namespace: str) -> Iterator[None]:
    """Deleting an Application leaves what it applied. The chart's finalizer policy is
    cluster-wide, so it must not outlive this test: every later test would get it."""
    yield
    admission = client.AdmissionregistrationV1beta1Api(api_client)
    selector = f"app.kubernetes.io/instance={namespace[:53]}"
    admission.delete_collection_mutating_admission_policy_binding(label_selector=selector)
    admission.delete_collection_mutating_admission_policy(label_selector=selector)


@pytest.mark.usefixtures("release_policies_removed")
def test_the_chart_with_peering_as_a_plain_manifest(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    api_client: client.ApiClient,
    namespace: str,
    nats_server: Any,
) -> None:
    """The chart from Git, rendered by Argo CD with `helm template` (no `lookup`), with two
    replicas and peering.helmHook=false: the ClusterKopfPeering is applied once, after its CRD,
    and a second sync leaves it alone. No kubelet runs here, so the Deployment itself stays
    Progressing; what is checked is what Argo CD applies."""
    app_name = namespace[:53]
    body = application(argocd, git_repo, "charts/jetstream-operator", namespace)
    body["spec"]["source"]["helm"] = {
        "valuesObject": {
            "replicaCount": 2,
            "peering": {"helmHook": False},
            "crds": {"enabled": False},  # the suite's CRDs; the Application must not own them
            "nats": {"url": nats_server.url, "namespaceSelector": {}},
        }
    }
    revision = git_repo.git("rev-parse", "HEAD")
    applications.create(body)

    def synced_any_health(app: dict[str, Any]) -> bool:
        """Synced, the last operation done, and the ClusterKopfPeering among the resources it
        compares (Argo CD leaves hooks out of that list)."""
        status = app.get("status", {})
        return (
            status.get("sync", {}).get("status") == "Synced"
            and status.get("operationState", {}).get("phase") == "Succeeded"
            and any(r["kind"] == "ClusterKopfPeering" for r in status.get("resources", []))
        )

    app = applications.wait(app_name, synced_any_health, "Synced", timeout=180)
    assert app["status"]["sync"]["revision"] == revision
    managed = app["status"]["resources"]
    (peering,) = [r for r in managed if r["kind"] == "ClusterKopfPeering"]
    assert peering["status"] == "Synced" and not peering.get("hook"), peering
    roles = {r["name"] for r in managed if r["kind"] == "ClusterRole"}
    assert {name for name in roles if name.endswith(("-view", "-edit"))}, roles
    # Argo CD gives `helm template` the cluster's kinds, so the chart finds the policy's API.
    policies = [r for r in managed if r["kind"].startswith("MutatingAdmissionPolicy")]
    assert sorted(r["kind"] for r in policies) == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ], managed
    assert {r["version"] for r in policies} == {"v1beta1"}, policies
    peerings = client.CustomObjectsApi(api_client)
    name = peering["name"]
    uid = json_body(
        peerings.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
    )["metadata"]["uid"]

    # A second sync (as `argocd app sync` starts one) and a refresh change nothing.
    started = app["status"]["operationState"]["startedAt"]
    time.sleep(1)  # startedAt has whole seconds
    applications.patch(
        app_name,
        {"operation": {"initiatedBy": {"username": "test"}, "sync": {"revision": revision}}},
    )
    app = applications.wait(
        app_name,
        lambda app: (
            app["status"].get("operationState", {}).get("startedAt", "") > started
            and synced_any_health(app)
        ),
        "synced again",
    )
    applications.refresh(app_name)
    assert applications.get(app_name)["status"]["sync"]["status"] == "Synced"
    again = json_body(
        peerings.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
    )
    assert again["metadata"]["uid"] == uid


def test_the_admission_policies_sync_without_churn(
    argocd: ArgoCD,
    git_repo: GitRepo,
    applications: Applications,
    namespace: str,
) -> None:
    """The policy files of crds/ as a user's repository holds them, synced by Argo CD: the API
    server fills defaults into each policy and binding (failurePolicy, matchPolicy, selectors),
    and none of them may read as drift. The suite installed the same objects, so Argo CD takes
    them over unchanged; the Application goes without its resources-finalizer, so they stay."""
    path = f"policies/{namespace}"
    shipped = policy_paths(CRDS)
    for policy_file in shipped:
        git_repo.write(f"{path}/{policy_file.name}", *yaml.safe_load_all(policy_file.read_text()))
    revision = git_repo.commit("the admission policies")
    app_name = namespace[:53]
    applications.create(application(argocd, git_repo, path, namespace))

    def synced_at_revision(app: dict[str, Any]) -> bool:
        status = app.get("status", {})
        return (
            status.get("sync", {}).get("status") == "Synced"
            and status.get("sync", {}).get("revision") == revision
            and bool(status.get("operationState", {}).get("finishedAt"))
        )

    app = applications.wait(app_name, synced_at_revision, "Synced", timeout=180)
    kinds = Counter(r["kind"] for r in app["status"]["resources"])
    assert kinds == {
        "ValidatingAdmissionPolicy": len(shipped),
        "ValidatingAdmissionPolicyBinding": len(shipped),
    }, kinds
    history = len(app["status"]["history"])
    app = compared_again_without_drift(applications, app_name)
    assert len(app["status"]["history"]) == history
