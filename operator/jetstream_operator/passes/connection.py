"""The NatsConnection lifecycle: check a connection with its Secrets, hold those Secrets while
it works, switch the drift watchers and pooled connections over when its target changes, and
let it go only after the resources using it are gone. Where connections are only read (another
deployment manages them), the same checks follow their watch instead of kopf's handlers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from ..api.kinds import CONSUMER, NATS_CONNECTION
from ..handlers import connection_check
from ..handlers.connection_directory import connection_fields
from ..handlers.registry import CLUSTER_SCOPE, TrackedResource, spec_connection_key
from ..handlers.results import Result
from ..handlers.status_writes import status_patch
from ..marks import RELEASE_ANNOTATION, SECRET_FINALIZER
from ..nats.pool import ConnectionTarget
from ..reconcile.backed import STREAM_BACKED
from ..reconcile.conditions import Outcome
from ..services import SharedMemo
from .from_kopf import KopfCall, run_kopf_work
from .rechecks import recheck_every

logger = logging.getLogger(__name__)


async def remember_connection(event: kopf.RawEvent, memo: SharedMemo, **_: Any) -> None:
    memo.natsconnections.observe(event.get("type"), event.get("object") or {})


async def remember_cluster_connection(event: kopf.RawEvent, memo: SharedMemo, **_: Any) -> None:
    memo.clusterconnections.observe(event.get("type"), event.get("object") or {})


async def read_connection(memo: SharedMemo, event_type: str, body: dict[str, Any]) -> None:
    """Where NatsConnections are only read: a change from their watch (k8s/watch.py). A
    connection in use is checked again when its spec changed, and forgotten when it is gone."""
    metadata = body.get("metadata") or {}
    key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
    known = memo.natsconnections.named(*key)
    spec_before = None if known is None else known.spec  # the entry's body is replaced
    memo.natsconnections.observe(event_type, body)
    if event_type == "DELETED":
        await switch_connection(memo, key, None)
        return
    after = memo.natsconnections.named(*key)
    if key in memo.directory.known() and after is not None and after.spec != spec_before:
        try:
            await check_connection(memo, after.spec, *key, hold_secrets=False)
        except Exception:  # the next recheck tries again
            logger.exception("NatsConnection %s/%s could not be checked", *key)


def wanted_connection(memo: SharedMemo, body: Mapping[str, Any]) -> None:
    """Where NatsConnections are only read: a resource names a connection not known yet. Its
    resolution starts now, as a managing process's connection handler would: after a restart,
    resources Ready as they are never ask for their connection, and its drift repair would not
    start."""
    namespace = str((body.get("metadata") or {}).get("namespace", ""))
    key = spec_connection_key(namespace, body.get("spec") or {})
    if key is None or key in memo.directory.known() or key in memo.unresolved:
        return
    if key[0] == CLUSTER_SCOPE:
        # Not followed where connections are only read (docs/tenancy.md): resolving it as a
        # NatsConnection would watch a namespace "" and retry with every recheck.
        return
    memo.unresolved.add(key)
    task = asyncio.create_task(_resolve_connection(memo, key, first=True), name=f"resolve-{key}")
    memo.background.add(task)
    task.add_done_callback(memo.background.discard)


async def _resolve_connection(memo: SharedMemo, key: tuple[str, str], first: bool = False) -> None:
    try:
        await memo.directory.target_for(key[0], {"connectionRef": key[1]})
    except Exception as error:  # retried with the connections' rechecks, logged once
        level = logging.INFO if first else logging.DEBUG
        logger.log(level, "NatsConnection %s/%s is not usable yet: %s", *key, error)
        return
    memo.unresolved.discard(key)


async def follow_connections(memo: SharedMemo) -> None:
    """Where NatsConnections are only read: recheck those in use as often as their manager
    does, so a rotated credential takes effect here too, and retry those not usable yet."""
    settings = memo.settings
    while True:
        await asyncio.sleep(settings.connection_check_interval)
        for key in [key for key in memo.directory.known() if key is not None]:
            tracked = memo.natsconnections.named(*key)
            if tracked is None or tracked.deleting:
                continue
            try:
                await check_connection(memo, tracked.spec, *key, recheck=True, hold_secrets=False)
            except Exception:
                logger.exception("NatsConnection %s/%s could not be rechecked", *key)
        for key in list(memo.unresolved):
            await _resolve_connection(memo, key)


async def check_connection(
    memo: SharedMemo,
    spec: kopf.Spec | Mapping[str, Any],
    namespace: str,
    name: str,
    *,
    recheck: bool = False,
    hold_secrets: bool = True,
    secrets_namespace: str | None = None,
) -> Result | None:
    """Connect with the connection's current Secrets (in `secrets_namespace`, by default the
    connection's own); switch users over when they changed. A `recheck` that finds nothing to
    ask JetStream (see `probe_due`) returns None.

    A working connection holds its Secrets with a finalizer, so the Streams and Consumers that
    use it can still be deleted in NATS after a namespace deletion removed everything at once."""
    key = (namespace, name)
    secrets_namespace = namespace if secrets_namespace is None else secrets_namespace
    probed = memo.connection_probed
    target = await connection_check.target_of(spec, secrets_namespace, name, memo.secrets)
    if isinstance(target, Result):
        probed.pop(key, None)
        return target
    settings = memo.settings
    pool = memo.pool
    changes = pool.account_changes(target)
    probed_at, changes_then = probed.get(key, (None, changes))
    if recheck and not connection_check.probe_due(
        target,
        working=memo.directory.known().get(key),
        connected=pool.is_connected(target),
        probed_at=probed_at,
        now=time.monotonic(),
        refresh=max(settings.connection_check_interval, settings.status_interval),
        account_changed=changes != changes_then,
    ):
        return None
    result = await connection_check.probe(target, pool)
    if not result.outcome.ready:
        # The last working target stays: during an outage its drift watcher goes on trying
        # and shows the outage on the resources, and comes back by itself.
        probed.pop(key, None)
        return result
    probed[key] = (time.monotonic(), changes)
    for secret in connection_check.secret_names(spec) if hold_secrets else ():
        await memo.secrets.hold(secrets_namespace, secret, SECRET_FINALIZER, True)
    await switch_connection(memo, key, target)
    return result


async def switch_connection(
    memo: SharedMemo, key: tuple[str, str], target: ConnectionTarget | None
) -> None:
    """Record a connection's target (None: gone); watchers and pooled connections follow."""
    if memo.directory.remember(key, target):
        await targets_changed(memo)


