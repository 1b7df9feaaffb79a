"""The pass of a kind holding a stream (Stream, KeyValue, ObjectStore): its work inside the
envelope, and its part in gathering the consumers applied with a new stream."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from ..handlers import consumer as consumer_handlers
from ..handlers import stream as stream_handlers
from ..handlers.failures import History
from ..handlers.operations import ONE_SHOT_OPERATIONS
from ..handlers.registry import connection_key, consumers_of
from ..handlers.results import Result
from ..nats.jsapi import JetStreamApi
from ..reconcile.backed import StreamBackedKind
from ..reconcile.ownership import Owner
from ..settings import OperatorSettings
from .from_kopf import KopfCall, run_pass

GATHER_TIMEOUT = 5.0
"""How long a new stream's handler waits for the consumers applied with it before it writes
its first status. Past it, a late consumer writes the stream's count itself. Its worker is held
meanwhile, which paces a burst's streams to their consumers."""

GATHER_START_WITHIN = 3.0
"""How long a new stream's handler waits at most for the pass of a consumer applied with it to
start, while other consumers' passes keep starting or ending (GATHER_STALL). Under a worker
limit the consumer is queued behind others; in a burst applied kind by kind its turn comes about
when its stream's does, a second or two either way on a busy API server."""

GATHER_STALL = 0.5
"""No consumer pass started or ended for this long: the consumers' workers may all wait for
streams queued behind the waiting stream handlers, so those stop waiting."""


async def reconcile(
    kind: StreamBackedKind,
    call: KopfCall,
) -> None:
    """Create or update the stream, purge it when asked, and tell the consumers waiting for it."""
    spec, meta, status, memo = call.spec, call.meta, call.status, call.memo
    arrivals = memo.arrivals
    connection = call.connection
    made: list[str] = []

    async def created(stream: str, reply: Mapping[str, Any]) -> int | None:
        """Wake the consumers waiting for the new stream, and wait a moment for those on
        their way, so the stream's first status counts them (how many they made; None:
        look). During a burst of creations, wait it out first: the status write would wait
        anyway, and the consumers applied after their streams (`kubectl apply` of a
        directory) are made meanwhile."""
        made.append(stream)

        def new_consumers() -> set[str]:
            return {
                consumer.owner.uid
                for consumer in consumers_of(stream, memo.consumers, memo.streams)
                if not consumer.first_handled
                and not consumer.deleting
                and connection_key(consumer) == connection
            }

        return await arrivals.created(
            stream,
            new_consumers,
            GATHER_TIMEOUT,
            start_within=GATHER_START_WITHIN,
            first=partial(memo.kube_request_limit.after_creations, call.namespace),
            stall=GATHER_STALL,
            connection=connection,
            reply=consumer_handlers.planning_view(reply),
        )

    async def work(
        jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
    ) -> Result:
        result = await stream_handlers.reconcile(
            kind,
            spec,
            owner,
            jetstream,
            read_only=settings.read_only,
            history=history,
            created=created,
        )
        name = result.status.get("streamName")
        if isinstance(name, str) and name not in made:
            arrivals.forget_reply(connection, name)  # it may have changed the stream
        if result.outcome.ready and not settings.read_only:
            for operation in ONE_SHOT_OPERATIONS:
                done = await operation(kind, spec, meta.annotations, status, jetstream)
                result = result.then(done)
        return result

    try:
        await run_pass(kind.resource, memo.backed[kind.resource.kind], work, call, deleting=False)
    finally:
        declared = kind.stream_name(spec)
        if declared and declared not in made and not status.get("conditions"):
            # The consumers applied with it wait for its first pass before looking at
            # the stream (`consumer.first_look_waits`); made or not, they look now.
            arrivals.announce(declared)


async def finalize(
    kind: StreamBackedKind,
    call: KopfCall,
) -> None:
    """Delete the stream (or keep it, as the deletion policy says)."""
    spec, memo = call.spec, call.memo
    declared = kind.stream_name(spec)
    if declared:
        memo.arrivals.forget(declared)  # its creation no longer tells a new consumer to look

    async def work(
        jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
    ) -> Result:
        return await stream_handlers.finalize(
            kind, spec, owner, jetstream, status=history.status, read_only=settings.read_only
        )

    await run_pass(kind.resource, memo.backed[kind.resource.kind], work, call, deleting=True)
