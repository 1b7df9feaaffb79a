"""A real Kubernetes control plane without nodes: etcd, kube-apiserver, kube-controller-manager.

The operator only talks to the API server, so this is all it needs to run for real: RBAC,
admission, CRD validation, watches and resourceVersion conflicts all behave as in a cluster.
kube-controller-manager runs the namespace and garbage-collector controllers, so a deleted
namespace is emptied and removed and dependents follow their owners as in a cluster. Nothing
schedules or runs pods: there is no node.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from .gobuild import control_plane_tool, ensure_tools
from .paths import KUBERNETES_VERSION, LOOPBACK, free_port, kubernetes_version
from .pki import ControlPlanePki, control_plane_pki
from .processes import ManagedProcess, ProcessDied, ProcessRecord, http_get, http_request

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTEXT_NAME = "jetstream-operator-dev"
# What a nodeless control plane needs of kube-controller-manager: namespaces are finalized,
# ownerReferences honoured, aggregated ClusterRoles (the chart's view/edit roles) filled into
# view/edit/admin, and admission policies type-checked against the CRDs' schemas (their status
# shows what does not fit). The other controllers act on pods, nodes and their workloads.
DEFAULT_CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "clusterrole-aggregation-controller",
    "validatingadmissionpolicy-status-controller",
)
# The `kubernetes` Service: the first IP of the service range, and its DNS names.
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
KUBERNETES_SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
_PORT_RETRIES = 3


def _port_race(fixed_ports: bool, attempt: int, process: ManagedProcess) -> bool:
    """Whether a failed start lost a port race and is worth retrying on fresh ports."""
    return not fixed_ports and attempt < _PORT_RETRIES - 1 and process.log_says_address_in_use()


class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager in `workdir`; ports kept across restarts."""

    def __init__(
        self,
        workdir: Path,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        *,
        node_address: str | None = None,
        flow_control: bool = False,
        profiling: bool = False,
    ) -> None:
        """With `node_address` (an address the project made, see `node.py`) it serves a node.

        `flow_control` turns API Priority and Fairness on, as in a real cluster; it is off by
        default for a faster start, since only the benchmark measures who waits for whom.
        `profiling` serves kube-apiserver's /debug/pprof, for the benchmark's CPU profile.

        The API server then listens on and advertises that address instead of loopback, so pods
        reach it through the `kubernetes` Service; the ServiceAccount admission plugin, the lease
        endpoint reconciler, Node authorization and every default controller run, as in a cluster.
        """
        self.workdir = workdir.resolve()
        self.kubernetes_version = kubernetes_version()
        self.node_address = node_address
        self.flow_control = flow_control
        self.profiling = profiling
        self.address = node_address or LOOPBACK
        self.controllers = ("*",) if node_address else tuple(controllers)
        self.etcd_client_port = 0
        self.etcd_peer_port = 0
        self.apiserver_port = 0
        self.controller_manager_port = 0
        self._pki: ControlPlanePki | None = None
        self._etcd: ManagedProcess | None = None
        self._apiserver: ManagedProcess | None = None
        self._controller_manager: ManagedProcess | None = None

    # -- where things are -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self.etcd_client_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.workdir / "controller-manager.kubeconfig"

    @property
    def controller_manager_url(self) -> str:
        return f"https://{LOOPBACK}:{self.controller_manager_port}"

    @property
    def pki(self) -> ControlPlanePki:
        if self._pki is None:
            extra_ips = (self.node_address, KUBERNETES_SERVICE_IP) if self.node_address else ()
            self._pki = control_plane_pki(
                self.workdir / "pki",
                serving_ips=extra_ips,
                serving_dns=KUBERNETES_SERVICE_NAMES if self.node_address else (),
            )
        return self._pki

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    def logs(self) -> dict[str, Path]:
        return {
            "etcd": self.workdir / "etcd.log",
            "kube-apiserver": self.workdir / "kube-apiserver.log",
            "kube-controller-manager": self.workdir / "kube-controller-manager.log",
        }

    def records(self) -> list[ProcessRecord]:
        """Running processes in start order, for stopping them from another process (`dev down`)."""
        processes = (self._etcd, self._apiserver, self._controller_manager)
        return [p.record() for p in processes if p is not None and p.running]

    def health_urls(self) -> dict[str, str]:
        """Process name -> the URL that answers 200 while it is healthy."""
        return {
            "etcd": f"{self.etcd_url}/health",
            "kube-apiserver": f"{self.url}/readyz",
            "kube-controller-manager": f"{self.controller_manager_url}/healthz",
        }

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts our CA and presents the admin (system:masters) client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> None:
        """Start etcd, kube-apiserver, kube-controller-manager; return once each is healthy."""
        tools = ensure_tools(
            ["etcd", self._tool("kube-apiserver"), self._tool("kube-controller-manager")]
        )
        self.workdir.mkdir(parents=True, exist_ok=True)
        _ = self.pki
        try:
            self._start_etcd(tools["etcd"], timeout)
            self._start_apiserver(tools["kube-apiserver"], timeout)
            self._start_controller_manager(tools["kube-controller-manager"], timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop clients before the servers they use, etcd last; safe to call repeatedly."""
        if self._controller_manager is not None:
            self._controller_manager.stop()
        self.stop_apiserver()
        if self._etcd is not None:
            self._etcd.stop()

    def stop_apiserver(self) -> None:
        """Take the API down (etcd and data stay) to simulate an API outage."""
        if self._apiserver is not None:
            self._apiserver.stop()

    def start_apiserver(self, timeout: float = 120.0) -> None:
        """Bring the API back on the same port with the same data, and kube-controller-manager
        too if it exited meanwhile (it exits when the API goes away during its own start-up)."""
        apiserver = self._tool("kube-apiserver")
        self._start_apiserver(ensure_tools([apiserver])["kube-apiserver"], timeout)
        if self._controller_manager is not None and not self._controller_manager.running:
            manager = self._tool("kube-controller-manager")
            binary = ensure_tools([manager])["kube-controller-manager"]
            self._start_controller_manager(binary, timeout)

    def restart_apiserver(self, timeout: float = 120.0) -> None:
        self.stop_apiserver()
        self.start_apiserver(timeout)

    def healthy(self) -> bool:
        status, _ = http_get(f"{self.url}/readyz", self.ssl_context())
        return status == 200

    # -- internals --------------------------------------------------------------------------

    def _tool(self, name: str) -> str:
        return control_plane_tool(name, self.kubernetes_version)

    def _start_on_free_ports(
        self,
        fixed: bool,
        pick_ports: Callable[[], None],
        make: Callable[[], ManagedProcess],
        probe: Callable[[], bool],
        timeout: float,
        what: str,
    ) -> ManagedProcess:
        """Start a server and wait for `probe`; ports not yet `fixed` are re-picked on a race."""
        for attempt in range(_PORT_RETRIES):
            if not fixed:
                pick_ports()
            process = make()
            process.start()
            try:
                process.wait_until(probe, timeout, what)
                return process
            except ProcessDied:
                if not _port_race(fixed, attempt, process):
                    raise
        raise AssertionError("unreachable: the last attempt raises")

    def _start_etcd(self, binary: Path, timeout: float) -> None:
        if self._etcd is not None and self._etcd.running:
            return

        def pick_ports() -> None:
            self.etcd_client_port, self.etcd_peer_port = free_port(), free_port()

        def make() -> ManagedProcess:
            peer = f"http://{LOOPBACK}:{self.etcd_peer_port}"
            self._etcd = ManagedProcess(
                "etcd",
                [
                    str(binary),
                    "--name=jetstream-operator-dev",
                    f"--data-dir={self.workdir / 'etcd-data'}",
                    f"--listen-client-urls={self.etcd_url}",
                    f"--advertise-client-urls={self.etcd_url}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=jetstream-operator-dev={peer}",
                    "--initial-cluster-token=jetstream-operator-dev",
                    "--log-level=warn",
                    # Throwaway data: skipping fsync keeps slow CI disks from stalling writes.
                    "--unsafe-no-fsync",
                ],
                self.logs()["etcd"],
            )
            return self._etcd

        self._start_on_free_ports(
            self.etcd_client_port != 0,
            pick_ports,
            make,
            self._etcd_healthy,
            timeout,
            "healthy /health",
        )

    def _etcd_healthy(self) -> bool:
        status, body = http_get(f"{self.etcd_url}/health")
        return status == 200 and b'"true"' in body

    def _apiserver_argv(self, binary: Path) -> list[str]:
        pki = self.pki
        argv = [
            str(binary),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={self.apiserver_port}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            f"--enable-priority-and-fairness={str(self.flow_control).lower()}",
            f"--profiling={str(self.profiling).lower()}",
        ]
        if self.kubernetes_version == KUBERNETES_VERSION:
            # The chart's finalizer policy: GA from 1.36, beta and off by default in 1.34, absent
            # before 1.32 (the chart then leaves it out).
            argv += [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
            ]
        if self.node_address:
            return [
                *argv,
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # For `kubectl logs/exec`: the API server calls the kubelet as the admin.
                f"--kubelet-client-certificate={pki.admin_cert}",
                f"--kubelet-client-key={pki.admin_key}",
                # The node's name does not resolve; its InternalIP is NODE_ADDRESS.
                "--kubelet-preferred-address-types=InternalIP",
            ]
        return [
            *argv,
            "--authorization-mode=RBAC",
            # The `kubernetes` Service cannot point at loopback; skip its endpoints, not needed.
            "--endpoint-reconciler-type=none",
            # Without a node no pod runs, so no pod needs its service-account token mounted.
            "--disable-admission-plugins=ServiceAccount",
        ]

    def _start_apiserver(self, binary: Path, timeout: float) -> None:
        if self._apiserver is not None and self._apiserver.running:
            return

        def pick_port() -> None:
            self.apiserver_port = free_port()

        def make() -> ManagedProcess:
            self._apiserver = ManagedProcess(
                "kube-apiserver", self._apiserver_argv(binary), self.logs()["kube-apiserver"]
            )
            return self._apiserver

        apiserver = self._start_on_free_ports(
            self.apiserver_port != 0, pick_port, make, self.healthy, timeout, "passing /readyz"
        )
        pki = self.pki
        self.write_kubeconfig(self.kubeconfig, pki.admin_cert, pki.admin_key)
        self.write_kubeconfig(
            self.controller_manager_kubeconfig,
            pki.controller_manager_cert,
            pki.controller_manager_key,
        )
        apiserver.wait_until(self._ensure_default_namespace, 30.0, "default namespace")

    def _controller_manager_argv(self, binary: Path) -> list[str]:
        pki = self.pki
        kubeconfig = self.controller_manager_kubeconfig
        return [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            # No delegated authn/authz: only /healthz is probed, and it is always allowed.
            f"--secure-port={self.controller_manager_port}",
            f"--bind-address={LOOPBACK}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.service_account_key}",
            # Each controller acts as its own service account with its bootstrap RBAC role.
            "--use-service-account-credentials=true",
            f"--controllers={','.join(self.controllers)}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _start_controller_manager(self, binary: Path, timeout: float) -> None:
        if self._controller_manager is not None and self._controller_manager.running:
            return

        def pick_port() -> None:
            self.controller_manager_port = free_port()

        def make() -> ManagedProcess:
            self._controller_manager = ManagedProcess(
                "kube-controller-manager",
                self._controller_manager_argv(binary),
                self.logs()["kube-controller-manager"],
            )
            return self._controller_manager

        self._start_on_free_ports(
            self.controller_manager_port != 0,
            pick_port,
            make,
            self._controller_manager_healthy,
            timeout,
            "passing /healthz",
        )

    def _controller_manager_healthy(self) -> bool:
        status, _ = http_get(f"{self.controller_manager_url}/healthz", self.ssl_context())
        return status == 200

    def _ensure_default_namespace(self) -> bool:
        """The apiserver creates `default` itself shortly after start; create it if it lags."""
        status, _ = http_get(f"{self.url}/api/v1/namespaces/default", self.ssl_context())
        if status == 404:
            # A 409 means it appeared meanwhile; the next poll sees it.
            http_request(
                f"{self.url}/api/v1/namespaces",
                self.ssl_context(),
                method="POST",
                json_body={"kind": "Namespace", "metadata": {"name": "default"}},
            )
        return status == 200

    def write_kubeconfig(self, path: Path, client_cert: Path, client_key: Path) -> None:
        """A self-contained kubeconfig (embedded PEM data) for one client certificate."""
        self._write_kubeconfig(
            path,
            {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)},
        )

    def write_token_kubeconfig(self, path: Path, token: str) -> None:
        """A kubeconfig for a bearer token, such as a ServiceAccount's from a TokenRequest."""
        self._write_kubeconfig(path, {"token": token})

    def _write_kubeconfig(self, path: Path, user: dict[str, str]) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": CONTEXT_NAME,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": _b64(self.pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": CONTEXT_NAME, "user": user}],
            "contexts": [
                {
                    "name": CONTEXT_NAME,
                    "context": {
                        "cluster": CONTEXT_NAME,
                        "user": CONTEXT_NAME,
                        "namespace": "default",
                    },
                }
            ],
            "current-context": CONTEXT_NAME,
        }
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)
        os.replace(partial, path)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
