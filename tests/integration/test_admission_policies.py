"""The CRDs' rules as ValidatingAdmissionPolicies on the real API server: every expression fits
the CRD's schema, and an object whose spec the rules refuse (admitted before a rule existed) can
still change its metadata, take status writes and lose its finalizer; only a change of its spec
is checked."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_devtools.crds import (
    REFUSED_STREAM_SPEC,
    apply_policies,
    stream_policy_in_effect,
    wait_policies_in_effect,
)
from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.crdgen import all_policies, policy_for
from jetstream_operator.api.kinds import CONSUMER, STREAM
from jetstream_operator.api.policygen import RULES, admission_policy
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import (
    Resources,
    condition,
    eventually,
    json_body,
    policies_out_of_effect,
    stream_manifest,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


def _type_checking(api_client: client.ApiClient, name: str) -> dict[str, object] | None:
    """What kube-controller-manager's type check of the policy found, once it has run."""
    admission = client.AdmissionregistrationV1Api(api_client)
    read = admission.read_validating_admission_policy(name)
    policy = json_body(api_client.sanitize_for_serialization(read))  # type: ignore[no-untyped-call]
    status = policy.get("status") or {}
    if status.get("observedGeneration") != policy["metadata"]["generation"]:
        return None
    checked: dict[str, object] = status.get("typeChecking") or {}
    return checked


def _checked_copy(
    api_client: client.ApiClient, policy: dict[str, Any], name: str
) -> dict[str, object]:
    """A policy created anew under another name (without a binding, so it refuses nothing),
    and its type check."""
    admission = client.AdmissionregistrationV1Api(api_client)
    body = {**policy, "metadata": {"name": name}}
    admission.create_validating_admission_policy(body)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 30
        while (found := _type_checking(api_client, name)) is None:
            assert time.monotonic() < deadline, f"{name} was not type-checked"
            time.sleep(0.2)
        return found
    finally:
        admission.delete_validating_admission_policy(name)


