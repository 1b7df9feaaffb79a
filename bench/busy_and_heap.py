"""Optional runs of our operator, each on fresh servers: busy streams against the status budget
(--busy) and its Python heap under tracemalloc (--heap-size)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import nats
from convergence import convergence, stream_body, warm_up
from harness import BENCH_DIR, SETTINGS, breakdown
from servers import Bench
from watches import wait_ready, watching

from jetstream_operator.handlers.status_writes import StatusBudget

HEAP_PROBE = BENCH_DIR / "heapprobe"


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
