"""Per-resource metrics: which resources have them (opted in by a label on the resource or its
namespace, up to a limit), and their latest figures. Drift repair records the figures of every
look before the status budget decides whether to write them, so the series follow the servers
at the pace of the listings, not of status writes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..marks import METRICS_LABEL
from ..metrics import Series
from .registry import TrackedResource

FIGURES = (
    "messages",
    "bytes",
    "numPending",
    "numAckPending",
    "numRedelivered",
    "replicaStates",
    "streamName",
    "consumerName",
)
"""The status fields a series is made of; the rest of a look's status is not kept."""

NamespaceLabels = Callable[[str], Mapping[str, str] | None]


def opted_in(resource: TrackedResource, namespace_labels: NamespaceLabels) -> bool:
    """The resource's label says, else its namespace's ("true" opts in, anything else out)."""
    labels = (resource.body.get("metadata") or {}).get("labels") or {}
    if METRICS_LABEL in labels:
        return str(labels[METRICS_LABEL]).lower() == "true"
    namespace = namespace_labels(resource.owner.namespace) or {}
    return str(namespace.get(METRICS_LABEL, "")).lower() == "true"


class LiveFigures:
    """The latest figures of opted-in resources, by uid, as drift repair last saw them."""

    def __init__(self, namespace_labels: NamespaceLabels) -> None:
        self._namespace_labels = namespace_labels
        self._figures: dict[str, dict[str, Any]] = {}

    def wanted(self, resource: TrackedResource) -> bool:
        return opted_in(resource, self._namespace_labels)

    def record(self, resource: TrackedResource, status: Mapping[str, Any]) -> None:
        if not self.wanted(resource):
            self._figures.pop(resource.owner.uid, None)
            return
        kept = {key: status[key] for key in FIGURES if key in status}
        if kept:
            self._figures.setdefault(resource.owner.uid, {}).update(kept)

    def of(self, resource: TrackedResource) -> dict[str, Any]:
        """The resource's figures: the latest look's over what its status shows."""
        status = resource.status
        known = {key: status[key] for key in FIGURES if key in status}
        return {**known, **self._figures.get(resource.owner.uid, {})}

    def forget(self, uid: str) -> None:
        self._figures.pop(uid, None)


def _ready(resource: TrackedResource) -> tuple[float, str]:
    for condition in resource.status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return (1.0 if condition.get("status") == "True" else 0.0), str(
                condition.get("reason") or ""
            )
    return 0.0, ""


def _fill(figures: Mapping[str, Any], spec: Mapping[str, Any]) -> float | None:
    """The fuller of bytes against maxBytes and messages against maxMsgs (None: no limit)."""
    ratios = [
        float(figures[have]) / float(limit)
        for have, limit in (
            ("bytes", spec.get("maxBytes")),
            ("messages", spec.get("maxMsgs")),
        )
        if isinstance(limit, int) and limit > 0 and isinstance(figures.get(have), int)
    ]
    return max(ratios) if ratios else None


def stream_series(kind: str, resource: TrackedResource, figures: Mapping[str, Any]) -> list[Series]:
    """A Stream's, KeyValue's or ObjectStore's series."""
    owner = resource.owner
    stream = str(figures.get("streamName") or resource.spec.get("name") or "")
    labels = (owner.namespace, owner.name, kind, stream)
    found = [
        Series(f"jetstream_operator_stream_{metric}", labels, float(figures[field]))
        for metric, field in (("messages", "messages"), ("bytes", "bytes"))
        if isinstance(figures.get(field), int)
    ]
    fill = _fill(figures, resource.spec)
    if fill is not None:
        found.append(Series("jetstream_operator_stream_fill_ratio", labels, fill))
    replicas = figures.get("replicaStates") or []
    if replicas:
        current = sum(1 for replica in replicas if replica.get("current"))
        found.append(Series("jetstream_operator_stream_replicas_current", labels, float(current)))
        found.append(
            Series(
                "jetstream_operator_stream_replicas_lagging",
                labels,
                float(len(replicas) - current),
            )
        )
    return found


def consumer_series(resource: TrackedResource, figures: Mapping[str, Any]) -> list[Series]:
    owner = resource.owner
    labels = (
        owner.namespace,
        owner.name,
        str(figures.get("streamName") or resource.spec.get("streamName") or ""),
        str(figures.get("consumerName") or resource.spec.get("durableName") or ""),
    )
    found = [
        Series(f"jetstream_operator_consumer_{metric}", labels, float(figures[field]))
        for metric, field in (
            ("pending", "numPending"),
            ("ack_pending", "numAckPending"),
            ("redelivered", "numRedelivered"),
        )
        if isinstance(figures.get(field), int)
    ]
    most = resource.spec.get("maxAckPending")
    if isinstance(most, int) and most > 0:
        found.append(Series("jetstream_operator_consumer_max_ack_pending", labels, float(most)))
    return found


def resource_series(
    resources: Iterable[tuple[str, TrackedResource]], figures: LiveFigures, limit: int
) -> tuple[list[Series], int]:
    """The series of the opted-in resources, in namespace/name order, for at most `limit` of
    them; and how many opted-in resources were left out."""
    chosen = sorted(
        ((kind, resource) for kind, resource in resources if figures.wanted(resource)),
        key=lambda item: (item[1].owner.namespace, item[1].owner.name, item[0]),
    )
    series: list[Series] = []
    for kind, resource in chosen[:limit]:
        live = figures.of(resource)
        ready, reason = _ready(resource)
        owner = resource.owner
        series.append(
            Series(
                "jetstream_operator_resource_ready",
                (owner.namespace, owner.name, kind, reason),
                ready,
            )
        )
        if kind == "Consumer":
            series += consumer_series(resource, live)
        else:
            series += stream_series(kind, resource, live)
    return series, max(0, len(chosen) - limit)