def test_every_policy_expression_fits_the_crds_schema(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A field the schema does not have would fail only at run time, refusing every write.

    kube-controller-manager type-checks a policy once per generation, against the schemas of
    the kinds its RESTMapper knows; it learns new CRDs within about 30 s, and a policy checked
    before that passes unchecked. So a policy reading a misspelled field is made until its
    check sees the mistake, and then each shipped policy is checked as a new copy."""
    misspelled, _ = admission_policy(
        "misspelled",
        STREAM.group,
        STREAM.version,
        STREAM.plural,
        {RULES: [{"rule": "self.maxMsg > 0", "message": "x"}]},
    )
    deadline = time.monotonic() + 90
    attempt = 0
    while not (found := _checked_copy(api_client, misspelled, f"misspelled-{attempt}-{namespace}")):
        assert time.monotonic() < deadline, "the type check never knew the Stream's schema"
        attempt += 1
        time.sleep(2)
    assert "maxMsg" in str(found.get("expressionWarnings")), found
    for policy in all_policies():
        if policy["kind"] == "ValidatingAdmissionPolicy":
            name = f"copy-{namespace}-{policy['metadata']['name']}"[:63].rstrip("-.")
            assert _checked_copy(api_client, policy, name) == {}, policy["metadata"]["name"]


@pytest.fixture
def without_stream_binding(api_client: client.ApiClient) -> Iterator[None]:
    """The Stream policy's binding gone for a moment, as on a cluster where an object was
    admitted under older rules."""
    with policies_out_of_effect(api_client, [STREAM]):
        yield


async def test_an_object_the_rules_refuse_keeps_its_metadata_status_and_deletion(
    api_client: client.ApiClient, resources: Resources, namespace: str, without_stream_binding: None
) -> None:
    async def admitted() -> bool:
        return not stream_policy_in_effect(api_client, namespace)

    async def finalized() -> bool:
        return bool((resources.get("streams", "stale") or {})["metadata"].get("finalizers"))

    async def gone() -> bool:
        return resources.get("streams", "stale") is None

    await eventually(admitted)
    base = namespace.replace("-", "_").upper()
    stale = {**REFUSED_STREAM_SPEC, "name": base, "subjects": [f"{base}.>"]}
    resources.create("streams", {"kind": "Stream", "metadata": {"name": "stale"}, "spec": stale})
    apply_policies(api_client, policy_for(STREAM))
    wait_policies_in_effect(api_client)
    assert stream_policy_in_effect(api_client, namespace)

    # The spec is unchanged: labels and annotations change, status writes go through.
    resources.label("streams", "stale", {"team": "a"})
    resources.annotate("streams", "stale", {"note": "kept"})
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "streams", "stale", {"status": {"messages": 1}}
    )
    # A change of the spec is checked, with every rule.
    with pytest.raises(ApiException) as refused:
        resources.patch_spec("streams", "stale", {"maxMsgs": 10})
    assert refused.value.status == 422
    message = json.loads(refused.value.body or "{}")["message"]
    assert message.endswith("denied request: spec.mirrorDirect applies only to a mirror"), message
    # Deleted, it loses the operator's finalizer and is gone.
    await eventually(finalized)
    resources.delete("streams", "stale")
    await eventually(gone)


@pytest.fixture
def without_stream_and_consumer_bindings(api_client: client.ApiClient) -> Iterator[None]:
    with policies_out_of_effect(api_client, [STREAM, CONSUMER]):
        yield


def stream_and_consumer(resources: Resources, stream: str, name: str, durable: str) -> None:
    """A Stream `name` for `stream`, and a Consumer `durable` on it by streamRef."""
    resources.create("streams", stream_manifest(name, stream))
    consumer = {"durableName": durable, "streamRef": name, "ackPolicy": "explicit"}
    resources.create(
        "consumers", {"kind": "Consumer", "metadata": {"name": durable}, "spec": consumer}
    )


def settled(resources: Resources, plural: str, name: str) -> Callable[[], Awaitable[Any]]:
    """A probe for `eventually`: the resource's Ready condition once it speaks of its latest
    generation."""

    async def probe() -> dict[str, Any] | None:
        resource = resources.get(plural, name)
        ready = condition(resource)
        generation = (resource or {}).get("metadata", {}).get("generation")
        return ready if ready.get("observedGeneration") == generation else None

    return probe


async def test_without_the_policies_the_operator_refuses_a_rename(
    resources: Resources, nc: Client, namespace: str, without_stream_and_consumer_bindings: None
) -> None:
    """The policy refuses a new spec.name or durableName. Without it, the operator must: a
    new stream or consumer would be made and the old one left behind with its data. Deleted
    while refused, a resource deletes what it manages, not what the spec names."""
    stream = f"R_{namespace}".replace("-", "_").upper()
    stream_and_consumer(resources, stream, "orders", "reader")
    jetstream = JetStreamApi(nc)
    condition_of = partial(settled, resources)

    assert (await eventually(condition_of("streams", "orders")))["status"] == "True"
    assert (await eventually(condition_of("consumers", "reader")))["status"] == "True"
    await nc.publish(f"{stream.lower()}.kept", b"data")
    await nc.flush()

    resources.patch_spec("streams", "orders", {"name": f"{stream}_NEW"})
    resources.patch_spec("consumers", "reader", {"durableName": "reader2"})
    refused = await eventually(condition_of("streams", "orders"))
    assert (refused["status"], refused["reason"]) == ("False", "ImmutableFieldChanged"), refused
    assert f"spec.name changed from '{stream}' to '{stream}_NEW'" in refused["message"]
    refused = await eventually(condition_of("consumers", "reader"))
    assert (refused["status"], refused["reason"]) == ("False", "ImmutableFieldChanged"), refused
    assert "spec.durableName changed from 'reader' to 'reader2'" in refused["message"]
    assert await jetstream.stream_info(f"{stream}_NEW") is None
    assert await jetstream.consumer_info(stream, "reader2") is None
    assert await jetstream.consumer_info(stream, "reader") is not None
    kept = await jetstream.stream_info(stream)
    assert kept is not None and kept["state"]["messages"] == 1

    # Set back, the stream is Ready again.
    resources.patch_spec("streams", "orders", {"name": stream})
    assert (await eventually(condition_of("streams", "orders")))["status"] == "True"

    # Deleted while refused, each deletes what it manages.
    async def consumer_deleted() -> bool:
        return await jetstream.consumer_info(stream, "reader") is None

    resources.delete("consumers", "reader")
    await eventually(consumer_deleted)
    resources.patch_spec("streams", "orders", {"name": f"{stream}_NEW"})
    refused = await eventually(condition_of("streams", "orders"))
    assert refused["reason"] == "ImmutableFieldChanged", refused

    async def stream_deleted() -> bool:
        return await jetstream.stream_info(stream) is None

    resources.delete("streams", "orders")
    await eventually(stream_deleted)
    assert await jetstream.stream_info(f"{stream}_NEW") is None


async def test_without_the_policies_the_operator_refuses_a_move(
    resources: Resources, nc: Client, namespace: str, without_stream_and_consumer_bindings: None
) -> None:
    """The policy refuses a new spec.connectionRef. Without it, the operator must: the object
    would be made again on the other system and the first left behind. Status records the
    connection each object was made through, and a deletion goes there."""
    stream = f"M_{namespace}".replace("-", "_").upper()
    stream_and_consumer(resources, stream, "moving", "mover")
    jetstream = JetStreamApi(nc)

    for plural, name in (("streams", "moving"), ("consumers", "mover")):
        assert (await eventually(settled(resources, plural, name)))["status"] == "True"
        assert (resources.get(plural, name) or {})["status"]["connectionRef"] == ""
        resources.patch_spec(plural, name, {"connectionRef": "elsewhere"})
    for plural, name in (("streams", "moving"), ("consumers", "mover")):
        refused = await eventually(settled(resources, plural, name))
        assert (refused["status"], refused["reason"]) == ("False", "ImmutableFieldChanged")
        assert "spec.connectionRef changed from '' to 'elsewhere'" in refused["message"]
        assert "through the operator's default connection" in refused["message"]
    assert await jetstream.consumer_info(stream, "mover") is not None

    async def gone(plural: str, name: str) -> bool:
        return resources.get(plural, name) is None

    # NatsConnection "elsewhere" does not exist: each deletion goes to the recorded connection.
    resources.delete("consumers", "mover")
    await eventually(lambda: gone("consumers", "mover"))
    assert await jetstream.consumer_info(stream, "mover") is None
    resources.delete("streams", "moving")
    await eventually(lambda: gone("streams", "moving"))
    assert await jetstream.stream_info(stream) is None


def test_a_spec_breaking_several_rules_hears_of_each(resources: Resources, namespace: str) -> None:
    """One refusal names every rule the spec breaks, as a CRD's did, so a person fixes them
    all at once rather than one apply at a time."""
    base = namespace.replace("-", "_").upper()
    spec = {
        **REFUSED_STREAM_SPEC,
        "name": base,
        "subjects": [f"{base}.>"],
        "discardPerSubject": True,
    }
    with pytest.raises(ApiException) as refused:
        resources.create("streams", {"kind": "Stream", "metadata": {"name": "two"}, "spec": spec})
    assert refused.value.status == 422
    message = json.loads(refused.value.body or "{}")["message"]
    assert message.endswith(
        "denied request: spec.discardPerSubject needs discard: new and maxMsgsPerSubject > 0; "
        "spec.mirrorDirect applies only to a mirror"
    ), message
