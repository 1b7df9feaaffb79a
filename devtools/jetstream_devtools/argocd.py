"""A real Argo CD (repo-server + application-controller) against the local control plane.

Argo CD's own developer setup runs its components as local processes pointed at a kube context;
this does the same, so the Argo CD tests exercise the health check, diffing and pruning of the
real application-controller instead of a Lua interpreter alone. The binary is built once from the
`github.com/argoproj/argo-cd/v3` Go module into the tool cache (19 min measured on 2 busy
cores).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from .crds import wait_established
from .gobuild import _build_lock, ensure_tools
from .paths import LOOPBACK, cache_root
from .processes import ManagedProcess

ARGOCD_MODULE = "github.com/argoproj/argo-cd/v3"
ARGOCD_VERSION = "v3.6.1"
GITOPS_ENGINE_MODULE = "github.com/argoproj/argo-cd/gitops-engine/v3"
COMPONENTS = ("argocd-application-controller", "argocd-repo-server", "argocd-server")
# The repo-server runs this helper even with GPG verification off.
GIT_WRAPPER = "git-verify-wrapper.sh"
# command -> Debian package providing it
APT_PACKAGES = {"redis-server": "redis-server", "git": "git"}
NAMESPACE = "argocd"
CLUSTER_NAME = "local"
# Inside Argo CD's own network namespace, so fixed ports never clash with the host's.
REDIS_PORT = 6379
REPO_SERVER_PORT = 8081
_CLONE_NEWNET = 0x40000000


class ArgoCDBuildError(RuntimeError):
    """The Argo CD build failed; the message carries the tail of the output."""


def argocd_dir() -> Path:
    """Binary, component links, CRDs and base config of the pinned version."""
    return cache_root() / "bin" / f"argocd-{ARGOCD_VERSION}"


def argocd_binary() -> Path:
    return argocd_dir() / "argocd"


def built() -> bool:
    """True when the binary and everything copied next to it are in place."""
    root = argocd_dir()
    return (root / ".complete").is_file() and os.access(root / "argocd", os.X_OK)


def ensure_argocd() -> Path:
    """The directory holding the built Argo CD; builds it on first use.

    The build takes gobuild's lock: one Go build at a time per cache, since on 2 cores
    concurrent builds only slow each other down.
    """
    if not built():
        with _build_lock():
            if not built():
                _build()
    return argocd_dir()


def _go_env() -> dict[str, str]:
    # v3.6.1 needs a newer Go than the machine's: GOTOOLCHAIN=auto fetches it via the proxy.
    return {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off", "GOTOOLCHAIN": "auto"}


def _run(command: Sequence[str], cwd: Path | None = None) -> str:
    go = shutil.which("go")
    if go is None:
        raise ArgoCDBuildError("the `go` toolchain is not on PATH; it is needed to build Argo CD")
    argv = [go if command[0] == "go" else command[0], *command[1:]]
    result = subprocess.run(
        argv,
        cwd=cwd,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise ArgoCDBuildError(f"`{' '.join(command)}` failed:\n{tail}")
    return result.stdout


def _build() -> None:
    """Download the module, drop its local gitops-engine replace, build, then copy helpers.

    The module zip lacks the `./gitops-engine` directory its go.mod replaces the engine with, so
    the replace is dropped and the engine's published module of the same version is used.
    """
    started = time.monotonic()
    print(f"building Argo CD {ARGOCD_VERSION} (first time only, ~20 min) ...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="argocd-build-") as scratch:
        info = json.loads(
            _run(["go", "mod", "download", "-json", f"{ARGOCD_MODULE}@{ARGOCD_VERSION}"])
        )
        module = Path(scratch) / "argo-cd"
        shutil.copytree(info["Dir"], module)
        for path in module.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        _run(["go", "mod", "edit", f"-dropreplace={GITOPS_ENGINE_MODULE}"], module)
        _run(["go", "get", f"{GITOPS_ENGINE_MODULE}@{ARGOCD_VERSION}"], module)
        staging = Path(scratch) / "out"
        staging.mkdir()
        ldflags = f"-s -w -X {ARGOCD_MODULE}/common.version={ARGOCD_VERSION.lstrip('v')}"
        output = str(staging / "argocd")
        _run(["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", output, "./cmd"], module)
        (staging / "argocd").chmod(0o755)
        shutil.copy2(module / "hack" / GIT_WRAPPER, staging / GIT_WRAPPER)
        (staging / GIT_WRAPPER).chmod(0o755)
        shutil.copytree(module / "manifests" / "crds", staging / "crds")
        shutil.copytree(module / "manifests" / "base" / "config", staging / "config")
        for component in COMPONENTS:
            (staging / component).symlink_to("argocd")
        target = argocd_dir()
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), target)
        (target / ".complete").write_text(ARGOCD_VERSION + "\n")
    elapsed = time.monotonic() - started
    print(f"built Argo CD in {elapsed:.0f}s -> {argocd_dir()}", file=sys.stderr)


class ArgoCDUnavailable(RuntimeError):
    """Argo CD cannot run here (no packages, no build, no network namespaces); says why."""


def ensure_packages() -> None:
    """Debian's redis-server and git, installed with apt-get when missing (needs root)."""
    missing = sorted({pkg for cmd, pkg in APT_PACKAGES.items() if shutil.which(cmd) is None})
    if not missing:
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise ArgoCDUnavailable(f"{', '.join(missing)} missing and apt-get cannot run as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", *missing]):
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise ArgoCDUnavailable(f"`{' '.join(argv)}` failed:\n{tail}")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def forward_into_netns(netns: str, ports: Sequence[int]) -> None:
    """Listen on 127.0.0.1:PORT inside `netns` and relay each connection to 127.0.0.1:PORT
    outside it: Argo CD's components live in their own network namespace (the application
    controller's metrics server binds every interface and has no address flag), and reach the
    host's loopback API server through this relay only."""
    host = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    _setns(target)
    listeners = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(128)
        listeners.append((sock, port))
    _setns(host)  # connections to the targets are made from the host's namespace
    print(f"forwarding {', '.join(str(p) for p in ports)} into {netns}", flush=True)
    asyncio.run(_relay(listeners))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _relay(listeners: list[tuple[socket.socket, int]]) -> None:
    async def handle(port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(LOOPBACK, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    servers = [
        await asyncio.start_server(functools.partial(handle, port), sock=sock)
        for sock, port in listeners
    ]
    await asyncio.gather(*(server.serve_forever() for server in servers))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class ArgoCD:
    """redis, repo-server and application-controller for one API server, in `workdir`.

    They run in a network namespace of their own, whose only way out is a relay to the API
    server's port: nothing of Argo CD listens on the machine's interfaces.
    """

    def __init__(self, workdir: Path, kubeconfig: Path, apiserver_url: str) -> None:
        self.workdir = workdir.resolve()
        self.kubeconfig = kubeconfig
        self.apiserver_url = apiserver_url
        self._processes: list[ManagedProcess] = []
        self._netns: ManagedProcess | None = None

    # -- where things are -------------------------------------------------------------------

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log_file for p in [*self._processes, *filter(None, [self._netns])]}

    @property
    def root(self) -> Path:
        return argocd_dir()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, argocd_cm_patches: Sequence[Path] = ()) -> None:
        """Install Argo CD's CRDs and config, patch argocd-cm (as a user would), start it all.

        The patches go in before the controller starts, so its first comparison already uses
        them.
        """
        ensure_packages()
        root = ensure_argocd()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._install(argocd_cm_patches)
        self._start_netns()
        port = int(self.apiserver_url.rsplit(":", 1)[1])
        assert self._netns is not None and self._netns.pid is not None
        netns = f"/proc/{self._netns.pid}/ns/net"
        relay = self._spawn(
            "argocd-apiserver-relay",
            [sys.executable, "-m", "jetstream_devtools.argocd", "relay", netns, str(port)],
            inside=False,
        )
        relay.wait_until(lambda: "forwarding" in relay.tail(5), 30, "the relay listening")
        redis = self._spawn(
            "redis",
            [
                shutil.which("redis-server") or "redis-server",
                "--bind", LOOPBACK, "--port", str(REDIS_PORT),
                "--save", "", "--appendonly", "no",
            ],
        )  # fmt: skip
        redis.wait_until(lambda: "Ready to accept" in redis.tail(20), 30, "redis ready")
        redis_address = f"{LOOPBACK}:{REDIS_PORT}"
        repo = self._spawn(
            "argocd-repo-server",
            [
                str(root / "argocd-repo-server"),
                "--address", LOOPBACK, "--metrics-address", LOOPBACK,
                "--port", str(REPO_SERVER_PORT), "--redis", redis_address,
                "--loglevel", "info",
            ],
        )  # fmt: skip
        repo.wait_until(lambda: "is listening on" in repo.tail(50), 60, "repo-server listening")
        self._spawn(
            "argocd-application-controller",
            [
                str(root / "argocd-application-controller"),
                "--namespace", NAMESPACE, "--redis", redis_address,
                "--repo-server", f"{LOOPBACK}:{REPO_SERVER_PORT}",
                "--persist-resource-health",
                # Quick retries of failed comparisons; Git is looked at on refresh requests.
                "--app-resync", "30", "--repo-error-grace-period-seconds", "5",
                "--loglevel", "info",
            ],
        )  # fmt: skip

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        if self._netns is not None:
            self._netns.stop()
            self._netns = None

    # -- internals ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        tls, ssh, tmp = (self.workdir / name for name in ("tls", "ssh", "tmp"))
        for directory in (tls, ssh, tmp):
            directory.mkdir(exist_ok=True)
        helm = ensure_tools(["helm"])["helm"]
        search = [str(self.root), str(helm.parent), os.environ.get("PATH", "")]
        return {
            **os.environ,
            "PATH": os.pathsep.join(search),
            "KUBECONFIG": str(self.kubeconfig),
            # https://kubernetes.default.svc then means the kubeconfig's cluster.
            "ARGOCD_FAKE_IN_CLUSTER": "true",
            "ARGOCD_GPG_ENABLED": "false",
            "ARGOCD_TLS_DATA_PATH": str(tls),
            "ARGOCD_SSH_DATA_PATH": str(ssh),
            "TMPDIR": str(tmp),
            "HOME": str(self.workdir),
        }

    def _spawn(self, name: str, argv: list[str], *, inside: bool = True) -> ManagedProcess:
        if inside:
            assert self._netns is not None
            argv = ["nsenter", f"--net=/proc/{self._netns.pid}/ns/net", "--", *argv]
        process = ManagedProcess(name, argv, self.workdir / f"{name}.log", self._env())
        process.start()
        self._processes.append(process)
        return process

    def _start_netns(self) -> None:
        unshare = shutil.which("unshare")
        if unshare is None or shutil.which("nsenter") is None or shutil.which("ip") is None:
            raise ArgoCDUnavailable("unshare, nsenter and ip (util-linux, iproute2) are needed")
        holder = ManagedProcess(
            "argocd-netns", [unshare, "--net", "sleep", "infinity"], self.workdir / "netns.log"
        )
        holder.start()
        self._netns = holder
        own = os.readlink("/proc/self/ns/net")

        def separate() -> bool:
            with contextlib.suppress(OSError):
                return os.readlink(f"/proc/{holder.pid}/ns/net") != own
            return False

        try:
            holder.wait_until(separate, 10, "a network namespace of its own")
            self._run(
                ["nsenter", f"--net=/proc/{holder.pid}/ns/net", "ip", "link", "set", "lo", "up"]
            )
        except Exception as error:  # no CAP_SYS_ADMIN / CAP_NET_ADMIN here
            raise ArgoCDUnavailable(f"cannot make a network namespace: {error}") from error

    def _run(self, argv: Sequence[str], stdin: str | None = None) -> str:
        result = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
        return result.stdout

    def _install(self, argocd_cm_patches: Sequence[Path]) -> None:
        kubectl = str(ensure_tools(["kubectl"])["kubectl"])

        def files(directory: str) -> list[str]:
            """The manifests of a kustomize directory, without its kustomization.yaml."""
            paths = sorted((self.root / directory).glob("*.yaml"))
            return [f"--filename={p}" for p in paths if p.name != "kustomization.yaml"]

        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        self._run([kubectl, "apply", "-f", "-"], json.dumps(namespace))
        # applicationset-crd.yaml is over the client-side annotation limit: server-side apply.
        self._run([kubectl, "apply", "--server-side", "--force-conflicts", *files("crds")])
        extensions = client.ApiextensionsV1Api(
            config.new_client_from_config(str(self.kubeconfig))  # type: ignore[no-untyped-call]
        )
        for crd in ("applications.argoproj.io", "appprojects.argoproj.io"):
            wait_established(extensions, crd)
        self._run([kubectl, "apply", "-n", NAMESPACE, *files("config")])
        for patch in argocd_cm_patches:  # as docs/argocd/README.md tells users
            self._run([kubectl, "-n", NAMESPACE, "patch", "configmap", "argocd-cm",
                       "--patch-file", str(patch)])  # fmt: skip
        objects = {"apiVersion": "v1", "kind": "List", "items": self._objects()}
        self._run([kubectl, "apply", "-f", "-"], json.dumps(objects))

    def _objects(self) -> list[dict[str, Any]]:
        """The AppProject `default` (anything goes) and the local cluster, registered as
        `argocd cluster add` would: a cluster Secret with the kubeconfig's credentials."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        tls = {
            "caData": cluster["certificate-authority-data"],
            "certData": user["client-certificate-data"],
            "keyData": user["client-key-data"],
        }
        anything = [{"group": "*", "kind": "*"}]
        return [
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "AppProject",
                "metadata": {"name": "default", "namespace": NAMESPACE},
                "spec": {
                    "sourceRepos": ["*"],
                    "destinations": [{"server": "*", "namespace": "*"}],
                    "clusterResourceWhitelist": anything,
                    "namespaceResourceWhitelist": anything,
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"cluster-{CLUSTER_NAME}",
                    "namespace": NAMESPACE,
                    "labels": {"argocd.argoproj.io/secret-type": "cluster"},
                },
                "stringData": {
                    "name": CLUSTER_NAME,
                    "server": self.apiserver_url,
                    "config": json.dumps({"tlsClientConfig": tls}),
                },
            },
        ]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jetstream_devtools.argocd build`: build Argo CD into the cache."""
    parser = argparse.ArgumentParser(
        prog="python -m jetstream_devtools.argocd", description=__doc__
    )
    parser.add_argument("command", choices=["build", "relay"], help="build Argo CD; or relay")
    parser.add_argument("args", nargs="*", help="relay: NETNS PORT...")
    args = parser.parse_args(argv)
    if args.command == "relay":
        forward_into_netns(args.args[0], [int(port) for port in args.args[1:]])
        return 0
    try:
        ensure_packages()
        print(ensure_argocd())
    except (ArgoCDBuildError, ArgoCDUnavailable) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
