"""One case per transition rule (a CEL rule reading `oldSelf`): the update, and what the resource
must settle to. Shared by test_transitions_without_policies.py and test_transition_rule_cases.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jetstream_operator.api.kinds import (
    CONSUMER,
    KEY_VALUE,
    OBJECT_STORE,
    STREAM,
    ResourceKind,
)

READY = "Ready"
SERVER_REJECTED = "ServerRejected"
IMMUTABLE = "ImmutableFieldChanged"


@dataclass(frozen=True)
class Case:
    """One update a transition rule refuses, applied without the policies."""

    kind: ResourceKind
    rule: str
    """A fragment of the rule's message, naming the rule the update breaks."""
    name: str
    """The case, and the name of its resource."""
    update: dict[str, Any]
    """A merge patch of the spec (None removes a field); {placeholders} as in `names`."""
    expect: str
    """READY, or the reason of Ready=False."""
    words: tuple[str, ...] = ()
    """In the Ready condition's message when it is False: the field, or NATS's reason."""
    initial: dict[str, Any] = field(default_factory=dict)
    """The spec beyond the kind's base one (None removes a base field)."""
    prepare: dict[str, Any] | None = None
    """A patch allowed by the rules, applied after the data is written (sealing)."""
    headers: dict[str, str] | None = None
    """Headers of the messages written (a counter stream takes increments only)."""


NEVER_OFF = "cannot be turned off once on"
CONNECTION_IMMUTABLE = "spec.connectionRef and spec.clusterConnectionRef are immutable"

