"""kopf's events as a trigger of the one pass (`envelope.run`): what kopf hands a handler
becomes a `Unit`; the work looks up the connection and counts a NATS outage as a result; the
status goes into the patch kopf writes after the handler, and only a deletion is retried
through kopf (its finalizer must stay until done)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import kopf

from ..api.kinds import ResourceKind
from ..handlers.failures import NO_BASIS, FailureMemory, History
from ..handlers.registry import ConnectionKey, ResourceRegistry, spec_connection_key
from ..handlers.results import Result, deletion_blocked, unavailable
from ..handlers.status_writes import status_changes
from ..marks import FINALIZER
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..reconcile.ownership import Owner
from ..reconcile.renames import managed_connection
from ..services import SharedMemo
from ..settings import OperatorSettings
from .envelope import Unit, ready_as_is, run

KindWork = Callable[[JetStreamApi, Owner, OperatorSettings, History], Awaitable[Result]]
"""A kind's own part of a pass, given the connection's JetStream API and what it needs."""

MADE = frozenset({"Created", "Recreated"})
"""Event reasons of a pass that made its stream or consumer in NATS."""

RETRY_FALLBACK = 5.0
"""Seconds before kopf retries a deletion whose pass set no delay of its own."""


@dataclass(frozen=True)
class KopfCall:
    """What kopf handed a resource's handler, as one value for the pass to take."""

    spec: kopf.Spec
    meta: kopf.Meta
    status: kopf.Status
    memo: SharedMemo
    body: kopf.Body
    patch: kopf.Patch
    namespace: str
    name: str
    reason: str

    @cached_property
    def connection(self) -> ConnectionKey:
        """The connection the spec names, worked out once per pass."""
        return spec_connection_key(self.namespace, self.spec)

    @property
    def owner(self) -> Owner:
        return Owner(self.namespace, self.name, str(self.meta.get("uid", "")))

    def unit(
        self,
        kind: ResourceKind,
        registry: ResourceRegistry,
        *,
        deleting: bool,
        memory: FailureMemory | None = None,
    ) -> Unit:
        """The pass's unit; its failures go to the memory of its connection unless `memory`."""
        owner = self.owner
        return Unit(
            kind,
            owner,
            self.spec,
            self.status,
            self.meta.get("generation"),
            self.meta.annotations,
            self.connection,
            registry.lock(owner.uid),
            memory or self.memo.failures.for_connection(self.connection),
            deleting,
        )

    @classmethod
    def of(
        cls,
        spec: kopf.Spec,
        meta: kopf.Meta,
        status: kopf.Status,
        memo: SharedMemo,
        kwargs: Mapping[str, Any],
    ) -> KopfCall:
        return cls(
            spec,
            meta,
            status,
            memo,
            kwargs["body"],
            kwargs["patch"],
            kwargs["namespace"] or "",
            kwargs["name"] or "",
            kwargs["reason"],
        )


async def jetstream_for(
    memo: SharedMemo, namespace: str, spec: Mapping[str, Any], deleting: bool = False
) -> JetStreamApi:
    target = await memo.directory.target_for(namespace, spec, deleting=deleting)
    return await memo.pool.jetstream(target)


async def run_pass(
    kind: ResourceKind,
    registry: ResourceRegistry,
    work: KindWork,
    call: KopfCall,
    *,
    deleting: bool,
) -> None:
    """One pass of a Stream-like resource or a Consumer, as kopf triggers it."""
    memo, settings = call.memo, call.memo.settings
    if call.reason == kopf.Reason.RESUME and not deleting:
        if ready_as_is(call.status, call.meta.get("generation")):
            return  # drift repair's first listing checks it, at a page per 256 resources
        await asyncio.sleep(memo.resume_pace.wait())
    unit = call.unit(kind, registry, deleting=deleting)

    async def connected() -> Result:
        watcher = memo.watchers.get(unit.connection)
        if watcher is not None:
            watcher.looking(unit.owner.uid)
        try:
            # A deletion deletes what the resource manages, through the connection it was
            # made through, wherever the spec points now (a refused move).
            target = managed_connection(unit.spec, unit.status) if deleting else unit.spec
            jetstream = await jetstream_for(memo, unit.owner.namespace, target, deleting)
            if watcher is not None:
                jetstream = jetstream.noting_writes(watcher.own_writes)
            return await work(jetstream, unit.owner, settings, unit.history)
        except JetStreamUnavailable as error:
            if deleting:
                return deletion_blocked(unit.what, error)
            return unit.memory.settle(unit.owner.uid, NO_BASIS, unavailable(error))

    result = await run(
        unit,
        connected,
        into_patch(call, deleting),
        memo.events,
        read_only=settings.read_only,
        gate=memo.tenancy,
    )
    retry_deletion(result, deleting)


async def run_kopf_work(
    kind: ResourceKind,
    registry: ResourceRegistry,
    work: Callable[[], Awaitable[Result]],
    call: KopfCall,
    *,
    deleting: bool = False,
) -> None:
    """A pass of a kind that holds nothing in NATS (a NatsConnection): the same envelope,
    with nothing to pause or move and no JetStream connection to look up."""
    memo = call.memo
    unit = call.unit(kind, registry, deleting=deleting, memory=memo.failures.for_connection(None))
    result = await run(
        unit,
        work,
        into_patch(call, deleting),
        memo.events,
        read_only=memo.settings.read_only,
        decisions=False,
    )
    retry_deletion(result, deleting)


def into_patch(call: KopfCall, deleting: bool) -> Callable[[Result], Awaitable[None]]:
    """The delivery of kopf's passes: what changed goes into the patch kopf writes after the
    handler. Every retry but a deletion's belongs to drift repair's failure memory, which
    backs off without writing anything in between."""

    async def deliver(result: Result) -> None:
        if gone_after(call.body, deleting, result):
            return
        spec = call.body.get("spec")
        changes = status_changes(call.status, result, call.meta.get("generation"), spec)
        for key, value in changes.items():
            call.patch.status[key] = value

    return deliver


def retry_deletion(result: Result | None, deleting: bool) -> None:
    if deleting and result is not None and result.retry:
        raise kopf.TemporaryError(result.outcome.message, delay=result.delay or RETRY_FALLBACK)


def gone_after(body: Mapping[str, Any], deleting: bool, result: Result) -> bool:
    """A deletion done, with no finalizer but ours: the object is gone once kopf removes it, so
    a status written now would be read by no one and cost a write per resource. Its Events stay.
    """
    finalizers = (body.get("metadata") or {}).get("finalizers") or []
    return deleting and not result.retry and all(each == FINALIZER for each in finalizers)
