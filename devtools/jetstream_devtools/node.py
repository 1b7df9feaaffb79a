"""A real one-node Kubernetes: the control plane plus scheduler, kubelet, kube-proxy, containerd.

Everything runs as processes the project starts on this machine; nothing is pulled. Pods use
Debian's CNI `bridge` + `host-local` plugins, the pause image is built here from a tiny Go
program, and the operator's image is loaded into containerd from the local Docker.

Pods must reach the API server and NATS, which loopback cannot give them: the project makes the
pod bridge itself, with the pods' gateway address (`NODE_ADDRESS`), before anything starts, and
the API server, kubelet and NATS listen there. Nothing binds to the machine's other interfaces.
The machine lacks CAP_SYS_RESOURCE and runs cgroups v1, hence containerd's
`restrict_oom_score_adj`, kube-proxy's `--oom-score-adj=0` and kubelet's `cgroupfs` driver.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from .containers import CNI_BIN_DIR, RUN_DIR, Docker, ensure_packages
from .controlplane import ControlPlane
from .gobuild import NODE_TOOLS, ensure_tools
from .paths import LOOPBACK, file_lock, free_port
from .pki import Credential, issue_client_cert, issue_serving_cert
from .processes import ManagedProcess, ProcessRecord, http_get

NODE_NAME = "jetstream-operator-node"
POD_CIDR = "10.244.0.0/24"
POD_BRIDGE = "jso-cni0"
# The pods' gateway on POD_BRIDGE (CNI's host-local never hands it to a pod).
NODE_ADDRESS = "10.244.0.1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CONTAINERD_DIR = RUN_DIR / "containerd"
CONTAINERD_SOCKET = CONTAINERD_DIR / "containerd.sock"
CONTAINERD_NAMESPACE = "k8s.io"


class Node:
    """A control plane serving `NODE_ADDRESS`, plus the node's own processes.

    One node per machine at a time (the address and interface are fixed): `start` holds a lock
    until `stop`.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()
        self.control_plane = ControlPlane(self.workdir / "controlplane", node_address=NODE_ADDRESS)
        self.kubelet_port = 0
        self.kubelet_healthz_port = 0
        self.scheduler_port = 0
        self.proxy_healthz_port = 0
        self._processes: dict[str, ManagedProcess] = {}
        self._lock: contextlib.ExitStack | None = None

    # -- where things are -------------------------------------------------------------------

    @property
    def containerd_root(self) -> Path:
        return self.workdir / "containerd-root"

    @property
    def kubelet_root(self) -> Path:
        return self.workdir / "kubelet"

    def logs(self) -> dict[str, Path]:
        return {
            **self.control_plane.logs(),
            **{
                name: self.workdir / f"{name}.log"
                for name in ("containerd", "kube-scheduler", "kubelet", "kube-proxy")
            },
        }

    def records(self) -> list[ProcessRecord]:
        """The control plane's processes, then the node's, in start order."""
        node = [process.record() for process in self._processes.values() if process.running]
        return self.control_plane.records() + node

    def health_urls(self) -> dict[str, str]:
        return {
            **self.control_plane.health_urls(),
            "kube-scheduler": f"https://{LOOPBACK}:{self.scheduler_port}/healthz",
            "kubelet": f"http://{LOOPBACK}:{self.kubelet_healthz_port}/healthz",
            "kube-proxy": f"http://{LOOPBACK}:{self.proxy_healthz_port}/healthz",
        }

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, docker: Docker, timeout: float = 240.0) -> None:
        """Start everything and return once the node is Ready; `docker` makes the pause image."""
        ensure_packages()
        tools = ensure_tools(NODE_TOOLS)
        self._lock = contextlib.ExitStack()
        self._lock.enter_context(file_lock(RUN_DIR / "node.lock"))
        try:
            make_node_address()
            self.control_plane.start(timeout)
            self._write_certs()
            self._start_containerd(timeout)
            self._load_pause_image(docker, tools["pause"])
            self._start("kube-scheduler", self._scheduler_argv(tools["kube-scheduler"]), timeout)
            self._start("kubelet", self._kubelet_argv(tools["kubelet"]), timeout)
            self._start("kube-proxy", self._proxy_argv(tools["kube-proxy"]), timeout)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def registry_hosts(self) -> Path:
        return self.workdir / "registry-hosts"

    def trust_registry(self, host: str) -> None:
        """Let containerd pull from a plain-HTTP registry at host:port (a loopback one the
        tests start), as a cluster's nodes are configured for a private registry."""
        directory = self.registry_hosts / host
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n[host."http://{host}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )

    def load_image(self, docker: Docker, tag: str) -> None:
        """Copy an image from the local Docker into the node's containerd (nothing is pulled)."""
        tarball = docker.save(tag, self.workdir / "image-load.tar")
        try:
            ctr("images", "import", str(tarball), timeout=600)
        finally:
            tarball.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop the node and leave nothing behind: containers, mounts, iptables rules, links."""
        for name in ("kube-proxy", "kubelet", "kube-scheduler"):
            process = self._processes.pop(name, None)
            if process is not None:
                process.stop()
        if "containerd" in self._processes:
            remove_containers()
            self._processes.pop("containerd").stop(timeout=30)
        self.control_plane.stop()
        cleanup_host(self.workdir)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- internals --------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], timeout: float) -> None:
        process = ManagedProcess(name, argv, self.logs()[name])
        self._processes[name] = process
        process.start()
        url = self.health_urls().get(name)
        if url is not None:
            context = self.control_plane.ssl_context() if url.startswith("https") else None
            process.wait_until(lambda: http_get(url, context)[0] == 200, timeout, "healthy")

    def _credential(self, stem: str, credential: Credential) -> tuple[Path, Path]:
        return credential.write(self.workdir / "pki", stem)

    def _write_certs(self) -> None:
        """Each component its own identity, as RBAC's bootstrap policy expects them."""
        plane = self.control_plane
        ca = plane.pki.load_ca()
        identities = {
            "kubelet": issue_client_cert(ca, f"system:node:{NODE_NAME}", ["system:nodes"]),
            "kube-scheduler": issue_client_cert(ca, "system:kube-scheduler"),
            "kube-proxy": issue_client_cert(ca, "system:kube-proxy"),
        }
        for name, credential in identities.items():
            cert, key = self._credential(name, credential)
            plane.write_kubeconfig(self.workdir / f"{name}.kubeconfig", cert, key)
        serving = issue_serving_cert(ca, NODE_NAME, ip_addresses=[NODE_ADDRESS])
        self._credential("kubelet-serving", serving)

    def _start_containerd(self, timeout: float) -> None:
        CONTAINERD_DIR.mkdir(parents=True, exist_ok=True)
        cni_conf_dir = self.workdir / "cni" / "net.d"
        cni_conf_dir.mkdir(parents=True, exist_ok=True)
        (cni_conf_dir / "10-jetstream-operator.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "jetstream-operator",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": POD_BRIDGE,
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_CIDR}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(self.workdir / "cni" / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )
        config = self.workdir / "containerd.toml"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{self.containerd_root}"',
                    f'state = "{CONTAINERD_DIR / "state"}"',
                    "[grpc]",
                    f'  address = "{CONTAINERD_SOCKET}"',
                    f"[{cri}]",
                    f'  sandbox_image = "{PAUSE_IMAGE}"',
                    # Root here lacks CAP_SYS_RESOURCE: never lower a container's oom_score_adj.
                    "  restrict_oom_score_adj = true",
                    f"[{cri}.containerd]",
                    '  snapshotter = "overlayfs"',
                    '  default_runtime_name = "runc"',
                    f"[{cri}.containerd.runtimes.runc]",
                    '  runtime_type = "io.containerd.runc.v2"',
                    f"[{cri}.containerd.runtimes.runc.options]",
                    "  SystemdCgroup = false",
                    f"[{cri}.cni]",
                    f'  bin_dir = "{CNI_BIN_DIR}"',
                    f'  conf_dir = "{cni_conf_dir}"',
                    # Registries the node may pull from (`trust_registry`), read at each pull.
                    f"[{cri}.registry]",
                    f'  config_path = "{self.registry_hosts}"',
                    "",
                ]
            )
        )
        process = ManagedProcess(
            "containerd", ["containerd", f"--config={config}"], self.logs()["containerd"]
        )
        self._processes["containerd"] = process
        process.start()
        process.wait_until(self._containerd_answers, timeout, "an answering socket")

    def _containerd_answers(self) -> bool:
        try:
            ctr("version", timeout=10)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def _load_pause_image(self, docker: Docker, pause: Path) -> None:
        """The sandbox image: the static pause binary alone, tagged as containerd is told."""
        if not docker.image_exists(PAUSE_IMAGE):
            rootfs = self.workdir / "pause-rootfs"
            rootfs.mkdir(parents=True, exist_ok=True)
            shutil.copy2(pause, rootfs / "pause")
            docker.import_rootfs(rootfs, PAUSE_IMAGE, 'ENTRYPOINT ["/pause"]')
        self.load_image(docker, PAUSE_IMAGE)

    def _scheduler_argv(self, binary: Path) -> list[str]:
        self.scheduler_port = free_port()
        pki = self.control_plane.pki
        return [
            str(binary),
            f"--kubeconfig={self.workdir / 'kube-scheduler.kubeconfig'}",
            f"--secure-port={self.scheduler_port}",
            f"--bind-address={LOOPBACK}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _kubelet_argv(self, binary: Path) -> list[str]:
        self.kubelet_port, self.kubelet_healthz_port = free_port(), free_port()
        pki_dir = self.workdir / "pki"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_ADDRESS,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": self.kubelet_healthz_port,
            "tlsCertFile": str(pki_dir / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki_dir / "kubelet-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.control_plane.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
            # cgroups v1 without systemd here.
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "staticPodPath": "",
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            # A shared CI disk may be fuller than kubelet's defaults tolerate.
            "evictionHard": {"nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "podLogsDir": str(self.workdir / "pod-logs"),
        }
        config_file = self.workdir / "kubelet-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        return [
            str(binary),
            f"--config={config_file}",
            f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={pki_dir}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_ADDRESS}",
        ]

    def _proxy_argv(self, binary: Path) -> list[str]:
        self.proxy_healthz_port = free_port()
        return [
            str(binary),
            f"--kubeconfig={self.workdir / 'kube-proxy.kubeconfig'}",
            f"--hostname-override={NODE_NAME}",
            f"--cluster-cidr={POD_CIDR}",
            "--proxy-mode=iptables",
            # Root here lacks CAP_SYS_RESOURCE, and may not raise conntrack limits either.
            "--oom-score-adj=0",
            "--conntrack-max-per-core=0",
            f"--healthz-bind-address={LOOPBACK}:{self.proxy_healthz_port}",
            f"--metrics-bind-address={LOOPBACK}:{free_port()}",
        ]

    def _wait_ready(self, timeout: float) -> None:
        url = f"{self.control_plane.url}/api/v1/nodes/{NODE_NAME}"
        context = self.control_plane.ssl_context()

        def ready() -> bool:
            status, body = http_get(url, context)
            if status != 200:
                return False
            conditions = json.loads(body).get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        self._processes["kubelet"].wait_until(ready, timeout, f"node {NODE_NAME} Ready")


