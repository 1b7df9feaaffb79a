"""Status patches and Events written outside kopf's handler cycle (drift repair, live state)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import GROUP, VERSION

logger = logging.getLogger(__name__)

COMPONENT = "jetstream-operator"


class ResourceWriter:
    """Writes a custom resource's status subresource and posts Events about it."""

    def __init__(self, api: client.ApiClient) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch the status; False when the resource is gone."""
        try:
            await asyncio.to_thread(
                self._objects.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"status": status},
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    async def list_objects(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        """Our custom resources of one kind in a namespace, read from the API server itself
        (the watch-fed registries may still be filling after a restart)."""
        answer = await asyncio.to_thread(
            self._objects.list_namespaced_custom_object, GROUP, VERSION, namespace, plural
        )
        items: list[dict[str, Any]] = cast(dict[str, Any], answer).get("items") or []
        return items

    async def post_event(
        self, reference: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """A core/v1 Event on the resource; failures are logged, never raised."""
        now = datetime.now(UTC)
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
            await asyncio.to_thread(
                self._core.create_namespaced_event, metadata["namespace"], cast(Any, body)
            )
        except ApiException as error:
            logger.warning("could not post event %s on %s: %s", reason, metadata["name"], error)
