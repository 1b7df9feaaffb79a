"""One-shot operations asked for by annotation on a Consumer, once per token with a record in
status: the reset (jetstream-operator.io/reset with reset-to, status.lastReset) and the leader
step-down (jetstream-operator.io/step-down, status.lastStepDown). They run after a pass that
found the consumer as declared, as a Stream's purge does; `CONSUMER_OPERATIONS` is their order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..api.consumer import ConsumerSpec
from ..nats.jsapi import CONSUMER_INVALID_RESET, JetStreamApi, JetStreamError, JetStreamUnavailable
from ..reconcile.conditions import Outcome, now_rfc3339
from ..reconcile.consumer_config import consumer_request, desired_consumer_config
from ..reconcile.consumer_plan import consumer_live_state
from ..reconcile.consumer_reset import (
    RESET_API_LEVEL,
    InvalidReset,
    ResetRequest,
    pending_reset,
    positioned_config,
    sequence_after_ack_floor,
)
from ..reconcile.ownership import Owner
from ..reconcile.purge import pending_step_down
from .operations import declined, step_down
from .results import Event, Result, unavailable


async def reset_if_asked(
    spec: Mapping[str, Any],
    owner: Owner,
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    jetstream: JetStreamApi,
    stream: str,
) -> Result | None:
    """Carry out a reset asked for and not done yet; None when none is pending."""
    try:
        request = pending_reset(annotations, status)
    except InvalidReset as error:
        return declined("InvalidReset", str(error), {"lastReset": {"token": error.token}})
    if request is None:
        return None
    consumer_spec = ConsumerSpec.model_validate(dict(spec))
    name = consumer_spec.durable_name
    try:
        info = await jetstream.consumer_info(stream, name)
        if info is None:
            return None  # gone since the pass looked: the next pass makes it, then resets
        sequence = await _target(jetstream, stream, request, info)
        moved = await _reset_in_place(jetstream, stream, name, request, sequence)
        method = "ResetAPI"
        if moved is not None:
            sequence = int(moved.get("reset_seq") or sequence)
        else:
            moved = await _recreate_at(jetstream, consumer_spec, owner, stream, sequence)
            method = "Recreated"
    except JetStreamUnavailable as error:
        return unavailable(error)
    except JetStreamError as error:
        message = f"NATS refused to reset consumer {name} to {request.describe()}: "
        message += error.description
        record = {"lastReset": {"token": request.token, "error": error.description}}
        return declined("ResetFailed", message, record)
    how = "in place" if method == "ResetAPI" else "by recreating it there"
    message = f"consumer {name} reset to stream sequence {sequence} ({request.describe()}) {how}"
    return Result(
        Outcome(True, "Synced", message),
        status={
            **consumer_live_state(moved),
            "lastReset": {
                "token": request.token,
                "sequence": sequence,
                "method": method,
                "time": now_rfc3339(),
            },
        },
        events=[Event("Normal", "ConsumerReset", message)],
    )


async def _target(
    jetstream: JetStreamApi, stream: str, request: ResetRequest, info: Mapping[str, Any]
) -> int:
    if request.sequence is not None:
        return request.sequence
    if request.time is not None:
        return await jetstream.first_sequence_at(stream, request.time)
    return sequence_after_ack_floor(info)


async def _reset_in_place(
    jetstream: JetStreamApi, stream: str, name: str, request: ResetRequest, sequence: int
) -> dict[str, Any] | None:
    """The consumer's info after the server's reset API moved it; None where the server has no
    such API, or refuses the move for this consumer (below its configured start, or a deliver
    policy that only resets to its ack floor), so that it is recreated there instead."""
    if await jetstream.api_level() < RESET_API_LEVEL:
        return None
    after_ack_floor = request.sequence is None and request.time is None
    try:
        # 0 asks for just after the ack floor, which every deliver policy allows.
        return await jetstream.reset_consumer(stream, name, 0 if after_ack_floor else sequence)
    except JetStreamError as error:
        if error.err_code == CONSUMER_INVALID_RESET:
            return None
        raise


async def _recreate_at(
    jetstream: JetStreamApi, spec: ConsumerSpec, owner: Owner, stream: str, sequence: int
) -> dict[str, Any]:
    """Delete the consumer and create it starting at `sequence`, marked so that later passes
    read that start as in sync with the spec (`consumer_reset.kept_position`)."""
    stream_info = await jetstream.stream_info(stream)
    limits = ((stream_info or {}).get("config") or {}).get("consumer_limits")
    config = positioned_config(
        desired_consumer_config(spec, owner, stream, stream_limits=limits), sequence
    )
    await jetstream.delete_consumer(stream, spec.durable_name)
    return await jetstream.create_consumer(stream, consumer_request(stream, config, "create"))


async def step_down_if_asked(
    spec: Mapping[str, Any],
    owner: Owner,
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    jetstream: JetStreamApi,
    stream: str,
) -> Result | None:
    """Carry out a leader step-down asked for and not done yet; None when none is pending."""
    token = pending_step_down(annotations, status)
    if token is None:
        return None
    name = str(spec.get("durableName"))
    return await step_down(
        token,
        f"consumer {name} of stream {stream}",
        lambda: jetstream.consumer_info(stream, name),
        lambda: jetstream.step_down_consumer(stream, name),
    )


ConsumerOperation = Callable[
    [Mapping[str, Any], Owner, Mapping[str, str], Mapping[str, Any], JetStreamApi, str],
    Awaitable[Result | None],
]

CONSUMER_OPERATIONS: tuple[ConsumerOperation, ...] = (reset_if_asked, step_down_if_asked)
