"""Operator benchmarks: convergence against its floor, idle cost, drift repair, busy streams,
restart, memory; NACK in the same run when its binary is given.

Runs everything on this machine with the project's own servers (kube-apiserver + etcd, one
nats-server, a 3-node cluster for R3 streams) and the operator as a process, so the figures are
end to end. Each size gets fresh servers and a fresh operator, so its memory and idle figures are
its own:

    .venv/bin/python bench/operator_bench.py --sizes 100 1000 5000 --idle-size 1000 --busy 1000
    .venv/bin/python bench/operator_bench.py --sizes 200 --idle-size 200 --idle-seconds 30 \\
        --busy 200 --heap-size 200 --split 200 \\
        --nack-bin /tmp/nack-build/bin/jetstream-controller \\
        --nack-crds /tmp/nack-build/deploy/crds.yml

Prints Markdown (and writes it to bench/results/) for docs/benchmarks.md. Every wait has a
deadline and the whole run has one (--deadline), so a stuck server ends the run with an error
instead of hanging it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import apiserver_profile
import identities
import nats
from kubernetes import client, config, watch

from jetstream_operator import GROUP, VERSION
from jetstream_operator.devenv import admission
from jetstream_operator.devenv.controlplane import ControlPlane
from jetstream_operator.devenv.figures import apiserver_writes as served_writes
from jetstream_operator.devenv.figures import flow_control_waits
from jetstream_operator.devenv.gobuild import ensure_tools
from jetstream_operator.devenv.natsserver import NatsCluster, NatsServer
from jetstream_operator.devenv.operator_process import OperatorProcess
from jetstream_operator.devenv.paths import free_port
from jetstream_operator.handlers.status_writes import StatusBudget
from jetstream_operator.k8s.crds import install_api
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.settings import OperatorSettings

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results"
HEAP_PROBE = BENCH_DIR / "heapprobe"
SETTINGS = OperatorSettings()
RESYNC_INTERVAL = SETTINGS.resync_interval
"""The operator runs with production settings; the idle figures are per resync of this."""
BACKGROUND = frozenset({"leases"})
"""Writes kube-apiserver and kube-controller-manager make on their own, whoever else runs."""
WATCH_RESTARTS = 50
"""A watch that fails more often than this in one run is a broken server, not load."""


# -- what the API server and NATS say they served --------------------------------------------------


OPERATOR_ENV: dict[str, str] = {}
Phase = list[tuple[str, dict[str, Any]]]
"""Objects to apply 8 at a time, as (plural, body)."""
APPLY_ORDERS = ("kinds", "pairs")
"""How the N Streams and N Consumers are applied: every stream, then every consumer (as
`kubectl apply -f` of a folder with a file per kind), or each stream followed by its consumer
(a file per application)."""
"""Settings every operator of the run gets (--operator-env), e.g. JETSTREAM_OPERATOR_EVENTS."""


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

    def __init__(self, urls: Iterable[str]) -> None:
        self.counts: Counter[str] = Counter()
        self._urls = list(urls)
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
        connections = [await nats.connect(url) for url in self._urls]

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


# -- watches ---------------------------------------------------------------------------------------


def is_ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def short(value: Any, length: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= length else text[: length - 3] + "..."


def counted_changes(
    watches: list[ObjectWatch],
) -> tuple[Counter[str], Counter[str], dict[str, str]]:
    """What the watches counted since `count_from()`: modifications by kind, by field, and the
    first change of each field."""
    kinds: Counter[str] = Counter()
    fields: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for each in watches:
        kinds.update(each.changes)
        fields.update(each.fields)
        for key, example in each.examples.items():
            examples.setdefault(key, example)
    return kinds, fields, examples


class ObjectWatch:
    """One plural in one namespace, followed in a thread: which objects are Ready, when the last
    one turned Ready, and every change after `count_from()` (who wrote what, and when).

    A watch that ends with an error (410 Gone, 504 "Too large resource version" under load, a
    dropped connection) starts again from a fresh list, at most WATCH_RESTARTS times."""

    def __init__(
        self,
        objects: client.CustomObjectsApi,
        namespace: str,
        plural: str,
        group: str = GROUP,
        version: str = VERSION,
        kind_of: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.plural = plural
        self.ready: set[str] = set()
        self.last_ready = 0.0
        self.ready_times: list[float] = []
        """When each object first turned Ready (monotonic), for the convergence timeline."""
        self.changes: Counter[str] = Counter()
        self.fields: Counter[str] = Counter()
        """Which status keys (or `metadata`) the counted modifications changed."""
        self.examples: dict[str, str] = {}
        """Per changed key, the first counted change: "object: before -> after"."""
        self._seen: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.last_change = 0.0
        self.restarts = 0
        self.listed = threading.Event()
        self.last_gone = 0.0
        self.error: str | None = None
        self._counting = False
        self._kind_of = kind_of or (lambda item: plural)
        self._where = (objects, group, version, namespace, plural)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _list(self, **options: Any) -> Any:
        """The list call, a plain function for kubernetes' watch (which passes watch=True)."""
        objects, group, version, namespace, plural = self._where
        return objects.list_namespaced_custom_object(group, version, namespace, plural, **options)

    def count_from(self) -> None:
        """Count modifications from now on (and forget earlier ones)."""
        self.changes.clear()
        self.fields.clear()
        self.examples.clear()
        self.last_change = 0.0
        self._counting = True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as error:  # any failure restarts from a list
                if self._stop.is_set():
                    return
                self.restarts += 1
                if self.restarts > WATCH_RESTARTS:
                    self.error = f"{self.plural} watch failed {self.restarts} times: {error}"
                    return
                time.sleep(min(5.0, 0.2 * self.restarts))

    def _follow(self) -> None:
        listing = cast(dict[str, Any], self._list())
        for item in listing["items"]:
            self._remember(item["metadata"]["name"], item, False)
        self._update(
            {item["metadata"]["name"] for item in listing["items"] if is_ready(item)}, None
        )
        self.listed.set()
        version = listing["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                self._list, resource_version=version, timeout_seconds=30
            )
            for event in stream:
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch error: {event['raw_object']}")
                item = event["object"]
                version = item["metadata"]["resourceVersion"]
                name = item["metadata"]["name"]
                seen = self._remember(name, item, event["type"] == "DELETED")
                if event["type"] == "MODIFIED" and self._counting:
                    self.changes[self._kind_of(item)] += 1
                    self.fields.update(seen.keys())
                    for key, example in seen.items():
                        self.examples.setdefault(key, example)
                    self.last_change = time.monotonic()
                if event["type"] != "DELETED" and is_ready(item):
                    self._update({name}, None)
                else:
                    self._update(set(), name)
                if self._stop.is_set():
                    return

    def _remember(self, name: str, item: dict[str, Any], gone: bool) -> dict[str, str]:
        """Keeps the object's status and metadata (without resourceVersion and managedFields);
        returns the status keys that differ from the last seen (`metadata` if it changed), each
        with the change ("name: before -> after"), so a report can say which value was right."""
        status = dict(item.get("status") or {})
        metadata = {
            k: v
            for k, v in item["metadata"].items()
            if k not in ("resourceVersion", "managedFields", "generation")
        }
        before_status, before_metadata = self._seen.get(name, ({}, metadata))
        if gone:
            self._seen.pop(name, None)
            self.last_gone = time.monotonic()
        else:
            self._seen[name] = (status, metadata)
        changed = {
            f"{self._kind_of(item)}: status.{key}": (
                f"{name}: {short(before_status.get(key))} -> {short(status.get(key))}"
            )
            for key in set(status) | set(before_status)
            if status.get(key) != before_status.get(key)
        }
        if metadata != before_metadata:
            changed[f"{self._kind_of(item)}: metadata"] = name
        return changed

    def _update(self, ready: set[str], gone: str | None) -> None:
        before = len(self.ready)
        self.ready |= ready
        if gone is not None:
            self.ready.discard(gone)
        if len(self.ready) > before:
            self.last_ready = time.monotonic()
            self.ready_times.extend([self.last_ready] * (len(self.ready) - before))

    @property
    def present(self) -> int:
        """Objects that exist now, as the watch has seen them."""
        return len(self._seen)

    def names(self) -> list[str]:
        return list(self._seen)

    def check(self) -> None:
        if self.error:
            raise RuntimeError(self.error)

    def stop(self) -> None:
        self._stop.set()


TIMELINE_SHARES = (0.01, 0.25, 0.5, 0.75, 1.0)
"""Shares of a kind's resources at which the convergence timeline says how long it took."""


def timeline(watches: list[ObjectWatch], started: float) -> dict[str, list[float]]:
    """Per plural (over every namespace), seconds from `started` until each share of
    TIMELINE_SHARES was Ready: where a convergence spends its time."""
    times: dict[str, list[float]] = {}
    for each in watches:
        times.setdefault(each.plural, []).extend(each.ready_times)
    return {
        plural: [
            ordered[max(0, math.ceil(len(ordered) * share) - 1)] - started
            for share in TIMELINE_SHARES
        ]
        for plural, found in times.items()
        if (ordered := sorted(found))
    }


