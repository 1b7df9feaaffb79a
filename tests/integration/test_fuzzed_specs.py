"""Property-based: generated Stream, Consumer, KeyValue and ObjectStore specs over every field,
against the real API server, operator and nats-server. Each spec is refused at admission with a
message, or settles: Ready, and then no JetStream create or update over several resyncs, counted
from the server's own API audit advisories; or Ready=False with a reason and a message, retried
with backoff rather than looped. The operator never crashes and never touches a stream it was
not asked to.

Every test runs twice: with the admission policies in effect, and with the CRDs' schemas only,
as on a cluster where the policies are not (one before 1.30, or `crds/` applied without its
policy files, or objects admitted before a rule was added). There, the specs the policies
refuse reach the operator, and must settle as well.

The fast size runs in `make test`; `JETSTREAM_OPERATOR_FUZZ_SCALE=6` is the large size
(`make chaos`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_devtools.crds import POLICY_KIND
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition, policies_out_of_effect
from .test_settle_known_cases import AUDIT_SUBJECT, QUIET_SECONDS, ApiAudit

pytestmark = [pytest.mark.integration]

SCALE = int(os.environ.get("JETSTREAM_OPERATOR_FUZZ_SCALE", "1"))
BATCHES = 2 * SCALE
"""Hypothesis examples per kind; each example is a batch of specs applied together, so one
quiet window covers them all."""
BATCH = 6
SETTLE_SECONDS = 40.0
PER_BATCH_SECONDS = 60
"""Upper bound of one batch (settling plus the quiet window), for the test's timeout."""
RETRIES_WHILE_FAILING = 4
"""Writes allowed in the quiet window for a spec that is not Ready: retries with backoff."""
ORIGIN = "FUZZ_ORIGIN"
TARGET = "FUZZ_TARGET"
_serial = itertools.count()
ORIGIN_BUCKET = "FZORIGIN"
KINDS = ("Stream", "Consumer", "KeyValue", "ObjectStore")
WITH_POLICIES = "policies"
SCHEMA_ONLY = "schema only"
OUTCOMES: dict[tuple[str, str], Counter[str]] = {
    (admission, kind): Counter() for admission in (WITH_POLICIES, SCHEMA_ONLY) for kind in KINDS
}
"""How the generated specs ended, by admission and kind: refused at admission (by a policy or
the schema), Ready, or a condition reason."""

durations = st.sampled_from(["1s", "30s", "90s", "2m", "1h", "24h", "0", "100ms"])
short_text = st.sampled_from(["", "orders", "ünïcode text"])
metadata = st.dictionaries(st.sampled_from(["team", "tier", "x"]), short_text, max_size=2)
bad = st.sampled_from(
    [{"replicas": 7}, {"storage": "disk"}, {"maxAge": "1 day"}, {"ttl": "1 day"}, {"bogus": 1}]
)


