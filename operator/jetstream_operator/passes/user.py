"""The NatsUser lifecycle: credentials issued by its account's signing key with the permissions
its references imply, written as a creds file into a Secret of its namespace, issued anew
before they expire (the old ones stay valid until then: no gap) or when the permissions
change, and revoked in the account when the NatsUser is deleted."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from .. import API_VERSION
from ..api.account import NatsAccountSpec, NatsUserSpec, rotation_seconds
from ..api.kinds import NATS_USER
from ..handlers.registry import CLUSTER_SCOPE, TrackedResource, spec_connection_key
from ..handlers.results import Event, Result, validation_message
from ..handlers.status_writes import status_patch
from ..k8s.client import ApiError
from ..k8s.owned_secrets import NotOurs, owner_reference
from ..nats import jwt
from ..nats.account_keys import AccountKeys
from ..reconcile.accounts import (
    BucketTarget,
    ConsumerTarget,
    Permissions,
    StreamTarget,
    api_prefixes,
    outside_allowance,
    rotation_due,
    user_permissions,
)
from ..reconcile.conditions import Outcome
from ..services import SharedMemo
from . import account
from .envelope import event_reference
from .from_kopf import KopfCall, run_kopf_work
from .rechecks import RECHECKED, next_wait, ready_condition, recheck_every, settled

CREDS_KEY = "user.creds"
USER_STATUS_FIELDS = (
    "publicKey",
    "account",
    "accountRef",
    "secretName",
    "issuedAt",
    "expiresAt",
    "permissionsHash",
    "rotatedAt",
    "previous",
)
RETRY_SECONDS = 30.0
"""How soon a user waiting for its account or references looks again."""


class UserProblem(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _rfc3339(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


def _missing(what: str, name: str, namespace: str) -> UserProblem:
    message = f"{what} {name!r} does not exist in namespace {namespace!r}; waiting for it"
    return UserProblem(Outcome(False, "ReferenceNotFound", message))


def _registry_spec(memo: SharedMemo, kind: str, namespace: str, name: str) -> Mapping[str, Any]:
    registry = memo.consumers if kind == "Consumer" else memo.backed[kind]
    tracked = registry.named(namespace, name)
    if tracked is None:
        raise _missing(kind, name, namespace)
    return tracked.spec


def _apis(memo: SharedMemo, namespace: str, spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The API prefixes clients use for a resource: its connection's domain's too, if any."""
    key = spec_connection_key(namespace, spec)
    if key is None:
        return api_prefixes(None)
    registry = memo.clusterconnections if key[0] == CLUSTER_SCOPE else memo.natsconnections
    tracked = registry.named(*key)
    return api_prefixes(tracked.spec if tracked is not None else None)


def resolved_permissions(memo: SharedMemo, namespace: str, spec: NatsUserSpec) -> Permissions:
    """The permissions, from the Stream, Consumer and bucket resources the user names."""
    streams: dict[str, StreamTarget] = {}
    for grant in spec.streams:
        stream_spec = _registry_spec(memo, "Stream", namespace, grant.name)
        streams[grant.name] = StreamTarget(
            str(stream_spec.get("name")),
            tuple(stream_spec.get("subjects") or ()),
            _apis(memo, namespace, stream_spec),
        )
    consumers: dict[str, ConsumerTarget] = {}
    for consumer_grant in spec.consumers:
        consumer_spec = _registry_spec(memo, "Consumer", namespace, consumer_grant.name)
        stream = consumer_spec.get("streamName")
        if not stream:
            reference = str(consumer_spec.get("streamRef"))
            stream = _registry_spec(memo, "Stream", namespace, reference).get("name")
        consumers[consumer_grant.name] = ConsumerTarget(
            str(stream),
            str(consumer_spec.get("durableName")),
            consumer_spec.get("deliverSubject"),
            _apis(memo, namespace, consumer_spec),
        )

    def bucket(kind: str, name: str) -> BucketTarget:
        bucket_spec = _registry_spec(memo, kind, namespace, name)
        return BucketTarget(str(bucket_spec.get("bucket")), _apis(memo, namespace, bucket_spec))

    key_values = {grant.name: bucket("KeyValue", grant.name) for grant in spec.key_values}
    object_stores = {grant.name: bucket("ObjectStore", grant.name) for grant in spec.object_stores}
    return user_permissions(spec, streams, consumers, key_values, object_stores)


