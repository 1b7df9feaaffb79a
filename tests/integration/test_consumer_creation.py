"""Consumers end to end, as made: every field on the server, real clients consuming through them
with status following, and what a creation looks at (its stream's creation and limits, no look
for itself, one look after a refusal).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.handlers import consumer as consumer_handlers
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.ownership import Owner
from tests.support.operator import operator_variant

from .figures import ApiAudit
from .helpers import (
    Resources,
    condition,
    eventually,
    fill,
    is_ready,
    is_subset,
    warnings,
)
from .test_consumers import base_name, consumer_manifest, make_stream, ready, stream_manifest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


CONSUMER_FIELDS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "ackWait default is the server's 30s",
        {},
        {"ack_wait": 30_000_000_000, "ack_policy": "explicit"},
    ),
    ("description", {"description": "billing"}, {"description": "billing"}),
    ("deliverPolicy new", {"deliverPolicy": "new"}, {"deliver_policy": "new"}),
    (
        "byStartSequence",
        {"deliverPolicy": "byStartSequence", "optStartSeq": 3},
        {"deliver_policy": "by_start_sequence", "opt_start_seq": 3},
    ),
    (
        "byStartTime",
        {"deliverPolicy": "byStartTime", "optStartTime": "2026-01-01T00:00:00Z"},
        {"deliver_policy": "by_start_time", "opt_start_time": "2026-01-01T00:00:00Z"},
    ),
    ("ackPolicy all", {"ackPolicy": "all"}, {"ack_policy": "all"}),
    ("ackWait", {"ackWait": "45s"}, {"ack_wait": 45_000_000_000}),
    (
        "maxDeliver and backoff",
        {"maxDeliver": 5, "backoff": ["1s", "5s"]},
        {"max_deliver": 5, "backoff": [1_000_000_000, 5_000_000_000]},
    ),
    ("filterSubject", {"filterSubject": "{s}.a"}, {"filter_subject": "{s}.a"}),
    (
        "filterSubjects",
        {"filterSubjects": ["{s}.a", "{s}.b"]},
        {"filter_subjects": ["{s}.a", "{s}.b"]},
    ),
    ("replayPolicy", {"replayPolicy": "original"}, {"replay_policy": "original"}),
    ("sampleFreq", {"sampleFreq": "50%"}, {"sample_freq": "50%"}),
    ("maxAckPending", {"maxAckPending": 20}, {"max_ack_pending": 20}),
    ("maxWaiting", {"maxWaiting": 7}, {"max_waiting": 7}),
    ("headersOnly", {"headersOnly": True}, {"headers_only": True}),
    (
        "pull request limits",
        {"maxRequestBatch": 10, "maxRequestExpires": "30s", "maxRequestMaxBytes": 4096},
        {"max_batch": 10, "max_expires": 30_000_000_000, "max_bytes": 4096},
    ),
    ("inactiveThreshold", {"inactiveThreshold": "1h"}, {"inactive_threshold": 3_600_000_000_000}),
    ("memStorage", {"memStorage": True}, {"mem_storage": True}),
    ("metadata", {"metadata": {"team": "billing"}}, {"metadata": {"team": "billing"}}),
    (
        "push with group and heartbeats",
        {
            "deliverSubject": "deliver.{s}",
            "deliverGroup": "workers",
            "heartbeatInterval": "5s",
            "flowControl": True,
            "rateLimitBps": 1000000,
        },
        {
            "deliver_subject": "deliver.{s}",
            "deliver_group": "workers",
            "idle_heartbeat": 5_000_000_000,
            "flow_control": True,
            "rate_limit_bps": 1000000,
        },
    ),
    ("pauseUntil", {"pauseUntil": "2099-01-01T00:00:00Z"}, {"pause_until": "2099-01-01T00:00:00Z"}),
    (
        "priority groups",
        {"priorityPolicy": "pinned_client", "priorityGroups": ["jobs"], "pinnedTtl": "30s"},
        {
            "priority_policy": "pinned_client",
            "priority_groups": ["jobs"],
            "priority_timeout": 30_000_000_000,
        },
    ),
]


@pytest.mark.parametrize(
    ("case", "fragment", "expected"), CONSUMER_FIELDS, ids=[c[0] for c in CONSUMER_FIELDS]
)
async def test_consumer_field_round_trips(
    resources: Resources,
    nc: Client,
    namespace: str,
    case: str,
    fragment: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    stream, subject = await make_stream(resources, nc, namespace)
    resources.create(
        "consumers",
        consumer_manifest(
            "reader", durableName="READER", streamName=stream, **fill(fragment, {"s": subject})
        ),
    )
    jetstream = JetStreamApi(nc)
    want = fill(expected, {"s": subject})

    async def matches() -> bool:
        info = await jetstream.consumer_info(stream, "READER")
        return info is not None and is_subset(want, info["config"])

    await eventually(matches, timeout=20)
    await eventually(lambda: ready(resources, "consumers", "reader"), timeout=20)


async def test_pull_consumer_serves_a_client_and_status_follows(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream, subject = await make_stream(resources, nc, namespace)
    resources.create(
        "consumers", consumer_manifest("worker", durableName="WORKER", streamRef="source")
    )
    await eventually(lambda: ready(resources, "consumers", "worker"))
    js = nc.jetstream()
    for index in range(10):
        await js.publish(f"{subject}.job", str(index).encode())

    async def pending(count: int) -> bool:
        status = (resources.get("consumers", "worker") or {}).get("status") or {}
        return status.get("numPending") == count

    await eventually(lambda: pending(10), timeout=20)
    subscription = await js.pull_subscribe_bind("WORKER", stream=stream)
    messages = await subscription.fetch(4, timeout=5)
    assert [m.data for m in messages] == [b"0", b"1", b"2", b"3"]
    for message in messages:
        await message.ack_sync()
    await eventually(lambda: pending(6), timeout=20)
    status = (resources.get("consumers", "worker") or {})["status"]
    assert status["ackFloorStreamSeq"] == 4
    assert status["streamName"] == stream


async def test_figures_held_back_by_the_status_budget_reach_status_once_it_allows(
    operator_process: OperatorProcess, resources: Resources, nc: Client, namespace: str
) -> None:
    """Messages arrive just after the consumers' figures were written: the budget holds the new
    ones back for its interval, and they stop moving. The stream's consumers must still be
    looked at again until the figures are written; otherwise status shows the old ones until
    the next idle look, hours later."""
    interval = 10.0
    with operator_variant(operator_process, JETSTREAM_OPERATOR_STATUS_INTERVAL=str(interval)):
        stream, subject = await make_stream(resources, nc, namespace)
        names = [f"held{index}" for index in range(3)]
        for name in names:
            resources.create(
                "consumers",
                consumer_manifest(name, durableName=name.upper(), streamRef="source"),
            )
        for name in names:
            await eventually(partial(ready, resources, "consumers", name))
        js = nc.jetstream()

        async def all_pending(count: int) -> bool:
            shown = [
                ((resources.get("consumers", name) or {}).get("status") or {}).get("numPending")
                for name in names
            ]
            return shown == [count] * len(names)

        await js.publish(f"{subject}.job", b"0")
        await eventually(partial(all_pending, 1), timeout=3 * interval)  # the interval starts
        for index in range(1, 3):
            await js.publish(f"{subject}.job", str(index).encode())
        jetstream = JetStreamApi(nc)
        for name in names:
            info = await jetstream.consumer_info(stream, name.upper())
            assert info is not None and info["num_pending"] == 3
        await eventually(partial(all_pending, 3), timeout=3 * interval)


async def test_an_idle_consumer_costs_no_listing_until_clients_read_again(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """The session's consumer resync interval is 2 s, its idle interval the default hours: once
    nobody reads, the stream's consumers are no longer listed; new messages list them again."""
    stream, subject = await make_stream(resources, nc, namespace)
    resources.create(
        "consumers", consumer_manifest("quiet", durableName="QUIET", streamRef="source")
    )
    await eventually(lambda: ready(resources, "consumers", "quiet"))
    js = nc.jetstream()
    await js.publish(f"{subject}.job", b"one")
    subscription = await js.pull_subscribe_bind("QUIET", stream=stream)
    for message in await subscription.fetch(1, timeout=5):
        await message.ack_sync()

    async def caught_up() -> bool:
        status = (resources.get("consumers", "quiet") or {}).get("status") or {}
        return status.get("ackFloorStreamSeq") == 1 and status.get("numPending") == 0

    await eventually(caught_up, timeout=20)
    await asyncio.sleep(6)  # a look that sees nothing move makes the stream idle
    audit = await ApiAudit().start(nc)
    try:
        await asyncio.sleep(8)  # four resyncs
        assert audit.count("CONSUMER.LIST", stream) == 0
        await js.publish(f"{subject}.job", b"two")

        async def pending_again() -> bool:
            status = (resources.get("consumers", "quiet") or {}).get("status") or {}
            return status.get("numPending") == 1

        await eventually(pending_again, timeout=20)
        assert audit.count("CONSUMER.LIST", stream) >= 1
    finally:
        await audit.stop()


