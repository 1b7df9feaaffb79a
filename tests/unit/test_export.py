"""Export as pure logic: server configs of streams, consumers and buckets in, manifests out.

The server configs here are shaped as nats-server 2.12 answers STREAM.INFO / CONSUMER.INFO (every
default filled in, `_nats.*` metadata); the integration tests run the same against a real server.
NACK conversion is in test_nack_conversion.py.
"""

from __future__ import annotations

from typing import Any

from jetstream_operator.export.kinds import CONSUMERS, KEY_VALUES, OBJECT_STORES, STREAMS
from jetstream_operator.export.manifests import (
    NameBook,
    StreamWithConsumers,
    export_account,
    kubernetes_name,
)

S = 1_000_000_000
SERVER_METADATA = {"_nats.req.level": "0", "_nats.ver": "2.12.1", "_nats.level": "1"}


def server_stream(name: str, **changes: Any) -> dict[str, Any]:
    """A stream config as the server reports one created with nothing but a name."""
    config: dict[str, Any] = {
        "name": name,
        "subjects": [name],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120_000_000_000,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "metadata": dict(SERVER_METADATA),
    }
    config.update(changes)
    return config


def server_consumer(name: str, **changes: Any) -> dict[str, Any]:
    """A pull consumer config as the server reports one created with a durable name only."""
    config: dict[str, Any] = {
        "durable_name": name,
        "name": name,
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
        "metadata": dict(SERVER_METADATA),
    }
    config.update(changes)
    return config


def test_names_are_kubernetes_names_and_unique() -> None:
    assert kubernetes_name("ORDERS_v2") == "orders-v2"
    assert kubernetes_name("__") == "x"
    assert len(kubernetes_name("A" * 300)) == 253
    book = NameBook()
    first, second, third = (book.claim(n, n) for n in ("Orders", "ORDERS", "orders_"))
    assert first == "orders"
    assert len({first, second, third}) == 3
    assert all(name.startswith("orders-") for name in (second, third))


def test_a_default_stream_exports_only_its_name() -> None:
    exported = STREAMS.export(server_stream("ORDERS"))
    assert exported.body() == {"name": "ORDERS"}
    assert exported.unexpressed == []


def test_a_stream_exports_what_differs_from_our_defaults() -> None:
    config = server_stream(
        "ORDERS",
        subjects=["orders.>"],
        storage="memory",
        retention="workqueue",
        max_age=3_600_000_000_000,
        # The server's choice for maxAge 1h is 2m; 30s was asked for.
        duplicate_window=30_000_000_000,
        max_msgs_per_subject=5,
        discard="new",
        discard_new_per_subject=True,
        allow_msg_ttl=True,
        allow_rollup_hdrs=True,
        subject_delete_marker_ttl=60_000_000_000,
        republish={"src": ">", "dest": "copy.>", "headers_only": True},
        consumer_limits={"max_ack_pending": 50},
        metadata={**SERVER_METADATA, "team": "a", "jetstream-operator.io/owner": "x/y/z"},
    )
    exported = STREAMS.export(config)
    assert exported.body() == {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "workqueue",
        "storage": "memory",
        "maxAge": "1h",
        "maxMsgsPerSubject": 5,
        "discard": "new",
        "discardPerSubject": True,
        "duplicateWindow": "30s",
        "republish": {"destination": "copy.>", "headersOnly": True},
        "allowRollup": True,
        "allowMsgTtl": True,
        "subjectDeleteMarkerTtl": "1m",
        "consumerLimits": {"maxAckPending": 50},
        "metadata": {"team": "a"},
    }
    assert exported.unexpressed == []


def test_a_short_max_age_takes_the_window_along() -> None:
    # maxAge 30s: the server picks a 30s window, which is our default too.
    config = server_stream("S", max_age=30_000_000_000, duplicate_window=30_000_000_000)
    assert STREAMS.export(config).body() == {"name": "S", "maxAge": "30s"}


def test_a_mirror_leaves_out_what_the_server_chooses() -> None:
    config = server_stream(
        "M",
        subjects=[],
        duplicate_window=0,
        mirror={"name": "ORDERS", "filter_subject": "orders.eu.>", "opt_start_seq": 10},
        mirror_direct=True,
    )
    exported = STREAMS.export(config)
    assert exported.body() == {
        "name": "M",
        "mirror": {"name": "ORDERS", "optStartSeq": 10, "filterSubject": "orders.eu.>"},
    }
    assert exported.unexpressed == []


def test_a_default_consumer_exports_only_its_name() -> None:
    exported = CONSUMERS.export(server_consumer("C"), {"stream": "S"})
    assert exported.body() == {"durableName": "C"}
    assert exported.unexpressed == []


