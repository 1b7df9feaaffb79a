"""Reconcile and finalize one Consumer resource."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ..api.consumer import ConsumerSpec
from ..k8s.selection import label_selector_matches
from ..nats.jsapi import (
    CONSUMER_EXISTS,
    STREAM_NOT_FOUND,
    JetStreamApi,
    JetStreamError,
    JetStreamUnavailable,
)
from ..reconcile.conditions import Outcome
from ..reconcile.consumer_config import consumer_request
from ..reconcile.consumer_plan import (
    CreateConsumer,
    ImmutableChangeRefused,
    InSync,
    OwnedElsewhere,
    PauseConsumer,
    RecreateConsumer,
    StreamMissing,
    UpdateConsumer,
    UpdatesPrevented,
    consumer_live_state,
    may_delete,
    plan_consumer,
    release_request,
)
from ..reconcile.live_state import existed_before
from ..reconcile.ownership import Owner, claimed_owner
from ..reconcile.renames import renamed, restreamed
from ..reconcile.stream_config import without_server_metadata
from .failures import Basis, History, creates_unlooked, failure_basis
from .results import (
    Event,
    Result,
    deletion_blocked,
    left_in_nats,
    needs_a_person,
    not_converging,
    reattached_event,
    server_rejected,
    unavailable,
    updates_prevented,
    validation_message,
)

_MAX_STEPS = 6  # a wait for the stream, a second look, an update, a pause, a recreate's two

StreamArrival = Mapping[str, Any] | bool
"""What waiting for a missing stream brought: False, it is not coming; True, look again; or the
`planning_view` of this process's creation reply, which is what a look would plan with."""

OUT_OF_DATE = frozenset({CONSUMER_EXISTS, STREAM_NOT_FOUND})
"""A create's refusals that mean what the handler knew was out of date, not that the spec is
wrong."""


