"""Every kopf registration of the operator, and nothing else: each body is one call into
`wiring` (start and stop) or `passes` (one pass of a resource)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import kopf

from . import GROUP, VERSION
from .api.kinds import CLUSTER_NATS_CONNECTION, CONSUMER, NATS_ACCOUNT, NATS_CONNECTION, NATS_USER
from .k8s.login import credentials, limited_session
from .k8s.selection import LabelSelection
from .passes import account, cluster_connection, connection, consumer, stream_backed, user
from .passes.from_kopf import KopfCall
from .reconcile.backed import STREAM_BACKED, StreamBackedKind
from .services import SharedMemo
from .settings import OperatorSettings
from .wiring import observe, observed, request_limit, start, stop

HANDLER_RECONCILE = "reconcile"
HANDLER_FINALIZE = "finalize"


@kopf.on.login()
async def login(
    settings: kopf.OperatorSettings, memo: SharedMemo, **_: Any
) -> kopf.ConnectionInfo | kopf.AiohttpSession:
    """Replaces kopf's default login, which goes through the `kubernetes` client (~35 MiB).
    Async: a session limiting requests belongs to the operator's event loop."""
    ours = OperatorSettings()
    selected = (*(kind.resource.plural for kind in STREAM_BACKED), CONSUMER.plural)
    selection = (LabelSelection(ours.selector, selected),) if ours.selector else ()
    return limited_session(credentials(settings), request_limit(memo), *selection)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: SharedMemo, **_: Any) -> None:
    """kopf's tuning and the shared services, before any resource is handled."""
    await start(settings, memo)


@kopf.on.cleanup()
async def shut_down(memo: SharedMemo, **_: Any) -> None:
    await stop(memo)


class StreamBackedHandlers(NamedTuple):
    """The handlers registered with kopf for one kind holding a stream (coroutine functions,
    typed as kopf's decorators return them)."""

    reconcile: Callable[..., Any]
    finalize: Callable[..., Any]


