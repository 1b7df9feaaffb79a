"""Property-based: generated Stream and Consumer specs, valid and not, against the real API server
and operator. Each is refused at admission with a message, or reconciled, or reported in status
with a reason; the operator never crashes and never touches a stream it was not asked to."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from jetstream_operator.devenv.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition

pytestmark = [pytest.mark.integration]

EXAMPLES = 12 * int(os.environ.get("JETSTREAM_OPERATOR_FAULT_SCALE", "1"))
_serial = itertools.count()

names = st.one_of(
    st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True),
    st.sampled_from(["bad.name", "a*", "", "spa ce"]),
)
durations = st.one_of(
    st.sampled_from(["1s", "90s", "1h30m", "0", "24h"]), st.sampled_from(["1 day", "-5s", "abc"])
)
stream_specs = st.fixed_dictionaries(
    {"name": names},
    optional={
        "maxMsgs": st.integers(min_value=-3, max_value=10**6),
        "maxBytes": st.integers(min_value=-3, max_value=10**9),
        "maxAge": durations,
        "replicas": st.integers(min_value=0, max_value=7),
        "storage": st.sampled_from(["file", "memory", "disk"]),
        "retention": st.sampled_from(["limits", "interest", "workqueue", "forever"]),
        "discard": st.sampled_from(["old", "new"]),
        "discardPerSubject": st.booleans(),
        "maxMsgsPerSubject": st.integers(min_value=-1, max_value=100),
        "duplicateWindow": durations,
        "allowRollup": st.booleans(),
        "denyDelete": st.booleans(),
        "compression": st.sampled_from(["none", "s2", "zip"]),
        "maxConsumers": st.integers(min_value=-1, max_value=10),
        "unknownField": st.integers(),
    },
)


consumer_specs = st.fixed_dictionaries(
    {"durableName": names, "streamName": st.sampled_from(["SENTINEL_FOREIGN", "NOPE", "a.b"])},
    optional={
        "ackPolicy": st.sampled_from(["none", "all", "explicit", "maybe"]),
        "ackWait": durations,
        "deliverPolicy": st.sampled_from(["all", "new", "byStartSequence", "sometimes"]),
        "optStartSeq": st.integers(min_value=-1, max_value=10),
        "maxDeliver": st.integers(min_value=-2, max_value=10),
        "filterSubject": st.sampled_from(["sentinel.a", "", "x"]),
        "filterSubjects": st.lists(st.sampled_from(["sentinel.b", "y"]), max_size=2),
        "deliverSubject": st.sampled_from(["deliver.x", "bad subject", "d.*"]),
        "maxWaiting": st.integers(min_value=-1, max_value=600),
        "flowControl": st.booleans(),
        "heartbeatInterval": durations,
        "replicas": st.integers(min_value=-1, max_value=6),
    },
)


def _exercise(resources: Resources, plural: str, kind: str, spec: dict[str, Any]) -> None:
    name = f"fuzz{next(_serial)}"
    try:
        resources.create(plural, {"kind": kind, "metadata": {"name": name}, "spec": spec})
    except ApiException as error:
        assert error.status in (400, 422)
        assert "spec" in error.body, "a refusal names the field"
        return
    deadline = time.monotonic() + 20
    settled = None
    while settled is None and time.monotonic() < deadline:
        settled = _settled(resources.get(plural, name))
        time.sleep(0.2)
    assert settled is not None, f"no Ready condition for {spec}"
    if settled["status"] != "True":
        assert settled["reason"] and settled["message"], settled
    resources.delete(plural, name)


def _settled(resource: dict[str, Any] | None) -> dict[str, Any] | None:
    ready = condition(resource)
    generation = (resource or {}).get("metadata", {}).get("generation")
    return ready if ready and ready.get("observedGeneration") == generation else None


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=stream_specs)
def test_any_stream_spec_is_refused_reconciled_or_explained(
    spec: dict[str, Any],
    resources: Resources,
    operator_process: OperatorProcess,
    sentinel: str,
) -> None:
    if spec.get("name", "").isupper():
        spec = {**spec, "name": f"{spec['name']}_F{next(_serial)}"}
    _exercise(resources, "streams", "Stream", spec)
    assert operator_process.running, "the operator crashed"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=consumer_specs)
def test_any_consumer_spec_is_refused_reconciled_or_explained(
    spec: dict[str, Any],
    resources: Resources,
    operator_process: OperatorProcess,
    sentinel: str,
) -> None:
    _exercise(resources, "consumers", "Consumer", spec)
    assert operator_process.running, "the operator crashed"


def test_fuzzing_touched_no_foreign_stream(sentinel: str, nats_server: Any) -> None:
    """The stream nobody declared, made before the fuzzing above, is exactly as it was."""
    info = asyncio.run(_stream_info(nats_server.url, sentinel))
    assert info is not None
    assert info["config"]["max_msgs"] == 7
    assert "jetstream-operator.io/owner" not in (info["config"].get("metadata") or {})


async def _stream_info(url: str, name: str, create: bool = False) -> dict[str, Any] | None:
    nc = await nats.connect(url)
    try:
        jetstream = JetStreamApi(nc)
        if create and await jetstream.stream_info(name) is None:
            await jetstream.create_stream({"name": name, "subjects": ["sentinel.>"], "max_msgs": 7})
        return await jetstream.stream_info(name)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def sentinel(nats_server: Any) -> str:
    asyncio.run(_stream_info(nats_server.url, "SENTINEL_FOREIGN", create=True))
    return "SENTINEL_FOREIGN"
