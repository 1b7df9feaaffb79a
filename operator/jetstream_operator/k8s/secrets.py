"""Secret values read on demand through the Kubernetes API (no cluster-wide Secret watch).

The operator then needs only `get` on the Secrets a NatsConnection names.
"""

from __future__ import annotations

import asyncio
import base64

from kubernetes import client
from kubernetes.client.exceptions import ApiException


class SecretProblem(Exception):
    """A Secret or one of its keys is missing or unreadable; the message names which."""


class SecretReader:
    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    async def values(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = await asyncio.to_thread(self._core.read_namespaced_secret, name, namespace)
        except ApiException as error:
            if error.status == 404:
                raise SecretProblem(f"Secret {namespace}/{name} does not exist") from None
            if error.status == 403:
                raise SecretProblem(
                    f"the operator may not read Secret {namespace}/{name} (RBAC)"
                ) from None
            raise SecretProblem(
                f"Secret {namespace}/{name} cannot be read ({error.status})"
            ) from None
        data = secret.data or {}
        return {key: base64.b64decode(value) for key, value in data.items()}

    async def value(self, namespace: str, name: str, key: str) -> bytes:
        values = await self.values(namespace, name)
        if key not in values:
            raise SecretProblem(f"Secret {namespace}/{name} has no key {key!r}")
        return values[key]
