"""Secret values read on demand through the Kubernetes API (no cluster-wide Secret watch), and
only from Secrets labelled for connections (marks.CONNECTION_SECRET_LABEL).

The operator needs `get` on the Secrets a NatsConnection names, and `patch` to hold them with a
finalizer while the connection exists: deleting a namespace deletes Secrets at once, and the
Streams still to be deleted in NATS need their credentials, also after an operator restart.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from ..marks import CONNECTION_SECRET_LABEL
from .client import JSON_PATCH, ApiError, KubeApi

logger = logging.getLogger(__name__)


class SecretProblem(Exception):
    """A Secret or one of its keys is missing or unreadable; the message names which."""


class SecretReader:
    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._finalizers: dict[tuple[str, str], list[str]] = {}

    async def values(self, namespace: str, name: str) -> dict[str, bytes]:
        try:
            secret = await self._read(namespace, name)
        except ApiError as error:
            if error.status == 404:
                raise SecretProblem(f"Secret {namespace}/{name} does not exist") from None
            if error.status == 403:
                raise SecretProblem(
                    f"the operator may not read Secret {namespace}/{name} (RBAC)"
                ) from None
            raise SecretProblem(
                f"Secret {namespace}/{name} cannot be read ({error.status})"
            ) from None
        labels = secret["metadata"].get("labels") or {}
        if labels.get(CONNECTION_SECRET_LABEL) != "true":
            raise SecretProblem(
                f"Secret {namespace}/{name} is not labelled for connections: its owner marks it "
                f"with `kubectl label secret -n {namespace} {name} "
                f"{CONNECTION_SECRET_LABEL}=true`; nothing of it is used until then"
            )
        self._finalizers[(namespace, name)] = _finalizers(secret)
        data = secret.get("data") or {}
        return {key: base64.b64decode(value) for key, value in data.items()}

    async def hold(self, namespace: str, name: str, finalizer: str, held: bool) -> None:
        """Add or remove our finalizer; no request to add it when the last read shows it."""
        known = self._finalizers.get((namespace, name))
        if held and known is not None and finalizer in known:
            return  # checked every few seconds: trust the last read; a release always reads
        logger.info("%s Secret %s/%s", "holding" if held else "releasing", namespace, name)
        try:
            secret = await self._read(namespace, name)
        except ApiError as error:
            if error.status == 404:
                self._finalizers.pop((namespace, name), None)
                return
            raise
        finalizers = [item for item in _finalizers(secret) if item != finalizer]
        if held:
            finalizers.append(finalizer)
        if finalizers != _finalizers(secret):
            # A JSON patch that fails if the Secret changed since the read (a retry reads again).
            patch: list[dict[str, Any]] = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": secret["metadata"].get("resourceVersion"),
                },
                {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
            ]
            try:
                await self._api.request(
                    "PATCH", _secret(namespace, name), patch, content_type=JSON_PATCH
                )
            except ApiError as error:
                if error.status not in (403, 404, 409, 422):
                    raise
                # Not allowed (RBAC), gone, or changed meanwhile: the next check tries again.
                logger.warning(
                    "could not update finalizers of Secret %s/%s: %s", namespace, name, error.reason
                )
                self._finalizers.pop((namespace, name), None)
                return
        self._finalizers[(namespace, name)] = finalizers

    async def _read(self, namespace: str, name: str) -> dict[str, Any]:
        secret: dict[str, Any] = await self._api.request("GET", _secret(namespace, name))
        return secret

    async def value(self, namespace: str, name: str, key: str) -> bytes:
        values = await self.values(namespace, name)
        if key not in values:
            raise SecretProblem(f"Secret {namespace}/{name} has no key {key!r}")
        return values[key]


def _secret(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets/{name}"


def _finalizers(secret: dict[str, Any]) -> list[str]:
    return list(secret["metadata"].get("finalizers") or [])
