"""Status patches and Events written outside kopf's handler cycle (drift repair, live state)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from .. import GROUP, VERSION
from .client import MERGE_PATCH, ApiError, KubeApi

logger = logging.getLogger(__name__)

COMPONENT = "jetstream-operator"


class ResourceWriter:
    """Writes a custom resource's status subresource and posts Events about it."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch the status; False when the resource is gone."""
        try:
            await self._api.request(
                "PATCH",
                f"{_objects(plural, namespace)}/{name}/status",
                {"status": status},
                content_type=MERGE_PATCH,
            )
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    async def list_objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """Our custom resources of one kind in a namespace, read from the API server itself
        (the watch-fed registries may still be filling after a restart)."""
        answer = await self._api.request("GET", _objects(plural, namespace))
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    async def read_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One of our custom resources as the API server has it; None when there is none."""
        try:
            body: dict[str, Any] = await self._api.request(
                "GET", f"{_objects(plural, namespace)}/{name}"
            )
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return body

    async def post_event(
        self, reference: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """A core/v1 Event on the resource; failures are logged, never raised."""
        now = datetime.now(UTC).isoformat()  # as the `kubernetes` client serialized it
        metadata = reference["metadata"]
        body = {
            "metadata": {
                "generateName": f"{metadata['name']}.",
                "namespace": metadata["namespace"],
            },
            "involvedObject": {
                "apiVersion": reference["apiVersion"],
                "kind": reference["kind"],
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata["uid"],
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": COMPONENT,
        }
        try:
            await self._api.request(
                "POST", f"/api/v1/namespaces/{metadata['namespace']}/events", body
            )
        except ApiError as error:
            logger.warning("could not post event %s on %s: %s", reason, metadata["name"], error)


def _objects(plural: str, namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
