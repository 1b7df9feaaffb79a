"""`dev up | status | down`: a control plane and NATS that outlive the command that started them.

The servers run detached (own session, output to log files); `state.json` records each pid
with its executable and start time, so `down` from any later process stops exactly those
processes and never a stranger that reused a pid. Printing is left to the CLI.

With `auth="jwt"` NATS runs in operator mode (decentralized JWT auth): the keys stay in the state
dir, and the operator's signing key and the system user's .creds are also put in Secrets, as a
platform team would for NatsAccounts.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from jetstream_operator.marks import CONNECTION_SECRET_LABEL

from .containers import Docker
from .controlplane import ControlPlane
from .natsserver import NatsCluster, NatsServer
from .node import NODE_ADDRESS, NODE_NAME, Node, cleanup_host, remove_containers
from .paths import LOOPBACK, file_lock
from .processes import ProcessRecord, http_get, terminate

if TYPE_CHECKING:  # natsauth needs the nkeys package, which only operator mode does
    from .natsauth import OperatorKeys

STATE_FILE = "state.json"
DEV_IMAGE = "jetstream-operator:dev"
LOCK_FILE = ".lock"
AUTH_MODES = ("none", "jwt")
"""NATS without auth, or in operator mode (accounts and users as JWTs)."""
KEYS_FILE = "operator-keys.json"
SIGNING_KEY_FILE = "operator-signing-key.seed"
SYSTEM_CREDS_FILE = "system.creds"
DEFAULT_CREDS_FILE = "default.creds"
AUTH_NAMESPACE = "jetstream-operator-system"
SIGNING_KEY_SECRET = "nats-operator-signing-key"
SYSTEM_USER_SECRET = "nats-system-user"


@dataclass(frozen=True)
class DevState:
    """Everything a person (or `down`) needs to use and later stop the environment."""

    state_dir: Path
    kubeconfig: Path
    api_url: str
    ca_file: Path
    client_cert: Path
    client_key: Path
    etcd_url: str
    nats_url: str
    nats_urls: list[str]
    cluster: bool
    processes: list[ProcessRecord]
    health_urls: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    # With a node (`dev up --node`): the image built from the checkout and loaded into it.
    node_image: str = ""
    # "jwt": NATS in operator mode, its keys in the state dir (`operator_files`).
    auth: str = "none"

    @property
    def operator_files(self) -> dict[str, Path]:
        """The operator mode's secret files by what the CLI exports them as; empty without."""
        if self.auth != "jwt":
            return {}
        return {
            "NATS_SYSTEM_CREDS": self.state_dir / SYSTEM_CREDS_FILE,
            "NATS_OPERATOR_SIGNING_KEY": self.state_dir / SIGNING_KEY_FILE,
            # The operator's default connection: a user of the default account.
            "JETSTREAM_OPERATOR_NATS_CREDS_FILE": self.state_dir / DEFAULT_CREDS_FILE,
        }

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "api_url": self.api_url,
            "ca_file": str(self.ca_file),
            "client_cert": str(self.client_cert),
            "client_key": str(self.client_key),
            "etcd_url": self.etcd_url,
            "nats_url": self.nats_url,
            "nats_urls": self.nats_urls,
            "cluster": self.cluster,
            "processes": [record.to_dict() for record in self.processes],
            "health_urls": self.health_urls,
            "started_at": self.started_at,
            "node_image": self.node_image,
            "auth": self.auth,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DevState:
        data = json.loads(text)
        return cls(
            state_dir=Path(data["state_dir"]),
            kubeconfig=Path(data["kubeconfig"]),
            api_url=str(data["api_url"]),
            ca_file=Path(data["ca_file"]),
            client_cert=Path(data["client_cert"]),
            client_key=Path(data["client_key"]),
            etcd_url=str(data["etcd_url"]),
            nats_url=str(data["nats_url"]),
            nats_urls=[str(url) for url in data["nats_urls"]],
            cluster=bool(data["cluster"]),
            processes=[ProcessRecord.from_dict(item) for item in data["processes"]],
            health_urls={str(k): str(v) for k, v in data.get("health_urls", {}).items()},
            started_at=float(data.get("started_at", 0.0)),
            node_image=str(data.get("node_image", "")),
            auth=str(data.get("auth", "none")),
        )


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    pid: int
    alive: bool
    healthy: bool
    log_file: str


