"""Infrastructure fixtures: real etcd, kube-apiserver and nats-server processes, one per session.

Servers start only when a test asks for them, are always stopped at the end (finally, plus an
atexit backstop for interrupted runs), and a failing test gets their log tails in its report.

With JETSTREAM_OPERATOR_E2E_KUBECONFIG and JETSTREAM_OPERATOR_E2E_NATS_URL set, the same tests
target an existing cluster and NATS instead (tests/support/targets.py); tests marked
`local_servers`, which kill or restart the servers, are then skipped.
"""

from __future__ import annotations

import atexit
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from jetstream_devtools.containers import Docker, EngineUnavailable
from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.gobuild import NODE_TOOLS, ensure_tools
from jetstream_devtools.natsserver import NatsCluster, NatsServer
from jetstream_devtools.processes import tail
from tests.support.targets import (
    LOCAL_ONLY_REASON,
    ExistingCluster,
    ExistingNats,
    existing_cluster,
    existing_target,
)

LOG_TAIL_LINES = 60
INFRA_FIXTURES = frozenset(
    {
        "control_plane",
        "kubeconfig",
        "kubectl",
        "nats_server",
        "nats_cluster",
        "process_logs",
        "node",
        "node_nats",
    }
)

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
TEST_IMAGE = "jetstream-operator:test"
# Fixtures that need the container set-up, which `pytest_collection_finish` does up front.
IMAGE_FIXTURES = frozenset({"docker", "operator_image", "node"})
_DOCKER = Docker()
# Why the image cannot be built here, if the set-up found out during collection.
_image_unavailable: list[str] = []

# fixture -> {process name: log file} for the servers each infrastructure fixture started.
_fixture_logs: dict[str, dict[str, Path]] = {}
# Extra logs registered by other fixtures (e.g. the operator); shown for every infra failure.
_process_logs: dict[str, Path] = {}


try:
    TARGET = existing_target()
except ValueError as error:
    raise pytest.UsageError(str(error)) from error


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: runs real etcd, kube-apiserver and nats-server processes"
    )
    config.addinivalue_line("markers", f"local_servers: {LOCAL_ONLY_REASON}")
    config.addinivalue_line(
        "markers", "node: runs on the project's one-node cluster unless an existing one is named"
    )
    config.addinivalue_line(
        "markers",
        "go_tools(*names): Go tools the tests run, built before the first test "
        "(jetstream_devtools.gobuild names)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if TARGET is None:
        return
    skip = pytest.mark.skip(reason=LOCAL_ONLY_REASON)
    for item in items:
        if item.get_closest_marker("local_servers") or "nats_cluster" in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing Go tools before any test runs, so a cold build never hits a test timeout:
    the control plane's, kubectl, and those a test module names with `go_tools` (promtool's
    build alone takes longer than a test may)."""
    wanted: set[str] = set()
    for item in session.items:
        names = set(getattr(item, "fixturenames", ()))
        # `local_servers` tests start their own control planes (ControlPlane, `dev up`).
        starts_servers = bool(names & {"control_plane", "kubeconfig"}) or bool(
            item.get_closest_marker("local_servers")
        )
        if starts_servers and TARGET is None:
            wanted |= {"etcd", "kube-apiserver", "kube-controller-manager"}
        if "kubectl" in names:
            wanted.add("kubectl")
        for mark in item.iter_markers("go_tools"):
            wanted.update(mark.args)
    if wanted:
        ensure_tools(sorted(wanted))
    on_node = TARGET is None and any(item.get_closest_marker("node") for item in session.items)
    if on_node:
        ensure_tools(NODE_TOOLS)
    uses_image = any(IMAGE_FIXTURES & set(getattr(i, "fixturenames", ())) for i in session.items)
    if on_node or uses_image:
        _prepare_image()


def _prepare_image() -> None:
    """Cold, this is apt-get, debootstrap and a pip download: minutes, more than a test timeout."""
    try:
        _DOCKER.start()
        atexit.register(_DOCKER.stop)
        _DOCKER.ensure_base_image()
        _DOCKER.build(REPOSITORY_ROOT, TEST_IMAGE)
    except EngineUnavailable as error:
        _image_unavailable.append(str(error))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach server log tails to failures of tests that used real processes."""
    report = yield
    used = set(getattr(item, "fixturenames", ()))
    if report.failed and INFRA_FIXTURES & used:
        logs = {
            name: path
            for fixture, fixture_logs in _fixture_logs.items()
            if fixture in used
            for name, path in fixture_logs.items()
        }
        for name, path in {**logs, **_process_logs}.items():
            text = tail(path, LOG_TAIL_LINES)
            if text:
                report.sections.append((f"{name} log (last {LOG_TAIL_LINES} lines)", text))
    return report


def register_logs(fixture: str, logs: dict[str, Path]) -> None:
    """Have these logs' tails shown when a test that used `fixture` fails."""
    _fixture_logs[fixture] = logs


@pytest.fixture(scope="session")
def process_logs() -> dict[str, Path]:
    """Register `name -> log file` here to have it shown when a test fails."""
    return _process_logs


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControlPlane | ExistingCluster]:
    if TARGET is not None:
        yield existing_cluster(TARGET.kubeconfig, tmp_path_factory.mktemp("e2e-cluster"))
        return
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    _fixture_logs["control_plane"] = plane.logs()
    atexit.register(plane.stop)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane | ExistingCluster) -> Path:
    return control_plane.kubeconfig


@pytest.fixture(scope="session")
def kubectl() -> Path:
    return ensure_tools(["kubectl"])["kubectl"]


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer | ExistingNats]:
    if TARGET is not None:
        yield ExistingNats(TARGET.nats_url)
        return
    server = NatsServer(tmp_path_factory.mktemp("nats"), name="nats")
    _fixture_logs["nats_server"] = server.logs()
    atexit.register(server.stop)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    # Every node carries "ssd", so placement by tags has somewhere to go, and its own
    # "node:<index>", so a placement can move a stream from one node to another.
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-cluster"), size=3, tags=("ssd",))
    _fixture_logs["nats_cluster"] = cluster.logs()
    atexit.register(cluster.stop)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    """Debian's docker.io, installed and started by the project's code, with the base image."""
    if _image_unavailable:
        pytest.skip(f"the image cannot be built here: {_image_unavailable[0]}")
    try:
        _DOCKER.start()
        _DOCKER.ensure_base_image()
    except EngineUnavailable as error:
        pytest.skip(f"the image cannot be built here: {error}")
    try:
        yield _DOCKER
    finally:
        _DOCKER.stop()


@pytest.fixture(scope="session")
def operator_image(docker: Docker) -> str:
    """The project's image, built from this checkout by `docker build` (cached layers if the
    collection hook built it already)."""
    docker.build(REPOSITORY_ROOT, TEST_IMAGE)
    return TEST_IMAGE
