"""A shared connection's tenancy (reconcile/tenancy.py, handlers/tenancy_gate.py): what each
namespace may name, bind and use, decided before anything is asked of NATS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from jetstream_operator.api.tenancy import Tenancy
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.handlers.tenancy_gate import TenancyGate
from jetstream_operator.reconcile.backed import KEY_VALUE_KIND, STREAM_KIND
from jetstream_operator.reconcile.ownership import Owner
from jetstream_operator.reconcile.tenancy import Resource, refusal

SHARED = Tenancy.model_validate(
    {
        "namePrefix": "{namespace}-",
        "subjectPrefixes": ["{namespace}.", "shared.{namespace}."],
        "quotas": {"streams": 2, "maxBytesFile": 1000, "maxReplicas": 3},
    }
)


def stream(name: str, **spec: Any) -> Resource:
    """A stream of team-a, within the byte quota unless `spec` says otherwise."""
    return Resource(
        "Stream", name.lower(), {"name": name, "subjects": ["team-a.x"], "maxBytes": 1, **spec}
    )


def why(resource: Resource, ahead: list[Resource] | None = None, **kwargs: Any) -> str:
    refused = refusal(SHARED, "team-a", resource, ahead or [], **kwargs)
    return "" if refused is None else f"{refused.reason}: {refused.message()}"


def test_names_carry_the_namespace_prefix_and_the_refusal_says_what_to_write() -> None:
    assert why(stream("team-a-orders")) == ""
    refused = why(stream("orders"))
    assert refused.startswith("NotPermitted: spec.name 'orders' does not start with 'team-a-'")
    assert "name it 'team-a-orders'" in refused
    bucket = Resource("KeyValue", "cfg", {"bucket": "cfg"})
    assert "spec.bucket 'cfg'" in why(bucket)
    consumer = Resource("Consumer", "r", {"durableName": "team-a-r", "streamName": "team-b-x"})
    assert "the consumer's stream 'team-b-x' is not a stream of namespace team-a" in why(consumer)
    resolved = Resource("Consumer", "r", {"durableName": "team-a-r"}, stream="team-a-x")
    assert why(resolved) == ""


def test_every_subject_bound_published_delivered_or_sourced_is_the_namespaces() -> None:
    assert "spec.subjects[0] '>'" in why(stream("team-a-s", subjects=[">"]))
    assert why(stream("team-a-s", subjects=["shared.team-a.in"])) == ""
    cases: list[dict[str, Any]] = [
        {"republish": {"source": ">", "destination": "team-b.x"}},
        {"subjectTransform": {"source": "team-a.x", "dest": "team-b.x"}},
        {"mirror": {"name": "team-a-m", "filterSubject": "team-b.>"}},
        {"sources": [{"name": "team-a-m", "subjectTransforms": [{"source": "a", "dest": "b"}]}]},
    ]
    for spec in cases:
        assert "is outside the subjects of" in why(stream("team-a-s", **spec)), spec
    assert "spec.sources[0].name 'team-b-m'" in why(
        stream("team-a-s", sources=[{"name": "team-b-m"}])
    )
    push = Resource(
        "Consumer", "p", {"durableName": "team-a-p", "deliverSubject": "x"}, stream="team-a-s"
    )
    assert "spec.deliverSubject 'x'" in why(push)


def test_adoption_replicas_and_max_bytes() -> None:
    assert "spec.adoption: IfUnowned is not allowed" in why(
        stream("team-a-s", adoption="IfUnowned")
    )
    allowed = SHARED.model_copy(update={"adoption": "Allowed"})
    assert (
        refusal(allowed, "team-a", stream("team-a-s", adoption="IfUnowned", maxBytes=1), []) is None
    )
    assert "spec.replicas 5 is more than the 3" in why(stream("team-a-s", replicas=5, maxBytes=1))
    required = Tenancy.model_validate({"requireMaxBytes": True})
    refused = refusal(required, "team-a", stream("x", maxBytes=-1), [])
    assert refused is not None and "spec.maxBytes is required" in refused.message()


def test_quotas_count_what_is_ahead_and_name_the_usage() -> None:
    ahead = [stream("team-a-1", maxBytes=400), stream("team-a-2", maxBytes=400)]
    refused = why(stream("team-a-3", maxBytes=1), ahead)
    assert refused.startswith("QuotaExceeded: namespace team-a has 2 streams of the 2")
    # Made already: not counted again, but its bytes still are.
    assert why(stream("team-a-3", maxBytes=100), ahead, made=True) == ""
    over = why(stream("team-a-3", maxBytes=300), ahead, made=True)
    assert "to 1100 bytes of file storage, over its quota of 1000 (800 taken)" in over
    assert "spec.maxBytes is unset" in why(stream("team-a-3", maxBytes=-1), ahead[:1])
    assert why(stream("team-a-3", maxBytes=5, storage="memory"), ahead[:1]) == ""


@pytest.mark.parametrize(
    "settings",
    [
        {"namePrefix": "team-"},
        {"subjectPrefixes": ["{namespace}.>"]},
        {"namePrefix": "a b{namespace}"},
    ],
)
def test_a_template_without_the_namespace_or_with_wildcards_is_refused(
    settings: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        Tenancy.model_validate(settings)


def body(
    namespace: str, name: str, uid: str, created: str, spec: dict[str, Any], **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": status,
    }


def test_the_gate_orders_a_namespaces_resources_made_first_then_by_creation() -> None:
    streams = ResourceRegistry()
    quota = Tenancy.model_validate({"quotas": {"streams": 1}})
    gate = TenancyGate(
        lambda key: quota if key is None else None, {STREAM_KIND: streams}, ResourceRegistry()
    )
    streams.observe(
        "ADDED", body("a", "late", "u2", "2026-01-02T00:00:00Z", {"name": "L"}, streamName="L")
    )
    streams.observe("ADDED", body("a", "early", "u1", "2026-01-01T00:00:00Z", {"name": "E"}))
    streams.observe("ADDED", body("b", "other", "u3", "2026-01-01T00:00:00Z", {"name": "O"}))
    # The made one keeps its place; the earlier one, not made, waits for room.
    early = gate.refusal("Stream", Owner("a", "early", "u1"), {"name": "E"}, {}, None)
    assert early is not None and early.reason == "QuotaExceeded"
    late = gate.refusal(
        "Stream", Owner("a", "late", "u2"), {"name": "L"}, {"streamName": "L"}, None
    )
    assert late is None
    assert gate.refusal("Stream", Owner("b", "other", "u3"), {"name": "O"}, {}, None) is None
    # A namespace's own NatsConnection: no tenancy.
    assert (
        gate.refusal("Stream", Owner("a", "early", "u1"), {"name": "E"}, {}, ("a", "own")) is None
    )


def test_another_namespaces_stream_is_read_only_where_its_resource_shares_it() -> None:
    streams, buckets = ResourceRegistry(), ResourceRegistry()
    open_to_all = Tenancy()
    gate = TenancyGate(
        lambda key: open_to_all if key is None else None,
        {STREAM_KIND: streams, KEY_VALUE_KIND: buckets},
        ResourceRegistry(),
    )
    created = "2026-01-01T00:00:00Z"
    streams.observe(
        "ADDED", body("a", "orders", "s1", created, {"name": "ORDERS", "sharedWith": ["b"]})
    )
    streams.observe("ADDED", body("a", "secret", "s2", created, {"name": "SECRET"}))
    buckets.observe("ADDED", body("a", "cfg", "k1", created, {"bucket": "cfg"}))

    def reading(namespace: str, kind: str, spec: dict[str, Any]) -> str:
        refused = gate.refusal(kind, Owner(namespace, "r", "u9"), spec, {}, None)
        return "" if refused is None else refused.message()

    assert reading("b", "Consumer", {"durableName": "r", "streamName": "ORDERS"}) == ""
    assert "does not share it with namespace c" in reading(
        "c", "Consumer", {"durableName": "r", "streamName": "ORDERS"}
    )
    assert "its owners can add b to its spec.sharedWith" in reading(
        "b", "Stream", {"name": "MINE", "sources": [{"name": "SECRET"}]}
    )
    assert reading("a", "Consumer", {"durableName": "r", "streamName": "SECRET"}) == ""
    # A bucket's mirror names the bucket; its stream is KV_cfg.
    assert "spec.mirror.name 'cfg'" in reading(
        "b", "KeyValue", {"bucket": "copy", "mirror": {"name": "cfg"}}
    )
    # A stream no resource declares is not the operator's to guard (only prefixes apply).
    assert reading("c", "Consumer", {"durableName": "r", "streamName": "APP_MADE"}) == ""


def test_the_namespaces_other_resources_are_read_only_where_a_quota_applies() -> None:
    """Every pass asks the gate; without a quota for the resource it must not scan its
    namespace (thousands of resources, each pass)."""

    def unread() -> Iterator[Resource]:
        raise AssertionError("the namespace's resources were read")
        yield  # pragma: no cover

    prefixes_only = Tenancy.model_validate({"namePrefix": "{namespace}-"})
    assert refusal(prefixes_only, "team-a", stream("team-a-s"), unread()) is None
    consumers_only = Tenancy.model_validate({"quotas": {"consumers": 5}})
    assert refusal(consumers_only, "team-a", stream("team-a-s"), unread()) is None
    made_stream = Tenancy.model_validate({"quotas": {"streams": 5}})
    assert refusal(made_stream, "team-a", stream("team-a-s"), unread(), made=True) is None


def test_a_stream_shared_by_selector_is_read_by_the_namespaces_it_selects() -> None:
    streams = ResourceRegistry()
    labels = {"b": {"team": "readers"}, "c": {"team": "others"}}
    gate = TenancyGate(
        lambda key: Tenancy() if key is None else None,
        {STREAM_KIND: streams},
        ResourceRegistry(),
        labels.get,
    )
    shared = {"name": "ORDERS", "sharedWithSelector": {"matchLabels": {"team": "readers"}}}
    streams.observe("ADDED", body("a", "orders", "s1", "2026-01-01T00:00:00Z", shared))

    def reading(namespace: str) -> str:
        spec = {"durableName": "r", "streamName": "ORDERS"}
        refused = gate.refusal("Consumer", Owner(namespace, "r", "u9"), spec, {}, None)
        return "" if refused is None else refused.message()

    assert reading("b") == ""
    assert "or select it in spec.sharedWithSelector" in reading("c")
    assert "does not share it with namespace d" in reading("d")  # labels not known: refused
