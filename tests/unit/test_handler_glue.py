"""The handler layer and drift repair against an in-memory JetStream that answers like the
server where it matters here: it keeps some values of its own, and counts every request.

These check the glue (history, backoff, events, status writes, one failure not stopping the
others); that the real server behaves this way is tested against nats-server in tests/integration.
"""

from __future__ import annotations

import asyncio
import copy
import gc
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from jetstream_operator.handlers import consumer as consumer_handlers
from jetstream_operator.handlers import stream as stream_handlers
from jetstream_operator.handlers.connection_directory import ConnectionDirectory, ConnectionNotReady
from jetstream_operator.handlers.failures import FailureMemory, History
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.handlers.status_writes import StatusBudget
from jetstream_operator.nats.jsapi import JetStreamApi, JetStreamError, StreamListing
from jetstream_operator.nats.pool import ConnectionTarget
from jetstream_operator.reconcile.backed import KEY_VALUE_KIND, STREAM_KIND
from jetstream_operator.reconcile.conditions import Outcome, conditions_for
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, Owner
from jetstream_operator.reconcile.renames import connection_record, managed_connection
from jetstream_operator.triggers.drift import DriftWatcher, WatchSettings

OWNER = Owner("ns", "orders", "uid-1")


class FakeJetStream:
    """Streams by name; `forced` values are kept whatever an update asks for."""

    def __init__(self, forced: dict[str, Any] | None = None) -> None:
        self.streams: dict[str, dict[str, Any]] = {}
        self.forced = forced or {}
        self.requests: list[str] = []
        self.refuse: str | None = None
        self.on_consumer_listing: Callable[[], Awaitable[None]] | None = None
        self.consumer_counts: dict[str, int] = {}
        self.after_listing: Callable[[], Awaitable[None]] | None = None
        self.cluster: dict[str, Any] | None = None
        self.unseen: set[str] = set()
        self.consumers: dict[tuple[str, str], dict[str, Any]] = {}
        self.now = "2026-01-01T00:00:00Z"
        self.made_at: dict[str, str] = {}

    def _info(self, name: str) -> dict[str, Any]:
        info = {
            "config": copy.deepcopy(self.streams[name]),
            "state": {"messages": 0, "consumer_count": self.consumer_counts.get(name, 0)},
            "created": self.made_at.get(name, "2026-01-01T00:00:00Z"),
            "ts": self.now,
        }
        return info if self.cluster is None else {**info, "cluster": self.cluster}

    async def stream_info(self, name: str) -> dict[str, Any] | None:
        self.requests.append(f"INFO {name}")
        return self._info(name) if name in self.streams else None

    async def _store(self, operation: str, config: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(f"{operation} {config['name']}")
        if self.refuse:
            raise JetStreamError(400, 10052, self.refuse)
        name, stored = config["name"], {**config, **self.forced}
        if operation == "CREATE" and name in self.streams:
            if self.streams[name] != stored:
                raise JetStreamError(400, 10058, "stream name already in use")
            return self._info(name)  # an identical create is answered with what is there
        self.streams[name] = stored
        self.made_at[name] = self.now
        return self._info(name)

    async def create_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._store("CREATE", config)

    async def update_stream(self, config: dict[str, Any]) -> dict[str, Any]:
        return await self._store("UPDATE", config)

    async def delete_stream(self, name: str) -> None:
        self.requests.append(f"DELETE {name}")
        del self.streams[name]

    async def stream_listing(self) -> StreamListing:
        """As a cluster lists: a stream in `unseen` comes with an empty state."""
        self.requests.append("LIST")
        listed = [
            {**self._info(name), "state": {}} if name in self.unseen else self._info(name)
            for name in self.streams
        ]
        if self.after_listing is not None:
            hook, self.after_listing = self.after_listing, None
            await hook()  # what happens while the listing is on its way
        return StreamListing(listed, {name: "" for name in self.unseen})

    def _consumer_info(self, stream: str, name: str) -> dict[str, Any]:
        return {
            "stream_name": stream,
            "name": name,
            "config": copy.deepcopy(self.consumers[(stream, name)]),
            "created": "2026-01-01T00:00:00Z",
            "ts": self.now,
        }

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        self.requests.append(f"CONSUMER.INFO {stream} {name}")
        return self._consumer_info(stream, name) if (stream, name) in self.consumers else None

    async def create_consumer(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Action "create" as the server takes it: what is there must be identical."""
        config = body["config"]
        name = config["name"]
        self.requests.append(f"CONSUMER.CREATE {stream} {name}")
        if stream not in self.streams:
            raise JetStreamError(404, 10059, "stream not found")
        held = self.consumers.get((stream, name))
        if held is not None and (body["action"] == "update" or held == config):
            self.consumers[(stream, name)] = config
        elif held is not None:
            raise JetStreamError(400, 10148, "consumer already exists")
        else:
            self.consumers[(stream, name)] = config
        return self._consumer_info(stream, name)

    def sent(self, operation: str) -> int:
        return sum(1 for request in self.requests if request.startswith(operation))

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        self.requests.append(f"CONSUMERS {stream}")
        if self.on_consumer_listing is not None:
            await self.on_consumer_listing()
            self.on_consumer_listing = None
        return []


def as_api(server: FakeJetStream) -> JetStreamApi:
    """The fake where the handlers take the real API: it answers every request they make."""
    return server  # type: ignore[return-value]  # a stand-in, not a subclass


class RecordingWriter:
    def __init__(self, failing: set[str] | None = None) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.failing = failing or set()

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        if name in self.failing:
            raise RuntimeError(f"API server refused {name}")
        self.patches.append((name, status))
        return True

    def post(self, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """As EventPoster.post, recorded at once."""
        self.events.append((body["metadata"]["name"], event_type, reason))


def stream_body(name: str, uid: str, spec: dict[str, Any], **status: Any) -> dict[str, Any]:
    ready = conditions_for(Outcome(True, "Synced", f"stream {spec['name']} matches the spec"), 1)
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": 1},
        "spec": spec,
        "status": {"conditions": ready, "observedGeneration": 1, **status},
    }


def history(memory: FailureMemory, **status: Any) -> History:
    return History(1, status, memory)


async def test_a_value_the_server_keeps_is_sent_once_then_reported_not_looped() -> None:
    server = FakeJetStream(forced={"allow_rollup_hdrs": True})
    memory = FailureMemory(jitter=lambda: 1.0)
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    created = await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(memory)
    )
    assert created.outcome.ready is False and created.outcome.reason == "NotConverging"
    assert "allow_rollup_hdrs" in created.outcome.message
    assert [event.reason for event in created.events].count("NotConverging") == 1
    # Each update raises an advisory that starts another pass: it must send nothing more.
    sent = server.sent("UPDATE")
    for _ in range(20):
        again = await stream_handlers.reconcile(
            STREAM_KIND, spec, OWNER, as_api(server), drift=True, history=history(memory)
        )
        assert again.outcome.reason == "NotConverging"
        assert not [event for event in again.events if event.type == "Warning"]
    assert server.sent("UPDATE") == sent <= 1


@pytest.mark.parametrize(
    ("cluster", "looks_after_creating"),
    [(None, 0), ({"name": "east", "leader": "n1", "replicas": [{"name": "n2"}]}, 1)],
)
async def test_a_created_stream_is_looked_at_again_only_in_a_cluster(
    cluster: dict[str, Any] | None, looks_after_creating: int
) -> None:
    """A single server's create reply is what INFO would say; a cluster's shows replicas that
    have not caught up yet, so one INFO then keeps status complete when it turns Ready."""
    server = FakeJetStream()
    server.cluster = cluster
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    created = await stream_handlers.reconcile(STREAM_KIND, spec, OWNER, as_api(server))
    assert created.outcome.ready and created.status["streamName"] == "ORDERS"
    after = server.requests[server.requests.index("CREATE ORDERS") + 1 :]
    assert after.count("INFO ORDERS") == looks_after_creating


async def test_a_rejected_update_is_retried_only_when_due_or_when_something_changed() -> None:
    server = FakeJetStream()
    memory = FailureMemory(jitter=lambda: 1.0)
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(memory)
    )
    server.refuse = "stream configuration update can not change sealed"
    changed = {**spec, "description": "new"}
    first = await stream_handlers.reconcile(
        STREAM_KIND, changed, OWNER, as_api(server), history=history(memory)
    )
    assert first.outcome.reason == "ServerRejected" and first.delay is not None
    for _ in range(10):
        await stream_handlers.reconcile(
            STREAM_KIND, changed, OWNER, as_api(server), history=history(memory)
        )
    assert server.sent("UPDATE") == 1
    memory.clock = lambda: float("inf")  # the backoff ran out
    await stream_handlers.reconcile(
        STREAM_KIND, changed, OWNER, as_api(server), history=history(memory)
    )
    assert server.sent("UPDATE") == 2


async def test_a_restored_resource_reattaches_with_an_event() -> None:
    server = FakeJetStream()
    await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, Owner("ns", "orders", "old"), as_api(server)
    )
    restored = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, OWNER, as_api(server)
    )
    assert restored.outcome.ready
    assert "Reattached" in [event.reason for event in restored.events]
    assert server.streams["ORDERS"]["metadata"][OWNER_METADATA_KEY] == OWNER.encode()
    other = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, Owner("ns", "other", "x"), as_api(server)
    )
    assert other.outcome.reason == "Conflict"


REPORTED = conditions_for(Outcome(True, "Synced", "reported before"), 1)


async def test_a_first_pass_creates_without_looking_and_later_passes_look_first() -> None:
    server = FakeJetStream()
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    first = await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(FailureMemory())
    )
    assert first.outcome.ready and [event.reason for event in first.events] == ["Created"]
    assert server.requests == ["CREATE ORDERS"]
    server.requests.clear()
    later = await stream_handlers.reconcile(
        STREAM_KIND,
        spec,
        OWNER,
        as_api(server),
        history=history(FailureMemory(), conditions=REPORTED),
    )
    assert later.outcome.ready and later.events == []
    assert server.requests == ["INFO ORDERS"]


async def test_a_new_stream_counts_the_consumers_made_with_it_without_a_look() -> None:
    """The consumer passes that ended while the new stream's handler gathered them say how many
    they made: the first status adds those to the creation's count. Only when that cannot be
    told (None), or in a cluster, does the pass look."""
    cluster = {"name": "c1", "leader": "n1"}
    for added, made, in_cluster, looks in (
        (2, 2, False, []),
        (0, 0, False, []),
        (None, 2, False, ["INFO ORDERS"]),
        (2, 2, True, ["INFO ORDERS"]),
    ):
        server = FakeJetStream()
        server.cluster = cluster if in_cluster else None
        result = await stream_handlers.reconcile(
            STREAM_KIND,
            {"name": "ORDERS"},
            OWNER,
            as_api(server),
            history=history(FailureMemory()),
            created=consumers_made_meanwhile(server, made, added),
        )
        assert server.requests == ["CREATE ORDERS", *looks], (added, in_cluster)
        assert result.status["consumerCount"] == made, (added, in_cluster)


def consumers_made_meanwhile(
    server: FakeJetStream, made: int, answer: int | None
) -> Callable[[str, Mapping[str, Any]], Awaitable[int | None]]:
    """A stream's `created` hook during which consumer passes made `made` consumers on it, and
    which answers `answer` (None: look)."""

    async def created(name: str, reply: Mapping[str, Any]) -> int | None:
        server.consumer_counts[name] = made
        return answer

    return created


async def test_a_first_pass_whose_stream_is_there_looks_once_refused_and_plans_with_it() -> None:
    """Restored (the same resource under a new uid), another resource's, or absent after
    all: the refusal brings one look, and the pass goes on as one that looked first."""
    server = FakeJetStream()
    await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, Owner("ns", "orders", "old"), as_api(server)
    )
    server.requests.clear()
    restored = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, OWNER, as_api(server), history=history(FailureMemory())
    )
    assert restored.outcome.ready
    assert [event.reason for event in restored.events] == ["Reattached", "Updated"]
    assert server.requests == ["CREATE ORDERS", "INFO ORDERS", "UPDATE ORDERS"]
    server.requests.clear()
    other = await stream_handlers.reconcile(
        STREAM_KIND,
        {"name": "ORDERS"},
        Owner("ns", "other", "x"),
        as_api(server),
        history=history(FailureMemory()),
    )
    assert other.outcome.reason == "Conflict"
    assert server.requests == ["CREATE ORDERS", "INFO ORDERS"]
    server.requests.clear()
    server.refuse = "subjects overlap with an existing stream"
    refused = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "NEW"}, OWNER, as_api(server), history=history(FailureMemory())
    )
    assert refused.outcome.reason == "ServerRejected"
    assert "subjects overlap" in refused.outcome.message
    assert server.requests == ["CREATE NEW", "INFO NEW"]


async def test_a_first_pass_answered_with_its_own_older_stream_says_nothing_was_made() -> None:
    """The status of an earlier pass was lost: the server answers the identical create with
    the stream it holds, which is older than the answer, so no Created event."""
    server = FakeJetStream()
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(FailureMemory())
    )
    server.now = "2026-01-01T00:10:00Z"
    server.requests.clear()
    again = await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(FailureMemory())
    )
    assert again.outcome.ready and again.outcome.reason == "Synced" and again.events == []
    assert server.requests == ["CREATE ORDERS"]


async def test_a_first_consumer_pass_looks_at_its_stream_only() -> None:
    """The stream's consumer limits shape the create; the consumer is not looked for unless the
    server refuses the create because one is there, and one of its own is answered."""
    server = FakeJetStream()
    server.streams["ORDERS"] = {"name": "ORDERS"}
    spec = {"durableName": "reader", "streamName": "ORDERS"}
    first = await consumer_handlers.reconcile(
        spec, OWNER, as_api(server), stream_name="ORDERS", history=history(FailureMemory())
    )
    assert first.outcome.ready and [event.reason for event in first.events] == ["Created"]
    assert server.requests == ["INFO ORDERS", "CONSUMER.CREATE ORDERS reader"]
    server.requests.clear()
    server.now = "2026-01-01T00:10:00Z"
    again = await consumer_handlers.reconcile(
        spec, OWNER, as_api(server), stream_name="ORDERS", history=history(FailureMemory())
    )
    assert again.outcome.ready and again.events == []
    assert server.requests == ["INFO ORDERS", "CONSUMER.CREATE ORDERS reader"]
    server.requests.clear()
    theirs = await consumer_handlers.reconcile(
        spec,
        Owner("ns", "other", "x"),
        as_api(server),
        stream_name="ORDERS",
        history=history(FailureMemory()),
    )
    assert theirs.outcome.reason == "Conflict"
    assert server.requests == [
        "INFO ORDERS",
        "CONSUMER.CREATE ORDERS reader",
        "INFO ORDERS",
        "CONSUMER.INFO ORDERS reader",
    ]


async def test_a_renamed_stream_is_refused_and_deleting_it_deletes_the_stream_it_manages() -> None:
    """Where no admission policy refuses a new spec.name, the operator must: the new name would
    make a new stream and leave the old one, with its data, behind."""
    server = FakeJetStream()
    memory = FailureMemory()
    made = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, OWNER, as_api(server), history=history(memory)
    )
    assert made.outcome.ready
    shown = {"conditions": conditions_for(made.outcome, 1), **made.status}
    server.requests.clear()
    renamed = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS2"}, OWNER, as_api(server), history=history(memory, **shown)
    )
    assert (renamed.outcome.ready, renamed.outcome.stalled) == (False, True)
    assert renamed.outcome.reason == "ImmutableFieldChanged"
    assert "spec.name changed from 'ORDERS' to 'ORDERS2'" in renamed.outcome.message
    assert [event.reason for event in renamed.events] == ["ImmutableFieldChanged"]
    assert server.requests == [] and set(server.streams) == {"ORDERS"}
    back = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS"}, OWNER, as_api(server), history=history(memory, **shown)
    )
    assert back.outcome.ready
    deleted = await stream_handlers.finalize(
        STREAM_KIND, {"name": "ORDERS2"}, OWNER, as_api(server), status=shown
    )
    assert deleted.outcome.reason == "Deleted" and "ORDERS" in deleted.outcome.message
    assert server.streams == {}


async def test_a_renamed_bucket_or_consumer_is_refused_naming_its_field() -> None:
    server = FakeJetStream()
    bucket = await stream_handlers.reconcile(
        KEY_VALUE_KIND,
        {"bucket": "orders2"},
        OWNER,
        as_api(server),
        history=history(FailureMemory(), streamName="KV_orders"),
    )
    assert bucket.outcome.reason == "ImmutableFieldChanged"
    assert "spec.bucket changed from 'orders' to 'orders2'" in bucket.outcome.message
    server.streams["ORDERS"] = {"name": "ORDERS"}
    consumer = await consumer_handlers.reconcile(
        {"durableName": "reader2", "streamName": "ORDERS"},
        OWNER,
        as_api(server),
        stream_name="ORDERS",
        history=history(FailureMemory(), streamName="ORDERS", consumerName="reader"),
    )
    assert consumer.outcome.reason == "ImmutableFieldChanged"
    assert "spec.durableName changed from 'reader' to 'reader2'" in consumer.outcome.message
    assert server.requests == []


async def test_a_consumer_pointed_at_another_stream_is_refused_naming_both() -> None:
    """Where no admission policy refuses a new spec.streamName or streamRef, the operator
    must: a consumer would be made on the other stream and the first one left behind."""
    server = FakeJetStream()
    server.streams["ORDERS"] = {"name": "ORDERS"}
    server.streams["OTHER"] = {"name": "OTHER"}
    for field, spec in (
        ("streamName", {"durableName": "reader", "streamName": "OTHER"}),
        ("streamRef", {"durableName": "reader", "streamRef": "other"}),
    ):
        result = await consumer_handlers.reconcile(
            spec,
            OWNER,
            as_api(server),
            stream_name="OTHER",
            history=history(FailureMemory(), streamName="ORDERS", consumerName="reader"),
        )
        assert result.outcome.reason == "ImmutableFieldChanged"
        assert (
            f"spec.{field} now names stream 'OTHER', but this resource manages consumer "
            "'reader' of stream 'ORDERS'"
        ) in result.outcome.message
    assert server.requests == []


async def test_a_rejected_update_waits_its_backoff_whether_a_listing_or_an_info_shows_it() -> None:
    """An INFO shows the server's own `_nats.ver` and `_nats.level` in the metadata, a listing
    does not: going from one to the other is no change on the server, so a refused update is
    not sent again before its backoff ran out (tests/integration/
    test_transitions_without_policies.py saw one every half second)."""
    server = FakeJetStream()
    memory = FailureMemory(jitter=lambda: 1.0)
    spec = {"name": "ORDERS", "subjects": ["orders.>"]}
    await stream_handlers.reconcile(
        STREAM_KIND, spec, OWNER, as_api(server), history=history(memory)
    )
    stored = server.streams["ORDERS"]
    listed = server._info("ORDERS")
    stored["metadata"] = {**stored["metadata"], "_nats.ver": "2.12.8", "_nats.level": "3"}
    server.refuse = "stream configuration update can not change storage type"
    changed = {**spec, "description": "new"}
    shown = conditions_for(Outcome(True, "Synced", "stream ORDERS matches the spec"), 1)
    for known in (None, listed, None, listed):
        result = await stream_handlers.reconcile(
            STREAM_KIND,
            changed,
            OWNER,
            as_api(server),
            known_info=known,
            history=history(memory, conditions=shown),
        )
        assert result.outcome.reason == "ServerRejected"
    assert server.sent("UPDATE") == 1


async def test_a_moved_stream_or_consumer_is_refused_naming_both_connections() -> None:
    """Where no admission policy refuses a new spec.connectionRef, the operator must: the
    object would be made again on the other system and left behind on the first."""
    server = FakeJetStream()
    made = {"streamName": "ORDERS", "connectionRef": ""}
    stream = await stream_handlers.reconcile(
        STREAM_KIND,
        {"name": "ORDERS", "connectionRef": "other"},
        OWNER,
        as_api(server),
        history=history(FailureMemory(), **made),
    )
    assert (stream.outcome.reason, stream.outcome.stalled) == ("ImmutableFieldChanged", True)
    assert "spec.connectionRef changed from '' to 'other'" in stream.outcome.message
    assert "the operator's default connection" in stream.outcome.message
    assert "NatsConnection 'other'" in stream.outcome.message
    consumer = await consumer_handlers.reconcile(
        {"durableName": "reader", "streamName": "ORDERS"},
        OWNER,
        as_api(server),
        stream_name="ORDERS",
        history=history(
            FailureMemory(), streamName="ORDERS", consumerName="reader", connectionRef="east"
        ),
    )
    assert consumer.outcome.reason == "ImmutableFieldChanged"
    assert "from 'east' to ''" in consumer.outcome.message
    assert server.requests == []
    # A read-only operator made nothing, so it may look wherever the spec points.
    looked = await stream_handlers.reconcile(
        STREAM_KIND,
        {"name": "ORDERS", "connectionRef": "other"},
        OWNER,
        as_api(server),
        read_only=True,
        history=history(FailureMemory(), **made),
    )
    assert looked.outcome.reason == "ReadOnly", looked.outcome


async def test_status_without_a_recorded_connection_refuses_no_move() -> None:
    """Status written before the connection was recorded says nothing of where the object
    lives; so does a status whose pass never reached an object."""
    server = FakeJetStream()
    for shown in ({"streamName": "ORDERS"}, {"connectionRef": "east"}):
        result = await stream_handlers.reconcile(
            STREAM_KIND,
            {"name": "ORDERS", "connectionRef": "west"},
            OWNER,
            as_api(server),
            history=history(FailureMemory(), **shown),
        )
        assert result.outcome.ready, shown


def test_the_connection_is_recorded_only_beside_a_write_showing_a_managed_object() -> None:
    spec = {"name": "ORDERS", "connectionRef": "east"}
    first = {"streamName": "ORDERS", "messages": 0}
    assert connection_record(spec, {}, first) == {"connectionRef": "east"}
    assert connection_record({"name": "ORDERS"}, {}, first) == {"connectionRef": ""}
    assert connection_record(spec, {"streamName": "ORDERS"}, {}) == {}  # no write of its own
    assert connection_record(spec, {}, {"conditions": []}) == {}  # nothing made yet
    assert connection_record(spec, {"connectionRef": "west"}, first) == {}  # never rewritten
    refused = {"streamName": "ORDERS", "connectionRef": "west"}
    assert managed_connection(spec, refused) == {**spec, "connectionRef": "west"}
    assert managed_connection(spec, {**refused, "connectionRef": ""})["connectionRef"] is None
    assert managed_connection(spec, {"streamName": "ORDERS"}) is spec


async def test_a_stream_that_vanished_holding_data_comes_back_with_a_warning() -> None:
    server = FakeJetStream()
    memory = FailureMemory()
    shown = {"streamName": "ORDERS", "messages": 12, "firstSequence": 1, "lastSequence": 12}
    result = await stream_handlers.reconcile(
        STREAM_KIND,
        {"name": "ORDERS"},
        OWNER,
        as_api(server),
        drift=True,
        history=history(memory, **shown),
    )
    warnings = [event for event in result.events if event.type == "Warning"]
    assert [event.reason for event in warnings] == ["RecreatedAfterLoss"]
    assert "12 messages" in warnings[0].message and "1..12" in warnings[0].message
    quiet = await stream_handlers.reconcile(
        STREAM_KIND, {"name": "ORDERS2"}, OWNER, as_api(server), drift=True, history=history(memory)
    )
    assert [event.reason for event in quiet.events] == ["Recreated"]


def watcher(
    streams: ResourceRegistry,
    writer: RecordingWriter,
    memory: FailureMemory,
    consumers: ResourceRegistry | None = None,
) -> DriftWatcher:
    return DriftWatcher(
        {STREAM_KIND: streams},
        consumers if consumers is not None else ResourceRegistry(),
        pool=None,  # type: ignore[arg-type]  # resync() is called with the JetStream directly
        target=ConnectionTarget(("nats://127.0.0.1:4222",)),
        writer=writer,  # type: ignore[arg-type]
        events=writer,
        settings=WatchSettings(resync_interval=30),
        failures=memory,
        budget=StatusBudget(),
    )


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


async def test_the_directory_explains_a_missing_or_required_connection() -> None:
    default = ConnectionTarget(("nats://127.0.0.1:4222",))
    directory = ConnectionDirectory(default, ResourceRegistry(), None, None)  # type: ignore[arg-type]
    assert await directory.target_for("ns", {}) is default
    with pytest.raises(ConnectionNotReady) as missing:
        await directory.target_for("ns", {"connectionRef": "tenant"})
    assert missing.value.reason == "ConnectionNotFound"
    strict = ConnectionDirectory(default, ResourceRegistry(), None, None, require_reference=True)  # type: ignore[arg-type]
    with pytest.raises(ConnectionNotReady) as required:
        await strict.target_for("ns", {})
    assert required.value.reason == "ConnectionRequired"
    remembered = ConnectionTarget(("nats://127.0.0.1:4223",))
    assert directory.remember(("ns", "tenant"), remembered)
    assert not directory.remember(("ns", "tenant"), remembered)
    assert await directory.target_for("ns", {"connectionRef": "tenant"}) is remembered
    assert directory.known() == {None: default, ("ns", "tenant"): remembered}


async def test_a_reading_directory_follows_the_namespace_of_a_connection_it_does_not_know() -> None:
    """Where kopf does not watch NatsConnections, a miss asks to follow the namespace first;
    a namespace whose listing failed is a transient trouble, not a missing connection."""
    default = ConnectionTarget(("nats://127.0.0.1:4222",))
    followed: list[str] = []

    async def follow(namespace: str) -> bool:
        followed.append(namespace)
        return namespace != "unreadable"

    directory = ConnectionDirectory(default, ResourceRegistry(), None, None, follow=follow)  # type: ignore[arg-type]
    with pytest.raises(ConnectionNotReady) as missing:
        await directory.target_for("ns", {"connectionRef": "tenant"})
    assert missing.value.reason == "ConnectionNotFound"
    with pytest.raises(ConnectionNotReady) as unread:
        await directory.target_for("unreadable", {"connectionRef": "tenant"})
    assert unread.value.reason == "ConnectionNotReady"
    assert "could not be read yet" in str(unread.value)
    remembered = ConnectionTarget(("nats://127.0.0.1:4223",))
    directory.remember(("ns", "tenant"), remembered)
    assert await directory.target_for("ns", {"connectionRef": "tenant"}) is remembered
    assert followed == ["ns", "unreadable"]  # a known connection asks for nothing


def test_the_registry_keeps_only_what_drift_repair_reads() -> None:
    registry = ResourceRegistry()
    body = {
        "apiVersion": "jetstream-operator.io/v1alpha1",
        "kind": "Stream",
        "metadata": {
            "namespace": "ns",
            "name": "orders",
            "uid": "u1",
            "generation": 3,
            "managedFields": [{"manager": "kubectl"}] * 20,
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...}" * 100,
                "kopf.jetstream-operator.io/last-handled": "{}",
                "jetstream-operator.io/paused": "true",
            },
        },
        "spec": {"name": "ORDERS"},
        "status": {"messages": 4, "lastHandledConfiguration": "{...}" * 100},
    }
    registry.observe("ADDED", body)
    kept = registry.named("ns", "orders")
    assert kept is not None
    assert kept.body == {
        "metadata": {
            "namespace": "ns",
            "name": "orders",
            "uid": "u1",
            "generation": 3,
            "annotations": {"jetstream-operator.io/paused": "true"},
        },
        "spec": {"name": "ORDERS"},
        "status": {"messages": 4},
    }
    assert kept.annotation("jetstream-operator.io/paused") == "true" and kept.generation == 3


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


async def test_a_stream_ref_of_another_deployment_says_so() -> None:
    """With a label selector, the Stream a Consumer names may be another deployment's: the
    message says so when the read finds it, and stays as it was when it finds nothing."""
    spec = {"durableName": "worker", "streamRef": "orders"}
    jetstream = as_api(FakeJetStream())
    asked: list[str] = []

    def explaining(answer: str | None) -> Callable[[str], Awaitable[str | None]]:
        async def unresolved_ref(stream: str) -> str | None:
            asked.append(stream)
            return answer

        return unresolved_ref

    plain = await consumer_handlers.reconcile(spec, OWNER, jetstream, stream_name=None)
    missing = await consumer_handlers.reconcile(
        spec, OWNER, jetstream, stream_name=None, unresolved_ref=explaining(None)
    )
    elsewhere = consumer_handlers.served_elsewhere("orders", {"shard": "b"}, "shard=a")
    sharded = await consumer_handlers.reconcile(
        spec, OWNER, jetstream, stream_name=None, unresolved_ref=explaining(elsewhere)
    )
    assert asked == ["orders", "orders"]
    assert plain.outcome.reason == missing.outcome.reason == sharded.outcome.reason
    assert plain.outcome.reason == "StreamNotFound"
    assert missing.outcome.message == plain.outcome.message
    assert sharded.outcome.message == elsewhere
    assert elsewhere is not None and "selector 'shard=a'" in elsewhere
    assert "give the consumer the labels of its stream" in elsewhere.lower()


def test_a_stream_the_selector_takes_is_not_called_another_deployments() -> None:
    """It exists and matches: its watch event is on its way, and the plain message holds."""
    assert consumer_handlers.served_elsewhere("orders", {"shard": "a"}, "shard in (a,c)") is None
    assert consumer_handlers.served_elsewhere("orders", {}, "shard in (a,c)") is not None
