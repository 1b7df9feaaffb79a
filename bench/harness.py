"""What every benchmark here shares (ours, NACK's, the write cost's): the servers and clients
every controller runs against, the servers' own figures (writes from kube-apiserver's /metrics,
JetStream API requests from the audit advisories, each process's CPU and memory), how objects
are applied, and where results go. Nothing here knows which controller runs, so each bench
imports it and none needs another bench."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import identities
import nats
from kubernetes import client, config

from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.figures import apiserver_writes as served_writes
from jetstream_devtools.figures import flow_control_waits
from jetstream_devtools.natsserver import NatsServer
from jetstream_operator import GROUP, VERSION
from jetstream_operator.settings import OperatorSettings

BENCH_DIR = Path(__file__).resolve().parent


RESULTS = BENCH_DIR / "results"


SETTINGS = OperatorSettings()


RESYNC_INTERVAL = SETTINGS.resync_interval
"""The operator runs with production settings; the idle figures are per resync of this."""


BACKGROUND = frozenset({"leases"})
"""Writes kube-apiserver and kube-controller-manager make on their own, whoever else runs."""


Phase = list[tuple[str, dict[str, Any]]]
"""Objects to apply 8 at a time, as (plural, body)."""


APPLY_ORDERS = ("kinds", "pairs")
"""How the N Streams and N Consumers are applied: every stream, then every consumer (as
`kubectl apply -f` of a folder with a file per kind), or each stream followed by its consumer
(a file per application)."""


def applied(
    streams: list[dict[str, Any]], consumers: list[dict[str, Any]], order: str
) -> list[Phase]:
    """The phases of applying streams and their consumers in one of `APPLY_ORDERS`."""
    if order == "pairs":
        pairs = zip(streams, consumers, strict=True)
        return [[item for s, c in pairs for item in (("streams", s), ("consumers", c))]]
    return [[("streams", body) for body in streams], [("consumers", body) for body in consumers]]


def apiserver_writes(url: str, context: Any) -> Counter[str]:
    """Writes kube-apiserver has served, as `VERB resource[/subresource]`, from its /metrics."""
    return served_writes(url, context)


def foreground(counts: Counter[str]) -> int:
    """Writes that are not the control plane's own lease renewals."""
    return sum(n for key, n in counts.items() if key.split(" ", 1)[1] not in BACKGROUND)


def writes_over(
    writes: Callable[[], Counter[str]], seconds: float, interval: float = 0.5
) -> tuple[Counter[str], float | None]:
    """The served writes after `seconds`, and when (time.monotonic) the last of those that
    are not the control plane's own was seen, sampled every `interval`: Events, too, are
    writes that follow Ready, and no watch of ours sees them."""
    end = time.monotonic() + seconds
    before = foreground(writes())
    last: float | None = None
    while True:
        time.sleep(max(0.0, min(interval, end - time.monotonic())))
        counts = writes()
        if foreground(counts) != before:
            before, last = foreground(counts), time.monotonic()
        if time.monotonic() >= end:
            return counts, last


def breakdown(counts: Counter[str], per_minute: float | None = None) -> str:
    """`PATCH streams/status 12, POST events 3` (per minute when given), largest first."""
    items = [(key, n) for key, n in counts.most_common() if n > 0]
    if not items:
        return "none"
    if per_minute is None:
        return ", ".join(f"{key} {n}" for key, n in items)
    return ", ".join(f"{key} {n * per_minute:.1f}" for key, n in items)


class ApiAudit:
    """JetStream API requests counted from the servers' own audit advisories
    ($JS.EVENT.ADVISORY.API), by request subject without the stream or consumer name."""

    def __init__(self, urls: Iterable[str], creds: str | None = None) -> None:
        """`creds`: a creds file, for a server in operator mode (the account's advisories)."""
        self.counts: Counter[str] = Counter()
        self._urls = list(urls)
        self._creds = creds
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),))
        self._thread.daemon = True
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("could not subscribe to $JS.EVENT.ADVISORY.API")

    async def _run(self) -> None:
        self._done = asyncio.Event()
        connections = [await nats.connect(url, user_credentials=self._creds) for url in self._urls]

        async def count(msg: Any) -> None:
            subject = str(json.loads(msg.data).get("subject", ""))
            tokens = subject.split(".")[2:4]  # $JS.API.STREAM.INFO.<name> -> STREAM.INFO
            self.counts[".".join(tokens)] += 1

        for connection in connections:
            await connection.subscribe("$JS.EVENT.ADVISORY.API", cb=count)
            await connection.flush()
        self._ready.set()
        await self._done.wait()
        for connection in connections:
            await connection.close()

    def snapshot(self) -> Counter[str]:
        return Counter(self.counts)

    def close(self) -> None:
        if self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(30)


