"""The pass of a Consumer: its work inside the envelope, and how a new consumer finds and waits
for its stream, so that one applied with its stream is made on the first pass."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import kopf

from ..api.kinds import CONSUMER
from ..handlers import consumer as consumer_handlers
from ..handlers.arrivals import ANNOUNCED_FOR
from ..handlers.consumer import StreamArrival
from ..handlers.consumer_operations import CONSUMER_OPERATIONS
from ..handlers.failures import History
from ..handlers.registry import (
    ResourceRegistry,
    consumer_stream,
    declaring,
    spec_connection_key,
)
from ..handlers.results import Result
from ..nats.jsapi import JetStreamApi
from ..reconcile.backed import STREAM_BACKED, STREAM_KIND, StreamBackedKind
from ..reconcile.ownership import Owner
from ..reconcile.renames import managed_stream
from ..services import SharedMemo
from ..settings import OperatorSettings
from .from_kopf import MADE, KopfCall, run_pass

logger = logging.getLogger(__name__)

STREAM_ARRIVAL_TIMEOUT = 5.0
"""How long a new consumer waits for its stream's creation before reporting StreamNotFound."""

NEW_STREAM_ARRIVAL_TIMEOUT = ANNOUNCED_FOR
"""The same while no Stream resource declaring it has a status yet: its handler is still to come
(queued behind the workers of a burst, or waiting for the burst to end), and will create it."""

STREAM_REF_WAIT = 2.0
"""Seconds a new consumer waits for the Stream resource its `streamRef` names: applied together,
the stream's watch event may reach the operator a moment after the consumer's, on its own
watch, and a StreamNotFound meanwhile would cost writes and a later pass."""


def resolved_stream(memo: SharedMemo, owner: Owner, spec: kopf.Spec) -> str | None:
    tracked = memo.consumers.named(owner.namespace, owner.name)
    if tracked is None:
        direct = spec.get("streamName")
        return direct if isinstance(direct, str) else None
    return consumer_stream(tracked, memo.streams)


def unresolved_ref(
    memo: SharedMemo, owner: Owner, selector: str | None
) -> Callable[[str], Awaitable[str | None]] | None:
    """With a label selector, a streamRef this process cannot resolve may name another
    deployment's Stream: one read of that Stream tells, on the Consumer's own failing pass.
    Drift repair's passes reuse the answer (`memo.explained`) and ask nothing."""
    if not selector:
        return None
    explained = memo.explained

    async def explain(stream: str) -> str | None:
        explained.pop(owner.uid, None)
        try:
            body = await memo.writer.read_object(
                STREAM_KIND.resource.plural, owner.namespace, stream
            )
        except Exception as error:  # only an explanation: the plain message stands
            logger.info("could not read Stream %s/%s: %s", owner.namespace, stream, error)
            return None
        if body is None:
            return None
        labels = (body.get("metadata") or {}).get("labels") or {}
        explanation = consumer_handlers.served_elsewhere(stream, labels, selector)
        if explanation:
            explained[owner.uid] = explanation
        return explanation

    return explain


async def stream_of_new_consumer(
    memo: SharedMemo, owner: Owner, spec: kopf.Spec, status: kopf.Status
) -> str | None:
    stream = resolved_stream(memo, owner, spec)
    if stream is not None or status.get("conditions") or not spec.get("streamRef"):
        return stream
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STREAM_REF_WAIT
    while stream is None and loop.time() < deadline:
        await asyncio.sleep(0.05)
        stream = resolved_stream(memo, owner, spec)
    return stream


def first_look_waits(memo: SharedMemo, stream: str, status: kopf.Status) -> bool:
    """Whether a consumer's first pass waits for its stream's announcement before looking at
    it: while no resource declaring the stream has had its first pass, a look would most
    likely find nothing (they were applied together), and the pass would wait anyway. That
    first pass announces the stream whether it made it or not, so a consumer of an adopted
    stream waits for that pass only; one deleted before its first pass gets none, so it is
    not waited for. A request per consumer of a burst."""
    if status.get("conditions") or memo.settings.read_only:
        return False
    declared = [
        resource
        for _, resource in declaring(stream, stream_registries(memo))
        if not resource.deleting
    ]
    return bool(declared) and not any(resource.first_handled for resource in declared)


