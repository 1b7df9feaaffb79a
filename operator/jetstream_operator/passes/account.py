"""The NatsAccount lifecycle: keys made once and kept in a Secret of the operator's namespace,
the account's JWT signed with the operator's signing key and pushed to the resolver through a
system-account connection, pushed again when the resolver's copy drifts, and users revoked in
it. Deleting a NatsAccount leaves the account in NATS and keeps its keys: made again with the
same name, it is the same account, with its streams."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from nats.errors import Error as NatsError
from pydantic import ValidationError

from ..api.account import NatsAccountSpec
from ..api.kinds import NATS_ACCOUNT
from ..handlers.connection_directory import ConnectionNotReady
from ..handlers.registry import CLUSTER_SCOPE, ConnectionKey, TrackedResource
from ..handlers.results import Event, Result, validation_message
from ..handlers.status_writes import status_patch
from ..k8s.client import ApiError
from ..k8s.secrets import SecretProblem
from ..nats import jsz, jwt
from ..nats.account_keys import AccountKeys, keys_secret_name
from ..nats.jsz import AccountConsumers, AccountMonitoring
from ..reconcile.accounts import account_claims, same_account
from ..reconcile.conditions import Outcome, now_rfc3339
from ..services import SharedMemo
from .envelope import event_reference
from .from_kopf import KopfCall, run_kopf_work
from .rechecks import RECHECKED, next_wait, ready_condition, recheck_every, settled

logger = logging.getLogger(__name__)

CLAIMS_UPDATE = "$SYS.REQ.CLAIMS.UPDATE"


def claims_lookup(public_key: str) -> str:
    return f"$SYS.REQ.ACCOUNT.{public_key}.CLAIMS.LOOKUP"


class AccountProblem(Exception):
    """The account cannot be pushed now; `outcome` says why and whether retrying helps."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _own_namespace(memo: SharedMemo) -> str:
    namespace = memo.settings.own_namespace
    if not namespace:
        message = (
            "the operator does not know its own namespace, where account keys are kept: set "
            "POD_NAMESPACE (the chart does) or JETSTREAM_OPERATOR_OWN_NAMESPACE"
        )
        raise AccountProblem(Outcome(False, "OperatorNamespaceUnknown", message, stalled=True))
    return namespace


async def account_keys(memo: SharedMemo, name: str, *, make: bool) -> AccountKeys | None:
    """The account's keys, made and stored on first use when `make`. Read from their Secret
    once per process: the operator is the only writer, so its users' rechecks and the
    account's own cost no request."""
    known = memo.account_keys.get(name)
    if known is not None:
        return known
    namespace = _own_namespace(memo)
    stored = await memo.owned_secrets.read(namespace, keys_secret_name(name))
    if stored is not None:
        keys = memo.account_keys[name] = AccountKeys.of(stored)
        return keys
    if not make:
        return None
    keys = AccountKeys.made(name)
    await store_keys(memo, name, keys)
    return keys


async def store_keys(memo: SharedMemo, name: str, keys: AccountKeys) -> None:
    await memo.owned_secrets.apply(
        _own_namespace(memo),
        keys_secret_name(name),
        keys.values(),
        labels={"jetstream-operator.io/natsaccount": name},
        connection_secret=True,  # a ClusterNatsConnection with spec.account reads operator.creds
    )
    memo.account_keys[name] = keys


async def _signer(memo: SharedMemo, spec: NatsAccountSpec) -> str:
    reference = spec.operator_signing_key
    try:
        values = await memo.secrets.values(_own_namespace(memo), reference.secret_name)
    except SecretProblem as problem:
        raise AccountProblem(Outcome(False, "SecretProblem", str(problem))) from None
    seed = values.get(reference.key, b"").decode().strip()
    try:
        if jwt.role_of(jwt.public_key(seed)) != "operator":
            raise ValueError
    except ValueError:
        message = (
            f"key {reference.key!r} of Secret {reference.secret_name} holds no operator seed "
            '("SO...")'
        )
        raise AccountProblem(Outcome(False, "InvalidSigningKey", message, stalled=True)) from None
    return seed


def _token(name: str, spec: NatsAccountSpec, keys: AccountKeys, signer: str) -> str:
    claims = account_claims(spec, [keys.signing_key], keys.revocations)
    return jwt.encode(keys.public_key, name, claims, signer)


async def _system_request(memo: SharedMemo, spec: NatsAccountSpec, subject: str, data: str) -> str:
    """A request to the servers' system account; Reconciling while it cannot be made."""
    try:
        target = await memo.directory.system_target(spec.system_connection_ref)
        client = await memo.pool.connection(target)
        answer = await client.request(
            subject, data.encode(), timeout=memo.settings.nats_request_timeout
        )
    except ConnectionNotReady as error:
        raise AccountProblem(Outcome(False, "ResolverUnreachable", str(error))) from None
    except (NatsError, TimeoutError, OSError) as error:
        memo.directory.forget_system_target(spec.system_connection_ref)
        message = f"the resolver did not answer through {spec.system_connection_ref}: {error!r}"
        raise AccountProblem(Outcome(False, "ResolverUnreachable", message)) from None
    return str(answer.data.decode())


