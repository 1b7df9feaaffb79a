"""ClusterNatsConnection, the platform team's connection, against the real API server (its
admission policies, a tenant's RBAC through impersonation) and a real nats-server: it serves
only the namespaces its selector picks, applies its tenancy before any request to NATS (counted
from the server's own API advisories), shows each namespace's usage, and goes only after its
users. The default connection's own selector is tried beside it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import ApiAudit
from .helpers import Resources, condition, empty_namespace, eventually, json_body, refused_with

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

PLURAL = "clusternatsconnections"
TEAM_LABEL = "jetstream-operator.io/test-team"


def _labels(api_client: client.ApiClient, namespace: str, labels: dict[str, str | None]) -> None:
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": labels}})


@pytest.fixture
def cluster_connection(
    api_client: client.ApiClient, namespace: str, nats_server: Any
) -> Iterator[str]:
    """A ClusterNatsConnection to the suite's NATS selecting namespaces labelled with this
    test's namespace, under a tenancy of name prefixes and a stream quota."""
    name = f"team-{namespace}"[:63].rstrip("-")
    api = client.CustomObjectsApi(api_client)
    api.create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterNatsConnection",
            "metadata": {"name": name},
            "spec": {
                "servers": [nats_server.url],
                "namespaceSelector": {"matchLabels": {TEAM_LABEL: namespace}},
                "tenancy": {"namePrefix": "{namespace}-", "quotas": {"streams": 2}},
            },
        },
    )
    yield name
    try:
        api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as error:
        if error.status != 404:
            raise


def _cluster_object(api_client: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return json_body(
            client.CustomObjectsApi(api_client).get_cluster_custom_object(
                GROUP, VERSION, PLURAL, name
            )
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _stream(namespace: str, name: str, stream: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stream",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"name": stream, "subjects": [f"{stream}.>"], **spec},
    }


async def test_a_cluster_connection_serves_only_the_namespaces_it_selects(
    api_client: client.ApiClient,
    tenant: Any,
    resources: Resources,
    namespace: str,
    cluster_connection: str,
    nc: Client,
) -> None:
    async def connection_ready() -> dict[str, Any] | None:
        body = _cluster_object(api_client, cluster_connection) or {}
        return body if condition(body).get("status") == "True" else None

    connected = await eventually(connection_ready, timeout=30)
    assert connected["status"].get("serverVersion"), connected["status"]

    # A tenant may not write a ClusterNatsConnection: the platform team owns them.
    with pytest.raises(ApiException) as forbidden:
        tenant.create_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterNatsConnection",
                "metadata": {"name": f"mine-{namespace}"[:63].rstrip("-")},
                "spec": {"servers": ["nats://elsewhere:4222"], "namespaceSelector": {}},
            },
        )
    assert forbidden.value.status == 403

    # Both references at once: refused at admission.
    with pytest.raises(ApiException) as both:
        tenant.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "streams",
            _stream(
                namespace,
                "both",
                f"{namespace}-BOTH",
                connectionRef="x",
                clusterConnectionRef=cluster_connection,
            ),
        )
    assert "mutually exclusive" in str(
        json_body(json.loads(both.value.body or "{}")).get("message")
    )

    audit = await ApiAudit().start(nc)
    stream = f"{namespace}-ORDERS"
    tenant.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "streams",
        _stream(namespace, "orders", stream, clusterConnectionRef=cluster_connection),
    )
    message = await refused_with(resources, "streams", "orders", "NotPermitted")
    assert f"does not serve namespace '{namespace}'" in message, message
    assert f"{TEAM_LABEL}={namespace}" in message, message
    await nc.flush()
    assert audit.writes() == 0, audit.subjects

    # The platform team selects the namespace: the stream is made, with no new spec.
    _labels(api_client, namespace, {TEAM_LABEL: namespace})

    async def ready() -> bool:
        return condition(resources.get("streams", "orders")).get("status") == "True"

    await eventually(ready, timeout=45)
    assert await JetStreamApi(nc).stream_info(stream) is not None
    status = resources.get("streams", "orders") or {}
    assert status["status"]["connectionRef"] == f"ClusterNatsConnection/{cluster_connection}"

    # Its tenancy applies to the namespace: a name without the prefix is refused.
    before = audit.writes()
    tenant.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "streams",
        _stream(namespace, "unprefixed", "ORDERS2", clusterConnectionRef=cluster_connection),
    )
    message = await refused_with(resources, "streams", "unprefixed", "NotPermitted")
    assert f"name it '{namespace}-ORDERS2'" in message, message
    await nc.flush()
    assert audit.writes() == before, audit.subjects

    # The connection's status shows the namespace's usage.
    async def usage() -> list[dict[str, Any]] | None:
        body = _cluster_object(api_client, cluster_connection) or {}
        shown = (body.get("status") or {}).get("namespaces") or []
        return shown if shown else None

    shown = await eventually(usage, timeout=30)
    assert [(row["namespace"], row["streams"], row["maxBytesFile"]) for row in shown] == [
        (namespace, 1, 0)
    ], shown

    # Deleted while used: it stays, InUse, until its users are gone.
    client.CustomObjectsApi(api_client).delete_cluster_custom_object(
        GROUP, VERSION, PLURAL, cluster_connection
    )

    async def in_use() -> str | None:
        ready = condition(_cluster_object(api_client, cluster_connection))
        return str(ready.get("message")) if ready.get("reason") == "InUse" else None

    assert f"Stream {namespace}/orders" in await eventually(in_use, timeout=30)
    assert await JetStreamApi(nc).stream_info(stream) is not None
    resources.delete("streams", "orders")
    resources.delete("streams", "unprefixed")

    async def gone() -> bool:
        return _cluster_object(api_client, cluster_connection) is None

    await eventually(gone, timeout=45)
    assert await JetStreamApi(nc).stream_info(stream) is None