def stream_spec(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Every Stream field, with values mostly valid and combinations left to chance."""
    source = st.fixed_dictionaries(
        {"name": st.sampled_from([ORIGIN, "SENTINEL_FOREIGN", "FUZZ_MISSING"])},
        optional={
            "optStartSeq": st.integers(min_value=0, max_value=5),
            "optStartTime": st.just("2026-01-01T00:00:00Z"),
            "filterSubject": st.sampled_from(["origin.a", "sentinel.>"]),
            "consumer": st.just({"name": "feed", "deliverSubject": "feed.copy"}),
            "subjectTransforms": st.just(
                [{"source": "origin.*", "dest": "copied.{{wildcard(1)}}"}]
            ),
        },
    )
    fields = {
        "description": short_text,
        "subjects": st.lists(
            st.sampled_from([f"{name}.a", f"{name}.b.*", f"{name}.>"]), max_size=2, unique=True
        ),
        "retention": st.sampled_from(["limits", "interest", "workqueue"]),
        "storage": st.sampled_from(["file", "memory"]),
        "replicas": st.sampled_from([1, 1, 1, 3]),
        "maxConsumers": st.integers(min_value=-1, max_value=10),
        "maxMsgs": st.integers(min_value=-1, max_value=10**6),
        "maxBytes": st.sampled_from([-1, 0, 4096, 10**8]),
        "maxAge": durations,
        "maxMsgSize": st.sampled_from([-1, 0, 1024, 2**20]),
        "maxMsgsPerSubject": st.integers(min_value=-1, max_value=100),
        "discard": st.sampled_from(["old", "new"]),
        "discardPerSubject": st.booleans(),
        "duplicateWindow": durations,
        "noAck": st.booleans(),
        "placement": st.fixed_dictionaries(
            {}, optional={"cluster": st.just("elsewhere"), "tags": st.just(["ssd"])}
        ),
        "mirror": source,
        "sources": st.lists(source, max_size=2),
        "compression": st.sampled_from(["none", "s2"]),
        "firstSequence": st.integers(min_value=0, max_value=1000),
        "subjectTransform": st.just({"source": f"{name}.a", "dest": f"{name}.moved"}),
        "republish": st.fixed_dictionaries(
            {"destination": st.just(f"rp.{name}.>")},
            optional={"source": st.just(">"), "headersOnly": st.booleans()},
        ),
        "sealed": st.booleans(),
        "denyDelete": st.booleans(),
        "denyPurge": st.booleans(),
        "allowRollup": st.booleans(),
        "allowDirect": st.booleans(),
        "mirrorDirect": st.booleans(),
        "allowMsgTtl": st.booleans(),
        "subjectDeleteMarkerTtl": st.sampled_from(["1s", "1h"]),
        "allowMsgCounter": st.booleans(),
        "allowAtomicPublish": st.booleans(),
        "allowBatchPublish": st.booleans(),
        "allowMsgSchedules": st.booleans(),
        "persistMode": st.sampled_from(["default", "async"]),
        "consumerLimits": st.fixed_dictionaries(
            {},
            optional={
                "inactiveThreshold": st.sampled_from(["1h", "24h"]),
                "maxAckPending": st.sampled_from([-1, 0, 100]),
            },
        ),
        "metadata": metadata,
        "deletionPolicy": st.sampled_from(["Delete", "Retain"]),
        "preventDelete": st.booleans(),
        "preventUpdate": st.booleans(),
        "adoption": st.sampled_from(["Never", "IfUnowned"]),
    }
    return _some_of(fields, {"name": st.just(name)})


def consumer_spec(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Every Consumer field, on the stream TARGET."""
    fields = {
        "description": short_text,
        "deliverPolicy": st.sampled_from(
            ["all", "last", "new", "byStartSequence", "byStartTime", "lastPerSubject"]
        ),
        "optStartSeq": st.integers(min_value=1, max_value=5),
        "optStartTime": st.just("2026-01-01T00:00:00Z"),
        "ackPolicy": st.sampled_from(["none", "all", "explicit", "flow_control"]),
        "ackWait": durations,
        "maxDeliver": st.integers(min_value=-1, max_value=5),
        "backoff": st.lists(st.sampled_from(["1s", "5s", "30s"]), max_size=3),
        "filterSubject": st.sampled_from(["fuzz.a", "fuzz.>"]),
        "filterSubjects": st.lists(
            st.sampled_from(["fuzz.a", "fuzz.b", "fuzz.c.*"]), max_size=2, unique=True
        ),
        "replayPolicy": st.sampled_from(["instant", "original"]),
        "sampleFreq": st.sampled_from(["50%", "100", "0"]),
        "rateLimitBps": st.sampled_from([0, 10**6]),
        "maxAckPending": st.sampled_from([-1, 0, 10, 5000]),
        "maxWaiting": st.sampled_from([0, 1, 600]),
        "deliverSubject": st.just(f"deliver.{name}"),
        "deliverGroup": st.just("workers"),
        "flowControl": st.booleans(),
        "heartbeatInterval": st.sampled_from(["1s", "30s"]),
        "headersOnly": st.booleans(),
        "maxRequestBatch": st.sampled_from([0, 10]),
        "maxRequestExpires": st.sampled_from(["1s", "1m"]),
        "maxRequestMaxBytes": st.sampled_from([0, 4096]),
        "inactiveThreshold": st.just("1h"),
        "replicas": st.sampled_from([0, 1, 3]),
        "memStorage": st.booleans(),
        "metadata": metadata,
        "pauseUntil": st.just("2099-01-01T00:00:00Z"),
        "priorityPolicy": st.sampled_from(["none", "pinned_client", "overflow", "prioritized"]),
        "pinnedTtl": st.sampled_from(["1m", "5m"]),
        "priorityGroups": st.lists(st.sampled_from(["jobs", "bulk", "a"]), max_size=2, unique=True),
        "deletionPolicy": st.sampled_from(["Delete", "Retain"]),
        "preventDelete": st.booleans(),
        "preventUpdate": st.booleans(),
        "adoption": st.sampled_from(["Never", "IfUnowned"]),
        "recreateOnImmutableChange": st.booleans(),
    }
    return _some_of(fields, {"durableName": st.just(name), "streamName": st.just(TARGET)})


def keyvalue_spec(bucket: str) -> st.SearchStrategy[dict[str, Any]]:
    """Every KeyValue field; a mirror or source copies the bucket the fixture made."""
    sizes = st.sampled_from([-1, 0, 1024, 1 << 20])
    fields: dict[str, st.SearchStrategy[Any]] = {
        "description": short_text,
        "history": st.integers(min_value=1, max_value=66),
        "ttl": durations,
        "maxValueSize": sizes,
        "maxBytes": sizes,
        "storage": st.sampled_from(["file", "memory"]),
        "replicas": st.sampled_from([1, 1, 3]),
        "republish": st.fixed_dictionaries(
            {"destination": st.just(f"kvrep.{bucket}.>")},
            optional={"headersOnly": st.booleans()},
        ),
        "mirror": st.just({"name": ORIGIN_BUCKET}),
        "sources": st.just([{"name": ORIGIN_BUCKET}]),
        "compression": st.booleans(),
        "limitMarkerTtl": durations,
        "direct": st.booleans(),
        "metadata": metadata,
    }
    return _some_of(fields, {"bucket": st.just(bucket)})


def objectstore_spec(bucket: str) -> st.SearchStrategy[dict[str, Any]]:
    sizes = st.sampled_from([-1, 0, 1 << 20])
    fields: dict[str, st.SearchStrategy[Any]] = {
        "description": short_text,
        "ttl": durations,
        "maxBytes": sizes,
        "storage": st.sampled_from(["file", "memory"]),
        "replicas": st.sampled_from([1, 1, 3]),
        "compression": st.booleans(),
        "metadata": metadata,
    }
    return _some_of(fields, {"bucket": st.just(bucket)})


MOST_FIELDS = 8


def _some_of(
    fields: dict[str, st.SearchStrategy[Any]], required: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """A few of the fields at a time (any of them, in any combination): with all of them at
    once nearly every spec would be refused, and few would reach the server."""
    chosen = st.sets(st.sampled_from(sorted(fields)), max_size=MOST_FIELDS)
    return chosen.flatmap(
        lambda keys: st.fixed_dictionaries({**required, **{key: fields[key] for key in keys}})
    )


def _named(make: Any, prefix: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda: f"{prefix}{next(_serial)}").flatmap(make)


def _maybe_bad(spec: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Now and then a field the schema refuses, so admission is exercised too."""
    return st.one_of(
        spec, spec, spec, st.tuples(spec, bad).map(lambda pair: {**pair[0], **pair[1]})
    )


stream_batches = st.lists(_maybe_bad(_named(stream_spec, "FZ_S")), min_size=BATCH, max_size=BATCH)
consumer_batches = st.lists(
    _maybe_bad(_named(consumer_spec, "FZ_C")), min_size=BATCH, max_size=BATCH
)
keyvalue_batches = st.lists(
    _maybe_bad(_named(keyvalue_spec, "fzkv")), min_size=BATCH, max_size=BATCH
)
objectstore_batches = st.lists(
    _maybe_bad(_named(objectstore_spec, "fzobj")), min_size=BATCH, max_size=BATCH
)


FUZZ_TIMEOUT = pytest.mark.timeout(120 + PER_BATCH_SECONDS * BATCHES)
FUZZ_SETTINGS = settings(
    max_examples=BATCHES,
    deadline=None,
    derandomize=SCALE == 1,
    # Each example costs seconds against real servers: report a failing batch as found.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
"""The same for every kind: a few batches, reproducible in make test, large under make chaos."""


def _apply(
    resources: Resources, plural: str, kind: str, spec: dict[str, Any], outcomes: Counter[str]
) -> str | None:
    """Create the resource; None when admission refused it (with a message naming a field)."""
    name = f"fuzz{next(_serial)}"
    try:
        resources.create(plural, {"kind": kind, "metadata": {"name": name}, "spec": spec})
    except ApiException as error:
        assert error.status in (400, 422), error.body
        assert "spec" in (error.body or ""), "a refusal names the field"
        # A policy expression that fails to evaluate refuses too, without saying why.
        assert "resulted in error" not in (error.body or ""), error.body
        by_policy = POLICY_KIND in (error.body or "")
        outcomes["refused by a policy" if by_policy else "refused by the schema"] += 1
        return None
    return name


def _settled(resource: dict[str, Any] | None) -> dict[str, Any] | None:
    ready = condition(resource)
    generation = (resource or {}).get("metadata", {}).get("generation")
    if not ready or ready.get("observedGeneration") != generation:
        return None
    if ready["status"] != "True" and ready.get("reason") in ("Reconciling", "StreamNotFound"):
        return None  # still on its way (a consumer waits for its stream)
    return ready


def _settle_and_stay_quiet(
    resources: Resources,
    audit: ApiAudit,
    admission: str,
    plural: str,
    kind: str,
    specs: list[dict[str, Any]],
    target_of: Any,
) -> None:
    outcomes = OUTCOMES[admission, kind]
    applied = {}
    for spec in specs:
        name = _apply(resources, plural, kind, spec, outcomes)
        if name is not None:
            applied[name] = spec
    deadline = time.monotonic() + SETTLE_SECONDS
    settled: dict[str, dict[str, Any]] = {}
    while len(settled) < len(applied) and time.monotonic() < deadline:
        for name in applied.keys() - settled.keys():
            ready = _settled(resources.get(plural, name))
            if ready is not None:
                settled[name] = ready
        time.sleep(0.3)
    unsettled = {name: applied[name] for name in applied.keys() - settled.keys()}
    assert not unsettled, f"no settled Ready condition within {SETTLE_SECONDS}s: {unsettled}"
    for name, ready in settled.items():
        if ready["status"] != "True":
            assert ready.get("reason") and ready.get("message"), (applied[name], ready)

    for ready in settled.values():
        outcomes["Ready" if ready["status"] == "True" else ready["reason"]] += 1

    audit.reset()
    time.sleep(QUIET_SECONDS)
    for name, ready in settled.items():
        writes = audit.writes[target_of(applied[name])]
        # Still Ready at the end: a spec that flipped would show here too.
        final = condition(resources.get(plural, name))
        allowed = 0 if ready["status"] == "True" else RETRIES_WHILE_FAILING
        assert writes <= allowed, (
            f"{writes} JetStream writes in {QUIET_SECONDS}s for {applied[name]} "
            f"(condition {final}); last request: {audit.requests[target_of(applied[name])][-1]}"
        )
    for name in applied:
        resources.delete(plural, name)


@FUZZ_TIMEOUT
@FUZZ_SETTINGS
@given(specs=stream_batches)
def test_any_stream_spec_is_refused_or_settles(
    specs: list[dict[str, Any]],
    resources: Resources,
    operator_process: OperatorProcess,
    fuzz_world: ApiAudit,
    admission: str,
) -> None:
    _settle_and_stay_quiet(
        resources, fuzz_world, admission, "streams", "Stream", specs, lambda spec: spec["name"]
    )
    assert operator_process.running, "the operator crashed"


@FUZZ_TIMEOUT
@FUZZ_SETTINGS
@given(specs=consumer_batches)
def test_any_consumer_spec_is_refused_or_settles(
    specs: list[dict[str, Any]],
    resources: Resources,
    operator_process: OperatorProcess,
    fuzz_world: ApiAudit,
    admission: str,
) -> None:
    _settle_and_stay_quiet(
        resources,
        fuzz_world,
        admission,
        "consumers",
        "Consumer",
        specs,
        lambda spec: f"{TARGET}.{spec['durableName']}",
    )
    assert operator_process.running, "the operator crashed"


@FUZZ_TIMEOUT
@FUZZ_SETTINGS
@given(specs=keyvalue_batches)
def test_any_keyvalue_spec_is_refused_or_settles(
    specs: list[dict[str, Any]],
    resources: Resources,
    operator_process: OperatorProcess,
    fuzz_world: ApiAudit,
    admission: str,
) -> None:
    _settle_and_stay_quiet(
        resources,
        fuzz_world,
        admission,
        "keyvalues",
        "KeyValue",
        specs,
        lambda s: f"KV_{s['bucket']}",
    )
    assert operator_process.running, "the operator crashed"


@FUZZ_TIMEOUT
@FUZZ_SETTINGS
@given(specs=objectstore_batches)
def test_any_objectstore_spec_is_refused_or_settles(
    specs: list[dict[str, Any]],
    resources: Resources,
    operator_process: OperatorProcess,
    fuzz_world: ApiAudit,
    admission: str,
) -> None:
    _settle_and_stay_quiet(
        resources,
        fuzz_world,
        admission,
        "objectstores",
        "ObjectStore",
        specs,
        lambda s: f"OBJ_{s['bucket']}",
    )
    assert operator_process.running, "the operator crashed"


def test_generated_specs_reached_the_server(admission: str) -> None:
    """The property above means little if every spec was refused: most must reach NATS, and
    some must be Ready (figures printed with -s). With the schemas only, the specs the policies
    refused reach the operator: at SCALE 1 both runs generate the same specs."""
    print(f"fuzzed outcomes ({admission}): {[dict(OUTCOMES[admission, kind]) for kind in KINDS]}")
    for kind in KINDS:
        outcomes = OUTCOMES[admission, kind]
        refused = outcomes["refused by a policy"] + outcomes["refused by the schema"]
        assert outcomes["Ready"] > 0, (kind, outcomes)
        assert outcomes.total() - refused >= outcomes.total() // 3, (kind, outcomes)
    if admission == SCHEMA_ONLY:
        assert not any(OUTCOMES[SCHEMA_ONLY, kind]["refused by a policy"] for kind in KINDS)
        with_policies = [OUTCOMES[WITH_POLICIES, kind] for kind in KINDS]
        if sum(outcomes.total() for outcomes in with_policies):
            assert sum(outcomes["refused by a policy"] for outcomes in with_policies) > 0


def test_fuzzing_touched_no_foreign_stream(fuzz_world: ApiAudit, nats_server: Any) -> None:
    """The stream nobody declared, made before the fuzzing above, is exactly as it was."""
    info = asyncio.run(_stream_info(nats_server.url, "SENTINEL_FOREIGN"))
    assert info is not None
    assert info["config"]["max_msgs"] == 7
    assert "jetstream-operator.io/owner" not in (info["config"].get("metadata") or {})


async def _stream_info(url: str, name: str) -> dict[str, Any] | None:
    nc = await nats.connect(url)
    try:
        return await JetStreamApi(nc).stream_info(name)
    finally:
        await nc.close()


@pytest.fixture(scope="module", params=[WITH_POLICIES, SCHEMA_ONLY], autouse=True)
def admission(request: pytest.FixtureRequest, api_client: client.ApiClient) -> Iterator[str]:
    """The policies in effect, or their bindings removed until the module is done; removing
    the bindings takes the policies out without losing the objects the suite installed."""
    if request.param == WITH_POLICIES:
        yield request.param
        return
    with policies_out_of_effect(api_client):
        yield request.param


@pytest.fixture(scope="module")
def fuzz_world(nats_server: Any) -> Iterator[ApiAudit]:
    """The streams the specs refer to, made straight in NATS (the sentinel must never change),
    and the audit of API requests, on a connection whose event loop runs in a thread."""
    audit = ApiAudit()
    loop = asyncio.new_event_loop()

    async def start() -> Client:
        nc = await nats.connect(nats_server.url)
        jetstream = JetStreamApi(nc)
        for name, config in (
            ("SENTINEL_FOREIGN", {"subjects": ["sentinel.>"], "max_msgs": 7}),
            (ORIGIN, {"subjects": ["origin.>"], "allow_direct": True}),
            (TARGET, {"subjects": ["fuzz.>"]}),
            # A bucket as the clients make it, for mirrors and sources to copy.
            (
                f"KV_{ORIGIN_BUCKET}",
                {
                    "subjects": [f"$KV.{ORIGIN_BUCKET}.>"],
                    "max_msgs_per_subject": 1,
                    "allow_rollup_hdrs": True,
                    "deny_delete": True,
                    "discard": "new",
                    "allow_direct": True,
                },
            ),
        ):
            if await jetstream.stream_info(name) is None:
                await jetstream.create_stream({"name": name, **config})
        await nc.subscribe(AUDIT_SUBJECT, cb=audit.on_advisory)
        await nc.flush()
        return nc

    nc = loop.run_until_complete(start())
    pump = _Pump(loop)
    pump.start()
    try:
        yield audit
    finally:
        pump.stop()
        loop.run_until_complete(nc.close())
        loop.close()


class _Pump:
    """Runs the audit connection's event loop in a thread while the sync tests sleep."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
