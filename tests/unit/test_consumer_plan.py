"""The consumer create/update/recreate decision, ownership, and live state reported as status.

Planning compares a spec with server answers shaped as nats-server 2.12.8 gives them (see
consumer_figures.py); how specs map to server config is in test_consumer_config.py.
"""

from typing import Any

import pytest

from jetstream_operator.api.consumer import ConsumerSpec
from jetstream_operator.handlers.consumer import planning_view
from jetstream_operator.reconcile.consumer_config import (
    desired_consumer_config,
)
from jetstream_operator.reconcile.consumer_plan import (
    CreateConsumer,
    ImmutableChangeRefused,
    InSync,
    OwnedElsewhere,
    PauseConsumer,
    RecreateConsumer,
    StreamMissing,
    UpdateConsumer,
    UpdatesPrevented,
    consumer_live_state,
    may_delete,
    plan_consumer,
    release_request,
)
from jetstream_operator.reconcile.consumer_reset import positioned_config
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, RETAINED_METADATA_KEY, Owner

from .consumer_figures import (
    OWNER,
    RECORDED_PULL,
    RECORDED_PUSH,
    SERVER_METADATA,
    desired,
    info,
    server_view,
    spec,
)

# -- plans ---------------------------------------------------------------------------------------


def current_for(**fields: Any) -> dict[str, Any]:
    return info(server_view(desired(**fields)))


def test_plan_waits_for_a_missing_stream() -> None:
    action = plan_consumer(spec(), OWNER, False, None)
    assert isinstance(action, StreamMissing)
    assert action.reason == "StreamNotFound"
    assert "ORDERS" in action.message()


def test_plan_waits_for_an_unresolved_stream_ref() -> None:
    ref = ConsumerSpec.model_validate({"durableName": "worker", "streamRef": "orders"})
    action = plan_consumer(ref, OWNER, False, None)
    assert isinstance(action, StreamMissing)
    assert action.from_ref and action.reason == "StreamNotFound"
    assert "Stream resource 'orders'" in action.message()
    created = plan_consumer(ref, OWNER, True, None, stream_name="ORDERS")
    assert isinstance(created, CreateConsumer) and created.stream == "ORDERS"


def test_plan_creates_a_missing_consumer() -> None:
    action = plan_consumer(spec(), OWNER, True, None)
    assert isinstance(action, CreateConsumer)
    assert action.stream == "ORDERS"
    assert action.config == desired()


def test_plan_creates_with_stream_limits() -> None:
    action = plan_consumer(spec(), OWNER, True, None, stream_limits={"max_ack_pending": 10})
    assert isinstance(action, CreateConsumer)
    assert action.config["max_ack_pending"] == 10


def test_planning_view_keeps_the_stream_limits_and_nothing_else() -> None:
    config: dict[str, Any] = {"name": "ORDERS", "subjects": ["orders.>"], "max_msgs": -1}
    reply = {
        "config": config,
        "state": {"messages": 0, "consumer_count": 0},
        "created": "2026-11-27T04:00:00Z",
    }
    assert planning_view(reply) == {"config": {}}
    config["consumer_limits"] = {"max_ack_pending": 10}
    assert planning_view(reply) == {"config": {"consumer_limits": {"max_ack_pending": 10}}}


@pytest.mark.parametrize(
    ("change", "summary"),
    [
        ({"description": "new"}, "description"),
        ({"ackWait": "2m"}, "ack_wait"),
        ({"maxDeliver": 10, "backoff": ["1s", "5s"]}, "ack_wait, backoff, max_deliver"),
        ({"filterSubject": "orders.b"}, "filter_subject"),
        ({"sampleFreq": "10%", "maxAckPending": 5}, "max_ack_pending, sample_freq"),
        ({"headersOnly": True, "inactiveThreshold": "1h"}, "headers_only, inactive_threshold"),
        ({"maxRequestBatch": 5, "maxRequestExpires": "1s"}, "max_batch, max_expires"),
        ({"replicas": 1, "metadata": {"a": "b"}}, "metadata, num_replicas"),
        (
            {"priorityPolicy": "pinned_client", "priorityGroups": ["g"]},
            "priority_groups, priority_policy, priority_timeout",
        ),
    ],
)
def test_mutable_changes_update_in_place(change: dict[str, Any], summary: str) -> None:
    action = plan_consumer(spec(**change), OWNER, True, current_for())
    assert isinstance(action, UpdateConsumer)
    assert action.summary() == summary
    assert action.config == desired(**change)


