"""The resource registry: lookups by name and spec value stay right through updates."""

import json
from typing import Any

from jetstream_operator.handlers.registry import (
    ResourceRegistry,
    consumer_stream,
    consumers_of,
)


def body(uid: str, resource: str, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": resource, "namespace": namespace, "managedFields": [{}]},
        "spec": spec,
    }


def test_lookups_follow_updates_and_deletions() -> None:
    streams = ResourceRegistry()
    streams.observe("ADDED", body("u1", "orders", name="ORDERS"))
    resource = streams.named("ns", "orders")
    assert resource is not None and "managedFields" not in resource.body["metadata"]
    assert [r.owner.uid for r in streams.with_spec("name", "ORDERS")] == ["u1"]
    streams.observe("MODIFIED", body("u1", "orders", name="RENAMED"))
    assert streams.with_spec("name", "ORDERS") == []
    assert [r.owner.uid for r in streams.with_spec("name", "RENAMED")] == ["u1"]
    streams.observe("DELETED", body("u1", "orders", name="RENAMED"))
    assert streams.named("ns", "orders") is None
    assert streams.with_spec("name", "RENAMED") == []
    # A field that is not indexed is still found.
    streams.observe("ADDED", body("u2", "audit", name="AUDIT", description="x"))
    assert [r.owner.uid for r in streams.with_spec("description", "x")] == ["u2"]


def test_consumers_of_a_stream_by_name_or_reference() -> None:
    streams, consumers = ResourceRegistry(), ResourceRegistry()
    streams.observe("ADDED", body("s1", "orders", name="ORDERS"))
    streams.observe("ADDED", body("s2", "orders", "other", name="ORDERS"))
    consumers.observe("ADDED", body("c1", "by-ref", streamRef="orders", durableName="A"))
    consumers.observe("ADDED", body("c2", "direct", streamName="ORDERS", durableName="B"))
    consumers.observe("ADDED", body("c3", "elsewhere", "third", streamRef="orders"))
    consumers.observe(
        "ADDED", body("c4", "both", streamName="BILLING", streamRef="orders", durableName="D")
    )
    found = {r.owner.uid for r in consumers_of("ORDERS", consumers, streams)}
    # c3's namespace has no Stream "orders"; c4's streamName wins over its streamRef.
    assert found == {"c1", "c2"}
    for resource in consumers:
        in_orders = consumer_stream(resource, streams) == "ORDERS"
        assert in_orders == (resource.owner.uid in found)


def test_kept_bodies_share_field_names_and_short_values_but_stay_equal() -> None:
    """Each decoded body has its own copy of every field name; the registry keeps one."""
    registry = ResourceRegistry()
    for uid in ("u1", "u2"):
        decoded = json.loads(
            json.dumps(
                {
                    **body(uid, f"orders-{uid}", name=f"ORDERS_{uid}", storage="file"),
                    "status": {
                        "conditions": [{"type": "Ready", "status": "True"}],
                        "message": "x" * 100,
                    },
                }
            )
        )
        registry.observe("ADDED", decoded)
        kept = registry.get(uid)
        assert kept is not None and kept.spec == decoded["spec"]
        assert kept.status == decoded["status"]
    first, second = registry.get("u1"), registry.get("u2")
    assert first is not None and second is not None
    (first_key,) = [key for key in first.spec if key == "storage"]
    (second_key,) = [key for key in second.spec if key == "storage"]
    assert first_key is second_key
    assert first.spec["storage"] is second.spec["storage"]
    assert first.status["conditions"][0]["type"] is second.status["conditions"][0]["type"]
    # Long, mostly unique text is not interned.
    assert first.status["message"] is not second.status["message"]


def test_a_creation_told_early_never_overwrites_what_kopf_delivered() -> None:
    """The watch tells a creation before kopf's worker for it starts; by then kopf may have
    delivered a newer body (a watch restarted from a fresh list), which stays."""
    consumers = ResourceRegistry()
    consumers.announce(body("c1", "reader", streamRef="orders"))
    assert [c.owner.uid for c in consumers.with_spec("streamRef", "orders")] == ["c1"]
    newer = {**body("c1", "reader", streamRef="orders"), "status": {"conditions": [{}]}}
    consumers.observe("MODIFIED", newer)
    consumers.announce(body("c1", "reader", streamRef="orders"))
    tracked = consumers.get("c1")
    assert tracked is not None and tracked.first_handled
