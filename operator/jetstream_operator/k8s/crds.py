"""Install or upgrade the CRDs through the Kubernetes API, for `dev up` and the tests."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException


def apply_crds(api_client: client.ApiClient, crds: Iterable[dict[str, Any]]) -> None:
    """Create each CRD, or replace it when it exists, then wait until all are Established."""
    extensions = client.ApiextensionsV1Api(api_client)
    names = []
    for crd in crds:
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            current = extensions.read_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise
            extensions.create_custom_resource_definition(cast(Any, crd))
            continue
        version = current.metadata.resource_version if current.metadata else None
        body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}}
        extensions.replace_custom_resource_definition(name, cast(Any, body))
    for name in names:
        wait_established(extensions, name)


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
