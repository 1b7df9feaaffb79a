"""The end-to-end suite pointed at an existing cluster, as a user with a kind cluster would.

The "existing cluster" here is a kube-apiserver and nats-server this test starts itself; the
suite under test only gets JETSTREAM_OPERATOR_E2E_KUBECONFIG and ..._NATS_URL, so it takes the
same path it would for any cluster: no servers of its own, the operator run from this checkout
against them, and the tests that kill or restart servers skipped with a reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.figures import apiserver_writes
from jetstream_devtools.natsserver import NatsServer
from tests.support.targets import KUBECONFIG_VARIABLE, LOCAL_ONLY_REASON, NATS_URL_VARIABLE

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.local_servers]


@pytest.fixture
def existing_cluster(tmp_path: Path) -> Iterator[tuple[ControlPlane, NatsServer]]:
    plane, server = ControlPlane(tmp_path / "cluster"), NatsServer(tmp_path / "nats")
    try:
        plane.start()
        server.start()
        yield plane, server
    finally:
        server.stop()
        plane.stop()


def test_suite_runs_against_an_existing_cluster(
    existing_cluster: tuple[ControlPlane, NatsServer], tmp_path: Path
) -> None:
    plane, server = existing_cluster
    environment = {
        **os.environ,
        KUBECONFIG_VARIABLE: str(plane.kubeconfig),
        NATS_URL_VARIABLE: server.url,
    }
    selected = [
        "tests/integration/test_stream_lifecycle.py",
        "tests/integration/test_consumers.py::test_consumer_deleted_out_of_band_is_recreated",
        "tests/integration/test_faults.py",
        "tests/integration/test_stream_cluster.py",
    ]
    before = apiserver_writes(plane.url, plane.ssl_context(), resources=("namespaces",))
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", *selected],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output[-5000:]
    summary = re.search(r"(\d+) passed, (\d+) skipped", output)
    assert summary, output[-2000:]
    passed, skipped = int(summary[1]), int(summary[2])
    assert passed >= 5, output[-2000:]
    # Everything that kills, restarts or needs a local 3-node cluster was skipped, and said why.
    assert skipped >= 5 and output.count(LOCAL_ONLY_REASON) >= 1, output[-2000:]
    # The suite used the given servers and started none of its own: the only kube-apiserver it
    # reached is this test's, which served a namespace for each test that ran, by its own count.
    # (The namespaces themselves are deleted after each test, and may be gone by now.)
    after = apiserver_writes(plane.url, plane.ssl_context(), resources=("namespaces",))
    made = after["POST namespaces"] - before["POST namespaces"]
    assert made >= passed, (before, after)
