"""Spec -> server config, drift detection and the create/update/conflict decision."""

from typing import Any

import pytest
from pydantic import ValidationError

from jetstream_operator.api.stream import StreamSpec
from jetstream_operator.reconcile.live_state import existed_before
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, RETAINED_METADATA_KEY, Owner
from jetstream_operator.reconcile.renames import Refused
from jetstream_operator.reconcile.stream_config import config_differences, desired_stream_config
from jetstream_operator.reconcile.stream_plan import (
    CreateStream,
    InSync,
    OwnedElsewhere,
    UpdatesPrevented,
    UpdateStream,
    may_delete,
    plan_stream,
    release_request,
)

OWNER = Owner("default", "orders", "uid-1")


def spec(**fields: Any) -> StreamSpec:
    return StreamSpec.model_validate({"name": "ORDERS", "subjects": ["orders.>"], **fields})


def server_view(config: dict[str, Any]) -> dict[str, Any]:
    """What the server answers for a config it accepted: false flags left out, metadata added."""
    shown = {k: v for k, v in config.items() if v is not False}
    shown["metadata"] = {**config["metadata"], "_nats.ver": "2.12.8", "_nats.level": "3"}
    shown["compression"] = "none"
    return shown


def test_nack_style_manifest_maps_to_server_fields() -> None:
    config = desired_stream_config(
        spec(maxAge="1h", maxMsgs=10, maxBytes=300, replicas=3, storage="memory"), OWNER
    )
    assert config["max_age"] == 3_600_000_000_000
    assert config["max_msgs"] == 10
    assert config["max_bytes"] == 300
    assert config["num_replicas"] == 3
    assert config["storage"] == "memory"
    assert config["metadata"] == {OWNER_METADATA_KEY: "default/orders/uid-1"}


def test_unset_fields_are_stated_as_their_defaults() -> None:
    config = desired_stream_config(spec(), OWNER)
    assert config["max_age"] == 0
    assert config["max_msgs"] == -1
    assert config["duplicate_window"] == 120_000_000_000


def test_duplicate_window_follows_a_short_max_age() -> None:
    assert desired_stream_config(spec(maxAge="30s"), OWNER)["duplicate_window"] == 30_000_000_000


def test_zero_limits_mean_unlimited_like_the_server() -> None:
    assert desired_stream_config(spec(maxMsgs=0), OWNER)["max_msgs"] == -1


def test_stream_without_subjects_captures_its_name() -> None:
    config = desired_stream_config(StreamSpec(name="EVENTS"), OWNER)
    assert config["subjects"] == ["EVENTS"]


@pytest.mark.parametrize("name", ["a.b", "a*", "a>", "has space", ""])
def test_stream_names_the_server_would_refuse_are_invalid(name: str) -> None:
    with pytest.raises(ValidationError):
        StreamSpec(name=name)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError):
        spec(maxMessages=5)


def test_in_sync_config_shows_no_difference() -> None:
    desired = desired_stream_config(spec(noAck=False), OWNER)
    assert config_differences(desired, server_view(desired)) == []


def test_removed_limit_is_a_difference_to_revert() -> None:
    before = desired_stream_config(spec(maxAge="1h"), OWNER)
    after = desired_stream_config(spec(), OWNER)
    differences = config_differences(after, server_view(before))
    assert {d.field for d in differences} == {"max_age"}


def test_flag_turned_off_is_a_difference() -> None:
    before = desired_stream_config(spec(noAck=True), OWNER)
    after = desired_stream_config(spec(noAck=False), OWNER)
    assert [d.field for d in config_differences(after, server_view(before))] == ["no_ack"]


def test_plan_creates_a_missing_stream() -> None:
    assert isinstance(plan_stream(spec(), OWNER, None), CreateStream)


def test_plan_leaves_a_foreign_stream_alone() -> None:
    foreign = {"config": {"name": "ORDERS", "subjects": ["orders.>"]}}
    action = plan_stream(spec(), OWNER, foreign)
    assert isinstance(action, OwnedElsewhere)
    assert "not created by this operator" in action.message()


def test_plan_reports_the_other_owner() -> None:
    """Within its namespace; another namespace's owner is not named (test_tenant_leaks)."""
    other = Owner(OWNER.namespace, "orders-old", "uid-2")
    desired = desired_stream_config(spec(), other)
    action = plan_stream(spec(), OWNER, {"config": server_view(desired)})
    assert isinstance(action, OwnedElsewhere)
    assert f"{OWNER.namespace}/orders-old" in action.message()


def test_plan_updates_only_on_difference() -> None:
    current = {"config": server_view(desired_stream_config(spec(), OWNER))}
    assert isinstance(plan_stream(spec(), OWNER, current), InSync)
    action = plan_stream(spec(maxMsgs=5), OWNER, current)
    assert isinstance(action, UpdateStream)
    assert action.summary() == "max_msgs"