@dataclass(frozen=True)
class DevStatus:
    """Liveness and health of each recorded process; `state` is None when nothing is up."""

    state: DevState | None
    processes: list[ProcessStatus]

    @property
    def healthy(self) -> bool:
        return (
            self.state is not None
            and bool(self.processes)
            and all(p.alive and p.healthy for p in self.processes)
        )

    def describe(self) -> str:
        if self.state is None:
            return "dev environment: not running"
        overall = "healthy" if self.healthy else "DEGRADED (run `dev down`, then `dev up`)"
        lines = [
            f"dev environment: {overall}",
            f"  kubeconfig: {self.state.kubeconfig}",
            f"  api server: {self.state.api_url}",
            f"  nats:       {self.state.nats_url}",
        ]
        if self.state.node_image:
            lines.append(f"  node:       {NODE_NAME}, image {self.state.node_image} loaded")
        if self.state.auth == "jwt":
            lines.append(f"  nats auth:  operator mode, keys in {self.state.state_dir}")
        for process in self.processes:
            state = "healthy" if process.healthy else ("unhealthy" if process.alive else "dead")
            lines.append(
                f"  {process.name:<24} pid {process.pid:<8} {state:<9} log {process.log_file}"
            )
        return "\n".join(lines)


def load_state(state_dir: Path) -> DevState | None:
    try:
        return DevState.from_json((state_dir / STATE_FILE).read_text())
    except FileNotFoundError:
        return None


def up(
    state_dir: Path,
    *,
    with_cluster: bool = False,
    node_image_context: Path | None = None,
    timeout: float = 180.0,
    auth: str = "none",
) -> DevState:
    """Start (or find already running) a control plane and NATS, detached from this process.

    With `node_image_context` (a checkout with the Dockerfile) it is a one-node cluster instead:
    Docker set up, the image built from that checkout and loaded into the node, NATS on the
    node's address so pods reach it.

    With `auth="jwt"`, NATS runs in operator mode with new keys, and the Secrets of
    `publish_operator_secrets` are (re)made in the API server.
    """
    if auth not in AUTH_MODES:
        raise ValueError(f"unknown auth {auth!r}; known: {', '.join(AUTH_MODES)}")
    if with_cluster and node_image_context is not None:
        raise ValueError("a node's pods reach one NATS on the node's address, not a cluster")
    state_dir = state_dir.resolve()
    with _locked(state_dir):
        existing = load_state(state_dir)
        if existing is not None:
            same_shape = (
                existing.cluster == with_cluster
                and bool(existing.node_image) == bool(node_image_context)
                and existing.auth == auth
            )
            if same_shape and _status(existing).healthy:
                publish_operator_secrets(existing)  # back if someone deleted them
                return existing
            _stop_recorded(existing)  # half dead or another shape: start over cleanly
        _clear(state_dir)
        keys = _new_keys(state_dir) if auth == "jwt" else None
        docker: Docker | None = None
        if node_image_context is not None:
            docker = Docker()
            plane: ControlPlane | Node = Node(state_dir / "node")
            nats_host = NODE_ADDRESS
        else:
            plane = ControlPlane(state_dir / "controlplane")
            nats_host = LOOPBACK
        nats: NatsServer | NatsCluster = (
            NatsCluster(state_dir / "nats", operator_keys=keys)
            if with_cluster
            else NatsServer(state_dir / "nats", host=nats_host, operator_keys=keys)
        )
        try:
            image = ""
            if isinstance(plane, Node):
                assert docker is not None and node_image_context is not None
                docker.start()
                docker.ensure_base_image()
                image = DEV_IMAGE
                docker.build(node_image_context, image)
                plane.start(docker, timeout)
                plane.load_image(docker, image)
            else:
                plane.start(timeout)
            nats.start(timeout)
            state = _state_of(state_dir, plane, nats, docker, image, auth)
            publish_operator_secrets(state)
            _write_atomically(state_dir / STATE_FILE, state.to_json())
        except BaseException:
            nats.stop()
            plane.stop()
            if docker is not None:
                docker.stop()
            raise
        return state


def status(state_dir: Path) -> DevStatus:
    state = load_state(state_dir.resolve())
    return DevStatus(None, []) if state is None else _status(state)


def down(state_dir: Path) -> list[str]:
    """Stop every recorded process, wait for each to exit, remove the state dir's runtime data.

    Returns the names of the processes that were still running and got stopped.
    """
    state_dir = state_dir.resolve()
    if not state_dir.exists():
        return []
    with _locked(state_dir):
        state = load_state(state_dir)
        stopped = [] if state is None else _stop_recorded(state)
        _clear(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)
    return stopped


def _state_of(
    state_dir: Path,
    plane: ControlPlane | Node,
    nats: NatsServer | NatsCluster,
    docker: Docker | None,
    image: str,
    auth: str,
) -> DevState:
    nodes = nats.nodes if isinstance(nats, NatsCluster) else [nats]
    control_plane = plane.control_plane if isinstance(plane, Node) else plane
    health_urls = plane.health_urls()
    health_urls.update({node.name: f"{node.monitor_url}/healthz" for node in nodes})
    engine = [] if docker is None else [record for record in [docker.record()] if record]
    return DevState(
        state_dir=state_dir,
        kubeconfig=control_plane.kubeconfig,
        api_url=control_plane.url,
        ca_file=control_plane.ca_file,
        client_cert=control_plane.pki.admin_cert,
        client_key=control_plane.pki.admin_key,
        etcd_url=control_plane.etcd_url,
        nats_url=nats.url,
        nats_urls=[node.url for node in nodes],
        cluster=isinstance(nats, NatsCluster),
        processes=engine + plane.records() + [node.record() for node in nodes],
        health_urls=health_urls,
        started_at=time.time(),
        node_image=image,
        auth=auth,
    )


