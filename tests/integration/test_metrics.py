"""/metrics, scraped from the running operator, shows the counters moving."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools import figures
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_devtools.paths import free_port
from jetstream_operator.marks import METRICS_LABEL
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .helpers import Resources, eventually, is_ready, stream_manifest

pytestmark = [pytest.mark.integration]


@contextlib.contextmanager
def metrics_on(operator_process: OperatorProcess, **env: str) -> Iterator[str]:
    """The session's operator serving metrics on a free loopback port, with `env` besides."""
    port = free_port()
    with operator_variant(
        operator_process,
        JETSTREAM_OPERATOR_METRICS_PORT=str(port),
        JETSTREAM_OPERATOR_METRICS_ADDRESS="127.0.0.1",
        **env,
    ):
        yield f"http://127.0.0.1:{port}/metrics"


@pytest.fixture
def metrics_url(operator_process: OperatorProcess) -> Iterator[str]:
    with metrics_on(operator_process, JETSTREAM_OPERATOR_LOG_FORMAT="json") as url:
        yield url


@pytest.fixture
def slow_sweep_metrics_url(operator_process: OperatorProcess) -> Iterator[str]:
    """Metrics on, and consumers listed at production pace (300 s while read, 4 h idle): only
    measured streams' consumers are listed on every 2 s resync."""
    with metrics_on(
        operator_process,
        JETSTREAM_OPERATOR_CONSUMER_RESYNC_INTERVAL="300",
        JETSTREAM_OPERATOR_CONSUMER_IDLE_RESYNC_INTERVAL="14400",
    ) as url:
        yield url


def scrape(url: str) -> dict[str, float]:
    """Each sample by its series as served (`name{labels}`), for `value`'s prefixes."""
    return {sample.series: sample.value for sample in figures.scrape(url, timeout=5)}


def value(samples: dict[str, float], prefix: str) -> float:
    return sum(v for name, v in samples.items() if name.startswith(prefix))


async def test_metrics_follow_reconciles_and_repairs(
    metrics_url: str,
    resources: Resources,
    nc: Client,
    namespace: str,
    operator_process: OperatorProcess,
) -> None:
    before = scrape(metrics_url)
    stream = namespace.replace("-", "_").upper()
    resources.create(
        "streams",
        {"kind": "Stream", "metadata": {"name": "counted"}, "spec": {"name": stream, "maxMsgs": 3}},
    )

    async def ready() -> bool:
        return is_ready(resources.get("streams", "counted"))

    await eventually(ready)
    jetstream = JetStreamApi(nc)
    info = await jetstream.stream_info(stream)
    assert info is not None
    await jetstream.update_stream({**info["config"], "max_msgs": 4})

    async def repaired() -> dict[str, float] | None:
        after = scrape(metrics_url)
        moved = value(after, 'jetstream_operator_drift_repairs_total{kind="Stream"}') > value(
            before, 'jetstream_operator_drift_repairs_total{kind="Stream"}'
        )
        return after if moved else None

    after = await eventually(repaired)
    assert value(after, 'jetstream_operator_reconciles_total{kind="Stream"') > value(
        before, 'jetstream_operator_reconciles_total{kind="Stream"'
    )
    assert (
        value(
            after, 'jetstream_operator_nats_request_duration_seconds_count{operation="STREAM.INFO"}'
        )
        > 0
    )
    assert value(after, 'jetstream_operator_resources{kind="Stream",ready="True"}') >= 1
    # The echo of the first status write never reached kopf (queueing.EventObservers).
    assert value(after, "jetstream_operator_watch_echoes_skipped_total") > value(
        before, "jetstream_operator_watch_echoes_skipped_total"
    )
    assert value(after, 'jetstream_operator_connection_up{connection="default"}') == 1
    log_line = operator_process.tail(200).splitlines()[-1]
    assert log_line.startswith("{"), "JSON log format was asked for"


async def test_writes_yield_to_a_burst_of_creations_and_events_to_status(
    metrics_url: str, resources: Resources, namespace: str, api_client: client.ApiClient
) -> None:
    """kopf's real watch, read through the request limit, shows the creations to the operator,
    which holds its writes back until they stop; then Events wait for a pause in the status
    writes. Nothing is lost meanwhile: every stream gets its one Created Event."""
    prefix = namespace.replace("-", "_").upper()
    # The operator was just restarted with metrics on: a stream made before its watches
    # began would reach it through their first listing, which no ADDED event counts.
    resources.create("streams", stream_manifest("first", f"{prefix}_first"))

    async def first_ready() -> bool:
        return is_ready(resources.get("streams", "first"))

    await eventually(first_ready, timeout=30)
    before = scrape(metrics_url)
    names = [f"burst-{i}" for i in range(96)]

    def create(name: str) -> None:
        resources.create(
            "streams",
            {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": f"{prefix}_{name}"}},
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))

    async def all_ready() -> bool:
        return all(is_ready(resources.get("streams", name)) for name in names)

    await eventually(all_ready, timeout=60)
    after = scrape(metrics_url)
    seen = value(after, "jetstream_operator_creations_seen_total") - value(
        before, "jetstream_operator_creations_seen_total"
    )
    yielded = value(after, "jetstream_operator_kube_writes_yielded_total") - value(
        before, "jetstream_operator_kube_writes_yielded_total"
    )
    assert seen >= len(names)
    assert yielded >= 1

    def created_events() -> Counter[str]:
        items = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        return Counter(str(each.involved_object.name) for each in items if each.reason == "Created")

    async def every_event_posted() -> bool:
        return set(names) <= set(created_events())

    await eventually(every_event_posted, timeout=40)
    assert {created_events()[name] for name in names} == {1}
    deferred = value(scrape(metrics_url), "jetstream_operator_events_deferred_total") - value(
        before, "jetstream_operator_events_deferred_total"
    )
    assert deferred >= 1  # 96 statuses at once leave their first Events no pause to go in


