"""Drift repair by the resync of DriftWatcher against the in-memory JetStream of test_handler_glue.

These check that resyncs of stalled or refused resources post one warning and send nothing more,
that one failing resource stops no other, that deletions seen during a listing are repaired
before it ends, and how consumer counts reach a stream's status without older listings writing
older counts back.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

from jetstream_operator.handlers import stream as stream_handlers
from jetstream_operator.handlers.failures import FailureMemory
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.backed import STREAM_KIND
from jetstream_operator.triggers.drift import DriftWatcher

from .test_handler_glue import OWNER, FakeJetStream, RecordingWriter, as_api, stream_body, watcher


async def test_resyncs_of_a_stalled_resource_post_one_warning_and_send_nothing_more() -> None:
    server = FakeJetStream(forced={"allow_rollup_hdrs": True})
    streams = ResourceRegistry()
    writer = RecordingWriter()
    memory = FailureMemory(jitter=lambda: 1.0)
    streams.observe("ADDED", stream_body("orders", "uid-1", {"name": "ORDERS"}))
    drift = watcher(streams, writer, memory)
    for _ in range(10):
        await drift.resync(as_api(server))
    assert server.sent("CREATE") == 1 and server.sent("UPDATE") <= 1
    assert [event for event in writer.events if event[1] == "Warning"] == [
        ("orders", "Warning", "NotConverging")
    ]
    assert len(writer.patches) == 1  # the condition, once


async def test_resyncs_of_a_refused_rename_post_one_warning_and_ask_nats_for_nothing() -> None:
    """Drift repair sees the renamed resource's stream missing at every resync; the refusal
    must hold without a request, a second Warning or another status write."""
    server = FakeJetStream()
    server.streams["ORDERS"] = {"name": "ORDERS"}
    streams = ResourceRegistry()
    writer = RecordingWriter()
    memory = FailureMemory(jitter=lambda: 1.0)
    body = stream_body("orders", "uid-1", {"name": "ORDERS2"}, streamName="ORDERS")
    streams.observe("ADDED", body)
    drift = watcher(streams, writer, memory)
    for _ in range(10):
        await drift.resync(as_api(server))
    assert {request.split()[0] for request in server.requests} == {"LIST"}
    assert [event for event in writer.events if event[1] == "Warning"] == [
        ("orders", "Warning", "ImmutableFieldChanged")
    ]
    assert len(writer.patches) == 1  # the condition, once
    assert set(server.streams) == {"ORDERS"}


async def test_an_idle_resync_writes_nothing_and_one_failing_resource_stops_no_other() -> None:
    server = FakeJetStream()
    streams = ResourceRegistry()
    writer = RecordingWriter(failing={"broken"})
    memory = FailureMemory()
    for name in ("first", "broken", "last"):
        streams.observe("ADDED", stream_body(name, f"uid-{name}", {"name": name.upper()}))
    drift = watcher(streams, writer, memory)
    await drift.resync(as_api(server))
    assert {name for name, _ in writer.patches} == {"first", "last"}
    assert server.sent("CREATE") == 3
    for resource in streams:  # as the watch would deliver the written status
        for name, patch in writer.patches:
            if resource.owner.name == name:
                resource.body["status"] = {**resource.status, **patch}
    writer.patches.clear()
    await drift.resync(as_api(server))
    await drift.resync(as_api(server))
    assert writer.patches == []


async def test_a_stream_deleted_while_a_resync_lists_is_repaired_before_the_listing_ends() -> None:
    """A listing of thousands of streams takes seconds: an advisory meanwhile is served at
    once, and the older listing neither repairs the stream again nor writes over it."""
    server = FakeJetStream()
    streams = ResourceRegistry()
    writer = RecordingWriter()
    drift = watcher(streams, writer, FailureMemory())
    for name in ("orders", "billing"):
        streams.observe("ADDED", stream_body(name, f"uid-{name}", {"name": name.upper()}))
    await drift.resync(as_api(server))
    back_in_time: list[bool] = []

    async def deleted_while_listing() -> None:
        del server.streams["ORDERS"]
        await drift.notify_stream("ORDERS")
        deadline = asyncio.get_running_loop().time() + 1.0
        while "ORDERS" not in server.streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        back_in_time.append("ORDERS" in server.streams)

    server.after_listing = deleted_while_listing
    await drift.resync(as_api(server))
    assert back_in_time == [True]
    assert server.sent("CREATE ORDERS") == 2 and server.sent("CREATE BILLING") == 1


async def test_a_failed_repair_during_a_failed_listing_is_reported_and_leaks_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both parts of a resync failing at once: the repair's error is the one raised, and the
    listing's is collected rather than logged later as "never retrieved"."""
    drift = watcher(ResourceRegistry(), RecordingWriter(), FailureMemory())
    unretrieved: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unretrieved.append(str(context["message"])))

    async def listing() -> None:
        raise ValueError("listing failed")

    async def failing_repair(_: JetStreamApi) -> None:
        await asyncio.sleep(0.01)  # the listing fails first
        raise RuntimeError("repair failed")

    monkeypatch.setattr(drift, "_repair_pending", failing_repair)
    await drift.notify_stream("ORDERS")
    try:
        with pytest.raises(RuntimeError, match="repair failed"):
            await drift._serving_advisories(listing(), as_api(FakeJetStream()))
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []


