"""Onboarding round trips against the real servers: objects made in NATS directly (raw JSON, as
a person or NACK would), exported or converted from NACK manifests, applied to the real API
server, adopted by the operator process. The only change allowed on the server is the recorded
owner: one update per object, every other field as it was."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from kubernetes import client
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, ObjectStoreConfig, RePublish, StorageType

from jetstream_devtools.natsserver import NatsServer
from jetstream_operator.marks import CONNECTION_SECRET_LABEL
from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY

from .figures import ApiAudit
from .helpers import Resources, eventually, is_ready
from .made_by_clients import S, comparable, nats_go_kv, nats_go_obj

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


def stream_configs(p: str) -> list[dict[str, Any]]:
    """Many field combinations, each as a create request the server accepts."""
    return [
        {"name": f"{p}_PLAIN"},
        {
            "name": f"{p}_MEM",
            "subjects": [f"{p}.mem.>"],
            "storage": "memory",
            "description": "orders",
            "max_age": 3600 * S,
            "duplicate_window": 30 * S,
            "max_msgs_per_subject": 5,
            "discard": "new",
            "discard_new_per_subject": True,
            "metadata": {"team": "a"},
        },
        {
            "name": f"{p}_WQ",
            "subjects": [f"{p}.wq.*"],
            "retention": "workqueue",
            "max_msgs": 1000,
            "max_bytes": 1 << 20,
            "max_msg_size": 4096,
            "max_consumers": 10,
            "compression": "s2",
            "allow_direct": True,
            "deny_delete": True,
            "deny_purge": True,
            "no_ack": True,
        },
        {
            "name": f"{p}_TTL",
            "subjects": [f"{p}.ttl.>"],
            "retention": "interest",
            "allow_rollup_hdrs": True,
            "allow_msg_ttl": True,
            "subject_delete_marker_ttl": 60 * S,
            "subject_transform": {"src": f"{p}.ttl.>", "dest": f"{p}.kept.>"},
            "republish": {"src": f"{p}.ttl.>", "dest": f"{p}.copy.>", "headers_only": True},
            "consumer_limits": {"max_ack_pending": 50, "inactive_threshold": 3600 * S},
        },
        {"name": f"{p}_SHORT", "subjects": [f"{p}.short"], "max_age": 30 * S, "allow_atomic": True},
        {
            "name": f"{p}_MIRROR",
            "mirror": {"name": f"{p}_PLAIN", "filter_subject": f"{p}_PLAIN", "opt_start_seq": 2},
        },
        {
            "name": f"{p}_SOURCED",
            "sources": [
                {"name": f"{p}_MEM"},
                {
                    "name": f"{p}_SHORT",
                    "subject_transforms": [{"src": f"{p}.short", "dest": f"{p}.src.short"}],
                },
            ],
        },
        {
            "name": f"{p}_NEW",
            "subjects": [f"{p}.new.>"],
            "allow_msg_schedules": True,
            "allow_rollup_hdrs": True,
            "persist_mode": "async",
            "first_seq": 100,
        },
        {"name": f"{p}_COUNTER", "subjects": [f"{p}.counter"], "allow_msg_counter": True},
        {
            "name": f"{p}_EXT",
            "duplicate_window": 120 * S,
            "sources": [
                {
                    "name": "ELSEWHERE",
                    "opt_start_time": "2024-05-01T10:00:00Z",
                    "filter_subject": "events.>",
                    "external": {"api": "$JS.hub.API", "deliver": "deliver.hub"},
                }
            ],
        },
    ]


def consumer_configs(p: str) -> list[tuple[str, dict[str, Any]]]:
    """(stream, consumer config) pairs over pull, push, priority and start options."""
    later = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = "2024-05-01T10:00:00Z"
    mem = f"{p}_MEM"
    return [
        (mem, {"durable_name": "plain"}),
        (
            mem,
            {
                "durable_name": "tuned",
                "description": "billing",
                "deliver_policy": "new",
                "ack_policy": "all",
                "ack_wait": 10 * S,
                "max_deliver": 5,
                "filter_subject": f"{p}.mem.a",
                "replay_policy": "original",
                "sample_freq": "50%",
                "max_ack_pending": 20,
                "max_waiting": 100,
                "max_batch": 10,
                "max_expires": 30 * S,
                "max_bytes": 1024,
                "inactive_threshold": 3600 * S,
                "headers_only": True,
                "metadata": {"owner": "billing"},
            },
        ),
        (mem, {"durable_name": "backoff", "max_deliver": 4, "backoff": [S, 2 * S]}),
        (
            mem,
            {
                "durable_name": "pushed",
                "deliver_subject": f"{p}.deliver.a",
                "deliver_group": "workers",
                "ack_policy": "none",
                "deliver_policy": "last",
                "rate_limit_bps": 1_000_000,
            },
        ),
        (
            mem,
            {
                "durable_name": "flow",
                "deliver_subject": f"{p}.deliver.b",
                "flow_control": True,
                "idle_heartbeat": 5 * S,
                "mem_storage": True,
                "num_replicas": 1,
            },
        ),
        (mem, {"durable_name": "byseq", "deliver_policy": "by_start_sequence", "opt_start_seq": 3}),
        (
            mem,
            {
                "durable_name": "bytime",
                "deliver_policy": "by_start_time",
                "opt_start_time": earlier,
            },
        ),
        (
            mem,
            {
                "durable_name": "perSubject",
                "deliver_policy": "last_per_subject",
                "filter_subjects": [f"{p}.mem.a", f"{p}.mem.b"],
            },
        ),
        (
            mem,
            {
                "durable_name": "pinned",
                "priority_policy": "pinned_client",
                "priority_groups": ["jobs"],
                "priority_timeout": 10 * S,
            },
        ),
        (
            mem,
            {"durable_name": "overflow", "priority_policy": "overflow", "priority_groups": ["a"]},
        ),
        (mem, {"durable_name": "paused", "pause_until": later}),
        (f"{p}_WQ", {"durable_name": "worker", "filter_subject": f"{p}.wq.a"}),
        (f"{p}_TTL", {"durable_name": "limited"}),
        (f"{p}_TTL", {"durable_name": "unacked", "ack_policy": "none"}),
    ]


async def snapshot(api: JetStreamApi, prefix: str) -> dict[str, dict[str, Any]]:
    """Every config of the test's streams (its prefix, or a bucket's stream with it) and their
    consumers, by "stream" and "stream/consumer"."""
    configs: dict[str, dict[str, Any]] = {}
    for info in await api.list_streams():
        name = info["config"]["name"]
        if not name.removeprefix("KV_").removeprefix("OBJ_").startswith(f"{prefix}_"):
            continue
        configs[name] = info["config"]
        for consumer in await api.list_consumers(name):
            configs[f"{name}/{consumer['name']}"] = consumer["config"]
    return configs


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetstream_operator.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


async def apply_and_wait(resources: Resources, manifests: list[dict[str, Any]]) -> None:
    for item in manifests:
        resources.create(f"{item['kind'].lower()}s", item)

    async def all_ready() -> bool:
        return all(
            is_ready(resources.get(f"{item['kind'].lower()}s", item["metadata"]["name"]))
            for item in manifests
        )

    await eventually(all_ready, timeout=90, interval=0.5)


async def adopt(
    nc: Client, resources: Resources, manifests: list[dict[str, Any]], prefix: str
) -> tuple[dict[str, dict[str, Any]], ApiAudit]:
    """Apply the manifests and wait for Ready under the server's API audit; the configs after."""
    audit = await ApiAudit().start(nc)
    try:
        await apply_and_wait(resources, manifests)
        await asyncio.sleep(2)  # a resync pass after Ready must not write either
        return await snapshot(JetStreamApi(nc), prefix), audit
    finally:
        await audit.stop()


