"""Consumer spec -> server config, drift detection and the create/update/recreate decision.

The server answers below were recorded from nats-server 2.12.8, which leaves out false, "", 0,
empty lists and priority_policy "none", and adds `_nats.*` metadata.
"""

from typing import Any

import pytest
from pydantic import ValidationError

from jetstream_operator.api.consumer import ConsumerSpec
from jetstream_operator.api.crdgen import validated_spec_schema
from jetstream_operator.api.kinds import CONSUMER
from jetstream_operator.handlers.consumer import planning_view
from jetstream_operator.reconcile.consumer_config import (
    DEFAULT_ACK_WAIT_NS,
    consumer_differences,
    consumer_request,
    desired_consumer_config,
    immutable_changes,
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
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, Owner

OWNER = Owner("default", "orders-worker", "uid-1")
SERVER_METADATA = {"_nats.level": "3", "_nats.req.level": "0", "_nats.ver": "2.12.8"}
SECOND = 1_000_000_000


def spec(**fields: Any) -> ConsumerSpec:
    return ConsumerSpec.model_validate({"durableName": "worker", "streamName": "ORDERS", **fields})


def desired(**fields: Any) -> dict[str, Any]:
    return desired_consumer_config(spec(**fields), OWNER, "ORDERS")


def server_view(config: dict[str, Any]) -> dict[str, Any]:
    """What the server answers for a config it accepted: zero values left out, metadata added."""
    shown = {
        key: value
        for key, value in config.items()
        if value not in (None, False, "", [], {}) and (value != 0 or key == "num_replicas")
    }
    if shown.get("priority_policy") == "none":
        del shown["priority_policy"]
    shown["metadata"] = {**config["metadata"], **SERVER_METADATA}
    return shown


def info(config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"stream_name": "ORDERS", "name": config["name"], "config": config, **extra}


def owned(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded server answer, as if this resource had created it."""
    metadata = {**SERVER_METADATA, OWNER_METADATA_KEY: OWNER.encode()}
    return {**recorded, "metadata": metadata}


# -- spec -> server config -----------------------------------------------------------------------


def test_nack_style_manifest_maps_to_server_fields() -> None:
    config = desired_consumer_config(
        ConsumerSpec.model_validate(
            {
                "durableName": "worker",
                "streamName": "ORDERS",
                "description": "processes orders",
                "deliverPolicy": "byStartSequence",
                "optStartSeq": 42,
                "ackPolicy": "all",
                "ackWait": "1m",
                "maxDeliver": 5,
                "filterSubject": "orders.received",
                "replayPolicy": "original",
                "sampleFreq": "50%",
                "maxAckPending": 20,
                "maxWaiting": 64,
                "headersOnly": True,
                "maxRequestBatch": 100,
                "maxRequestExpires": "30s",
                "maxRequestMaxBytes": 1024,
                "inactiveThreshold": "24h",
                "replicas": 3,
                "memStorage": True,
                "metadata": {"team": "a"},
            }
        ),
        OWNER,
        "ORDERS",
    )
    assert config["durable_name"] == config["name"] == "worker"
    assert config["description"] == "processes orders"
    assert config["deliver_policy"] == "by_start_sequence"
    assert config["opt_start_seq"] == 42
    assert config["ack_policy"] == "all"
    assert config["ack_wait"] == 60 * SECOND
    assert config["max_deliver"] == 5
    assert config["filter_subject"] == "orders.received"
    assert config["replay_policy"] == "original"
    assert config["sample_freq"] == "50%"
    assert config["max_ack_pending"] == 20
    assert config["max_waiting"] == 64
    assert config["headers_only"] is True
    assert config["max_batch"] == 100
    assert config["max_expires"] == 30 * SECOND
    assert config["max_bytes"] == 1024
    assert config["inactive_threshold"] == 24 * 3600 * SECOND
    assert config["num_replicas"] == 3
    assert config["mem_storage"] is True
    assert config["metadata"] == {"team": "a", OWNER_METADATA_KEY: "default/orders-worker/uid-1"}


def test_push_fields_map_to_server_fields() -> None:
    config = desired(
        deliverSubject="deliver.orders",
        deliverGroup="workers",
        flowControl=True,
        heartbeatInterval="5s",
        rateLimitBps=8000,
    )
    assert config["deliver_subject"] == "deliver.orders"
    assert config["deliver_group"] == "workers"
    assert config["flow_control"] is True
    assert config["idle_heartbeat"] == 5 * SECOND
    assert config["rate_limit_bps"] == 8000
    assert config["max_waiting"] == 0


@pytest.mark.parametrize(
    ("ours", "server"),
    [
        ("all", "all"),
        ("last", "last"),
        ("new", "new"),
        ("lastPerSubject", "last_per_subject"),
    ],
)
def test_deliver_policy_uses_the_server_spelling(ours: str, server: str) -> None:
    config = desired(deliverPolicy=ours, filterSubject="orders.>")
    assert config["deliver_policy"] == server


def test_start_time_is_sent_in_utc_like_the_server_renders_it() -> None:
    config = desired(deliverPolicy="byStartTime", optStartTime="2026-01-01T01:00:00.5+01:00")
    assert config["deliver_policy"] == "by_start_time"
    assert config["opt_start_time"] == "2026-01-01T00:00:00.5Z"


def test_ack_wait_defaults_to_the_servers_30s_not_nacks_1ns() -> None:
    assert desired()["ack_wait"] == DEFAULT_ACK_WAIT_NS == 30 * SECOND
    assert desired(ackPolicy="all")["ack_wait"] == 30 * SECOND


def test_ack_none_has_no_ack_wait_nor_ack_pending_limit() -> None:
    config = desired(ackPolicy="none")
    assert config["ack_wait"] == 0
    assert config["max_ack_pending"] == 0


def test_backoff_sets_ack_wait_to_its_first_entry_as_the_server_does() -> None:
    config = desired(backoff=["2s", "10s"], maxDeliver=3)
    assert config["backoff"] == [2 * SECOND, 10 * SECOND]
    assert config["ack_wait"] == 2 * SECOND
    assert desired(backoff=["2s"], ackWait="1m")["ack_wait"] == 2 * SECOND


def test_unset_fields_are_stated_as_the_server_defaults() -> None:
    config = desired()
    assert config["ack_policy"] == "explicit"
    assert config["max_deliver"] == -1
    assert config["max_ack_pending"] == 1000
    assert config["max_waiting"] == 512
    assert config["num_replicas"] == 0
    assert config["priority_policy"] == "none"
    assert config["priority_timeout"] == 0
    assert desired(maxDeliver=0)["max_deliver"] == -1


def test_stream_consumer_limits_supply_the_defaults() -> None:
    limits = {"max_ack_pending": 200, "inactive_threshold": 3600 * SECOND}
    config = desired_consumer_config(spec(), OWNER, "ORDERS", stream_limits=limits)
    assert config["max_ack_pending"] == 200
    assert config["inactive_threshold"] == 3600 * SECOND
    own = desired_consumer_config(
        spec(maxAckPending=50, inactiveThreshold="10m"), OWNER, "ORDERS", stream_limits=limits
    )
    assert own["max_ack_pending"] == 50
    assert own["inactive_threshold"] == 600 * SECOND


def test_pinned_client_gets_the_servers_two_minute_ttl() -> None:
    pinned = desired(priorityPolicy="pinned_client", priorityGroups=["jobs"])
    assert pinned["priority_timeout"] == 120 * SECOND
    assert pinned["priority_groups"] == ["jobs"]
    custom = desired(priorityPolicy="pinned_client", priorityGroups=["jobs"], pinnedTtl="1m")
    assert custom["priority_timeout"] == 60 * SECOND
    overflow = desired(priorityPolicy="overflow", priorityGroups=["jobs"])
    assert overflow["priority_timeout"] == 0


def test_filter_subjects_and_pause_map_to_server_fields() -> None:
    config = desired(filterSubjects=["orders.a", "orders.b"], pauseUntil="2099-01-01T00:00:00Z")
    assert config["filter_subjects"] == ["orders.a", "orders.b"]
    assert config["filter_subject"] == ""
    assert config["pause_until"] == "2099-01-01T00:00:00Z"


def test_stream_ref_consumers_take_the_resolved_stream_name() -> None:
    ref = ConsumerSpec.model_validate({"durableName": "worker", "streamRef": "orders"})
    assert desired_consumer_config(ref, OWNER, "ORDERS")["name"] == "worker"
    with pytest.raises(ValueError, match="not 'OTHER'"):
        desired_consumer_config(spec(), OWNER, "OTHER")


def test_request_body_carries_the_action() -> None:
    config = desired()
    assert consumer_request("ORDERS", config, "create") == {
        "stream_name": "ORDERS",
        "config": config,
        "action": "create",
    }


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.b", "a*", "a>", "has space", "a/b", "a\\b", ""])
def test_consumer_names_the_server_would_refuse_are_invalid(name: str) -> None:
    with pytest.raises(ValidationError):
        spec(durableName=name)


@pytest.mark.parametrize(
    "fields",
    [
        {"maxMessages": 5},
        {"sampleFreq": "150%"},
        {"sampleFreq": "half"},
        {"deliverSubject": "deliver.*"},
        {"priorityGroups": [f"g{n}" for n in range(17)]},
        {"priorityGroups": ["has space"]},
        {"ackWait": "1 second"},
        {"ackPolicy": "manual"},
        {"deliverPolicy": "by_start_sequence"},
        {"optStartSeq": 0},
        {"optStartTime": "2026-01-01T00:00:00"},
        {"replicas": 6},
        {"streamRef": "Not_A_Name"},
    ],
)
def test_invalid_fields_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        spec(**fields)


def test_retention_defaults_to_delete_and_honours_nack_prevent_delete() -> None:
    assert not spec().retains_consumer()
    assert spec(preventDelete=True).retains_consumer()
    assert spec(deletionPolicy="Retain").retains_consumer()
    assert not spec(deletionPolicy="Delete", preventDelete=True).retains_consumer()


def _spec_schema() -> dict[str, Any]:
    """The spec with its rules, as they go into the Consumer's admission policy."""
    return validated_spec_schema(CONSUMER)


def _crd_rules() -> list[dict[str, str]]:
    rules: list[dict[str, str]] = _spec_schema()["x-kubernetes-validations"]
    return rules


@pytest.mark.parametrize(
    "field",
    [
        "deliverPolicy",
        "optStartSeq",
        "optStartTime",
        "ackPolicy",
        "replayPolicy",
        "maxWaiting",
        "flowControl",
        "heartbeatInterval",
        "memStorage",
    ],
)
def test_immutable_fields_are_refused_at_admission_unless_opted_in(field: str) -> None:
    rule = next(r for r in _crd_rules() if f"oldSelf.{field}" in r["rule"])
    assert "self.recreateOnImmutableChange" in rule["rule"]
    assert "recreateOnImmutableChange: true" in rule["message"]
    assert f"', spec.{field}'" in rule["messageExpression"]  # the failure names the field


def test_identity_is_immutable_at_admission_without_an_opt_in() -> None:
    # durableName is required, so its rule sits on the field itself (api/celcost.py).
    identity = _spec_schema()["properties"]["durableName"]["x-kubernetes-validations"]
    assert [r["rule"] for r in identity] == ["self == oldSelf"]
    identity += [r for r in _crd_rules() if "oldSelf.streamName" in r["rule"]]
    assert len(identity) == 2
    assert all("recreateOnImmutableChange" not in r["rule"] for r in identity)


# -- drift ---------------------------------------------------------------------------------------

RECORDED_PULL = {
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "deliver_policy": "all",
    "durable_name": "worker",
    "max_ack_pending": 1000,
    "max_deliver": -1,
    "max_waiting": 512,
    "name": "worker",
    "num_replicas": 0,
    "replay_policy": "instant",
}
RECORDED_ACK_NONE = {
    "ack_policy": "none",
    "deliver_policy": "all",
    "durable_name": "worker",
    "max_deliver": -1,
    "max_waiting": 512,
    "name": "worker",
    "num_replicas": 0,
    "replay_policy": "instant",
}
RECORDED_PUSH = {
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "deliver_policy": "all",
    "deliver_subject": "deliver.orders",
    "durable_name": "worker",
    "flow_control": True,
    "idle_heartbeat": 5_000_000_000,
    "max_ack_pending": 1000,
    "max_deliver": -1,
    "name": "worker",
    "num_replicas": 0,
    "replay_policy": "instant",
}
RECORDED_PINNED = {
    **RECORDED_PULL,
    "priority_groups": ["jobs"],
    "priority_policy": "pinned_client",
    "priority_timeout": 120_000_000_000,
}
RECORDED_BACKOFF = {
    **RECORDED_PULL,
    "ack_wait": 1_000_000_000,
    "backoff": [1_000_000_000, 2_000_000_000],
    "max_deliver": 5,
}
RECORDED_START_TIME = {
    **RECORDED_PULL,
    "deliver_policy": "by_start_time",
    "opt_start_time": "2024-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("fields", "recorded"),
    [
        ({}, RECORDED_PULL),
        ({"ackPolicy": "none"}, RECORDED_ACK_NONE),
        (
            {"deliverSubject": "deliver.orders", "flowControl": True, "heartbeatInterval": "5s"},
            RECORDED_PUSH,
        ),
        ({"priorityPolicy": "pinned_client", "priorityGroups": ["jobs"]}, RECORDED_PINNED),
        ({"backoff": ["1s", "2s"], "maxDeliver": 5}, RECORDED_BACKOFF),
        (
            {"deliverPolicy": "byStartTime", "optStartTime": "2024-01-01T00:00:00Z"},
            RECORDED_START_TIME,
        ),
    ],
)
def test_recorded_server_answers_are_in_sync(
    fields: dict[str, Any], recorded: dict[str, Any]
) -> None:
    current = owned(recorded)
    assert consumer_differences(desired(**fields), current) == []
    assert isinstance(plan_consumer(spec(**fields), OWNER, True, info(current)), InSync)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"ackPolicy": "none", "deliverSubject": "deliver.orders"},
        {"ackPolicy": "all", "ackWait": "10s", "maxDeliver": 3, "backoff": ["1s", "5s"]},
        {"filterSubjects": ["orders.a", "orders.b"], "deliverPolicy": "lastPerSubject"},
        {"deliverPolicy": "byStartSequence", "optStartSeq": 7, "filterSubject": "orders.x"},
        {"deliverPolicy": "new", "replayPolicy": "original", "sampleFreq": "50"},
        {"maxAckPending": -1, "maxWaiting": 64, "headersOnly": True, "memStorage": True},
        {"maxRequestBatch": 10, "maxRequestExpires": "30s", "maxRequestMaxBytes": 1024},
        {"inactiveThreshold": "1h", "replicas": 1, "metadata": {"team": "a"}},
        {"pauseUntil": "2099-01-01T00:00:00Z", "description": "hello"},
        {"priorityPolicy": "overflow", "priorityGroups": ["jobs"]},
        {"priorityPolicy": "prioritized", "priorityGroups": ["jobs"]},
        {"deliverSubject": "d", "deliverGroup": "g", "rateLimitBps": 1000},
    ],
)
def test_in_sync_config_shows_no_difference(fields: dict[str, Any]) -> None:
    wanted = desired(**fields)
    assert consumer_differences(wanted, server_view(wanted)) == []
    assert isinstance(plan_consumer(spec(**fields), OWNER, True, info(server_view(wanted))), InSync)


