"""NatsAccount and NatsUser as NATS claims, without servers: an account's JWT claims from its
spec, a user's permissions from what it references, and the checks on both."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.account import (
    ConnectionLimits,
    JetStreamLimits,
    NatsAccountSpec,
    NatsUserSpec,
)

API = "$JS.API"
INBOX = "_INBOX.>"
"""Where replies of requests (JetStream API answers, acks of publishes) and the messages of
consumers a client makes for itself arrive: the clients' default inbox prefix."""


def _jetstream_limits(limits: JetStreamLimits) -> dict[str, Any]:
    return {
        "mem_storage": limits.memory_storage,
        "disk_storage": limits.file_storage,
        "streams": limits.streams,
        "consumer": limits.consumers,
        "max_ack_pending": limits.max_ack_pending,
        "mem_max_stream_bytes": limits.memory_max_stream_bytes,
        "disk_max_stream_bytes": limits.file_max_stream_bytes,
        "max_bytes_required": limits.max_bytes_required,
    }


def _client_limits(limits: ConnectionLimits) -> dict[str, Any]:
    return {
        "subs": limits.subscriptions,
        "data": limits.data,
        "payload": limits.payload,
        "imports": -1,
        "exports": -1,
        "wildcards": True,
        "conn": limits.connections,
        "leaf": limits.leaf_nodes,
    }


def account_claims(
    spec: NatsAccountSpec, signing_keys: Iterable[str], revocations: Mapping[str, int]
) -> dict[str, Any]:
    """The `nats` claims of the account's JWT: limits, signing keys, revoked users."""
    limits = _client_limits(spec.limits)
    claims: dict[str, Any] = {"type": "account", "signing_keys": sorted(signing_keys)}
    jetstream = spec.jetstream
    if jetstream is not None and jetstream.tiers:
        claims["tiered_limits"] = {
            f"R{tier.replicas}": _jetstream_limits(tier) for tier in jetstream.tiers
        }
    elif jetstream is not None:
        limits.update(_jetstream_limits(jetstream))
    claims["limits"] = limits
    if spec.exports:
        claims["exports"] = [
            {key: value for key, value in export.model_dump(by_alias=False).items() if value}
            for export in spec.exports
        ]
    if spec.imports:
        claims["imports"] = [
            {
                "account": item.account,
                "subject": item.subject,
                "type": item.type,
                **({"local_subject": item.local_subject} if item.local_subject else {}),
                **({"name": item.name} if item.name else {}),
            }
            for item in spec.imports
        ]
    if revocations:
        claims["revocations"] = dict(sorted(revocations.items()))
    return claims


