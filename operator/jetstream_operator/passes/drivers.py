"""Each kind's part of a drift pass, by kind: the drift watchers' triggers look a kind's driver
up here, so a new kind adds a driver and the watchers, the envelope and the repairer stay as
they are. The driver brings what the trigger already knows of the server (a listing's info)
into its kind's reconcile (validate, plan, apply, live state: `handlers/`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..api.kinds import CONSUMER
from ..handlers import consumer as consumer_handlers
from ..handlers import stream as stream_handlers
from ..handlers.registry import ResourceRegistry, TrackedResource, consumer_stream
from ..handlers.results import Result
from ..nats.jsapi import JetStreamApi
from ..reconcile.backed import StreamBackedKind
from .envelope import Unit


@dataclass(frozen=True)
class Seen:
    """What a drift trigger already knows: the resource as registered, and its object's and
    its stream's info from a listing (None: the driver looks)."""

    resource: TrackedResource
    known: Mapping[str, Any] | None = None
    known_stream: Mapping[str, Any] | None = None


class DriftDriver(Protocol):
    async def repair(
        self, unit: Unit, jetstream: JetStreamApi, seen: Seen, *, read_only: bool
    ) -> Result:
        """Bring the resource's object in line, from what a listing knew (None: look)."""
        ...


@dataclass(frozen=True)
class StreamBackedDriver:
    """A Stream, KeyValue or ObjectStore: one stream on the server."""

    kind: StreamBackedKind

    async def repair(
        self, unit: Unit, jetstream: JetStreamApi, seen: Seen, *, read_only: bool
    ) -> Result:
        return await stream_handlers.reconcile(
            self.kind,
            unit.spec,
            unit.owner,
            jetstream,
            drift=True,
            known_info=seen.known,
            read_only=read_only,
            history=unit.history,
        )


@dataclass(frozen=True)
class ConsumerDriver:
    """A Consumer: its stream is resolved through the Stream resources its streamRef names."""

    streams: ResourceRegistry
    explained: Callable[[str], str | None] | None

    async def repair(
        self, unit: Unit, jetstream: JetStreamApi, seen: Seen, *, read_only: bool
    ) -> Result:
        # Why a streamRef finds no Stream, as the Consumer's own handler last found out:
        # kept instead of the plain message, and nothing asked.
        explanation = self.explained(unit.owner.uid) if self.explained else None

        async def unresolved_ref(_: str) -> str | None:
            return explanation

        return await consumer_handlers.reconcile(
            unit.spec,
            unit.owner,
            jetstream,
            stream_name=consumer_stream(seen.resource, self.streams),
            drift=True,
            known_info=seen.known,
            known_stream_info=seen.known_stream,
            read_only=read_only,
            history=unit.history,
            unresolved_ref=unresolved_ref if explanation else None,
        )


def drift_drivers(
    backed: Mapping[StreamBackedKind, ResourceRegistry],
    streams: ResourceRegistry,
    explained: Callable[[str], str | None] | None,
) -> dict[str, DriftDriver]:
    """The driver of every kind a drift watcher repairs, by kind name."""
    drivers: dict[str, DriftDriver] = {
        kind.resource.kind: StreamBackedDriver(kind) for kind in backed
    }
    drivers[CONSUMER.kind] = ConsumerDriver(streams, explained)
    return drivers