async def push(memo: SharedMemo, name: str, spec: NatsAccountSpec, keys: AccountKeys) -> str:
    """Push the account's JWT; the resolver's answer, or AccountProblem with its refusal."""
    signer = await _signer(memo, spec)
    token = _token(name, spec, keys, signer)
    text = await _system_request(memo, spec, CLAIMS_UPDATE, token)
    memo.account_signers[name] = jwt.public_key(signer)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = {"error": {"description": text[:200]}}
    if (answer.get("data") or {}).get("code") == 200:
        return str(answer["data"].get("message", "jwt updated"))
    error = answer.get("error") or {}
    message = f"the resolver refused the account: {error.get('description') or text[:200]}"
    raise AccountProblem(Outcome(False, "ResolverRefused", message))


async def drifted(memo: SharedMemo, name: str, spec: NatsAccountSpec, keys: AccountKeys) -> bool:
    """Whether the resolver's copy differs from what we push (or is gone). The signer is the
    one of our last push (read once after a start), so a settled account reads no Secret."""
    held = await _system_request(memo, spec, claims_lookup(keys.public_key), "")
    try:
        pushed = jwt.decode(held)
    except jwt.InvalidToken:
        return True
    signer = memo.account_signers.get(name)
    if signer is None:
        signer = memo.account_signers[name] = jwt.public_key(await _signer(memo, spec))
    wanted = {
        "sub": keys.public_key,
        "iss": signer,
        "nats": {
            **account_claims(spec, [keys.signing_key], keys.revocations),
            "version": jwt.CLAIMS_VERSION,
        },
    }
    return not same_account(pushed, wanted)


def lock_for(memo: SharedMemo, name: str) -> asyncio.Lock:
    """One lock per account: its pass and its users' revocations change the same JWT."""
    return memo.account_locks.setdefault(name, asyncio.Lock())


async def checked(memo: SharedMemo, name: str, spec_body: Mapping[str, Any], force: bool) -> Result:
    """Push the account when `force` or when the resolver's copy drifted; the status says
    where it stands."""
    try:
        spec = NatsAccountSpec.model_validate(dict(spec_body))
    except ValidationError as error:
        return Result(Outcome(False, "InvalidSpec", validation_message(error), stalled=True))
    events: list[Event] = []
    try:
        async with lock_for(memo, name):
            keys = await account_keys(memo, name, make=True)
            assert keys is not None
            current = keys.without_expired(int(time.time()))
            if current is not keys:
                # Revocations of credentials that expired since: smaller claims, pushed now.
                await store_keys(memo, name, current)
                keys, force = current, True
            status: dict[str, Any] = {
                "publicKey": keys.public_key,
                "signingKey": keys.signing_key,
                "keysSecret": keys_secret_name(name),
                "revokedUsers": len(keys.revocations),
            }
            if force or await drifted(memo, name, spec, keys):
                status["serverAnswer"] = await push(memo, name, spec, keys)
                status["pushedAt"] = now_rfc3339()
                if not force:
                    message = (
                        "the resolver's copy of the account differed or was gone: pushed again"
                    )
                    events.append(Event("Warning", "Repushed", message))
    except AccountProblem as problem:
        return Result(problem.outcome, retry=not problem.outcome.stalled)
    except ApiError as error:
        outcome = Outcome(False, "KeysUnavailable", f"the account's keys Secret: {error}")
        return Result(outcome, retry=True)
    message = f"account {keys.public_key} is in the resolver"
    return Result(Outcome(True, "Pushed", message), status=status, events=events)


async def revoke(
    memo: SharedMemo,
    account: str,
    public_keys: list[str],
    expiries: Mapping[str, int | None] | None = None,
) -> Result | None:
    """Revoke users in the account's JWT (connections with them are refused from then on);
    None when the account is gone or was never made, so there is nothing to revoke in.
    `expiries` says when a key's credentials expire anyway, after which its revocation goes."""
    tracked = memo.accounts.named(CLUSTER_SCOPE, account)
    if tracked is None:
        return None
    try:
        spec = NatsAccountSpec.model_validate(dict(tracked.spec))
    except ValidationError:
        message = f"NatsAccount {account!r} has an invalid spec: its users cannot be revoked yet"
        return Result(Outcome(False, "AccountNotReady", message), retry=True)
    try:
        async with lock_for(memo, account):
            keys = await account_keys(memo, account, make=False)
            if keys is None:
                return None
            now = int(time.time())
            fresh = {key: now for key in public_keys if key not in keys.revocations}
            if fresh:
                ending = {
                    key: int(expiry)
                    for key, expiry in (expiries or {}).items()
                    if key in fresh and expiry is not None
                }
                revoking = replace(
                    keys,
                    revocations={**keys.revocations, **fresh},
                    revocation_expiries={**keys.revocation_expiries, **ending},
                )
                await store_keys(memo, account, revoking)
                keys = revoking
            await push(memo, account, spec, keys)
    except AccountProblem as problem:
        return Result(problem.outcome, retry=True)
    return Result(Outcome(True, "Revoked", f"revoked in account {account}"))