def wait_ready(watches: list[ObjectWatch], wanted: int, timeout: float = 1800) -> float:
    """Waits until every watch sees `wanted` Ready objects; returns when the last turned Ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for each in watches:
            each.check()
        if all(len(each.ready) >= wanted for each in watches):
            return max(each.last_ready for each in watches)
        time.sleep(0.05)
    counts = ", ".join(f"{each.plural} {len(each.ready)}/{wanted}" for each in watches)
    raise TimeoutError(f"not all Ready within {timeout:.0f} s ({counts})")


@contextmanager
def watching(watches: list[ObjectWatch]) -> Iterator[list[ObjectWatch]]:
    try:
        yield watches
    finally:
        for each in watches:
            each.stop()


# -- servers and the operator ----------------------------------------------------------------------


class Bench:
    identity_mode = "admin"
    """identities.MODES: every bench of a run uses the same (--identities)."""
    apply_order = "kinds"
    """APPLY_ORDERS, the same for every bench of a run (--apply-order)."""
    profiling = False
    """Serve kube-apiserver's /debug/pprof (--apiserver-profile)."""
    admission_finalizer = True
    """Install the chart's finalizer policy for each operator, as the chart does where the API
    is served (--admission-finalizer)."""

    def __init__(self, workdir: Path, cluster: bool = False) -> None:
        self.workdir = workdir
        self.plane = identities.control_plane(workdir / "cp", self.identity_mode, self.profiling)
        self.nats = NatsServer(workdir / "nats")
        self.cluster = NatsCluster(workdir / "cluster") if cluster else None
        self.operators: list[OperatorProcess] = []
        self.metrics_port = free_port()
        self.shard_labels: list[dict[str, str]] = [{}]
        """Labels of the resources, the i-th resource's taken in turn: one set per operator
        when they split a namespace by label, else none."""

    @property
    def operator(self) -> OperatorProcess:
        return self.operators[0]

    def start(
        self,
        namespaces: list[str] | None = None,
        extra_env: dict[str, str] | None = None,
        timeout: float = 180,
        shards: list[dict[str, str]] | None = None,
    ) -> None:
        """Servers, CRDs, then one operator per entry of `namespaces` (a
        JETSTREAM_OPERATOR_NAMESPACES value each), or per entry of `shards` (labels: the
        operator's selector, and the labels of every len(shards)-th resource); one operator for
        everything when neither is given."""
        self.plane.start()
        self.nats.start()
        if self.cluster is not None:
            self.cluster.start()
        self.api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(self.plane.kubeconfig)
        )
        install_api(self.api)
        self.objects = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        if self.admission_finalizer:
            self.install_finalizer_policies(namespaces or [""])
        self.identities = identities.identities(self.plane, self.api, self.identity_mode)
        self.applier = client.CustomObjectsApi(
            config.new_client_from_config(str(self.identities.applier))  # type: ignore[no-untyped-call]
        )
        self.as_controller = client.CustomObjectsApi(
            config.new_client_from_config(str(self.identities.controller))  # type: ignore[no-untyped-call]
        )
        if shards:
            self.shard_labels = shards
            shares = [
                {"JETSTREAM_OPERATOR_SELECTOR": ",".join(f"{k}={v}" for k, v in labels.items())}
                for labels in shards
            ]
        else:
            shares = [
                {"JETSTREAM_OPERATOR_NAMESPACES": selection} if selection else {}
                for selection in namespaces or [""]
            ]
        for index, share in enumerate(shares):
            env = {**OPERATOR_ENV, **(extra_env or {}), **share}
            if index == 0:
                env["JETSTREAM_OPERATOR_METRICS_PORT"] = str(self.metrics_port)
            operator = OperatorProcess(
                self.identities.controller,
                self.nats.url,
                self.workdir / f"operator-{index}.log",
                extra_env=env,
                verbose=False,  # production logging, as the chart's default
            )
            self.operators.append(operator)
            operator.start(timeout)

    def install_finalizer_policies(self, selections: list[str]) -> None:
        """One policy per operator, as one Helm release per share would make, each for its
        operator's namespaces; then wait until one takes effect (the API server polls new
        CRDs' schemas every 5 s, and refuses their creations until then)."""
        helm = ensure_tools(["helm"])["helm"]
        for index, selection in enumerate(selections):
            entries = [entry for entry in selection.split(",") if entry]
            admission.install(
                self.api, admission.render_finalizer_policy(helm, entries, f"bench-{index}")
            )
        first = [entry for entry in selections[0].split(",") if entry]
        plain = [entry for entry in first if not set(entry) & set("*?![]")]
        probe = plain[0] if plain else "default"
        if probe != "default":
            self.namespace(probe)
        admission.wait_until_effective(self.api, probe)

    def stop(self) -> None:
        for operator in self.operators:
            operator.stop()
        if self.cluster is not None:
            self.cluster.stop()
        self.nats.stop()
        self.plane.stop()

    def namespace(self, name: str) -> str:
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        except client.ApiException as error:
            if error.status != 409:  # made earlier, e.g. to probe the finalizer policy
                raise
        return name

    def create_one(self, namespace: str, plural: str, body: dict[str, Any]) -> None:
        """As the user would: the applier identity."""
        self.applier.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, {"apiVersion": f"{GROUP}/{VERSION}", **body}
        )

    def delete_one(self, namespace: str, plural: str, name: str) -> None:
        """As the user would: the applier identity."""
        self.applier.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)

    def create_many(self, namespace: str, plural: str, bodies: list[dict[str, Any]]) -> None:
        """8 at a time."""
        self.create_in_order(namespace, [[(plural, body) for body in bodies]])

    def create_in_order(self, namespace: str, phases: list[Phase]) -> None:
        """Phases (see `applied`) one after another, each 8 at a time."""
        for phase in phases:
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda item: self.create_one(namespace, *item), phase))

    def watch(
        self, namespace: str, plural: str, kind_of: Callable[[dict[str, Any]], str] | None = None
    ) -> ObjectWatch:
        """Ready objects counted from a watch: polling lists of 10,000 objects would load the
        API server more than the operator does."""
        return ObjectWatch(self.objects, namespace, plural, kind_of=kind_of)

    def writes(self) -> Counter[str]:
        return apiserver_writes(self.plane.url, self.plane.ssl_context())

    def operator_requests(self) -> dict[str, int]:
        """JetStream requests the operator made, by operation, from its own /metrics."""
        return self.operator_counts("jetstream_operator_nats_request_duration_seconds_count")

    def operator_counts(self, metric: str) -> dict[str, int]:
        """One counter of the operator's /metrics, by its labels' values ("stream DELETED")."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith(metric + "{"):
                labels = re.findall(r'="([^"]*)"', line.split("}", 1)[0])
                counts[" ".join(labels)] = int(float(line.rsplit(" ", 1)[1]))
        return counts

    def drift_counts(self) -> Counter[str]:
        """Advisories the operator received and repairs it made, from its /metrics."""
        advisories = self.operator_counts("jetstream_operator_advisories_total")
        repairs = self.operator_counts("jetstream_operator_drift_repairs_total")
        counts = Counter({f"advisory {key}": n for key, n in advisories.items()})
        counts.update({f"repair {key}": n for key, n in repairs.items()})
        return counts

    def cpu_seconds(self) -> Counter[str]:
        controllers = {
            f"operator-{index}" if index else "operator": each.pid
            for index, each in enumerate(self.operators)
        }
        return servers_cpu_seconds(self.plane, self.nats, controllers)

    def flow_control(self) -> dict[str, tuple[float, int]]:
        return flow_control_waits(self.plane.url, self.plane.ssl_context())

    def operator_rss_mib(self) -> float:
        return sum(rss_mib(each.pid) for each in self.operators)

    def nats_urls(self) -> list[str]:
        return [self.nats.url, *(self.cluster.urls[:1] if self.cluster else [])]


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


# -- resources -------------------------------------------------------------------------------------


def stream_body(
    index: int,
    prefix: str,
    replicas: int = 1,
    connection: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    name = f"{prefix}_{index}"
    spec: dict[str, Any] = {"name": name, "subjects": [f"{name.lower()}.>"]}
    if replicas != 1:
        spec["replicas"] = replicas
    if connection:
        spec["connectionRef"] = connection
    return {"kind": "Stream", "metadata": metadata(f"s{index}", labels), "spec": spec}


def consumer_body(
    index: int, connection: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"durableName": f"C{index}", "streamRef": f"s{index}"}
    if connection:
        spec["connectionRef"] = connection
    return {"kind": "Consumer", "metadata": metadata(f"c{index}", labels), "spec": spec}


def metadata(name: str, labels: dict[str, str] | None) -> dict[str, Any]:
    return {"name": name, "labels": labels} if labels else {"name": name}


def shard_of(bench: Bench, index: int) -> dict[str, str]:
    """The labels of the index-th stream and its consumer (a consumer follows its stream)."""
    return bench.shard_labels[index % len(bench.shard_labels)]


def stream_kind(item: dict[str, Any]) -> str:
    return f"R{(item.get('spec') or {}).get('replicas', 1)} streams"


async def floor_nats(url: str, prefix: str, count: int) -> float:
    """The same creations made straight with nats-py, 32 at a time."""
    nc = await nats.connect(url)
    jetstream = JetStreamApi(nc)
    limit = asyncio.Semaphore(32)

    async def make(index: int) -> None:
        name = f"{prefix}_{index}"
        async with limit:
            await jetstream.create_stream({"name": name, "subjects": [f"{name.lower()}.>"]})
            await jetstream.create_consumer(
                name,
                {
                    "stream_name": name,
                    "action": "create",
                    "config": {
                        "name": f"C{index}",
                        "durable_name": f"C{index}",
                        "ack_policy": "explicit",
                    },
                },
            )

    started = time.perf_counter()
    await asyncio.gather(*(make(index) for index in range(count)))
    elapsed = time.perf_counter() - started
    await nc.close()
    return elapsed


def floor_status_patches(
    objects: client.CustomObjectsApi,
    namespace: str,
    count: int,
    group: str = GROUP,
    version: str = VERSION,
) -> float:
    """2N status patches (streams s0.., consumers c0..) with the Kubernetes client, 8 at a
    time, as the operator must do."""

    def patch(target: tuple[str, str]) -> None:
        plural, name = target
        objects.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name, {"status": {"observedGeneration": 1}}
        )

    targets = [("streams", f"s{i}") for i in range(count)] + [
        ("consumers", f"c{i}") for i in range(count)
    ]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(patch, targets))
    return time.perf_counter() - started


def applied(
    streams: list[dict[str, Any]], consumers: list[dict[str, Any]], order: str
) -> list[Phase]:
    """The phases of applying streams and their consumers in one of `APPLY_ORDERS`."""
    if order == "pairs":
        pairs = zip(streams, consumers, strict=True)
        return [[item for s, c in pairs for item in (("streams", s), ("consumers", c))]]
    return [[("streams", body) for body in streams], [("consumers", body) for body in consumers]]


def time_apply(bench: Bench, namespace: str, size: int, order: str) -> float:
    """Applying N Streams and N Consumers (prefix A<size>) into `namespace`, timed."""
    started = time.perf_counter()
    streams = [stream_body(i, f"A{size}", labels=shard_of(bench, i)) for i in range(size)]
    consumers = [consumer_body(i, labels=shard_of(bench, i)) for i in range(size)]
    bench.create_in_order(namespace, applied(streams, consumers, order))
    return time.perf_counter() - started


# -- convergence and the floor ---------------------------------------------------------------------


def warm_up(bench: Bench) -> None:
    """One Stream and Consumer first: a fresh API server takes seconds over its first custom
    resources (schemas and CEL rules compiled on first use), which is not the operator's cost."""
    namespace = bench.namespace("warm-up")
    with watching([bench.watch(namespace, plural) for plural in ("streams", "consumers")]) as w:
        bench.create_many(namespace, "streams", [stream_body(0, "WARM", labels=shard_of(bench, 0))])
        bench.create_many(namespace, "consumers", [consumer_body(0, labels=shard_of(bench, 0))])
        wait_ready(w, 1, timeout=120)