def test_a_consumer_exports_what_differs_taking_stream_limits_into_account() -> None:
    config = server_consumer(
        "C",
        ack_policy="none",
        ack_wait=1,
        deliver_policy="by_start_sequence",
        opt_start_seq=7,
        filter_subjects=["a.>", "b.>"],
        max_ack_pending=50,
        inactive_threshold=0,
        deliver_subject="push.c",
        max_waiting=0,
        idle_heartbeat=5_000_000_000,
        flow_control=True,
    )
    exported = CONSUMERS.export(config, {"stream": "S", "stream_limits": {"max_ack_pending": 50}})
    assert exported.body() == {
        "durableName": "C",
        "deliverPolicy": "byStartSequence",
        "optStartSeq": 7,
        "ackPolicy": "none",
        "ackWait": "1ns",
        "filterSubjects": ["a.>", "b.>"],
        "deliverSubject": "push.c",
        "flowControl": True,
        "heartbeatInterval": "5s",
    }
    assert exported.unexpressed == []


def test_a_pinned_consumer_keeps_its_ttl_only_when_not_the_default() -> None:
    config = server_consumer(
        "P", priority_policy="pinned_client", priority_groups=["g"], priority_timeout=120 * 10**9
    )
    body = CONSUMERS.export(config, {"stream": "S"}).body()
    assert body == {"durableName": "P", "priorityPolicy": "pinned_client", "priorityGroups": ["g"]}
    config["priority_timeout"] = 10 * 10**9
    assert CONSUMERS.export(config, {"stream": "S"}).body()["pinnedTtl"] == "10s"


def test_what_cannot_be_reproduced_is_named() -> None:
    # A stream capturing nothing cannot be written as a spec: empty subjects mean its own name.
    result = export_account([StreamWithConsumers({"config": server_stream("S", subjects=[])})])
    assert result.notes == [
        "Stream S: not reproduced exactly, adopting would change subjects: [] -> ['S']"
    ]


def test_export_account_skips_what_it_cannot_or_must_not_adopt() -> None:
    owned = server_stream("OWNED", metadata={"jetstream-operator.io/owner": "ns/owned/uid"})
    streams = [
        StreamWithConsumers(
            {"config": server_stream("Orders_EU", consumer_limits={"max_ack_pending": 10})},
            [
                {"name": "Worker", "config": server_consumer("Worker", max_ack_pending=10)},
                {"name": "eph", "config": {**server_consumer("eph"), "durable_name": ""}},
            ],
        ),
        StreamWithConsumers({"config": owned}),
    ]
    result = export_account(streams, namespace="apps", connection_ref="hub")
    assert [(m["kind"], m["metadata"]["name"]) for m in result.manifests] == [
        ("Stream", "orders-eu"),
        ("Consumer", "orders-eu-worker"),
    ]
    stream, consumer = result.manifests
    assert stream["metadata"]["namespace"] == "apps"
    assert stream["spec"] == {
        "name": "Orders_EU",
        "consumerLimits": {"maxAckPending": 10},
        "adoption": "IfUnowned",
        "connectionRef": "hub",
    }
    assert consumer["spec"] == {
        "durableName": "Worker",
        "adoption": "IfUnowned",
        "connectionRef": "hub",
        "streamRef": "orders-eu",
    }
    notes = "\n".join(result.notes)
    assert "OWNED: it is already managed by ns/owned" in notes
    assert "Orders_EU/eph: it is ephemeral" in notes


def server_kv(bucket: str, **changes: Any) -> dict[str, Any]:
    """A bucket's stream as nats.go (prepareKeyValueConfig) makes it with nothing but a name."""
    conventions = {
        "subjects": [f"$KV.{bucket}.>"],
        "max_msgs_per_subject": 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "allow_direct": True,
    }
    return server_stream(f"KV_{bucket}", **(conventions | changes))


def server_obj(bucket: str, **changes: Any) -> dict[str, Any]:
    """An object store's stream as nats.go (prepareObjectStoreConfig) makes it."""
    conventions = {
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
    }
    return server_stream(f"OBJ_{bucket}", **(conventions | changes))


def test_a_default_bucket_exports_only_its_bucket_name() -> None:
    for mapping, config in ((KEY_VALUES, server_kv("settings")), (OBJECT_STORES, server_obj("f"))):
        exported = mapping.export(config)
        assert exported.body() == {"bucket": config["name"].partition("_")[2]}
        assert exported.unexpressed == []


def test_a_nats_py_bucket_keeps_direct_off_and_its_message_ttls_follow() -> None:
    # nats-py sends no allow_direct (off) and turns message TTLs on, which nothing turns off.
    exported = KEY_VALUES.export(server_kv("py", allow_direct=False, allow_msg_ttl=True))
    assert exported.body() == {"bucket": "py", "direct": False}
    assert exported.unexpressed == []


