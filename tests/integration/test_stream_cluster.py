"""Replicas change live on a real 3-node JetStream cluster, and status shows them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.purge import STEP_DOWN_ANNOTATION

from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_on_cluster")]


async def test_replicas_go_from_one_to_three_and_back(
    resources: Resources, nats_cluster: Any, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        jetstream = JetStreamApi(connection)
        resources.create(
            "streams",
            {"kind": "Stream", "metadata": {"name": "scaled"}, "spec": {"name": stream}},
        )

        async def replicas_in_status(count: int) -> dict[str, Any] | None:
            resource = resources.get("streams", "scaled")
            status = (resource or {}).get("status") or {}
            followers = status.get("replicaStates") or []
            if (
                is_ready(resource)
                and status.get("replicas") == count
                and (len(followers) == count - 1 and status.get("leader"))
            ):
                return status
            return None

        async def server_replicas(count: int) -> bool:
            info = await jetstream.stream_info(stream)
            return (
                info is not None
                and info["config"]["num_replicas"] == count
                and (len((info.get("cluster") or {}).get("replicas") or []) == count - 1)
            )

        await eventually(lambda: server_replicas(1))
        await eventually(lambda: replicas_in_status(1))

        resources.patch_spec("streams", "scaled", {"replicas": 3})
        await eventually(lambda: server_replicas(3), timeout=30)
        status = await eventually(lambda: replicas_in_status(3), timeout=30)
        servers = {replica["name"] for replica in status["replicaStates"]} | {status["leader"]}
        assert len(servers) == 3, status

        resources.patch_spec("streams", "scaled", {"replicas": 1})
        await eventually(lambda: server_replicas(1), timeout=30)
        await eventually(lambda: replicas_in_status(1), timeout=30)
    finally:
        await connection.close()


async def test_placement_and_replicas_change_together(
    resources: Resources, nats_cluster: Any, namespace: str
) -> None:
    """The server refuses replicas and placement in one update (10123); both still land."""
    stream = namespace.replace("-", "_").upper()
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        jetstream = JetStreamApi(connection)
        resources.create(
            "streams",
            {"kind": "Stream", "metadata": {"name": "placed"}, "spec": {"name": stream}},
        )
        await eventually(lambda: jetstream.stream_info(stream))
        resources.patch_spec(
            "streams",
            "placed",
            {"replicas": 3, "placement": {"cluster": nats_cluster.name, "tags": ["ssd"]}},
        )

        async def placed() -> bool:
            info = await jetstream.stream_info(stream)
            config = (info or {}).get("config") or {}
            return config.get("num_replicas") == 3 and config.get("placement") == {
                "cluster": nats_cluster.name,
                "tags": ["ssd"],
            }

        await eventually(placed, timeout=30)
        await eventually(lambda: _is_ready(resources, "placed"), timeout=30)
    finally:
        await connection.close()


async def _is_ready(resources: Resources, name: str, plural: str = "streams") -> bool:
    return is_ready(resources.get(plural, name))


async def test_leader_node_killed_stream_stays_managed_and_recovery_shows(
    resources: Resources, nats_cluster: Any, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        jetstream = JetStreamApi(connection)
        resources.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": "sturdy"},
                "spec": {"name": stream, "replicas": 3, "subjects": [f"{stream.lower()}.>"]},
            },
        )

        async def status_with(check: Any, ready: bool = True) -> dict[str, Any] | None:
            resource = resources.get("streams", "sturdy")
            status = (resource or {}).get("status") or {}
            return status if (is_ready(resource) or not ready) and check(status) else None

        def healthy(status: dict[str, Any]) -> bool:
            replicas = status.get("replicaStates") or []
            return len(replicas) == 2 and all(r["current"] for r in replicas)

        # Replicas catch up slowly on a loaded machine after earlier tests killed nodes.
        status = await eventually(lambda: status_with(healthy), timeout=90)
        js = connection.jetstream()
        for index in range(5):
            await js.publish(f"{stream.lower()}.x", str(index).encode())
        leader = status["leader"]
        nats_cluster.node(leader).kill()
        try:

            def lost(status: dict[str, Any]) -> bool:
                # The loss shows as a new leader or a replica not current, or, while the
                # cluster elects (slow on a loaded machine), as NATS reported unavailable.
                replicas = status.get("replicaStates") or []
                ready: dict[str, Any] = next(
                    (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
                )
                return (
                    status.get("leader") != leader
                    or any(not r["current"] for r in replicas)
                    or ready.get("reason") == "NatsUnavailable"
                )

            await eventually(lambda: status_with(lost, ready=False), timeout=60)
        finally:
            nats_cluster.node(leader).start()
        await eventually(lambda: status_with(healthy), timeout=90)
        info = await jetstream.stream_info(stream)
        assert info is not None and info["state"]["messages"] == 5
    finally:
        await connection.close()


async def test_a_stream_on_a_stopped_node_keeps_its_status_while_the_cluster_lists_it_empty(
    resources: Resources, nats_cluster: Any, namespace: str
) -> None:
    """With its only peer shut down, the cluster still lists an R1 stream, with an empty state
    (no messages, no consumers) and its name under `missing` or `offline`. Status keeps what
    was last seen instead of writing zeros, says the stream is offline, and is Ready again
    once the node is back."""
    stream = namespace.replace("-", "_").upper()
    resources.create(
        "streams",
        {
            "kind": "Stream",
            "metadata": {"name": "lonely"},
            "spec": {"name": stream, "replicas": 1, "subjects": [f"{stream.lower()}.>"]},
        },
    )
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "lonely-reader"},
            "spec": {"durableName": "READER", "streamRef": "lonely"},
        },
    )
    await eventually(lambda: _is_ready(resources, "lonely"), timeout=60)
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        js = connection.jetstream()
        for index in range(3):
            await js.publish(f"{stream.lower()}.x", str(index).encode())
    finally:
        await connection.close()

    def shown() -> dict[str, Any]:
        status: dict[str, Any] = (resources.get("streams", "lonely") or {}).get("status") or {}
        return status

    async def counted() -> dict[str, Any] | None:
        status = shown()
        whole = status.get("consumerCount") == 1 and status.get("messages") == 3
        return status if whole and is_ready(resources.get("streams", "lonely")) else None

    status = await eventually(counted, timeout=60)
    host = nats_cluster.node(status["leader"])
    host.stop()  # a graceful shutdown: the others mark it offline at once
    try:
        others = [node.url for node in nats_cluster.nodes if node is not host]
        connection = await nats.connect(servers=others)
        try:

            async def listed_unseen() -> bool:
                try:
                    page = await JetStreamApi(connection).request("STREAM.LIST", {})
                except Exception:  # the meta layer may be electing: ask again
                    return False
                return stream in set(page.get("missing") or ()) | set(page.get("offline") or {})

            await eventually(listed_unseen, timeout=60)
            for _ in range(8):  # four resyncs of the tests' 2 s
                now = shown()
                assert (now.get("consumerCount"), now.get("messages")) == (1, 3), now
                await asyncio.sleep(1)

            async def said_offline() -> tuple[str, str] | None:
                stream_reason = condition(resources.get("streams", "lonely")).get("reason")
                consumer = condition(resources.get("consumers", "lonely-reader"))
                # The consumer says so too, or says what its own look at NATS met.
                if stream_reason == "StreamOffline" and consumer.get("status") == "False":
                    return stream_reason, str(consumer.get("reason"))
                return None

            await eventually(said_offline, timeout=30)
            now = shown()
            assert (now.get("consumerCount"), now.get("messages")) == (1, 3), now
        finally:
            await connection.close()
    finally:
        host.start()
    await eventually(counted, timeout=90)
    await eventually(lambda: _is_ready(resources, "lonely-reader", "consumers"), timeout=30)


@pytest.fixture
async def cluster_jetstream(nats_cluster: Any) -> AsyncIterator[JetStreamApi]:
    """The JetStream API of the 3-node cluster, as a client of the test sees it."""
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        yield JetStreamApi(connection)
    finally:
        await connection.close()


async def test_a_step_down_by_annotation_moves_the_leader_once_per_token(
    resources: Resources, cluster_jetstream: JetStreamApi, namespace: str
) -> None:
    """jetstream-operator.io/step-down: TOKEN asks the stream's leader to step down; status
    records who led before and after, and the same token never asks again."""
    stream = namespace.replace("-", "_").upper()
    spec = {"name": stream, "replicas": 3}
    resources.create("streams", {"kind": "Stream", "metadata": {"name": "led"}, "spec": spec})

    async def led() -> str | None:
        resource = resources.get("streams", "led")
        leader = ((resource or {}).get("status") or {}).get("leader")
        return str(leader) if is_ready(resource) and leader else None

    before = await eventually(led, timeout=60)
    resources.annotate("streams", "led", {STEP_DOWN_ANNOTATION: "first"})

    async def stepped_down() -> dict[str, Any] | None:
        status = (resources.get("streams", "led") or {}).get("status") or {}
        record = status.get("lastStepDown") or {}
        return record if record.get("token") == "first" and record.get("toLeader") else None

    record = await eventually(stepped_down, timeout=60)
    assert record["fromLeader"] == before and record["toLeader"] != before, record
    info = await cluster_jetstream.stream_info(stream)
    assert info is not None and info["cluster"]["leader"] == record["toLeader"]
    # The same token again (a re-applied manifest, a restart): nothing more is asked.
    resources.patch_spec("streams", "led", {"maxMsgs": 1000})
    await eventually(lambda: _max_msgs(cluster_jetstream, stream, 1000), timeout=30)
    info = await cluster_jetstream.stream_info(stream)
    assert info is not None and info["cluster"]["leader"] == record["toLeader"]


async def _max_msgs(jetstream: JetStreamApi, stream: str, wanted: int) -> bool:
    info = await jetstream.stream_info(stream)
    return info is not None and info["config"]["max_msgs"] == wanted


async def test_a_consumer_step_down_by_annotation_moves_its_leader(
    resources: Resources, cluster_jetstream: JetStreamApi, namespace: str
) -> None:
    """The same annotation on a Consumer asks the consumer's own leader (its Raft group is not
    the stream's) to step down; status.lastStepDown and status.leader show the new one."""
    stream = namespace.replace("-", "_").upper()
    resources.create(
        "streams",
        {"kind": "Stream", "metadata": {"name": "held"}, "spec": {"name": stream, "replicas": 3}},
    )
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "reader"},
            "spec": {"durableName": "READER", "streamRef": "held", "replicas": 3},
        },
    )

    async def led() -> str | None:
        resource = resources.get("consumers", "reader")
        leader = ((resource or {}).get("status") or {}).get("leader")
        return str(leader) if is_ready(resource) and leader else None

    before = await eventually(led, timeout=60)
    resources.annotate("consumers", "reader", {STEP_DOWN_ANNOTATION: "first"})

    async def stepped_down() -> dict[str, Any] | None:
        status = (resources.get("consumers", "reader") or {}).get("status") or {}
        record = status.get("lastStepDown") or {}
        done = record.get("token") == "first" and record.get("toLeader")
        return status if done and status.get("leader") == record["toLeader"] else None

    status = await eventually(stepped_down, timeout=60)
    record = status["lastStepDown"]
    assert record["fromLeader"] == before and record["toLeader"] != before, record
    info = await cluster_jetstream.consumer_info(stream, "READER")
    assert info is not None and info["cluster"]["leader"] == record["toLeader"]