def convergence(
    bench: Bench,
    size: int,
    settle: float,
    namespaces: list[str],
    before_apply: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """N Streams and N Consumers spread over `namespaces`, applied in `Bench.apply_order`,
    timed until all are Ready; then
    `settle` seconds of watching for the writes that follow (Ready is not done while status is
    still being corrected)."""
    warm_up(bench)
    if before_apply is not None:
        before_apply()
    prefix = f"B{size}"
    parts = [list(range(size))[k :: len(namespaces)] for k in range(len(namespaces))]
    for namespace in namespaces:
        bench.namespace(namespace)
    watches = [bench.watch(ns, plural) for ns in namespaces for plural in ("streams", "consumers")]
    audit = ApiAudit(bench.nats_urls()[:1])  # the convergence's resources are on the first
    with watching(watches):
        writes_before = bench.writes()
        cpu_before, waits_before = bench.cpu_seconds(), bench.flow_control()
        started = time.perf_counter()
        phases = [
            applied(
                [stream_body(i, prefix, labels=shard_of(bench, i)) for i in part],
                [consumer_body(i, labels=shard_of(bench, i)) for i in part],
                bench.apply_order,
            )
            for part in parts
        ]
        with ThreadPoolExecutor(max_workers=len(namespaces)) as pool:
            for step in range(len(phases[0])):  # each namespace's first phase, then the next
                list(
                    pool.map(
                        bench.create_in_order,
                        namespaces,
                        [[each[step]] for each in phases],
                    )
                )
        created = time.perf_counter() - started
        cpu_applying = bench.cpu_seconds() - cpu_before
        t0 = time.monotonic() - (time.perf_counter() - started)
        wanted = [len(part) for part in parts for _plural in ("streams", "consumers")]
        last_ready = max(
            wait_ready([each], count) for each, count in zip(watches, wanted, strict=True)
        )
        wall = last_ready - t0
        writes_at_ready = bench.writes()
        requests = audit.snapshot()
        audit.close()
        cpu = bench.cpu_seconds() - cpu_before
        waits = flow_control_delta(waits_before, bench.flow_control())
        rss = bench.operator_rss_mib()
        incomplete = incomplete_streams(bench, namespaces)
        for each in watches:
            each.count_from()
        writes_after_ready = bench.writes()
        writes_end, last_write = writes_over(bench.writes, settle)
    last_change = max((each.last_change for each in watches), default=0.0)
    last_change = max(last_change, last_write or 0.0)
    late = writes_end - writes_after_ready
    return {
        "size": size,
        "namespace": namespaces[0],
        "wall": wall,
        "created": created,
        "timeline": timeline(watches, t0),
        "rss": rss,
        "writes_converging": dict(writes_at_ready - writes_before),
        "jetstream_converging": dict(requests),
        "cpu_converging": dict(cpu),
        "cpu_applying": dict(cpu_applying),
        "flow_control_converging": waits,
        "status_incomplete": incomplete,
        "late_changes": sum(sum(each.changes.values()) for each in watches),
        "late_fields": dict(sum((each.fields for each in watches), Counter())),
        "last_write_after_ready": (last_change - last_ready) if last_change else 0.0,
        "late_writes": dict(late),
        "watch_restarts": sum(each.restarts for each in watches),
    }


def incomplete_streams(bench: Bench, namespaces: list[str]) -> int:
    """Streams whose status, at the moment the last resource turned Ready, did not yet count
    their consumer (each bench stream has exactly one)."""
    missing = 0
    for namespace in namespaces:
        items = cast(
            dict[str, Any],
            bench.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "streams"),
        )["items"]
        missing += sum(1 for item in items if (item.get("status") or {}).get("consumerCount") != 1)
    return missing


def add_floor(bench: Bench, row: dict[str, Any]) -> None:
    """The floor, measured in the same run with the operator stopped: the same creations in
    NATS and the same status patches. Applying the 2N objects alone is timed too (into a fresh
    namespace, whose objects then take the floor's patches), to compare with how long the same
    applies took while the operator converged."""
    size = row["size"]
    for operator in bench.operators:
        operator.stop()
    cpu_before = bench.cpu_seconds()
    row["nats"] = asyncio.run(floor_nats(bench.nats.url, f"F{size}", size))
    cpu_floor = bench.cpu_seconds() - cpu_before
    namespace = bench.namespace(f"apply-only-{size}")
    cpu_before = bench.cpu_seconds()
    row["apply"] = time_apply(bench, namespace, size, bench.apply_order)
    row["cpu_applying_alone"] = dict(bench.cpu_seconds() - cpu_before)
    cpu_before = bench.cpu_seconds()
    row["patches"] = floor_status_patches(bench.as_controller, namespace, size)
    row["cpu_floor"] = dict(cpu_floor + (bench.cpu_seconds() - cpu_before))
    row["delete_alone"] = delete_alone(bench.delete_one, bench.objects, namespace)
    row["floor"] = row["nats"] + row["patches"]
    row["ratio"] = row["wall"] / row["floor"]
    row["ratio_with_apply"] = row["wall"] / (row["floor"] + row["apply"])
    row["apply_slowdown"] = row["created"] / row["apply"]
    row["cpu_bound"] = cpu_bound(row)
    row["cpu_bound_ratio"] = row["cpu_bound"] / row["floor"]


def cpu_bound(row: dict[str, Any]) -> float:
    """Seconds no controller on this machine converges under: the last status write follows the
    last apply, and the applies (with their client) and the floor's work in the servers (not
    its clients: a controller's own may cost less) need this much CPU over the machine's cores."""
    servers = {name: seconds for name, seconds in row["cpu_floor"].items() if name != "benchmark"}
    needed = sum(row["cpu_applying_alone"].values()) + sum(servers.values())
    return float(max(row["apply"], needed / (os.cpu_count() or 1)))


