"""Per-resource metrics without servers: who opted in, which figures a series shows (the latest
look's over the status), the limit and what it leaves out, and the sweep listing the consumers
of measured streams on every pass."""

from __future__ import annotations

from typing import Any

from jetstream_operator.handlers.registry import ResourceRegistry, TrackedResource
from jetstream_operator.handlers.resource_figures import LiveFigures, resource_series
from jetstream_operator.marks import METRICS_LABEL
from jetstream_operator.triggers.consumer_sweep import ConsumerSweep

NAMESPACES = {"measured": {METRICS_LABEL: "true"}, "plain": {}}


def _resource(
    registry: ResourceRegistry,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    label: str | None = None,
) -> TrackedResource:
    labels = {} if label is None else {METRICS_LABEL: label}
    body = {
        "metadata": {"namespace": namespace, "name": name, "uid": f"{namespace}/{name}"},
        "spec": spec,
        "status": status,
    }
    body["metadata"]["labels"] = labels
    registry.observe("ADDED", body)
    tracked = registry.named(namespace, name)
    assert tracked is not None
    return tracked


def _ready(reason: str = "Synced") -> dict[str, Any]:
    return {"conditions": [{"type": "Ready", "status": "True", "reason": reason}]}


def _samples(series: list[Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(item.metric, item.labels): item.value for item in series}


def test_a_label_on_the_resource_or_its_namespace_opts_in() -> None:
    registry = ResourceRegistry()
    figures = LiveFigures(NAMESPACES.get)
    by_namespace = _resource(registry, "measured", "a", {}, {})
    opted_out = _resource(registry, "measured", "b", {}, {}, label="false")
    by_label = _resource(registry, "plain", "c", {}, {}, label="true")
    nothing = _resource(registry, "plain", "d", {}, {})
    assert [figures.wanted(r) for r in (by_namespace, opted_out, by_label, nothing)] == [
        True,
        False,
        True,
        False,
    ]


def test_series_show_the_latest_look_over_the_status() -> None:
    streams, consumers = ResourceRegistry(), ResourceRegistry()
    figures = LiveFigures(NAMESPACES.get)
    stream = _resource(
        streams,
        "measured",
        "orders",
        {"name": "ORDERS", "maxBytes": 1000, "maxMsgs": 10},
        {**_ready(), "messages": 2, "bytes": 100, "streamName": "ORDERS"},
    )
    consumer = _resource(
        consumers,
        "measured",
        "worker",
        {"durableName": "worker", "streamRef": "orders"},
        {**_ready(), "numPending": 5, "streamName": "ORDERS", "consumerName": "worker"},
    )
    figures.record(consumer, {"numPending": 7, "numAckPending": 1, "conditions": []})
    series, omitted = resource_series(
        [("Stream", stream), ("Consumer", consumer)], figures, limit=10
    )
    samples = _samples(series)
    assert omitted == 0
    consumer_labels = ("measured", "worker", "ORDERS", "worker")
    assert samples[("jetstream_operator_consumer_pending", consumer_labels)] == 7
    assert samples[("jetstream_operator_consumer_ack_pending", consumer_labels)] == 1
    stream_labels = ("measured", "orders", "Stream", "ORDERS")
    assert samples[("jetstream_operator_stream_messages", stream_labels)] == 2
    assert samples[("jetstream_operator_stream_fill_ratio", stream_labels)] == 0.2
    ready = ("measured", "orders", "Stream", "Synced")
    assert samples[("jetstream_operator_resource_ready", ready)] == 1


def test_past_the_limit_resources_are_counted_not_shown() -> None:
    registry = ResourceRegistry()
    figures = LiveFigures(NAMESPACES.get)
    tracked = [
        ("Stream", _resource(registry, "measured", f"s{i}", {"name": f"S{i}"}, _ready()))
        for i in range(5)
    ]
    tracked.append(("Stream", _resource(registry, "plain", "quiet", {"name": "Q"}, _ready())))
    series, omitted = resource_series(tracked, figures, limit=3)
    shown = {item.labels[1] for item in series}
    assert shown == {"s0", "s1", "s2"} and omitted == 2


def test_a_resource_no_longer_opted_in_keeps_no_figures() -> None:
    registry = ResourceRegistry()
    labels = {"measured": {METRICS_LABEL: "true"}}
    figures = LiveFigures(labels.get)
    stream = _resource(registry, "measured", "s", {"name": "S"}, {})
    figures.record(stream, {"messages": 3})
    assert figures.of(stream)["messages"] == 3
    labels["measured"] = {}
    figures.record(stream, {"messages": 4})
    assert "messages" not in figures.of(stream)


def test_measured_streams_are_listed_on_every_pass() -> None:
    sweep = ConsumerSweep(share=0.0, idle_share=0.0)
    infos = {name: {"created": "t", "state": {"messages": 0}} for name in ("A", "B", "C")}
    assert sweep.choose(infos, infos) == {"A", "B", "C"}  # the first pass lists everything
    for _ in range(3):
        assert sweep.choose(infos, infos, always={"B"}) == {"B"}
    assert sweep.choose(infos, infos) == set()
