"""Consumer spec -> server config, admission rules and drift detection.

The server answers below were recorded from nats-server 2.12.8, which leaves out false, "", 0,
empty lists and priority_policy "none", and adds `_nats.*` metadata. The create/update/recreate
decision is in test_consumer_plan.py.
"""

from typing import Any

import pytest
from pydantic import ValidationError

from jetstream_operator.api.consumer import ConsumerSpec
from jetstream_operator.api.crdgen import validated_spec_schema
from jetstream_operator.api.kinds import CONSUMER
from jetstream_operator.reconcile.consumer_config import (
    DEFAULT_ACK_WAIT_NS,
    consumer_differences,
    consumer_request,
    desired_consumer_config,
    immutable_changes,
)
from jetstream_operator.reconcile.consumer_plan import (
    InSync,
    plan_consumer,
)
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY

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

SECOND = 1_000_000_000


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