def add_ideal(bench: Bench, row: dict[str, Any], timeout: float = 600) -> None:
    """The same applies into a fresh namespace, served by bench/ideal_controller.py (the floor's
    requests made as each object arrives, nothing else) instead of the operator: what doing only
    the unavoidable work, at once, gets on this machine. A reference, not a bound: a controller
    that holds back while the applies run slows them less and may finish as soon (cpu_bound is
    the bound). After the floor, with the operator stopped and the floor's streams deleted, so
    NATS holds what it held for ours."""
    size = row["size"]
    asyncio.run(delete_streams(bench.nats.url, f"F{size}_"))
    namespace = bench.namespace(f"ideal-{size}")
    source = Path(sys.modules["jetstream_operator"].__file__ or "").resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(BENCH_DIR)])}
    command = [
        sys.executable,
        str(BENCH_DIR / "ideal_controller.py"),
        "--kubeconfig",
        str(bench.identities.controller),
        "--namespace",
        namespace,
        "--nats",
        bench.nats.url,
    ]
    log = (bench.workdir / "ideal-controller.log").open("w")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        if process.stdout is None or process.stdout.readline().strip() != "watching":
            raise RuntimeError(
                f"ideal controller did not start: {bench.workdir}/ideal-controller.log"
            )
        watches = [bench.watch(namespace, plural) for plural in ("streams", "consumers")]
        with watching(watches):
            cpu_before = bench.cpu_seconds() + process_cpu(process.pid)
            started = time.perf_counter()
            t0 = time.monotonic()
            streams = [stream_body(i, f"I{size}") for i in range(size)]
            consumers = [consumer_body(i) for i in range(size)]
            bench.create_in_order(namespace, applied(streams, consumers, bench.apply_order))
            row["ideal_created"] = time.perf_counter() - started
            row["ideal_wall"] = wait_ready(watches, size, timeout) - t0
            row["cpu_ideal"] = dict(bench.cpu_seconds() + process_cpu(process.pid) - cpu_before)
    finally:
        process.terminate()
        process.wait(30)
        log.close()
    row["ideal_ratio"] = row["ideal_wall"] / row["floor"]
    row["ideal_apply_slowdown"] = row["ideal_created"] / row["apply"]


def process_cpu(pid: int) -> Counter[str]:
    return Counter({"controller": process_cpu_seconds(pid)})


async def delete_streams(url: str, prefix: str) -> None:
    """Every stream whose name starts with `prefix`, 32 at a time."""
    nc = await nats.connect(url)
    try:
        jetstream, names = JetStreamApi(nc), cast(list[str], [])
        while True:
            page = await jetstream.request("STREAM.NAMES", {"offset": len(names)})
            found = page.get("streams") or []
            names += found
            if not found or len(names) >= int(page.get("total", 0)):
                break
        limit = asyncio.Semaphore(32)

        async def delete(name: str) -> None:
            async with limit:
                await jetstream.request(f"STREAM.DELETE.{name}", {})

        await asyncio.gather(*(delete(n) for n in names if str(n).startswith(prefix)))
    finally:
        await nc.close()


def deletion(
    delete: Callable[[str, str, str], None],
    objects: client.CustomObjectsApi,
    namespace: str,
    nats_url: str,
    prefix: str,
    group: str = GROUP,
    version: str = VERSION,
    timeout: float = 900,
    cpu: Callable[[], Counter[str]] | None = None,
) -> dict[str, Any]:
    """`kubectl delete -f` of what was applied: every Stream, then every Consumer, 8 requests at
    a time, timed until the API server holds none of them and NATS none of their streams (named
    `prefix`_i). `delete(namespace, plural, name)` deletes one, as the user would. `cpu`, if
    given, reads each process's CPU seconds, for what they took while the requests were made."""
    watches = [ObjectWatch(objects, namespace, plural, group, version) for plural in PLURALS]
    with watching(watches):
        for each in watches:
            each.listed.wait(60)
        names = [(each.plural, name) for each in watches for name in each.names()]
        streams_left = asyncio.run(streams_named(nats_url, f"{prefix}_"))
        cpu_before = cpu() if cpu is not None else Counter()
        started = progress = time.monotonic()
        requested = request_deletions(delete, namespace, names)
        cpu_requesting = (cpu() - cpu_before) if cpu is not None else Counter()
        gone_k8s = gone_nats = None
        while time.monotonic() < started + timeout and (gone_k8s is None or gone_nats is None):
            for each in watches:
                each.check()
            if gone_k8s is None and all(each.present == 0 for each in watches):
                gone_k8s = max(each.last_gone for each in watches) - started
            if gone_nats is None:
                count = asyncio.run(streams_named(nats_url, f"{prefix}_"))
                if count < streams_left:
                    streams_left, progress = count, time.monotonic()
                if count == 0:
                    gone_nats = time.monotonic() - started
                elif gone_k8s is not None and time.monotonic() - progress > NO_PROGRESS:
                    break  # the controller deletes no more of them
            time.sleep(0.5)
        left = {each.plural: each.present for each in watches}
    return {
        "objects": len(names),
        "requested_s": requested,
        "gone_k8s_s": gone_k8s,
        "gone_nats_s": gone_nats,
        "left": left,
        "streams_left_in_nats": streams_left,
        "cpu_requesting": dict(cpu_requesting),
    }


def request_deletions(
    delete: Callable[[str, str, str], None], namespace: str, names: list[tuple[str, str]]
) -> float:
    """The seconds `kubectl delete -f` takes to request the deletion of (plural, name) each, 8
    requests at a time."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: delete(namespace, *item), names))
    return time.monotonic() - started


def delete_alone(
    delete: Callable[[str, str, str], None],
    objects: client.CustomObjectsApi,
    namespace: str,
    group: str = GROUP,
    version: str = VERSION,
) -> float:
    """Deleting every Stream, then every Consumer of `namespace` with no controller running:
    the user's requests alone, to compare with the same requests beside the controller. Where
    a finalizer is put on at admission, the objects stay, being deleted."""
    names = [
        (plural, item["metadata"]["name"])
        for plural in PLURALS
        for item in cast(
            dict[str, Any],
            objects.list_namespaced_custom_object(group, version, namespace, plural),
        )["items"]
    ]
    return request_deletions(delete, namespace, names)


NO_PROGRESS = 60.0
"""Seconds without a stream deleted in NATS, once the objects are gone, after which the
deletion is reported as never reaching NATS."""

PLURALS = ("streams", "consumers")


async def streams_named(url: str, prefix: str) -> int:
    """How many streams' names start with `prefix`, from the server's own list of names."""
    nc = await nats.connect(url)
    try:
        jetstream, offset, count = JetStreamApi(nc), 0, 0
        while True:
            page = await jetstream.request("STREAM.NAMES", {"offset": offset})
            names = page.get("streams") or []
            count += sum(1 for name in names if str(name).startswith(prefix))
            offset += len(names)
            if not names or offset >= int(page.get("total", 0)):
                return count
    finally:
        await nc.close()


def deletion_lines(label: str, rows: list[dict[str, Any]]) -> list[str]:
    """One line per size with a deletion: when the API server and NATS had none left."""

    def seconds(value: float | None) -> str:
        return "never" if value is None else f"after {value:.1f} s"

    def line(size: int, figures: dict[str, Any], alone: float | None) -> str:
        slowed = f" (alone {alone:.1f} s: {figures['requested_s'] / alone:.2f}x)" if alone else ""
        text = (
            f"- {label} N={size}: {figures['objects']} deletions requested in "
            f"{figures['requested_s']:.1f} s{slowed}; none left in Kubernetes "
            f"{seconds(figures['gone_k8s_s'])}, none of their streams in NATS "
            f"{seconds(figures['gone_nats_s'])}"
        )
        if figures["gone_nats_s"] is None:
            text += f" ({figures.get('streams_left_in_nats', '?')} still there, none deleted"
            text += f" for {NO_PROGRESS:.0f} s)"
        if any(figures["left"].values()):
            text += f"; objects left: {figures['left']}"
        if figures.get("cpu_requesting"):
            text += "; CPU seconds while they were requested: " + ", ".join(
                f"{name} {seconds:.1f}" for name, seconds in figures["cpu_requesting"].items()
            )
        return text

    return [
        line(row["size"], row["deletion"], row.get("delete_alone"))
        for row in rows
        if "deletion" in row
    ]


# -- idle, drift, restart --------------------------------------------------------------------------


def idle_kinds(bench: Bench, count: int) -> list[ObjectWatch]:
    """A NatsConnection to the 3-node cluster with `count` R3 and `count` R1 streams and a
    consumer each, so the idle figures cover every kind; returns their watches once Ready."""
    assert bench.cluster is not None
    namespace = bench.namespace("idle-kinds")
    bench.objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "natsconnections",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NatsConnection",
            "metadata": {"name": "cluster"},
            "spec": {"servers": bench.cluster.urls},
        },
    )
    watches = [
        bench.watch(namespace, "natsconnections"),
        bench.watch(namespace, "streams", kind_of=stream_kind),
        bench.watch(namespace, "consumers"),
        bench.watch(namespace, "keyvalues", kind_of=lambda _: "KeyValues"),
        bench.watch(namespace, "objectstores", kind_of=lambda _: "ObjectStores"),
    ]
    streams = [stream_body(i, "K", 3, "cluster") for i in range(count)] + [
        stream_body(i, "K", 1, "cluster") for i in range(count, 2 * count)
    ]
    bench.create_many(namespace, "streams", streams)
    bench.create_many(
        namespace, "consumers", [consumer_body(i, "cluster") for i in range(2 * count)]
    )
    for plural, kind in (("keyvalues", "KeyValue"), ("objectstores", "ObjectStore")):
        buckets = [
            {
                "kind": kind,
                "metadata": {"name": f"b{i}"},
                "spec": {
                    "bucket": f"b{i}",
                    "replicas": 3 if i % 2 else 1,
                    "connectionRef": "cluster",
                },
            }
            for i in range(count)
        ]
        bench.create_many(namespace, plural, buckets)
    wait_ready(watches[:1], 1, timeout=300)
    wait_ready(watches[1:3], 2 * count, timeout=600)
    wait_ready(watches[3:], count, timeout=600)
    return watches


def idle_resources(size: int, kind_count: int) -> int:
    """Resources in place during the idle measure: N streams and N consumers, plus
    `idle_kinds`' streams, their consumers, buckets, stores and the connection."""
    return 2 * size + 2 * kind_count + 2 * kind_count + 2 * kind_count + 1


