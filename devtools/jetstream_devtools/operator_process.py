"""The operator as a child process, the way tests, benchmarks and fault drills run it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .paths import free_port
from .processes import ManagedProcess, http_get


class OperatorProcess:
    """`jetstream-operator run` against a given kubeconfig and NATS, logging to a file.

    Settings are read again at every start, so a test can restart it with other ones.
    """

    def __init__(
        self,
        kubeconfig: Path,
        nats_url: str,
        log_file: Path,
        extra_env: dict[str, str] | None = None,
        verbose: bool = True,
    ) -> None:
        """`verbose` logs kopf's debug lines (whole bodies), which tests want when they fail
        and benchmarks do not want to pay for."""
        self.kubeconfig = kubeconfig
        self.verbose = verbose
        self.nats_url = nats_url
        self.log_file = log_file
        self.extra_env = dict(extra_env or {})
        self.health_port = 0
        self._process: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    def start(self, timeout: float = 60.0) -> None:
        self.health_port = free_port()
        health_url = f"http://127.0.0.1:{self.health_port}/healthz"
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "JETSTREAM_OPERATOR_NATS_URL": self.nats_url,
            # The tests and benchmarks are one team: the default connection serves every
            # namespace (a test of the selector sets its own).
            "JETSTREAM_OPERATOR_NAMESPACE_SELECTOR": "{}",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        argv = [
            sys.executable,
            "-m",
            "jetstream_operator.cli",
            "run",
            *(["--verbose"] if self.verbose else []),
            f"--liveness={health_url}",
        ]
        self._process = ManagedProcess("operator", argv, self.log_file, env)
        self._process.start()
        self._process.wait_until(
            lambda: http_get(health_url, timeout=1.0)[0] == 200, timeout, "health endpoint"
        )

    def stop(self) -> None:
        """SIGTERM, as Kubernetes does, then SIGKILL if it lingers."""
        if self._process is not None:
            self._process.stop()

    def kill(self) -> None:
        """SIGKILL: the operator gets no chance to clean up."""
        if self._process is not None:
            self._process.kill()

    def tail(self, lines: int = 60) -> str:
        return self._process.tail(lines) if self._process else ""
