"""Resolve a NatsConnection into a pool target (reading its Secrets) and check it works."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..api.connection import NatsConnectionSpec
from ..k8s.secrets import SecretProblem, SecretReader
from ..nats.jsapi import JetStreamError, JetStreamNotEnabled, JetStreamUnavailable
from ..nats.pool import (
    UNREACHABLE,
    AuthMaterial,
    ConnectFailure,
    ConnectionPool,
    ConnectionTarget,
    TlsMaterial,
)
from ..reconcile.conditions import Outcome
from .results import Result, validation_message


def api_prefix(spec: NatsConnectionSpec) -> str:
    if spec.js_domain:
        return f"$JS.{spec.js_domain}.API"
    return spec.api_prefix or "$JS.API"


def domain_of(prefix: str) -> str | None:
    """The JetStream domain an API prefix addresses (`$JS.<domain>.API`), if any."""
    parts = prefix.split(".")
    if len(parts) == 3 and parts[0] == "$JS" and parts[2] == "API":
        return parts[1]
    return None


def secret_names(spec_body: Mapping[str, Any]) -> set[str]:
    """The Secrets a NatsConnection spec reads; none when the spec is invalid."""
    try:
        return NatsConnectionSpec.model_validate(dict(spec_body)).secret_names()
    except ValidationError:
        return set()


async def resolve(
    spec: NatsConnectionSpec, namespace: str, name: str, secrets: SecretReader
) -> ConnectionTarget:
    """The connection target with its secret material; SecretProblem when a Secret is off."""
    tls: TlsMaterial | None = None
    if spec.tls is not None:
        ref = spec.tls
        values = await secrets.values(namespace, ref.secret_name)

        def pick(key: str | None) -> bytes | None:
            if key is None:
                return None
            if key not in values:
                raise SecretProblem(f"Secret {namespace}/{ref.secret_name} has no key {key!r}")
            return values[key]

        tls = TlsMaterial(pick(ref.ca_key), pick(ref.cert_key), pick(ref.key_key), spec.tls_first)
    auth: AuthMaterial | None = None
    if spec.user_password is not None:
        ref_up = spec.user_password
        values = await secrets.values(namespace, ref_up.secret_name)
        for key in (ref_up.username_key, ref_up.password_key):
            if key not in values:
                raise SecretProblem(f"Secret {namespace}/{ref_up.secret_name} has no key {key!r}")
        auth = AuthMaterial(
            "userPassword",
            values[ref_up.username_key].decode(),
            values[ref_up.password_key].decode(),
        )
    for kind, ref_value in (("token", spec.token), ("nkey", spec.nkey), ("creds", spec.creds)):
        if ref_value is not None:
            secret = await secrets.value(namespace, ref_value.secret_name, ref_value.key)
            auth = AuthMaterial(kind, "", secret.decode().strip())  # type: ignore[arg-type]
    return ConnectionTarget(
        tuple(spec.servers), api_prefix(spec), auth, tls, label=f"{namespace}/{name}"
    )


def account_usage(info: Mapping[str, Any]) -> dict[str, Any]:
    limits = info.get("limits") or {}
    return {
        "memory": info.get("memory", 0),
        "storage": info.get("storage", 0),
        "streams": info.get("streams", 0),
        "consumers": info.get("consumers", 0),
        "maxMemory": limits.get("max_memory"),
        "maxStorage": limits.get("max_storage"),
        "maxStreams": limits.get("max_streams"),
        "maxConsumers": limits.get("max_consumers"),
    }


async def target_of(
    spec_body: Mapping[str, Any], namespace: str, name: str, secrets: SecretReader
) -> ConnectionTarget | Result:
    """The target the resource describes with its Secrets' current contents, or the Result
    saying why there is none."""
    try:
        spec = NatsConnectionSpec.model_validate(dict(spec_body))
    except ValidationError as error:
        outcome = Outcome(False, "InvalidSpec", validation_message(error), stalled=True)
        return Result(outcome)
    exposure = spec.exposure()
    if exposure is not None:  # admitted without the policy: no Secret is even read
        return Result(Outcome(False, "InvalidSpec", exposure, stalled=True))
    try:
        return await resolve(spec, namespace, name, secrets)
    except SecretProblem as error:
        return Result(Outcome(False, "SecretProblem", str(error), stalled=True), retry=True)


def probe_due(
    target: ConnectionTarget,
    working: ConnectionTarget | None,
    connected: bool,
    probed_at: float | None,
    now: float,
    refresh: float,
    account_changed: bool = False,
) -> bool:
    """Whether a recheck asks JetStream again. Secrets are re-read every few seconds so a
    rotation takes effect quickly, but the account request is only needed when the target
    changed, the pooled connection is down, the last check failed (no `probed_at`), the
    operator created or deleted streams or consumers through it since (`account_changed`, so
    the counts in status follow within a recheck), or the account usage in status is due for a
    refresh; otherwise each connection would cost a JetStream request every few seconds for
    nothing."""
    if target != working or not connected or probed_at is None or account_changed:
        return True
    return now - probed_at >= refresh


async def probe(target: ConnectionTarget, pool: ConnectionPool) -> Result:
    """Connect (or reuse the pooled connection) and report what JetStream says of the account."""
    try:
        connection = await pool.connection(target)
        jetstream = await pool.jetstream(target)
        info = await jetstream.request("INFO")
    except ConnectFailure as error:
        # Credentials or TLS need a person; a server out of reach is an outage, and passes.
        outage = error.reason == UNREACHABLE
        return Result(Outcome(False, error.reason, str(error), stalled=not outage), retry=True)
    except JetStreamNotEnabled as error:
        message = (
            f"connected, but no JetStream answers under {target.api_prefix}: is JetStream "
            f"enabled for this account (and the domain right)? ({error})"
        )
        return Result(Outcome(False, "NoJetStream", message, stalled=True), retry=True)
    except JetStreamUnavailable as error:
        message = f"connected, but JetStream cannot answer now; retrying ({error})"
        return Result(Outcome(False, "NatsUnavailable", message), retry=True)
    except JetStreamError as error:
        message = f"JetStream refused the account information request: {error.description}"
        return Result(Outcome(False, "NoJetStream", message, stalled=True), retry=True)
    server = getattr(connection, "_server_info", {}) or {}
    # Which server of a cluster answered changes with every reconnect and restart: status names
    # the cluster, so an operator restart writes nothing for a connection in sync.
    cluster = server.get("cluster")
    status = {
        "serverVersion": server.get("version"),
        "cluster": cluster,
        "jetstreamDomain": info.get("domain") or domain_of(target.api_prefix),
        "account": account_usage(info),
    }
    message = f"connected to {f'cluster {cluster}' if cluster else 'NATS'}; JetStream answers"
    return Result(Outcome(True, "Connected", message), status=status)


async def check(
    spec_body: Mapping[str, Any],
    namespace: str,
    name: str,
    secrets: SecretReader,
    pool: ConnectionPool,
) -> tuple[Result, ConnectionTarget | None]:
    """The whole check; the target only when it works."""
    target = await target_of(spec_body, namespace, name, secrets)
    if isinstance(target, Result):
        return target, None
    result = await probe(target, pool)
    return result, (target if result.outcome.ready else None)
