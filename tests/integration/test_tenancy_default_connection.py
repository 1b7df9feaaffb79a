"""The default connection shared under a tenancy (JETSTREAM_OPERATOR_TENANCY), tried by a
tenant through the real API server: what the tenancy does not allow is refused by the operator
as Ready=False with its reason, before any request to NATS (counted from the server's own API
advisories), and what it allows works as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import ApiAudit
from .helpers import Resources, condition, empty_namespace, eventually, refused_with

pytestmark = [pytest.mark.integration]

TENANCY = {
    "namePrefix": "{namespace}-",
    "subjectPrefixes": ["{namespace}."],
    "quotas": {"streams": 1, "maxBytesFile": 1_000_000},
}


def as_tenant(
    tenant: Any, namespace: str, plural: str, kind: str, name: str, spec: dict[str, Any]
) -> None:
    tenant.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        plural,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


async def test_the_tenancy_refuses_before_nats_and_allows_the_namespaces_own(
    operator_process: OperatorProcess,
    tenant: Any,
    resources: Resources,
    namespace: str,
    nc: Client,
    api_client: client.ApiClient,
) -> None:
    prefix = f"{namespace}-"
    other = f"{namespace[:50]}-o"
    client.CoreV1Api(api_client).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=other))
    )
    theirs = Resources(api_client, other)
    with operator_variant(
        operator_process,
        JETSTREAM_OPERATOR_TENANCY=json.dumps(TENANCY),
        JETSTREAM_OPERATOR_NAMESPACES=f"{namespace},{other}",
    ):
        audit = await ApiAudit().start(nc)
        as_tenant(
            tenant,
            namespace,
            "streams",
            "Stream",
            "plain",
            {"name": "ORDERS", "subjects": [f"{namespace}.o"], "maxBytes": 1000},
        )
        message = await refused_with(resources, "streams", "plain", "NotPermitted")
        assert f"name it '{prefix}ORDERS'" in message, message
        as_tenant(
            tenant,
            namespace,
            "streams",
            "Stream",
            "wide",
            {"name": f"{prefix}WIDE", "subjects": [">"], "maxBytes": 1000},
        )
        assert "spec.subjects[0] '>' is outside" in await refused_with(
            resources, "streams", "wide", "NotPermitted"
        )
        as_tenant(
            tenant,
            namespace,
            "streams",
            "Stream",
            "adopt",
            {
                "name": f"{prefix}ADOPT",
                "subjects": [f"{namespace}.a"],
                "maxBytes": 1000,
                "adoption": "IfUnowned",
            },
        )
        assert "spec.adoption: IfUnowned is not allowed" in await refused_with(
            resources, "streams", "adopt", "NotPermitted"
        )
        as_tenant(
            tenant,
            namespace,
            "consumers",
            "Consumer",
            "theirs",
            {"durableName": f"{prefix}r", "streamName": "OTHER_TEAM"},
        )
        assert "is not a stream of namespace" in await refused_with(
            resources, "consumers", "theirs", "NotPermitted"
        )
        await nc.flush()
        assert audit.writes() == 0, audit.subjects

        # Its own names and subjects: made, as without a tenancy.
        own = f"{prefix}OWN"
        as_tenant(
            tenant,
            namespace,
            "streams",
            "Stream",
            "own",
            {"name": own, "subjects": [f"{namespace}.own"], "maxBytes": 1000},
        )

        async def ready() -> bool:
            return condition(resources.get("streams", "own")).get("status") == "True"

        await eventually(ready, timeout=30)
        assert await JetStreamApi(nc).stream_info(own) is not None
        # The quota of one stream is taken: the next is refused with the usage, and not made.
        writes = audit.writes()
        as_tenant(
            tenant,
            namespace,
            "streams",
            "Stream",
            "second",
            {"name": f"{prefix}TWO", "subjects": [f"{namespace}.two"], "maxBytes": 1000},
        )
        quota = await refused_with(resources, "streams", "second", "QuotaExceeded")
        assert f"namespace {namespace} has 1 streams of the 1" in quota, quota
        await nc.flush()
        assert audit.writes() == writes, audit.subjects
        assert await JetStreamApi(nc).stream_info(f"{prefix}TWO") is None
        # Room made: the waiting stream is made on its next pass.
        resources.delete("streams", "own")

        async def second_ready() -> bool:
            return condition(resources.get("streams", "second")).get("status") == "True"

        await eventually(second_ready, timeout=60)
        await audit.stop()

        # Another namespace's streams: readable only where their resource shares them. The
        # other namespace's quota is one Stream, so the unshared one is a KeyValue bucket.
        theirs.create(
            "streams",
            {
                "kind": "Stream",
                "metadata": {"name": "open"},
                "spec": {
                    "name": f"{other}-OPEN",
                    "subjects": [f"{other}.open"],
                    "maxBytes": 1000,
                    "sharedWith": [namespace],
                },
            },
        )
        theirs.create(
            "keyvalues",
            {
                "kind": "KeyValue",
                "metadata": {"name": "closed"},
                "spec": {"bucket": f"{other}-closed", "maxBytes": 1000},
            },
        )
        for name, stream in (("open", f"{other}-OPEN"), ("closed", f"KV_{other}-closed")):
            as_tenant(
                tenant,
                namespace,
                "consumers",
                "Consumer",
                f"on-{name}",
                {"durableName": f"{prefix}{name}", "streamName": stream},
            )

        async def reads_the_shared_one() -> bool:
            return condition(resources.get("consumers", "on-open")).get("status") == "True"

        await eventually(reads_the_shared_one, timeout=30)
        closed = await refused_with(resources, "consumers", "on-closed", "NotPermitted")
        assert f"add {namespace} to its spec.sharedWith" in closed, closed
    empty_namespace(api_client, other)