async def targets_changed(memo: SharedMemo) -> None:
    memo.watchers.sync(memo.directory.known())
    await memo.pool.retain(memo.directory.known().values())


async def release_secrets(
    memo: SharedMemo, namespace: str, names: Iterable[str], leaving: tuple[str, str] | None
) -> None:
    """Let go of Secrets of `namespace` no other connection still reads (NatsConnections of
    the namespace; ClusterNatsConnections too, in the operator's namespace)."""
    still_read: set[str] = set()
    for other in memo.natsconnections:
        if other.owner.namespace == namespace and other.owner.key != leaving:
            still_read |= connection_check.secret_names(other.spec)
    if namespace == memo.settings.own_namespace:
        for other in memo.clusterconnections:
            if other.owner.key != leaving:
                still_read |= connection_check.secret_names(connection_fields(other.spec))
    for secret in set(names) - still_read:
        await memo.secrets.hold(namespace, secret, SECRET_FINALIZER, False)


async def reconcile_connection(call: KopfCall, old: Mapping[str, Any] | None) -> None:
    """Check the connection with its Secrets, and let go of those it no longer names."""
    memo, spec, namespace, name = call.memo, call.spec, call.namespace, call.name

    async def check() -> Result:
        result = await check_connection(memo, spec, namespace, name)
        assert result is not None  # only a recheck may find nothing to ask
        dropped = connection_check.secret_names((old or {}).get("spec") or {}) - (
            connection_check.secret_names(spec)
        )
        if dropped:
            await release_secrets(memo, namespace, dropped, leaving=None)
        return result

    await run_kopf_work(NATS_CONNECTION, memo.natsconnections, check, call)


async def recheck_connection(
    stopped: kopf.DaemonStopped,
    spec: kopf.Spec,
    namespace: str | None,
    name: str | None,
    memo: SharedMemo,
    **_: Any,
) -> None:
    """Re-read the Secrets and re-check now and then: a rotated credential takes effect within
    seconds, and the status keeps showing the account's usage."""

    async def check(tracked: TrackedResource) -> None:
        result = await check_connection(
            memo, tracked.spec, namespace or "", name or "", recheck=True
        )
        if result is None:
            return
        patch = status_patch(tracked, result, memo.budget)
        if patch is not None:
            await memo.writer.patch_status(
                NATS_CONNECTION.plural, namespace or "", name or "", patch
            )

    interval = memo.settings.connection_check_interval
    await recheck_every(
        stopped, memo.natsconnections, namespace or "", name or "", lambda _: interval, check
    )


async def finalize_connection(call: KopfCall) -> None:
    """A connection goes only after the Streams and Consumers using it are gone, as a
    PersistentVolumeClaim waits for its pods, so their deletion in NATS can still connect."""
    memo, spec, meta, namespace, name = call.memo, call.spec, call.meta, call.namespace, call.name

    async def release() -> Result:
        released_by_person = meta.annotations.get(RELEASE_ANNOTATION, "").lower() == "true"
        users = [] if released_by_person else await _connection_users(memo, namespace, name)
        if users:
            return in_use(f"NatsConnection {name}", users)
        await switch_connection(memo, (namespace, name), None)
        memo.connection_probed.pop((namespace, name), None)
        await release_secrets(
            memo, namespace, connection_check.secret_names(spec), leaving=(namespace, name)
        )
        return Result(Outcome(True, "Deleted", f"NatsConnection {name} released"))

    await run_kopf_work(NATS_CONNECTION, memo.natsconnections, release, call, deleting=True)


def in_use(what: str, users: list[str]) -> Result:
    """A connection kept while resources use it: their deletion in NATS needs it."""
    shown = ", ".join(users[:10]) + (f" and {len(users) - 10} more" if len(users) > 10 else "")
    message = (
        f"{what} is still used by {shown}; it is deleted once they are (delete them, or point "
        "them at another connection)"
    )
    return Result(Outcome(False, "InUse", message), retry=True)


async def _connection_users(memo: SharedMemo, namespace: str, name: str) -> list[str]:
    """Resources of the namespace naming this connection, read from the API."""
    writer = memo.writer
    users = []
    for kind in (*(backed.resource for backed in STREAM_BACKED), CONSUMER):
        for item in await writer.list_objects(kind.plural, namespace):
            if (item.get("spec") or {}).get("connectionRef") == name:
                users.append(f"{kind.kind} {item['metadata']['name']}")
    return users
