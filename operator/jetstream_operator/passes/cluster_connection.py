"""The ClusterNatsConnection lifecycle: a NatsConnection's checks with its Secrets read from the
operator's namespace, the usage of each namespace it serves in status, and no release while
resources in any namespace still use it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from ..api.cluster_connection import ClusterNatsConnectionSpec
from ..api.kinds import CLUSTER_NATS_CONNECTION
from ..handlers import connection_check
from ..handlers.connection_directory import connection_fields
from ..handlers.registry import CLUSTER_SCOPE, TrackedResource, spec_connection_key
from ..handlers.results import Result, unavailable, validation_message
from ..handlers.status_writes import status_patch
from ..marks import RELEASE_ANNOTATION
from ..nats.jsapi import JetStreamUnavailable
from ..reconcile.conditions import Outcome
from ..services import SharedMemo
from .connection import check_connection, in_use, release_secrets, switch_connection
from .from_kopf import KopfCall, run_kopf_work
from .rechecks import recheck_every


async def checked(
    memo: SharedMemo, spec: Mapping[str, Any], name: str, recheck: bool = False
) -> Result | None:
    """The connection's check, with each served namespace's usage; a spec the models refuse
    (admission passed it under older rules) is InvalidSpec, and nothing is connected."""
    try:
        ClusterNatsConnectionSpec.model_validate(dict(spec))
    except ValidationError as error:
        return Result(Outcome(False, "InvalidSpec", validation_message(error), stalled=True))
    fields = connection_fields(spec)
    own_namespace = memo.settings.own_namespace
    if not own_namespace and connection_check.secret_names(fields):
        message = (
            "the operator does not know its own namespace, where this connection's Secrets "
            "are: set POD_NAMESPACE (the chart does) or JETSTREAM_OPERATOR_OWN_NAMESPACE"
        )
        return Result(Outcome(False, "OperatorNamespaceUnknown", message, stalled=True))
    if spec.get("systemAccount"):
        return await _connected_as_system(memo, fields, name)
    result = await check_connection(
        memo, fields, CLUSTER_SCOPE, name, recheck=recheck, secrets_namespace=own_namespace
    )
    if result is not None:
        result.status["namespaces"] = memo.tenancy.usage((CLUSTER_SCOPE, name))
    return result


async def _connected_as_system(memo: SharedMemo, fields: Mapping[str, Any], name: str) -> Result:
    """A system-account connection works when it connects; nothing of JetStream is asked."""
    target = await connection_check.target_of(
        fields, memo.settings.own_namespace, name, memo.secrets
    )
    if isinstance(target, Result):
        return target
    try:
        await memo.pool.connection(target)
    except JetStreamUnavailable as error:
        return unavailable(error)
    message = "connected as a user of the system account; NatsAccounts reach the resolver here"
    return Result(Outcome(True, "Connected", message))


async def reconcile(call: KopfCall, old: Mapping[str, Any] | None) -> None:
    """Check the connection, and let go of the Secrets it no longer names."""
    memo, name = call.memo, call.name

    async def check() -> Result:
        result = await checked(memo, call.spec, name)
        assert result is not None  # only a recheck may find nothing to ask
        before = connection_fields((old or {}).get("spec") or {})
        dropped = connection_check.secret_names(before) - connection_check.secret_names(
            connection_fields(call.spec)
        )
        if dropped:
            await release_secrets(memo, memo.settings.own_namespace, dropped, leaving=None)
        return result

    await run_kopf_work(CLUSTER_NATS_CONNECTION, memo.clusterconnections, check, call)


async def recheck(
    stopped: kopf.DaemonStopped, name: str | None, memo: SharedMemo, **_: Any
) -> None:
    """As a NatsConnection's recheck: rotated credentials, the account's and the namespaces'
    usage."""

    async def check(tracked: TrackedResource) -> None:
        result = await checked(memo, tracked.spec, name or "", recheck=True)
        if result is None:
            # Nothing asked of NATS; the namespaces' usage may have changed all the same.
            usage = memo.tenancy.usage((CLUSTER_SCOPE, name or ""))
            if usage != (tracked.status.get("namespaces") or []) and tracked.status:
                await memo.writer.patch_status(
                    CLUSTER_NATS_CONNECTION.plural, CLUSTER_SCOPE, name or "", {"namespaces": usage}
                )
            return
        patch = status_patch(tracked, result, memo.budget)
        if patch is not None:
            await memo.writer.patch_status(
                CLUSTER_NATS_CONNECTION.plural, CLUSTER_SCOPE, name or "", patch
            )

    interval = memo.settings.connection_check_interval
    await recheck_every(
        stopped, memo.clusterconnections, CLUSTER_SCOPE, name or "", lambda _: interval, check
    )


async def finalize(call: KopfCall) -> None:
    """Released once no resource of any namespace uses it (or a person released it)."""
    memo, name = call.memo, call.name
    key = (CLUSTER_SCOPE, name)

    async def release() -> Result:
        released_by_person = call.meta.annotations.get(RELEASE_ANNOTATION, "").lower() == "true"
        users = [] if released_by_person else users_of(memo, name)
        if users:
            return in_use(f"ClusterNatsConnection {name}", users)
        await switch_connection(memo, key, None)
        memo.connection_probed.pop(key, None)
        names = connection_check.secret_names(connection_fields(call.spec))
        await release_secrets(memo, memo.settings.own_namespace, names, leaving=key)
        return Result(Outcome(True, "Deleted", f"ClusterNatsConnection {name} released"))

    await run_kopf_work(
        CLUSTER_NATS_CONNECTION, memo.clusterconnections, release, call, deleting=True
    )


def users_of(memo: SharedMemo, name: str) -> list[str]:
    """The resources this operator serves that name the connection, deleting ones too (their
    deletion in NATS needs it), as namespace/name."""
    registries = {**memo.backed, "Consumer": memo.consumers}
    return sorted(
        f"{kind} {resource.owner.namespace}/{resource.owner.name}"
        for kind, registry in registries.items()
        for resource in registry
        if spec_connection_key(resource.owner.namespace, resource.spec) == (CLUSTER_SCOPE, name)
    )
