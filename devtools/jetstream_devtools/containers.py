"""Docker from Debian's packages, started by hand, and the base image made locally.

Nothing can be pulled here (no registry answers) and CI starts on a fresh machine, so this
module does the whole set-up the image build needs: `apt-get install` the engines, start
`dockerd` (no systemd) with its data in the cache, and make the base image the Dockerfile's
FROM names with `debootstrap` from apt's own Debian mirror, trusting the host's CA bundle
(HTTPS may be re-signed by a CA that only the host trusts; pip inside the build needs it).
The Dockerfile then builds unchanged, as a user builds it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TextIO

from .paths import cache_root, file_lock, project_version
from .processes import ManagedProcess, ProcessRecord

APT_PACKAGES = (
    "docker.io",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "debootstrap",
    "iptables",
)
CNI_BIN_DIR = Path("/usr/lib/cni")
# The Debian client that matches the Debian daemon (PATH may hold a newer, mismatched one).
DOCKER_CLI = Path("/usr/bin/docker")
# Unix socket paths are limited to 108 bytes, so runtime state lives under /run, not the cache.
RUN_DIR = Path("/run/jetstream-operator")
DOCKER_SOCKET = RUN_DIR / "docker.sock"
BASE_IMAGE = "python:3.11-slim-bookworm"
DEBIAN_SUITE = "bookworm"
# What the base needs for the Dockerfile: `python` with venv, and a CA bundle for pip.
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_REQUIRED = (
    Path("/usr/sbin/dockerd"),
    DOCKER_CLI,
    Path("/usr/bin/containerd"),
    Path("/usr/sbin/runc"),
    Path("/usr/sbin/debootstrap"),
    CNI_BIN_DIR / "bridge",
    CNI_BIN_DIR / "host-local",
    CNI_BIN_DIR / "loopback",
)


class EngineUnavailable(RuntimeError):
    """The container set-up cannot run on this machine; the message says exactly why."""


def ensure_packages() -> None:
    """Install Debian's docker.io, containerd, runc, CNI plugins and debootstrap if missing."""
    if all(path.exists() for path in _REQUIRED):
        return
    if os.geteuid() != 0:
        raise EngineUnavailable("installing docker.io/containerd with apt-get needs root")
    if shutil.which("apt-get") is None:
        raise EngineUnavailable("no apt-get: the container engines install from Debian packages")
    with _lock("apt"):
        if all(path.exists() for path in _REQUIRED):
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *APT_PACKAGES],
        ):
            _check(command, env=env, timeout=900)
    missing = [str(path) for path in _REQUIRED if not path.exists()]
    if missing:
        raise EngineUnavailable(f"apt-get ran, yet these are still missing: {missing}")


