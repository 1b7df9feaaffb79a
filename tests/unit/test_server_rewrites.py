"""The server's silent config rewrites (docs/server-rewrites.md), modelled so nothing loops.

`server_stores` below restates, from nats-server's checkStreamCfg / configUpdateCheck and
setConsumerConfigDefaults, what the server keeps for a request; each test checks that what the
operator asks for is already a fixed point of it, so the next pass finds nothing to repair.
The integration tests in tests/integration/test_settle_known_cases.py check the same against the
real server.
"""

from typing import Any

import pytest

from jetstream_operator.api.consumer import SPEC_RULES, ConsumerSpec
from jetstream_operator.api.stream import StreamSpec
from jetstream_operator.nats.jsapi import pedantic_stream
from jetstream_operator.reconcile.consumer_config import (
    DEFAULT_ACK_WAIT_NS,
    consumer_differences,
    desired_consumer_config,
)
from jetstream_operator.reconcile.consumer_plan import (
    AdoptionRefused,
    ImmutableChangeRefused,
    plan_consumer,
)
from jetstream_operator.reconcile.ownership import Owner
from jetstream_operator.reconcile.stream_config import (
    config_differences,
    desired_stream_config,
    server_chosen_fields,
)
from jetstream_operator.reconcile.stream_plan import (
    CreateStream,
    InSync,
    UpdateStream,
    plan_stream,
)

OWNER = Owner("default", "orders", "uid-1")
SECOND = 1_000_000_000
MINUTE = 60 * SECOND


def stream(**fields: Any) -> StreamSpec:
    return StreamSpec.model_validate({"name": "ORDERS", **fields})