async def test_a_new_consumer_is_made_without_a_look_for_it_and_its_advisory_brings_none(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """The consumer's first pass looks at the stream (whose consumer limits shape the create),
    creates the consumer without looking for it first, and recounts its stream; the advisory
    of that creation is its own echo, not a change to look into (counted by the server's API
    audit)."""
    stream, _ = await make_stream(resources, nc, namespace)
    audit = await ApiAudit().start(nc)
    try:
        resources.create(
            "consumers", consumer_manifest("once", durableName="ONCE", streamRef="source")
        )

        async def counted() -> bool:
            status = (resources.get("streams", "source") or {}).get("status") or {}
            return await ready(resources, "consumers", "once") and status.get("consumerCount") == 1

        await eventually(counted, timeout=20)
        await asyncio.sleep(4)  # the second look came a second after the first status
        subjects = list(audit.subjects)
    finally:
        await audit.stop()
    assert subjects.count(f"$JS.API.CONSUMER.CREATE.{stream}.ONCE") == 1, subjects
    assert subjects.count(f"$JS.API.CONSUMER.INFO.{stream}.ONCE") == 0, subjects
    # The handler's look at the stream, and its recount of the stream's consumers.
    assert subjects.count(f"$JS.API.STREAM.INFO.{stream}") <= 2, subjects


async def test_consumers_applied_with_their_stream_take_its_creation_for_a_look(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """A consumer applied with its stream waits for the stream's first pass in the operator
    before it looks, and takes the creation's reply for its look at the stream; first passes
    create streams and consumers without looking for them first (by the server's API audit)."""
    base = base_name(namespace)
    streams = [f"pair{i}" for i in range(8)]
    audit = await ApiAudit().start(nc)
    try:
        for i, stream in enumerate(streams):
            resources.create("streams", stream_manifest(stream, f"{base}_{i}", [f"{base}.{i}"]))
            reader = consumer_manifest(f"{stream}-reader", durableName="R", streamRef=stream)
            resources.create("consumers", reader)

        async def settled() -> bool:
            bodies = [resources.get("streams", name) for name in streams]
            return all(
                is_ready(body)
                and ((body or {}).get("status") or {}).get("consumerCount") == 1
                and is_ready(resources.get("consumers", f"{name}-reader"))
                for name, body in zip(streams, bodies, strict=True)
            )

        await eventually(settled, timeout=30)
        await asyncio.sleep(2)  # a consumer's own recount would follow within a second
    finally:
        await audit.stop()
    # Other tests' resources on the same server are looked at meanwhile: count this test's.
    requests = Counter(
        subject.removeprefix("$JS.API.").replace(base, "")
        for subject in audit.subjects
        if f".{base}_" in subject
    )
    looks = sum(
        n for key, n in requests.items() if key.startswith(("STREAM.INFO", "CONSUMER.INFO"))
    )
    creates = sum(n for key, n in requests.items() if key.startswith("CONSUMER.CREATE"))
    assert creates == len(streams), requests
    # A stream is made without a look first; a consumer waits for its stream's first pass,
    # takes the creation's reply for its look at the stream, and never looks for itself on a
    # first pass; the stream's first status adds the consumers made meanwhile to the
    # creation's count. So no look at all, in 7 of 10 runs alone; a consumer whose pass ends
    # after its stream's first status recounts the stream (1, 1 and 7 looks in the others).
    # Counting with a look, it was 8; looking at the stream before waiting, 9-12; looking
    # before creating, 24-28.
    assert looks <= len(streams), requests


async def test_a_consumer_applied_with_its_stream_waits_only_for_the_streams_first_pass(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """The first pass of a Stream resource tells the consumers waiting for it to look, whether
    it made the stream or not: one whose stream was already in NATS (adopted) turns Ready, and
    one whose stream the server refused reports StreamNotFound, each within seconds, not after
    the 60 s a made stream would have been waited for."""
    base = base_name(namespace)
    await JetStreamApi(nc).create_stream(
        {"name": f"{base}_OLD", "subjects": [f"{base.lower()}.old.>"], "storage": "file"}
    )
    await JetStreamApi(nc).create_stream({"name": f"{base}_HOLDER", "subjects": [f"{base}.taken"]})
    resources.create("streams", stream_manifest("old", f"{base}_OLD", [f"{base.lower()}.old.>"]))
    resources.create("consumers", consumer_manifest("old-reader", durableName="R", streamRef="old"))
    # Refused by the server: another stream holds its subject.
    resources.create("streams", stream_manifest("refused", f"{base}_NEW", [f"{base}.taken"]))
    resources.create(
        "consumers", consumer_manifest("new-reader", durableName="R", streamRef="refused")
    )
    started = time.monotonic()
    await eventually(lambda: ready(resources, "consumers", "old-reader"), timeout=20)

    async def not_found() -> bool:
        reason = condition(resources.get("consumers", "new-reader")).get("reason")
        return reason == "StreamNotFound"

    await eventually(not_found, timeout=20)
    assert condition(resources.get("streams", "refused")).get("reason") == "ServerRejected"
    assert time.monotonic() - started < 20


async def test_a_consumer_made_just_after_its_stream_changed_takes_the_changed_limits(
    resources: Resources, nc: Client, namespace: str, api_client: client.ApiClient
) -> None:
    """The stream's creation reply stands in for a look only until a later pass on the stream:
    a consumer made right after the stream's consumer limits changed takes the new limit for
    its maxAckPending, which the server would refuse above it."""
    stream = base_name(namespace)
    manifest = stream_manifest("limited", stream, [f"{stream.lower()}.>"])
    manifest["spec"]["consumerLimits"] = {"maxAckPending": 50}
    resources.create("streams", manifest)
    await eventually(lambda: ready(resources, "streams", "limited"))
    resources.patch_spec("streams", "limited", {"consumerLimits": {"maxAckPending": 20}})

    async def changed() -> bool:
        body = resources.get("streams", "limited") or {}
        return (body.get("status") or {}).get("observedGeneration") == 2 and is_ready(body)

    await eventually(changed)
    resources.create(
        "consumers", consumer_manifest("reader", durableName="READER", streamRef="limited")
    )
    await eventually(lambda: ready(resources, "consumers", "reader"))
    info = await JetStreamApi(nc).consumer_info(stream, "READER")
    assert info is not None and info["config"]["max_ack_pending"] == 20
    # Not Ready after a refusal and a retry: the first create asked for the new limit.
    assert warnings(api_client, namespace) == []


async def test_a_consumer_applied_with_its_stream_takes_the_limits_of_its_creation(
    resources: Resources, nc: Client, namespace: str, api_client: client.ApiClient
) -> None:
    """Applied together, the consumer plans with what the stream's creation reply kept for it:
    its consumer limits, which set the consumer's maxAckPending (the server refuses more).
    Several pairs, since a consumer whose pass starts late looks at the stream instead."""
    base = base_name(namespace)
    for i in range(4):
        manifest = stream_manifest(f"bounded{i}", f"{base}_{i}", [f"{base.lower()}.{i}.>"])
        manifest["spec"]["consumerLimits"] = {"maxAckPending": 40}
        resources.create("streams", manifest)
        resources.create(
            "consumers",
            consumer_manifest(f"reader{i}", durableName="READER", streamRef=f"bounded{i}"),
        )
    for i in range(4):
        await eventually(partial(ready, resources, "consumers", f"reader{i}"))
        info = await JetStreamApi(nc).consumer_info(f"{base}_{i}", "READER")
        assert info is not None and info["config"]["max_ack_pending"] == 40
    assert warnings(api_client, namespace) == []


async def test_a_creation_refused_for_what_was_not_looked_at_looks_once_and_plans_again(
    nc: Client, namespace: str
) -> None:
    """A consumer that found no stream and then took the stream's creation reply creates
    without looking. When that reply was out of date (someone made the consumer meanwhile, or
    deleted the stream), the refusal brings one look and the answer a look would have given:
    Conflict or StreamNotFound, not "NATS refused the consumer config"."""
    jetstream = JetStreamApi(nc)
    stream = f"{base_name(namespace)}_RACE"
    owner = Owner(namespace, "race", "uid-race")

    async def made_with_a_rival(name: str) -> dict[str, Any]:
        reply = await jetstream.create_stream({"name": name, "subjects": [f"{name}.>"]})
        await nc.jetstream().add_consumer(name, durable_name="TAKEN", ack_policy="explicit")
        return reply

    spec = {"durableName": "TAKEN", "streamName": stream, "ackWait": "45s"}
    result = await consumer_handlers.reconcile(
        spec, owner, jetstream, stream_name=stream, stream_arrival=made_with_a_rival
    )
    assert result.outcome.reason == "Conflict", result.outcome
    info = await jetstream.consumer_info(stream, "TAKEN")
    assert info is not None and info["config"]["ack_wait"] == 30_000_000_000  # untouched

    gone = f"{stream}_GONE"

    async def made_then_deleted(name: str) -> dict[str, Any]:
        reply = await jetstream.create_stream({"name": name, "subjects": [f"{name}.>"]})
        await jetstream.delete_stream(name)
        return reply

    spec = {"durableName": "LATE", "streamName": gone}
    result = await consumer_handlers.reconcile(
        spec, owner, jetstream, stream_name=gone, stream_arrival=made_then_deleted
    )
    assert result.outcome.reason == "StreamNotFound", result.outcome
    await jetstream.delete_stream(stream)
