"""Operator benchmarks: convergence against its floor, idle cost, drift repair latency, memory.

Runs everything on this machine with the project's own servers (kube-apiserver + etcd, one
nats-server) and the operator as a process, so the figures are end to end. Each size gets fresh
servers and a fresh operator, so its memory and idle figures are its own:

    .venv/bin/python bench/operator_bench.py --sizes 100 1000 5000 --idle-size 1000

Prints Markdown tables (and writes them to bench/results/) for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from kubernetes import client, config, watch

from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.crdgen import all_crds
from jetstream_operator.devenv.controlplane import ControlPlane
from jetstream_operator.devenv.natsserver import NatsServer
from jetstream_operator.devenv.operator_process import OperatorProcess
from jetstream_operator.devenv.paths import free_port
from jetstream_operator.k8s.crds import apply_crds
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.settings import OperatorSettings

RESULTS = Path(__file__).resolve().parent / "results"
RESYNC_INTERVAL = OperatorSettings().resync_interval
"""The operator runs with production settings; the idle figures are per resync of this."""


class Bench:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.plane = ControlPlane(workdir / "cp")
        self.nats = NatsServer(workdir / "nats")
        self.operator: OperatorProcess | None = None
        self.metrics_port = free_port()

    def start(self) -> None:
        self.plane.start()
        self.nats.start()
        self.api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(self.plane.kubeconfig)
        )
        apply_crds(self.api, all_crds())
        self.objects = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.operator = OperatorProcess(
            self.plane.kubeconfig,
            self.nats.url,
            self.workdir / "operator.log",
            extra_env={"JETSTREAM_OPERATOR_METRICS_PORT": str(self.metrics_port)},
            verbose=False,  # production logging, as the chart's default
        )
        self.operator.start()

    def stop(self) -> None:
        if self.operator:
            self.operator.stop()
        self.nats.stop()
        self.plane.stop()

    # -- helpers -----------------------------------------------------------------------

    def namespace(self, name: str) -> str:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        return name

    def create_many(self, namespace: str, plural: str, bodies: list[dict[str, Any]]) -> None:
        def create(body: dict[str, Any]) -> None:
            self.objects.create_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, {"apiVersion": f"{GROUP}/{VERSION}", **body}
            )

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(create, bodies))

    def watch_ready(self, namespace: str, plural: str) -> ReadyWatch:
        """Counts Ready objects from a watch: polling lists of 10,000 objects would load the
        API server more than the operator does."""
        return ReadyWatch(self.objects, namespace, plural)

    def apiserver_writes(self) -> int:
        """Writes (POST/PUT/PATCH/DELETE) the API server has served, from its own /metrics."""
        request = urllib.request.Request(f"{self.plane.url}/metrics")
        with urllib.request.urlopen(request, context=self.plane.ssl_context()) as answer:
            text = answer.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith("apiserver_request_total{") and any(
                f'verb="{verb}"' in line for verb in ("POST", "PUT", "PATCH", "DELETE", "APPLY")
            ):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def operator_requests(self) -> dict[str, int]:
        """JetStream requests the operator made, by operation, from its own /metrics."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        prefix = 'jetstream_operator_nats_request_duration_seconds_count{operation="'
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith(prefix):
                operation = line[len(prefix) :].split('"', 1)[0]
                counts[operation] = int(float(line.rsplit(" ", 1)[1]))
        return counts

    def nats_api_requests(self) -> int:
        jsz = self.nats.monitor("jsz")
        return int((jsz.get("api") or {}).get("total", 0))

    def operator_rss_mib(self) -> float:
        assert self.operator and self.operator.pid
        status = Path(f"/proc/{self.operator.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


class ReadyWatch:
    """The names of one plural's Ready objects in a namespace, kept by a watch in a thread."""

    def __init__(self, objects: client.CustomObjectsApi, namespace: str, plural: str) -> None:
        self.ready: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(objects, namespace, plural), daemon=True
        )
        self._thread.start()

    def _run(self, objects: client.CustomObjectsApi, namespace: str, plural: str) -> None:
        try:
            self._follow(objects, namespace, plural)
        except Exception:
            if not self._stop.is_set():  # the servers stop under a watch that was not needed
                raise

    def _follow(self, objects: client.CustomObjectsApi, namespace: str, plural: str) -> None:
        version = ""
        while not self._stop.is_set():
            stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                objects.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                plural,
                resource_version=version,
                timeout_seconds=30,
            )
            for event in stream:
                item = event["object"]
                version = item["metadata"]["resourceVersion"]
                name = item["metadata"]["name"]
                conditions = (item.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    self.ready.add(name)
                else:
                    self.ready.discard(name)
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()


def wait_ready(watches: list[ReadyWatch], wanted: int, timeout: float = 3600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(len(each.ready) >= wanted for each in watches):
            return
        time.sleep(0.05)
    raise TimeoutError(f"not all Ready within {timeout}s")


def stream_body(index: int, prefix: str) -> dict[str, Any]:
    name = f"{prefix}_{index}"
    return {
        "kind": "Stream",
        "metadata": {"name": f"s{index}"},
        "spec": {"name": name, "subjects": [f"{name.lower()}.>"]},
    }


def consumer_body(index: int) -> dict[str, Any]:
    return {
        "kind": "Consumer",
        "metadata": {"name": f"c{index}"},
        "spec": {"durableName": f"C{index}", "streamRef": f"s{index}"},
    }


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


def run_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size on fresh servers: convergence, then idle cost and drift at the idle size, then
    the floor on the same servers."""
    with tempfile.TemporaryDirectory(prefix=f"jso-bench-{size}-") as directory:
        bench = Bench(Path(directory))
        bench.start()
        try:
            row = convergence(bench, size)
            if size == args.idle_size:
                time.sleep(args.settle)
                row["idle"] = idle_cost(bench, args.idle_seconds)
                row["idle_rss"] = bench.operator_rss_mib()
                row["drift"] = asyncio.run(
                    drift_latency(bench.nats.url, f"B{size}", args.drift_samples)
                )
            add_floor(bench, row)
        finally:
            bench.stop()
    print(json.dumps(row), flush=True)
    return row


def warm_up(bench: Bench) -> None:
    """One Stream and Consumer first: a fresh API server takes seconds over its first custom
    resources (schemas and CEL rules compiled on first use), which is not the operator's cost."""
    namespace = bench.namespace("warm-up")
    watches = [bench.watch_ready(namespace, plural) for plural in ("streams", "consumers")]
    bench.create_many(namespace, "streams", [stream_body(0, "WARM")])
    bench.create_many(namespace, "consumers", [consumer_body(0)])
    wait_ready(watches, 1, timeout=120)
    for each in watches:
        each.stop()


def convergence(bench: Bench, size: int) -> dict[str, Any]:
    warm_up(bench)
    namespace = bench.namespace(f"bench-{size}")
    prefix = f"B{size}"
    watches = [bench.watch_ready(namespace, plural) for plural in ("streams", "consumers")]
    started = time.perf_counter()
    bench.create_many(namespace, "streams", [stream_body(i, prefix) for i in range(size)])
    bench.create_many(namespace, "consumers", [consumer_body(i) for i in range(size)])
    created = time.perf_counter() - started
    wait_ready(watches, size)
    wall = time.perf_counter() - started
    for each in watches:
        each.stop()
    return {
        "size": size,
        "namespace": namespace,
        "wall": wall,
        "created": created,
        "rss": bench.operator_rss_mib(),
    }


def add_floor(bench: Bench, row: dict[str, Any]) -> None:
    """The floor, measured in the same run with the operator stopped: the same creations in
    NATS and the same status patches. Applying the 2N objects themselves is not part of the
    floor, but it is part of the wall time, so it is timed too (into a fresh namespace)."""
    size = row["size"]
    assert bench.operator is not None
    bench.operator.stop()
    row["nats"] = asyncio.run(floor_nats(bench.nats.url, f"F{size}", size))
    row["patches"] = floor_status_patches(bench.objects, row["namespace"], size)
    row["floor"] = row["nats"] + row["patches"]
    row["ratio"] = row["wall"] / row["floor"]
    namespace = bench.namespace(f"apply-only-{size}")
    started = time.perf_counter()
    bench.create_many(namespace, "streams", [stream_body(i, f"A{size}") for i in range(size)])
    bench.create_many(namespace, "consumers", [consumer_body(i) for i in range(size)])
    row["apply"] = time.perf_counter() - started
    row["ratio_with_apply"] = row["wall"] / (row["floor"] + row["apply"])


def idle_cost(bench: Bench, seconds: float) -> dict[str, Any]:
    writes_before, api_before = bench.apiserver_writes(), bench.nats_api_requests()
    operations_before = bench.operator_requests()
    time.sleep(seconds)
    writes_after, api_after = bench.apiserver_writes(), bench.nats_api_requests()
    operations_after = bench.operator_requests()
    per_minute = 60.0 / seconds
    by_operation = {
        operation: (count - operations_before.get(operation, 0)) * per_minute
        for operation, count in operations_after.items()
        if count != operations_before.get(operation, 0)
    }
    return {
        "k8s_writes_per_min": (writes_after - writes_before) * per_minute,
        "nats_requests_per_min": (api_after - api_before) * per_minute,
        "operator_requests_per_min": by_operation,
    }


async def drift_latency(url: str, prefix: str, samples: int) -> dict[str, float]:
    nc = await nats.connect(url)
    jetstream = JetStreamApi(nc)
    changes: list[float] = []
    deletions: list[float] = []

    async def until(probe: Callable[[], Any]) -> float:
        started = time.perf_counter()
        while not await probe():
            await asyncio.sleep(0.005)
        return time.perf_counter() - started

    for index in range(samples):
        name = f"{prefix}_{index}"
        info = await jetstream.stream_info(name)
        assert info is not None
        await jetstream.update_stream({**info["config"], "max_msgs": 12345})

        async def restored(stream: str = name) -> bool:
            current = await jetstream.stream_info(stream)
            return current is not None and current["config"]["max_msgs"] == -1

        changes.append(await until(restored))
        await jetstream.delete_stream(name)

        async def back(stream: str = name) -> bool:
            return await jetstream.stream_info(stream) is not None

        deletions.append(await until(back))
    await nc.close()

    def pct(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1] * 1000

    return {
        "change_p50_ms": pct(changes, 50),
        "change_p99_ms": pct(changes, 99),
        "delete_p50_ms": pct(deletions, 50),
        "delete_p99_ms": pct(deletions, 99),
    }


def machine() -> str:
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"kube-apiserver v1.34.4, nats-server 2.12.8, date {datetime.now(UTC):%Y-%m-%d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--idle-size", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=120)
    parser.add_argument("--drift-samples", type=int, default=50)
    parser.add_argument(
        "--settle",
        type=float,
        default=45,
        help="seconds to let first-pass work finish before measuring idle cost",
    )
    args = parser.parse_args()
    if args.idle_size not in args.sizes:
        parser.error("--idle-size must be one of --sizes")
    rows = [run_size(size, args) for size in args.sizes]
    lines = [
        f"Machine: {machine()}",
        "",
        "| N streams + N consumers | resources | wall (s) | floor (s): nats-py + status patches "
        "| ratio | applying the 2N objects alone (s) | ratio to floor + applying "
        "| operator RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['size']} | {2 * row['size']} | {row['wall']:.1f} | {row['floor']:.1f} "
            f"({row['nats']:.1f} + {row['patches']:.1f}) | {row['ratio']:.2f}x | "
            f"{row['apply']:.1f} | {row['ratio_with_apply']:.2f}x | {row['rss']:.0f} |"
        )
    idle_row = next(row for row in rows if row["size"] == args.idle_size)
    idle, drift = idle_row["idle"], idle_row["drift"]
    resyncs_per_min = 60.0 / RESYNC_INTERVAL
    lines += [
        "",
        f"Idle, N={args.idle_size} ({2 * args.idle_size} resources), "
        f"{args.idle_seconds:.0f} s after {args.settle:.0f} s settling: Kubernetes writes/min "
        f"{idle['k8s_writes_per_min']:.1f}, NATS API requests/min "
        f"{idle['nats_requests_per_min']:.1f} "
        f"({idle['nats_requests_per_min'] / resyncs_per_min:.1f} per {RESYNC_INTERVAL:.0f} s "
        f"resync; N/256 = {args.idle_size / 256:.1f}), operator RSS {idle_row['idle_rss']:.0f} MiB",
        "",
        "Of which the operator's, per minute by operation: "
        + (
            ", ".join(
                f"{operation} {rate:.1f}"
                for operation, rate in sorted(idle["operator_requests_per_min"].items())
            )
            or "none"
        ),
        "",
        f"Drift repair over {args.drift_samples} streams: change p50 "
        f"{drift['change_p50_ms']:.0f} ms, p99 {drift['change_p99_ms']:.0f} ms; "
        f"deletion p50 {drift['delete_p50_ms']:.0f} ms, p99 {drift['delete_p99_ms']:.0f} ms",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"operator-{datetime.now(UTC):%Y%m%d-%H%M}.md").write_text(text + "\n")
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
