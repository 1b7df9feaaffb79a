"""Every kopf registration of the operator. Bodies stay thin: they call into `handlers`."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any, NamedTuple

import kopf

from . import GROUP, VERSION, metrics
from .api.kinds import CONSUMER, NATS_CONNECTION, ResourceKind
from .api.status import LAST_HANDLED_FIELD
from .handlers import connection as connection_handlers
from .handlers import consumer as consumer_handlers
from .handlers import stream as stream_handlers
from .handlers.arrivals import ANNOUNCED_FOR, StreamArrivals
from .handlers.connections import ConnectionDirectory, WatcherSet
from .handlers.consumer import StreamArrival
from .handlers.drift import DriftWatcher, WatchSettings
from .handlers.failures import NO_BASIS, FailureMemories, FailureMemory, History
from .handlers.pacing import Pace
from .handlers.registry import (
    ConnectionKey,
    ResourceRegistry,
    connection_key,
    consumer_stream,
    consumers_of,
    declaring,
    ready_counts,
    spec_connection_key,
)
from .handlers.results import (
    Result,
    deletion_blocked,
    needs_a_person,
    paused,
    released,
    unavailable,
)
from .handlers.status_writes import StatusBudget, status_changes, status_patch
from .k8s.client import KubeApi
from .k8s.login import (
    Burst,
    DeletionRequests,
    RequestLimit,
    WritesLull,
    credentials,
    limited_session,
)
from .k8s.peering import PeeringCheck
from .k8s.secrets import SecretReader
from .k8s.selection import LabelSelection
from .k8s.status import EventPoster, EventSink, ResourceWriter
from .k8s.watch import NamespaceWatches
from .memory import HeapTrimmer
from .nats.jsapi import JetStreamApi, JetStreamUnavailable
from .nats.pool import ConnectionPool, ConnectionTarget
from .queueing import EventObservers, observe_events, tune_queueing
from .reconcile.backed import STREAM_BACKED, STREAM_KIND, StreamBackedKind
from .reconcile.conditions import Outcome
from .reconcile.ownership import Owner
from .reconcile.renames import managed_connection, managed_stream, moved
from .settings import OperatorSettings, default_target

logger = logging.getLogger(__name__)

# kopf's own bookkeeping annotations. kopf ignores changes under its storage prefix, so it must
# differ from the prefix of the annotations people set (pause, purge) to keep those visible.
KOPF_ANNOTATION_PREFIX = f"kopf.{GROUP}"
FINALIZER = f"{GROUP}/finalizer"
HANDLER_RECONCILE = "reconcile"
HANDLER_FINALIZE = "finalize"


PAUSE_ANNOTATION = f"{GROUP}/paused"
SECRET_FINALIZER = f"{GROUP}/in-use"
"""Held on the Secrets of a working NatsConnection until the connection is deleted."""
RELEASE_ANNOTATION = f"{GROUP}/release-finalizer"
"""Set to "true" on a resource being deleted to let it go without touching NATS (NATS gone)."""


class SharedMemo(kopf.Memo):
    """The operator's memo, handed to every resource's handlers as is. kopf gives each object
    a shallow copy of it, kept as long as the object exists: about 0.9 KiB per resource for
    two dozen references the handlers only read. Per-object state lives in the registries."""

    def __copy__(self) -> SharedMemo:
        return self


def request_limit(memo: kopf.Memo) -> RequestLimit:
    """One limit for all the operator's Kubernetes requests, kopf's and its own, so both step
    back while the API server is slow or people create or delete resources in a burst, and
    Events give way to status; made by whichever of login and startup runs first. It also taps
    our watches for new resources."""
    if "kube_request_limit" not in memo:
        ours = OperatorSettings()
        burst = Burst(ours.yield_to_creations) if ours.yield_to_creations else None
        deletions = (
            DeletionRequests(Burst(ours.yield_to_deletions, seen_total=metrics.DELETIONS_SEEN))
            if ours.yield_to_deletions
            else None
        )
        memo.kube_request_limit = RequestLimit(
            ours.kube_requests,
            ours.kube_requests_adaptive,
            burst,
            added=lambda plural, body: _announce(memo, plural, body),
            deletions=deletions,
            lull=WritesLull(ours.events_yield_to_writes) if ours.events_yield_to_writes else None,
        )
    limit: RequestLimit = memo.kube_request_limit
    return limit


def _announce(memo: kopf.Memo, plural: str, body: Mapping[str, Any]) -> None:
    """A new resource, in its registry before kopf handles it (ResourceRegistry.announce)."""
    if "consumers" not in memo:
        return  # before startup: kopf's own handling brings it
    if plural == CONSUMER.plural:
        memo.consumers.announce(body)
    for kind in STREAM_BACKED:
        if plural == kind.resource.plural:
            memo.backed[kind.resource.kind].announce(body)


@kopf.on.login()
async def login(
    settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any
) -> kopf.ConnectionInfo | kopf.AiohttpSession:
    """Replaces kopf's default login, which goes through the `kubernetes` client (~35 MiB).
    Async: a session limiting requests belongs to the operator's event loop."""
    ours = OperatorSettings()
    selected = (*(kind.resource.plural for kind in STREAM_BACKED), CONSUMER.plural)
    selection = (LabelSelection(ours.selector, selected),) if ours.selector else ()
    return limited_session(credentials(settings), request_limit(memo), *selection)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """All framework tuning in one place, the shared NATS connections, and drift repair."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    # In status, not an annotation: kopf then writes it in the same request as our status,
    # which saves one of the four writes handling a new resource costs.
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(field=LAST_HANDLED_FIELD)
    # Only our own events reach Kubernetes; kopf's routine log lines stay in the log.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    operator_settings = OperatorSettings()
    tune_queueing(settings, operator_settings.workers)
    peering_check: PeeringCheck | None = None
    if operator_settings.peering:
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.clusterwide = True
        settings.peering.name = operator_settings.peering
        settings.peering.priority = operator_settings.priority
        settings.peering.lifetime = operator_settings.peering_lifetime
    else:
        settings.peering.standalone = True
    memo.settings = operator_settings
    memo.pool = ConnectionPool(request_timeout=operator_settings.nats_request_timeout)
    memo.backed = {kind.resource.kind: ResourceRegistry() for kind in STREAM_BACKED}
    memo.streams = memo.backed[STREAM_KIND.resource.kind]
    memo.consumers = ResourceRegistry()
    memo.arrivals = StreamArrivals()
    memo.resume_pace = Pace(RESUME_RATE)
    memo.natsconnections = ResourceRegistry()
    observe_events(
        EventObservers(
            GROUP,
            {
                plural: partial(_observe, memo, registry)
                for plural, registry in _observed(memo).items()
            },
            LAST_HANDLED_FIELD,
            progress_prefix=KOPF_ANNOTATION_PREFIX,
        )
    )
    memo.connection_probed = {}
    memo.failures = FailureMemories(
        lambda: FailureMemory(
            base_delay=operator_settings.retry_base_delay,
            max_delay=operator_settings.retry_max_delay,
            transient_max_delay=min(30.0, operator_settings.retry_max_delay),
        )
    )
    budget = memo.budget = StatusBudget.for_intervals(
        operator_settings.status_interval,
        operator_settings.status_writes_per_second,
        operator_settings.resync_interval,
    )
    kubernetes = memo.kubernetes = KubeApi(
        lambda: credentials(settings), middlewares=(request_limit(memo),)
    )
    if operator_settings.peering:
        peering_check = PeeringCheck(
            kubernetes,
            operator_settings.peering,
            os.environ.get("POD_ID", ""),
            operator_settings.priority,
        )
    memo.writer = ResourceWriter(kubernetes)
    memo.events = EventPoster(
        memo.writer, request_limit(memo).lull, normal=operator_settings.events == "all"
    )
    memo.secrets = SecretReader(kubernetes)
    memo.explained = {}
    memo.unresolved = set()
    memo.background = set()
    memo.connection_watches = None
    if not operator_settings.manage_connections:
        # Its own session: a watch holds a connection for WATCH_SECONDS, and must not take
        # one of those the operator's requests share.
        memo.connection_watches = NamespaceWatches(
            KubeApi(lambda: credentials(settings), connections=0),
            NATS_CONNECTION.plural,
            lambda event_type, body: _read_connection(memo, event_type, body),
        )
    memo.directory = ConnectionDirectory(
        default_target(operator_settings),
        memo.natsconnections,
        memo.secrets,
        memo.pool,
        require_reference=operator_settings.require_connection_ref,
        changed=lambda: _targets_changed(memo),
        follow=memo.connection_watches.follow if memo.connection_watches else None,
    )
    watch_settings = WatchSettings(
        resync_interval=operator_settings.resync_interval,
        consumer_resync_interval=operator_settings.consumer_resync_interval,
        consumer_idle_resync_interval=operator_settings.consumer_idle_resync_interval,
        use_advisories=operator_settings.advisories,
        read_only=operator_settings.read_only,
        pause_annotation=PAUSE_ANNOTATION,
    )

    def make_watcher(key: ConnectionKey, target: ConnectionTarget) -> DriftWatcher:
        return DriftWatcher(
            _backed(memo),
            memo.consumers,
            memo.pool,
            target,
            memo.writer,
            memo.events,
            watch_settings,
            key,
            may_act=peering_check.active if peering_check else None,
            failures=memo.failures.for_connection(key),
            budget=budget,
            explained=memo.explained.get,
        )

    memo.watchers = WatcherSet(make_watcher)
    memo.watchers.sync(memo.directory.known())
    # Freed heap stays in RSS until trimmed: idle at 2,000 resources 146-205 -> 110-113 MiB.
    memo.trimmer = asyncio.create_task(HeapTrimmer().run(), name="heap-trimmer")
    memo.follower = (
        None
        if operator_settings.manage_connections
        else asyncio.create_task(_follow_connections(memo), name="connection-follower")
    )
    if operator_settings.metrics_port is not None:
        registries = {
            **memo.backed,
            CONSUMER.kind: memo.consumers,
            NATS_CONNECTION.kind: memo.natsconnections,
        }
        metrics.serve(
            operator_settings.metrics_port,
            metrics.StateCollector(
                lambda: ready_counts(registries),
                lambda: [
                    (target.label, memo.pool.is_connected(target))
                    for target in memo.directory.known().values()
                ],
            ),
            operator_settings.metrics_address,
        )


@kopf.on.cleanup()
async def shut_down(memo: kopf.Memo, **_: Any) -> None:
    await memo.events.close()
    memo.trimmer.cancel()
    if memo.follower is not None:
        memo.follower.cancel()
        for task in list(memo.background):
            task.cancel()
        await memo.connection_watches.stop()
    await memo.watchers.stop()
    await memo.pool.close()
    await memo.kubernetes.close()


async def _jetstream(memo: kopf.Memo, namespace: str, spec: Mapping[str, Any]) -> JetStreamApi:
    directory: ConnectionDirectory = memo.directory
    pool: ConnectionPool = memo.pool
    return await pool.jetstream(await directory.target_for(namespace, spec))


def _owner(meta: kopf.Meta, namespace: str | None, name: str | None) -> Owner:
    return Owner(namespace or "", name or "", str(meta.get("uid", "")))


def _report(
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
    metrics.observe(
        kind,
        result.outcome.reason,
        (event.reason for event in result.events),
        time.perf_counter() - started,
    )
    if not _gone_after(body, deleting, result):
        for key, value in status_changes(status, result, generation, body.get("spec")).items():
            patch.status[key] = value
    for event in result.events:
        events.post(body, event.type, event.reason, event.message)
    if deleting and result.retry:
        raise kopf.TemporaryError(result.outcome.message, delay=result.delay or RETRY_FALLBACK)


def _gone_after(body: Mapping[str, Any], deleting: bool, result: Result) -> bool:
    """A deletion done, with no finalizer but ours: the object is gone once kopf removes it, so
    a status written now would be read by no one and cost a write per resource. Its Events stay.
    """
    finalizers = (body.get("metadata") or {}).get("finalizers") or []
    return deleting and not result.retry and all(each == FINALIZER for each in finalizers)


MADE = frozenset({"Created", "Recreated"})
"""Event reasons of a pass that made its stream or consumer in NATS."""

RETRY_FALLBACK = 5.0
"""Seconds before kopf retries a deletion whose pass set no delay of its own."""


def _backed(memo: kopf.Memo) -> dict[StreamBackedKind, ResourceRegistry]:
    return {kind: memo.backed[kind.resource.kind] for kind in STREAM_BACKED}


def _observe(memo: kopf.Memo, registry: ResourceRegistry, event: kopf.RawEvent) -> None:
    body = event.get("object") or {}
    uid = str((body.get("metadata") or {}).get("uid", ""))
    registry.observe(event.get("type"), body)
    if memo.connection_watches is not None and event.get("type") != "DELETED":
        _wanted_connection(memo, body)
    tracked = registry.get(uid)
    if tracked is not None:
        memo.watchers.observed(tracked)  # a consumer may wait for this stream's first status
    if event.get("type") == "DELETED":
        memo.failures.forget(uid)
        memo.budget.forget(uid)
        memo.explained.pop(uid, None)


RESUME_RATE = 200.0
"""First passes a second of the resources a restarted operator finds not Ready, over all kinds.
Gentle on NATS. A pass waiting for its turn holds one of kopf's workers, so new resources queue
behind these passes; they drain at this rate, where a random wait of up to 10 s each kept new
resources waiting for minutes at a small worker limit."""


def _ready_as_is(status: Mapping[str, Any], generation: int | None) -> bool:
    """Ready for the current generation, as the last operator left it."""
    if status.get("observedGeneration") != generation:
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


Work = Callable[[JetStreamApi, Owner, OperatorSettings, History], Awaitable[Result]]


async def _handle(
    kind: ResourceKind,
    registry: ResourceRegistry,
    work: Work,
    *,
    deleting: bool,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str | None,
    name: str | None,
    reason: str,
    memo: kopf.Memo,
) -> None:
    """What every Stream and Consumer handler does around its own work: honour the pause and
    release annotations, hold the resource's lock, find its connection, and report."""
    started = time.perf_counter()
    settings: OperatorSettings = memo.settings
    owner = _owner(meta, namespace, name)
    if reason == kopf.Reason.RESUME and not deleting:
        if _ready_as_is(status, meta.get("generation")):
            return  # drift repair's first listing checks it, at a page per 256 resources
        await asyncio.sleep(memo.resume_pace.wait())
    memory: FailureMemory = memo.failures.for_connection(spec_connection_key(owner.namespace, spec))
    history = History(meta.get("generation"), status, memory)
    named = spec.get("name") or spec.get("bucket") or spec.get("durableName")
    what = f"{kind.singular} {named}"
    if deleting and meta.annotations.get(RELEASE_ANNOTATION, "").lower() == "true":
        result = released(what, RELEASE_ANNOTATION)
    elif not deleting and meta.annotations.get(PAUSE_ANNOTATION, "").lower() == "true":
        result = paused(PAUSE_ANNOTATION)
    elif not deleting and not settings.read_only and (move := moved(spec, status, kind.kind)):
        # Before the connection is looked up: the new one may not even exist. A read-only
        # operator made nothing, so it may look wherever the spec points.
        refusal = needs_a_person(move.reason, move.message())
        result = memory.settle(owner.uid, NO_BASIS, refusal, history.ready_condition())
    else:
        async with registry.lock(owner.uid):
            watcher = memo.watchers.get(spec_connection_key(owner.namespace, spec))
            if watcher is not None:
                watcher.looking(owner.uid)
            try:
                # A deletion deletes what the resource manages, through the connection it
                # was made through, wherever the spec points now (a refused move).
                target = managed_connection(spec, status) if deleting else spec
                jetstream = await _jetstream(memo, owner.namespace, target)
                if watcher is not None:
                    jetstream = jetstream.noting_writes(watcher.own_writes)
                result = await work(jetstream, owner, settings, history)
            except JetStreamUnavailable as error:
                result = deletion_blocked(what, error) if deleting else unavailable(error)
                if not deleting:
                    result = memory.settle(owner.uid, NO_BASIS, result)
    if deleting:
        result = memory.settle(owner.uid, NO_BASIS, result, history.ready_condition())
    _report(
        result,
        kind=kind.kind,
        started=started,
        body=body,
        patch=patch,
        status=status,
        generation=meta.get("generation"),
        deleting=deleting,
        events=memo.events,
    )


