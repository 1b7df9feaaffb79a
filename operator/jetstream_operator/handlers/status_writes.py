"""Which status writes a pass makes: only what changed, and live counters within a budget.

Busy streams and consumers change their counts all the time; writing each change would make the
operator the API server's busiest client. Conditions, generation and structural state (leader,
replicas, consumer count, pause) are written at once; counters at most once per resource per
interval, and no faster than a global rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import inf
from typing import Any

from ..reconcile.conditions import conditions_for, same_conditions
from ..reconcile.renames import connection_record
from .registry import TrackedResource
from .results import Result

LIVE_COUNTERS = frozenset(
    {
        "messages",
        "values",
        "keys",
        "objects",
        "bytes",
        "size",
        "firstSequence",
        "lastSequence",
        "numPending",
        "numAckPending",
        "numRedelivered",
        "numWaiting",
        "deliveredStreamSeq",
        "deliveredConsumerSeq",
        "ackFloorStreamSeq",
        "ackFloorConsumerSeq",
    }
)
"""Status fields that move with traffic rather than with anything a person did."""

ACCOUNT_TRAFFIC = frozenset({"memory", "storage"})
"""The parts of a NatsConnection's `account` usage that move with traffic; its stream and
consumer counts and limits move when someone creates, deletes or configures something."""


def status_changes(
    previous: Mapping[str, Any],
    result: Result,
    generation: int | None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status keys whose value a pass changes; empty when a write would change nothing.
    With the `spec`, a write showing a managed object records its connection too."""
    changes: dict[str, Any] = {}
    before = previous.get("conditions") or []
    conditions = conditions_for(result.outcome, generation, before)
    if not same_conditions(conditions, before):
        changes["conditions"] = conditions
    if previous.get("observedGeneration") != generation:
        changes["observedGeneration"] = generation
        changes["conditions"] = conditions
    for key, value in result.status.items():
        if previous.get(key) != value:
            changes[key] = value
    if spec is not None:
        changes.update(connection_record(spec, previous, changes))
    return changes


def only_counters(changes: Mapping[str, Any], previous: Mapping[str, Any]) -> bool:
    """Whether every change is a traffic counter (replica lag included)."""
    for key, value in changes.items():
        if key == "account" and _without_traffic(value) == _without_traffic(previous.get(key)):
            continue
        if key in LIVE_COUNTERS:
            continue
        if key == "replicaStates" and _without_lag(value) == _without_lag(previous.get(key)):
            continue
        return False
    return True


def _without_traffic(account: Any) -> dict[str, Any]:
    if not isinstance(account, Mapping):
        return {}
    return {k: v for k, v in account.items() if k not in ACCOUNT_TRAFFIC}


def _without_lag(replicas: Any) -> list[Any]:
    return [
        {k: v for k, v in replica.items() if k != "lag"}
        if isinstance(replica, Mapping)
        else replica
        for replica in replicas or []
    ]


@dataclass
class StatusBudget:
    """At most one counter-only write per resource per `interval`, and at most `rate` such
    writes a second overall (a token bucket holding `burst`).

    A refused write leaves the resource's status behind its figures (`behind`) until one is
    written: whoever looks must look again, or a figure that then stops moving stays wrong in
    status until the next idle look, hours later."""

    interval: float = 60.0
    rate: float = 5.0
    burst: float = 50.0
    clock: Callable[[], float] = time.monotonic
    _written: dict[str, float] = field(default_factory=dict)
    _behind: set[str] = field(default_factory=set)
    _tokens: float = -1.0
    _filled_at: float = 0.0

    @classmethod
    def for_intervals(
        cls, status_interval: float, writes_per_second: float, resync_interval: float
    ) -> StatusBudget:
        """Passes come once a resync and find every changed resource at once: the bucket holds
        a resync's worth, so the rate is what one gets, not the bucket's size. Any window of
        `t` seconds therefore sees at most `rate * t + burst` counter writes."""
        return cls(
            interval=status_interval,
            rate=writes_per_second,
            burst=max(writes_per_second, writes_per_second * resync_interval),
        )

    def most_in(self, seconds: float, resources: int) -> float:
        """The most counter writes any window of `seconds` may hold: the rate plus a full
        bucket, and no more than each resource once per interval (plus one at the edge)."""
        per_resource = resources * (seconds // self.interval + 1) if self.interval else inf
        return min(self.rate * seconds + self.burst, per_resource)

    def allows(self, uid: str) -> bool:
        now = self.clock()
        if now - self._written.get(uid, float("-inf")) < self.interval:
            self._behind.add(uid)
            return False
        if self._tokens < 0:
            self._tokens, self._filled_at = self.burst, now
        self._tokens = min(self.burst, self._tokens + (now - self._filled_at) * self.rate)
        self._filled_at = now
        if self._tokens < 1:
            self._behind.add(uid)
            return False
        self._tokens -= 1
        self.wrote(uid, now)
        return True

    def wrote(self, uid: str, now: float | None = None) -> None:
        """A write for another reason carried the counters too: the interval starts again."""
        self._written[uid] = self.clock() if now is None else now
        self._behind.discard(uid)

    def behind(self, uid: str) -> bool:
        """Its last counter write was refused, and status has not caught up since."""
        return uid in self._behind

    def caught_up(self, uid: str) -> None:
        """Status shows what was found (the figures went back to what it holds)."""
        self._behind.discard(uid)

    def forget(self, uid: str) -> None:
        self._written.pop(uid, None)
        self._behind.discard(uid)


def status_patch(
    resource: TrackedResource, result: Result, budget: StatusBudget | None = None
) -> dict[str, Any] | None:
    """The status to write after a drift pass, or None when nothing visible changed or only
    counters changed and the budget says not yet."""
    changes = status_changes(resource.status, result, resource.generation, resource.spec)
    uid = resource.owner.uid
    if not changes:
        if budget is not None:
            budget.caught_up(uid)
        return None
    if budget is not None:
        if only_counters(changes, resource.status):
            if not budget.allows(uid):
                return None
        else:
            budget.wrote(uid)
    return changes