def planning_view(stream_info: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a stream's info that `reconcile` plans a consumer with (the stream's consumer
    limits), for keeping where the whole info would be kept per stream: a parsed creation
    reply is about 4.6 KiB."""
    config = stream_info.get("config") or {}
    limits = {"consumer_limits": config["consumer_limits"]} if "consumer_limits" in config else {}
    return {"config": limits}


def served_elsewhere(stream: str, labels: Mapping[str, str], selector: str) -> str | None:
    """Why a streamRef finds no Stream when the Stream resource exists: this operator's label
    selector leaves it to another deployment. None when the selector takes it (its watch event
    has not arrived yet)."""
    if label_selector_matches(selector, labels):
        return None
    return (
        f"Stream resource {stream!r} is served by another operator deployment: its labels do "
        f"not match this operator's selector {selector!r}. Give the Consumer the labels of its "
        "Stream, so that one deployment serves both"
    )


async def reconcile(
    spec: Mapping[str, Any],
    owner: Owner,
    jetstream: JetStreamApi,
    *,
    stream_name: str | None,
    drift: bool = False,
    known_info: Mapping[str, Any] | None = None,
    known_stream_info: Mapping[str, Any] | None = None,
    read_only: bool = False,
    stream_arrival: Callable[[str], Awaitable[StreamArrival]] | None = None,
    history: History | None = None,
    unresolved_ref: Callable[[str], Awaitable[str | None]] | None = None,
) -> Result:
    """Bring the consumer in line with the spec. `stream_name` is the resolved stream (None
    while a streamRef points at no Stream resource yet). `known_info` / `known_stream_info`
    come from listings (or the stream's creation) and save a request each when the consumer
    turns out to be in sync. `stream_arrival`, if given, may wait once for a missing stream
    that is being created. `history` brings backoff, one Warning per distinct failure, and the
    repeat guard. `unresolved_ref`, given the name of a Stream resource that a streamRef
    finds nowhere in this process, may explain why (it belongs to another operator's share).

    A creation refused because what was known is out of date (the consumer exists after all,
    or the stream does not) looks at the server once and plans again. So a first pass does not
    look for the consumer before creating it: the server answers the create with what it holds
    when that is identical (ours, from a pass whose status was lost), refuses anything else,
    and the pass then looks."""
    try:
        consumer_spec = ConsumerSpec.model_validate(dict(spec))
    except ValidationError as error:
        result = Result(Outcome(False, "InvalidSpec", validation_message(error), stalled=True))
        return _settled(history, owner, None, None, result)
    name = consumer_spec.durable_name
    status = history.status if history is not None else {}
    refusal = renamed(
        "durableName", status.get("consumerName"), name, "consumer", "Consumer"
    ) or restreamed(
        spec, status, stream_name or consumer_spec.stream_name
    )  # a move to another connection is refused before: `passes.envelope`
    if refusal is not None:
        result = needs_a_person(refusal.reason, refusal.message())
        return _settled(history, owner, None, None, result)
    events: list[Event] = []
    outcome = Outcome(True, "Synced", f"consumer {name} matches the spec")
    stream_info: Mapping[str, Any] | None = None
    info: dict[str, Any] | None = None
    unlooked = creates_unlooked(history, known_info, read_only)
    looked = known_stream_info is None and known_info is None and not unlooked
    try:
        stream = stream_name or consumer_spec.stream_name
        stream_info = known_stream_info
        if stream_info is None and stream:
            stream_info = await jetstream.stream_info(stream)
        if stream and stream_info is not None:
            if known_info is not None:
                info = dict(known_info)
            elif not unlooked:
                info = await jetstream.consumer_info(stream, name)
        if history is not None:
            held = history.memory.held(owner.uid, _basis(history, stream_info, info))
            if held is not None:
                return held
        for _ in range(_MAX_STEPS):
            action = plan_consumer(
                consumer_spec,
                owner,
                stream_info is not None,
                info,
                stream_name=stream,
                stream_limits=((stream_info or {}).get("config") or {}).get("consumer_limits"),
            )
            if read_only and not isinstance(action, InSync | UpdatesPrevented | StreamMissing):
                message = f"consumer {name} needs changes; not made: the operator is read-only"
                return Result(Outcome(False, "ReadOnly", message, stalled=True))
            match action:
                case StreamMissing():
                    arrival: StreamArrival = False
                    if stream and stream_arrival is not None:
                        arrival = await stream_arrival(stream)
                        stream_arrival = None
                    if stream and arrival is not False:
                        if isinstance(arrival, Mapping):
                            # Made by this process since the look found no stream, so no
                            # consumer on it predates this pass: nothing to look at.
                            stream_info, info, looked = arrival, None, False
                        else:
                            stream_info, info = await _look(jetstream, stream, name)
                        continue
                    # No kopf retry: the drift watcher acts as soon as the stream appears
                    # (advisory, or the next resync), without a retry's extra writes.
                    message = action.message()
                    if action.from_ref and unresolved_ref is not None:
                        message = await unresolved_ref(action.stream) or message
                    result = Result(Outcome(False, action.reason, message))
                    return _settled(history, owner, stream_info, info, result)
                case CreateConsumer(stream=target, config=config):
                    try:
                        info = await jetstream.create_consumer(
                            target, consumer_request(target, config, "create")
                        )
                    except JetStreamError as error:
                        if looked or error.err_code not in OUT_OF_DATE:
                            raise
                        looked, unlooked = True, False
                        stream_info, info = await _look(jetstream, target, name)
                        continue
                    if unlooked and existed_before(info):
                        unlooked = False
                        continue  # ours already, as the spec asks: nothing was made
                    unlooked = False
                    reason = "Recreated" if drift else "Created"
                    events.append(Event("Normal", reason, f"created consumer {name} on {target}"))
                    continue
                case UpdateConsumer(stream=target, config=config):
                    actual = (info or {}).get("config") or {}
                    observed = without_server_metadata(actual)
                    if history is not None and history.memory.repeats(owner.uid, observed, config):
                        result = not_converging(f"consumer {name}", action.summary())
                        return _settled(history, owner, stream_info, info, result)
                    recorded = claimed_owner(owner, dict(actual))
                    if owner.reattaching(recorded):
                        assert recorded is not None
                        events.append(reattached_event(f"consumer {name}", recorded, owner))
                    info = await jetstream.create_consumer(
                        target, consumer_request(target, config, "update")
                    )
                    reason = "DriftRepaired" if drift else "Updated"
                    events.append(Event("Normal", reason, f"{name}: {action.summary()}"))
                    continue
                case PauseConsumer(stream=target):
                    await jetstream.pause_consumer(target, name, action.request())
                    info = await jetstream.consumer_info(target, name)
                    state = "paused" if action.pause_until else "resumed"
                    events.append(Event("Normal", "Paused", f"consumer {name} {state}"))
                    continue
                case RecreateConsumer(stream=target, config=config):
                    events.append(Event("Warning", action.reason, action.message()))
                    await jetstream.delete_consumer(target, name)
                    # Created here rather than by the next step's plan: the action's config
                    # holds the position it keeps, which a plan without the consumer lacks.
                    info = await jetstream.create_consumer(
                        target, consumer_request(target, config, "create")
                    )
                    events.append(Event("Normal", "Recreated", f"recreated consumer {name}"))
                    continue
                case ImmutableChangeRefused() | OwnedElsewhere():
                    result = needs_a_person(action.reason, action.message())
                    return _settled(history, owner, stream_info, info, result)
                case UpdatesPrevented(differences=differences):
                    fields = ", ".join(d.field for d in differences)
                    outcome = updates_prevented(f"consumer {name}", fields)
                case InSync():
                    pass
            break
    except JetStreamUnavailable as error:
        return _settled(history, owner, stream_info, info, unavailable(error))
    except JetStreamError as error:
        result = server_rejected("consumer", error, events)
        return _settled(history, owner, stream_info, info, result)
    result = Result(outcome, status=consumer_live_state(info or {}), events=events)
    return _settled(history, owner, stream_info, info, result)


async def _look(
    jetstream: JetStreamApi, stream: str, name: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The stream's info, and the consumer's where the stream exists."""
    stream_info = await jetstream.stream_info(stream)
    if stream_info is None:
        return None, None
    return stream_info, await jetstream.consumer_info(stream, name)


def _basis(
    history: History, stream_info: Mapping[str, Any] | None, info: Mapping[str, Any] | None
) -> Basis:
    config = without_server_metadata((info or {}).get("config"))
    return failure_basis(history.generation, [stream_info is not None, config])


def _settled(
    history: History | None,
    owner: Owner,
    stream_info: Mapping[str, Any] | None,
    info: Mapping[str, Any] | None,
    result: Result,
) -> Result:
    if history is None:
        return result
    basis = _basis(history, stream_info, info)
    return history.memory.settle(owner.uid, basis, result, history.ready_condition())


async def finalize(
    spec: Mapping[str, Any],
    owner: Owner,
    jetstream: JetStreamApi,
    *,
    stream_name: str | None,
    consumer_name: str | None = None,
    read_only: bool = False,
) -> Result:
    """Delete the consumer if this resource owns it and may delete it; leave anything else.
    `consumer_name` is the one its status shows it manages, where a rename was refused."""
    name = consumer_name or spec.get("durableName")
    stream = stream_name or spec.get("streamName")
    if not isinstance(name, str) or not isinstance(stream, str):
        return Result(Outcome(True, "NotDeleted", "no consumer to delete"))
    if read_only:
        return left_in_nats("ReadOnly", f"consumer {name} left in NATS: read-only operator")
    try:
        retain = ConsumerSpec.model_validate(dict(spec)).retains_consumer()
    except ValidationError:
        retain = True  # when in doubt, keep the consumer and its position
    try:
        info = await jetstream.consumer_info(stream, name)
        if not may_delete(owner, info):
            if info is None:
                return Result(
                    Outcome(True, "AlreadyGone", f"consumer {name} not deleted: AlreadyGone")
                )
            return left_in_nats(
                "NotOwned", f"consumer {name} left in NATS: this resource did not make it"
            )
        assert info is not None
        if retain:
            release = release_request(owner, info)
            if release is not None:
                await jetstream.create_consumer(stream, consumer_request(stream, release, "update"))
            return left_in_nats(
                "Retained", f"consumer {name} retained in NATS (deletionPolicy: Retain)"
            )
        await jetstream.delete_consumer(stream, name)
    except JetStreamUnavailable as error:
        return deletion_blocked(f"consumer {name}", error)
    except JetStreamError as error:
        return Result(
            Outcome(False, "DeletionFailed", f"NATS refused to delete consumer {name}: {error}"),
            retry=True,
        )
    return Result(
        Outcome(True, "Deleted", f"deleted consumer {name}"),
        events=[Event("Normal", "Deleted", f"deleted consumer {name} of stream {stream}")],
    )
