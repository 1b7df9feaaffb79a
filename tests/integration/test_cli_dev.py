"""`jetstream-operator dev up|status|down`, run the way a person runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from jetstream_devtools.containers import Docker
from jetstream_devtools.node import NODE_ADDRESS, NODE_NAME, POD_BRIDGE, ctr
from jetstream_devtools.processes import ProcessRecord

from .helpers import new_client, present

pytestmark = [pytest.mark.integration, pytest.mark.local_servers]
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetstream_operator.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_dev_up_installs_crds_prints_exports_and_down_leaves_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "dev"
    up = cli("dev", "up", "--state-dir", str(state_dir))
    assert up.returncode == 0, up.stderr
    try:
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in up.stdout.splitlines()
            if line.startswith("export ")
        )
        assert exports["NATS_URL"].startswith("nats://127.0.0.1:")
        api = new_client(exports["KUBECONFIG"])
        names = {
            present(crd.metadata).name
            for crd in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        }
        assert "streams.jetstream-operator.io" in names
        assert cli("dev", "status", "--state-dir", str(state_dir)).returncode == 0
        records = [
            ProcessRecord.from_dict(item)
            for item in json.loads((state_dir / "state.json").read_text())["processes"]
        ]
        assert records and all(record.is_running() for record in records)
    finally:
        down = cli("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not any(record.is_running() for record in records)
    assert cli("dev", "status", "--state-dir", str(state_dir)).returncode == 1


@pytest.mark.node
def test_dev_up_node_runs_a_ready_node_with_the_image_and_down_leaves_nothing(
    tmp_path: Path, docker: Docker
) -> None:
    """`dev up --node`: a Ready node with the image loaded; `dev down` removes it all."""
    state_dir = tmp_path / "dev"
    up = cli("dev", "up", "--node", "--image-context", str(ROOT), "--state-dir", str(state_dir))
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads((state_dir / "state.json").read_text())
        records = [ProcessRecord.from_dict(item) for item in state["processes"]]
        names = {record.name for record in records}
        assert {"containerd", "kubelet", "kube-scheduler", "kube-proxy", "nats-0"} <= names
        status = cli("dev", "status", "--state-dir", str(state_dir))
        assert status.returncode == 0, status.stdout
        assert state["nats_url"].startswith(f"nats://{NODE_ADDRESS}:")
        api = new_client(state["kubeconfig"])
        node = client.CoreV1Api(api).read_node(NODE_NAME)
        conditions = present(present(node.status).conditions)
        assert any(c.type == "Ready" and c.status == "True" for c in conditions)
        # In the node's containerd (the kubelet lists it in the Node's status only later).
        assert "docker.io/library/jetstream-operator:dev" in ctr("images", "list", "--quiet")
    finally:
        down = cli("dev", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr
    assert not any(record.is_running() for record in records)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert POD_BRIDGE not in links.stdout
    assert str(state_dir) not in Path("/proc/self/mounts").read_text()
