"""What the operator knows of its Stream resources, kept current by the watch stream.

Drift repair starts from a NATS stream name (an advisory, a STREAM.LIST page) and needs the
resource that declares it, without an API request per lookup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..reconcile.ownership import Owner


@dataclass
class StreamResource:
    """The latest seen state of one Stream resource."""

    owner: Owner
    body: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def spec(self) -> Mapping[str, Any]:
        spec: Mapping[str, Any] = self.body.get("spec") or {}
        return spec

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.body.get("status") or {}
        return status

    @property
    def generation(self) -> int | None:
        generation: int | None = self.body.get("metadata", {}).get("generation")
        return generation

    @property
    def stream_name(self) -> str | None:
        name = self.spec.get("name")
        return name if isinstance(name, str) else None

    def annotation(self, key: str) -> str:
        value = (self.body.get("metadata", {}).get("annotations") or {}).get(key, "")
        return str(value)

    @property
    def deleting(self) -> bool:
        return bool(self.body.get("metadata", {}).get("deletionTimestamp"))

    @property
    def first_handled(self) -> bool:
        """kopf has run the create handler at least once (a status exists)."""
        return bool(self.status.get("conditions"))


class StreamRegistry:
    """Stream resources by uid, and by the NATS stream name they declare."""

    def __init__(self) -> None:
        self._by_uid: dict[str, StreamResource] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, uid: str) -> asyncio.Lock:
        """One lock per resource, shared by kopf's handlers and drift repair."""
        return self._locks.setdefault(uid, asyncio.Lock())

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid", ""))
        if not uid:
            return
        if event_type == "DELETED":
            self._by_uid.pop(uid, None)
            self._locks.pop(uid, None)
            return
        owner = Owner(str(metadata.get("namespace", "")), str(metadata.get("name", "")), uid)
        existing = self._by_uid.get(uid)
        if existing is None:
            self._by_uid[uid] = StreamResource(owner, dict(body), self.lock(uid))
        else:
            existing.body = dict(body)

    def by_stream_name(self, stream: str) -> list[StreamResource]:
        return [item for item in self._by_uid.values() if item.stream_name == stream]

    def __iter__(self) -> Iterator[StreamResource]:
        return iter(list(self._by_uid.values()))

    def __len__(self) -> int:
        return len(self._by_uid)