def test_deliver_subject_and_group_of_a_push_consumer_update_in_place() -> None:
    before = {"deliverSubject": "deliver.a"}
    after = {"deliverSubject": "deliver.b", "deliverGroup": "g", "rateLimitBps": 100}
    action = plan_consumer(spec(**after), OWNER, True, current_for(**before))
    assert isinstance(action, UpdateConsumer)
    assert action.summary() == "deliver_group, deliver_subject, rate_limit_bps"


IMMUTABLE_CASES = [
    ({}, {"deliverPolicy": "new"}, ["deliverPolicy"]),
    (
        {"deliverPolicy": "byStartSequence", "optStartSeq": 5},
        {"deliverPolicy": "byStartSequence", "optStartSeq": 6},
        ["optStartSeq"],
    ),
    (
        {"deliverPolicy": "byStartTime", "optStartTime": "2024-01-01T00:00:00Z"},
        {"deliverPolicy": "byStartTime", "optStartTime": "2024-02-01T00:00:00Z"},
        ["optStartTime"],
    ),
    ({}, {"ackPolicy": "all"}, ["ackPolicy"]),
    ({}, {"replayPolicy": "original"}, ["replayPolicy"]),
    ({}, {"maxWaiting": 10}, ["maxWaiting"]),
    ({}, {"memStorage": True}, ["memStorage"]),
    (
        {"deliverSubject": "d", "heartbeatInterval": "5s"},
        {"deliverSubject": "d", "heartbeatInterval": "5s", "flowControl": True},
        ["flowControl"],
    ),
    (
        {"deliverSubject": "d"},
        {"deliverSubject": "d", "heartbeatInterval": "5s"},
        ["heartbeatInterval"],
    ),
    ({}, {"deliverSubject": "d"}, ["deliverSubject (push <-> pull)"]),
    ({"deliverSubject": "d"}, {}, ["deliverSubject (push <-> pull)"]),
    (
        {},
        {"deliverPolicy": "new", "ackPolicy": "none", "description": "x"},
        ["deliverPolicy", "ackPolicy"],
    ),
]


@pytest.mark.parametrize(("before", "after", "fields"), IMMUTABLE_CASES)
def test_immutable_change_is_refused_by_default(
    before: dict[str, Any], after: dict[str, Any], fields: list[str]
) -> None:
    action = plan_consumer(spec(**after), OWNER, True, current_for(**before))
    assert isinstance(action, ImmutableChangeRefused)
    assert action.fields == fields
    assert action.reason == "ImmutableFieldChanged"
    message = action.message()
    assert all(f"spec.{field}" in message for field in fields)
    assert "recreateOnImmutableChange: true" in message
    assert "just after its ack floor" in message


@pytest.mark.parametrize(("before", "after", "fields"), IMMUTABLE_CASES)
def test_immutable_change_recreates_when_opted_in(
    before: dict[str, Any], after: dict[str, Any], fields: list[str]
) -> None:
    wanted = spec(**after, recreateOnImmutableChange=True)
    current = current_for(**before)
    current["ack_floor"] = {"consumer_seq": 40, "stream_seq": 41}
    action = plan_consumer(wanted, OWNER, True, current)
    assert isinstance(action, RecreateConsumer)
    assert action.fields == fields
    assert action.stream == "ORDERS"
    as_specified = desired_consumer_config(wanted, OWNER, "ORDERS")
    if {"deliverPolicy", "optStartSeq", "optStartTime"} & set(fields):
        # A new start is the change asked for: it starts where the spec now says.
        assert action.kept_from is None
        assert action.config == as_specified
        assert "where the spec's new start fields say" in action.message()
    else:
        # Anything else keeps its position: just after the ack floor, nothing skipped.
        assert action.kept_from == 42
        assert action.config == positioned_config(as_specified, 42)
        assert "stream sequence 42, just after its ack floor" in action.message()