def assert_only_owner_changed(
    before: dict[str, dict[str, Any]],
    after: dict[str, dict[str, Any]],
    audit: ApiAudit,
    namespace: str,
) -> None:
    assert set(after) == set(before)
    for key, config in before.items():
        assert comparable(after[key]) == comparable(config), key
        owner = (after[key].get("metadata") or {}).get(OWNER_METADATA_KEY, "")
        assert owner.startswith(f"{namespace}/"), key
        stream, _, consumer = key.partition("/")
        # A first pass creates without looking; the server refuses, as the object is there.
        if consumer:
            # A consumer update is a CONSUMER.CREATE with action "update".
            creates = audit.count(f"CONSUMER.CREATE.{stream}", consumer)
            refused = audit.count(f"CONSUMER.CREATE.{stream}", consumer, refused=True)
            assert (creates, refused) == (2, 1), key
            assert audit.count(f"CONSUMER.DELETE.{stream}", consumer) == 0, key
        else:
            assert audit.count("STREAM.UPDATE", stream) == 1, key
            assert audit.count("STREAM.CREATE", stream) == 1, key
            assert audit.count("STREAM.CREATE", stream, refused=True) == 1, key
            assert audit.count("STREAM.DELETE", stream) == 0, key


async def test_exported_account_is_adopted_with_only_the_owner_recorded(
    nc: Client, resources: Resources, namespace: str, nats_server: Any, tmp_path: Path
) -> None:
    prefix = "EX" + namespace.split("-", 1)[0].upper()
    api = JetStreamApi(nc)
    for config in stream_configs(prefix):
        await api.request(f"STREAM.CREATE.{config['name']}", config)
    sealed = {"name": f"{prefix}_SEALED", "subjects": [f"{prefix}.sealed"], "max_age": 60 * S}
    await api.request(f"STREAM.CREATE.{sealed['name']}", sealed)
    await api.request(f"STREAM.UPDATE.{sealed['name']}", {**sealed, "sealed": True})
    for stream, config in consumer_configs(prefix):
        # Raw JSON without ack_policy means none; most here are explicit, as clients make them.
        config = {"ack_policy": "explicit", **config, "name": config["durable_name"]}
        body = {"stream_name": stream, "config": config}
        await api.request(f"CONSUMER.CREATE.{stream}.{config['durable_name']}", body)
    ephemeral = {"stream_name": f"{prefix}_PLAIN", "config": {"inactive_threshold": 60 * S}}
    await api.request(f"CONSUMER.CREATE.{prefix}_PLAIN", ephemeral)
    # A stream made by hand under a bucket's name: exported as the Stream it is.
    await api.request(f"STREAM.CREATE.KV_{prefix}_HAND", {"name": f"KV_{prefix}_HAND"})
    before = await snapshot(api, prefix)

    out_dir = tmp_path / "manifests"
    _, notes = await run_cli(
        "export",
        "--server",
        nats_server.url,
        "--match",
        f"*{prefix}*",
        "--namespace",
        namespace,
        "--output-dir",
        str(out_dir),
    )
    assert f"stream KV_{prefix}_HAND exported as a Stream, not as a KeyValue: history" in notes
    assert "ephemeral" in notes
    assert "not reproduced exactly" not in notes
    manifests = [yaml.safe_load(path.read_text()) for path in sorted(out_dir.iterdir())]
    assert {item["kind"] for item in manifests} == {"Stream", "Consumer"}
    kinds = [item["kind"] for item in manifests]
    assert kinds.count("Stream") == len(stream_configs(prefix)) + 2  # sealed, KV_ by hand
    assert kinds.count("Consumer") == len(consumer_configs(prefix))
    stdout, _ = await run_cli(
        "export", "--server", nats_server.url, "--match", f"*{prefix}_*", "--namespace", namespace
    )
    assert sorted(map(str, yaml.safe_load_all(stdout))) == sorted(map(str, manifests))

    after, audit = await adopt(nc, resources, manifests, prefix)
    for key in [key for key in before if key.startswith(f"{prefix}_PLAIN/")]:
        del before[key]  # the ephemeral consumer, not exported
        after.pop(key, None)
    assert_only_owner_changed(before, after, audit, namespace)


