"""The labels of every namespace, followed by one watch: connections serve namespaces by label
selector (a ClusterNatsConnection's namespaceSelector, the default connection's setting)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from .client import KubeApi
from .watch import NamespaceWatches

NAMESPACES_PATH = "/api/v1/namespaces"
EVERY_NAMESPACE = ""
"""The one key namespaces are followed under: they are cluster-scoped."""


class NamespaceLabels:
    """Labels by namespace name, current from one list-then-watch of namespaces, started with
    the operator (`start`) or on first use."""

    def __init__(self, api: KubeApi) -> None:
        self._labels: dict[str, dict[str, str]] = {}
        self._starting: asyncio.Task[bool] | None = None
        self._watches = NamespaceWatches(
            api, "namespaces", self._observe, path_of=lambda _: NAMESPACES_PATH
        )

    async def of(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels; None while namespaces could not be listed yet (or the
        namespace does not exist)."""
        if not await self._watches.follow(EVERY_NAMESPACE):
            return None
        return self._labels.get(namespace)

    def known(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels as last seen, without waiting (None: not seen yet)."""
        return self._labels.get(namespace)

    def start(self) -> None:
        """Follow the namespaces from now on, for those who cannot wait for it (`known`)."""
        task = asyncio.create_task(self._watches.follow(EVERY_NAMESPACE), name="namespace-labels")
        self._starting = task

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        await self._watches.stop()

    async def _observe(self, event_type: str, body: dict[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name", ""))
        if event_type == "DELETED":
            self._labels.pop(name, None)
        else:
            self._labels[name] = dict(metadata.get("labels") or {})
