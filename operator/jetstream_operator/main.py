"""Every kopf registration of the operator. Bodies stay thin: they call into `handlers`."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from . import GROUP, VERSION
from .api.kinds import STREAM
from .handlers import stream as stream_handlers
from .handlers.stream import Result
from .nats.jsapi import JetStreamApi, JetStreamUnavailable
from .nats.pool import ConnectionPool, ConnectionTarget
from .reconcile.conditions import conditions_for
from .reconcile.ownership import Owner
from .settings import OperatorSettings

ANNOTATION_PREFIX = GROUP
FINALIZER = f"{GROUP}/finalizer"
HANDLER_RECONCILE = "reconcile"
HANDLER_FINALIZE = "finalize"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """All framework tuning in one place, and the shared NATS connections."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Only our own events reach Kubernetes; kopf's routine log lines stay in the log.
    settings.posting.level = logging.WARNING
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    operator_settings = OperatorSettings()
    memo.settings = operator_settings
    memo.pool = ConnectionPool(request_timeout=operator_settings.nats_request_timeout)


@kopf.on.cleanup()
async def close_connections(memo: kopf.Memo, **_: Any) -> None:
    await memo.pool.close()


async def _default_jetstream(memo: kopf.Memo) -> JetStreamApi:
    settings: OperatorSettings = memo.settings
    pool: ConnectionPool = memo.pool
    return await pool.jetstream(ConnectionTarget(tuple(settings.nats_servers())))


def _owner(meta: kopf.Meta, namespace: str | None, name: str | None) -> Owner:
    return Owner(namespace or "", name or "", str(meta.get("uid", "")))


def _report(
    result: Result,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    status: kopf.Status,
    generation: int | None,
    retry: int,
    settings: OperatorSettings,
) -> None:
    """Write the outcome into status, post events, and ask kopf to retry with backoff."""
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = conditions_for(
        result.outcome, generation, status.get("conditions") or []
    )
    for key, value in result.status.items():
        patch.status[key] = value
    for event in result.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    if result.retry:
        raise kopf.TemporaryError(result.outcome.message, delay=settings.retry_delay(retry))


@kopf.on.resume(GROUP, VERSION, STREAM.plural, id=HANDLER_RECONCILE)
@kopf.on.create(GROUP, VERSION, STREAM.plural, id=HANDLER_RECONCILE)
@kopf.on.update(GROUP, VERSION, STREAM.plural, id=HANDLER_RECONCILE, field="spec")
async def reconcile_stream(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str | None,
    name: str | None,
    retry: int,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    try:
        jetstream = await _default_jetstream(memo)
        result = await stream_handlers.reconcile(spec, _owner(meta, namespace, name), jetstream)
    except JetStreamUnavailable as error:
        result = stream_handlers.unavailable(error)
    _report(
        result,
        body=body,
        patch=patch,
        status=status,
        generation=meta.get("generation"),
        retry=retry,
        settings=memo.settings,
    )


@kopf.on.delete(GROUP, VERSION, STREAM.plural, id=HANDLER_FINALIZE)
async def finalize_stream(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    namespace: str | None,
    name: str | None,
    retry: int,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    try:
        jetstream = await _default_jetstream(memo)
        result = await stream_handlers.finalize(spec, _owner(meta, namespace, name), jetstream)
    except JetStreamUnavailable as error:
        result = stream_handlers.unavailable(error)
        result.outcome = stream_handlers.deletion_blocked(spec, error)
    _report(
        result,
        body=body,
        patch=patch,
        status=status,
        generation=meta.get("generation"),
        retry=retry,
        settings=memo.settings,
    )