def idle_cost(
    bench: Bench, seconds: float, watches: list[ObjectWatch], audit: ApiAudit
) -> dict[str, Any]:
    """Over `seconds`: writes by verb and resource, status changes by kind (from watches),
    JetStream API requests (audit advisories) and the operator's own count by operation."""
    for each in watches:
        each.count_from()
    writes_before, api_before = bench.writes(), audit.snapshot()
    operations_before = bench.operator_requests()
    time.sleep(seconds)
    writes, api = bench.writes() - writes_before, audit.snapshot() - api_before
    operations_after = bench.operator_requests()
    per_minute = 60.0 / seconds
    kinds, fields, examples = counted_changes(watches)
    return {
        "seconds": seconds,
        "changed_fields": dict(fields),
        "examples": examples,
        "k8s_writes_per_min": foreground(writes) * per_minute,
        "k8s_writes": breakdown(writes, per_minute),
        "kind_changes": {kind: n * per_minute for kind, n in kinds.items()},
        "nats_requests_per_min": sum(api.values()) * per_minute,
        "nats_per_resync": sum(api.values()) * RESYNC_INTERVAL / seconds,
        "nats_requests": breakdown(api, RESYNC_INTERVAL / seconds),
        "operator_requests_per_min": {
            operation: (count - operations_before.get(operation, 0)) * per_minute
            for operation, count in operations_after.items()
            if count != operations_before.get(operation, 0)
        },
    }


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] * 1000 if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000


async def drift_latency(
    url: str,
    prefix: str,
    samples: int,
    timeout: float = 10.0,
    at_once: bool = False,
    expected_max_msgs: int = -1,
) -> dict[str, Any]:
    """Out-of-band changes (max_msgs) and then deletions of `samples` streams, each timed until
    the server shows the declared stream again; one after another, or all at once (a controller
    that repairs only on a timer would take `samples` times its period one after another). A
    repair that takes longer than `timeout` counts as not repaired."""
    nc = await nats.connect(url)
    jetstream = JetStreamApi(nc)
    names = [f"{prefix}_{index}" for index in range(samples)]

    async def until(probe: Callable[[], Awaitable[bool]]) -> float | None:
        started = time.perf_counter()
        while not await probe():
            if time.perf_counter() - started > timeout:
                return None
            await asyncio.sleep(0.005 if not at_once else 0.05)
        return time.perf_counter() - started

    async def change(name: str) -> float | None:
        info = await jetstream.stream_info(name)
        assert info is not None, name
        await jetstream.update_stream({**info["config"], "max_msgs": 12345})

        async def restored() -> bool:
            current = await jetstream.stream_info(name)
            return current is not None and current["config"]["max_msgs"] == expected_max_msgs

        return await until(restored)

    async def delete(name: str) -> float | None:
        await jetstream.delete_stream(name)

        async def back() -> bool:
            return await jetstream.stream_info(name) is not None

        return await until(back)

    async def each(step: Callable[[str], Awaitable[float | None]]) -> list[float]:
        if at_once:
            took = await asyncio.gather(*(step(name) for name in names))
        else:
            took = [await step(name) for name in names]
        return [value for value in took if value is not None]

    if at_once:
        changes, deletions = await each(change), await each(delete)
    else:  # each stream changed, then deleted, before the next
        changes, deletions = [], []
        for name in names:
            changes += [t for t in [await change(name)] if t is not None]
            deletions += [t for t in [await delete(name)] if t is not None]
    await nc.close()
    return {
        "samples": samples,
        "at_once": at_once,
        "timeout_s": timeout,
        "changes_repaired": len(changes),
        "deletions_repaired": len(deletions),
        "change_p50_ms": percentile(changes, 50),
        "change_p99_ms": percentile(changes, 99),
        "delete_p50_ms": percentile(deletions, 50),
        "delete_p99_ms": percentile(deletions, 99),
    }


def after_drift(
    bench: Bench, watches: list[ObjectWatch], quiet: float = 35.0, limit: float = 150.0
) -> dict[str, Any]:
    """The writes that follow the drift repairs, until none came for `quiet` seconds (longer
    than a resync, so a status that only a resync corrects is counted here): the restart after
    it then starts from resources in sync, as it claims."""
    for each in watches:
        each.count_from()
    started = time.monotonic()
    before = last = bench.writes()
    last_change = started
    while time.monotonic() - last_change < quiet and time.monotonic() - started < limit:
        time.sleep(1.0)
        now = bench.writes()
        if foreground(now - last):
            last_change = time.monotonic()
        last = now
    kinds, fields, examples = counted_changes(watches)
    writes = last - before
    return {
        "quiet_after_s": last_change - started,
        "settled": time.monotonic() - last_change >= quiet,
        "writes": breakdown(Counter({k: n for k, n in writes.items() if n})),
        "changed_fields": dict(fields),
        "examples": examples,
        "status_changes": dict(kinds),
    }


def restart(bench: Bench, watches: list[ObjectWatch], seconds: float) -> dict[str, Any]:
    """Stop the operator and start it again with every resource in place and in sync: the
    writes it makes in the next `seconds`, and when its last one was."""
    bench.operator.stop()
    time.sleep(2)
    for each in watches:
        each.count_from()
    writes_before = bench.writes()
    started = time.monotonic()
    bench.operator.start()
    healthy = time.monotonic() - started
    time.sleep(seconds)
    writes = bench.writes() - writes_before
    rss = bench.operator_rss_mib()
    last = max((each.last_change for each in watches), default=0.0)
    kinds, fields, examples = counted_changes(watches)
    return {
        "seconds": seconds,
        "changed_fields": dict(fields),
        "examples": examples,
        "healthy_s": healthy,
        "status_changes": dict(kinds),
        "writes": breakdown(Counter({k: n for k, n in writes.items() if n})),
        "foreground_writes": foreground(writes),
        "last_write_s": (last - started) if last else 0.0,
        "rss": rss,
    }


# -- busy streams ----------------------------------------------------------------------------------


def busy(size: int, seconds: float, rate: float) -> dict[str, Any]:
    """N streams (no consumers) all receiving messages: status writes a minute against the
    budget (JETSTREAM_OPERATOR_STATUS_INTERVAL per resource, _STATUS_WRITES_PER_SECOND)."""
    with tempfile.TemporaryDirectory(prefix=f"jso-busy-{size}-") as directory:
        bench = Bench(Path(directory))
        try:
            bench.start()
            warm_up(bench)
            namespace = bench.namespace(f"busy-{size}")
            with watching([bench.watch(namespace, "streams")]) as watches:
                bench.create_many(namespace, "streams", [stream_body(i, "H") for i in range(size)])
                wait_ready(watches, size)
                # Counters are written at most once per interval per resource, and the first
                # change of each is written at once: count from one interval in, steady state.
                warm = SETTINGS.status_interval + 5
                with ThreadPoolExecutor(max_workers=1) as pool:
                    sending = pool.submit(
                        lambda: asyncio.run(
                            publish(bench.nats.url, "h", size, warm + seconds, rate)
                        )
                    )
                    time.sleep(warm)
                    watches[0].count_from()
                    writes_before = bench.writes()
                    time.sleep(seconds)
                    writes = bench.writes() - writes_before
                    changes = sum(watches[0].changes.values())
                    published = sending.result(timeout=120)
        finally:
            bench.stop()
    per_minute = 60.0 / seconds
    budget = StatusBudget.for_intervals(
        SETTINGS.status_interval, SETTINGS.status_writes_per_second, SETTINGS.resync_interval
    )
    return {
        "size": size,
        "seconds": seconds,
        "published_per_s": published / (seconds + SETTINGS.status_interval + 5),
        "status_writes_per_min": changes * per_minute,
        "writes": breakdown(writes, per_minute),
        "budget_per_min": min(budget.rate * 60, size * 60 / budget.interval),
        # A window of the run's length may also hold one full bucket, which a minute's rate
        # does not show: this is the figure the count must stay under.
        "bound_in_window": budget.most_in(seconds, size),
        "status_writes": changes,
    }


