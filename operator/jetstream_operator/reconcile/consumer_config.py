"""Turn a Consumer spec into the server's consumer config, and compare it with what the server has.

As with streams, the resource describes the whole consumer: every field is sent on each update,
and every default the server would fill in is stated explicitly, so a field removed from the spec
returns to its default instead of lingering, and a consumer in sync shows no difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..api.consumer import ConsumerSpec
from .ownership import OWNER_METADATA_KEY, Owner
from .stream_config import FieldDifference, ServerConfig, config_differences, go_time

# Server defaults (nats-server consumer.go, setConsumerConfigDefaults), stated so that removing a
# field reverts it. Each is what the server stores when the field is left out.
DEFAULT_ACK_WAIT_NS = 30_000_000_000
"""JsAckWaitDefault, for ackPolicy explicit and all (none keeps 0). NACK's 1ns is not repeated."""
DEFAULT_MAX_ACK_PENDING = 1000
"""JsDefaultMaxAckPending, for ackPolicy explicit and all, unless the stream sets a limit."""
DEFAULT_MAX_WAITING = 512
"""JSWaitQueueDefaultMax, for pull consumers; push consumers must have 0."""
DEFAULT_PINNED_TTL_NS = 120_000_000_000
"""JsDefaultPinnedTTL, for priorityPolicy pinned_client only."""
FLOW_CONTROL_HEARTBEAT_NS = 1_000_000_000
"""sourceHealthHB: the only heartbeat the server allows with ack policy flow_control."""
UNLIMITED = -1
"""max_deliver: the server stores 0 (and anything below -1) as -1."""

DELIVER_POLICIES: Mapping[str, str] = {
    "all": "all",
    "last": "last",
    "new": "new",
    "byStartSequence": "by_start_sequence",
    "byStartTime": "by_start_time",
    "lastPerSubject": "last_per_subject",
}
"""The resource's (NACK's) spelling -> the server's."""

IMMUTABLE_CONSUMER_FIELDS: Mapping[str, str] = {
    "deliver_policy": "deliverPolicy",
    "opt_start_seq": "optStartSeq",
    "opt_start_time": "optStartTime",
    "ack_policy": "ackPolicy",
    "replay_policy": "replayPolicy",
    "max_waiting": "maxWaiting",
    "flow_control": "flowControl",
    "idle_heartbeat": "heartbeatInterval",
    "mem_storage": "memStorage",
}
"""Server fields an update may not change (checkNewConsumerConfig) -> the spec field to name.
Switching push <-> pull (deliver_subject set or not) is refused too; see immutable_changes."""

PUSH_PULL_SWITCH = "deliverSubject (push <-> pull)"

# Fields the server leaves out when they hold their zero value, though that value is not the
# empty one the comparison assumes.
_OMITTED_DEFAULTS: Mapping[str, Any] = {"priority_policy": "none"}
_TIME_FIELDS = ("opt_start_time", "pause_until")


def _positive_limit(limits: Mapping[str, Any] | None, key: str) -> int:
    value = (limits or {}).get(key) or 0
    return int(value) if int(value) > 0 else 0


def default_ack_wait(spec: ConsumerSpec) -> int:
    """The ack wait the server ends up with: a backoff's first entry always wins (the server
    overwrites ackWait with it); otherwise 30s for acked consumers and 0 for ackPolicy none,
    also when ackWait is "0"."""
    if spec.backoff:
        return spec.backoff[0]
    if spec.ack_wait:
        return spec.ack_wait
    # ackWait "0" means the default: the server stores 30s for it (setConsumerConfigDefaults).
    return DEFAULT_ACK_WAIT_NS if spec.ack_policy in ("explicit", "all") else 0


def default_max_ack_pending(
    spec: ConsumerSpec, stream_limits: Mapping[str, Any] | None = None
) -> int:
    """The stream's consumerLimits.maxAckPending when set (for any ack policy), else 1000 for
    acked consumers and 0 for ackPolicy none. Server or account limits below 1000 lower the
    server's choice too; they are not visible here, so set maxAckPending in that case."""
    if spec.max_ack_pending is not None and spec.max_ack_pending != 0:
        return spec.max_ack_pending
    from_stream = _positive_limit(stream_limits, "max_ack_pending")
    if from_stream:
        return from_stream
    return DEFAULT_MAX_ACK_PENDING if spec.ack_policy != "none" else 0