def server_stores(request: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    """What nats-server 2.12 keeps for a stream request that it accepts (the rewrites only)."""
    config = {key: value for key, value in request.items() if key != "pedantic"}
    if config.get("allow_msg_schedules") and not config.get("allow_rollup_hdrs"):
        config["allow_rollup_hdrs"], config["deny_purge"] = True, False
    if old is not None and config.get("sealed"):
        config.update(max_age=0, discard="new", deny_delete=True, deny_purge=True)
        config["allow_rollup_hdrs"] = False
    if not config.get("duplicate_window") and config.get("mirror") is None:
        age = config.get("max_age") or 0
        config["duplicate_window"] = age if 0 < age < 2 * MINUTE else 2 * MINUTE
    return config


def settle(spec: StreamSpec) -> tuple[list[Any], dict[str, Any]]:
    """Run the plan against the modelled server until it is in sync; the actions taken."""
    info: dict[str, Any] | None = None
    actions: list[Any] = []
    for _ in range(5):
        action = plan_stream(spec, OWNER, info)
        actions.append(action)
        match action:
            case CreateStream(config=config):
                assert not config["sealed"], "the server refuses to create a sealed stream"
                info = {"config": server_stores(config)}
            case UpdateStream(config=config):
                assert info is not None
                info = {"config": server_stores(config, info["config"])}
            case _:
                break
    assert isinstance(actions[-1], InSync), actions
    assert info is not None
    return actions, info["config"]


def test_message_schedules_without_rollup_settle_with_rollup_on() -> None:
    """The issue's hot loop: the server forced rollup on and the operator turned it off."""
    desired = desired_stream_config(stream(allowMsgSchedules=True), OWNER)
    assert desired["allow_rollup_hdrs"] is True
    actions, stored = settle(stream(allowMsgSchedules=True))
    assert len(actions) == 2 and stored["allow_rollup_hdrs"]


def test_a_sealed_spec_is_created_open_and_sealed_by_one_update() -> None:
    actions, stored = settle(stream(sealed=True, maxAge="1h", allowRollup=True))
    assert [type(action) for action in actions] == [CreateStream, UpdateStream, InSync]
    assert stored["sealed"] and stored["deny_delete"] and stored["deny_purge"]
    assert stored["max_age"] == 0 and stored["discard"] == "new"


def test_sealing_an_existing_stream_asks_for_the_sealed_shape() -> None:
    open_spec = stream(maxAge="1h", allowRollup=True, discard="old")
    _, stored = settle(open_spec)
    sealed_spec = stream(maxAge="1h", allowRollup=True, discard="old", sealed=True)
    action = plan_stream(sealed_spec, OWNER, {"config": stored})
    assert isinstance(action, UpdateStream)
    # The open config with sealed: true; the server applies the sealed shape itself.
    assert action.config["sealed"] and not action.config["deny_delete"]
    assert action.config["allow_rollup_hdrs"] and action.config["max_age"] == 3600 * SECOND
    assert {"max_age", "discard", "deny_delete", "sealed"} <= set(action.summary().split(", "))
    after = server_stores(action.config, stored)
    assert isinstance(plan_stream(sealed_spec, OWNER, {"config": after}), InSync)


def test_a_sealed_stream_with_message_schedules_settles() -> None:
    """Schedules need rollups in the request (pedantic), the sealed shape has none."""
    actions, stored = settle(stream(allowMsgSchedules=True, sealed=True))
    assert stored["sealed"] and not stored["allow_rollup_hdrs"]
    sealing = actions[1]
    assert isinstance(sealing, UpdateStream) and sealing.config["allow_rollup_hdrs"]


def test_a_mirror_keeps_no_duplicate_window_and_inherits_direct_get() -> None:
    spec = stream(mirror={"name": "ORIGIN"})
    desired = desired_stream_config(spec, OWNER)
    assert desired["duplicate_window"] == 0
    assert "mirror_direct" in server_chosen_fields(spec)
    # The server copied allow_direct from the origin: not drift.
    stored = {**server_stores(desired), "mirror_direct": True}
    assert config_differences(desired, stored, server_chosen_fields(spec)) == []


@pytest.mark.parametrize(("max_age", "sent"), [(None, 0), ("30s", 30 * SECOND), ("1h", 0)], ids=str)
def test_sources_take_the_servers_duplicate_window(max_age: str | None, sent: int) -> None:
    """0 lets the server choose (2m on 2.12, none on 2.14); under a short maxAge 2.12 would
    refuse its own default in pedantic mode, so maxAge is sent."""
    fields: dict[str, Any] = {"sources": [{"name": "A"}]}
    if max_age:
        fields["maxAge"] = max_age
    spec = stream(**fields)
    desired = desired_stream_config(spec, OWNER)
    assert desired["duplicate_window"] == sent
    for server_choice in (0, 2 * MINUTE):
        if max_age == "30s" and server_choice:
            continue  # the window may not exceed maxAge
        stored = {**desired, "duplicate_window": server_choice or sent}
        assert config_differences(desired, stored, server_chosen_fields(spec)) == []


def test_a_zero_duplicate_window_is_the_default() -> None:
    """Found by the property test: the server stores its default for 0, and 0 was resent."""
    actions, stored = settle(stream(duplicateWindow="0"))
    assert len(actions) == 2 and stored["duplicate_window"] == 2 * MINUTE
    with_age = desired_stream_config(stream(duplicateWindow="0", maxAge="30s"), OWNER)
    assert with_age["duplicate_window"] == 30 * SECOND


def test_a_written_duplicate_window_on_sources_is_enforced() -> None:
    spec = stream(sources=[{"name": "A"}], duplicateWindow="10s")
    assert "duplicate_window" not in server_chosen_fields(spec)
    desired = desired_stream_config(spec, OWNER)
    stored = {**desired, "duplicate_window": 2 * MINUTE}
    assert [d.field for d in config_differences(desired, stored)] == ["duplicate_window"]


def test_immutable_fields_left_out_follow_an_adopted_nack_stream() -> None:
    """NACK's CRD defaults storage to memory; adopting must not ask the server to change it."""
    nack_made = server_stores(desired_stream_config(stream(storage="memory"), Owner("", "", "")))
    nack_made["metadata"] = {}
    spec = stream(adoption="IfUnowned")
    action = plan_stream(spec, OWNER, {"config": nack_made})
    assert isinstance(action, UpdateStream)
    assert action.config["storage"] == "memory"
    assert "storage" not in action.summary()


def test_a_written_storage_is_not_overridden_by_the_server() -> None:
    nack_made = server_stores(desired_stream_config(stream(storage="memory"), OWNER))
    action = plan_stream(stream(storage="file"), OWNER, {"config": nack_made})
    assert isinstance(action, UpdateStream) and "storage" in action.summary()


def test_workqueue_retention_left_out_follows_the_server_but_interest_drift_is_repaired() -> None:
    for retention, follows in (("workqueue", True), ("interest", False)):
        existing = server_stores(desired_stream_config(stream(retention=retention), OWNER))
        action = plan_stream(stream(), OWNER, {"config": existing})
        assert isinstance(action, InSync) == follows, retention


def test_pedantic_everywhere_but_on_mirrors() -> None:
    assert pedantic_stream({"name": "A", "mirror": None})["pedantic"] is True
    assert pedantic_stream({"name": "A", "mirror": {"name": "B"}})["pedantic"] is False


# -- consumers -----------------------------------------------------------------------------------


def consumer(**fields: Any) -> ConsumerSpec:
    return ConsumerSpec.model_validate({"durableName": "worker", "streamName": "ORDERS", **fields})


@pytest.mark.parametrize(
    ("fields", "ack_wait"),
    [
        ({"ackWait": "0"}, DEFAULT_ACK_WAIT_NS),
        ({"ackWait": "0", "ackPolicy": "all"}, DEFAULT_ACK_WAIT_NS),
        ({"ackWait": "0", "ackPolicy": "none"}, 0),
        ({"ackWait": "5s"}, 5 * SECOND),
        ({"ackWait": "0", "backoff": ["2s", "4s"], "maxDeliver": 3}, 2 * SECOND),
    ],
)
def test_ack_wait_zero_is_the_servers_default(fields: dict[str, Any], ack_wait: int) -> None:
    """The server stores 30s for ackWait 0 on acked consumers; asking for 0 looped."""
    desired = desired_consumer_config(consumer(**fields), OWNER, "ORDERS")
    assert desired["ack_wait"] == ack_wait
    stored = {**desired, "ack_wait": ack_wait}
    assert consumer_differences(desired, stored) == []


@pytest.mark.parametrize("recreate", [False, True])
def test_adopting_a_nack_consumer_never_recreates_it(recreate: bool) -> None:
    """NACK's CRD defaults ackPolicy to none; ours to explicit. Adoption refuses, naming it."""
    nack_made = desired_consumer_config(consumer(ackPolicy="none"), OWNER, "ORDERS")
    nack_made["metadata"] = {}
    spec = consumer(adoption="IfUnowned", recreateOnImmutableChange=recreate)
    action = plan_consumer(spec, OWNER, True, {"config": nack_made})
    assert isinstance(action, AdoptionRefused) and isinstance(action, ImmutableChangeRefused)
    assert action.fields == ["ackPolicy"]
    assert "spec.ackPolicy" in action.message() and "not adopted" in action.message()


def test_several_priority_groups_are_accepted() -> None:
    spec = consumer(priorityPolicy="overflow", priorityGroups=["a", "b", "c"])
    assert desired_consumer_config(spec, OWNER, "ORDERS")["priority_groups"] == ["a", "b", "c"]


# -- nats-server 2.14 additions ------------------------------------------------------------------


def test_batch_publish_is_sent_only_when_on_or_to_turn_it_off() -> None:
    """2.12 refuses unknown fields, so allow_batched is left out unless it matters."""
    assert "allow_batched" not in desired_stream_config(stream(), OWNER)
    on = desired_stream_config(stream(allowBatchPublish=True), OWNER)
    assert on["allow_batched"] is True
    stored = server_stores(on)
    action = plan_stream(stream(), OWNER, {"config": stored})
    assert isinstance(action, UpdateStream) and action.config["allow_batched"] is False
    assert "allow_batched" in action.summary()


def test_a_source_through_a_durable_consumer() -> None:
    consumer_ref = {"name": "feed", "deliverSubject": "feed.copy"}
    config = desired_stream_config(stream(sources=[{"name": "A", "consumer": consumer_ref}]), OWNER)
    assert config["sources"] == [
        {"name": "A", "consumer": {"name": "feed", "deliver_subject": "feed.copy"}}
    ]


def test_flow_control_ack_policy_states_what_the_server_would_set() -> None:
    """Pedantic mode requires flow control and the 1s heartbeat stated, and no ack wait."""
    spec = consumer(ackPolicy="flow_control", deliverSubject="fc.out", maxAckPending=100)
    config = desired_consumer_config(spec, OWNER, "ORDERS")
    assert config["flow_control"] is True
    assert config["idle_heartbeat"] == SECOND
    assert config["ack_wait"] == 0
    assert config["max_ack_pending"] == 100


def test_flow_control_ack_policy_rules_are_in_the_crd() -> None:
    assert any("ackPolicy: flow_control (nats-server 2.14+)" in str(rule) for rule in SPEC_RULES)