def ctr(*args: str, timeout: float = 120) -> str:
    """`ctr` against the node's containerd, in the namespace the CRI plugin uses."""
    result = subprocess.run(
        ["ctr", f"--address={CONTAINERD_SOCKET}", f"--namespace={CONTAINERD_NAMESPACE}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ctr {' '.join(args)} failed: {result.stderr[-2000:]}")
    return result.stdout


def remove_containers() -> None:
    """Kill and delete every container of the node, so no shim or mount outlives it."""
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        for task in ctr("tasks", "list", "--quiet").split():
            with contextlib.suppress(RuntimeError):
                ctr("tasks", "kill", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 20
        while ctr("tasks", "list", "--quiet").split() and time.monotonic() < deadline:
            time.sleep(0.5)
        for task in ctr("tasks", "list", "--quiet").split():
            with contextlib.suppress(RuntimeError):
                ctr("tasks", "delete", "--force", task)
        containers = ctr("containers", "list", "--quiet").split()
        if containers:
            with contextlib.suppress(RuntimeError):
                ctr("containers", "delete", *containers)


def cleanup_host(workdir: Path) -> None:
    """Unmount what the node mounted, drop its network namespaces, links and iptables rules."""
    roots = (str(workdir), str(CONTAINERD_DIR), "/run/netns/cni-")
    for mount_point in sorted(_mount_points(), key=len, reverse=True):
        if mount_point.startswith(roots):
            subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
    for netns in Path("/run/netns").glob("cni-*"):
        subprocess.run(["ip", "netns", "delete", netns.name], capture_output=True, check=False)
    # The API server bound to its address is stopped by now.
    subprocess.run(["ip", "link", "delete", POD_BRIDGE], capture_output=True, check=False)
    proxy = ensure_tools(["kube-proxy"])["kube-proxy"]
    subprocess.run([str(proxy), "--cleanup"], capture_output=True, timeout=60, check=False)
    _remove_kube_chains()


def make_node_address() -> None:
    """The pod bridge with `NODE_ADDRESS`, made before the API server binds there; idempotent.

    CNI's bridge plugin finds it and keeps it. Needs root (CAP_NET_ADMIN).
    """
    shown = subprocess.run(
        ["ip", "-o", "addr", "show", "dev", POD_BRIDGE], capture_output=True, text=True, check=False
    )
    if f" {NODE_ADDRESS}/" in shown.stdout:
        return
    prefix = POD_CIDR.split("/")[1]
    for command in (
        ["ip", "link", "add", POD_BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{NODE_ADDRESS}/{prefix}", "dev", POD_BRIDGE],
        ["ip", "link", "set", POD_BRIDGE, "up"],
    ):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 and "File exists" not in result.stderr:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stderr}")


def _remove_kube_chains() -> None:
    """kubelet's own iptables chains (KUBE-FIREWALL, canaries), which `kube-proxy --cleanup`
    leaves: jumps to them from the built-in chains first, then the chains."""
    for command in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            listed = subprocess.run(
                [command, "-t", table, "-S"], capture_output=True, text=True, check=False
            )
            rules = listed.stdout.splitlines()
            for rule in rules:
                fields = rule.split()
                target = fields[fields.index("-j") + 1] if "-j" in fields else ""
                jumps_to_kube = target.startswith("KUBE-")
                if fields[:1] == ["-A"] and not fields[1].startswith("KUBE-") and jumps_to_kube:
                    delete = [command, "-t", table, "-D", *fields[1:]]
                    subprocess.run(delete, capture_output=True, check=False)
            chains = [r.split()[1] for r in rules if r.startswith("-N KUBE-")]
            for flag in ("-F", "-X"):
                for chain in chains:
                    subprocess.run([command, "-t", table, flag, chain], capture_output=True)


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 1:
            points.append(fields[1].replace("\\040", " "))
    return points
