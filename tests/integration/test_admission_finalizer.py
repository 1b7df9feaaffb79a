"""The chart's finalizer policy on the real API server: a new resource arrives with the finalizer,
the operator handles it without patching the finalizer in, and deletion still completes.
Outside the policy's namespaces, the operator adds the finalizer itself, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools import admission
from jetstream_devtools.gobuild import ensure_tools
from jetstream_operator.marks import FINALIZER
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, eventually, is_ready


def served(api_client: client.ApiClient) -> bool:
    groups = client.ApisApi(api_client).get_api_versions().groups or []
    return any(
        version.group_version == "admissionregistration.k8s.io/v1beta1"
        for group in groups
        for version in group.versions
    )


@pytest.fixture
def policy_for(api_client: client.ApiClient, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """The chart's policy, for the test's namespace only, so no other test is affected."""
    if not served(api_client):
        pytest.skip("this API server does not serve MutatingAdmissionPolicy v1beta1")
    documents = admission.render_finalizer_policy(
        ensure_tools(["helm"])["helm"], [namespace], release="admission-test"
    )
    admission.install(api_client, documents)
    try:
        admission.wait_until_effective(api_client, namespace)
        yield documents
    finally:
        admission.uninstall(api_client, documents)


def finalizer_writers(resource: dict[str, Any]) -> list[str]:
    """Managers of the object's fields (status aside) whose entries hold the finalizers."""
    return [
        entry["manager"]
        for entry in resource["metadata"].get("managedFields") or []
        if entry.get("subresource") != "status"
        and "f:finalizers" in json.dumps(entry.get("fieldsV1") or {})
    ]


def stream(name: str, stream_name: str) -> dict[str, Any]:
    return {
        "kind": "Stream",
        "metadata": {"name": name},
        "spec": {
            "name": stream_name,
            "subjects": [f"{stream_name}.in"],
            "deletionPolicy": "Delete",
        },
    }


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process", "policy_for")
async def test_a_resource_arrives_with_the_finalizer_and_is_handled_without_adding_it(
    api_client: client.ApiClient, resources: Resources, namespace: str, nc: Client
) -> None:
    name = namespace.replace("-", "_").upper()
    created = resources.create("streams", stream("admitted", name))
    assert created["metadata"].get("finalizers") == [FINALIZER]

    ready = await eventually(lambda: _ready(resources, "admitted"))
    assert ready["metadata"]["finalizers"] == [FINALIZER]
    assert finalizer_writers(ready) == [], ready["metadata"]["managedFields"]
    assert await JetStreamApi(nc).stream_info(name) is not None

    resources.delete("streams", "admitted")
    await eventually(lambda: _gone(resources, "admitted"))
    assert await JetStreamApi(nc).stream_info(name) is None

    # Outside the policy's namespaces nothing is added at admission; the operator adds it.
    outside = f"{namespace[:50].rstrip('-')}-out"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=outside)))
    elsewhere = Resources(api_client, outside)
    created = elsewhere.create("streams", stream("patched", f"{name}_OUT"))
    assert not created["metadata"].get("finalizers")
    ready = await eventually(lambda: _ready(elsewhere, "patched"))
    assert ready["metadata"]["finalizers"] == [FINALIZER]
    assert finalizer_writers(ready), ready["metadata"]["managedFields"]
    elsewhere.delete("streams", "patched")
    await eventually(lambda: _gone(elsewhere, "patched"))


async def _ready(resources: Resources, name: str) -> dict[str, Any] | None:
    resource = resources.get("streams", name)
    return resource if is_ready(resource) else None


async def _gone(resources: Resources, name: str) -> bool:
    return resources.get("streams", name) is None
