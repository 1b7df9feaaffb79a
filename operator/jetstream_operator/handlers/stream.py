"""Reconcile and finalize one Stream resource."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..api.stream import StreamSpec
from ..nats.jsapi import JetStreamApi, JetStreamError, JetStreamUnavailable
from ..reconcile.conditions import Outcome
from ..reconcile.ownership import Owner
from ..reconcile.stream_plan import (
    CreateStream,
    InSync,
    OwnedElsewhere,
    UpdateStream,
    live_state,
    may_delete,
    plan_stream,
)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the resource."""

    type: str
    reason: str
    message: str


@dataclass
class Result:
    """What a pass concluded: conditions to write, live state, events, and whether to retry."""

    outcome: Outcome
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    retry: bool = False


def _validation_message(error: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(part) for part in issue['loc']) or 'spec'}: {issue['msg']}"
        for issue in error.errors()
    ]
    return "invalid spec: " + "; ".join(problems)


def unavailable(error: JetStreamUnavailable) -> Result:
    """NATS could not be reached: not the spec's fault, so keep retrying."""
    return Result(
        Outcome(False, "NatsUnavailable", f"{error}; retrying with backoff"),
        retry=True,
    )


def deletion_blocked(spec: Mapping[str, Any], error: JetStreamUnavailable) -> Outcome:
    """Why the finalizer stays: deleting needs NATS to answer first."""
    return Outcome(
        False,
        "DeletionBlocked",
        f"cannot delete stream {spec.get('name')}: {error}. "
        "The finalizer stays until NATS answers; nothing was deleted.",
    )


async def reconcile(spec: Mapping[str, Any], owner: Owner, jetstream: JetStreamApi) -> Result:
    """Bring the stream on the server in line with the spec, and say how it went."""
    try:
        stream_spec = StreamSpec.model_validate(dict(spec))
    except ValidationError as error:
        return Result(Outcome(False, "InvalidSpec", _validation_message(error), stalled=True))
    try:
        info = await jetstream.stream_info(stream_spec.name)
        action = plan_stream(stream_spec, owner, info)
        events: list[Event] = []
        match action:
            case CreateStream(config=config):
                info = await jetstream.create_stream(config)
                events.append(Event("Normal", "Created", f"created stream {stream_spec.name}"))
            case UpdateStream():
                info = await jetstream.update_stream(action.config)
                message = f"updated stream {stream_spec.name}: {action.summary()}"
                events.append(Event("Normal", "Updated", message))
            case OwnedElsewhere():
                message = action.message()
                return Result(
                    Outcome(False, "Conflict", message, stalled=True),
                    events=[Event("Warning", "Conflict", message)],
                )
            case InSync():
                pass
    except JetStreamUnavailable as error:
        return unavailable(error)
    except JetStreamError as error:
        message = f"NATS refused the stream config: {error.description} (error {error.err_code})"
        return Result(
            Outcome(False, "ServerRejected", message, stalled=True),
            events=[Event("Warning", "ServerRejected", message)],
            retry=True,
        )
    assert info is not None
    return Result(
        Outcome(True, "Synced", f"stream {stream_spec.name} matches the spec"),
        status=live_state(info),
        events=events,
    )


async def finalize(spec: Mapping[str, Any], owner: Owner, jetstream: JetStreamApi) -> Result:
    """Delete the stream if this resource owns it; anything else is left as it is."""
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        return Result(Outcome(True, "Deleted", "no stream name; nothing to delete"))
    try:
        info = await jetstream.stream_info(name)
        if not may_delete(owner, info):
            reason = "AlreadyGone" if info is None else "NotOwned"
            return Result(Outcome(True, reason, f"stream {name} not deleted: {reason}"))
        await jetstream.delete_stream(name)
    except JetStreamUnavailable as error:
        result = unavailable(error)
        result.outcome = deletion_blocked(spec, error)
        return result
    except JetStreamError as error:
        return Result(
            Outcome(False, "DeletionFailed", f"NATS refused to delete stream {name}: {error}"),
            retry=True,
        )
    return Result(
        Outcome(True, "Deleted", f"deleted stream {name}"),
        events=[Event("Normal", "Deleted", f"deleted stream {name}")],
    )