def test_a_kept_position_is_in_sync_until_the_spec_moves_its_start() -> None:
    """After a recreate that kept the position, the consumer (by_start_sequence 42 on the
    server) matches the spec's deliverPolicy all; the spec's next start change is a change."""
    wanted = spec(maxWaiting=10, recreateOnImmutableChange=True)
    recreated = info(server_view(positioned_config(desired(maxWaiting=10), 42)))
    assert recreated["config"]["deliver_policy"] == "by_start_sequence"
    assert isinstance(plan_consumer(wanted, OWNER, True, recreated), InSync)
    updated = plan_consumer(spec(maxWaiting=10, description="x"), OWNER, True, recreated)
    assert isinstance(updated, UpdateConsumer)
    assert updated.summary() == "description"
    assert updated.config["opt_start_seq"] == 42  # an update must repeat the immutable start
    moved = plan_consumer(spec(maxWaiting=10, deliverPolicy="new"), OWNER, True, recreated)
    assert isinstance(moved, ImmutableChangeRefused)
    assert moved.fields == ["deliverPolicy", "optStartSeq"]


def test_opting_in_changes_nothing_while_immutable_fields_are_unchanged() -> None:
    action = plan_consumer(
        spec(recreateOnImmutableChange=True, maxDeliver=3), OWNER, True, current_for()
    )
    assert isinstance(action, UpdateConsumer)


def test_pause_is_its_own_step_after_other_updates() -> None:
    wanted = spec(description="x", pauseUntil="2099-01-01T00:00:00Z")
    first = plan_consumer(wanted, OWNER, True, current_for())
    assert isinstance(first, UpdateConsumer)
    assert first.summary() == "description"
    assert first.config["pause_until"] is None
    second = plan_consumer(wanted, OWNER, True, current_for(description="x"))
    assert isinstance(second, PauseConsumer)
    assert second.subject() == "CONSUMER.PAUSE.ORDERS.worker"
    assert second.request() == {"pause_until": "2099-01-01T00:00:00Z"}


def test_removing_pause_until_resumes() -> None:
    paused = current_for(pauseUntil="2099-01-01T00:00:00Z")
    action = plan_consumer(spec(), OWNER, True, paused)
    assert isinstance(action, PauseConsumer)
    assert action.request() == {}


def test_plan_leaves_a_foreign_consumer_alone() -> None:
    foreign = info({**RECORDED_PULL, "metadata": SERVER_METADATA})
    action = plan_consumer(spec(), OWNER, True, foreign)
    assert isinstance(action, OwnedElsewhere)
    assert "not created by this operator" in action.message()
    assert "spec.adoption: IfUnowned" in action.message()


def test_plan_reports_the_other_owner() -> None:
    """Within its namespace; another namespace's owner is not named (test_tenant_leaks)."""
    other = Owner(OWNER.namespace, "worker-old", "uid-2")
    theirs = info(server_view(desired_consumer_config(spec(), other, "ORDERS")))
    action = plan_consumer(spec(), OWNER, True, theirs)
    assert isinstance(action, OwnedElsewhere)
    assert f"{OWNER.namespace}/worker-old" in action.message()
    assert isinstance(
        plan_consumer(spec(adoption="IfUnowned"), OWNER, True, theirs), OwnedElsewhere
    )