async def test_repairs_run_side_by_side_and_stop_starting_after_a_failure() -> None:
    import asyncio

    from jetstream_operator.nats.jsapi import JetStreamUnavailable
    from jetstream_operator.passes.repair import all_of

    running, most, started = 0, 0, []

    async def repair(index: int) -> None:
        nonlocal running, most
        started.append(index)
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        if index == 3:
            raise JetStreamUnavailable("gone")

    with pytest.raises(JetStreamUnavailable):
        await all_of((repair(index) for index in range(40)), limit=4)
    assert most == 4
    assert len(started) < 40  # after the failure nothing new started
    await all_of(repair(index) for index in range(4, 12))  # all succeed: no error


async def test_a_deletion_announced_during_the_consumer_sweep_is_repaired_before_it_ends() -> None:
    """At thousands of streams the sweep takes seconds: a repair must not wait for all of it."""
    server = FakeJetStream()
    streams, consumers = ResourceRegistry(), ResourceRegistry()
    for name in ("a", "b", "lost"):
        streams.observe("ADDED", stream_body(name, f"uid-{name}", {"name": name.upper()}))
    for stream in ("A", "B"):
        body = stream_body(f"w-{stream}", f"uid-w-{stream}", {"name": "unused"})
        body["spec"] = {"durableName": "W", "streamName": stream}
        consumers.observe("ADDED", body)
    drift = watcher(streams, RecordingWriter(), FailureMemory(), consumers)
    await drift.resync(as_api(server))  # creates the three streams
    server.requests.clear()

    async def deleted_out_of_band() -> None:
        del server.streams["LOST"]
        await drift.notify_stream("LOST")  # as the deletion advisory does

    server.on_consumer_listing = deleted_out_of_band
    drift._sweep.everything_next()  # this pass lists every stream's consumers
    await drift.resync(as_api(server))
    listings = [index for index, request in enumerate(server.requests) if "CONSUMERS" in request]
    assert len(listings) == 2
    assert listings[0] < server.requests.index("CREATE LOST") < listings[1]


async def one_stream_in_sync() -> tuple[FakeJetStream, RecordingWriter, DriftWatcher]:
    """Stream ORDERS made by a resync, its status as the watch would deliver it."""
    server = FakeJetStream()
    streams = ResourceRegistry()
    writer = RecordingWriter()
    streams.observe("ADDED", stream_body("orders", "uid-1", {"name": "ORDERS"}))
    drift = watcher(streams, writer, FailureMemory())
    await drift.resync(as_api(server))
    resource = next(iter(streams))
    resource.body["status"] = {**resource.status, **writer.patches[-1][1]}
    writer.patches.clear()
    return server, writer, drift


async def test_a_consumer_just_made_shows_on_its_stream_with_one_info_and_one_write() -> None:
    """Called before the consumer reports Ready, so its stream's count is not still 0 then."""
    server, writer, drift = await one_stream_in_sync()
    server.requests.clear()
    server.consumer_counts["ORDERS"] = 1
    await drift.recount_now("ORDERS", as_api(server))
    assert server.requests == ["INFO ORDERS"]
    assert [patch.get("consumerCount") for _, patch in writer.patches] == [1]
    writer.patches.clear()
    await drift.recount_now("ORDERS", as_api(server))
    await drift.recount_now("UNKNOWN", as_api(server))  # no resource: no request
    assert writer.patches == [] and server.requests == ["INFO ORDERS", "INFO ORDERS"]


async def test_a_new_consumer_waits_for_its_streams_first_status_before_counting() -> None:
    """A count written before kopf's first status of the stream would be overwritten by the
    handler's older figure: the recount waits until the watch has delivered that status."""
    server = FakeJetStream()
    await stream_handlers.reconcile(STREAM_KIND, {"name": "ORDERS"}, OWNER, as_api(server))
    server.requests.clear()
    server.consumer_counts["ORDERS"] = 1
    streams = ResourceRegistry()
    writer = RecordingWriter()
    unhandled = stream_body("orders", "uid-1", {"name": "ORDERS"})
    unhandled["status"] = {}
    streams.observe("ADDED", unhandled)
    drift = watcher(streams, writer, FailureMemory())
    waiting = asyncio.create_task(drift.recount_now("ORDERS", as_api(server)))
    await asyncio.sleep(0.05)
    assert not waiting.done() and server.requests == []
    streams.observe("MODIFIED", stream_body("orders", "uid-1", {"name": "ORDERS"}))
    drift.observed(next(iter(streams)))
    await asyncio.wait_for(waiting, 1.0)
    assert [patch.get("consumerCount") for _, patch in writer.patches] == [1]
    # No first status within the timeout: nothing is written; the advisory's recount follows.
    other = stream_body("late", "uid-2", {"name": "LATE"})
    other["status"] = {}
    streams.observe("ADDED", other)
    server.streams["LATE"] = {"name": "LATE"}
    writer.patches.clear()
    await drift.recount_now("LATE", as_api(server), timeout=0.05)
    assert writer.patches == []