def same_account(pushed: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the claims the resolver holds are those we would push (issue time, id and
    signature aside): a difference is drift, pushed again."""

    def essence(claims: Mapping[str, Any]) -> tuple[Any, ...]:
        return (claims.get("sub"), claims.get("iss"), _canonical(claims.get("nats") or {}))

    return essence(pushed) == essence(wanted)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StreamTarget:
    """A referenced stream as NATS knows it: its name, the subjects it binds, and the API
    prefixes its clients may use (`$JS.API`, and `$JS.<domain>.API` where its connection names a
    JetStream domain: a client in another domain reaches it that way)."""

    stream: str
    subjects: tuple[str, ...] = ()
    apis: tuple[str, ...] = (API,)


@dataclass(frozen=True)
class ConsumerTarget:
    stream: str
    durable: str
    deliver_subject: str | None = None
    apis: tuple[str, ...] = (API,)


@dataclass(frozen=True)
class BucketTarget:
    """A referenced KeyValue or ObjectStore bucket, and the API prefixes, as for streams."""

    bucket: str
    apis: tuple[str, ...] = (API,)


def api_prefixes(connection: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The API prefixes of a connection's spec (NatsConnection or ClusterNatsConnection fields):
    always `$JS.API`, and the domain's or the custom prefix it names."""
    named = ""
    if connection and connection.get("jsDomain"):
        named = f"$JS.{connection['jsDomain']}.API"
    elif connection and connection.get("apiPrefix"):
        named = str(connection["apiPrefix"])
    return (API, named) if named and named != API else (API,)


@dataclass
class Permissions:
    """A user's publish and subscribe allow lists, in a stable order."""

    publish: set[str] = field(default_factory=set)
    subscribe: set[str] = field(default_factory=set)

    def allow_lists(self) -> tuple[list[str], list[str]]:
        return sorted(self.publish), sorted(self.subscribe)

    def digest(self, responses: bool) -> str:
        """A short hash telling whether issued credentials carry these permissions."""
        text = _canonical([*self.allow_lists(), responses])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def allow_api(self, apis: Iterable[str], *operations: str) -> None:
        """Publishing the JetStream API `operations` under each prefix."""
        self.publish.update(f"{api}.{operation}" for api in apis for operation in operations)


def _read_stream(permissions: Permissions, stream: str, apis: Iterable[str]) -> None:
    """Read a stream by consumers the client makes (ordered, ephemeral) or by direct get."""
    permissions.allow_api(
        tuple(apis),
        "INFO",
        "STREAM.NAMES",
        f"STREAM.INFO.{stream}",
        f"STREAM.MSG.GET.{stream}",
        f"DIRECT.GET.{stream}",
        f"DIRECT.GET.{stream}.>",
        f"CONSUMER.CREATE.{stream}",
        f"CONSUMER.CREATE.{stream}.>",
        f"CONSUMER.INFO.{stream}.*",
        f"CONSUMER.DELETE.{stream}.*",
        f"CONSUMER.MSG.NEXT.{stream}.*",
    )
    permissions.publish.update({f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>"})
    permissions.subscribe.add(INBOX)


def _publish_stream(permissions: Permissions, target: StreamTarget) -> None:
    permissions.publish.update(target.subjects)
    permissions.allow_api(target.apis, "INFO", f"STREAM.INFO.{target.stream}")
    permissions.subscribe.add(INBOX)  # the stream's acknowledgements of publishes


def user_permissions(
    spec: NatsUserSpec,
    streams: Mapping[str, StreamTarget],
    consumers: Mapping[str, ConsumerTarget],
    key_values: Mapping[str, BucketTarget],
    object_stores: Mapping[str, BucketTarget],
) -> Permissions:
    """What the user may publish and subscribe to, from the resolved references (by resource
    name: streams and consumers as NATS names them, buckets by bucket name)."""
    permissions = Permissions()
    for grant in spec.streams:
        target = streams[grant.name]
        if grant.access in ("Read", "ReadWrite"):
            _read_stream(permissions, target.stream, target.apis)
        if grant.access in ("Publish", "ReadWrite"):
            _publish_stream(permissions, target)
    for consumer_grant in spec.consumers:
        consumer = consumers[consumer_grant.name]
        stream, durable = consumer.stream, consumer.durable
        permissions.allow_api(
            consumer.apis,
            "INFO",
            "STREAM.NAMES",
            f"STREAM.INFO.{stream}",
            f"CONSUMER.INFO.{stream}.{durable}",
        )
        permissions.publish.update({f"$JS.ACK.{stream}.{durable}.>", f"$JS.FC.{stream}.>"})
        if consumer.deliver_subject:
            permissions.subscribe.add(consumer.deliver_subject)
        else:
            permissions.allow_api(consumer.apis, f"CONSUMER.MSG.NEXT.{stream}.{durable}")
            permissions.subscribe.add(INBOX)
    for bucket_grant in spec.key_values:
        key_value = key_values[bucket_grant.name]
        _read_stream(permissions, f"KV_{key_value.bucket}", key_value.apis)
        if bucket_grant.access == "ReadWrite":
            permissions.publish.add(f"$KV.{key_value.bucket}.>")
    for bucket_grant in spec.object_stores:
        objects = object_stores[bucket_grant.name]
        _read_stream(permissions, f"OBJ_{objects.bucket}", objects.apis)
        if bucket_grant.access == "ReadWrite":
            permissions.publish.add(f"$O.{objects.bucket}.>")
            permissions.allow_api(objects.apis, f"STREAM.PURGE.OBJ_{objects.bucket}")
    permissions.publish.update(spec.publish)
    permissions.subscribe.update(spec.subscribe)
    return permissions


def outside_allowance(
    spec: NatsUserSpec, prefixes: Iterable[str], namespace: str
) -> tuple[str, str] | None:
    """("publish"|"subscribe", subject) of the first explicit subject outside the account's
    prefixes for this namespace; None when all are inside (or the account sets none)."""
    rendered = [prefix.replace("{namespace}", namespace) for prefix in prefixes]
    if not rendered:
        return None
    for direction, subjects in (("publish", spec.publish), ("subscribe", spec.subscribe)):
        for subject in subjects:
            if not any(subject.startswith(prefix) for prefix in rendered):
                return direction, subject
    return None


def rotation_due(
    now: int, issued_at: int, validity: int | None, rotation_period: int | None
) -> float | None:
    """Seconds until new credentials are due (0: now), None when they never are: after the
    rotation period, or with two thirds of the validity gone where no period is set, so that
    old and new overlap for at least a third of it."""
    if validity is None:
        return None
    period = rotation_period if rotation_period is not None else validity * 2 // 3
    return float(max(0, issued_at + period - now))