async def publish(url: str, prefix: str, streams: int, seconds: float, rate: float) -> int:
    """Core publishes round-robin over the streams' subjects at about `rate` messages/s."""
    nc = await nats.connect(url)
    sent = 0
    started = time.perf_counter()
    payload = b"x" * 64
    while (elapsed := time.perf_counter() - started) < seconds:
        target = int(elapsed * rate)
        while sent < target:
            await nc.publish(f"{prefix}_{sent % streams}.m", payload)
            sent += 1
        await nc.flush()
        await asyncio.sleep(0.05)
    await nc.close()
    return sent


# -- memory ----------------------------------------------------------------------------------------


def heap(size: int, top: int = 15, frames: int = 8) -> dict[str, Any]:
    """The operator with bench/heapprobe/sitecustomize.py: tracemalloc started after the
    warm-up, its Python heap by owner then and once N Streams and N Consumers are Ready (and
    10 s settled), so the difference is what the resources cost, and whose code holds it.
    Each dump restarts tracing, so the second holds exactly what was allocated since the
    first (less what was freed)."""
    with tempfile.TemporaryDirectory(prefix=f"jso-heap-{size}-") as directory:
        out = Path(directory) / "heap.json"
        bench = Bench(Path(directory))

        def dump(number: int) -> dict[str, Any]:
            assert bench.operator.pid is not None
            os.kill(bench.operator.pid, signal.SIGUSR2)
            path = Path(f"{out}.{number}")
            deadline = time.monotonic() + 600
            while not path.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no heap snapshot {path}")
                time.sleep(1)
            return cast(dict[str, Any], json.loads(path.read_text()))

        try:
            bench.start(
                extra_env={
                    "PYTHONPATH": os.pathsep.join(
                        [str(HEAP_PROBE), os.environ.get("PYTHONPATH", "")]
                    ),
                    "JSO_HEAP_PROBE_FRAMES": str(frames),
                    "JSO_HEAP_PROBE_OUT": str(out),
                }
            )
            before: dict[str, Any] = {}

            def start_tracing() -> None:
                assert bench.operator.pid is not None
                os.kill(bench.operator.pid, signal.SIGUSR1)
                time.sleep(1)
                before.update(dump(1))

            row = convergence(bench, size, 10, [f"heap-{size}"], before_apply=start_tracing)
            after = dump(2)
        finally:
            bench.stop()
    resources = 2 * size

    def growth(key: str) -> list[tuple[str, float]]:
        grown = {name: value / resources for name, value in after[key].items()}
        return sorted(grown.items(), key=lambda item: -item[1])

    return {
        "size": size,
        "rss": row["rss"],
        "traced_before_mib": before["total"] / 2**20,
        "traced_after_mib": after["total"] / 2**20,
        "per_resource_kib": after["total"] / resources / 1024,
        "registry_kib": after["registry_bodies"] / max(1, after["registry_resources"]) / 1024,
        "registry_resources": after["registry_resources"],
        "by_package": [(name, value / 1024) for name, value in growth("by_package")],
        "by_file": [(name, value / 1024) for name, value in growth("by_file")[:top]],
    }


# -- one size --------------------------------------------------------------------------------------


def run_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size on fresh servers: convergence and settling; at the idle size, idle cost per kind,
    drift repair and a restart; then the floor on the same servers."""
    idle = size == args.idle_size
    with tempfile.TemporaryDirectory(prefix=f"jso-bench-{size}-") as directory:
        bench = Bench(Path(directory), cluster=idle)
        try:
            bench.start()
            recording = profile_recording(bench, size, args)
            row = convergence(
                bench,
                size,
                args.settle,
                [f"bench-{size}"],
                before_apply=recording.start if recording else None,
            )
            if recording is not None:
                recording.join()
                row["apiserver_profile"] = {
                    "path": str(recording.path),
                    "seconds": recording.seconds,
                    "shares": apiserver_profile.shares(recording.path),
                    "error": str(recording.error or ""),
                }
            if idle:
                kinds = idle_kinds(bench, args.kind_count)
                bench_watches = [
                    bench.watch(f"bench-{size}", "streams", kind_of=stream_kind),
                    bench.watch(f"bench-{size}", "consumers"),
                ]
                with watching(kinds + bench_watches):
                    wait_ready(bench_watches, size, timeout=120)
                    time.sleep(args.settle)
                    audit = ApiAudit(bench.nats_urls())
                    try:
                        row["idle"] = idle_cost(
                            bench, args.idle_seconds, kinds + bench_watches, audit
                        )
                    finally:
                        audit.close()
                    row["idle_rss"] = bench.operator_rss_mib()
                    drift_before = bench.drift_counts()
                    row["drift"] = asyncio.run(
                        drift_latency(bench.nats.url, f"B{size}", args.drift_samples)
                    )
                    row["drift_at_once"] = asyncio.run(  # as nack_bench measures NACK
                        drift_latency(
                            bench.nats.url, f"B{size}", args.nack_drift_samples, 70.0, True
                        )
                    )
                    row["after_drift"] = after_drift(bench, kinds + bench_watches)
                    row["drift_counts"] = dict(bench.drift_counts() - drift_before)
                    row["restart"] = restart(bench, kinds + bench_watches, args.restart_seconds)
            row["deletion"] = deletion(
                bench.delete_one,
                bench.objects,
                f"bench-{size}",
                bench.nats.url,
                f"B{size}",
                cpu=bench.cpu_seconds,
            )
            add_floor(bench, row)
            if args.ideal:
                add_ideal(bench, row)
        finally:
            bench.stop()
            keep_logs(bench, args.keep_logs, f"{size}")
    print(json.dumps(row), flush=True)
    return row


def keep_logs(bench: Bench, directory: Path | None, label: str) -> None:
    """Copy the operators' logs out of the run's temporary directory (--keep-logs)."""
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M}"
    for log in sorted(bench.workdir.glob("operator-*.log")):
        shutil.copyfile(log, directory / f"{label}-{stamp}-{log.name}")


def profile_recording(
    bench: Bench, size: int, args: argparse.Namespace
) -> apiserver_profile.ProfileRecording | None:
    if args.apiserver_profile is None:
        return None
    args.apiserver_profile.mkdir(parents=True, exist_ok=True)
    path = args.apiserver_profile / f"kube-apiserver-{size}-{datetime.now(UTC):%Y%m%d-%H%M}.pprof"
    return apiserver_profile.ProfileRecording(bench.plane, args.apiserver_profile_seconds, path)


SHARD_LABEL = f"{GROUP}/shard"
SPLITS = {
    "namespaces": "disjoint namespace sets",
    "labels": f"one namespace, {SHARD_LABEL}=a and =b",
}


def run_split(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Two operators on disjoint namespace sets (JETSTREAM_OPERATOR_NAMESPACES globs), the
    resources spread evenly over one namespace of each; or, `--split-by labels`, on one
    namespace, every other stream and its consumer labelled for each
    (JETSTREAM_OPERATOR_SELECTOR)."""
    with tempfile.TemporaryDirectory(prefix=f"jso-split-{size}-") as directory:
        bench = Bench(Path(directory))
        try:
            if args.split_by == "labels":
                bench.start(shards=[{SHARD_LABEL: "a"}, {SHARD_LABEL: "b"}])
                names = [f"split-{size}"]
            else:
                bench.start(namespaces=["warm-up,split-a-*", "split-b-*"])
                names = [f"split-a-{size}", f"split-b-{size}"]
            row = convergence(bench, size, args.settle, names)
            row["namespaces"] = names
            row["split_by"] = args.split_by
            row["rss_each"] = [rss_mib(each.pid) for each in bench.operators]
            add_floor(bench, row)
        finally:
            bench.stop()
            keep_logs(bench, args.keep_logs, f"split-{size}")
    print(json.dumps(row), flush=True)
    return row


# -- report ----------------------------------------------------------------------------------------


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