def auth_exports(state: DevState) -> list[str]:
    """The lines `dev up` prints for operator mode, after its other exports."""
    if not state.operator_files:
        return []
    lines = [f"export {name}={path}" for name, path in state.operator_files.items()]
    # The operator run beside it finds the Secrets NatsAccounts name in its "own" namespace.
    lines.append(f"export JETSTREAM_OPERATOR_OWN_NAMESPACE={AUTH_NAMESPACE}")
    lines.append(
        f"# Secrets in namespace {AUTH_NAMESPACE}: {SIGNING_KEY_SECRET} (key seed), "
        f"{SYSTEM_USER_SECRET} (key user.creds)"
    )
    return lines


def _new_keys(state_dir: Path) -> OperatorKeys:
    """Fresh keys, kept in the state dir (owner-only) for `dev up` again and for people."""
    from .natsauth import OperatorKeys, write_secret

    keys = OperatorKeys.generate()
    write_secret(state_dir / KEYS_FILE, keys.to_json())
    write_secret(state_dir / SIGNING_KEY_FILE, keys.signing_seed + "\n")
    write_secret(state_dir / SYSTEM_CREDS_FILE, keys.system_creds())
    write_secret(state_dir / DEFAULT_CREDS_FILE, keys.default_creds())
    return keys


def publish_operator_secrets(state: DevState) -> None:
    """The operator's signing key and the system user's .creds (the state dir's files, byte for
    byte) as Secrets a NatsAccount and a ClusterNatsConnection name, labelled so connections
    may read them. Nothing without operator mode."""
    if state.auth != "jwt":
        return
    seed = (state.state_dir / SIGNING_KEY_FILE).read_text().strip()
    creds = (state.state_dir / SYSTEM_CREDS_FILE).read_text()
    api_client = config.new_client_from_config(str(state.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        core = client.CoreV1Api(api_client)
        try:
            core.create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=AUTH_NAMESPACE))
            )
        except ApiException as error:
            if error.status != 409:
                raise
        secrets = {SIGNING_KEY_SECRET: {"seed": seed}, SYSTEM_USER_SECRET: {"user.creds": creds}}
        for name, data in secrets.items():
            _apply_secret(core, name, data)
    finally:
        api_client.close()


def _apply_secret(core: client.CoreV1Api, name: str, data: dict[str, str]) -> None:
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=name, namespace=AUTH_NAMESPACE, labels={CONNECTION_SECRET_LABEL: "true"}
        ),
        string_data=data,
        type="Opaque",
    )
    try:
        core.create_namespaced_secret(AUTH_NAMESPACE, secret)
    except ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_secret(name, AUTH_NAMESPACE, secret)


def _status(state: DevState) -> DevStatus:
    processes = []
    for record in state.processes:
        alive = record.is_running()
        url = state.health_urls.get(record.name)
        healthy = alive  # dockerd and containerd answer on unix sockets only: alive is healthy
        if alive and url:
            healthy = (
                http_get(url, _tls_context(state) if url.startswith("https:") else None)[0] == 200
            )
        processes.append(ProcessStatus(record.name, record.pid, alive, healthy, record.log_file))
    return DevStatus(state, processes)


def _tls_context(state: DevState) -> ssl.SSLContext | None:
    try:
        context = ssl.create_default_context(cafile=str(state.ca_file))
        context.load_cert_chain(str(state.client_cert), str(state.client_key))
    except OSError:
        return None  # files gone: the probe then fails, reporting the apiserver unhealthy
    return context


def _stop_recorded(state: DevState) -> list[str]:
    """Clients first (NATS, node, apiserver), etcd and dockerd last, each verified first.

    A node's containers go while its containerd still runs; its mounts, links and iptables
    rules once everything is stopped.
    """
    stopped = []
    for record in reversed(state.processes):
        if record.is_running():
            if record.name == "containerd":
                remove_containers()
            terminate(record)
            stopped.append(record.name)
    if state.node_image:
        cleanup_host(state.state_dir / "node")
    return stopped


def _clear(state_dir: Path) -> None:
    """Remove runtime data (stores, logs, certs, state) but keep the lock file we hold."""
    for entry in state_dir.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _locked(state_dir: Path) -> AbstractContextManager[None]:
    """Two `dev up` at once (e.g. `make run` twice) must not start two environments."""
    return file_lock(state_dir / LOCK_FILE)


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)