def test_server_times_with_nanoseconds_compare_as_instants() -> None:
    wanted = desired(deliverPolicy="byStartTime", optStartTime="2024-01-01T00:00:00.5Z")
    current = server_view(wanted)
    current["opt_start_time"] = "2024-01-01T00:00:00.500000000Z"
    assert consumer_differences(wanted, current) == []
    assert immutable_changes(wanted, current) == []


@pytest.mark.parametrize(
    ("before", "field"),
    [
        ({"description": "x"}, "description"),
        ({"maxDeliver": 5}, "max_deliver"),
        ({"ackWait": "1m"}, "ack_wait"),
        ({"filterSubject": "orders.a"}, "filter_subject"),
        ({"headersOnly": True}, "headers_only"),
        ({"metadata": {"team": "a"}}, "metadata"),
        ({"maxAckPending": 5}, "max_ack_pending"),
        ({"priorityPolicy": "overflow", "priorityGroups": ["jobs"]}, "priority_policy"),
    ],
)
def test_removed_field_is_a_difference_to_revert(before: dict[str, Any], field: str) -> None:
    differences = consumer_differences(desired(), server_view(desired(**before)))
    assert field in {difference.field for difference in differences}


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
    assert "loses its position" in message


@pytest.mark.parametrize(("before", "after", "fields"), IMMUTABLE_CASES)
def test_immutable_change_recreates_when_opted_in(
    before: dict[str, Any], after: dict[str, Any], fields: list[str]
) -> None:
    wanted = spec(**after, recreateOnImmutableChange=True)
    action = plan_consumer(wanted, OWNER, True, current_for(**before))
    assert isinstance(action, RecreateConsumer)
    assert action.fields == fields
    assert action.stream == "ORDERS"
    assert action.config == desired_consumer_config(wanted, OWNER, "ORDERS")
    assert "position" in action.message()


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
    other = Owner("team-b", "worker", "uid-2")
    theirs = info(server_view(desired_consumer_config(spec(), other, "ORDERS")))
    action = plan_consumer(spec(), OWNER, True, theirs)
    assert isinstance(action, OwnedElsewhere)
    assert "team-b/worker" in action.message()
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


def test_release_removes_only_our_mark() -> None:
    current = current_for(metadata={"team": "a"})
    released = release_request(OWNER, current)
    assert released is not None
    assert released["metadata"] == {"team": "a"}
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