def test_a_bucket_exports_what_differs_under_its_own_field_names() -> None:
    config = server_kv(
        "cfg",
        description="settings",
        max_msgs_per_subject=5,
        max_age=3600 * S,
        max_msg_size=1024,
        max_bytes=1 << 20,
        storage="memory",
        num_replicas=1,
        compression="s2",
        allow_msg_ttl=True,
        subject_delete_marker_ttl=60 * S,
        republish={"src": "$KV.cfg.>", "dest": "changes.>", "headers_only": True},
        metadata={**SERVER_METADATA, "team": "a"},
    )
    exported = KEY_VALUES.export(config)
    assert exported.body() == {
        "bucket": "cfg",
        "description": "settings",
        "history": 5,
        "ttl": "1h",
        "maxValueSize": 1024,
        "maxBytes": 1048576,
        "storage": "memory",
        "republish": {"source": "$KV.cfg.>", "destination": "changes.>", "headersOnly": True},
        "compression": True,
        "limitMarkerTtl": "1m",
        "metadata": {"team": "a"},
    }
    assert exported.unexpressed == []
    store = OBJECT_STORES.export(
        server_obj("files", description="d", max_age=60 * S, duplicate_window=60 * S)
    )
    assert store.body() == {"bucket": "files", "description": "d", "ttl": "1m"}
    assert store.unexpressed == []


def test_mirror_and_source_buckets_are_named_by_bucket() -> None:
    # nats.go sends its 2m window to a mirror too, which keeps it; so does a KeyValue.
    mirror = server_kv(
        "copy",
        subjects=[],
        duplicate_window=120 * S,
        mirror={"name": "KV_origin"},
        mirror_direct=True,
    )
    exported = KEY_VALUES.export(mirror)
    assert exported.body() == {"bucket": "copy", "mirror": {"name": "origin"}}
    assert exported.unexpressed == []
    # A mirror without one (made by hand) is not what any client makes: a KeyValue says 2m.
    unexpressed = KEY_VALUES.export({**mirror, "duplicate_window": 0}).unexpressed
    assert [difference.field for difference in unexpressed] == ["duplicate_window"]
    sourced = server_kv(
        "all",
        sources=[
            {
                "name": "KV_a",
                "subject_transforms": [{"src": "$KV.a.>", "dest": "$KV.all.>"}],
            },
            {"name": "KV_b", "subject_transforms": [{"src": "$KV.b.x.>", "dest": "$KV.all.x.>"}]},
        ],
    )
    exported = KEY_VALUES.export(sourced)
    assert exported.body()["sources"] == [
        {"name": "a"},
        {"name": "KV_b", "subjectTransforms": [{"source": "$KV.b.x.>", "dest": "$KV.all.x.>"}]},
    ]
    assert exported.unexpressed == []


def test_a_mixed_account_exports_each_stream_as_the_kind_that_says_it_exactly() -> None:
    watcher = {**server_consumer("w"), "durable_name": ""}
    streams = [
        StreamWithConsumers(
            {"config": server_kv("orders")},
            [
                {"name": "watcher", "config": watcher},
                {"name": "audit", "config": server_consumer("audit")},
            ],
        ),
        StreamWithConsumers({"config": server_obj("orders")}),
        StreamWithConsumers(
            {"config": server_stream("ORDERS")},
            [{"name": "audit", "config": server_consumer("audit")}],
        ),
        # Made by hand under a bucket's name: no KeyValue says it, a Stream does.
        StreamWithConsumers({"config": server_stream("KV_hand")}),
        # nats-py's republish from ">": a KeyValue says it as it is.
        StreamWithConsumers({"config": server_kv("wide", republish={"src": ">", "dest": "w.>"})}),
    ]
    result = export_account(reversed(streams), namespace="apps")
    assert [(m["kind"], m["metadata"]["name"]) for m in result.manifests] == [
        ("Stream", "kv-hand"),
        ("KeyValue", "orders"),
        ("KeyValue", "wide"),
        ("ObjectStore", "orders"),
        ("Stream", "orders"),
        ("Consumer", "orders-audit"),
        ("Consumer", "orders-audit-376264e2"),
    ]
    kv_audit, stream_audit = result.manifests[-2:]
    assert kv_audit["spec"]["streamName"] == "KV_orders" and "streamRef" not in kv_audit["spec"]
    assert stream_audit["spec"]["streamRef"] == "orders"
    assert result.manifests[2]["spec"]["republish"] == {"destination": "w.>"}  # ">" the default
    notes = "\n".join(result.notes)
    assert "KV_hand exported as a Stream, not as a KeyValue: history: Input should be" in notes
    assert "KV_wide" not in notes
    assert "KV_orders/watcher: it is ephemeral" in notes
    assert export_account(streams, namespace="apps").manifests == result.manifests