def test_unowned_consumer_is_adopted_only_when_asked() -> None:
    foreign = info({**RECORDED_PULL, "metadata": SERVER_METADATA})
    action = plan_consumer(spec(adoption="IfUnowned"), OWNER, True, foreign)
    assert isinstance(action, UpdateConsumer)
    assert action.summary() == "metadata"
    assert action.config["metadata"][OWNER_METADATA_KEY] == OWNER.encode()


def test_prevent_update_reports_instead_of_updating_or_recreating() -> None:
    changed = spec(maxDeliver=5, preventUpdate=True)
    action = plan_consumer(changed, OWNER, True, current_for())
    assert isinstance(action, UpdatesPrevented)
    assert [d.field for d in action.differences] == ["max_deliver"]
    immutable = spec(ackPolicy="all", preventUpdate=True, recreateOnImmutableChange=True)
    assert isinstance(plan_consumer(immutable, OWNER, True, current_for()), UpdatesPrevented)


def test_only_the_owning_resource_may_delete() -> None:
    assert may_delete(OWNER, current_for())
    theirs = info(server_view(desired_consumer_config(spec(), Owner("x", "y", "z"), "ORDERS")))
    assert not may_delete(OWNER, theirs)
    assert not may_delete(OWNER, None)
    assert not may_delete(OWNER, info({**RECORDED_PULL, "metadata": SERVER_METADATA}))


def test_release_turns_our_mark_into_a_record_of_who_retained_it() -> None:
    current = current_for(metadata={"team": "a"})
    released = release_request(OWNER, current)
    assert released is not None
    assert released["metadata"] == {"team": "a", RETAINED_METADATA_KEY: OWNER.encode()}
    again = Owner(OWNER.namespace, OWNER.name, "uid-new")
    reattached = plan_consumer(spec(metadata={"team": "a"}), again, True, info(released))
    assert not isinstance(reattached, OwnedElsewhere), reattached
    other = plan_consumer(spec(), Owner(OWNER.namespace, "x", "u"), True, info(released))
    assert isinstance(other, OwnedElsewhere) and other.retained and other.reason == "Conflict"
    assert release_request(Owner("x", "y", "z"), current) is None


# -- live state ----------------------------------------------------------------------------------


def test_live_state_maps_consumer_info_to_status() -> None:
    recorded = {
        "stream_name": "ORDERS",
        "name": "worker",
        "config": {**RECORDED_PUSH, "metadata": SERVER_METADATA},
        "delivered": {"consumer_seq": 12, "stream_seq": 40, "last_active": "2026-01-01T00:00:00Z"},
        "ack_floor": {"consumer_seq": 10, "stream_seq": 38},
        "num_ack_pending": 2,
        "num_redelivered": 1,
        "num_waiting": 0,
        "num_pending": 7,
        "cluster": {"name": "east", "leader": "nats-1"},
        "push_bound": True,
        "paused": True,
    }
    assert consumer_live_state(recorded) == {
        "streamName": "ORDERS",
        "consumerName": "worker",
        "numPending": 7,
        "numAckPending": 2,
        "numRedelivered": 1,
        "numWaiting": 0,
        "deliveredStreamSeq": 40,
        "deliveredConsumerSeq": 12,
        "ackFloorStreamSeq": 38,
        "ackFloorConsumerSeq": 10,
        "paused": True,
        "leader": "nats-1",
        "pushBound": True,
    }


def test_live_state_of_a_pull_consumer_on_a_single_server() -> None:
    recorded = {
        "stream_name": "ORDERS",
        "name": "worker",
        "config": {**RECORDED_PULL, "metadata": SERVER_METADATA},
        "delivered": {"consumer_seq": 0, "stream_seq": 0},
        "ack_floor": {"consumer_seq": 0, "stream_seq": 0},
        "num_ack_pending": 0,
        "num_redelivered": 0,
        "num_waiting": 0,
        "num_pending": 0,
    }
    state = consumer_live_state(recorded)
    assert state["leader"] is None
    assert state["pushBound"] is None
    assert state["paused"] is False
