"""A real one-node cluster for the image tests, started by the project's own code.

Module-scoped, since one node runs per machine at a time (`dev up --node` tests follow):
containerd, kubelet, kube-scheduler, kube-proxy and a control plane serving the pod bridge's
gateway, the image built from this checkout loaded into containerd, and a NATS that pods reach
at the same address. Skipped, with the reason, where the container set-up cannot run.
"""

from __future__ import annotations

import atexit
from collections.abc import Iterator

import pytest

from jetstream_devtools.containers import Docker
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.node import NODE_ADDRESS, Node
from tests.conftest import register_logs


@pytest.fixture(scope="module")
def node(
    docker: Docker, operator_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    cluster = Node(tmp_path_factory.mktemp("node"))
    register_logs("node", cluster.logs())
    atexit.register(cluster.stop)
    try:
        cluster.start(docker)
        cluster.load_image(docker, operator_image)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def node_nats(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """NATS on the node's address, so both this machine and the pods reach it."""
    server = NatsServer(tmp_path_factory.mktemp("node-nats"), host=NODE_ADDRESS)
    register_logs("node_nats", server.logs())
    atexit.register(server.stop)
    try:
        server.start()
        yield server
    finally:
        server.stop()
