"""Our operator at rest: the idle cost over every kind, the writes that follow drift repairs,
and a restart with everything in place."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from convergence import consumer_body, stream_body, stream_kind
from harness import RESYNC_INTERVAL, ApiAudit, breakdown, foreground
from servers import Bench
from watches import ObjectWatch, counted_changes, wait_ready

from jetstream_operator import GROUP, VERSION


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