def test_only_the_owning_resource_may_delete() -> None:
    mine = {"config": server_view(desired_stream_config(spec(), OWNER))}
    theirs = {"config": server_view(desired_stream_config(spec(), Owner("x", "y", "z")))}
    assert may_delete(OWNER, mine)
    assert not may_delete(OWNER, theirs)
    assert not may_delete(OWNER, None)
    assert not may_delete(OWNER, {"config": {"name": "ORDERS"}})


def test_unowned_stream_is_adopted_only_when_asked() -> None:
    foreign = {"config": {"name": "ORDERS", "subjects": ["orders.>"], "max_msgs": 7}}
    assert isinstance(plan_stream(spec(), OWNER, foreign), OwnedElsewhere)
    action = plan_stream(spec(adoption="IfUnowned"), OWNER, foreign)
    assert isinstance(action, UpdateStream)
    assert action.config["metadata"][OWNER_METADATA_KEY] == OWNER.encode()


def test_adoption_never_steals_from_another_owner() -> None:
    other = {"config": server_view(desired_stream_config(spec(), Owner("x", "y", "z")))}
    assert isinstance(plan_stream(spec(adoption="IfUnowned"), OWNER, other), OwnedElsewhere)


def test_prevent_update_reports_instead_of_updating() -> None:
    current = {"config": server_view(desired_stream_config(spec(), OWNER))}
    action = plan_stream(spec(maxMsgs=5, preventUpdate=True), OWNER, current)
    assert isinstance(action, UpdatesPrevented)
    assert [d.field for d in action.differences] == ["max_msgs"]


def test_replicas_and_placement_change_in_separate_steps() -> None:
    before = server_view(desired_stream_config(spec(), OWNER))
    wanted = spec(replicas=3, placement={"cluster": "east", "tags": ["ssd"]})
    first = plan_stream(wanted, OWNER, {"config": before})
    assert isinstance(first, UpdateStream)
    assert first.config["num_replicas"] == 3
    assert first.config["placement"] is None
    after_first = {**before, "num_replicas": 3}
    second = plan_stream(wanted, OWNER, {"config": after_first})
    assert isinstance(second, UpdateStream)
    assert second.config["placement"] == {"cluster": "east", "tags": ["ssd"]}


def test_create_only_fields_are_kept_as_the_server_has_them_and_never_drift() -> None:
    current = server_view(desired_stream_config(spec(firstSequence=100), OWNER))
    current["first_seq"] = 100
    assert isinstance(plan_stream(spec(firstSequence=100), OWNER, {"config": current}), InSync)
    # An update carries the server's own value: a changed one is refused (below).
    action = plan_stream(spec(firstSequence=100, maxMsgs=3), OWNER, {"config": current})
    assert isinstance(action, UpdateStream) and action.config["first_seq"] == 100
    # Left out of an update the server would drop it.
    released = release_request(OWNER, {"config": current})
    assert released is not None and released["first_seq"] == 100
    fresh = server_view(desired_stream_config(spec(), OWNER))
    action = plan_stream(spec(maxMsgs=3), OWNER, {"config": fresh})
    assert isinstance(action, UpdateStream) and "first_seq" not in action.config


def test_release_turns_our_mark_into_a_record_of_who_retained_it() -> None:
    current = server_view(desired_stream_config(spec(metadata={"team": "a"}), OWNER))
    released = release_request(OWNER, {"config": current})
    assert released is not None
    assert released["metadata"] == {"team": "a", RETAINED_METADATA_KEY: OWNER.encode()}
    assert release_request(Owner("x", "y", "z"), {"config": current}) is None


def test_the_resource_that_retained_a_stream_reattaches_and_no_other_without_adoption() -> None:
    """Re-applying the manifest of a stream kept by deletionPolicy: Retain takes it back (a
    new UID, same namespace/name); any other resource must adopt it, as an unowned one."""
    released = release_request(OWNER, {"config": server_view(desired_stream_config(spec(), OWNER))})
    assert released is not None
    again = Owner(OWNER.namespace, OWNER.name, "uid-new")
    action = plan_stream(spec(), again, {"config": released})
    assert isinstance(action, UpdateStream)
    assert action.config["metadata"] == {OWNER_METADATA_KEY: again.encode()}
    other = Owner(OWNER.namespace, "someone-else", "uid-9")
    refused = plan_stream(spec(), other, {"config": released})
    assert isinstance(refused, OwnedElsewhere) and refused.retained
    assert "kept in NATS when another resource that managed it was deleted" in refused.message()
    assert isinstance(
        plan_stream(spec(adoption="IfUnowned"), other, {"config": released}), UpdateStream
    )


