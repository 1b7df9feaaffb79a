"""The one envelope every pass runs in, whatever triggered it: a kopf event (`from_kopf`), or
an advisory, a resync, a recount or a retry of the drift watchers (`repair`). A trigger turns
what it saw into a `Unit`, and says only how to do the work (which connection, what it knows
already) and where the status goes (kopf's patch, or a write under the status budget). The
decisions taken before NATS is asked (release, pause, a refused move), the resource's lock,
failure memory, metrics and Events are taken here, once, the same way for every trigger."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .. import API_VERSION, metrics
from ..api.kinds import ResourceKind
from ..handlers.failures import NO_BASIS, FailureMemory, History, failure_basis
from ..handlers.registry import ConnectionKey, TrackedResource, connection_key
from ..handlers.results import Result, needs_a_person, paused, released
from ..handlers.tenancy_gate import TenancyGate
from ..k8s.status import EventSink
from ..marks import PAUSE_ANNOTATION, RELEASE_ANNOTATION
from ..reconcile.ownership import Owner
from ..reconcile.renames import moved

Work = Callable[[], Awaitable[Result | None]]
"""The trigger's part inside the lock. None: nothing to report (a newer look already did)."""

Delivery = Callable[[Result], Awaitable[None]]
"""Where the trigger's status goes: into kopf's patch, or written under the status budget."""


@dataclass(frozen=True)
class Unit:
    """One resource's pass: the resource as its trigger saw it, with what every step of the
    pass needs worked out once."""

    kind: ResourceKind
    owner: Owner
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    generation: int | None
    annotations: Mapping[str, Any]
    connection: ConnectionKey
    lock: asyncio.Lock
    memory: FailureMemory
    deleting: bool = False

    @classmethod
    def tracked(cls, kind: ResourceKind, resource: TrackedResource, memory: FailureMemory) -> Unit:
        """A resource as the registry last saw it (the drift watchers' triggers)."""
        metadata = resource.body.get("metadata") or {}
        return cls(
            kind,
            resource.owner,
            resource.spec,
            resource.status,
            resource.generation,
            metadata.get("annotations") or {},
            connection_key(resource),
            resource.lock,
            memory,
            resource.deleting,
        )

    @cached_property
    def history(self) -> History:
        return History(self.generation, self.status, self.memory)

    def as_declared(self) -> bool:
        return ready_as_is(self.status, self.generation)

    def annotation(self, key: str) -> str:
        return str(self.annotations.get(key, ""))

    @property
    def what(self) -> str:
        named = self.spec.get("name") or self.spec.get("bucket") or self.spec.get("durableName")
        return f"{self.kind.singular} {named}"

    def reference(self) -> dict[str, Any]:
        """The object the pass's Events are about."""
        return event_reference(self.kind, self.owner)


def event_reference(kind: ResourceKind, owner: Owner) -> dict[str, Any]:
    """What an Event names as its object ("" namespace: a cluster-scoped one)."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind.kind,
        "metadata": {"namespace": owner.namespace, "name": owner.name, "uid": owner.uid},
    }


def ready_as_is(status: Mapping[str, Any], generation: int | None) -> bool:
    """Ready for the current generation, as the last operator left it."""
    if status.get("observedGeneration") != generation:
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


def paused_by(
    annotation_of: Callable[[str], str],
    annotation: str = PAUSE_ANNOTATION,
    as_declared: bool = False,
) -> Result | None:
    """A resource a person paused: nothing is asked of NATS."""
    if annotation and annotation_of(annotation).lower() == "true":
        return paused(annotation, as_declared)
    return None


def decided(
    unit: Unit,
    *,
    read_only: bool,
    pause_annotation: str = PAUSE_ANNOTATION,
    gate: TenancyGate | None = None,
) -> Result | None:
    """What the pass comes to without asking NATS: a release a person asked for, a pause, a
    move to another connection refused (before the connection is looked up: the new one may
    not even exist), or what the connection's tenancy does not allow. A read-only operator
    makes nothing, so it may look wherever the spec points."""
    if unit.deleting:
        if unit.annotation(RELEASE_ANNOTATION).lower() == "true":
            return released(unit.what, RELEASE_ANNOTATION)
        return None
    pause = paused_by(unit.annotation, pause_annotation, unit.as_declared())
    if pause is not None:
        return pause
    if read_only:
        return None
    refused = moved(unit.spec, unit.status, unit.kind.kind) or (
        gate.refusal(unit.kind.kind, unit.owner, unit.spec, unit.status, unit.connection)
        if gate is not None
        else None
    )
    if refused is None:
        return None
    refusal = needs_a_person(refused.reason, refused.message())
    basis = failure_basis(unit.generation, None)
    return unit.memory.settle(unit.owner.uid, basis, refusal, unit.history.ready_condition())


async def run(
    unit: Unit,
    work: Work,
    deliver: Delivery,
    events: EventSink,
    *,
    read_only: bool,
    pause_annotation: str = PAUSE_ANNOTATION,
    decisions: bool = True,
    gate: TenancyGate | None = None,
) -> Result | None:
    """One pass: decide, or do the work under the resource's lock; then account for it,
    deliver its status and post its Events. `decisions` is False for kinds that hold nothing
    in NATS (a NatsConnection): there is nothing to pause or move."""
    started = time.perf_counter()
    result = (
        decided(unit, read_only=read_only, pause_annotation=pause_annotation, gate=gate)
        if decisions
        else None
    )
    if result is None:
        async with unit.lock:
            result = await work()
        if result is None:
            return None
    if unit.deleting:
        shown = unit.history.ready_condition()
        result = unit.memory.settle(unit.owner.uid, NO_BASIS, result, shown)
    metrics.observe(
        unit.kind.kind,
        result.outcome.reason,
        (event.reason for event in result.events),
        time.perf_counter() - started,
    )
    await deliver(result)
    reference = unit.reference()
    for event in result.events:
        events.post(reference, event.type, event.reason, event.message)
    return result