def desired_consumer_config(
    spec: ConsumerSpec,
    owner: Owner,
    stream_name: str,
    *,
    stream_limits: Mapping[str, Any] | None = None,
) -> ServerConfig:
    """The complete config the server should hold for this spec (JetStream API JSON).

    `stream_name` is the stream the caller resolved (spec.streamName, or the referenced Stream's
    spec.name); a spec naming another stream is a caller bug. `stream_limits` is the stream's
    `consumer_limits`, which supplies the defaults of maxAckPending and inactiveThreshold.
    """
    if spec.stream_name is not None and spec.stream_name != stream_name:
        raise ValueError(f"spec.streamName is {spec.stream_name!r}, not {stream_name!r}")
    push = spec.is_push()
    pinned = spec.priority_policy == "pinned_client"
    acks_by_flow_control = spec.ack_policy == "flow_control"
    return {
        "durable_name": spec.durable_name,
        "name": spec.durable_name,
        "description": spec.description or "",
        "deliver_policy": DELIVER_POLICIES[spec.deliver_policy],
        "opt_start_seq": spec.opt_start_seq or 0,
        "opt_start_time": go_time(spec.opt_start_time) if spec.opt_start_time else None,
        "ack_policy": spec.ack_policy,
        "ack_wait": default_ack_wait(spec),
        "max_deliver": spec.max_deliver if spec.max_deliver not in (None, 0) else UNLIMITED,
        "backoff": list(spec.backoff),
        "filter_subject": spec.filter_subject or "",
        "filter_subjects": list(spec.filter_subjects),
        "replay_policy": spec.replay_policy,
        "sample_freq": spec.sample_freq or "",
        "rate_limit_bps": spec.rate_limit_bps or 0,
        "max_ack_pending": default_max_ack_pending(spec, stream_limits),
        "max_waiting": 0 if push else (spec.max_waiting or DEFAULT_MAX_WAITING),
        "deliver_subject": spec.deliver_subject or "",
        "deliver_group": spec.deliver_group or "",
        # Ack policy flow_control (2.14) means flow control with a 1s heartbeat; the server
        # sets both unless pedantic, when it requires them stated.
        "flow_control": spec.flow_control or acks_by_flow_control,
        "idle_heartbeat": spec.heartbeat_interval
        or (FLOW_CONTROL_HEARTBEAT_NS if acks_by_flow_control else 0),
        "headers_only": spec.headers_only,
        "max_batch": spec.max_request_batch or 0,
        "max_expires": spec.max_request_expires or 0,
        "max_bytes": spec.max_request_max_bytes or 0,
        "inactive_threshold": (
            spec.inactive_threshold or _positive_limit(stream_limits, "inactive_threshold")
        ),
        "num_replicas": spec.replicas or 0,
        "mem_storage": spec.mem_storage,
        "metadata": {**spec.metadata, OWNER_METADATA_KEY: owner.encode()},
        "pause_until": go_time(spec.pause_until) if spec.pause_until else None,
        "priority_policy": spec.priority_policy,
        "priority_timeout": (spec.pinned_ttl or DEFAULT_PINNED_TTL_NS) if pinned else 0,
        "priority_groups": list(spec.priority_groups),
    }


def consumer_request(stream_name: str, config: ServerConfig, action: str) -> dict[str, Any]:
    """The body of `$JS.API.CONSUMER.CREATE.<stream>.<name>`: action "create" fails if the
    consumer exists, "update" if it does not, so a race never silently replaces one."""
    return {"stream_name": stream_name, "config": config, "action": action}


def _same_time_format(value: Any) -> Any:
    """A server time rendered like go_time, so equal instants compare equal."""
    if not isinstance(value, str) or not value:
        return value
    try:
        return go_time(datetime.fromisoformat(value))
    except ValueError:
        return value


def normalized_actual(actual: Mapping[str, Any]) -> ServerConfig:
    """The server's config with its omissions filled in, ready to compare with a desired one."""
    normalized = dict(actual)
    for key, default in _OMITTED_DEFAULTS.items():
        if not normalized.get(key):
            normalized[key] = default
    for key in _TIME_FIELDS:
        normalized[key] = _same_time_format(normalized.get(key))
    return normalized


def consumer_differences(desired: ServerConfig, actual: Mapping[str, Any]) -> list[FieldDifference]:
    """Fields where the server's consumer departs from the desired one; empty when in sync."""
    return config_differences(desired, normalized_actual(actual))


def immutable_changes(desired: ServerConfig, actual: Mapping[str, Any]) -> list[str]:
    """The spec fields whose change the server would refuse in an update, in a stable order."""
    changed = {difference.field for difference in consumer_differences(desired, actual)}
    switches_mode = bool(desired.get("deliver_subject")) != bool(actual.get("deliver_subject"))
    if switches_mode:
        # max_waiting differs only because its default depends on the mode: name the cause.
        changed.discard("max_waiting")
    fields = [name for key, name in IMMUTABLE_CONSUMER_FIELDS.items() if key in changed]
    if switches_mode:
        fields.append(PUSH_PULL_SWITCH)
    return fields
