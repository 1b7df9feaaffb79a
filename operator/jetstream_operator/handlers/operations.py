"""One-shot operations asked for by annotation on a Stream, KeyValue or ObjectStore, each once
per token with a record in status: purge (jetstream-operator.io/purge, status.lastPurge) and
leader step-down (jetstream-operator.io/step-down, status.lastStepDown; `step_down` serves
Consumers too). Each runs after a pass
that found the object as declared; `ONE_SHOT_OPERATIONS` is their order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..nats.jsapi import JetStreamApi, JetStreamError, JetStreamUnavailable
from ..reconcile.backed import StreamBackedKind
from ..reconcile.conditions import Outcome, now_rfc3339
from ..reconcile.purge import InvalidPurge, pending_purge, pending_step_down
from .results import Event, Result, unavailable

NEW_LEADER_WAIT = (0.2, 15.0)
"""Seconds between looks for the new leader, and seconds in all: an election takes a few
seconds on a loaded cluster; the record says None when none was seen within them."""


async def step_down_if_asked(
    kind: StreamBackedKind,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    jetstream: JetStreamApi,
) -> Result | None:
    """Carry out a step-down asked for and not done yet; None when none is pending."""
    token = pending_step_down(annotations, status)
    if token is None:
        return None
    name = str(kind.stream_name(spec))
    return await step_down(
        token,
        f"stream {name}",
        lambda: jetstream.stream_info(name),
        lambda: jetstream.step_down_stream(name),
    )


async def step_down(
    token: str,
    what: str,
    look: Callable[[], Awaitable[Mapping[str, Any] | None]],
    ask: Callable[[], Awaitable[None]],
) -> Result:
    """Ask `what`'s leader to step down and wait for the new one: a stream's or a consumer's,
    seen through `look` (its info) and asked through `ask`."""
    try:
        before = _leader(await look())
        await ask()
        after = await _new_leader(look, before)
    except JetStreamUnavailable as error:
        return unavailable(error)
    except JetStreamError as error:
        message = f"NATS refused to step down the leader of {what}: {error.description}"
        record = {"lastStepDown": {"token": token, "error": error.description}}
        return declined("StepDownFailed", message, record)
    message = f"{what}'s leader stepped down: {before} -> {after or 'no leader yet'}"
    return Result(
        Outcome(True, "Synced", message),
        status={
            "lastStepDown": {
                "token": token,
                "fromLeader": before,
                "toLeader": after,
                "time": now_rfc3339(),
            },
            **({"leader": after} if after else {}),
        },
        events=[Event("Normal", "LeaderSteppedDown", message)],
    )


async def _new_leader(
    look: Callable[[], Awaitable[Mapping[str, Any] | None]], before: str | None
) -> str | None:
    """The leader elected after `before` stepped down, or None if none was seen in time. A look
    that goes unanswered is part of an election (a leaderless consumer answers no INFO)."""
    pause, within = NEW_LEADER_WAIT
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            leader = _leader(await look())
        except JetStreamUnavailable:
            leader = None
        if leader and leader != before:
            return leader
        await asyncio.sleep(pause)
    return None


def _leader(info: Mapping[str, Any] | None) -> str | None:
    leader = ((info or {}).get("cluster") or {}).get("leader")
    return str(leader) if leader else None


async def purge_if_asked(
    kind: StreamBackedKind,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    status: Mapping[str, Any],
    jetstream: JetStreamApi,
) -> Result | None:
    """Carry out a purge requested by annotation, once per token; None when none is pending."""
    try:
        request = pending_purge(annotations, status)
    except InvalidPurge as error:
        return declined("InvalidPurge", str(error), {"lastPurge": {"token": error.token}})
    if request is None:
        return None
    name = str(kind.stream_name(spec))
    try:
        purged = await jetstream.purge_stream(name, request.body())
    except JetStreamUnavailable as error:
        return unavailable(error)
    except JetStreamError as error:
        message = f"NATS refused to {request.describe()}: {error.description}"
        record = {"lastPurge": {"token": request.token, "error": error.description}}
        return declined("PurgeFailed", message, record)
    message = f"{request.describe()} removed {purged} messages from stream {name}"
    return Result(
        Outcome(True, "Synced", message),
        status={
            "lastPurge": {
                "token": request.token,
                "purged": purged,
                "subject": request.subject,
                "keep": request.keep,
                "time": now_rfc3339(),
            }
        },
        events=[Event("Normal", "Purged", message)],
    )


def declined(reason: str, message: str, record: dict[str, Any]) -> Result:
    """An operation not done: a Warning Event and its record in status (so the token is not
    tried again), while Ready stays what the pass found: the object is still as declared."""
    for last in record.values():
        last.setdefault("error", message)
    return Result(
        Outcome(True, "Synced", message), status=record, events=[Event("Warning", reason, message)]
    )


OneShot = Callable[
    [StreamBackedKind, Mapping[str, Any], Mapping[str, str], Mapping[str, Any], JetStreamApi],
    Awaitable[Result | None],
]

ONE_SHOT_OPERATIONS: tuple[OneShot, ...] = (purge_if_asked, step_down_if_asked)
