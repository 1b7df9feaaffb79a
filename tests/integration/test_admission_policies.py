"""The CRDs' rules as ValidatingAdmissionPolicies on the real API server: an object whose spec
the rules refuse (admitted before a rule existed) can still change its metadata, take status
writes and lose its finalizer; only a change of its spec is checked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.crdgen import policy_for
from jetstream_operator.api.kinds import STREAM
from jetstream_operator.k8s.crds import (
    REFUSED_STREAM_SPEC,
    apply_policies,
    stream_policy_in_effect,
    wait_policies_in_effect,
)

from .helpers import Resources, eventually

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


@pytest.fixture
def without_stream_binding(api_client: client.ApiClient, namespace: str) -> Iterator[None]:
    """The Stream policy's binding gone for a moment, as on a cluster where an object was
    admitted under older rules; the tests run one at a time, and it is back on return."""
    admission = client.AdmissionregistrationV1Api(api_client)
    admission.delete_validating_admission_policy_binding(STREAM.crd_name)
    try:
        yield
    finally:
        apply_policies(api_client, policy_for(STREAM))
        wait_policies_in_effect(api_client)


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