async def _account_of(memo: SharedMemo, namespace: str, spec: NatsUserSpec) -> NatsAccountSpec:
    tracked = memo.accounts.named(CLUSTER_SCOPE, spec.account_ref)
    if tracked is None or tracked.deleting:
        message = f"NatsAccount {spec.account_ref!r} does not exist; waiting for it"
        raise UserProblem(Outcome(False, "AccountNotFound", message))
    try:
        account_spec = NatsAccountSpec.model_validate(dict(tracked.spec))
    except ValidationError:
        message = f"NatsAccount {spec.account_ref!r} has an invalid spec"
        raise UserProblem(Outcome(False, "AccountNotReady", message)) from None
    selector = account_spec.namespace_selector
    labels = await memo.namespace_labels.of(namespace)
    if selector is None or labels is None or not selector.matches(labels):
        chosen = "selects no namespace" if selector is None else f"selects {selector.describe()}"
        message = (
            f"NatsAccount {spec.account_ref!r} does not issue users in namespace {namespace!r} "
            f"(its namespaceSelector {chosen}); the platform team decides which namespaces it "
            "serves"
        )
        raise UserProblem(Outcome(False, "NotPermitted", message))
    outside = outside_allowance(spec, account_spec.user_subject_prefixes, namespace)
    if outside is not None:
        direction, subject = outside
        message = (
            f"spec.{direction}: subject {subject!r} is outside what NatsAccount "
            f"{spec.account_ref!r} allows namespace {namespace!r} (userSubjectPrefixes)"
        )
        raise UserProblem(Outcome(False, "SubjectNotAllowed", message, stalled=True))
    return account_spec


async def issued(
    memo: SharedMemo,
    namespace: str,
    name: str,
    uid: str,
    spec_body: Mapping[str, Any],
    status: Mapping[str, Any],
) -> Result:
    """New credentials where none are valid for the current permissions or rotation is due;
    otherwise the status as it is (and no write)."""
    try:
        spec = NatsUserSpec.model_validate(dict(spec_body))
    except ValidationError as error:
        return Result(Outcome(False, "InvalidSpec", validation_message(error), stalled=True))
    issued_in = status.get("accountRef")
    if issued_in and issued_in != spec.account_ref:
        message = (
            f"spec.accountRef changed from {issued_in!r}: the credentials in Secret "
            f"{status.get('secretName')} belong to that account; set it back, or make a new "
            "NatsUser for the other account"
        )
        return Result(Outcome(False, "ImmutableFieldChanged", message, stalled=True))
    try:
        await _account_of(memo, namespace, spec)
        permissions = resolved_permissions(memo, namespace, spec)
        keys = await account.account_keys(memo, spec.account_ref, make=False)
    except UserProblem as problem:
        return Result(problem.outcome, retry=True, delay=RETRY_SECONDS)
    except account.AccountProblem as problem:
        return Result(problem.outcome, retry=True, delay=RETRY_SECONDS)
    if keys is None:
        message = f"NatsAccount {spec.account_ref!r} has no keys yet; waiting for it"
        return Result(Outcome(False, "AccountNotReady", message), retry=True, delay=RETRY_SECONDS)
    digest = permissions.digest(spec.allow_responses)
    validity, period = rotation_seconds(spec)
    now = int(time.time())
    issued_at = _seconds(status.get("issuedAt"))
    due = None if issued_at is None else rotation_due(now, issued_at, validity, period)
    current = (
        status.get("publicKey")
        and status.get("account") == keys.public_key
        and status.get("permissionsHash") == digest
        and issued_at is not None
        and (due is None or due > 0)
        and status.get("secretName") == (spec.secret_name or f"{name}-nats-creds")
    )
    if current:
        kept = {key: status.get(key) for key in USER_STATUS_FIELDS}
        return Result(Outcome(True, "Issued", _valid_message(status)), status=kept)
    return await _issue(memo, namespace, name, uid, spec, keys, permissions, status, now)


def _valid_message(status: Mapping[str, Any]) -> str:
    until = status.get("expiresAt")
    where = f"Secret {status.get('secretName')}"
    return f"credentials in {where}, valid until {until}" if until else f"credentials in {where}"


async def _issue(
    memo: SharedMemo,
    namespace: str,
    name: str,
    uid: str,
    spec: NatsUserSpec,
    keys: AccountKeys,
    permissions: Permissions,
    status: Mapping[str, Any],
    now: int,
) -> Result:
    validity, _ = rotation_seconds(spec)
    expires_at = now + validity if validity is not None else None
    publish, subscribe = permissions.allow_lists()
    seed = jwt.new_seed("user")
    token = jwt.encode(
        jwt.public_key(seed),
        f"{namespace}/{name}",
        jwt.user_claims(
            keys.public_key,
            {"allow": publish},
            {"allow": subscribe},
            responses=1 if spec.allow_responses else None,
        ),
        keys.signing_seed,
        issued_at=now,
        expires_at=expires_at,
    )
    secret_name = spec.secret_name or f"{name}-nats-creds"
    try:
        await memo.owned_secrets.apply(
            namespace,
            secret_name,
            {CREDS_KEY: jwt.creds_file(token, seed), "publicKey": jwt.public_key(seed)},
            labels={"jetstream-operator.io/natsuser": name},
            owner=owner_reference(API_VERSION, NATS_USER.kind, name, uid),
            fresh=status.get("secretName") != secret_name,
        )
    except NotOurs as error:
        return Result(Outcome(False, "SecretNotWritten", str(error), stalled=True))
    except ApiError as error:
        message = f"Secret {namespace}/{secret_name} could not be written: {error}"
        return Result(Outcome(False, "SecretNotWritten", message), retry=True, delay=RETRY_SECONDS)
    new_status: dict[str, Any] = {
        "publicKey": jwt.public_key(seed),
        "account": keys.public_key,
        "accountRef": spec.account_ref,
        "secretName": secret_name,
        "issuedAt": _rfc3339(now),
        "expiresAt": _rfc3339(expires_at) if expires_at is not None else None,
        "permissionsHash": permissions.digest(spec.allow_responses),
        "rotatedAt": None,
        "previous": None,
    }
    events = [Event("Normal", "Issued", f"credentials written to Secret {secret_name}")]
    previous = status.get("publicKey")
    if previous and status.get("account") == keys.public_key:
        new_status["rotatedAt"] = _rfc3339(now)
        new_status["previous"] = {"publicKey": previous, "expiresAt": status.get("expiresAt")}
        events = [Event("Normal", "Rotated", f"new credentials written to Secret {secret_name}")]
        if not status.get("expiresAt"):
            # Credentials that never expire are revoked as soon as new ones exist: they may
            # carry permissions the user no longer has.
            revoked = await account.revoke(memo, spec.account_ref, [str(previous)])
            if revoked is not None and not revoked.outcome.ready:
                return revoked
    return Result(Outcome(True, "Issued", _valid_message(new_status)), new_status, events)