async def test_a_listing_older_than_a_recount_does_not_write_its_older_count_back() -> None:
    server, writer, drift = await one_stream_in_sync()

    async def consumer_made() -> None:
        server.consumer_counts["ORDERS"] = 1
        await drift.recount_now("ORDERS", as_api(server))

    server.after_listing = consumer_made
    await drift.resync(as_api(server))  # its listing still says 0
    assert [patch.get("consumerCount") for _, patch in writer.patches] == [1]
    await drift.resync(as_api(server))  # a fresh listing agrees: no write
    assert len(writer.patches) == 1


async def test_a_listing_older_than_a_handlers_look_does_not_write_its_older_count_back() -> None:
    """A new stream's handler counts the consumers applied with it; a resync that listed the
    stream just before must not put the listing's count over the handler's status."""
    server, writer, drift = await one_stream_in_sync()
    resource = next(iter(drift._streams))

    async def handler_pass() -> None:
        drift.looking(resource.owner.uid)  # as `envelope.run_pass` does before the handler looks
        server.consumer_counts["ORDERS"] = 2
        resource.body["status"] = {**resource.status, "consumerCount": 2}  # kopf's status

    server.after_listing = handler_pass
    await drift.resync(as_api(server))  # its listing still says 0
    assert writer.patches == []


async def test_a_stream_whose_peers_are_all_offline_keeps_its_status_and_says_so() -> None:
    """A cluster lists it with an empty state and names it missing: that is not a stream that
    lost its consumers and messages. Nothing is written or repaired from that listing; after
    two such listings in a row its condition says so, once; seen again, it is Ready again."""
    server, writer, drift = await one_stream_in_sync()
    server.consumer_counts["ORDERS"] = 1
    await drift.resync(as_api(server))
    assert [patch.get("consumerCount") for _, patch in writer.patches] == [1]
    resource = next(iter(drift._streams))

    def delivered() -> None:  # as the watch brings the status written
        for _, patch in writer.patches:
            resource.body["status"] = {**resource.status, **patch}
        writer.patches.clear()

    def reason() -> str:
        ready = [c for c in resource.status["conditions"] if c["type"] == "Ready"]
        return str(ready[0]["reason"])

    delivered()
    server.unseen = {"ORDERS"}
    server.requests.clear()
    await drift.resync(as_api(server))
    assert writer.patches == [] and server.requests == ["LIST"]
    await drift.resync(as_api(server))
    assert [set(patch) for _, patch in writer.patches] == [{"conditions"}]
    delivered()
    assert reason() == "StreamOffline" and resource.status["consumerCount"] == 1
    await drift.resync(as_api(server))
    assert writer.patches == []  # said once
    server.unseen = set()
    await drift.resync(as_api(server))
    await drift._repair_pending(as_api(server))  # as the run loop does next
    delivered()
    assert reason() == "Synced" and resource.status["consumerCount"] == 1


@pytest.mark.parametrize(("recounted", "listing"), [(10, False), (11, True)])
async def test_a_recount_of_a_few_streams_among_many_asks_each_not_the_whole_account(
    recounted: int, listing: bool
) -> None:
    """A listing returns every stream of the account; up to a quarter of them (10 of 40 here)
    are asked for one by one, more by a listing."""
    server = FakeJetStream()
    streams = ResourceRegistry()
    writer = RecordingWriter()
    for index in range(40):
        streams.observe("ADDED", stream_body(f"s{index}", f"uid-{index}", {"name": f"S{index}"}))
    drift = watcher(streams, writer, FailureMemory())
    await drift.resync(as_api(server))  # creates them
    for resource, (_, patch) in zip(streams, writer.patches, strict=True):
        resource.body["status"] = {**resource.status, **patch}
    await drift.resync(as_api(server))  # lists 40
    writer.patches.clear()
    server.requests.clear()
    for index in range(recounted):
        server.consumer_counts[f"S{index}"] = 1
        await drift.notify_consumer(f"S{index}", "C")
    await drift._refresh_counts(as_api(server))
    assert server.sent("LIST") == (1 if listing else 0)
    assert server.sent("INFO") == (0 if listing else recounted)
    assert sum(patch.get("consumerCount") == 1 for _, patch in writer.patches) == recounted