def stream_registries(memo: SharedMemo) -> dict[StreamBackedKind, ResourceRegistry]:
    """The registry of each kind holding a stream, by kind, as `declaring` reads them."""
    return {kind: memo.backed[kind.resource.kind] for kind in STREAM_BACKED}


async def recount_stream(
    memo: SharedMemo, owner: Owner, spec: kopf.Spec, stream: str, jetstream: JetStreamApi
) -> None:
    """The new consumer shows on its stream's count before it reports Ready itself."""
    watcher = memo.watchers.get(spec_connection_key(owner.namespace, spec))
    if watcher is None:
        return
    try:
        await watcher.recount_now(stream, jetstream)
    except Exception as error:  # the consumer is made; its count follows
        logger.info("consumer count of stream %s follows later: %s", stream, error)
        watcher.recount_soon(stream)


async def reconcile(
    call: KopfCall,
) -> None:
    """Create or update the consumer, once its stream is there."""
    spec, status, memo = call.spec, call.status, call.memo
    connection = call.connection
    arrivals = memo.arrivals

    async def stream_arrival(stream: str) -> StreamArrival:
        declared = declaring(stream, stream_registries(memo))
        if not declared:
            return False  # no Stream resource will create it: nothing to wait for
        coming = not any(resource.first_handled for _, resource in declared)
        timeout = NEW_STREAM_ARRIVAL_TIMEOUT if coming else STREAM_ARRIVAL_TIMEOUT
        if not await arrivals.wait(stream, timeout):
            return False
        return arrivals.created_reply(connection, stream) or True

    async def work(
        jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
    ) -> Result:
        stream = await stream_of_new_consumer(memo, owner, spec, status)
        under_way = arrivals.begin(stream, owner.uid) if stream else None
        counted, result = False, None
        try:
            known_stream = arrivals.created_reply(connection, stream) if stream else None
            arrival: StreamArrival | None = None
            if stream and known_stream is None and first_look_waits(memo, stream, status):
                arrival = await stream_arrival(stream)
                if isinstance(arrival, Mapping):
                    known_stream = arrival
            result = await consumer_handlers.reconcile(
                spec,
                owner,
                jetstream,
                stream_name=stream,
                known_stream_info=known_stream,
                read_only=settings.read_only,
                stream_arrival=stream_arrival if arrival is None else None,
                history=history,
                unresolved_ref=unresolved_ref(memo, owner, settings.selector),
            )
        finally:
            made = result is not None and any(event.reason in MADE for event in result.events)
            if under_way is not None:
                counted = arrivals.end(under_way, made)  # a new stream's first status counts it
        if stream and not counted and made:
            await recount_stream(memo, owner, spec, stream, jetstream)
        if stream and result.outcome.ready and not settings.read_only:
            annotations = call.meta.annotations
            for operation in CONSUMER_OPERATIONS:
                done = await operation(spec, owner, annotations, status, jetstream, stream)
                result = result.then(done)
        return result

    await run_pass(CONSUMER, memo.consumers, work, call, deleting=False)


async def finalize(
    call: KopfCall,
) -> None:
    """Delete the consumer where it was made."""
    spec, status, memo = call.spec, call.status, call.memo

    async def work(
        jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
    ) -> Result:
        # A managed consumer is where status recorded it, whatever stream the spec names now
        # (a new streamName the policies would have refused). Before one is managed, the
        # Stream resource may be gone already, or not yet known after a restart.
        recorded = status.get("streamName")
        managed = status.get("consumerName")
        return await consumer_handlers.finalize(
            spec,
            owner,
            jetstream,
            stream_name=managed_stream(status)
            or resolved_stream(memo, owner, spec)
            or (recorded if isinstance(recorded, str) else None),
            consumer_name=managed if isinstance(managed, str) and managed else None,
            read_only=settings.read_only,
        )

    await run_pass(CONSUMER, memo.consumers, work, call, deleting=True)
