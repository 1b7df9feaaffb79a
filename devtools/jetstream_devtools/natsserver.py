"""Real nats-server processes with JetStream: one node, or a cluster for replicated streams.

Each server gets a generated config file, so tests can add auth, TLS or accounts through
`extra_config` and restart with the same ports and store to exercise recovery. With
`operator_keys`, a server runs in operator mode (decentralized JWT auth, `natsauth.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .paths import LOOPBACK, free_port, nats_server_binary
from .processes import ManagedProcess, ProcessDied, ProcessRecord, http_get

if TYPE_CHECKING:
    from .natsauth import OperatorKeys

_PORT_RETRIES = 3


@dataclass(frozen=True)
class ClusterConfig:
    """The `cluster {}` block of one node: its route port and every node's route port."""

    name: str
    port: int
    route_ports: Sequence[int] = field(default_factory=tuple)


def _quote(value: str) -> str:
    return json.dumps(value)


class NatsServer:
    """One nats-server with JetStream (file store under `workdir`) on loopback."""

    def __init__(
        self,
        workdir: Path,
        *,
        name: str = "nats-0",
        port: int = 0,
        monitor_port: int = 0,
        cluster: ClusterConfig | None = None,
        extra_config: str = "",
        jetstream: bool = True,
        host: str = LOOPBACK,
        operator_keys: OperatorKeys | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.name = name
        # Clients connect here: loopback, or an address the project made for pods (`node.py`).
        self.host = host
        self.port = port
        self.monitor_port = monitor_port
        self.cluster = cluster
        # Appended verbatim to the config at every (re)start: auth, TLS, accounts, limits.
        self.extra_config = extra_config
        self.jetstream = jetstream
        # Operator mode: accounts and users are JWTs; every node keeps its own resolver dir.
        self.operator_keys = operator_keys
        self._process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{LOOPBACK}:{self.monitor_port}"

    @property
    def config_file(self) -> Path:
        return self.workdir / f"{self.name}.conf"

    @property
    def store_dir(self) -> Path:
        return self.workdir / f"{self.name}-store"

    @property
    def log_file(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def resolver_dir(self) -> Path:
        """Where this node's full resolver stores account JWTs (operator mode)."""
        return self.workdir / f"{self.name}-jwt"

    @property
    def operator_jwt_file(self) -> Path:
        return self.workdir / f"{self.name}-operator.jwt"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def logs(self) -> dict[str, Path]:
        return {self.name: self.log_file}

    def record(self) -> ProcessRecord:
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._process.record()

    def render_config(self) -> str:
        lines = [
            f"server_name: {_quote(self.name)}",
            f"listen: {_quote(f'{self.host}:{self.port}')}",
            f"http: {_quote(f'{LOOPBACK}:{self.monitor_port}')}",
        ]
        if self.jetstream:
            lines += ["jetstream {", f"  store_dir: {_quote(str(self.store_dir))}", "}"]
        if self.cluster is not None:
            routes = ", ".join(
                _quote(f"nats-route://{LOOPBACK}:{port}") for port in self.cluster.route_ports
            )
            lines += [
                "cluster {",
                f"  name: {_quote(self.cluster.name)}",
                f"  listen: {_quote(f'{LOOPBACK}:{self.cluster.port}')}",
                f"  routes: [{routes}]",
                "}",
            ]
        if self.operator_keys is not None:
            lines.append(
                self.operator_keys.server_config(self.resolver_dir, self.operator_jwt_file)
            )
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Write the config and start; with `wait`, return once `/healthz` answers 200."""
        if self.running:
            return
        auto_port, auto_monitor = self.port == 0, self.monitor_port == 0
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(_PORT_RETRIES):
            self.port = self.port or free_port()
            self.monitor_port = self.monitor_port or free_port()
            self.config_file.write_text(self.render_config())
            if self.operator_keys is not None:
                self.operator_keys.write_operator_jwt(self.operator_jwt_file)
            self._process = ManagedProcess(
                self.name,
                [str(nats_server_binary()), "--config", str(self.config_file)],
                self.log_file,
            )
            self._process.start()
            if not wait:
                return
            try:
                self.wait_healthy(timeout)
                return
            except ProcessDied:
                retry = (auto_port or auto_monitor) and attempt < _PORT_RETRIES - 1
                if not (retry and self._process.log_says_address_in_use()):
                    raise
                self.port = 0 if auto_port else self.port
                self.monitor_port = 0 if auto_monitor else self.monitor_port

    def exited(self) -> bool:
        """Started and then died (as opposed to never started or stopped by us)."""
        return self._process is not None and self._process.exited()

    def healthy(self) -> bool:
        status, _ = http_get(f"{self.monitor_url}/healthz")
        return status == 200

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Poll `/healthz` (which covers JetStream) until 200; fail early if the server died."""
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        self._process.wait_until(self.healthy, timeout, "healthy /healthz")

    def monitor(self, endpoint: str) -> dict[str, Any]:
        """A monitoring endpoint (`varz`, `jsz`, `routez`, ...) as JSON; empty if unreachable."""
        status, body = http_get(f"{self.monitor_url}/{endpoint.lstrip('/')}")
        if status != 200:
            return {}
        result: dict[str, Any] = json.loads(body)
        return result

    def stop(self) -> None:
        """SIGTERM: a clean shutdown that flushes the store."""
        if self._process is not None:
            self._process.stop()

    def kill(self) -> None:
        """SIGKILL, as in a crash; the store is recovered on the next start."""
        if self._process is not None:
            self._process.kill()

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start with the same ports, store and (current) config."""
        self.stop()
        self.start(timeout)

    def tail(self, lines: int = 60) -> str:
        return self._process.tail(lines) if self._process else ""


def _server_tags(tags: Sequence[str]) -> str:
    return f"server_tags: [{', '.join(_quote(tag) for tag in tags)}]"


class NatsCluster:
    """`size` JetStream nodes routed to each other, ready for replicated (R3) streams."""

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        *,
        name: str = "jetstream-operator",
        extra_config: str = "",
        operator_keys: OperatorKeys | None = None,
        tags: Sequence[str] = (),
    ) -> None:
        """Each node is tagged `node:<index>` besides `tags`, so that a placement can name
        one node (a stream moved from node to node, say)."""
        self.workdir = workdir.resolve()
        self.name = name
        route_ports = [free_port() for _ in range(size)]
        self.nodes = [
            NatsServer(
                self.workdir,
                name=f"nats-{index}",
                port=free_port(),
                monitor_port=free_port(),
                cluster=ClusterConfig(name, route_port, tuple(route_ports)),
                extra_config="\n".join(
                    [_server_tags([*tags, f"node:{index}"]), extra_config]
                ).strip(),
                operator_keys=operator_keys,
            )
            for index, route_port in enumerate(route_ports)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """All nodes comma-separated, the form NATS clients accept as a single setting."""
        return ",".join(self.urls)

    def logs(self) -> dict[str, Path]:
        return {node.name: node.log_file for node in self.nodes}

    def records(self) -> list[ProcessRecord]:
        return [node.record() for node in self.nodes if node.running]

    def start(self, timeout: float = 60.0) -> None:
        """Start every node, then wait until all are healthy and agree on a meta leader."""
        try:
            for node in self.nodes:
                node.start(wait=False)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Healthy nodes and a known meta leader with every peer current: R3 works at once.

        Nodes stopped on purpose (fault tests) are left out; a crashed node fails the wait.
        """
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if node.running or node.exited():
                node.wait_healthy(max(1.0, deadline - time.monotonic()))
        while not self._meta_ready():
            for node in self.nodes:
                if node.exited():
                    raise ProcessDied(f"{node.name} exited:\n{node.tail()}")
            if time.monotonic() > deadline:
                details = {
                    node.name: node.monitor("jsz").get("meta_cluster") for node in self.nodes
                }
                raise TimeoutError(f"no JetStream meta leader within {timeout:.0f}s: {details}")
            time.sleep(0.1)

    def meta_leader(self) -> str | None:
        """The meta leader's server name if every running node reports the same one."""
        leaders = {
            (node.monitor("jsz").get("meta_cluster") or {}).get("leader")
            for node in self.nodes
            if node.running
        }
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        return str(leader) if leader else None

    def _meta_ready(self) -> bool:
        leader = self.meta_leader()
        if leader is None:
            return False
        node = next(node for node in self.nodes if node.name == leader)
        meta = node.monitor("jsz").get("meta_cluster") or {}
        peers = meta.get("replicas") or []
        running = sum(1 for node in self.nodes if node.running)
        return len(peers) == running - 1 and all(
            peer.get("current") and not peer.get("offline") for peer in peers
        )

    def node(self, name: str) -> NatsServer:
        return next(node for node in self.nodes if node.name == name)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