async def make_buckets(nc: Client, p: str) -> None:
    """Buckets and stores over many field combinations, made the way the clients make them."""
    js, api = nc.jetstream(), JetStreamApi(nc)
    await js.create_key_value(KeyValueConfig(bucket=f"{p}_plain"))
    rich = f"{p}_rich"
    await js.create_key_value(
        KeyValueConfig(
            bucket=rich,
            description="settings",
            history=5,
            ttl=3600,
            max_value_size=1024,
            max_bytes=1 << 20,
            storage=StorageType.MEMORY,
            republish=RePublish(src=f"$KV.{rich}.>", dest=f"{p}.changes.>", headers_only=True),
            direct=True,
            limit_marker_ttl=60,
        )
    )
    await js.create_key_value(KeyValueConfig(bucket=f"{p}_short", ttl=30, history=64))
    # Republished from ">", nats-py's and the server's default source.
    wide = KeyValueConfig(bucket=f"{p}_wide", republish=RePublish(dest=f"{p}.w.>"))
    await js.create_key_value(wide)
    for request in (
        nats_go_kv(f"{p}_packed", compression="s2", metadata={"team": "a"}, max_age=60 * S),
        nats_go_kv(
            f"{p}_copy",
            subjects=[],
            mirror={"name": f"KV_{p}_plain"},
            mirror_direct=True,
        ),
        nats_go_kv(
            f"{p}_all",
            sources=[
                {
                    "name": f"KV_{origin}",
                    "subject_transforms": [{"src": f"$KV.{origin}.>", "dest": f"$KV.{p}_all.>"}],
                }
                for origin in (f"{p}_plain", f"{p}_packed")
            ],
        ),
        nats_go_obj(f"{p}_blobs", compression="s2", metadata={"kind": "blobs"}),
    ):
        await api.request(f"STREAM.CREATE.{request['name']}", request)
    await js.create_object_store(f"{p}_files")
    await js.create_object_store(
        f"{p}_media",
        ObjectStoreConfig(
            description="media", ttl=60, max_bytes=1 << 20, storage=StorageType.MEMORY
        ),
    )
    kv = await js.key_value(f"{p}_plain")
    await kv.put("k", b"v")
    await (await js.object_store(f"{p}_files")).put("o", b"data")
    # A durable consumer someone made on a bucket's stream: named by streamName.
    body = {"stream_name": f"KV_{p}_plain", "config": {"durable_name": "audit", "name": "audit"}}
    await api.request(f"CONSUMER.CREATE.KV_{p}_plain.audit", {**body})


