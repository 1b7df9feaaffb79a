"""Every transition rule (a CEL rule reading `oldSelf`), one by one, for updates on a cluster
where the admission policies are not in effect: the bindings are removed, so the API server
accepts each update the rule would have refused, and the operator meets it against the real
nats-server.

Each resource is made with a valid spec and data (messages, keys, chunks), then given the
update. It must settle: Ready=True where NATS could make the change, or Ready=False with a
reason and a message naming the field or NATS's reason, for its latest generation. Then it
stays quiet: no write to it, none to our kinds at all (kube-apiserver's /metrics, with the
operator serving this namespace only), and no JetStream write but a rejected update's retries
with backoff. Nothing is lost or recreated: the stream keeps its messages and its creation
time, the consumer its creation time, and nothing is made under a new name or on another
stream. Deleting the resource deletes what it manages.

The rules come from the models, as policygen turns them into policies: a transition rule
without a case here, or a field a rule guards that no case changes, fails
`test_every_transition_rule_has_a_case`. The cases run together in one namespace.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_devtools.crds import POLICY_KIND
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.crdgen import validated_spec_schema
from jetstream_operator.api.kinds import (
    ALL_KINDS,
    CONSUMER,
    KEY_VALUE,
    OBJECT_STORE,
    STREAM,
    ResourceKind,
)
from jetstream_operator.api.policygen import is_transition, rules_by_path
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import ApiAudit, apiserver_writes, difference
from .helpers import Resources, condition, fill, json_body, policies_out_of_effect, warnings

pytestmark = pytest.mark.integration

T = TypeVar("T")

SETTLE_SECONDS = 60.0
QUIET_SECONDS = 6.0
"""Three resyncs of the session operator (2 s) and more than its longest retry delay (5 s)."""
RETRIES_WHILE_REJECTED = 4
"""JetStream writes allowed in the quiet window for an update NATS refused: its retries with
backoff. The session operator's delays double from 0.5 s up to 5 s, jittered into half to all
of that: at most four fit in the window (0.25 + 0.5 + 1 + 2 + 2.5 > 6 s). A loop sent eleven."""
READY = "Ready"
SERVER_REJECTED = "ServerRejected"
IMMUTABLE = "ImmutableFieldChanged"
MESSAGES = 3
"""Messages written before the update, to each stream, bucket and store."""


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
    Case(STREAM, "spec.connectionRef is immutable", "s-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
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
    Case(CONSUMER, "spec.connectionRef is immutable", "c-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
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
    Case(KEY_VALUE, "spec.connectionRef is immutable", "kv-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(KEY_VALUE, "spec.limitMarkerTtl cannot be removed", "kv-limit-marker-removed",
         {"limitMarkerTtl": None}, READY, initial={"limitMarkerTtl": "1s"}),
    Case(KEY_VALUE, "spec.bucket is immutable", "kv-bucket", {"bucket": "{bucket}_new"},
         IMMUTABLE, ("spec.bucket changed",)),
    # ObjectStore
    Case(OBJECT_STORE, "spec.storage cannot change", "os-storage", {"storage": "memory"},
         SERVER_REJECTED, ("storage type",)),
    Case(OBJECT_STORE, "spec.connectionRef is immutable", "os-connection",
         {"connectionRef": "elsewhere"}, IMMUTABLE, ("spec.connectionRef changed",)),
    Case(OBJECT_STORE, "spec.bucket is immutable", "os-bucket", {"bucket": "{bucket}_new"},
         IMMUTABLE, ("spec.bucket changed",)),
)  # fmt: skip

CONSUMED = {"consumed": "{consumed}", "consumed-too": "{consumed_too}"}
"""The Stream resources the consumer cases read, and their streams."""

# ---------------------------------------------------------------------------------------------
# The rules, from the models


@dataclass(frozen=True)
class TransitionRule:
    kind: ResourceKind
    path: str
    rule: str
    message: str

    def guarded_fields(self) -> set[str]:
        """The spec fields the rule compares with their old values."""
        fields = set(re.findall(r"\boldSelf\.(\w+)", self.rule))
        if re.search(r"\boldSelf\b(?!\.)", self.rule):
            fields.add(self.path.split(".")[1])
        return fields


def transition_rules() -> list[TransitionRule]:
    """Every rule reading `oldSelf`, of every kind, as policygen puts it into the policies."""
    found = []
    for kind in ALL_KINDS:
        for path, rule in rules_by_path(validated_spec_schema(kind)):
            if is_transition(str(rule["rule"])):
                message = str(rule.get("message") or "")
                found.append(TransitionRule(kind, path, str(rule["rule"]), message))
    return found


def cases_of(rule: TransitionRule) -> list[Case]:
    return [case for case in CASES if case.kind == rule.kind and case.rule in rule.message]


def test_every_transition_rule_has_a_case() -> None:
    """A transition rule added later fails here until it has a case; so does a field a rule
    guards (the consumer's fields that cannot change are one rule) that no case changes."""
    rules = transition_rules()
    assert len(rules) >= 20, rules
    missing = [f"{r.kind.kind} {r.path}: {r.message}" for r in rules if not cases_of(r)]
    assert not missing, "transition rules without a case:\n" + "\n".join(missing)
    for rule in rules:
        changed = {key for case in cases_of(rule) for key in case.update}
        unchanged = rule.guarded_fields() - changed
        assert not unchanged, f"{rule.kind.kind}: no case changes {unchanged} ({rule.message})"
    for case in CASES:
        matching = [r for r in rules if r.kind == case.kind and case.rule in r.message]
        assert len(matching) == 1, f"{case.name} names {len(matching)} rules"
    assert len({case.name for case in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------
# Names, specs and what each resource manages in NATS


def names_for(namespace: str, case: Case | None = None) -> dict[str, str]:
    base = namespace.split("-", 1)[0].upper()  # "t12": unique within the session
    names = {
        "origin": f"{base}_ORIGIN",
        "origin_subject": f"{base.lower()}_origin",
        "origin_bucket": f"{base.lower()}_origin",
        "consumed": f"{base}_CONSUMED",
        "consumed_too": f"{base}_CONSUMED_TOO",
    }
    if case is not None:
        token = case.name.replace("-", "_")
        names |= {
            "stream": f"{base}_{token.upper()}",
            "subject": f"{base.lower()}_{token}",
            "durable": token.upper(),
            "bucket": f"{base.lower()}_{token}",
        }
    return names


def base_spec(kind: ResourceKind) -> dict[str, Any]:
    if kind == STREAM:
        return {"name": "{stream}", "subjects": ["{subject}.>"]}
    if kind == CONSUMER:
        return {"durableName": "{durable}", "streamName": "{consumed}", "ackPolicy": "explicit"}
    return {"bucket": "{bucket}"}


def initial_spec(case: Case, names: dict[str, str]) -> dict[str, Any]:
    spec = {**base_spec(case.kind), **case.initial}
    filled: dict[str, Any] = fill({k: v for k, v in spec.items() if v is not None}, names)
    return filled


def merged(spec: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in {**spec, **patch}.items() if v is not None}


@dataclass(frozen=True)
class Managed:
    """What a spec names in NATS: a stream, or a consumer of one."""

    stream: str
    consumer: str | None = None

    def __str__(self) -> str:
        return f"consumer {self.stream}.{self.consumer}" if self.consumer else self.stream


def managed(kind: ResourceKind, spec: dict[str, Any], names: dict[str, str]) -> Managed:
    if kind == STREAM:
        return Managed(str(spec["name"]))
    if kind == KEY_VALUE:
        return Managed(f"KV_{spec['bucket']}")
    if kind == OBJECT_STORE:
        return Managed(f"OBJ_{spec['bucket']}")
    stream = spec.get("streamName") or fill(CONSUMED[str(spec.get("streamRef"))], names)
    return Managed(str(stream), str(spec["durableName"]))


async def look(jetstream: JetStreamApi, target: Managed) -> dict[str, Any] | None:
    """What NATS holds of it: creation time, and a stream's message count."""
    if target.consumer is not None:
        info = await jetstream.consumer_info(target.stream, target.consumer)
        return None if info is None else {"created": info["created"]}
    info = await jetstream.stream_info(target.stream)
    if info is None:
        return None
    return {"created": info["created"], "messages": info["state"]["messages"]}


async def write_data(nc: Client, case: Case, names: dict[str, str], spec: dict[str, Any]) -> None:
    """MESSAGES messages into the case's stream, bucket or store."""
    if case.kind == STREAM and "mirror" not in spec:
        subject = f"{names['subject']}.m"
    elif case.kind == KEY_VALUE:
        subject = f"$KV.{names['bucket']}.k"
    elif case.kind == OBJECT_STORE:
        subject = f"$O.{names['bucket']}.C.chunk"
    else:
        return  # a mirror copies its origin; a consumer's stream holds messages already
    for number in range(MESSAGES):
        await stored(nc, f"{subject}{number}", case.headers)


async def stored(nc: Client, subject: str, headers: dict[str, str] | None = None) -> None:
    """Publish one message and wait for JetStream's acknowledgement; an increment of a
    counter stream (headers) has no payload."""
    reply = await nc.request(subject, b"" if headers else b"1", timeout=5, headers=headers)
    assert "error" not in json.loads(reply.data), (subject, reply.data)


# ---------------------------------------------------------------------------------------------
# Watching the resources


def listed(resources: Resources, kind: ResourceKind) -> dict[str, dict[str, Any]]:
    body = json_body(
        resources.api.list_namespaced_custom_object(
            GROUP, VERSION, resources.namespace, kind.plural
        )
    )
    return {item["metadata"]["name"]: item for item in body.get("items", [])}


def settled_condition(resource: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Ready condition, once it and status speak of the latest generation and it is not
    on its way (Reconciling)."""
    ready = condition(resource)
    generation = (resource or {}).get("metadata", {}).get("generation")
    observed = ((resource or {}).get("status") or {}).get("observedGeneration")
    if not ready or ready.get("observedGeneration") != generation or observed != generation:
        return None
    if ready["status"] != "True" and ready.get("reason") == "Reconciling":
        return None
    return ready


async def all_settled(
    resources: Resources, wanted: dict[str, ResourceKind], timeout: float = SETTLE_SECONDS
) -> dict[str, dict[str, Any]]:
    """Each resource's settled Ready condition, by name."""
    deadline = time.monotonic() + timeout
    while True:
        items = {kind.plural: listed(resources, kind) for kind in distinct(wanted.values())}
        found = {
            name: ready
            for name, kind in wanted.items()
            if (ready := settled_condition(items[kind.plural].get(name))) is not None
        }
        if len(found) == len(wanted):
            return found
        if time.monotonic() > deadline:
            late = {
                name: condition(items[kind.plural].get(name))
                for name, kind in wanted.items()
                if name not in found
            }
            raise AssertionError(f"not settled within {timeout:.0f} s: {late}")
        await asyncio.sleep(0.5)


async def all_ready(resources: Resources, wanted: dict[str, ResourceKind]) -> None:
    settled = await all_settled(resources, wanted)
    failed = {name: ready for name, ready in settled.items() if ready["status"] != "True"}
    assert not failed, f"not Ready: {failed}"


def distinct(kinds: Iterable[ResourceKind]) -> list[ResourceKind]:
    """The kinds, each once (a ResourceKind is not hashable)."""
    return list({kind.plural: kind for kind in kinds}.values())


async def all_counted(resources: Resources, wanted: dict[str, ResourceKind]) -> None:
    """Wait until each resource's status shows the data written: bytes stored, or messages
    pending for a consumer."""

    async def counted() -> bool:
        items = {kind.plural: listed(resources, kind) for kind in distinct(wanted.values())}
        short = {}
        for name, kind in wanted.items():
            status = items[kind.plural].get(name, {}).get("status") or {}
            shown = status.get("numPending" if kind == CONSUMER else "bytes")
            if not shown:
                short[name] = shown
        assert not short, f"status shows no data: {short}"
        return True

    await eventually_value(counted)


def listing(resources: Resources, kinds: list[ResourceKind]) -> dict[str, dict[str, Any]]:
    return {
        f"{kind.plural}/{name}": item
        for kind in kinds
        for name, item in listed(resources, kind).items()
    }


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


def patch_spec_past_admission(
    resources: Resources, plural: str, name: str, patch: dict[str, Any]
) -> None:
    """Patch the spec; the policies leave the API server's caches a moment after their
    bindings, so a refusal by a policy is tried again for a few seconds."""
    deadline = time.monotonic() + 15
    while True:
        try:
            resources.patch_spec(plural, name, patch)
            return
        except ApiException as error:
            if POLICY_KIND not in str(error.body) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def jetstream_writes(subjects: list[str], target: Managed) -> int:
    """JetStream writes among the audited subjects to one stream or consumer."""
    verbs = (".CREATE.", ".UPDATE.", ".DELETE.", ".PURGE.", ".PAUSE.")
    tail = f".{target.stream}.{target.consumer}" if target.consumer else f".{target.stream}"
    return sum(
        1
        for subject in subjects
        if any(verb in subject for verb in verbs)
        and subject.endswith(tail)
        and (target.consumer is not None or "CONSUMER" not in subject)
    )


# ---------------------------------------------------------------------------------------------
# The test


@pytest.fixture
def operator_here(operator_process: OperatorProcess, namespace: str) -> Iterator[None]:
    """The operator serving this namespace only, so kube-apiserver's write counters for our
    kinds count this test's resources alone."""
    with operator_variant(operator_process, JETSTREAM_OPERATOR_NAMESPACES=namespace):
        yield


@pytest.fixture
def without_policies(api_client: client.ApiClient) -> Iterator[None]:
    with policies_out_of_effect(api_client, [STREAM, CONSUMER, KEY_VALUE, OBJECT_STORE]):
        yield


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("operator_here", "without_policies")
async def test_each_refused_update_settles_quietly_and_loses_nothing(
    resources: Resources,
    nc: Client,
    namespace: str,
    api_client: client.ApiClient,
    control_plane: Any,
    operator_process: OperatorProcess,
) -> None:
    jetstream = JetStreamApi(nc)
    shared = names_for(namespace)
    names = {case.name: names_for(namespace, case) for case in CASES}
    specs = {case.name: initial_spec(case, names[case.name]) for case in CASES}
    kinds = {case.name: case.kind for case in CASES}
    consumed = dict.fromkeys(CONSUMED, STREAM)
    try:
        await make_origins(jetstream, nc, shared)
        # The consumers' stream holds its messages before they are made, so their first
        # status shows them pending, and nothing about them moves later.
        for resource, stream in CONSUMED.items():
            name = fill(stream, shared)
            spec = {"name": name, "subjects": [f"{name.lower()}.>"]}
            resources.create(
                "streams", {"kind": "Stream", "metadata": {"name": resource}, "spec": spec}
            )
        await all_ready(resources, consumed)
        for stream in CONSUMED.values():
            for number in range(MESSAGES):
                await stored(nc, f"{fill(stream, shared).lower()}.m{number}")
        for case in CASES:
            body = {
                "kind": case.kind.kind,
                "metadata": {"name": case.name},
                "spec": specs[case.name],
            }
            resources.create(case.kind.plural, body)
        await all_ready(resources, kinds)

        # Data, and the changes the rules allow.
        for case in CASES:
            await write_data(nc, case, names[case.name], specs[case.name])
        prepared = {case.name: case for case in CASES if case.prepare is not None}
        for case in prepared.values():
            resources.patch_spec(case.kind.plural, case.name, case.prepare or {})
            specs[case.name] = merged(specs[case.name], case.prepare or {})
        await all_ready(resources, {name: case.kind for name, case in prepared.items()})
        targets = {
            case.name: managed(case.kind, specs[case.name], names[case.name]) for case in CASES
        }
        before = await eventually_value(lambda: all_there(jetstream, targets))
        # Status shows the data before the updates: a count written later is no reply to them.
        await all_counted(resources, {**consumed, **kinds})

        # The updates the rules would have refused.
        for case in CASES:
            update = fill(case.update, names[case.name])
            patch_spec_past_admission(resources, case.kind.plural, case.name, update)
            specs[case.name] = merged(specs[case.name], update)
        settled = await all_settled(resources, kinds)

        # Quiet: no write to the resources, none to our kinds, no JetStream write but retries.
        used_kinds = distinct(case.kind for case in CASES)
        quiet_from = listing(resources, used_kinds)
        writes_before = apiserver_writes(control_plane)
        audit = await ApiAudit().start(nc)
        try:
            await asyncio.sleep(QUIET_SECONDS)
            await nc.flush()
        finally:
            await audit.stop()
        kube_writes = difference(apiserver_writes(control_plane), writes_before)
        changed = written(quiet_from, listing(resources, used_kinds))

        problems: list[str] = []
        table: list[str] = []
        for case in CASES:
            ready = settled[case.name]
            outcome = READY if ready["status"] == "True" else str(ready.get("reason"))
            message = str(ready.get("message", ""))
            table.append(f"{case.kind.kind:11} {case.name:24} {outcome:22} {message[:150]}")
            if outcome != case.expect:
                problems.append(f"{case.name}: {outcome}, not {case.expect}: {message}")
            if outcome != READY:
                missing = [word for word in case.words if word.lower() not in message.lower()]
                if not message or missing:
                    problems.append(f"{case.name}: message lacks {missing}: {message!r}")
                posted = warnings(api_client, namespace, case.name)
                if posted.count(outcome) != 1:
                    problems.append(f"{case.name}: Warning events {posted}")
            writes = jetstream_writes(audit.subjects, targets[case.name])
            allowed = RETRIES_WHILE_REJECTED if outcome == SERVER_REJECTED else 0
            if writes > allowed:
                problems.append(f"{case.name}: {writes} JetStream writes in {QUIET_SECONDS} s")
            after = await look(jetstream, targets[case.name])
            if after != before[case.name]:
                problems.append(
                    f"{case.name}: {targets[case.name]} was {before[case.name]}, now {after}"
                )
            declared = managed(case.kind, specs[case.name], names[case.name])
            if declared != targets[case.name] and await look(jetstream, declared) is not None:
                problems.append(f"{case.name}: {declared} was made for the new spec")
        print("\n".join(["outcomes of the refused updates:", *table]))
        if changed:
            problems.append(f"resources written while settled: {changed}")
        if kube_writes:
            problems.append(f"writes to our kinds while settled: {kube_writes}")
        assert operator_process.running, "the operator crashed"
        assert not problems, "\n".join(problems)

        # Deleted, each resource deletes what it manages, also where the update was refused.
        for case in CASES:
            resources.delete(case.kind.plural, case.name)
        await all_gone(resources, kinds)
        left = [str(target) for target in targets.values() if await look(jetstream, target)]
        assert not left, f"left in NATS after their resources were deleted: {left}"
    finally:
        for name, kind in {**kinds, **consumed}.items():
            if resources.get(kind.plural, name) is not None:
                resources.delete(kind.plural, name)
        for stream in (shared["origin"], f"KV_{shared['origin_bucket']}"):
            await jetstream.delete_stream(stream)


async def make_origins(jetstream: JetStreamApi, nc: Client, shared: dict[str, str]) -> None:
    """An origin stream with messages for the mirrors, and a bucket for the mirror bucket,
    made by no resource."""
    await jetstream.create_stream(
        {"name": shared["origin"], "subjects": [f"{shared['origin_subject']}.>"]}
    )
    await jetstream.create_stream(
        {
            "name": f"KV_{shared['origin_bucket']}",
            "subjects": [f"$KV.{shared['origin_bucket']}.>"],
            "max_msgs_per_subject": 1,
            "allow_rollup_hdrs": True,
            "deny_delete": True,
            "discard": "new",
            "allow_direct": True,
        }
    )
    for number in range(MESSAGES):
        await stored(nc, f"{shared['origin_subject']}.a{number}")


async def all_there(
    jetstream: JetStreamApi, targets: dict[str, Managed]
) -> dict[str, dict[str, Any] | None]:
    """What NATS holds of each target, once every stream holds the messages written (a
    mirror's come from its origin a moment later)."""
    found = {name: await look(jetstream, target) for name, target in targets.items()}
    short = {
        name: seen
        for name, seen in found.items()
        if seen is None or seen.get("messages", MESSAGES) < MESSAGES
    }
    assert not short, f"data missing before the update: {short}"
    return found


async def eventually_value(probe: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """The probe's answer once it makes no assertion fail."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await probe()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def all_gone(resources: Resources, wanted: dict[str, ResourceKind]) -> None:
    """Wait until the resources are gone: their finalizers let them go."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        left = {
            name: condition(item)
            for kind in distinct(wanted.values())
            for name, item in listed(resources, kind).items()
            if name in wanted
        }
        if not left:
            return
        assert time.monotonic() < deadline, f"deletion did not complete: {left}"
        await asyncio.sleep(0.5)