def servers_cpu_seconds(
    plane: ControlPlane, nats_server: NatsServer, controllers: dict[str, int | None]
) -> Counter[str]:
    """CPU time used so far by each process of a run, the benchmark's own included (its applier
    and watch threads share the machine too)."""
    pids = {record.name: record.pid for record in plane.records()}
    pids["nats-server"] = nats_server.record().pid
    pids["benchmark"] = os.getpid()
    pids.update((name, pid) for name, pid in controllers.items() if pid is not None)
    return Counter({name: process_cpu_seconds(pid) for name, pid in pids.items()})


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and its waited-for children, 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def flow_control_delta(
    before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]
) -> dict[str, tuple[float, int]]:
    """Per priority level: (mean queue wait in ms, requests) between two readings."""
    delta = {}
    for level, (seconds, count) in after.items():
        seconds -= before.get(level, (0.0, 0))[0]
        count -= before.get(level, (0.0, 0))[1]
        if count:
            delta[level] = (1000 * seconds / count, count)
    return delta


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def jetstream_line(row: dict[str, Any]) -> str:
    """The JetStream API requests a convergence made, as the servers' audit advisories
    counted them."""
    requests = Counter(row["jetstream_converging"])
    return (
        f"JetStream API requests while converging (audit advisories): {breakdown(requests)} "
        f"({sum(requests.values()) / (2 * row['size']):.2f} per resource)"
    )


def cpu_line(row: dict[str, Any]) -> str:
    """Each process's CPU seconds while converging, and flow control's queue waits if on; then
    the same while the user's applies ran, beside the controller and alone: where the applies'
    slowdown went."""

    def seconds(cpu: dict[str, float]) -> str:
        return ", ".join(f"{name} {value:.1f}" for name, value in cpu.items())

    text = "CPU seconds while converging: " + seconds(row["cpu_converging"])
    if "cpu_applying" in row and "cpu_applying_alone" in row:
        text += (
            f"; while the applies ran: {seconds(row['cpu_applying'])}; "
            f"the same applies alone: {seconds(row['cpu_applying_alone'])}"
        )
    waits = row.get("flow_control_converging")
    if waits:
        text += "; flow control, mean queue wait (ms) / requests by priority level: " + ", ".join(
            f"{level} {wait:.1f} / {count}" for level, (wait, count) in sorted(waits.items())
        )
    return text


def save_result(prefix: str, text: str, directory: Path = RESULTS) -> Path:
    """<directory>/<prefix>-<UTC minute>.md; a second run ending in the same minute gets -2
    (and so on) rather than overwriting the first."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{prefix}-{datetime.now(UTC):%Y%m%d-%H%M}"
    path, count = directory / f"{stem}.md", 1
    while path.exists():
        count += 1
        path = directory / f"{stem}-{count}.md"
    path.write_text(text + "\n")
    return path


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"kube-apiserver v1.34.4, nats-server 2.12.8, date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"load average {os.getloadavg()[0]:.2f} at the end (the machine is shared)"
    )


def deadline_guard(seconds: float) -> None:
    """Ends the whole run (servers are children in their own sessions: stop them at exit)."""

    def expire() -> None:
        print(f"bench: overall deadline of {seconds:.0f} s passed; stopping", file=sys.stderr)
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


class Servers:
    """kube-apiserver + etcd and one nats-server, fresh for each run, with clients as the run's
    identities: what any controller under test runs against, so each bench adds only its
    controller. Objects are made in `group`/`version`, the controller's own CRDs."""

    group = GROUP
    version = VERSION

    def __init__(self, workdir: Path, identity_mode: str, profiling: bool = False) -> None:
        self.workdir = workdir
        self.plane = identities.control_plane(workdir / "cp", identity_mode, profiling)
        self.nats = NatsServer(workdir / "nats")

    def connect(self) -> None:
        """The admin's clients, once the servers run."""
        self.api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(self.plane.kubeconfig)
        )
        self.objects = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def connect_identities(self, identity_mode: str) -> None:
        """The applier's and the controller's clients (identities.MODES)."""
        self.identities = identities.identities(self.plane, self.api, identity_mode)
        self.applier = client.CustomObjectsApi(
            config.new_client_from_config(str(self.identities.applier))  # type: ignore[no-untyped-call]
        )
        self.as_controller = client.CustomObjectsApi(
            config.new_client_from_config(str(self.identities.controller))  # type: ignore[no-untyped-call]
        )

    def create_one(self, namespace: str, plural: str, body: dict[str, Any]) -> None:
        """As the user would: the applier identity."""
        group, version = self.group, self.version
        self.applier.create_namespaced_custom_object(
            group, version, namespace, plural, {"apiVersion": f"{group}/{version}", **body}
        )

    def delete_one(self, namespace: str, plural: str, name: str) -> None:
        """As the user would: the applier identity."""
        self.applier.delete_namespaced_custom_object(
            self.group, self.version, namespace, plural, name
        )

    def create_in_order(self, namespace: str, phases: list[Phase]) -> None:
        """Phases (see `applied`) one after another, each 8 at a time."""
        for phase in phases:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda item: self.create_one(namespace, *item), phase))

    def writes(self) -> Counter[str]:
        return apiserver_writes(self.plane.url, self.plane.ssl_context())

    def flow_control(self) -> dict[str, tuple[float, int]]:
        return flow_control_waits(self.plane.url, self.plane.ssl_context())
