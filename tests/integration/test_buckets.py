"""KeyValue and ObjectStore resources against the real nats-server and operator: created as the
NATS clients create them (nats-py reads and writes them), updated live, drift repaired, live
state in status, adoption of buckets made by a client, and quiet once Ready (the server's own
API audit shows no write)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client
from nats.js.api import KeyValueConfig, RePublish

from jetstream_operator.nats.jsapi import JetStreamApi
from jetstream_operator.reconcile.ownership import OWNER_METADATA_KEY

from .figures import ApiAudit, apiserver_writes, difference
from .helpers import Resources, condition, eventually, is_ready
from .made_by_clients import S, comparable, nats_go_kv

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

QUIET_SECONDS = 7.0
"""More than three resyncs of the session operator (2s)."""


def bucket_name(namespace: str, suffix: str) -> str:
    return f"{namespace.replace('-', '_')}_{suffix}"


async def ready(resources: Resources, plural: str, name: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        resource = resources.get(plural, name)
        return resource if is_ready(resource) else None

    found = await eventually(probe, timeout=30)
    assert found is not None, condition(resources.get(plural, name))
    return found


async def stream_config(nc: Client, stream: str) -> dict[str, Any]:
    info = await JetStreamApi(nc).stream_info(stream)
    assert info is not None, f"stream {stream} missing"
    return dict(info["config"])


BUCKET_RESOURCES = ("keyvalues", "objectstores")


async def quiet_writes(nc: Client, streams: list[str], control_plane: Any = None) -> int:
    """Writes over several resyncs, as the servers report them: JetStream writes to these
    streams, and (given the control plane) Kubernetes writes to buckets and stores."""
    audit = await ApiAudit().start(nc)
    before = apiserver_writes(control_plane, BUCKET_RESOURCES) if control_plane else None
    try:
        await asyncio.sleep(QUIET_SECONDS)
        await nc.flush()
    finally:
        await audit.stop()
    writes = 0
    if before is not None:
        changed = difference(apiserver_writes(control_plane, BUCKET_RESOURCES), before)
        writes += sum(changed.values())
    for stream in streams:
        for operation in ("STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE"):
            writes += audit.count(operation, stream)
    return writes


async def test_key_value_lifecycle(
    resources: Resources, namespace: str, nc: Client, control_plane: Any
) -> None:
    bucket = bucket_name(namespace, "settings")
    resources.create(
        "keyvalues",
        {
            "kind": "KeyValue",
            "metadata": {"name": "settings"},
            "spec": {"bucket": bucket, "history": 5, "ttl": "1h", "description": "app settings"},
        },
    )
    await ready(resources, "keyvalues", "settings")
    config = await stream_config(nc, f"KV_{bucket}")
    assert config["subjects"] == [f"$KV.{bucket}.>"]
    assert config["max_msgs_per_subject"] == 5 and config["max_age"] == 3_600_000_000_000
    assert config["allow_rollup_hdrs"] and config["deny_delete"] and config["allow_direct"]
    assert config["discard"] == "new"
    assert config["metadata"][OWNER_METADATA_KEY].split("/")[:2] == [namespace, "settings"]

    kv = await nc.jetstream().key_value(bucket)  # what a client sees is a bucket
    await kv.put("color", b"blue")
    await kv.put("color", b"green")
    await kv.put("size", b"XL")
    assert (await kv.get("color")).value == b"green"

    async def counted() -> dict[str, Any] | None:
        status = (resources.get("keyvalues", "settings") or {}).get("status") or {}
        return status if status.get("values") == 3 and status.get("keys") == 2 else None

    status = await eventually(counted, timeout=30)
    assert status["history"] == 5 and status["streamName"] == f"KV_{bucket}"
    assert await quiet_writes(nc, [f"KV_{bucket}"], control_plane) == 0

    resources.patch_spec("keyvalues", "settings", {"history": 10, "maxBytes": 1_000_000})

    async def updated() -> bool:
        config = await stream_config(nc, f"KV_{bucket}")
        return bool(config["max_msgs_per_subject"] == 10 and config["max_bytes"] == 1_000_000)

    await eventually(updated, timeout=30)
    assert (await kv.get("color")).value == b"green"  # nothing lost

    # Drift made outside Kubernetes is repaired.
    drifted = {**await stream_config(nc, f"KV_{bucket}"), "max_msgs_per_subject": 2}
    await JetStreamApi(nc).update_stream(drifted)

    async def repaired() -> bool:
        return bool((await stream_config(nc, f"KV_{bucket}"))["max_msgs_per_subject"] == 10)

    await eventually(repaired, timeout=30)

    resources.delete("keyvalues", "settings")

    async def gone() -> bool:
        return await JetStreamApi(nc).stream_info(f"KV_{bucket}") is None

    await eventually(gone, timeout=30)


async def test_buckets_made_by_clients_are_adopted_changing_only_the_owner(
    resources: Resources, namespace: str, nc: Client
) -> None:
    """A nats-py bucket republishing from ">" (no source given) and a mirror of it as nats.go
    makes it (2m duplicate window): adopted with one update each, every field as it was. nats-py
    turns message TTLs on, which nothing can turn off: the spec follows the server there."""
    bucket, mirror = bucket_name(namespace, "made_by_hand"), bucket_name(namespace, "hand_copy")
    republish = RePublish(dest=f"{namespace}.changes.>")
    kv = await nc.jetstream().create_key_value(
        KeyValueConfig(bucket=bucket, history=3, description="made by hand", republish=republish)
    )
    await kv.put("k", b"v")
    copy = nats_go_kv(mirror, subjects=[], mirror={"name": f"KV_{bucket}"}, mirror_direct=True)
    await JetStreamApi(nc).request(f"STREAM.CREATE.KV_{mirror}", copy)
    streams = [f"KV_{bucket}", f"KV_{mirror}"]
    before = {stream: await stream_config(nc, stream) for stream in streams}
    assert before[f"KV_{bucket}"]["republish"]["src"] == ">"
    assert before[f"KV_{mirror}"]["duplicate_window"] == 120 * S
    audit = await ApiAudit().start(nc)
    try:
        for name, spec in (
            (
                "adopted",
                {
                    "bucket": bucket,
                    "history": 3,
                    "description": "made by hand",
                    "direct": False,  # nats-py leaves direct gets off
                    "republish": {"destination": republish.dest},
                },
            ),
            ("adopted-copy", {"bucket": mirror, "mirror": {"name": bucket}}),
        ):
            resources.create(
                "keyvalues",
                {
                    "kind": "KeyValue",
                    "metadata": {"name": name},
                    "spec": {**spec, "adoption": "IfUnowned"},
                },
            )
        await ready(resources, "keyvalues", "adopted")
        await ready(resources, "keyvalues", "adopted-copy")
        await asyncio.sleep(QUIET_SECONDS)
        await nc.flush()
    finally:
        await audit.stop()
    for stream in streams:
        after = await stream_config(nc, stream)
        assert comparable(after) == comparable(before[stream]), stream
        assert after["metadata"][OWNER_METADATA_KEY].startswith(f"{namespace}/"), stream
        assert audit.count("STREAM.UPDATE", stream) == 1, stream  # the owner record
        # The first pass creates without looking; the server refuses, as the bucket is there.
        assert audit.count("STREAM.CREATE", stream) == 1, stream
        assert audit.count("STREAM.CREATE", stream, refused=True) == 1, stream
    assert (await kv.get("k")).value == b"v"

    resources.create(
        "keyvalues",
        {"kind": "KeyValue", "metadata": {"name": "intruder"}, "spec": {"bucket": bucket}},
    )

    async def conflict() -> str | None:
        found = condition(resources.get("keyvalues", "intruder"))
        return found.get("message") if found.get("reason") == "Conflict" else None

    message = await eventually(conflict, timeout=30)
    assert f"key-value bucket '{bucket}'" in message and "spec.bucket" in message


async def test_mirror_and_source_buckets_copy_keys(
    resources: Resources, namespace: str, nc: Client
) -> None:
    origin, mirror, merged = (bucket_name(namespace, n) for n in ("origin", "mirror", "merged"))
    resources.create(
        "keyvalues",
        {"kind": "KeyValue", "metadata": {"name": "origin"}, "spec": {"bucket": origin}},
    )
    await ready(resources, "keyvalues", "origin")
    resources.create(
        "keyvalues",
        {
            "kind": "KeyValue",
            "metadata": {"name": "mirror"},
            "spec": {"bucket": mirror, "mirror": {"name": origin}},
        },
    )
    resources.create(
        "keyvalues",
        {
            "kind": "KeyValue",
            "metadata": {"name": "merged"},
            "spec": {"bucket": merged, "sources": [{"name": origin}]},
        },
    )
    await ready(resources, "keyvalues", "mirror")
    await ready(resources, "keyvalues", "merged")
    js = nc.jetstream()
    await (await js.key_value(origin)).put("greeting", b"hello")

    async def copied() -> bool:
        try:
            merged_value = (await (await js.key_value(merged)).get("greeting")).value
        except Exception:
            return False
        mirror_info = await JetStreamApi(nc).stream_info(f"KV_{mirror}")
        return merged_value == b"hello" and (mirror_info or {})["state"]["messages"] == 1

    await eventually(copied, timeout=30)
    streams = [f"KV_{name}" for name in (origin, mirror, merged)]
    assert await quiet_writes(nc, streams) == 0


async def test_object_store_lifecycle(
    resources: Resources, namespace: str, nc: Client, control_plane: Any
) -> None:
    bucket = bucket_name(namespace, "files")
    resources.create(
        "objectstores",
        {
            "kind": "ObjectStore",
            "metadata": {"name": "files"},
            "spec": {"bucket": bucket, "ttl": "720h", "deletionPolicy": "Retain"},
        },
    )
    await ready(resources, "objectstores", "files")
    config = await stream_config(nc, f"OBJ_{bucket}")
    assert config["subjects"] == [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]
    assert config["allow_rollup_hdrs"] and config["allow_direct"] and config["discard"] == "new"

    store = await nc.jetstream().object_store(bucket)
    await store.put("report.csv", b"a,b\n1,2\n" * 1000)
    await store.put("logo.png", b"\x89PNG" * 100)

    async def counted() -> dict[str, Any] | None:
        status = (resources.get("objectstores", "files") or {}).get("status") or {}
        return status if status.get("objects") == 2 else None

    status = await eventually(counted, timeout=30)
    assert status["bytes"] > 8000 and status["sealed"] is False
    assert await quiet_writes(nc, [f"OBJ_{bucket}"], control_plane) == 0

    resources.patch_spec("objectstores", "files", {"replicas": 1, "maxBytes": 10_000_000})

    async def updated() -> bool:
        return bool((await stream_config(nc, f"OBJ_{bucket}"))["max_bytes"] == 10_000_000)

    await eventually(updated, timeout=30)

    resources.delete("objectstores", "files")

    async def released() -> bool:
        config = await stream_config(nc, f"OBJ_{bucket}")
        return OWNER_METADATA_KEY not in (config.get("metadata") or {})

    await eventually(released, timeout=30)  # retained, data and all, and no longer ours
    assert (await store.get("report.csv")).data == b"a,b\n1,2\n" * 1000
    await JetStreamApi(nc).delete_stream(f"OBJ_{bucket}")


@pytest.mark.parametrize(
    ("plural", "kind", "spec", "change", "message"),
    [
        ("keyvalues", "KeyValue", {}, {"bucket": "other"}, "spec.bucket is immutable"),
        ("keyvalues", "KeyValue", {}, {"storage": "memory"}, "spec.storage cannot change"),
        ("keyvalues", "KeyValue", {}, {"mirror": {"name": "x"}}, "spec.mirror cannot be added"),
        (
            "keyvalues",
            "KeyValue",
            {"limitMarkerTtl": "1m"},
            {"limitMarkerTtl": None},
            "spec.limitMarkerTtl cannot be removed",
        ),
        ("objectstores", "ObjectStore", {}, {"bucket": "other"}, "spec.bucket is immutable"),
        (
            "objectstores",
            "ObjectStore",
            {},
            {"connectionRef": "x"},
            "spec.clusterConnectionRef are immutable",
        ),
    ],
)
def test_immutable_bucket_changes_are_refused_at_admission(
    resources: Resources,
    namespace: str,
    plural: str,
    kind: str,
    spec: dict[str, Any],
    change: dict[str, Any],
    message: str,
) -> None:
    bucket = bucket_name(namespace, "fixed")
    resources.create(
        plural, {"kind": kind, "metadata": {"name": "fixed"}, "spec": {"bucket": bucket, **spec}}
    )
    with pytest.raises(ApiException) as refused:
        resources.patch_spec(plural, "fixed", change)
    assert refused.value.status == 422
    assert message in (refused.value.body or "")


@pytest.mark.parametrize(
    ("plural", "kind", "spec", "message"),
    [
        ("keyvalues", "KeyValue", {"bucket": "has.dot"}, "spec.bucket"),
        ("keyvalues", "KeyValue", {"bucket": "b", "history": 65}, "spec.history"),
        ("keyvalues", "KeyValue", {"bucket": "b", "ttl": "a week"}, "spec.ttl"),
        (
            "keyvalues",
            "KeyValue",
            {"bucket": "b", "mirror": {"name": "a"}, "sources": [{"name": "c"}]},
            "mutually exclusive",
        ),
        ("objectstores", "ObjectStore", {"bucket": "b", "history": 2}, "history"),
        ("objectstores", "ObjectStore", {"bucket": "b", "replicas": 9}, "spec.replicas"),
    ],
)
def test_bad_bucket_specs_are_refused_at_admission(
    resources: Resources, plural: str, kind: str, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        resources.create(plural, {"kind": kind, "metadata": {"name": "bad"}, "spec": spec})
    assert refused.value.status in (400, 422), refused.value.body
    assert message in (refused.value.body or "")


async def test_a_paused_bucket_is_left_alone_until_resumed(
    resources: Resources, namespace: str, nc: Client
) -> None:
    bucket = bucket_name(namespace, "paused")
    resources.create(
        "keyvalues",
        {"kind": "KeyValue", "metadata": {"name": "paused"}, "spec": {"bucket": bucket}},
    )
    await ready(resources, "keyvalues", "paused")
    resources.annotate("keyvalues", "paused", {"jetstream-operator.io/paused": "true"})

    async def shows_paused() -> bool:
        return condition(resources.get("keyvalues", "paused")).get("reason") == "Paused"

    await eventually(shows_paused, timeout=30)
    drifted = {**await stream_config(nc, f"KV_{bucket}"), "max_msgs_per_subject": 7}
    await JetStreamApi(nc).update_stream(drifted)
    await asyncio.sleep(QUIET_SECONDS)  # several resyncs: nothing repaired while paused
    assert (await stream_config(nc, f"KV_{bucket}"))["max_msgs_per_subject"] == 7

    resources.annotate("keyvalues", "paused", {"jetstream-operator.io/paused": None})

    async def repaired() -> bool:
        return bool((await stream_config(nc, f"KV_{bucket}"))["max_msgs_per_subject"] == 1)

    await eventually(repaired, timeout=30)
    await ready(resources, "keyvalues", "paused")