CASES: tuple[Case, ...] = (
    # Stream
    Case(STREAM, "spec.storage cannot change", "s-storage", {"storage": "memory"},
         SERVER_REJECTED, ("storage type",)),
    Case(STREAM, "to or from workqueue", "s-to-workqueue", {"retention": "workqueue"},
         SERVER_REJECTED, ("retention",)),
    Case(STREAM, "to or from workqueue", "s-from-workqueue", {"retention": "limits"},
         SERVER_REJECTED, ("retention",), initial={"retention": "workqueue"}),
    Case(STREAM, "spec.mirror cannot be added", "s-mirror-added",
         {"subjects": None, "mirror": {"name": "{origin}"}}, SERVER_REJECTED, ("mirror",)),
    Case(STREAM, "spec.mirror cannot be added", "s-mirror-changed",
         {"mirror": {"name": "{origin}", "filterSubject": "{origin_subject}.a"}},
         SERVER_REJECTED, ("mirror",), initial={"subjects": None, "mirror": {"name": "{origin}"}}),
    Case(STREAM, "spec.firstSequence applies only", "s-first-sequence", {"firstSequence": 100},
         IMMUTABLE, ("spec.firstSequence is 100", "started before sequence 100")),
    Case(STREAM, "spec.firstSequence applies only", "s-first-sequence-changed",
         {"firstSequence": 50}, IMMUTABLE, ("set it back to 100",),
         initial={"firstSequence": 100}),
    Case(STREAM, "spec.allowMsgCounter cannot change", "s-counter-on",
         {"allowMsgCounter": True}, SERVER_REJECTED, ("counter",)),
    Case(STREAM, "spec.allowMsgCounter cannot change", "s-counter-off",
         {"allowMsgCounter": False}, SERVER_REJECTED, ("counter",),
         initial={"allowMsgCounter": True}, headers={"Nats-Incr": "1"}),
    Case(STREAM, "spec.persistMode cannot change", "s-persist-mode", {"persistMode": "async"},
         SERVER_REJECTED, ("persist",)),
    Case(STREAM, CONNECTION_IMMUTABLE, "s-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(STREAM, CONNECTION_IMMUTABLE, "s-cluster-connection",
         {"clusterConnectionRef": "elsewhere"}, IMMUTABLE, ("the spec's connection changed",)),
    Case(STREAM, "spec.name is immutable", "s-name", {"name": "{stream}_NEW"}, IMMUTABLE,
         ("spec.name changed",)),
    Case(STREAM, "cannot be unsealed", "s-unsealed", {"sealed": False}, SERVER_REJECTED,
         ("seal",), prepare={"sealed": True}),
    Case(STREAM, f"spec.denyDelete {NEVER_OFF}", "s-deny-delete-off", {"denyDelete": False},
         SERVER_REJECTED, ("delete",), initial={"denyDelete": True}),
    Case(STREAM, f"spec.denyPurge {NEVER_OFF}", "s-deny-purge-off", {"denyPurge": False},
         SERVER_REJECTED, ("purge",), initial={"denyPurge": True}),
    Case(STREAM, f"spec.allowMsgTtl {NEVER_OFF}", "s-ttl-off", {"allowMsgTtl": False},
         SERVER_REJECTED, ("TTL",), initial={"allowMsgTtl": True}),
    Case(STREAM, f"spec.allowMsgSchedules {NEVER_OFF}", "s-schedules-off",
         {"allowMsgSchedules": False}, SERVER_REJECTED, ("schedul",),
         initial={"allowMsgSchedules": True}),
    # Consumer, on the stream of the Stream resource "consumed"
    Case(CONSUMER, "spec.streamName and spec.streamRef are immutable", "c-stream-name",
         {"streamName": "{consumed_too}"}, IMMUTABLE, ("spec.streamName",)),
    Case(CONSUMER, "spec.streamName and spec.streamRef are immutable", "c-stream-ref",
         {"streamRef": "consumed-too"}, IMMUTABLE, ("spec.streamRef",),
         initial={"streamName": None, "streamRef": "consumed"}),
    Case(CONSUMER, CONNECTION_IMMUTABLE, "c-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(CONSUMER, CONNECTION_IMMUTABLE, "c-cluster-connection",
         {"clusterConnectionRef": "elsewhere"}, IMMUTABLE, ("the spec's connection changed",)),
    Case(CONSUMER, "fields that cannot change", "c-deliver-policy", {"deliverPolicy": "last"},
         IMMUTABLE, ("spec.deliverPolicy",)),
    Case(CONSUMER, "fields that cannot change", "c-opt-start-seq", {"optStartSeq": 2},
         IMMUTABLE, ("spec.optStartSeq",),
         initial={"deliverPolicy": "byStartSequence", "optStartSeq": 1}),
    Case(CONSUMER, "fields that cannot change", "c-opt-start-time",
         {"optStartTime": "2020-01-02T00:00:00Z"}, IMMUTABLE, ("spec.optStartTime",),
         initial={"deliverPolicy": "byStartTime", "optStartTime": "2020-01-01T00:00:00Z"}),
    Case(CONSUMER, "fields that cannot change", "c-ack-policy", {"ackPolicy": "all"},
         IMMUTABLE, ("spec.ackPolicy",)),
    Case(CONSUMER, "fields that cannot change", "c-replay-policy", {"replayPolicy": "original"},
         IMMUTABLE, ("spec.replayPolicy",)),
    Case(CONSUMER, "fields that cannot change", "c-max-waiting", {"maxWaiting": 10},
         IMMUTABLE, ("spec.maxWaiting",)),
    Case(CONSUMER, "fields that cannot change", "c-flow-control", {"flowControl": True},
         IMMUTABLE, ("spec.flowControl",),
         initial={"deliverSubject": "{subject}.deliver", "heartbeatInterval": "5s"}),
    Case(CONSUMER, "fields that cannot change", "c-heartbeat", {"heartbeatInterval": "10s"},
         IMMUTABLE, ("spec.heartbeatInterval",),
         initial={"deliverSubject": "{subject}.deliver", "heartbeatInterval": "5s"}),
    Case(CONSUMER, "fields that cannot change", "c-mem-storage", {"memStorage": True},
         IMMUTABLE, ("spec.memStorage",)),
    Case(CONSUMER, "between push (spec.deliverSubject set) and pull", "c-pull-to-push",
         {"deliverSubject": "{subject}.deliver"}, IMMUTABLE, ("push <-> pull",)),
    Case(CONSUMER, "spec.durableName is immutable", "c-durable-name",
         {"durableName": "{durable}_NEW"}, IMMUTABLE, ("spec.durableName changed",)),
    # KeyValue
    Case(KEY_VALUE, "spec.storage cannot change", "kv-storage", {"storage": "memory"},
         SERVER_REJECTED, ("storage type",)),
    Case(KEY_VALUE, "spec.mirror cannot be added", "kv-mirror-added",
         {"mirror": {"name": "{origin_bucket}"}}, SERVER_REJECTED, ("mirror",)),
    Case(KEY_VALUE, CONNECTION_IMMUTABLE, "kv-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(KEY_VALUE, CONNECTION_IMMUTABLE, "kv-cluster-connection",
         {"clusterConnectionRef": "elsewhere"}, IMMUTABLE, ("the spec's connection changed",)),
    Case(KEY_VALUE, "spec.limitMarkerTtl cannot be removed", "kv-limit-marker-removed",
         {"limitMarkerTtl": None}, READY, initial={"limitMarkerTtl": "1s"}),
    Case(KEY_VALUE, "spec.bucket is immutable", "kv-bucket", {"bucket": "{bucket}_new"},
         IMMUTABLE, ("spec.bucket changed",)),
    # ObjectStore
    Case(OBJECT_STORE, "spec.storage cannot change", "os-storage", {"storage": "memory"},
         SERVER_REJECTED, ("storage type",)),
    Case(OBJECT_STORE, CONNECTION_IMMUTABLE, "os-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(OBJECT_STORE, CONNECTION_IMMUTABLE, "os-cluster-connection",
         {"clusterConnectionRef": "elsewhere"}, IMMUTABLE, ("the spec's connection changed",)),
    Case(OBJECT_STORE, "spec.bucket is immutable", "os-bucket", {"bucket": "{bucket}_new"},
         IMMUTABLE, ("spec.bucket changed",)),
)  # fmt: skip


def written(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The resources written between two listings, with what changed in their status."""
    found: dict[str, Any] = {}
    for key, item in after.items():
        old = before.get(key) or {"metadata": {}}
        if old["metadata"].get("resourceVersion") == item["metadata"]["resourceVersion"]:
            continue
        was, now = old.get("status") or {}, item.get("status") or {}
        found[key] = {k: (was.get(k), now.get(k)) for k in {*was, *now} if was.get(k) != now.get(k)}
    return found