def test_retention_policy_defaults_to_delete_and_honours_nack_prevent_delete() -> None:
    assert not spec().retains_data()
    assert spec(preventDelete=True).retains_data()
    assert spec(deletionPolicy="Retain").retains_data()
    assert not spec(deletionPolicy="Delete", preventDelete=True).retains_data()


def test_mirror_and_sources_map_to_server_shapes() -> None:
    config = desired_stream_config(
        StreamSpec.model_validate(
            {
                "name": "COPY",
                "sources": [
                    {
                        "name": "ORDERS",
                        "optStartTime": "2026-01-01T01:00:00+01:00",
                        "subjectTransforms": [{"source": "orders.>", "dest": "copy.>"}],
                        "externalApiPrefix": "$JS.hub.API",
                    }
                ],
            }
        ),
        OWNER,
    )
    assert config["subjects"] == []
    assert config["sources"] == [
        {
            "name": "ORDERS",
            "opt_start_time": "2026-01-01T00:00:00Z",
            "subject_transforms": [{"src": "orders.>", "dest": "copy.>"}],
            "external": {"api": "$JS.hub.API", "deliver": ""},
        }
    ]


def test_an_adopted_mirror_keeps_the_window_the_server_holds() -> None:
    """Fields left to the server are neither compared nor changed by the adopting update."""
    mirror = spec(subjects=[], mirror={"name": "ORIGIN"}, adoption="IfUnowned")
    made_by_client = server_view(desired_stream_config(mirror, OWNER))
    made_by_client["duplicate_window"] = 120_000_000_000
    made_by_client["metadata"] = {"_nats.ver": "2.12.8"}
    action = plan_stream(mirror, OWNER, {"config": made_by_client})
    assert isinstance(action, UpdateStream)
    assert [difference.field for difference in action.differences] == ["metadata"]
    assert action.config["duplicate_window"] == 120_000_000_000


@pytest.mark.parametrize(
    ("reply", "before"),
    [
        ({"created": "2026-11-27T21:00:00.123456789Z", "ts": "2026-11-27T21:00:00.2Z"}, False),
        ({"created": "2026-11-27T21:00:00.123456789Z", "ts": "2026-11-27T21:00:06Z"}, True),
        ({"created": "2026-11-27T21:00:00Z"}, False),
        ({"created": "2026-11-27T21:00:00", "ts": "2026-11-27T22:00:00Z"}, False),
        ({"created": "yesterday", "ts": "2026-11-27T22:00:00Z"}, False),
    ],
)
def test_a_create_reply_tells_an_object_that_was_there_by_the_servers_own_times(
    reply: dict[str, str], before: bool
) -> None:
    """Older than its reply by more than a raft round: the create found it there."""
    assert existed_before(reply) is before


def _existing(config_spec: dict[str, Any], last_seq: int) -> dict[str, Any]:
    """INFO of a stream this resource made from `config_spec`, holding sequences up to last_seq."""
    config = server_view(desired_stream_config(spec(**config_spec), OWNER))
    return {"config": config, "state": {"last_seq": last_seq}}


@pytest.mark.parametrize(
    ("created_with", "last_seq", "asked", "refused"),
    [
        ({}, 3, None, False),  # never asked
        ({}, 3, 1, False),  # a stream made without it starts at 1
        ({}, 3, 100, True),  # added later: the stream holds sequences below it
        ({}, 500, 100, False),  # may have started there once (first_seq dropped by an update)
        ({"firstSequence": 100}, 120, 100, False),
        ({"firstSequence": 100}, 120, 50, True),  # changed: the config records 100
        ({"firstSequence": 100}, 120, None, False),  # removed: asks for nothing
    ],
)
def test_first_sequence_is_refused_only_where_the_stream_certainly_started_elsewhere(
    created_with: dict[str, Any], last_seq: int, asked: int | None, refused: bool
) -> None:
    info = _existing(created_with, last_seq)
    wanted = spec(**({} if asked is None else {"firstSequence": asked}))
    action = plan_stream(wanted, OWNER, info)
    assert isinstance(action, Refused) is refused
    if refused:
        assert isinstance(action, Refused)
        assert action.reason == "ImmutableFieldChanged"
        assert "spec.firstSequence" in action.message()
        assert ("set it back to 100" in action.message()) is bool(created_with)
        # The message is the failure's identity: a new message a message later would post
        # another Warning at the next retry.
        later = plan_stream(wanted, OWNER, _existing(created_with, last_seq + 1))
        assert isinstance(later, Refused) and later.message() == action.message()
    else:
        assert isinstance(action, InSync)