def convergence_table(rows: list[dict[str, Any]], label: str = "") -> list[str]:
    lines = [
        "| run | N streams + N consumers | wall (s) | floor (s): nats-py + status patches | ratio "
        "| applying alone (s) | applying while converging (s) | slowdown | RSS (MiB) "
        "| streams without consumerCount at last Ready | writes after last Ready "
        "| last write after last Ready (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.get('label', label or 'operator')} | {row['size']} | {row['wall']:.1f} "
            f"| {row['floor']:.1f} ({row['nats']:.1f} + {row['patches']:.1f}) "
            f"| {row['ratio']:.2f}x | {row['apply']:.1f} | {row['created']:.1f} "
            f"| {row['apply_slowdown']:.2f}x | {row['rss']:.0f} | {row['status_incomplete']} "
            f"| {breakdown(Counter(row['late_writes']))} | {row['last_write_after_ready']:.1f} |"
        )
    lines.append("")
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), writes while converging: "
        f"{breakdown(Counter(row['writes_converging']))} "
        f"({foreground(Counter(row['writes_converging'])) / (2 * row['size']):.2f} per resource); "
        f"fields changed after the last Ready: {breakdown(Counter(row['late_fields']))}"
        for row in rows
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), {jetstream_line(row)}"
        for row in rows
        if "jetstream_converging" in row
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), seconds until "
        + ", ".join(f"{share:.0%}" for share in TIMELINE_SHARES)
        + " were Ready: "
        + "; ".join(
            f"{plural} " + " / ".join(f"{at:.1f}" for at in times)
            for plural, times in row["timeline"].items()
        )
        + f" (applies done at {row['created']:.1f})"
        for row in rows
        if row.get("timeline")
    ]
    lines += [
        f"- N={row['size']} ({row.get('label', 'operator')}), {cpu_line(row)}"
        for row in rows
        if "cpu_converging" in row
    ]
    lines += [ideal_line(row) for row in rows if "ideal_wall" in row]
    lines += [
        apiserver_profile.line(Path(found["path"]), found["seconds"], found["shares"])
        + (f" (recording failed: {found['error']})" if found["error"] else "")
        for row in rows
        if (found := row.get("apiserver_profile"))
    ]
    return lines


def ideal_line(row: dict[str, Any]) -> str:
    cpu = Counter(row["cpu_ideal"])
    return (
        f"- N={row['size']}, the ideal controller (bench/ideal_controller.py: the floor's "
        f"requests as each object arrives, nothing else): **{row['ideal_wall']:.1f} s, "
        f"{row['ideal_ratio']:.2f}x the floor**, applies {row['ideal_created']:.1f} s "
        f"({row['ideal_apply_slowdown']:.2f}x alone); CPU s: "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.most_common())
        + f". CPU bound for any controller (the applies alone and the floor's server work over "
        f"{os.cpu_count()} cores, or the applies' time if longer): {row['cpu_bound']:.1f} s, "
        f"{row['cpu_bound_ratio']:.2f}x the floor"
    )


def first_changes(figures: dict[str, Any]) -> list[str]:
    """The first change of each field, as a line, when there were any: which value was right."""
    examples: dict[str, str] = figures.get("examples") or {}
    if not examples:
        return []
    return [
        "- first change of each field: "
        + "; ".join(f"{key} ({change})" for key, change in sorted(examples.items()))
    ]


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