async def reconcile(call: KopfCall, old: Mapping[str, Any] | None) -> None:
    """Push the account as declared: at creation and every change; at a start where it
    drifted."""
    memo, name = call.memo, call.name
    # At a restart the resolver's copy is compared first: nothing is pushed that is there.
    force = call.reason != kopf.Reason.RESUME
    memory = memo.failures.for_connection(RECHECKED)

    async def push_as_declared() -> Result:
        result = await checked(memo, name, call.spec, force=force)
        return settled(memory, call.owner.uid, result, ready_condition(call.status))

    await run_kopf_work(NATS_ACCOUNT, memo.accounts, push_as_declared, call)


async def recheck(
    stopped: kopf.DaemonStopped, name: str | None, memo: SharedMemo, **_: Any
) -> None:
    """Look at the resolver's copy every connection check interval: pushed again where it
    drifted, and a failed push retried. Nothing is written when nothing changed."""

    async def check(tracked: TrackedResource) -> None:
        ready = any(
            item.get("type") == "Ready" and item.get("status") == "True"
            for item in tracked.status.get("conditions") or []
        )
        result = await checked(memo, name or "", tracked.spec, force=not ready)
        result = settled(memory, tracked.owner.uid, result, ready_condition(tracked.status))
        patch = status_patch(tracked, result, memo.budget)
        if patch is not None:
            await memo.writer.patch_status(NATS_ACCOUNT.plural, CLUSTER_SCOPE, name or "", patch)
        for event in result.events:
            memo.events.post(
                event_reference(NATS_ACCOUNT, tracked.owner),
                event.type,
                event.reason,
                event.message,
            )

    interval = memo.settings.connection_check_interval
    memory = memo.failures.for_connection(RECHECKED)
    await recheck_every(
        stopped,
        memo.accounts,
        CLUSTER_SCOPE,
        name or "",
        lambda tracked: next_wait(memory, tracked, interval),
        check,
    )


async def finalize(call: KopfCall) -> None:
    """Let go once no NatsUser or ClusterNatsConnection uses the account; the account stays in
    NATS and its keys stay in their Secret."""
    memo, name = call.memo, call.name

    async def release() -> Result:
        users = users_of(memo, name)
        if users:
            shown = ", ".join(users[:10])
            message = f"NatsAccount {name} is still used by {shown}; delete them first"
            return Result(Outcome(False, "InUse", message), retry=True)
        message = (
            f"NatsAccount {name} released; the account stays in NATS and its keys in Secret "
            f"{keys_secret_name(name)}"
        )
        return Result(Outcome(True, "Deleted", message))

    await run_kopf_work(NATS_ACCOUNT, memo.accounts, release, call, deleting=True)


def users_of(memo: SharedMemo, name: str) -> list[str]:
    """NatsUsers and ClusterNatsConnections naming the account."""
    users = [
        f"NatsUser {user.owner.namespace}/{user.owner.name}"
        for user in memo.natsusers
        if user.spec.get("accountRef") == name
    ]
    users += [
        f"ClusterNatsConnection {connection.owner.name}"
        for connection in memo.clusterconnections
        if connection.spec.get("account") == name and not connection.deleting
    ]
    return sorted(users)


def account_monitoring(memo: SharedMemo, key: ConnectionKey) -> AccountMonitoring | None:
    """For a ClusterNatsConnection into a NatsAccount: every consumer of the account in one
    JSZ request through the account's system connection (which the platform team already gave
    for its pushes), instead of a CONSUMER.LIST request per stream. Looked up on each use, so
    a connection or account made, changed or deleted later is followed."""
    if key is None or key[0] != CLUSTER_SCOPE:
        return None
    connection = key[1]

    async def read(servers: frozenset[str]) -> AccountConsumers | None:
        tracked = memo.clusterconnections.named(CLUSTER_SCOPE, connection)
        account_name = tracked.spec_text("account") if tracked is not None else None
        account = memo.accounts.named(CLUSTER_SCOPE, account_name) if account_name else None
        if account is None:
            return None
        public_key = account.status.get("publicKey")
        system = account.spec_text("systemConnectionRef")
        if not isinstance(public_key, str) or not public_key or system is None:
            return None
        try:
            target = await memo.directory.system_target(system)
            client = await memo.pool.connection(target)
            timeout = memo.settings.nats_request_timeout
            return await jsz.account_consumers(client, public_key, servers, timeout)
        except (NatsError, OSError, TimeoutError):
            memo.directory.forget_system_target(system)
            raise

    return read
