"""Our operator's convergence, against the floor and the ideal controller: N Streams and N
Consumers applied, timed until all are Ready, then watched while they settle."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from deletion import delete_alone
from floor import delete_streams, floor_nats, floor_status_patches
from harness import (
    BENCH_DIR,
    ApiAudit,
    applied,
    flow_control_delta,
    process_cpu_seconds,
    writes_over,
)
from servers import Bench
from watches import timeline, wait_ready, watching

from jetstream_operator import GROUP, VERSION


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


def time_apply(bench: Bench, namespace: str, size: int, order: str) -> float:
    """Applying N Streams and N Consumers (prefix A<size>) into `namespace`, timed."""
    started = time.perf_counter()
    streams = [stream_body(i, f"A{size}", labels=shard_of(bench, i)) for i in range(size)]
    consumers = [consumer_body(i, labels=shard_of(bench, i)) for i in range(size)]
    bench.create_in_order(namespace, applied(streams, consumers, order))
    return time.perf_counter() - started


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