def next_check(spec_body: Mapping[str, Any], status: Mapping[str, Any], interval: float) -> float:
    """Seconds until this user needs a look: its rotation, or the recheck interval."""
    try:
        validity, period = rotation_seconds(NatsUserSpec.model_validate(dict(spec_body)))
    except ValidationError:
        return interval
    issued_at = _seconds(status.get("issuedAt"))
    if issued_at is None:
        return min(interval, RETRY_SECONDS)
    due = rotation_due(int(time.time()), issued_at, validity, period)
    return interval if due is None else max(1.0, min(interval, due))


async def reconcile(call: KopfCall, old: Mapping[str, Any] | None) -> None:
    memo = call.memo
    uid = str(call.meta.get("uid", ""))
    memory = memo.failures.for_connection(RECHECKED)

    async def issue() -> Result:
        result = await issued(memo, call.namespace, call.name, uid, call.spec, call.status)
        return settled(memory, uid, result, ready_condition(call.status))

    await run_kopf_work(NATS_USER, memo.natsusers, issue, call)


async def recheck(
    stopped: kopf.DaemonStopped,
    name: str | None,
    namespace: str | None,
    memo: SharedMemo,
    **_: Any,
) -> None:
    """Rotate when due, and retry a user that waits for its account or references."""
    interval = memo.settings.connection_check_interval
    memory = memo.failures.for_connection(RECHECKED)

    def wait(tracked: TrackedResource | None) -> float:
        if tracked is None:
            return interval
        return next_wait(memory, tracked, next_check(tracked.spec, tracked.status, interval))

    async def check(tracked: TrackedResource) -> None:
        await _recheck_one(memo, tracked)

    await recheck_every(stopped, memo.natsusers, namespace or "", name or "", wait, check)


async def _recheck_one(memo: SharedMemo, tracked: TrackedResource) -> None:
    owner = tracked.owner
    result = await issued(
        memo, owner.namespace, owner.name, owner.uid, tracked.spec, tracked.status
    )
    memory = memo.failures.for_connection(RECHECKED)
    result = settled(memory, owner.uid, result, ready_condition(tracked.status))
    patch = status_patch(tracked, result, memo.budget)
    if patch is not None:
        await memo.writer.patch_status(NATS_USER.plural, owner.namespace, owner.name, patch)
    for event in result.events:
        memo.events.post(
            event_reference(NATS_USER, tracked.owner), event.type, event.reason, event.message
        )


async def finalize(call: KopfCall) -> None:
    """Revoke the user's credentials (and those a rotation replaced) in its account."""
    memo = call.memo

    async def revoke() -> Result:
        previous = call.status.get("previous") or {}
        issued = {
            str(key): _seconds(expires)
            for key, expires in (
                (call.status.get("publicKey"), call.status.get("expiresAt")),
                (previous.get("publicKey"), previous.get("expiresAt")),
            )
            if key
        }
        account_ref = str(call.spec.get("accountRef", ""))
        if not issued:
            return Result(Outcome(True, "Deleted", "no credentials were issued"))
        revoked = await account.revoke(memo, account_ref, list(issued), issued)
        if revoked is None:
            message = f"NatsAccount {account_ref!r} is gone: nothing to revoke in"
            return Result(Outcome(True, "Deleted", message))
        if not revoked.outcome.ready:
            return revoked
        message = f"credentials revoked in NatsAccount {account_ref}"
        return Result(
            Outcome(True, "Deleted", message), events=[Event("Normal", "Revoked", message)]
        )

    await run_kopf_work(NATS_USER, memo.natsusers, revoke, call, deleting=True)
