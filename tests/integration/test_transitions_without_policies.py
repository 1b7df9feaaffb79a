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
without a case in transition_cases.py, or a field a rule guards that no case changes, fails
`test_every_transition_rule_has_a_case` (test_transition_rule_cases.py). The cases run together
in one namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.api.kinds import (
    CONSUMER,
    KEY_VALUE,
    OBJECT_STORE,
    STREAM,
    ResourceKind,
)
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import operator_variant

from .figures import ApiAudit, apiserver_writes, difference
from .helpers import (
    Resources,
    condition,
    fill,
    json_body,
    patch_spec_past_admission,
    policies_out_of_effect,
    warnings,
)
from .transition_cases import CASES, READY, SERVER_REJECTED, Case, written

pytestmark = pytest.mark.integration

T = TypeVar("T")

SETTLE_SECONDS = 60.0
QUIET_SECONDS = 6.0
"""Three resyncs of the session operator (2 s) and more than its longest retry delay (5 s)."""
RETRIES_WHILE_REJECTED = 4
"""JetStream writes allowed in the quiet window for an update NATS refused: its retries with
backoff. The session operator's delays double from 0.5 s up to 5 s, jittered into half to all
of that: at most four fit in the window (0.25 + 0.5 + 1 + 2 + 2.5 > 6 s). A loop sent eleven."""
MESSAGES = 3
"""Messages written before the update, to each stream, bucket and store."""

CONSUMED = {"consumed": "{consumed}", "consumed-too": "{consumed_too}"}
"""The Stream resources the consumer cases read, and their streams."""


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
