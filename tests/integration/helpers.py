"""Small helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_operator import GROUP, VERSION

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Poll until the probe returns something truthy; fail with its last answer otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await probe()
        except AssertionError as error:
            last = error
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last: {last!r}")
        await asyncio.sleep(interval)


class Resources:
    """Custom objects of our group in one namespace, through the real API server."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.namespace = namespace

    def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        # Strict field validation, as kubectl applies it: unknown fields are errors.
        result: dict[str, Any] = self.api.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, body, field_validation="Strict"
        )
        return result

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return result

    def patch_spec(self, plural: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, {"spec": spec}, field_validation="Strict"
        )
        return result

    def annotate(self, plural: str, name: str, annotations: dict[str, str | None]) -> None:
        """Set annotations (None removes one), as `kubectl annotate` does."""
        self.api.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, {"metadata": {"annotations": annotations}}
        )

    def delete(self, plural: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)


def condition(resource: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    """One condition of a resource's status, or an empty dict."""
    for item in ((resource or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return {}


def is_ready(resource: dict[str, Any] | None) -> bool:
    ready = condition(resource)
    generation = (resource or {}).get("metadata", {}).get("generation")
    return ready.get("status") == "True" and ready.get("observedGeneration") == generation


def fill(value: Any, names: dict[str, str]) -> Any:
    """Replace {placeholders} in every string of a nested structure."""
    if isinstance(value, str):
        for key, name in names.items():
            value = value.replace("{" + key + "}", name)
        return value
    if isinstance(value, dict):
        return {key: fill(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, names) for item in value]
    return value


def is_subset(expected: Any, actual: Any) -> bool:
    """Whether every key of `expected`, at every depth, has the same value in `actual`."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            is_subset(value, actual.get(key)) for key, value in expected.items()
        )
    return bool(expected == actual)
