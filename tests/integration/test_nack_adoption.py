"""NACK onboarding against the real servers: objects made in NATS as NACK would, their NACK
manifests converted, applied to the real API server and adopted by the operator process with
only the recorded owner changed on the server.
"""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client

from jetstream_operator.export.nack import convert_documents
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources
from .made_by_clients import S, nats_go_kv, nats_go_obj
from .test_export import adopt, assert_only_owner_changed, snapshot

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


async def test_converted_nack_manifests_adopt_what_nack_made(
    nc: Client, resources: Resources, namespace: str, nats_server: Any
) -> None:
    prefix = "NK" + namespace.split("-", 1)[0].upper()
    stream, subject = f"{prefix}_ORDERS", f"{prefix.lower()}.orders.>"
    api = JetStreamApi(nc)
    # What NACK's controller sends for the manifests below, its CRD defaults filled in:
    # memory storage, and a consumer with ackPolicy none and ackWait 1ns.
    await api.request(
        f"STREAM.CREATE.{stream}",
        {
            "name": stream,
            "subjects": [subject],
            "storage": "memory",
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_msg_size": -1,
            "discard": "old",
            "num_replicas": 1,
            "max_age": 86400 * S,
        },
    )
    for name, extra in (("audit", {}), ("billing", {"ack_policy": "explicit", "ack_wait": 1})):
        config = {"durable_name": name, "name": name, "ack_policy": "none", "ack_wait": 1, **extra}
        await api.request(
            f"CONSUMER.CREATE.{stream}.{name}", {"stream_name": stream, "config": config}
        )
    # NACK's KeyValue and ObjectStore controllers go through nats.go, storage left to its
    # zero value (file) unless the manifest says otherwise.
    kv, store = f"{prefix}_cfg", f"{prefix}_media"
    for request in (
        nats_go_kv(
            kv,
            max_msgs_per_subject=3,
            max_age=3600 * S,
            storage="memory",
            allow_msg_ttl=True,
            subject_delete_marker_ttl=60 * S,
            republish={"dest": f"{prefix}.cfg.>"},  # no source: the server stores ">"
        ),
        nats_go_obj(store, description="media", max_bytes=1 << 20, compression="s2"),
    ):
        await api.request(f"STREAM.CREATE.{request['name']}", request)
    before = await snapshot(api, prefix)
    crd_defaults = {"creds": "", "servers": [], "preventDelete": False, "replicas": 1}
    nack = [
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "Account",
            "metadata": {"name": "hub", "namespace": namespace},
            "spec": {"servers": [nats_server.url], "tlsFirst": False},
        },
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "KeyValue",
            "metadata": {"name": "cfg", "namespace": namespace},
            "spec": {
                **crd_defaults,
                "bucket": kv,
                "history": 3,
                "ttl": "1h",
                "storage": "memory",
                "limitMarkerTtl": 60 * S,
                "republish": {"destination": f"{prefix}.cfg.>"},
                "account": "hub",
            },
        },
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "ObjectStore",
            "metadata": {"name": "media", "namespace": namespace},
            "spec": {
                **crd_defaults,
                "bucket": store,
                "description": "media",
                "maxBytes": 1 << 20,
                "compression": True,
            },
        },
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "Stream",
            "metadata": {"name": "orders", "namespace": namespace},
            "spec": {"name": stream, "subjects": [subject], "maxAge": "24h"},
        },
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "Consumer",
            "metadata": {"name": "audit", "namespace": namespace},
            "spec": {"durableName": "audit", "streamName": stream},
        },
        {
            "apiVersion": "jetstream.nats.io/v1beta2",
            "kind": "Consumer",
            "metadata": {"name": "billing", "namespace": namespace},
            "spec": {"durableName": "billing", "streamName": stream, "ackPolicy": "explicit"},
        },
    ]
    conversion = convert_documents(nack)
    assert conversion.refused == []
    kinds = [item["kind"] for item in conversion.manifests]
    assert kinds == ["NatsConnection", "KeyValue", "ObjectStore", "Stream", "Consumer", "Consumer"]
    assert conversion.manifests[1]["spec"]["connectionRef"] == "hub"
    after, audit = await adopt(nc, resources, conversion.manifests, prefix)
    assert_only_owner_changed(before, after, audit, namespace)
    assert after[stream]["storage"] == "memory"
    assert after[f"{stream}/billing"]["ack_wait"] == 1
