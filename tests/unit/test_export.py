"""Export and NACK conversion as pure logic: server configs and NACK manifests in, manifests out.

The server configs here are shaped as nats-server 2.12 answers STREAM.INFO / CONSUMER.INFO (every
default filled in, `_nats.*` metadata); the integration tests run the same against a real server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jetstream_operator.api.connection import NatsConnectionSpec
from jetstream_operator.cli import main
from jetstream_operator.export.kinds import CONSUMERS, KEY_VALUES, OBJECT_STORES, STREAMS
from jetstream_operator.export.manifests import (
    NameBook,
    StreamWithConsumers,
    export_account,
    kubernetes_name,
)
from jetstream_operator.export.nack import convert_documents

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


NACK_STREAM = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "Stream",
    "metadata": {
        "name": "orders",
        "namespace": "apps",
        "labels": {"team": "a"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
    },
    # As stored by the API server with NACK's CRD defaults filled in, storage left out.
    "spec": {
        "name": "ORDERS",
        "subjects": ["orders.*"],
        "retention": "limits",
        "maxConsumers": -1,
        "maxMsgs": -1,
        "maxBytes": -1,
        "maxAge": "",
        "maxMsgsPerSubject": 0,
        "discard": "old",
        "compression": "",
        "firstSequence": 0,
        "replicas": 1,
        "servers": ["nats://nats:4222"],
        "creds": "",
        "preventDelete": False,
    },
}
NACK_CONSUMER = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "Consumer",
    "metadata": {"name": "worker"},
    "spec": {"durableName": "worker", "streamName": "ORDERS", "priorityPolicy": ""},
}
NACK_TEMPLATE = {
    "apiVersion": "jetstream.nats.io/v1beta2",
    "kind": "StreamTemplate",
    "metadata": {"name": "tpl"},
    "spec": {"name": "TPL"},
}


def test_nack_defaults_are_made_explicit() -> None:
    conversion = convert_documents([NACK_STREAM, NACK_CONSUMER])
    stream, consumer = conversion.manifests
    assert stream["apiVersion"] == "jetstream-operator.io/v1alpha1"
    assert stream["metadata"] == {"name": "orders", "namespace": "apps", "labels": {"team": "a"}}
    assert stream["spec"] == {
        "name": "ORDERS",
        "subjects": ["orders.*"],
        "retention": "limits",
        "maxConsumers": -1,
        "maxMsgs": -1,
        "maxBytes": -1,
        "discard": "old",
        "replicas": 1,
        "preventDelete": False,
        "storage": "memory",
        "adoption": "IfUnowned",
    }
    assert consumer["spec"] == {
        "durableName": "worker",
        "streamName": "ORDERS",
        "ackPolicy": "none",
        "ackWait": "1ns",
        "adoption": "IfUnowned",
    }
    notes = "\n".join(conversion.notes)
    assert "Stream apps/orders: spec.servers left out" in notes
    assert "spec.storage: memory written out" in notes
    assert conversion.refused == []


def test_nack_values_that_are_set_are_kept() -> None:
    stream = {**NACK_STREAM, "spec": {**NACK_STREAM["spec"], "storage": "file"}}  # type: ignore[dict-item]
    consumer = {
        **NACK_CONSUMER,
        "spec": {**NACK_CONSUMER["spec"], "ackPolicy": "explicit", "ackWait": "30s"},  # type: ignore[dict-item]
    }
    converted = convert_documents([{"kind": "List", "items": [stream, consumer]}]).manifests
    assert converted[0]["spec"]["storage"] == "file"
    assert converted[1]["spec"]["ackPolicy"] == "explicit"
    assert converted[1]["spec"]["ackWait"] == "30s"


def nack(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jetstream.nats.io/v1beta2",
        "kind": kind,
        "metadata": {"name": name, "namespace": "apps"},
        "spec": spec,
    }


# As the API server stores them with NACK's CRD defaults filled in (no storage default).
NACK_CRD_DEFAULTS = {
    "creds": "",
    "nkey": "",
    "servers": [],
    "preventDelete": False,
    "preventUpdate": False,
    "tlsFirst": False,
    "replicas": 1,
}


def test_nack_buckets_convert_with_their_defaults_and_nanoseconds_made_ours() -> None:
    kv = nack(
        "KeyValue",
        "settings",
        {
            **NACK_CRD_DEFAULTS,
            "bucket": "settings",
            "history": 0,
            "maxValueSize": 0,
            "ttl": "",
            "limitMarkerTtl": 90 * S,
            "account": "hub",
            "republish": {"destination": "changes.>"},
        },
    )
    store = nack("ObjectStore", "files", {**NACK_CRD_DEFAULTS, "bucket": "files", "maxBytes": 0})
    conversion = convert_documents([kv, store])
    assert conversion.refused == []
    converted_kv, converted_store = conversion.manifests
    assert converted_kv["kind"] == "KeyValue"
    assert converted_kv["spec"] == {
        "preventDelete": False,
        "preventUpdate": False,
        "replicas": 1,
        "bucket": "settings",
        "limitMarkerTtl": "1m30s",
        "connectionRef": "hub",
        "republish": {"destination": "changes.>"},
        "adoption": "IfUnowned",
    }
    assert converted_store["spec"] == {
        "preventDelete": False,
        "preventUpdate": False,
        "replicas": 1,
        "bucket": "files",
        "adoption": "IfUnowned",
    }
    notes = "\n".join(conversion.notes)
    assert "KeyValue apps/settings: spec.account hub became connectionRef: hub" in notes
    assert "republish" not in notes  # NACK's '>' is ours
    assert "storage" not in notes  # NACK's buckets are file storage, as ours


def test_a_nack_account_becomes_a_nats_connection_reading_the_same_secrets() -> None:
    account = nack(
        "Account",
        "hub",
        {
            "servers": ["nats://nats.nats.svc:4222"],
            "tls": {"secret": {"name": "hub-tls"}, "ca": "ca.crt", "cert": "tls.crt", "key": "k"},
            "creds": {"secret": {"name": "hub-creds"}, "file": "user.creds"},
            "tlsFirst": False,
        },
    )
    conversion = convert_documents([account])
    (connection,) = conversion.manifests
    assert connection["kind"] == "NatsConnection"
    assert connection["metadata"] == {"name": "hub", "namespace": "apps"}
    assert connection["spec"] == {
        "servers": ["nats://nats.nats.svc:4222"],
        "tls": {"secretName": "hub-tls", "caKey": "ca.crt", "certKey": "tls.crt", "keyKey": "k"},
        "creds": {"secretName": "hub-creds", "key": "user.creds"},
    }
    assert "reads Secret hub-creds, hub-tls under the same keys" in conversion.notes[0]
    user = nack(
        "Account",
        "u",
        {
            "servers": ["nats://n:4222"],
            "user": {"secret": {"name": "s"}, "user": "name", "password": "pw"},
        },
    )
    assert convert_documents([user]).manifests[0]["spec"]["userPassword"] == {
        "secretName": "s",
        "usernameKey": "name",
        "passwordKey": "pw",
    }
    no_ca = nack("Account", "sys", {"servers": ["tls://n:4222"], "tls": {"secret": {"name": "t"}}})
    tls = convert_documents([no_ca]).manifests[0]["spec"]["tls"]
    assert tls == {"secretName": "t", "caKey": ""}  # the system CAs, as NACK verified
    spec = NatsConnectionSpec.model_validate({"servers": ["tls://n"], "tls": tls})
    assert spec.tls is not None and spec.tls.ca_key is None


def test_nack_kinds_without_a_counterpart_are_refused_by_name() -> None:
    invalid = {**NACK_CONSUMER, "spec": {"durableName": "a.b", "streamName": "S"}}
    servers = {"servers": ["nats://n:4222"]}
    documents = [
        nack("StreamTemplate", "t", {"name": "T"}),
        invalid,
        {"apiVersion": "v1", "kind": "Secret"},
        nack("Account", "no-servers", {"token": {"secret": {"name": "s"}, "token": "t"}}),
        nack("Account", "mounted", {**servers, "creds": {"file": "/etc/nack/a.creds"}}),
        nack(
            "Account",
            "two",
            {
                **servers,
                "token": {"secret": {"name": "s"}, "token": "t"},
                "nkey": {"secret": {"name": "s"}, "seed": "seed"},
            },
        ),
        nack("KeyValue", "bad", {"bucket": "a.b"}),
    ]
    conversion = convert_documents(documents)
    assert conversion.manifests == []
    assert conversion.refused[0] == (
        "StreamTemplate apps/t: not convertible "
        "(only Stream, Consumer, KeyValue, ObjectStore, Account are)"
    )
    assert "Consumer worker: its spec is not valid here" in conversion.refused[1]
    assert "ignored Secret" in conversion.notes[0]
    assert (
        "Account apps/no-servers: no spec.servers: NACK used its controller's"
        in (conversion.refused[2])
    )
    assert (
        "Account apps/mounted: spec.creds names files mounted in NACK's controller"
        in (conversion.refused[3])
    )
    assert conversion.refused[4] == (
        "Account apps/two: it combines nkey, token; a NatsConnection uses one"
    )
    assert "KeyValue apps/bad: its spec is not valid here" in conversion.refused[5]


def test_from_nack_command_writes_files_and_fails_only_when_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "nack"
    source.mkdir()
    documents = [NACK_STREAM, NACK_CONSUMER, NACK_TEMPLATE]
    (source / "all.yaml").write_text(yaml.safe_dump_all(documents))
    assert main(["export", "--from-nack", str(source)]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["Stream", "Consumer"]
    out = tmp_path / "out"
    assert main(["export", "--from-nack", str(source), "--output-dir", str(out), "--strict"]) == 1
    captured = capsys.readouterr()
    assert "not converted: StreamTemplate tpl" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["consumer-worker.yaml", "stream-orders.yaml"]
    assert yaml.safe_load((out / "stream-orders.yaml").read_text())["spec"]["storage"] == "memory"
