"""The one envelope every pass runs in (`passes.envelope`): its decisions before NATS is asked,
taken the same way whether kopf or a drift watcher triggered the pass."""

from __future__ import annotations

import asyncio
from typing import Any

from jetstream_operator.api.kinds import CONSUMER, NATS_CONNECTION, STREAM
from jetstream_operator.handlers.failures import FailureMemory
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.handlers.results import Result
from jetstream_operator.marks import PAUSE_ANNOTATION, RELEASE_ANNOTATION
from jetstream_operator.passes.envelope import Unit, decided, run
from jetstream_operator.passes.repair import Repairer
from jetstream_operator.reconcile.backed import STREAM_KIND
from jetstream_operator.reconcile.conditions import Outcome, conditions_for

from .test_handler_glue import OWNER, FakeJetStream, RecordingWriter, as_api, stream_body

MADE_THROUGH_DEFAULT = {"streamName": "ORDERS", "connectionRef": ""}


def unit(
    spec: dict[str, Any],
    status: dict[str, Any],
    *,
    kind: Any = STREAM,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    memory: FailureMemory | None = None,
) -> Unit:
    return Unit(
        kind,
        OWNER,
        spec,
        status,
        1,
        annotations or {},
        None,
        asyncio.Lock(),
        memory or FailureMemory(jitter=lambda: 1.0),
        deleting,
    )


def test_a_moved_stream_or_consumer_is_refused_naming_both_connections() -> None:
    """Where no admission policy refuses a new spec.connectionRef, the operator must: the
    object would be made again on the other system and left behind on the first."""
    stream = decided(
        unit({"name": "ORDERS", "connectionRef": "other"}, MADE_THROUGH_DEFAULT), read_only=False
    )
    assert stream is not None
    assert (stream.outcome.reason, stream.outcome.stalled) == ("ImmutableFieldChanged", True)
    assert "spec.connectionRef changed from '' to 'other'" in stream.outcome.message
    assert "the operator's default connection" in stream.outcome.message
    assert "NatsConnection 'other'" in stream.outcome.message
    assert stream.delay, "the refusal is held in the failure memory, with its backoff"
    consumer = decided(
        unit(
            {"durableName": "reader", "streamName": "ORDERS"},
            {"streamName": "ORDERS", "consumerName": "reader", "connectionRef": "east"},
            kind=CONSUMER,
        ),
        read_only=False,
    )
    assert consumer is not None and consumer.outcome.reason == "ImmutableFieldChanged"
    assert "from 'east' to ''" in consumer.outcome.message
    # A read-only operator made nothing, so it may look wherever the spec points.
    moved = unit({"name": "ORDERS", "connectionRef": "other"}, MADE_THROUGH_DEFAULT)
    assert decided(moved, read_only=True) is None


def test_pause_and_release_are_decided_before_anything_is_asked() -> None:
    paused = unit({"name": "ORDERS"}, {}, annotations={PAUSE_ANNOTATION: "true"})
    result = decided(paused, read_only=False)
    assert result is not None and result.outcome.reason == "Paused"
    # Never made: not Ready, but neither working on it nor stuck (kstatus: InProgress).
    assert not result.outcome.ready and result.outcome.held and not result.outcome.stalled
    # As declared for this generation when paused: Ready stays True (kstatus: Current).
    synced = {
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}],
    }
    as_declared = unit({"name": "ORDERS"}, synced, annotations={PAUSE_ANNOTATION: "true"})
    kept = decided(as_declared, read_only=False)
    assert kept is not None and kept.outcome.ready and kept.outcome.reason == "Paused"
    assert [c["status"] for c in conditions_for(kept.outcome, 1)] == ["True", "False", "False"]
    # A deletion is never paused; the release annotation keeps the stream and lets go.
    deleting = unit({"name": "ORDERS"}, {}, annotations={PAUSE_ANNOTATION: "true"}, deleting=True)
    assert decided(deleting, read_only=False) is None
    release = unit({"name": "ORDERS"}, {}, annotations={RELEASE_ANNOTATION: "true"}, deleting=True)
    released = decided(release, read_only=False)
    assert released is not None and released.outcome.ready
    assert decided(unit({"name": "ORDERS"}, {}), read_only=False) is None


async def test_the_envelope_reports_what_the_work_found_or_what_it_decided() -> None:
    writer = RecordingWriter()
    delivered: list[Result] = []

    async def deliver(result: Result) -> None:
        delivered.append(result)

    calls = 0

    async def work() -> Result:
        nonlocal calls
        calls += 1
        return Result(Outcome(True, "Synced", "stream ORDERS matches the spec"))

    done = await run(unit({"name": "ORDERS"}, {}), work, deliver, writer, read_only=False)
    assert done is not None and done.outcome.reason == "Synced" and calls == 1
    moved = unit({"name": "ORDERS", "connectionRef": "other"}, MADE_THROUGH_DEFAULT)
    refused = await run(moved, work, deliver, writer, read_only=False)
    assert refused is not None and refused.outcome.reason == "ImmutableFieldChanged"
    assert calls == 1, "a refused move does no work"
    assert [event[2] for event in writer.events] == ["ImmutableFieldChanged"]
    # A connection holds nothing in NATS: no decision applies, the work always runs.
    connection = unit({}, {}, kind=NATS_CONNECTION, annotations={PAUSE_ANNOTATION: "true"})
    await run(connection, work, deliver, writer, read_only=False, decisions=False)
    assert calls == 2

    async def nothing_new() -> None:
        return None

    assert (
        await run(unit({"name": "ORDERS"}, {}), nothing_new, deliver, writer, read_only=False)
        is None
    )
    assert len(delivered) == 3, "a pass with nothing to report delivers nothing"


async def test_drift_repair_refuses_a_move_through_the_same_envelope() -> None:
    """The drift watcher of the new connection finds the moved stream missing there: its pass
    is refused like kopf's, and nothing is asked of NATS."""
    server = FakeJetStream()
    writer = RecordingWriter()
    streams = ResourceRegistry()
    ready = conditions_for(Outcome(True, "Synced", "stream ORDERS matches the spec"), 1)
    body = stream_body("orders", "uid-1", {"name": "ORDERS", "connectionRef": "other"})
    body["status"] = {"conditions": ready, "observedGeneration": 1, **MADE_THROUGH_DEFAULT}
    streams.observe("ADDED", body)
    repairer = Repairer(
        {STREAM_KIND: streams},
        ResourceRegistry(),
        writer,  # type: ignore[arg-type]
        writer,
        ("ns", "other"),
        read_only=False,
        pause_annotation=PAUSE_ANNOTATION,
        failures=FailureMemory(jitter=lambda: 1.0),
        budget=None,
        explained=None,
    )
    (resource,) = streams
    await repairer.repair(STREAM, resource, as_api(server), None)
    assert server.requests == []
    assert writer.patches and "ImmutableFieldChanged" in str(writer.patches[-1][1])
