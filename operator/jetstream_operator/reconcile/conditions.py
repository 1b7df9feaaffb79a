"""Conditions in the shape kstatus and Argo CD understand: Ready, Reconciling, Stalled.

Ready says whether the resource is in effect; Reconciling that the operator is still working
(and will retry by itself); Stalled that it cannot go on without a person changing something.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"


@dataclass(frozen=True)
class Outcome:
    """What one reconciliation concluded, before it is written as conditions."""

    ready: bool
    reason: str
    message: str
    stalled: bool = False
    """True when retrying cannot help: the spec or the world must change first."""
    held: bool = False
    """True when the operator does nothing by a person's request (paused): neither working on
    it nor stuck, so kstatus reads a resource that was as declared as Current."""


def now_rfc3339(clock: datetime | None = None) -> str:
    moment = clock or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(
    kind: str,
    holds: bool,
    reason: str,
    message: str,
    generation: int | None,
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    status = "True" if holds else "False"
    before = previous.get(kind)
    changed = before is None or before.get("status") != status
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if changed or before is None else before["lastTransitionTime"],
        "observedGeneration": generation,
    }


def conditions_for(
    outcome: Outcome,
    generation: int | None,
    previous: Iterable[Mapping[str, Any]] = (),
    clock: datetime | None = None,
) -> list[dict[str, Any]]:
    """The full condition list for an outcome, keeping transition times that did not change."""
    by_type = {str(c.get("type")): c for c in previous}
    now = now_rfc3339(clock)
    reconciling = not outcome.ready and not outcome.stalled and not outcome.held
    return [
        _condition(READY, outcome.ready, outcome.reason, outcome.message, generation, by_type, now),
        _condition(
            RECONCILING,
            reconciling,
            outcome.reason if reconciling else "Idle",
            outcome.message if reconciling else "",
            generation,
            by_type,
            now,
        ),
        _condition(
            STALLED,
            outcome.stalled,
            "Progressing" if reconciling else outcome.reason,
            outcome.message if outcome.stalled else "",
            generation,
            by_type,
            now,
        ),
    ]


def same_conditions(left: Iterable[Mapping[str, Any]], right: Iterable[Mapping[str, Any]]) -> bool:
    """Equal apart from transition times, so an unchanged status is not written again. The
    reason of a Stalled=False condition is left out: it only repeats the Ready reason (or says
    Progressing), and before 0.2 it was always Progressing, so resources written then are not
    all rewritten at once after an upgrade; they take the new reason with their next change."""

    def key(items: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (
                c.get("type"),
                c.get("status"),
                None if (c.get("type"), c.get("status")) == (STALLED, "False") else c.get("reason"),
                c.get("message"),
                c.get("observedGeneration"),
            )
            for c in items
        )

    return key(left) == key(right)