def alternated_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Ours and NACK legacy at one size, alternated with the order flipped every round, each on
    fresh servers. A single run at N = 1,000 moves by a third with the machine's state, which
    grows run after run (docs/benchmarks.md), so one run of each, minutes apart, cannot call
    a winner at that size."""
    import nack_bench  # imports this module: only needed with NACK

    nack = nack_bench.Nack.inspect(
        args.nack_bin.expanduser(), args.nack_crds.expanduser(), args.nack_version
    )
    plain = argparse.Namespace(**{**vars(args), "idle_size": 0, "sizes": [0]})  # no idle parts
    rounds = []
    for index in range(args.rounds):
        order = ("ours", "nack") if index % 2 == 0 else ("nack", "ours")
        runs: dict[str, Any] = {"first": order[0]}
        for who in order:
            print(f"round {index + 1}: {who} N={args.rounds_size} ...", flush=True)
            if who == "ours":
                runs[who] = run_size(args.rounds_size, plain)
            else:
                runs[who] = nack_bench.run_one(nack, "legacy", args.rounds_size, plain)
            print(json.dumps(runs[who], default=str), flush=True)
        rounds.append(runs)
    return rounds


def rounds_lines(rounds: list[dict[str, Any]], size: int) -> list[str]:
    def cells(row: dict[str, Any], process: str) -> str:
        if "failed" in row or "wall" not in row:
            return f"failed: {row.get('failed', 'no figures')}"
        cpu = row.get("cpu_converging") or {}
        return (
            f"{row['wall']:.1f} s / {row['ratio']:.2f}x / {row['apply_slowdown']:.2f}x / "
            f"{cpu.get('kube-apiserver', 0.0):.1f}, {cpu.get(process, 0.0):.1f}"
        )

    lines = [
        "",
        f"Alternated rounds at N={size}, ours and NACK legacy, the order flipped every round, "
        "fresh servers for each run:",
        "",
        "| round | ours: wall / ratio / applies slowed / CPU s kube-apiserver, operator | "
        "NACK legacy: wall / ratio / applies slowed / CPU s kube-apiserver, NACK |",
        "|---|---|---|",
    ]
    for index, runs in enumerate(rounds, 1):
        lines.append(
            f"| {index} ({'ours' if runs['first'] == 'ours' else 'NACK'} first) | "
            f"{cells(runs['ours'], 'operator')} | {cells(runs['nack'], 'nack')} |"
        )
    both = [r for r in rounds if all("wall" in r[who] for who in ("ours", "nack"))]
    if both:

        def median(who: str, key: str) -> float:
            return float(statistics.median(r[who][key] for r in both))

        won = sum(r["ours"]["wall"] < r["nack"]["wall"] for r in both)
        lines.append(
            f"- medians over {len(both)} rounds: ours {median('ours', 'wall'):.1f} s "
            f"({median('ours', 'ratio'):.2f}x, applies {median('ours', 'apply_slowdown'):.2f}x), "
            f"NACK legacy {median('nack', 'wall'):.1f} s ({median('nack', 'ratio'):.2f}x, "
            f"applies {median('nack', 'apply_slowdown'):.2f}x); ours faster in {won} of "
            f"{len(both)}"
        )
    lines += [
        f"- round {index}: {ideal_line(runs['ours'])[2:]}"
        for index, runs in enumerate(rounds, 1)
        if "ideal_wall" in runs["ours"]
    ]
    return lines


def report(rows: list[dict[str, Any]], extras: dict[str, Any], args: argparse.Namespace) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in sorted(OPERATOR_ENV.items())) or "defaults"
    lines = [
        f"Machine: {machine()}; operator settings: {settings}; identities: {Bench.identity_mode}; "
        f"applied: {Bench.apply_order}; finalizer at admission: "
        f"{'on' if Bench.admission_finalizer else 'off'}",
        "",
        *(convergence_table(rows) if rows else []),
    ]
    if any("deletion" in row for row in rows):
        lines += [
            "",
            "Deletion, `kubectl delete -f` of the applied resources (Streams, then Consumers; 8 "
            "requests at a time); alone: the same requests for the objects applied alone, with "
            "the operator stopped (their finalizers stay):",
            *deletion_lines("ours", rows),
        ]
    idle_row = next((row for row in rows if "idle" in row), None)
    if idle_row:
        idle, drift, again = idle_row["idle"], idle_row["drift"], idle_row["restart"]
        lines += [
            "",
            f"Idle, N={idle_row['size']} plus {args.kind_count} R3 and {args.kind_count} R1 "
            f"streams with a consumer each, {args.kind_count} KeyValues and {args.kind_count} "
            "ObjectStores (half R3) on a NatsConnection to a 3-node cluster, "
            f"{idle['seconds']:.0f} s after {args.settle:.0f} s settling:",
            f"- Kubernetes writes/min (not counting leases): {idle['k8s_writes_per_min']:.1f}; "
            f"all by verb and resource: {idle['k8s_writes']}",
            "- status changes/min by kind: "
            + (", ".join(f"{k} {v:.1f}" for k, v in sorted(idle["kind_changes"].items())) or "none")
            + f"; fields changed: {breakdown(Counter(idle['changed_fields']))}",
            *first_changes(idle),
            f"- JetStream API requests (audit advisories) per {RESYNC_INTERVAL:.0f} s resync: "
            f"{idle['nats_per_resync']:.1f} (1 per 256 resources = "
            f"{idle_resources(idle_row['size'], args.kind_count) / 256:.1f}; N/256 = "
            f"{idle_row['size'] / 256:.1f}); "
            f"by request: {idle['nats_requests']}",
            "- the operator's own count, per minute: "
            + (
                ", ".join(
                    f"{op} {rate:.1f}"
                    for op, rate in sorted(idle["operator_requests_per_min"].items())
                )
                or "none"
            ),
            f"- operator RSS idle: {idle_row['idle_rss']:.0f} MiB",
            "",
            f"Drift repair over {drift['samples']} streams: change p50 "
            f"{drift['change_p50_ms']:.0f} ms, p99 {drift['change_p99_ms']:.0f} ms "
            f"({drift['changes_repaired']}/{drift['samples']} within {drift['timeout_s']:.0f} s); "
            f"deletion p50 {drift['delete_p50_ms']:.0f} ms, p99 {drift['delete_p99_ms']:.0f} ms "
            f"({drift['deletions_repaired']}/{drift['samples']})",
            f"- {idle_row['drift_at_once']['samples']} streams changed at once: p50 "
            f"{idle_row['drift_at_once']['change_p50_ms']:.0f} ms, p99 "
            f"{idle_row['drift_at_once']['change_p99_ms']:.0f} ms "
            f"({idle_row['drift_at_once']['changes_repaired']} repaired); deleted at once: p50 "
            f"{idle_row['drift_at_once']['delete_p50_ms']:.0f} ms, p99 "
            f"{idle_row['drift_at_once']['delete_p99_ms']:.0f} ms "
            f"({idle_row['drift_at_once']['deletions_repaired']} recreated)",
        ]
        settling = idle_row.get("after_drift")
        if settling is not None:
            lines += [
                f"- After the repairs: last write {settling['quiet_after_s']:.1f} s after the "
                f"drift runs (quiet for 35 s: {'yes' if settling['settled'] else 'no'}); writes "
                f"{settling['writes'] or 'none'}; fields changed: "
                f"{breakdown(Counter(settling['changed_fields']))}",
                *first_changes(settling),
                "- the operator's own count over the drift runs and after: "
                + breakdown(Counter(idle_row.get("drift_counts") or {})),
            ]
        lines += [
            "",
            f"Restart with everything in place: healthy after {again['healthy_s']:.1f} s; "
            f"in the next {again['seconds']:.0f} s, status changes "
            f"{again['status_changes'] or 'none'}, writes {again['writes']}, "
            f"last write {again['last_write_s']:.1f} s after start; fields changed: "
            f"{breakdown(Counter(again['changed_fields']))}; operator RSS at the end "
            f"{again.get('rss', 0.0):.0f} MiB",
        ]
        lines += first_changes(again)
    if "busy" in extras:
        b = extras["busy"]
        lines += [
            "",
            f"Busy: {b['size']} streams receiving {b['published_per_s']:.0f} msg/s in all for "
            f"{b['seconds']:.0f} s: {b['status_writes_per_min']:.1f} status writes/min "
            f"(steady budget {b['budget_per_min']:.0f}/min); "
            f"{b.get('status_writes', 0):.0f} in the window, at most "
            f"{b.get('bound_in_window', 0):.0f} allowed (the rate plus one "
            f"resync's bucket); writes/min {b['writes']}",
        ]
    if "heap" in extras:
        h = extras["heap"]
        lines += [
            "",
            f"Heap at N={h['size']} ({2 * h['size']} resources) under tracemalloc: RSS "
            f"{h['rss']:.0f} MiB; Python heap allocated and still held after applying "
            f"{h['traced_after_mib']:.1f} MiB, "
            f"{h['per_resource_kib']:.1f} KiB per resource; the bodies our registry keeps: "
            f"{h['registry_kib']:.1f} KiB per resource ({h['registry_resources']} tracked). "
            "Per resource, by allocating package (KiB): "
            + ", ".join(f"{name} {kib:.1f}" for name, kib in h["by_package"] if abs(kib) >= 0.1),
            "- by file (KiB per resource): "
            + ", ".join(f"{name} {kib:.1f}" for name, kib in h["by_file"]),
        ]
    if "split" in extras:
        by = extras["split"].get("split_by", "namespaces")
        lines += ["", f"Two operators, split by {by} ({SPLITS[by]}):"]
        lines += convergence_table([{**extras["split"], "label": "2 operators"}])
        lines.append(
            f"- RSS each (MiB): {', '.join(f'{v:.0f}' for v in extras['split']['rss_each'])}"
        )
    if "nack" in extras:
        lines += ["", extras["nack"]]
    if "rounds" in extras:
        lines += rounds_lines(extras["rounds"], args.rounds_size)
    return "\n".join(lines)


def deadline_guard(seconds: float) -> None:
    """Ends the whole run (servers are children in their own sessions: stop them at exit)."""

    def expire() -> None:
        print(f"bench: overall deadline of {seconds:.0f} s passed; stopping", file=sys.stderr)
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000])
    parser.add_argument(
        "--idle-size", type=int, default=1000, help="one of --sizes, or 0 for no idle part"
    )
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument(
        "--kind-count", type=int, default=20, help="R3 and R1 streams on a connection"
    )
    parser.add_argument("--drift-samples", type=int, default=50)
    parser.add_argument("--restart-seconds", type=float, default=60)
    parser.add_argument(
        "--settle", type=float, default=45, help="seconds watched after the last resource is Ready"
    )
    parser.add_argument("--busy", type=int, help="streams for the busy-streams run")
    parser.add_argument("--busy-seconds", type=float, default=120)
    parser.add_argument("--busy-rate", type=float, default=2000, help="messages/s over all")
    parser.add_argument("--heap-size", type=int, help="N for a tracemalloc run (slow)")
    parser.add_argument("--split", type=int, help="N for a run with two operators")
    parser.add_argument("--split-by", choices=sorted(SPLITS), default="namespaces")
    parser.add_argument("--deadline", type=float, default=4 * 3600, help="seconds for everything")
    parser.add_argument("--nack-bin", type=Path, default=os.environ.get("NACK_BIN"))
    parser.add_argument("--nack-crds", type=Path, default=os.environ.get("NACK_CRDS"))
    parser.add_argument("--nack-sizes", type=int, nargs="+", help="default: --sizes")
    parser.add_argument("--nack-version", help="label for the tables, e.g. v0.22.4-9-gf6dad09")
    parser.add_argument("--nack-modes", nargs="+", default=["legacy", "control-loop"])
    parser.add_argument("--nack-drift-samples", type=int, default=20)
    parser.add_argument("--nack-drift-timeout", type=float, default=90)
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="alternated runs of ours and NACK legacy at --rounds-size, last (needs --nack-bin)",
    )
    parser.add_argument("--rounds-size", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per convergence")
    parser.add_argument(
        "--ideal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the floor, the same applies served by bench/ideal_controller.py",
    )
    parser.add_argument(
        "--apiserver-profile",
        type=Path,
        metavar="DIR",
        help="record kube-apiserver's CPU profile while converging, into DIR",
    )
    parser.add_argument("--apiserver-profile-seconds", type=float, default=20)
    parser.add_argument(
        "--keep-logs", type=Path, metavar="DIR", help="copy each run's operator logs into DIR"
    )
    parser.add_argument(
        "--identities",
        choices=identities.MODES,
        default="admin",
        help="workload: flow control on, controllers as a ServiceAccount, applies as a user",
    )
    parser.add_argument(
        "--apply-order",
        choices=APPLY_ORDERS,
        default="kinds",
        help="kinds: every stream, then every consumer; pairs: each stream with its consumer",
    )
    parser.add_argument(
        "--admission-finalizer",
        choices=["on", "off"],
        default="on",
        help="on: the chart's MutatingAdmissionPolicy adds the finalizer at creation (the "
        "chart's default where the API is served); off: the operator patches it in",
    )
    parser.add_argument(
        "--operator-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for every operator of the run, e.g. JETSTREAM_OPERATOR_EVENTS=warnings",
    )
    args = parser.parse_args()
    OPERATOR_ENV.update(pair.split("=", 1) for pair in args.operator_env)
    Bench.identity_mode = args.identities
    Bench.apply_order = args.apply_order
    Bench.admission_finalizer = args.admission_finalizer == "on"
    Bench.profiling = args.apiserver_profile is not None
    if args.sizes and args.idle_size and args.idle_size not in args.sizes:
        parser.error("--idle-size must be one of --sizes, or 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))  # runs the finally: blocks
    deadline_guard(args.deadline)
    rows = [run_size(size, args) for size in args.sizes]
    extras: dict[str, Any] = {}
    if args.nack_bin:  # right after ours, so the comparison shares the machine's conditions
        import nack_bench  # imports this module: only needed with NACK

        extras["nack"] = nack_bench.run_all(
            args.nack_bin, args.nack_crds, args.nack_sizes or args.sizes, args
        )
        print(extras["nack"], flush=True)
    if args.busy:
        extras["busy"] = busy(args.busy, args.busy_seconds, args.busy_rate)
        print(json.dumps(extras["busy"]), flush=True)
    if args.split:
        extras["split"] = run_split(args.split, args)
    if args.rounds and args.nack_bin:
        extras["rounds"] = alternated_rounds(args)
    if args.heap_size:
        extras["heap"] = heap(args.heap_size)
        print(json.dumps(extras["heap"]), flush=True)
    text = report(rows, extras, args)
    print(text)
    save_result("operator", text)
    print(json.dumps({"rows": rows, "extras": extras}, default=str))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR))
    sys.exit(main())
