"""The stream, bucket and consumer handlers against the in-memory JetStream of test_handler_glue.

These check the glue of a single pass (history, backoff, events, status writes): what a first
pass looks at before creating, how a rejected update waits its backoff, and that renames, moves
and consumers pointed at another stream are refused naming what changed. That the real server
behaves this way is tested against nats-server in tests/integration.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from jetstream_operator.handlers import consumer as consumer_handlers
from jetstream_operator.handlers import stream as stream_handlers
from jetstream_operator.handlers.failures import FailureMemory, History
from jetstream_operator.reconcile.backed import KEY_VALUE_KIND, STREAM_KIND
from jetstream_operator.reconcile.conditions import Outcome, conditions_for
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, Owner
from jetstream_operator.reconcile.renames import connection_record, managed_connection

from .test_handler_glue import OWNER, FakeJetStream, as_api


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
    spec = {"name": "ORDERS", "subjects": ["orders.>"], "replicas": 2}  # the leader and n2
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
