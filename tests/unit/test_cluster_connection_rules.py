"""The pure parts of ClusterNatsConnection: label selectors as Kubernetes reads them, the
record of the connection an object was made through, and each namespace's usage."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from jetstream_operator.api.cluster_connection import ClusterNatsConnectionSpec
from jetstream_operator.api.connection import NatsConnectionSpec
from jetstream_operator.api.selector import LabelSelector
from jetstream_operator.handlers.connection_directory import (
    ConnectionDirectory,
    ConnectionNotReady,
    Serving,
    connection_fields,
)
from jetstream_operator.handlers.registry import ResourceRegistry, spec_connection_key
from jetstream_operator.nats.pool import ConnectionPool, ConnectionTarget
from jetstream_operator.reconcile.renames import declared_connection, managed_connection, moved
from jetstream_operator.reconcile.tenancy import Resource, usage


def selector(body: Mapping[str, object]) -> LabelSelector:
    return LabelSelector.model_validate(body)


def test_selectors_match_as_kubernetes_reads_them() -> None:
    every = selector({})
    assert every.matches({}) and every.matches({"team": "a"})
    team_a = selector({"matchLabels": {"team": "a"}})
    assert team_a.matches({"team": "a", "x": "y"}) and not team_a.matches({"team": "b"})
    expressions = selector(
        {
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "team", "operator": "Exists"},
                {"key": "region", "operator": "NotIn", "values": ["eu"]},
            ]
        }
    )
    assert expressions.matches({"tier": "gold", "team": "a"})
    assert not expressions.matches({"tier": "bronze", "team": "a"})
    assert not expressions.matches({"tier": "gold", "team": "a", "legacy": ""})
    assert not expressions.matches({"tier": "gold"})
    assert not expressions.matches({"tier": "gold", "team": "a", "region": "eu"})
    assert expressions.describe() == "tier in (gold,silver),!legacy,team,region notin (eu)"
    assert every.describe() == "(every namespace)"


def test_a_cluster_connection_is_keyed_and_recorded_apart_from_namespaced_ones() -> None:
    spec = {"name": "S", "clusterConnectionRef": "shared"}
    assert spec_connection_key("team-a", spec) == ("", "shared")
    assert spec_connection_key("team-a", {"connectionRef": "shared"}) == ("team-a", "shared")
    assert declared_connection(spec) == "ClusterNatsConnection/shared"
    made_there = {"streamName": "S", "connectionRef": "ClusterNatsConnection/shared"}
    assert moved(spec, made_there, "Stream") is None
    refused = moved({"name": "S", "connectionRef": "shared"}, made_there, "Stream")
    assert refused is not None
    assert "ClusterNatsConnection 'shared'" in refused.message()
    assert "spec.clusterConnectionRef: shared again" in refused.message()
    # A deletion after a refused move goes through the connection the object was made in.
    assert managed_connection({"name": "S", "connectionRef": "shared"}, made_there) == {
        "name": "S",
        "connectionRef": None,
        "clusterConnectionRef": "shared",
    }
    assert managed_connection(spec, {"streamName": "S", "connectionRef": ""}) == {
        "name": "S",
        "connectionRef": None,
    }


def test_usage_counts_each_namespace_as_its_quotas_do() -> None:
    rows = usage(
        [
            ("b", Resource("Stream", "s1", {"maxBytes": 100})),
            ("a", Resource("Stream", "s2", {"maxBytes": 10, "storage": "memory"})),
            ("a", Resource("Consumer", "c", {})),
            ("a", Resource("KeyValue", "kv", {})),
            ("b", Resource("ObjectStore", "o", {"maxBytes": 5})),
        ]
    )
    zeros = {
        "streams": 0,
        "consumers": 0,
        "keyValues": 0,
        "objectStores": 0,
        "maxBytesFile": 0,
        "maxBytesMemory": 0,
    }
    a = {"streams": 1, "maxBytesMemory": 10, "consumers": 1, "keyValues": 1}
    b = {"streams": 1, "maxBytesFile": 105, "objectStores": 1}
    assert rows == [{"namespace": "a", **zeros, **a}, {"namespace": "b", **zeros, **b}]


def test_only_the_connection_fields_reach_nats() -> None:
    spec = {"servers": ["nats://h:4222"], "namespaceSelector": {}, "tenancy": {}}
    assert connection_fields(spec) == {"servers": ["nats://h:4222"]}
    parsed = ClusterNatsConnectionSpec.model_validate(spec)
    assert parsed.namespace_selector == LabelSelector() and parsed.tenancy.adoption == "Forbidden"


@pytest.mark.parametrize(
    ("default_selector", "labels", "served"),
    [
        (None, {"team": "a"}, False),
        (LabelSelector(), None, True),  # {}: no labels needed
        (selector({"matchLabels": {"team": "a"}}), {"team": "a"}, True),
        (selector({"matchLabels": {"team": "a"}}), {"team": "b"}, False),
    ],
)
def test_the_default_connection_serves_only_what_its_selector_selects(
    default_selector: LabelSelector | None, labels: dict[str, str] | None, served: bool
) -> None:
    async def labels_of(_: str) -> Mapping[str, str] | None:
        return labels

    default = ConnectionTarget(("nats://127.0.0.1:4222",))
    directory = ConnectionDirectory(
        default,
        ResourceRegistry(),
        None,  # type: ignore[arg-type]  # no Secret is read
        ConnectionPool(),
        serving=Serving(default_selector, "ops", labels_of),
    )

    async def target() -> ConnectionTarget:
        return await directory.target_for("team-a", {"name": "S"})

    if served:
        assert asyncio.run(target()) is default
        return
    with pytest.raises(ConnectionNotReady) as refused:
        asyncio.run(target())
    assert refused.value.reason == "NotPermitted"
    assert "the operator's default connection does not serve namespace 'team-a'" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"servers": ["nats://h:4222"]}, None),  # nothing to leak
        ({"servers": ["nats://u:p@h:4222"]}, "holds credentials"),
        ({"servers": ["nats://h:4222"], "token": {"secretName": "s", "key": "t"}}, "unencrypted"),
        ({"servers": ["ws://h"], "creds": {"secretName": "s", "key": "c"}}, "unencrypted"),
        ({"servers": ["tls://h"], "token": {"secretName": "s", "key": "t"}}, None),
        (
            {"servers": ["nats://h"], "tlsFirst": True, "nkey": {"secretName": "s", "key": "k"}},
            None,
        ),
        (
            {
                "servers": ["nats://h"],
                "tls": {"secretName": "t"},
                "userPassword": {"secretName": "s"},
            },
            None,
        ),
        (
            {"servers": ["nats://h"], "allowPlaintext": True, "userPassword": {"secretName": "s"}},
            None,
        ),
    ],
)
def test_the_operator_refuses_what_admission_refuses_about_credentials(
    spec: dict[str, object], problem: str | None
) -> None:
    """Where the admission policy is missing (installed without the chart's policies), the
    connection still sends no credential in clear text: the same rules, in the model."""
    found = NatsConnectionSpec.model_validate(spec).exposure()
    assert (found is None) if problem is None else (problem in str(found)), found


def test_a_deployment_that_only_reads_connections_does_not_chase_a_cluster_connection() -> None:
    """Resolving one as a NatsConnection would watch namespace "" and retry every recheck."""
    from types import SimpleNamespace

    from jetstream_operator.passes.connection import wanted_connection
    from jetstream_operator.services import SharedMemo

    memo = SharedMemo()
    memo.directory = SimpleNamespace(known=dict)  # type: ignore[assignment]  # known() only
    memo.unresolved, memo.background = set(), set()
    body = {"metadata": {"namespace": "team-a"}, "spec": {"clusterConnectionRef": "shared"}}
    wanted_connection(memo, body)
    assert memo.unresolved == set() and memo.background == set()
    wanted_connection(memo, {"metadata": {"namespace": "team-a"}, "spec": {}})  # default
    assert memo.unresolved == set()