def _serve_stream_backed(kind: StreamBackedKind) -> StreamBackedHandlers:
    """Register the handlers of one kind holding a stream. One shape serves Stream, KeyValue
    and ObjectStore; the kind only says how its spec becomes a stream."""
    plural = kind.resource.plural

    @kopf.on.resume(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    @kopf.on.create(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    @kopf.on.update(GROUP, VERSION, plural, id=HANDLER_RECONCILE)
    async def reconcile(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: SharedMemo, **kwargs: Any
    ) -> None:
        await stream_backed.reconcile(kind, KopfCall.of(spec, meta, status, memo, kwargs))

    @kopf.on.delete(GROUP, VERSION, plural, id=HANDLER_FINALIZE)
    async def finalize(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: SharedMemo, **kwargs: Any
    ) -> None:
        await stream_backed.finalize(kind, KopfCall.of(spec, meta, status, memo, kwargs))

    return StreamBackedHandlers(reconcile, finalize)


STREAM_BACKED_HANDLERS = {kind.resource.kind: _serve_stream_backed(kind) for kind in STREAM_BACKED}
"""By kind (Stream, KeyValue, ObjectStore)."""


@kopf.on.resume(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
@kopf.on.create(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
@kopf.on.update(GROUP, VERSION, CONSUMER.plural, id=HANDLER_RECONCILE)
async def reconcile_consumer(
    spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: SharedMemo, **kwargs: Any
) -> None:
    await consumer.reconcile(KopfCall.of(spec, meta, status, memo, kwargs))


@kopf.on.delete(GROUP, VERSION, CONSUMER.plural, id=HANDLER_FINALIZE)
async def finalize_consumer(
    spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: SharedMemo, **kwargs: Any
) -> None:
    await consumer.finalize(KopfCall.of(spec, meta, status, memo, kwargs))


def serve_events(by_workers: bool) -> None:
    """Have the registries observe every event: through kopf's workers when `by_workers`
    (kopf_adaptations.streamline_workers; `wiring.start` names the observers), otherwise
    through kopf's own event handlers, which cost about 1 ms of kopf's bookkeeping an event."""
    if by_workers:
        return
    for plural in (*(kind.resource.plural for kind in STREAM_BACKED), CONSUMER.plural):

        async def remember(
            event: kopf.RawEvent, memo: SharedMemo, resource: kopf.Resource, **_: Any
        ) -> None:
            """Async on purpose, as are the other registry handlers: kopf runs plain functions
            in a thread pool, and the registries are read by the event loop without locks."""
            observe(memo, observed(memo)[resource.plural], event)

        # The id keeps kopf's log lines for it under "Handler 'remember_<plural>'", which the
        # CLI filters out as routine.
        kopf.on.event(GROUP, VERSION, plural, id=f"remember_{plural}")(remember)


def serve_connections(manage: bool) -> None:
    """Register the handlers of the kinds around connections (NatsConnection,
    ClusterNatsConnection, NatsAccount, NatsUser), where this deployment manages the
    connections. A deployment that only reads them registers none, so kopf does not watch them
    at all: kopf stores what it handled in every object of a kind it handles, and removes its
    finalizer, shared with the managing deployment, from every object of a kind with no handler
    that needs one. `NamespaceWatches` and `connection.read_connection` keep such a deployment
    up to date (ClusterNatsConnections are not followed there yet)."""
    if not manage:
        return
    _serve_checked_kind(
        NATS_CONNECTION.plural,
        "remember_connection",
        connection.remember_connection,
        connection.reconcile_connection,
        connection.recheck_connection,
        connection.finalize_connection,
    )
    _serve_checked_kind(
        CLUSTER_NATS_CONNECTION.plural,
        "remember_cluster_connection",
        connection.remember_cluster_connection,
        cluster_connection.reconcile,
        cluster_connection.recheck,
        cluster_connection.finalize,
    )
    _serve_checked_kind(
        NATS_ACCOUNT.plural,
        "remember_account",
        _remembering("accounts"),
        account.reconcile,
        account.recheck,
        account.finalize,
    )
    _serve_checked_kind(
        NATS_USER.plural,
        "remember_user",
        _remembering("natsusers"),
        user.reconcile,
        user.recheck,
        user.finalize,
    )


def _remembering(registry: str) -> Callable[..., Any]:
    """An event handler keeping the memo's registry of that name current."""

    async def remember(event: kopf.RawEvent, memo: SharedMemo, **_: Any) -> None:
        getattr(memo, registry).observe(event.get("type"), event.get("object") or {})

    return remember


def _serve_checked_kind(
    plural: str,
    remember_id: str,
    remember: Callable[..., Any],
    reconcile: Callable[[KopfCall, Any], Awaitable[None]],
    recheck: Callable[..., Any],
    finalize: Callable[[KopfCall], Awaitable[None]],
) -> None:
    """One kind checked in the background: the registry's events, its passes, a daemon that
    rechecks it, and its release."""

    async def reconcile_handler(
        old: kopf.BodyEssence | Any,
        spec: kopf.Spec,
        meta: kopf.Meta,
        status: kopf.Status,
        memo: SharedMemo,
        **kwargs: Any,
    ) -> None:
        await reconcile(KopfCall.of(spec, meta, status, memo, kwargs), old)

    async def finalize_handler(
        spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, memo: SharedMemo, **kwargs: Any
    ) -> None:
        await finalize(KopfCall.of(spec, meta, status, memo, kwargs))

    kopf.on.event(GROUP, VERSION, plural, id=remember_id)(remember)
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(GROUP, VERSION, plural, id=HANDLER_RECONCILE)(reconcile_handler)
    kopf.daemon(GROUP, VERSION, plural, id="recheck", cancellation_timeout=5)(recheck)
    kopf.on.delete(GROUP, VERSION, plural, id=HANDLER_FINALIZE)(finalize_handler)
