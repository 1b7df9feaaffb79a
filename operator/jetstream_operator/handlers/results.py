"""What a handler pass concludes, shared by every kind: outcome, status, events, retry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..nats.jsapi import JetStreamError, JetStreamUnavailable
from ..reconcile.conditions import Outcome
from ..reconcile.ownership import Owner


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
    delay: float | None = None
    """Seconds until the failure memory retries, when the pass failed."""

    def then(self, later: Result | None) -> Result:
        """This pass followed by another step: the later outcome wins if it failed."""
        if later is None:
            return self
        outcome = (
            later.outcome if not later.outcome.ready or not self.outcome.ready else self.outcome
        )
        return Result(
            outcome,
            status={**self.status, **later.status},
            events=[*self.events, *later.events],
            retry=self.retry or later.retry,
            delay=later.delay if later.delay is not None else self.delay,
        )


def validation_message(error: ValidationError) -> str:
    problems = [
        f"{'.'.join(str(part) for part in issue['loc']) or 'spec'}: {issue['msg']}"
        for issue in error.errors()
    ]
    return "invalid spec: " + "; ".join(problems)


def unavailable(error: JetStreamUnavailable) -> Result:
    """NATS could not be reached: not the spec's fault, so keep retrying."""
    reason = getattr(error, "reason", "NatsUnavailable")
    return Result(Outcome(False, reason, f"{error}; retrying with backoff"), retry=True)


def deletion_blocked(what: str, error: JetStreamUnavailable) -> Result:
    """Why the finalizer stays: deleting needs NATS to answer first."""
    result = unavailable(error)
    result.outcome = Outcome(
        False,
        "DeletionBlocked",
        f"cannot delete {what}: {error}. "
        "The finalizer stays until NATS answers; nothing was deleted.",
    )
    return result


def paused(annotation: str, as_declared: bool = False) -> Result:
    """A resource a person has paused: nothing is done until the annotation goes. Ready stays
    True where the last pass found it as declared for this generation (kstatus: Current; the
    reason says paused); a spec changed since waits (Ready=False, neither Reconciling nor
    Stalled)."""
    return Result(
        Outcome(
            as_declared,
            "Paused",
            f"reconciliation paused by the {annotation} annotation; remove it to resume",
            held=True,
        )
    )


def released(what: str, annotation: str) -> Result:
    """A person let the resource go without NATS (it is gone for good): nothing is deleted."""
    message = (
        f"finalizer released by the {annotation} annotation; {what} was not deleted or checked "
        "in NATS and may still exist there"
    )
    return Result(
        Outcome(True, "Released", message), events=[Event("Warning", "Released", message)]
    )


def needs_a_person(
    reason: str, message: str, *, retry: bool = False, events: list[Event] | None = None
) -> Result:
    """A failure only a spec change (or the world) can fix: Stalled, with a Warning event."""
    return Result(
        Outcome(False, reason, message, stalled=True),
        events=[*(events or []), Event("Warning", reason, message)],
        retry=retry,
    )


def updates_prevented(what: str, fields: str) -> Outcome:
    """NACK's preventUpdate: the object exists but differs, and the spec says leave it."""
    return Outcome(
        True,
        "UpdatesPrevented",
        f"{what} differs from the spec ({fields}) but spec.preventUpdate is set; "
        "remove it to apply the spec",
    )


def server_rejected(what: str, error: JetStreamError, events: list[Event]) -> Result:
    """The server refused the config; retried with backoff in case the world changes."""
    message = f"NATS refused the {what} config: {error.description} (error {error.err_code})"
    return needs_a_person("ServerRejected", message, retry=True, events=events)


def not_converging(what: str, fields: str) -> Result:
    """The server kept its own values after an update: sending it again would only loop."""
    message = (
        f"{what} does not converge: the server keeps its own value for {fields} after an update "
        "with the spec's value (it rewrites or ignores it). Change these fields in the spec to "
        "what the server accepts (see docs/server-rewrites.md); retrying with backoff"
    )
    return needs_a_person("NotConverging", message, retry=True)


def reattached_event(what: str, recorded: Owner, owner: Owner) -> Event:
    """A restored resource (same namespace/name, new UID) renewing its owner record."""
    return Event(
        "Normal",
        "Reattached",
        f"{what} was recorded as owned by {recorded.describe()} under UID {recorded.uid}; "
        f"this resource has the same namespace/name with UID {owner.uid} (restored or "
        "recreated), so it takes the object over again",
    )


def left_in_nats(reason: str, message: str) -> Result:
    """A deletion that ends with the stream or consumer still in NATS. The Event is its record:
    the object is gone a moment later, and with it the status."""
    return Result(Outcome(True, reason, message), events=[Event("Normal", reason, message)])
