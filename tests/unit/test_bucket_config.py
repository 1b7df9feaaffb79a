"""Buckets as the streams they are built on: the translation matches what the NATS clients
create (nats.go's prepareKeyValueConfig / prepareObjectStoreConfig), so a bucket a client made
is in sync with the same spec, and every kind plans through the one stream planner."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jetstream_operator.api.keyvalue import KeyValueSpec
from jetstream_operator.api.objectstore import ObjectStoreSpec
from jetstream_operator.reconcile.backed import (
    KEY_VALUE_KIND,
    OBJECT_STORE_KIND,
    STREAM_BACKED,
    STREAM_KIND,
)
from jetstream_operator.reconcile.live_state import (
    keyvalue_live_state,
    object_count_request,
    objectstore_live_state,
    stream_live_state,
)
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY, Owner
from jetstream_operator.reconcile.stream_config import config_differences, desired_stream_config
from jetstream_operator.reconcile.stream_plan import InSync, UpdateStream, plan_stream

OWNER = Owner("ns", "settings", "uid-1")

# The stream nats.go creates for KeyValueConfig{Bucket: "settings", History: 5, TTL: time.Hour}
# (after the server's defaults), as STREAM.INFO shows it.
NATS_GO_KV = {
    "name": "KV_settings",
    "subjects": ["$KV.settings.>"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 3_600_000_000_000,
    "max_msgs_per_subject": 5,
    "max_msg_size": -1,
    "discard": "new",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120_000_000_000,
    "compression": "none",
    "allow_direct": True,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": True,
    "deny_purge": False,
    "allow_rollup_hdrs": True,
    "consumer_limits": {},
}


def with_owner(config: dict[str, Any], owner: Owner = OWNER) -> dict[str, Any]:
    return {**config, "metadata": {OWNER_METADATA_KEY: owner.encode()}}


def test_a_bucket_is_the_stream_nats_go_creates() -> None:
    spec = KEY_VALUE_KIND.stream_spec({"bucket": "settings", "history": 5, "ttl": "1h"})
    desired = desired_stream_config(spec, OWNER)
    assert config_differences(desired, with_owner(NATS_GO_KV)) == []
    assert isinstance(plan_stream(spec, OWNER, {"config": with_owner(NATS_GO_KV)}), InSync)


def test_a_bucket_made_by_nats_py_needs_only_the_owner_record() -> None:
    """nats-py turns message TTLs on; nothing can turn them off, so the spec follows."""
    made = {**NATS_GO_KV, "allow_msg_ttl": True}
    spec = KEY_VALUE_KIND.stream_spec(
        {"bucket": "settings", "history": 5, "ttl": "1h", "adoption": "IfUnowned"}
    )
    action = plan_stream(spec, OWNER, {"config": made})
    assert isinstance(action, UpdateStream)
    assert action.summary() == "metadata"
    assert action.config["allow_msg_ttl"] is True


def test_unset_storage_follows_an_adopted_bucket_and_a_set_one_does_not() -> None:
    in_memory = with_owner({**NATS_GO_KV, "storage": "memory"})
    unset = KEY_VALUE_KIND.stream_spec({"bucket": "settings", "history": 5, "ttl": "1h"})
    assert isinstance(plan_stream(unset, OWNER, {"config": in_memory}), InSync)
    on_file = KEY_VALUE_KIND.stream_spec(
        {"bucket": "settings", "history": 5, "ttl": "1h", "storage": "file"}
    )
    action = plan_stream(on_file, OWNER, {"config": in_memory})
    assert isinstance(action, UpdateStream) and action.summary() == "storage"


def test_bucket_fields_land_where_the_clients_put_them() -> None:
    spec = KEY_VALUE_KIND.stream_spec(
        {
            "bucket": "b",
            "maxValueSize": 1024,
            "maxBytes": 10_000,
            "compression": True,
            "limitMarkerTtl": "10m",
            "direct": False,
            "republish": {"destination": "changes.>"},
            "metadata": {"team": "a"},
        }
    )
    config = desired_stream_config(spec, OWNER)
    assert config["max_msg_size"] == 1024 and config["max_bytes"] == 10_000
    assert config["compression"] == "s2" and config["allow_direct"] is False
    assert config["allow_msg_ttl"] is True
    assert config["subject_delete_marker_ttl"] == 600_000_000_000
    # ">" as the clients and NACK store it, not $KV.b.>: the two republish to other subjects.
    assert config["republish"] == {"src": ">", "dest": "changes.>", "headers_only": False}
    assert config["metadata"]["team"] == "a"


def test_a_client_made_bucket_republishing_from_everything_is_in_sync() -> None:
    made = {**NATS_GO_KV, "republish": {"src": ">", "dest": "changes.>"}}
    spec = KEY_VALUE_KIND.stream_spec(
        {"bucket": "settings", "history": 5, "ttl": "1h", "republish": {"destination": "changes.>"}}
    )
    assert isinstance(plan_stream(spec, OWNER, {"config": with_owner(made)}), InSync)


def test_every_bucket_states_the_clients_duplicate_window() -> None:
    """nats.go and nats-py send 2m, or the ttl when shorter, mirrors and sources included; a
    window left to the server would differ (a mirror gets none) and adopting would change it."""
    origin = {"name": "origin"}
    windows: list[tuple[dict[str, Any], int]] = [
        ({}, 120_000_000_000),
        ({"ttl": "30s"}, 30_000_000_000),
        ({"mirror": origin}, 120_000_000_000),
        ({"mirror": origin, "ttl": "1m"}, 60_000_000_000),
        ({"sources": [origin]}, 120_000_000_000),
    ]
    for fields, window in windows:
        spec = KEY_VALUE_KIND.stream_spec({"bucket": "b", **fields})
        assert desired_stream_config(spec, OWNER)["duplicate_window"] == window, fields
    mirror = KEY_VALUE_KIND.stream_spec({"bucket": "copy", "mirror": {"name": "origin"}})
    made_without = {**NATS_GO_KV, "name": "KV_copy", "subjects": [], "duplicate_window": 0}
    made_without |= {"mirror": {"name": "KV_origin"}, "mirror_direct": True}
    made_without |= {"max_age": 0, "max_msgs_per_subject": 1}
    action = plan_stream(mirror, OWNER, {"config": with_owner(made_without)})
    assert isinstance(action, UpdateStream) and action.summary() == "duplicate_window"


def test_mirror_and_sources_name_buckets_as_the_clients_do() -> None:
    mirror = desired_stream_config(
        KEY_VALUE_KIND.stream_spec({"bucket": "copy", "mirror": {"name": "origin"}}), OWNER
    )
    assert mirror["mirror"]["name"] == "KV_origin" and mirror["subjects"] == []
    assert mirror["mirror_direct"] is True
    merged = desired_stream_config(
        KEY_VALUE_KIND.stream_spec(
            {
                "bucket": "all",
                "sources": [
                    {"name": "KV_east"},
                    {"name": "west"},
                    {"name": "raw", "subjectTransforms": [{"source": "a.>", "dest": "b.>"}]},
                ],
            }
        ),
        OWNER,
    )
    assert merged["subjects"] == ["$KV.all.>"]
    assert [source["name"] for source in merged["sources"]] == ["KV_east", "KV_west", "raw"]
    assert merged["sources"][0]["subject_transforms"] == [
        {"src": "$KV.east.>", "dest": "$KV.all.>"}
    ]
    assert merged["sources"][2]["subject_transforms"] == [{"src": "a.>", "dest": "b.>"}]


def test_an_object_store_is_the_stream_nats_go_creates() -> None:
    config = desired_stream_config(
        OBJECT_STORE_KIND.stream_spec({"bucket": "files", "ttl": "720h", "compression": True}),
        OWNER,
    )
    assert config["name"] == "OBJ_files"
    assert config["subjects"] == ["$O.files.C.>", "$O.files.M.>"]
    assert config["discard"] == "new" and config["allow_rollup_hdrs"] and config["allow_direct"]
    assert config["max_age"] == 720 * 3_600_000_000_000 and config["compression"] == "s2"
    assert not config["deny_delete"]


def test_lifecycle_fields_carry_over() -> None:
    spec = OBJECT_STORE_KIND.stream_spec(
        {"bucket": "f", "deletionPolicy": "Retain", "preventUpdate": True, "adoption": "IfUnowned"}
    )
    assert spec.retains_data() and spec.prevent_update and spec.adoption == "IfUnowned"
    assert not KEY_VALUE_KIND.stream_spec({"bucket": "k"}).retains_data()


@pytest.mark.parametrize(
    "spec",
    [
        {"bucket": "has.dot"},
        {"bucket": "b", "history": 65},
        {"bucket": "b", "history": 0},
        {"bucket": "b", "ttl": "a week"},
        {"bucket": "b", "values": 3},
    ],
)
def test_bad_bucket_specs_are_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        KeyValueSpec.model_validate(spec)


def test_object_store_refuses_key_value_fields() -> None:
    with pytest.raises(ValidationError):
        ObjectStoreSpec.model_validate({"bucket": "b", "history": 3})


def test_stream_names_map_both_ways() -> None:
    for kind in STREAM_BACKED:
        spec = {kind.name_field: "orders"}
        stream = kind.stream_name(spec)
        assert stream is not None and kind.name_in_stream(stream) == "orders"
    assert KEY_VALUE_KIND.name_in_stream("ORDERS") is None
    assert KEY_VALUE_KIND.name_in_stream("KV_") is None
    assert STREAM_KIND.name_in_stream("KV_orders") == "KV_orders"


def test_live_state_shows_what_a_bucket_holds() -> None:
    info = {
        "config": {"name": "KV_b", "num_replicas": 3, "max_msgs_per_subject": 5},
        "state": {"messages": 7, "bytes": 700, "num_subjects": 3},
        "cluster": {"name": "c1", "leader": "n1", "replicas": [{"name": "n2", "current": True}]},
    }
    state = keyvalue_live_state(info)
    assert (state["values"], state["keys"], state["history"], state["bytes"]) == (7, 3, 5, 700)
    assert state["leader"] == "n1" and state["replicaStates"][0]["name"] == "n2"
    assert objectstore_live_state({"config": {"sealed": True}})["sealed"] is True
    assert object_count_request("files")["subjects_filter"] == "$O.files.M.>"


def test_a_single_server_shows_no_leader_whichever_request_was_made() -> None:
    """STREAM.INFO names a single server as leader, STREAM.LIST does not: the status must not
    flip between them (found by the bench: one write per stream after its first listing)."""
    by_info = {"config": {"name": "S"}, "cluster": {"leader": "NAO6HQ"}}
    by_list = {"config": {"name": "S"}}
    assert stream_live_state(by_info) == stream_live_state(by_list)
    assert stream_live_state(by_info)["leader"] is None
