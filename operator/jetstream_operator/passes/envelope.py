"""What every pass of a Stream-like resource or a Consumer does around its kind's own work:
honour the pause and release annotations, hold the resource's lock, find its connection,
settle failures, and report into status, Events and metrics.

kopf's events run `run_pass`; the drift watchers' triggers (advisories, resyncs, recounts,
retries) run `repair.Repairer`, which takes the same decisions and accounting from here and
differs only where the trigger does: it is given the server's state it already listed, and
writes status itself (under the status budget) where kopf's pass hands kopf a patch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import kopf

from ..api.kinds import ResourceKind
from ..handlers.failures import NO_BASIS, History
from ..handlers.registry import ConnectionKey, ResourceRegistry, spec_connection_key
from ..handlers.results import (
    Result,
    deletion_blocked,
    needs_a_person,
    released,
    unavailable,
)
from ..handlers.status_writes import status_changes
from ..k8s.status import EventSink
from ..marks import FINALIZER, RELEASE_ANNOTATION
from ..nats.jsapi import JetStreamApi, JetStreamUnavailable
from ..reconcile.ownership import Owner
from ..reconcile.renames import managed_connection, moved
from ..services import SharedMemo
from ..settings import OperatorSettings
from .accounting import account, paused_by, post_events

Work = Callable[[JetStreamApi, Owner, OperatorSettings, History], Awaitable[Result]]
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


def owner_of(meta: kopf.Meta, namespace: str | None, name: str | None) -> Owner:
    return Owner(namespace or "", name or "", str(meta.get("uid", "")))


async def jetstream_for(memo: SharedMemo, namespace: str, spec: Mapping[str, Any]) -> JetStreamApi:
    return await memo.pool.jetstream(await memo.directory.target_for(namespace, spec))


def ready_as_is(status: Mapping[str, Any], generation: int | None) -> bool:
    """Ready for the current generation, as the last operator left it."""
    if status.get("observedGeneration") != generation:
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


async def run_pass(
    kind: ResourceKind,
    registry: ResourceRegistry,
    work: Work,
    call: KopfCall,
    *,
    deleting: bool,
) -> None:
    """One pass of a Stream-like resource or a Consumer, as kopf triggers it."""
    spec, meta, status, memo = call.spec, call.meta, call.status, call.memo
    started = time.perf_counter()
    settings = memo.settings
    owner = owner_of(meta, call.namespace, call.name)
    if call.reason == kopf.Reason.RESUME and not deleting:
        if ready_as_is(status, meta.get("generation")):
            return  # drift repair's first listing checks it, at a page per 256 resources
        await asyncio.sleep(memo.resume_pace.wait())
    memory = memo.failures.for_connection(call.connection)
    history = History(meta.get("generation"), status, memory)
    named = spec.get("name") or spec.get("bucket") or spec.get("durableName")
    what = f"{kind.singular} {named}"
    if deleting and meta.annotations.get(RELEASE_ANNOTATION, "").lower() == "true":
        result = released(what, RELEASE_ANNOTATION)
    elif not deleting and (pause := paused_by(lambda key: meta.annotations.get(key, ""))):
        result = pause
    elif not deleting and not settings.read_only and (move := moved(spec, status, kind.kind)):
        # Before the connection is looked up: the new one may not even exist. A read-only
        # operator made nothing, so it may look wherever the spec points.
        refusal = needs_a_person(move.reason, move.message())
        result = memory.settle(owner.uid, NO_BASIS, refusal, history.ready_condition())
    else:
        async with registry.lock(owner.uid):
            watcher = memo.watchers.get(call.connection)
            if watcher is not None:
                watcher.looking(owner.uid)
            try:
                # A deletion deletes what the resource manages, through the connection it
                # was made through, wherever the spec points now (a refused move).
                target = managed_connection(spec, status) if deleting else spec
                jetstream = await jetstream_for(memo, owner.namespace, target)
                if watcher is not None:
                    jetstream = jetstream.noting_writes(watcher.own_writes)
                result = await work(jetstream, owner, settings, history)
            except JetStreamUnavailable as error:
                result = deletion_blocked(what, error) if deleting else unavailable(error)
                if not deleting:
                    result = memory.settle(owner.uid, NO_BASIS, result)
    if deleting:
        result = memory.settle(owner.uid, NO_BASIS, result, history.ready_condition())
    report_to_kopf(result, call, kind.kind, started, deleting=deleting)


def report_to_kopf(
    result: Result, call: KopfCall, kind: str, started: float, deleting: bool = False
) -> None:
    """`report`, into the patch kopf writes after the handler of `call`."""
    report(
        result,
        kind=kind,
        started=started,
        body=call.body,
        patch=call.patch,
        status=call.status,
        generation=call.meta.get("generation"),
        deleting=deleting,
        events=call.memo.events,
    )


def report(
    result: Result,
    *,
    kind: str,
    started: float,
    body: kopf.Body,
    patch: kopf.Patch,
    status: kopf.Status,
    generation: int | None,
    events: EventSink,
    deleting: bool = False,
) -> None:
    """Write what changed into status and post events. Only a deletion is retried through
    kopf (its finalizer must stay until done); every other retry belongs to drift repair's
    failure memory, which backs off without writing anything in between."""
    account(kind, result, started)
    if not gone_after(body, deleting, result):
        for key, value in status_changes(status, result, generation, body.get("spec")).items():
            patch.status[key] = value
    post_events(events, body, result)
    if deleting and result.retry:
        raise kopf.TemporaryError(result.outcome.message, delay=result.delay or RETRY_FALLBACK)


def gone_after(body: Mapping[str, Any], deleting: bool, result: Result) -> bool:
    """A deletion done, with no finalizer but ours: the object is gone once kopf removes it, so
    a status written now would be read by no one and cost a write per resource. Its Events stay.
    """
    finalizers = (body.get("metadata") or {}).get("finalizers") or []
    return deleting and not result.retry and all(each == FINALIZER for each in finalizers)