async def test_a_placement_move_is_reported_and_never_fought(
    resources: Resources, cluster_jetstream: JetStreamApi, nats_cluster: Any, namespace: str
) -> None:
    """A stream with data moved from node 0 to node 1 by its placement tags: status says
    Moving (Reconciling) while the new peer catches up, the operator sends no second update,
    and Ready comes back with the stream led by node 1 alone."""
    stream = namespace.replace("-", "_").upper()
    spec = {"name": stream, "subjects": [f"{stream}.>"], "placement": {"tags": ["node:0"]}}
    resources.create("streams", {"kind": "Stream", "metadata": {"name": "mover"}, "spec": spec})
    await eventually(lambda: _is_ready(resources, "mover"), timeout=60)
    connection = await nats.connect(servers=list(nats_cluster.urls))
    try:
        payload = b"x" * 1024
        for _ in range(20_000):  # 20 MB, so that catching up takes a moment
            await connection.publish(f"{stream}.a", payload)
        await connection.flush()
    finally:
        await connection.close()
    resources.patch_spec("streams", "mover", {"placement": {"tags": ["node:1"]}})
    reasons: list[str] = []

    async def moved() -> bool:
        resource = resources.get("streams", "mover")
        reason = condition(resource).get("reason")
        if reason and (not reasons or reasons[-1] != reason):
            reasons.append(str(reason))
        info = await cluster_jetstream.stream_info(stream) or {}
        alone_on_1 = (info.get("cluster") or {}).get("leader") == "nats-1" and not (
            (info.get("cluster") or {}).get("replicas")
        )
        return alone_on_1 and is_ready(resource) and "Moving" in reasons

    await eventually(moved, timeout=60, interval=0.1)
    assert reasons[-2:] == ["Moving", "Synced"], reasons
    moving = condition(resources.get("streams", "mover"), "Reconciling")
    assert moving["status"] == "False"
    info = await cluster_jetstream.stream_info(stream)
    assert info is not None and info["state"]["messages"] == 20_000
