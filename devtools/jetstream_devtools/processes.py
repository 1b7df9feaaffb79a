"""Server child processes: start with a log file, wait for readiness, stop for sure.

Shared by the control plane and NATS helpers, and by `dev down`, which stops processes that a
different Python process started; `ProcessRecord` carries enough to verify a pid still belongs
to the binary we started before signalling it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_STOP_TIMEOUT = 15.0


class ProcessDied(RuntimeError):
    """A server exited while we waited for it; the message has its log tail."""


@dataclass(frozen=True)
class ProcessRecord:
    """What is needed to find, verify and stop a detached server from another process."""

    name: str
    pid: int
    executable: str
    start_ticks: int
    log_file: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            executable=str(data["executable"]),
            start_ticks=int(data["start_ticks"]),
            log_file=str(data["log_file"]),
        )

    def is_running(self) -> bool:
        """True only if the pid is alive, not a zombie, and still the process we started."""
        return _process_identity(self.pid) == (self.executable, self.start_ticks)


def _process_identity(pid: int) -> tuple[str, int] | None:
    """(executable, start time in clock ticks) of a live, non-zombie pid, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        executable = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    # The command name (field 2) may contain spaces; the fields after it are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return executable.removesuffix(" (deleted)"), int(fields[19])


def terminate(record: ProcessRecord, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
    """SIGTERM, wait, SIGKILL a recorded process; a pid reused by something else is left alone."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not record.is_running():
            _reap(record.pid)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signum)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap(record.pid)
            if not record.is_running():
                return
            time.sleep(0.05)
    raise TimeoutError(f"{record.name} (pid {record.pid}) survived SIGKILL")


def _reap(pid: int) -> None:
    """Collect the exit status if the pid is our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class ManagedProcess:
    """One server binary as a child in its own session, output appended to a log file.

    Its own session means Ctrl-C in the terminal does not hit it and it can outlive us (`dev up`).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_file: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_file = log_file
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} starting {self.name} ===\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def record(self) -> ProcessRecord:
        """A record for `terminate` in another process; only valid while running."""
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        identity = _process_identity(self._process.pid)
        if identity is None:
            raise ProcessDied(f"{self.name} is not running:\n{self.tail()}")
        return ProcessRecord(
            self.name, self._process.pid, identity[0], identity[1], str(self.log_file)
        )

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """SIGTERM (graceful: servers flush and close), then SIGKILL if it lingers."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL: no chance to flush, as in a node crash."""
        self._signal(signal.SIGKILL, DEFAULT_STOP_TIMEOUT)

    def _signal(self, signum: int, timeout: float) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signum)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def exited(self) -> bool:
        """True if it was started and has exited since (as opposed to never started)."""
        return self._process is not None and self._process.poll() is not None

    def tail(self, lines: int = 60) -> str:
        return tail(self.log_file, lines)

    def wait_until(self, probe: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `probe` until true; fail early with the log tail if the process dies."""
        deadline = time.monotonic() + timeout
        while True:
            if self.exited():
                assert self._process is not None
                raise ProcessDied(
                    f"{self.name} exited with {self._process.returncode} before {what}:\n"
                    f"{self.tail()}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no {what} within {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.1)

    def log_says_address_in_use(self) -> bool:
        """Whether a failed start was a port race (cheap to retry with new ports)."""
        return "address already in use" in self.tail(20).lower()


def tail(path: Path, lines: int = 60) -> str:
    """The last lines of a log file, or an empty string if it does not exist."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def http_get(
    url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, b"") when nothing answers, so probes can simply poll."""
    return http_request(url, context, timeout=timeout)


def http_request(
    url: str,
    context: ssl.SSLContext | None = None,
    *,
    method: str = "GET",
    json_body: Any = None,
    timeout: float = 2.0,
) -> tuple[int, bytes]:
    """(status, body) of one request; (0, b"") when nothing answers.

    Proxies from the environment are ignored: every server here is on loopback.
    """
    data = None if json_body is None else json.dumps(json_body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(request, timeout=timeout) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()
    except (OSError, ssl.SSLError):
        return 0, b""