async def test_client_made_buckets_are_exported_and_adopted_with_only_the_owner_recorded(
    nc: Client, resources: Resources, namespace: str, nats_server: Any
) -> None:
    prefix = "BK" + namespace.split("-", 1)[0].upper()
    await make_buckets(nc, prefix)
    api = JetStreamApi(nc)
    before = await snapshot(api, prefix)
    assert len(before) == 11  # 7 buckets, 3 stores, 1 consumer

    stdout, notes = await run_cli(
        "export", "--server", nats_server.url, "--match", f"*{prefix}_*", "--namespace", namespace
    )
    manifests = list(yaml.safe_load_all(stdout))
    kinds = {item["spec"].get("bucket") or item["spec"].get("name"): item for item in manifests}
    assert "exported as a Stream" not in notes
    assert "not reproduced exactly" not in notes
    assert sorted(item["kind"] for item in manifests) == sorted(
        ["KeyValue"] * 7 + ["ObjectStore"] * 3 + ["Consumer"]
    )
    assert kinds[f"{prefix}_plain"]["spec"] == {
        "bucket": f"{prefix}_plain",
        "direct": False,  # nats-py leaves direct gets off
        "adoption": "IfUnowned",
    }
    assert kinds[f"{prefix}_packed"]["spec"] == {
        "bucket": f"{prefix}_packed",
        "ttl": "1m",
        "compression": True,
        "metadata": {"team": "a"},
        "adoption": "IfUnowned",
    }
    # nats.go's 2m duplicate window on a mirror is a KeyValue's too.
    assert kinds[f"{prefix}_copy"]["spec"] == {
        "bucket": f"{prefix}_copy",
        "mirror": {"name": f"{prefix}_plain"},
        "adoption": "IfUnowned",
    }
    assert kinds[f"{prefix}_wide"]["spec"]["republish"] == {"destination": f"{prefix}.w.>"}
    assert kinds[f"{prefix}_all"]["spec"]["sources"] == [
        {"name": f"{prefix}_plain"},
        {"name": f"{prefix}_packed"},
    ]
    assert kinds[f"{prefix}_files"]["spec"] == {
        "bucket": f"{prefix}_files",
        "adoption": "IfUnowned",
    }
    (consumer,) = [item for item in manifests if item["kind"] == "Consumer"]
    assert consumer["spec"]["streamName"] == f"KV_{prefix}_plain"

    after, audit = await adopt(nc, resources, manifests, prefix)
    assert_only_owner_changed(before, after, audit, namespace)
    assert (await (await nc.jetstream().key_value(f"{prefix}_plain")).get("k")).value == b"v"