async def test_bad_cluster_connections_are_refused_at_admission(
    api_client: client.ApiClient, namespace: str
) -> None:
    api = client.CustomObjectsApi(api_client)

    def refusal(spec: dict[str, Any]) -> str:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterNatsConnection",
            "metadata": {"name": f"bad-{namespace}"[:63].rstrip("-")},
            "spec": {"servers": ["nats://127.0.0.1:4222"], **spec},
        }
        with pytest.raises(ApiException) as refused:
            api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        return str(json_body(json.loads(refused.value.body or "{}")).get("message"))

    assert "needs {namespace}" in refusal({"tenancy": {"namePrefix": "team-"}})
    assert "needs {namespace}" in refusal({"tenancy": {"subjectPrefixes": ["{namespace}.", "*."]}})
    assert "In and NotIn need values" in refusal(
        {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}
    )


async def test_the_default_connection_serves_only_the_namespaces_it_selects(
    operator_process: OperatorProcess,
    api_client: client.ApiClient,
    resources: Resources,
    namespace: str,
    nc: Client,
) -> None:
    label = "jetstream-operator.io/default-connection"
    selector = {"matchLabels": {label: "true"}}
    with operator_variant(
        operator_process,
        JETSTREAM_OPERATOR_NAMESPACE_SELECTOR=json.dumps(selector),
        JETSTREAM_OPERATOR_NAMESPACES=namespace,
    ):
        audit = await ApiAudit().start(nc)
        stream = f"D_{namespace}".replace("-", "_").upper()
        resources.create("streams", _stream(namespace, "plain", stream))
        message = await refused_with(resources, "streams", "plain", "NotPermitted")
        assert "the operator's default connection does not serve namespace" in message
        assert f"{label}=true" in message and "spec.connectionRef" in message, message
        await nc.flush()
        assert audit.writes() == 0, audit.subjects

        _labels(api_client, namespace, {label: "true"})

        async def ready() -> bool:
            return condition(resources.get("streams", "plain")).get("status") == "True"

        await eventually(ready, timeout=45)
        assert await JetStreamApi(nc).stream_info(stream) is not None

        # No longer served, its deletion still completes: what it made goes, as asked.
        _labels(api_client, namespace, {label: None})
        resources.delete("streams", "plain")

        async def deleted() -> bool:
            return resources.get("streams", "plain") is None

        await eventually(deleted, timeout=30)
        assert await JetStreamApi(nc).stream_info(stream) is None


async def test_a_stream_shared_by_label_is_read_by_the_namespaces_it_selects(
    api_client: client.ApiClient,
    tenant: Any,
    resources: Resources,
    namespace: str,
    cluster_connection: str,
    nc: Client,
) -> None:
    """Both namespaces on the ClusterNatsConnection; the other's stream shares itself with
    namespaces labelled as its readers, which this one is: its Consumer reads it. Labels come
    from the API server's namespaces, as the operator follows them."""
    other = f"{namespace[:50]}-o"
    core = client.CoreV1Api(api_client)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=other, labels={TEAM_LABEL: namespace}))
    )
    _labels(api_client, namespace, {TEAM_LABEL: namespace, "orders-readers": "yes"})
    theirs = Resources(api_client, other)
    try:
        for name, share in (("open", {"matchLabels": {"orders-readers": "yes"}}), ("shut", None)):
            theirs.create(
                "streams",
                _stream(
                    other,
                    name,
                    f"{other}-{name.upper()}",
                    clusterConnectionRef=cluster_connection,
                    **({"sharedWithSelector": share} if share else {}),
                ),
            )

        async def both_ready() -> bool:
            return all(
                condition(theirs.get("streams", name)).get("status") == "True"
                for name in ("open", "shut")
            )

        await eventually(both_ready, timeout=45)
        audit = await ApiAudit().start(nc)
        for name in ("open", "shut"):
            tenant.create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "consumers",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Consumer",
                    "metadata": {"name": f"on-{name}"},
                    "spec": {
                        "durableName": f"{namespace}-{name}",
                        "streamName": f"{other}-{name.upper()}",
                        "clusterConnectionRef": cluster_connection,
                    },
                },
            )

        async def reads_the_open_one() -> bool:
            return condition(resources.get("consumers", "on-open")).get("status") == "True"

        await eventually(reads_the_open_one, timeout=30)
        shut = await refused_with(resources, "consumers", "on-shut", "NotPermitted")
        assert "spec.sharedWithSelector" in shut, shut
        await nc.flush()
        assert audit.writes() == 1, audit.subjects  # the open one's consumer, nothing else
    finally:
        empty_namespace(api_client, other)
        core.delete_namespace(other)
