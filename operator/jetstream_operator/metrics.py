"""Prometheus metrics: what the operator did, how long it took, and what state things are in.

Gauges of managed resources are computed at scrape time from the registries, so they are never
stale and cost nothing between scrapes.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILES = Counter(
    "jetstream_operator_reconciles",
    "Reconciliations by kind and result (the Ready reason).",
    ["kind", "result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "jetstream_operator_reconcile_duration_seconds",
    "Time one reconciliation took, NATS requests included.",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DRIFT_REPAIRS = Counter(
    "jetstream_operator_drift_repairs",
    "Out-of-band changes or deletions put back.",
    ["kind"],
    registry=REGISTRY,
)
ADVISORIES = Counter(
    "jetstream_operator_advisories",
    "JetStream advisories received, by what they are about (stream, consumer, api audit) and "
    "action: set against the repairs, they tell a lost advisory from a skipped repair.",
    ["about", "action"],
    registry=REGISTRY,
)
NATS_REQUEST_SECONDS = Histogram(
    "jetstream_operator_nats_request_duration_seconds",
    "JetStream API request latency by operation (e.g. STREAM.INFO).",
    ["operation"],
    registry=REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
NATS_REQUEST_ERRORS = Counter(
    "jetstream_operator_nats_request_errors",
    "JetStream API requests that failed, by operation and kind of failure.",
    ["operation", "error"],
    registry=REGISTRY,
)
KUBE_REQUEST_LIMIT = Gauge(
    "jetstream_operator_kube_requests_limit",
    "kopf's Kubernetes API requests allowed in flight now (fewer while the API server is slow).",
    registry=REGISTRY,
)
KUBE_REQUESTS_WAITING = Gauge(
    "jetstream_operator_kube_requests_waiting",
    "kopf's Kubernetes API requests waiting for a place under that limit.",
    registry=REGISTRY,
)

CREATIONS_SEEN = Counter(
    "jetstream_operator_creations_seen",
    "New resources of the operator's kinds seen on its watches (ADDED events).",
    registry=REGISTRY,
)
DELETIONS_SEEN = Counter(
    "jetstream_operator_deletions_seen",
    "Deletion requests for resources of the operator's kinds seen on its watches (each object's "
    "first event with a deletionTimestamp).",
    registry=REGISTRY,
)
WRITES_YIELDED = Counter(
    "jetstream_operator_kube_writes_yielded",
    "Kubernetes writes of the operator (and new streams' first looks, which precede their first "
    "status) that waited while resources were created or deleted in a burst.",
    registry=REGISTRY,
)
YIELDED_SECONDS = Counter(
    "jetstream_operator_kube_writes_yielded_seconds",
    "Seconds those writes waited, in all.",
    registry=REGISTRY,
)

EVENTS_DEFERRED = Counter(
    "jetstream_operator_events_deferred",
    "Kubernetes Events of the operator that waited for a pause in its own writes of its "
    "resources, so the resources' status went first (each Event once).",
    registry=REGISTRY,
)
EVENTS_DEFERRED_SECONDS = Counter(
    "jetstream_operator_events_deferred_seconds",
    "Seconds from each of those Events to its posting, in all.",
    registry=REGISTRY,
)

WATCH_ECHOES_SKIPPED = Counter(
    "jetstream_operator_watch_echoes_skipped",
    "Watch events kept from kopf: the echoes of its own status writes after its handlers ran, "
    "in which it would find nothing to do (the registries still read them).",
    registry=REGISTRY,
)

BUILD_INFO = Gauge(
    "jetstream_operator_build_info",
    "1, labelled with the operator's version and those of what it runs on, as `jetstream-operator "
    "--version` prints them.",
    ["version", "kopf", "nats_py", "python"],
    registry=REGISTRY,
)

KOPF_ADAPTATION_APPLIED = Gauge(
    "jetstream_operator_kopf_adaptation_applied",
    "1 when the operator's change to that part of kopf's internals applies to the running kopf, "
    "0 when kopf keeps its own (another kopf version, or another shape; the log says why).",
    ["adaptation"],
    registry=REGISTRY,
)

EVENTS_FAILED = Counter(
    "jetstream_operator_events_failed",
    "Kubernetes Events whose posting failed, by what followed: retried (the API server was "
    "unreachable, throttled or failed, so it is tried again with backoff) or dropped (refused, "
    "or failed on its last try).",
    ["outcome"],
    registry=REGISTRY,
)

ReadyCounts = Callable[[], Iterable[tuple[str, str, int]]]
ConnectionStates = Callable[[], Iterable[tuple[str, bool]]]


@dataclass(frozen=True)
class Series:
    """One sample of a per-resource metric."""

    metric: str
    labels: tuple[str, ...]
    value: float


STREAM_LABELS = ("namespace", "name", "kind", "stream")
CONSUMER_LABELS = ("namespace", "name", "stream", "consumer")
READY_LABELS = ("namespace", "name", "kind", "reason")


def families(series: Iterable[Series]) -> Iterator[tuple[str, tuple[str, ...], list[Series]]]:
    """The series grouped by metric, with each metric's label names."""
    grouped: dict[str, list[Series]] = {}
    for item in series:
        grouped.setdefault(item.metric, []).append(item)
    for metric, items in grouped.items():
        if metric.startswith("jetstream_operator_consumer_"):
            names = CONSUMER_LABELS
        elif metric == "jetstream_operator_resource_ready":
            names = READY_LABELS
        else:
            names = STREAM_LABELS
        yield metric, names, items