PASSWORD = "export-Pa55-w0rd"


@pytest.fixture(scope="module")
def password_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    extra = f"""
accounts {{ A: {{ jetstream: enabled, users: [ {{user: alice, password: "{PASSWORD}"}} ] }} }}
"""
    server = NatsServer(tmp_path_factory.mktemp("nats-export"), extra_config=extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_export_through_a_nats_connection_and_its_secret(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    kubeconfig: Path,
    password_nats: NatsServer,
) -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="alice", labels={CONNECTION_SECRET_LABEL: "true"}),
            string_data={"username": "alice", "password": PASSWORD},
        ),
    )
    resources.create(
        "natsconnections",
        {
            "kind": "NatsConnection",
            "metadata": {"name": "account-a"},
            "spec": {
                "servers": [password_nats.url],
                "allowPlaintext": True,  # loopback, no TLS
                "userPassword": {"secretName": "alice"},
            },
        },
    )
    nc = await nats.connect(password_nats.url, user="alice", password=PASSWORD)
    try:
        api = JetStreamApi(nc)
        await api.request("STREAM.CREATE.CN_EVENTS", {"name": "CN_EVENTS", "max_msgs": 10})
        body = {"stream_name": "CN_EVENTS", "config": {"durable_name": "reader", "name": "reader"}}
        await api.request("CONSUMER.CREATE.CN_EVENTS.reader", body)
        before = await snapshot(api, "CN")
        stdout, _ = await run_cli(
            "export", "--connection", f"{namespace}/account-a", env={"KUBECONFIG": str(kubeconfig)}
        )
        manifests = list(yaml.safe_load_all(stdout))
        assert [(m["kind"], m["metadata"]) for m in manifests] == [
            ("Stream", {"name": "cn-events", "namespace": namespace}),
            ("Consumer", {"name": "cn-events-reader", "namespace": namespace}),
        ]
        assert all(m["spec"]["connectionRef"] == "account-a" for m in manifests)
        audit = await ApiAudit().start(nc)
        try:
            await apply_and_wait(resources, manifests)
            after = await snapshot(api, "CN")
        finally:
            await audit.stop()
    finally:
        await nc.close()
    assert_only_owner_changed(before, after, audit, namespace)