class StreamBackedHandlers(NamedTuple):
    """The handlers registered with kopf for one kind holding a stream (coroutine functions,
    typed as kopf's decorators return them)."""

    reconcile: Callable[..., Any]
    finalize: Callable[..., Any]


def _serve_stream_backed(kind: StreamBackedKind) -> StreamBackedHandlers:
    """Register the handlers of one kind holding a stream. One shape serves Stream, KeyValue
    and ObjectStore; the kind only says how its spec becomes a stream."""
    plural = kind.resource.plural

    async def handle(
        work: Work,
        deleting: bool,
        spec: kopf.Spec,
        meta: kopf.Meta,
        status: kopf.Status,
        memo: kopf.Memo,
        kwargs: dict[str, Any],
    ) -> None:
        registry = memo.backed[kind.resource.kind]
        await _handle(
            kind.resource,
            registry,
            work,
            deleting=deleting,
            spec=spec,
            meta=meta,
            status=status,
            memo=memo,
            **_kopf_kwargs(kwargs),
        )

    @kopf.on.resume(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    @kopf.on.create(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    @kopf.on.update(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    async def reconcile(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        arrivals: StreamArrivals = memo.arrivals
        connection = spec_connection_key(str(meta.get("namespace", "")), spec)
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
                first=request_limit(memo).after_creations,
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
                purge = await stream_handlers.purge_if_asked(
                    kind, spec, meta.annotations, status, jetstream
                )
                result = result.then(purge)
            return result

        try:
            await handle(work, False, spec, meta, status, memo, kwargs)
        finally:
            declared = kind.stream_name(spec)
            if declared and declared not in made and not status.get("conditions"):
                # The consumers applied with it wait for its first pass before looking at
                # the stream (`_first_look_waits`); made or not, they look now.
                arrivals.announce(declared)

    @kopf.on.delete(GROUP, VERSION, plural, id=HANDLER_FINALIZE)
    async def finalize(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        declared = kind.stream_name(spec)
        if declared:
            arrivals: StreamArrivals = memo.arrivals
            arrivals.forget(declared)  # its creation no longer tells a new consumer to look

        async def work(
            jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
        ) -> Result:
            return await stream_handlers.finalize(
                kind, spec, owner, jetstream, status=history.status, read_only=settings.read_only
            )

        await handle(work, True, spec, meta, status, memo, kwargs)

    return StreamBackedHandlers(reconcile, finalize)


STREAM_BACKED_HANDLERS = {kind.resource.kind: _serve_stream_backed(kind) for kind in STREAM_BACKED}
"""By kind (Stream, KeyValue, ObjectStore)."""


def _observed(memo: kopf.Memo) -> dict[str, ResourceRegistry]:
    """The registry of each kind whose every watch event `_observe` reads, by plural: they keep
    drift repair and the handlers' waits current without API requests."""
    observed = {kind.resource.plural: memo.backed[kind.resource.kind] for kind in STREAM_BACKED}
    observed[CONSUMER.plural] = memo.consumers
    return observed


def serve_events(by_workers: bool) -> None:
    """Have the registries observe every event: through kopf's workers when `by_workers`
    (queueing.streamline_workers; `configure` names the observers), otherwise through kopf's
    own event handlers, which cost about 1 ms of kopf's bookkeeping an event."""
    if by_workers:
        return
    for plural in (*(kind.resource.plural for kind in STREAM_BACKED), CONSUMER.plural):

        async def remember(
            event: kopf.RawEvent, memo: kopf.Memo, resource: kopf.Resource, **_: Any
        ) -> None:
            """Async on purpose, as are the other registry handlers: kopf runs plain functions
            in a thread pool, and the registries are read by the event loop without locks."""
            _observe(memo, _observed(memo)[resource.plural], event)

        # The id keeps kopf's log lines for it under "Handler 'remember_<plural>'", which the
        # CLI filters out as routine.
        kopf.on.event(GROUP, VERSION, plural, id=f"remember_{plural}")(remember)


STREAM_ARRIVAL_TIMEOUT = 5.0
"""How long a new consumer waits for its stream's creation before reporting StreamNotFound."""

NEW_STREAM_ARRIVAL_TIMEOUT = ANNOUNCED_FOR
"""The same while no Stream resource declaring it has a status yet: its handler is still to come
(queued behind the workers of a burst, or waiting for the burst to end), and will create it."""

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


def _resolved_stream(memo: kopf.Memo, owner: Owner, spec: kopf.Spec) -> str | None:
    tracked = memo.consumers.named(owner.namespace, owner.name)
    if tracked is None:
        direct = spec.get("streamName")
        return direct if isinstance(direct, str) else None
    return consumer_stream(tracked, memo.streams)


def _unresolved_ref(
    memo: kopf.Memo, owner: Owner, selector: str | None
) -> Callable[[str], Awaitable[str | None]] | None:
    """With a label selector, a streamRef this process cannot resolve may name another
    deployment's Stream: one read of that Stream tells, on the Consumer's own failing pass.
    Drift repair's passes reuse the answer (`memo.explained`) and ask nothing."""
    if not selector:
        return None
    explained: dict[str, str] = memo.explained

    async def explain(stream: str) -> str | None:
        writer: ResourceWriter = memo.writer
        explained.pop(owner.uid, None)
        try:
            body = await writer.read_object(STREAM_KIND.resource.plural, owner.namespace, stream)
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


STREAM_REF_WAIT = 2.0
"""Seconds a new consumer waits for the Stream resource its `streamRef` names: applied together,
the stream's watch event may reach the operator a moment after the consumer's, on its own
watch, and a StreamNotFound meanwhile would cost writes and a later pass."""


async def _stream_of_new_consumer(
    memo: kopf.Memo, owner: Owner, spec: kopf.Spec, status: kopf.Status
) -> str | None:
    stream = _resolved_stream(memo, owner, spec)
    if stream is not None or status.get("conditions") or not spec.get("streamRef"):
        return stream
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STREAM_REF_WAIT
    while stream is None and loop.time() < deadline:
        await asyncio.sleep(0.05)
        stream = _resolved_stream(memo, owner, spec)
    return stream


def _first_look_waits(memo: kopf.Memo, stream: str, status: kopf.Status) -> bool:
    """Whether a consumer's first pass waits for its stream's announcement before looking at
    it: while no resource declaring the stream has had its first pass, a look would most
    likely find nothing (they were applied together), and the pass would wait anyway. That
    first pass announces the stream whether it made it or not, so a consumer of an adopted
    stream waits for that pass only; one deleted before its first pass gets none, so it is
    not waited for. A request per consumer of a burst."""
    if status.get("conditions") or memo.settings.read_only:
        return False
    declared = [
        resource for _, resource in declaring(stream, _backed(memo)) if not resource.deleting
    ]
    return bool(declared) and not any(resource.first_handled for resource in declared)


async def _recount_stream(
    memo: kopf.Memo, owner: Owner, spec: kopf.Spec, stream: str, jetstream: JetStreamApi
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


@kopf.on.resume(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
@kopf.on.create(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
@kopf.on.update(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
async def reconcile_consumer(
    spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **kwargs: Any
) -> None:
    connection = spec_connection_key(str(meta.get("namespace", "")), spec)

    async def stream_arrival(stream: str) -> StreamArrival:
        declared = declaring(stream, _backed(memo))
        if not declared:
            return False  # no Stream resource will create it: nothing to wait for
        arrivals: StreamArrivals = memo.arrivals
        coming = not any(resource.first_handled for _, resource in declared)
        timeout = NEW_STREAM_ARRIVAL_TIMEOUT if coming else STREAM_ARRIVAL_TIMEOUT
        if not await arrivals.wait(stream, timeout):
            return False
        return arrivals.created_reply(connection, stream) or True

    async def work(
        jetstream: JetStreamApi, owner: Owner, settings: OperatorSettings, history: History
    ) -> Result:
        stream = await _stream_of_new_consumer(memo, owner, spec, status)
        arrivals: StreamArrivals = memo.arrivals
        under_way = arrivals.begin(stream, owner.uid) if stream else None
        counted, result = False, None
        try:
            known_stream = arrivals.created_reply(connection, stream) if stream else None
            arrival: StreamArrival | None = None
            if stream and known_stream is None and _first_look_waits(memo, stream, status):
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
                unresolved_ref=_unresolved_ref(memo, owner, settings.selector),
            )
        finally:
            made = result is not None and any(event.reason in MADE for event in result.events)
            if under_way is not None:
                counted = arrivals.end(under_way, made)  # a new stream's first status counts it
        if stream and not counted and made:
            await _recount_stream(memo, owner, spec, stream, jetstream)
        return result

    await _handle(
        CONSUMER,
        memo.consumers,
        work,
        deleting=False,
        spec=spec,
        meta=meta,
        status=status,
        memo=memo,
        **_kopf_kwargs(kwargs),
    )


@kopf.on.delete(GROUP, VERSION, CONSUMER.plural, id=HANDLER_FINALIZE)
async def finalize_consumer(
    spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **kwargs: Any
) -> None:
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
            or _resolved_stream(memo, owner, spec)
            or (recorded if isinstance(recorded, str) else None),
            consumer_name=managed if isinstance(managed, str) and managed else None,
            read_only=settings.read_only,
        )

    await _handle(
        CONSUMER,
        memo.consumers,
        work,
        deleting=True,
        spec=spec,
        meta=meta,
        status=status,
        memo=memo,
        **_kopf_kwargs(kwargs),
    )


def _kopf_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kopf keyword arguments `_handle` uses, out of all those kopf passes."""
    keys = ("body", "patch", "namespace", "name", "reason")
    return {key: kwargs[key] for key in keys}


async def remember_connection(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.natsconnections.observe(event.get("type"), event.get("object") or {})


async def _read_connection(memo: kopf.Memo, event_type: str, body: dict[str, Any]) -> None:
    """Where NatsConnections are only read: a change from their watch (k8s/watch.py). A
    connection in use is checked again when its spec changed, and forgotten when it is gone."""
    metadata = body.get("metadata") or {}
    key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
    known = memo.natsconnections.named(*key)
    spec_before = None if known is None else known.spec  # the entry's body is replaced
    memo.natsconnections.observe(event_type, body)
    if event_type == "DELETED":
        await _switch_connection(memo, key, None)
        return
    after = memo.natsconnections.named(*key)
    if key in memo.directory.known() and after is not None and after.spec != spec_before:
        try:
            await _check_connection(memo, after.spec, *key, hold_secrets=False)
        except Exception:  # the next recheck tries again
            logger.exception("NatsConnection %s/%s could not be checked", *key)


def _wanted_connection(memo: kopf.Memo, body: Mapping[str, Any]) -> None:
    """Where NatsConnections are only read: a resource names a connection not known yet. Its
    resolution starts now, as a managing process's connection handler would: after a restart,
    resources Ready as they are never ask for their connection, and its drift repair would not
    start."""
    namespace = str((body.get("metadata") or {}).get("namespace", ""))
    key = spec_connection_key(namespace, body.get("spec") or {})
    if key is None or key in memo.directory.known() or key in memo.unresolved:
        return
    memo.unresolved.add(key)
    task = asyncio.create_task(_resolve_connection(memo, key, first=True), name=f"resolve-{key}")
    memo.background.add(task)
    task.add_done_callback(memo.background.discard)


async def _resolve_connection(memo: kopf.Memo, key: tuple[str, str], first: bool = False) -> None:
    directory: ConnectionDirectory = memo.directory
    try:
        await directory.target_for(key[0], {"connectionRef": key[1]})
    except Exception as error:  # retried with the connections' rechecks, logged once
        level = logging.INFO if first else logging.DEBUG
        logger.log(level, "NatsConnection %s/%s is not usable yet: %s", *key, error)
        return
    memo.unresolved.discard(key)


async def _follow_connections(memo: kopf.Memo) -> None:
    """Where NatsConnections are only read: recheck those in use as often as their manager
    does, so a rotated credential takes effect here too, and retry those not usable yet."""
    settings: OperatorSettings = memo.settings
    while True:
        await asyncio.sleep(settings.connection_check_interval)
        for key in [key for key in memo.directory.known() if key is not None]:
            tracked = memo.natsconnections.named(*key)
            if tracked is None or tracked.deleting:
                continue
            try:
                await _check_connection(memo, tracked.spec, *key, recheck=True, hold_secrets=False)
            except Exception:
                logger.exception("NatsConnection %s/%s could not be rechecked", *key)
        for key in list(memo.unresolved):
            await _resolve_connection(memo, key)


async def _check_connection(
    memo: kopf.Memo,
    spec: kopf.Spec | Mapping[str, Any],
    namespace: str,
    name: str,
    *,
    recheck: bool = False,
    hold_secrets: bool = True,
) -> Result | None:
    """Connect with the connection's current Secrets; switch users over when they changed.
    A `recheck` that finds nothing to ask JetStream (see `probe_due`) returns None.

    A working connection holds its Secrets with a finalizer, so the Streams and Consumers that
    use it can still be deleted in NATS after a namespace deletion removed everything at once."""
    key = (namespace, name)
    # When each connection last asked JetStream, and the pool's count of account changes then.
    probed: dict[tuple[str, str], tuple[float, int]] = memo.connection_probed
    target = await connection_handlers.target_of(spec, namespace, name, memo.secrets)
    if isinstance(target, Result):
        probed.pop(key, None)
        return target
    settings: OperatorSettings = memo.settings
    pool: ConnectionPool = memo.pool
    changes = pool.account_changes(target)
    probed_at, changes_then = probed.get(key, (None, changes))
    if recheck and not connection_handlers.probe_due(
        target,
        working=memo.directory.known().get(key),
        connected=pool.is_connected(target),
        probed_at=probed_at,
        now=time.monotonic(),
        refresh=max(settings.connection_check_interval, settings.status_interval),
        account_changed=changes != changes_then,
    ):
        return None
    result = await connection_handlers.probe(target, pool)
    if not result.outcome.ready:
        # The last working target stays: during an outage its drift watcher goes on trying
        # and shows the outage on the resources, and comes back by itself.
        probed.pop(key, None)
        return result
    probed[key] = (time.monotonic(), changes)
    for secret in connection_handlers.secret_names(spec) if hold_secrets else ():
        await memo.secrets.hold(namespace, secret, SECRET_FINALIZER, True)
    await _switch_connection(memo, key, target)
    return result


async def _switch_connection(
    memo: kopf.Memo, key: tuple[str, str], target: ConnectionTarget | None
) -> None:
    """Record a connection's target (None: gone); watchers and pooled connections follow."""
    if memo.directory.remember(key, target):
        await _targets_changed(memo)


async def _targets_changed(memo: kopf.Memo) -> None:
    memo.watchers.sync(memo.directory.known())
    await memo.pool.retain(memo.directory.known().values())


async def _release_secrets(
    memo: kopf.Memo, namespace: str, names: Iterable[str], leaving: str
) -> None:
    """Let go of Secrets no other NatsConnection of the namespace still reads."""
    still_read: set[str] = set()
    for other in memo.natsconnections:
        if other.owner.namespace == namespace and other.owner.name != leaving:
            still_read |= connection_handlers.secret_names(other.spec)
    for secret in set(names) - still_read:
        await memo.secrets.hold(namespace, secret, SECRET_FINALIZER, False)


async def reconcile_connection(
    old: kopf.BodyEssence | Any,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str | None,
    name: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    started = time.perf_counter()
    result = await _check_connection(memo, spec, namespace or "", name or "")
    assert result is not None  # only a recheck may find nothing to ask
    dropped = connection_handlers.secret_names((old or {}).get("spec") or {}) - (
        connection_handlers.secret_names(spec)
    )
    if dropped:
        await _release_secrets(memo, namespace or "", dropped, leaving="")
    _report(
        result,
        kind=NATS_CONNECTION.kind,
        started=started,
        body=body,
        patch=patch,
        status=status,
        generation=meta.get("generation"),
        events=memo.events,
    )


async def recheck_connection(
    stopped: kopf.DaemonStopped,
    spec: kopf.Spec,
    namespace: str | None,
    name: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Re-read the Secrets and re-check now and then: a rotated credential takes effect within
    seconds, and the status keeps showing the account's usage."""
    settings: OperatorSettings = memo.settings
    while not stopped:
        await stopped.wait(settings.connection_check_interval)
        if stopped:
            return
        tracked = memo.natsconnections.named(namespace or "", name or "")
        if tracked is None or tracked.deleting:
            continue
        result = await _check_connection(
            memo, tracked.spec, namespace or "", name or "", recheck=True
        )
        if result is None:
            continue
        patch = status_patch(tracked, result, memo.budget)
        if patch is not None:
            await memo.writer.patch_status(
                NATS_CONNECTION.plural, namespace or "", name or "", patch
            )


async def finalize_connection(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str | None,
    name: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A connection goes only after the Streams and Consumers using it are gone, as a
    PersistentVolumeClaim waits for its pods, so their deletion in NATS can still connect."""
    started = time.perf_counter()
    namespace, name = namespace or "", name or ""
    released_by_person = meta.annotations.get(RELEASE_ANNOTATION, "").lower() == "true"
    users = [] if released_by_person else await _connection_users(memo, namespace, name)
    if users:
        shown = ", ".join(users[:10]) + (f" and {len(users) - 10} more" if len(users) > 10 else "")
        result = Result(
            Outcome(
                False,
                "InUse",
                f"NatsConnection {name} is still used by {shown}; it is deleted once they are "
                "(delete them, or point them at another connection)",
            ),
            retry=True,
        )
    else:
        await _switch_connection(memo, (namespace, name), None)
        memo.connection_probed.pop((namespace, name), None)
        await _release_secrets(
            memo, namespace, connection_handlers.secret_names(spec), leaving=name
        )
        result = Result(Outcome(True, "Deleted", f"NatsConnection {name} released"))
    memory: FailureMemory = memo.failures.for_connection(None)
    result = memory.settle(str(meta.get("uid", "")), NO_BASIS, result)
    _report(
        result,
        kind=NATS_CONNECTION.kind,
        started=started,
        body=body,
        patch=patch,
        status=status,
        generation=meta.get("generation"),
        deleting=True,
        events=memo.events,
    )


def serve_connections(manage: bool) -> None:
    """Register the NatsConnection handlers, where this deployment manages the connections.
    A deployment that only reads them registers none, so kopf does not watch them at all: kopf
    stores what it handled in every object of a kind it handles, and removes its finalizer,
    shared with the managing deployment, from every object of a kind with no handler that
    needs one. `NamespaceWatches` and `_read_connection` keep such a deployment up to date."""
    if not manage:
        return
    plural = NATS_CONNECTION.plural
    kopf.on.event(GROUP, VERSION, plural, id="remember_connection")(remember_connection)
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(GROUP, VERSION, plural, id=HANDLER_RECONCILE)(reconcile_connection)
    kopf.daemon(GROUP, VERSION, plural, id="recheck", cancellation_timeout=5)(recheck_connection)
    kopf.on.delete(GROUP, VERSION, plural, id=HANDLER_FINALIZE)(finalize_connection)


async def _connection_users(memo: kopf.Memo, namespace: str, name: str) -> list[str]:
    """Resources of the namespace naming this connection, read from the API."""
    writer: ResourceWriter = memo.writer
    users = []
    for kind in (*(backed.resource for backed in STREAM_BACKED), CONSUMER):
        for item in await writer.list_objects(kind.plural, namespace):
            if (item.get("spec") or {}).get("connectionRef") == name:
                users.append(f"{kind.kind} {item['metadata']['name']}")
    return users
