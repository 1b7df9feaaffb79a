"""Install or upgrade the CRDs and their admission policies through the Kubernetes API, for
`dev up`, the tests and the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_operator.api.crdgen import all_crds, all_policies
from jetstream_operator.api.kinds import STREAM

POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"

REFUSED_STREAM_SPEC = {"name": "PROBE", "subjects": ["probe.>"], "mirrorDirect": True}
"""A Stream spec only the Stream policy refuses (mirrorDirect without a mirror): a dry-run
creation of it tells that the policies are in effect."""


def install_api(api_client: client.ApiClient) -> None:
    """Every CRD and its policy, returning once the API server serves and enforces them."""
    apply_crds(api_client, all_crds())
    # The Stream's binding last: the probe below sees it only after the others.
    probed_last = sorted(
        all_policies(), key=lambda item: item["metadata"]["name"] == STREAM.crd_name
    )
    apply_policies(api_client, probed_last)
    wait_policies_in_effect(api_client)


def _create_or_replace(
    read: Callable[..., Any],
    create: Callable[..., Any],
    replace: Callable[..., Any],
    item: dict[str, Any],
) -> None:
    name = item["metadata"]["name"]
    try:
        current = read(name)
    except ApiException as error:
        if error.status != 404:
            raise
        create(cast(Any, item))
        return
    version = current.metadata.resource_version if current.metadata else None
    replace(name, cast(Any, {**item, "metadata": {**item["metadata"], "resourceVersion": version}}))


def apply_crds(api_client: client.ApiClient, crds: Iterable[dict[str, Any]]) -> None:
    """Create each CRD, or replace it when it exists, then wait until all are Established."""
    extensions = client.ApiextensionsV1Api(api_client)
    names = []
    for crd in crds:
        names.append(crd["metadata"]["name"])
        _create_or_replace(
            extensions.read_custom_resource_definition,
            extensions.create_custom_resource_definition,
            extensions.replace_custom_resource_definition,
            crd,
        )
    for name in names:
        wait_established(extensions, name)


def apply_policies(api_client: client.ApiClient, objects: Iterable[dict[str, Any]]) -> None:
    """Create or replace the policies, then their bindings: a binding whose policy is not
    there yet would be ignored by the API server until it is."""
    admission = client.AdmissionregistrationV1Api(api_client)
    items = list(objects)
    for item in [i for i in items if i["kind"] == POLICY_KIND]:
        _create_or_replace(
            admission.read_validating_admission_policy,
            admission.create_validating_admission_policy,
            admission.replace_validating_admission_policy,
            item,
        )
    for item in [i for i in items if i["kind"] == BINDING_KIND]:
        _create_or_replace(
            admission.read_validating_admission_policy_binding,
            admission.create_validating_admission_policy_binding,
            admission.replace_validating_admission_policy_binding,
            item,
        )


def stream_policy_in_effect(api_client: client.ApiClient, namespace: str = "default") -> bool:
    """Whether the API server refuses an invalid Stream with its policy (a dry run, nothing is
    stored); any other refusal is raised."""
    body = {
        "apiVersion": f"{STREAM.group}/{STREAM.version}",
        "kind": STREAM.kind,
        "metadata": {"name": "policy-probe"},
        "spec": REFUSED_STREAM_SPEC,
    }
    try:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            STREAM.group, STREAM.version, namespace, STREAM.plural, body, dry_run="All"
        )
    except ApiException as error:
        if POLICY_KIND not in str(error.body):
            raise
        return True
    return False


def wait_policies_in_effect(api_client: client.ApiClient, timeout: float = 30.0) -> None:
    """The API server loads policies asynchronously: wait until the Stream's refuses. Its
    binding is applied last, so the other kinds' policies and bindings reached the API
    server's caches before it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if stream_policy_in_effect(api_client):
                return
        except ApiException as error:
            # 503: Established, but the group's schemas are still being rebuilt ("no schema
            # for Kind=Stream"), as just after a helm install of every CRD at once.
            if error.status != 503:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Stream policy refused nothing within {timeout:.0f}s")
        time.sleep(0.1)


def wait_established(
    extensions: client.ApiextensionsV1Api, name: str, timeout: float = 30.0
) -> None:
    """CRDs are served only once Established; creating objects earlier fails with 404."""
    deadline = time.monotonic() + timeout
    while True:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status and crd.status.conditions) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} was not Established within {timeout:.0f}s")
        time.sleep(0.2)
