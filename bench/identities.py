"""Who the benchmarks' clients are to the API server.

`admin` (the old default) runs every client as `system:masters`. API Priority and Fairness
exempts that group, so a controller's burst and the user's applies compete with no flow control
at all, which no real cluster does.

`workload` turns flow control on and makes the controller (ours or NACK) a ServiceAccount with
a TokenRequest token, as in a pod, and the timed applies a plain user, as from a laptop. APF then
classifies them as a real cluster would: `service-accounts` -> workload-low for the controller,
`global-default` for the user. Both are bound to `cluster-admin`, so authorization is the same
for both controllers and only flow control differs from the admin runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.pki import issue_client_cert

MODES = ("admin", "workload")
CONTROLLER_NAMESPACE = "bench-controller"
CONTROLLER_ACCOUNT = "controller"
APPLIER_USER = "bench-applier"
APPLIER_GROUP = "bench:appliers"
TOKEN_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Identities:
    """Kubeconfigs: `controller` for the operator or NACK, `applier` for the timed applies."""

    controller: Path
    applier: Path


def control_plane(workdir: Path, mode: str, profiling: bool = False) -> ControlPlane:
    return ControlPlane(workdir, flow_control=mode == "workload", profiling=profiling)


def identities(plane: ControlPlane, api: client.ApiClient, mode: str) -> Identities:
    """The admin kubeconfig for both in `admin` mode; otherwise a ServiceAccount's token and a
    plain user's certificate, made with the admin client `api`."""
    if mode == "admin":
        return Identities(plane.kubeconfig, plane.kubeconfig)
    core = client.CoreV1Api(api)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=CONTROLLER_NAMESPACE))
    )
    core.create_namespaced_service_account(
        CONTROLLER_NAMESPACE,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=CONTROLLER_ACCOUNT)),
    )
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name="bench-cluster-admin"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(
                    kind="ServiceAccount", name=CONTROLLER_ACCOUNT, namespace=CONTROLLER_NAMESPACE
                ),
                client.RbacV1Subject(
                    kind="Group", name=APPLIER_GROUP, api_group="rbac.authorization.k8s.io"
                ),
            ],
        )
    )
    request = core.create_namespaced_service_account_token(
        CONTROLLER_ACCOUNT,
        CONTROLLER_NAMESPACE,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
        ),
    )
    directory = plane.workdir / "identities"
    directory.mkdir(exist_ok=True)
    controller = directory / "controller.kubeconfig"
    if request.status is None or not request.status.token:
        raise RuntimeError(f"no token for {CONTROLLER_ACCOUNT}: {request}")
    plane.write_token_kubeconfig(controller, request.status.token)
    cert, key = issue_client_cert(plane.pki.load_ca(), APPLIER_USER, [APPLIER_GROUP]).write(
        directory, "applier"
    )
    applier = directory / "applier.kubeconfig"
    plane.write_kubeconfig(applier, cert, key)
    return Identities(controller, applier)