class Docker:
    """A `dockerd` of our own: socket under /run, images and build cache under the cache root.

    If one is already answering on the socket (an earlier run left it, or `dev up` runs), it is
    used and left alone; a daemon we start is stopped by `stop()`.
    """

    def __init__(self) -> None:
        self.data_root = cache_root() / "docker"
        self.log_file = cache_root() / "docker" / "dockerd.log"
        self._process: ManagedProcess | None = None
        self._users: TextIO | None = None

    @property
    def host(self) -> str:
        return f"unix://{DOCKER_SOCKET}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "0"}

    def cli(
        self, *args: str, input_file: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run the Debian docker client against our daemon; the caller checks the result."""
        stdin = input_file.open("rb") if input_file is not None else subprocess.DEVNULL
        try:
            return subprocess.run(
                [str(DOCKER_CLI), *args],
                env=self.env(),
                stdin=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        finally:
            if input_file is not None:
                stdin.close()  # type: ignore[union-attr]

    def answering(self) -> bool:
        return DOCKER_SOCKET.exists() and self.cli("version", timeout=30).returncode == 0

    def start(self, timeout: float = 120.0) -> None:
        """Install the packages if needed and start dockerd unless one already answers."""
        if os.geteuid() != 0:
            raise EngineUnavailable("dockerd, containerd and the node's network need root")
        ensure_packages()
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        if self._users is None:
            # Every user holds this shared; whoever started the daemon stops it only once it
            # is the last (two test sessions on one machine share one dockerd).
            self._users = (RUN_DIR / "docker.users").open("a")
            fcntl.flock(self._users, fcntl.LOCK_SH)
        if self.answering():
            return
        self.data_root.mkdir(parents=True, exist_ok=True)
        self._process = ManagedProcess(
            "dockerd",
            [
                "/usr/sbin/dockerd",
                f"--host={self.host}",
                f"--data-root={self.data_root}",
                f"--exec-root={RUN_DIR / 'docker-exec'}",
                f"--pidfile={RUN_DIR / 'docker.pid'}",
                # No bridge, NAT or iptables rules of Docker's own on this machine: containers here
                # only build (on the host's network, to reach PyPI) and run commands.
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--storage-driver=overlay2",
            ],
            self.log_file,
            env={**os.environ, "PATH": f"/usr/sbin:/usr/bin:/sbin:/bin:{os.environ['PATH']}"},
        )
        self._process.start()
        self._process.wait_until(self.answering, timeout, "an answering docker socket")

    def stop(self, wait_for_others: float = 1800.0) -> None:
        """Stop the daemon if we started it, once no other user holds it (or after a while)."""
        users, self._users = self._users, None
        if users is None:
            return
        with users:
            fcntl.flock(users, fcntl.LOCK_UN)
            if self._process is None:
                return
            deadline = time.monotonic() + wait_for_others
            while True:
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(1)
            self._process.stop(timeout=30)
            self._process = None

    def record(self) -> ProcessRecord | None:
        """The daemon we started (for `dev down`), or None if we reuse another's."""
        return self._process.record() if self._process is not None else None

    def image_exists(self, tag: str) -> bool:
        return self.cli("image", "inspect", tag, timeout=60).returncode == 0

    def ensure_base_image(self, tag: str = BASE_IMAGE) -> None:
        """Make `tag` from `debootstrap` unless it exists (it persists in the data root)."""
        if self.image_exists(tag):
            return
        with _lock("base-image"):
            if self.image_exists(tag):
                return
            started = time.monotonic()
            print(f"making base image {tag} with debootstrap ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache_root()) as scratch:
                rootfs = Path(scratch) / "rootfs"
                _debootstrap(rootfs)
                self.import_rootfs(rootfs, tag, "ENV LANG=C.UTF-8", 'CMD ["python3"]')
            elapsed = time.monotonic() - started
            print(f"made base image {tag} in {elapsed:.0f}s", file=sys.stderr, flush=True)

    def import_rootfs(self, rootfs: Path, tag: str, *changes: str) -> None:
        """An image of one layer holding `rootfs` (`docker import`), with Dockerfile `changes`."""
        tarball = rootfs.with_name(f"{rootfs.name}.tar")
        try:
            _check(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], timeout=600)
            options = [item for change in changes for item in ("--change", change)]
            imported = self.cli("import", *options, "-", tag, input_file=tarball)
            if imported.returncode != 0:
                raise RuntimeError(f"docker import {tag} failed: {imported.stderr[-2000:]}")
        finally:
            tarball.unlink(missing_ok=True)

    def build(self, context: Path, tag: str, *build_args: str, timeout: float = 1800) -> None:
        """`docker build` as a user runs it (on the host's network, as the daemon has no bridge);
        raises with the output tail on failure. A context with a pyproject.toml gets its
        version as VERSION (the image's version label)."""
        version = project_version(context)
        if version is not None:
            build_args = (f"VERSION={version}", *build_args)
        args = [item for arg in build_args for item in ("--build-arg", arg)]
        built = self.cli(
            "build", "--network=host", "--tag", tag, *args, str(context), timeout=timeout
        )
        if built.returncode != 0:
            raise RuntimeError(f"docker build failed:\n{(built.stdout + built.stderr)[-4000:]}")
        # Earlier builds are left untagged, and so is the build stage, which is the cache of the
        # next build (the pip layer): drop only what no build used for a day.
        self.cli("image", "prune", "--force", "--filter", "until=24h")

    def save(self, tag: str, destination: Path) -> Path:
        """The image as a tarball (for `ctr images import` into a node's containerd)."""
        saved = self.cli("save", "--output", str(destination), tag)
        if saved.returncode != 0:
            raise RuntimeError(f"docker save {tag} failed: {saved.stderr[-2000:]}")
        return destination


def apt_mirror(suite: str = DEBIAN_SUITE) -> str:
    """The Debian mirror apt is configured with (deb822 .sources or one-line sources.list)."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for stanza in path.read_text().split("\n\n"):
            lines = [line for line in stanza.splitlines() if re.match(r"^[A-Za-z-]+:", line)]
            fields = dict(line.split(":", 1) for line in lines)
            uris = fields.get("URIs", "").split()
            suites = fields.get("Suites", "").split()
            if uris and suite in suites:
                return uris[0]
    one_line = [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*.list")]
    for path in one_line:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            match = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if match and match[2] == suite:
                return match[1]
    raise EngineUnavailable(f"no Debian mirror for {suite} in apt's sources")


def _debootstrap(rootfs: Path) -> None:
    """A minimal bookworm with Python 3.11 that trusts the host's CAs, apt caches dropped."""
    _check(
        [
            "/usr/sbin/debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            DEBIAN_SUITE,
            str(rootfs),
            apt_mirror(),
        ],
        timeout=1200,
    )
    # The host's bundle holds the CA that re-signs HTTPS here; pip uses it through pip.conf.
    shutil.copyfile(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
    (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    # As the official slim images: no apt caches, documentation or translations.
    for leftovers in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        for entry in (rootfs / leftovers).glob("*"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    for entry in (rootfs / "usr/share/locale").glob("*"):
        if entry.is_dir() and entry.name != "locale.alias":
            shutil.rmtree(entry)


def _check(command: Sequence[str], *, env: dict[str, str] | None = None, timeout: float) -> None:
    result = subprocess.run(
        list(command),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}")


def _lock(name: str) -> AbstractContextManager[None]:
    """apt and the base image are machine-wide: one test session or `dev up` at a time."""
    return file_lock(cache_root() / f".{name}.lock")


def main(argv: Sequence[str] | None = None) -> int:
    """Set up the engine and base image, and build the image if asked (`make image`)."""
    parser = argparse.ArgumentParser(
        prog="python -m jetstream_devtools.containers", description=__doc__
    )
    parser.add_argument("--build", metavar="TAG", help="also build the project's image as TAG")
    parser.add_argument("--context", default=".", help="the build context (the repository)")
    args = parser.parse_args(argv)
    docker = Docker()
    try:
        docker.start()
        docker.ensure_base_image()
        if args.build:
            docker.build(Path(args.context), args.build)
            print(f"built {args.build}; DOCKER_HOST={docker.host}")
    except EngineUnavailable as error:
        print(f"cannot set up the container engine: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