ResourceSeries = Callable[[], tuple[list[Series], int]]


class StateCollector(Collector):
    """Managed resources by Ready state, connection health and the opted-in resources' own
    series, read at scrape time."""

    def __init__(
        self,
        ready_counts: ReadyCounts,
        connections: ConnectionStates,
        resource_series: ResourceSeries | None = None,
    ) -> None:
        self._ready_counts = ready_counts
        self._connections = connections
        self._resource_series = resource_series

    def collect(self) -> Iterator[GaugeMetricFamily]:
        resources = GaugeMetricFamily(
            "jetstream_operator_resources",
            "Managed resources by kind and Ready status.",
            labels=["kind", "ready"],
        )
        for kind, ready, count in self._ready_counts():
            resources.add_metric([kind, ready], count)
        yield resources
        connections = GaugeMetricFamily(
            "jetstream_operator_connection_up",
            "1 when the operator has a working connection to that NATS system.",
            labels=["connection"],
        )
        for label, up in self._connections():
            connections.add_metric([label], 1.0 if up else 0.0)
        yield connections
        if self._resource_series is None:
            return
        series, omitted = self._resource_series()
        for metric, names, items in families(series):
            family = GaugeMetricFamily(metric, RESOURCE_HELP.get(metric, metric), labels=names)
            for item in items:
                family.add_metric(list(item.labels), item.value)
            yield family
        yield GaugeMetricFamily(
            "jetstream_operator_resource_metrics_omitted",
            "Opted-in resources without series of their own, past "
            "JETSTREAM_OPERATOR_RESOURCE_METRICS_LIMIT.",
            value=omitted,
        )


RESOURCE_HELP = {
    "jetstream_operator_resource_ready": "1 when the resource is Ready, with its Ready reason.",
    "jetstream_operator_stream_messages": "Messages in the stream, as the last look saw them.",
    "jetstream_operator_stream_bytes": "Bytes in the stream, as the last look saw them.",
    "jetstream_operator_stream_fill_ratio": (
        "The fuller of bytes against spec.maxBytes and messages against spec.maxMsgs."
    ),
    "jetstream_operator_stream_replicas_current": "Replicas up to date (clustered streams).",
    "jetstream_operator_stream_replicas_lagging": "Replicas behind the leader.",
    "jetstream_operator_consumer_pending": "Messages not yet delivered to the consumer (lag).",
    "jetstream_operator_consumer_ack_pending": "Messages delivered and not yet acknowledged.",
    "jetstream_operator_consumer_redelivered": "Messages delivered more than once.",
    "jetstream_operator_consumer_max_ack_pending": "The consumer's spec.maxAckPending, where set.",
}


REPAIR_REASONS = frozenset({"DriftRepaired", "Recreated"})


def observe(kind: str, reason: str, event_reasons: Iterable[str], seconds: float) -> None:
    """Count one reconciliation, its duration, and whether it repaired drift."""
    RECONCILES.labels(kind, reason).inc()
    RECONCILE_SECONDS.labels(kind).observe(seconds)
    if REPAIR_REASONS & set(event_reasons):
        DRIFT_REPAIRS.labels(kind).inc()


def operation_of(subject: str) -> str:
    """'STREAM.INFO.ORDERS' -> 'STREAM.INFO': bounded label values, never resource names."""
    parts = subject.split(".")
    return ".".join(parts[:2]) if parts[0] in ("STREAM", "CONSUMER", "DIRECT") else parts[0]


def serve(port: int, state: StateCollector, address: str = "0.0.0.0") -> None:
    """All interfaces by default, for Prometheus in a pod; local runs pass 127.0.0.1."""
    BUILD_INFO.labels(**versions()).set(1)
    REGISTRY.register(state)
    start_http_server(port, addr=address, registry=REGISTRY)


def versions() -> dict[str, str]:
    """The operator's version and those of kopf, nats-py and Python, from package metadata."""

    def of(distribution: str) -> str:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "version": of("jetstream-operator"),
        "kopf": of("kopf"),
        "nats_py": of("nats-py"),
        "python": platform.python_version(),
    }
