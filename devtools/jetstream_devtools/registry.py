"""A real OCI registry on loopback: the CNCF Distribution registry, built from its Go module
(`gobuild`, REGISTRY_VERSION), storing on disk under its work directory, plain HTTP (clients
treat 127.0.0.1 registries as insecure-allowed: docker, helm `--plain-http`, containerd with a
hosts.toml). The release pushes the image and the chart to it; the test node pulls from it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from .gobuild import ensure_tools
from .paths import LOOPBACK, free_port
from .processes import ManagedProcess, http_get


class Registry:
    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self._process: ManagedProcess | None = None

    @property
    def host(self) -> str:
        """host:port, as image references and `oci://` chart references name it."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "registry.log"

    def config(self) -> str:
        """The registry's configuration (YAML; JSON is YAML)."""
        return json.dumps(
            {
                "version": 0.1,
                "log": {"level": "info"},
                "storage": {
                    "filesystem": {"rootdirectory": str(self.workdir / "data")},
                    "delete": {"enabled": True},
                },
                "http": {"addr": self.host, "secret": secrets.token_hex(16)},
            },
            indent=2,
        )

    def start(self, timeout: float = 30.0) -> None:
        binary = ensure_tools(["registry"])["registry"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.yml"
        config.write_text(self.config())
        self._process = ManagedProcess(
            "registry", [str(binary), "serve", str(config)], self.log_file
        )
        self._process.start()
        self._process.wait_until(
            lambda: http_get(f"http://{self.host}/v2/")[0] == 200, timeout, "/v2/ answering"
        )

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds for a repository (the distribution API's tag list)."""
        status, body = http_get(f"http://{self.host}/v2/{repository}/tags/list")
        if status != 200:
            return []
        return list(json.loads(body).get("tags") or [])