async def test_writes_yield_to_a_burst_of_deletions(
    metrics_url: str, resources: Resources, namespace: str, nc: Client
) -> None:
    """`kubectl delete -f` of many resources, seen through kopf's real watch: once they come
    faster than 32 a second, the finalizer removals wait until the deletion requests stop, and
    then every deletion completes, in Kubernetes and in NATS."""
    prefix = namespace.replace("-", "_").upper()
    names = [f"gone-{i}" for i in range(64)]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda name: resources.create("streams", stream_manifest(name, f"{prefix}_{name}")),
                names,
            )
        )

    async def all_ready() -> bool:
        return all(is_ready(resources.get("streams", name)) for name in names)

    await eventually(all_ready, timeout=60)
    before = scrape(metrics_url)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: resources.delete("streams", name), names))

    async def all_gone() -> bool:
        return all(resources.get("streams", name) is None for name in names)

    await eventually(all_gone, timeout=60)
    after = scrape(metrics_url)

    def grew(metric: str) -> float:
        return value(after, metric) - value(before, metric)

    assert grew("jetstream_operator_deletions_seen_total") >= len(names)
    # The deletions after the 32nd within a second wait with their finalizer's removal.
    assert grew("jetstream_operator_kube_writes_yielded_total") >= len(names) // 4
    jetstream = JetStreamApi(nc)

    async def gone_from_nats() -> bool:
        return all([await jetstream.stream_info(f"{prefix}_{name}") is None for name in names])

    await eventually(gone_from_nats, timeout=30)


async def test_opted_in_resources_have_series_of_their_own(
    slow_sweep_metrics_url: str,
    resources: Resources,
    nc: Client,
    namespace: str,
    api_client: client.ApiClient,
) -> None:
    """A namespace labelled for metrics: its stream's messages and its consumer's lag follow
    publishing and reading by a client within a few passes, without any status write being
    waited for; a resource labelled "false" has none; the rest are counted, not shown."""
    client.CoreV1Api(api_client).patch_namespace(
        namespace, {"metadata": {"labels": {METRICS_LABEL: "true"}}}
    )
    stream = namespace.replace("-", "_").upper()
    resources.create(
        "streams",
        stream_manifest("orders", stream, subjects=[f"{stream}.>"], maxMsgs=100),
    )
    quiet = stream_manifest("quiet", f"{stream}_QUIET", subjects=[f"{stream}_QUIET.>"])
    quiet["metadata"]["labels"] = {METRICS_LABEL: "false"}
    resources.create("streams", quiet)
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "worker"},
            "spec": {"streamRef": "orders", "durableName": "worker"},
        },
    )

    async def ready() -> bool:
        return is_ready(resources.get("consumers", "worker"))

    await eventually(ready)
    js = nc.jetstream()
    for index in range(5):
        await js.publish(f"{stream}.{index}", b"x")
    consumer = {"namespace": namespace, "name": "worker", "stream": stream, "consumer": "worker"}
    orders = {"namespace": namespace, "name": "orders", "kind": "Stream", "stream": stream}

    def of(name: str, labels: dict[str, str]) -> float | None:
        found = [
            sample.value
            for sample in figures.scrape(slow_sweep_metrics_url, timeout=5)
            if sample.name == name and sample.labels == labels
        ]
        return found[0] if found else None

    async def shown(name: str, labels: dict[str, str], wanted: float) -> bool:
        return of(name, labels) == wanted

    await eventually(lambda: shown("jetstream_operator_consumer_pending", consumer, 5), timeout=30)
    await eventually(lambda: shown("jetstream_operator_stream_fill_ratio", orders, 0.05))
    assert of("jetstream_operator_stream_messages", orders) == 5
    samples = scrape(slow_sweep_metrics_url)
    assert not [name for name in samples if 'name="quiet"' in name]
    assert samples["jetstream_operator_resource_metrics_omitted"] == 0
    reader = await js.pull_subscribe_bind("worker", stream)
    for message in await reader.fetch(5, timeout=5):
        await message.ack()
    # Drained without a new message: the sweep lists measured streams' consumers every pass.
    await eventually(lambda: shown("jetstream_operator_consumer_pending", consumer, 0), timeout=30)
