"""Which status writes happen: only changes, and traffic counters within a budget."""

from __future__ import annotations

from typing import Any

from jetstream_operator.handlers.registry import TrackedResource
from jetstream_operator.handlers.results import Result
from jetstream_operator.handlers.status_writes import (
    StatusBudget,
    only_counters,
    status_changes,
    status_patch,
)
from jetstream_operator.reconcile.conditions import Outcome, conditions_for
from jetstream_operator.reconcile.ownership import Owner

from .fakes import Clock

SYNCED = Outcome(True, "Synced", "stream S matches the spec")


def tracked(status: dict[str, Any], uid: str = "u1") -> TrackedResource:
    body = {"metadata": {"generation": 3}, "status": status}
    return TrackedResource(Owner("ns", "s", uid), body)


def settled_status(**live: Any) -> dict[str, Any]:
    return {"observedGeneration": 3, "conditions": conditions_for(SYNCED, 3), **live}


def test_nothing_changed_means_nothing_written() -> None:
    status = settled_status(messages=5, leader="n1")
    assert status_changes(status, Result(SYNCED, status={"messages": 5, "leader": "n1"}), 3) == {}


def test_only_the_changed_keys_are_written() -> None:
    status = settled_status(messages=5, leader="n1")
    result = Result(SYNCED, status={"messages": 5, "leader": "n2"})
    assert status_changes(status, result, 3) == {"leader": "n2"}


def test_a_new_generation_rewrites_the_conditions() -> None:
    changes = status_changes(settled_status(), Result(SYNCED), 4)
    assert changes["observedGeneration"] == 4
    assert {c["observedGeneration"] for c in changes["conditions"]} == {4}


def test_replica_lag_counts_as_traffic_but_a_replica_falling_behind_does_not() -> None:
    before = {"replicaStates": [{"name": "n2", "current": True, "lag": 0}]}
    lagging = {"replicaStates": [{"name": "n2", "current": True, "lag": 9}]}
    behind = {"replicaStates": [{"name": "n2", "current": False, "lag": 9}]}
    assert only_counters({"messages": 1, **lagging}, before)
    assert not only_counters(behind, before)
    assert not only_counters({"consumerCount": 2}, {})


def test_account_bytes_count_as_traffic_but_its_stream_and_consumer_counts_do_not() -> None:
    before = {"account": {"memory": 0, "storage": 10, "streams": 1, "consumers": 1}}
    stored = {"account": {"memory": 5, "storage": 99, "streams": 1, "consumers": 1}}
    created = {"account": {"memory": 0, "storage": 10, "streams": 2, "consumers": 1}}
    assert only_counters(stored, before)
    assert not only_counters(created, before)
    assert not only_counters({"account": {"streams": 1}}, {})


def test_counters_are_written_once_per_interval_per_resource() -> None:
    clock = Clock(0.0)
    budget = StatusBudget(interval=60.0, rate=100.0, burst=100.0, clock=clock)
    resource = tracked(settled_status(messages=1))
    busy = Result(SYNCED, status={"messages": 2})
    assert status_patch(resource, busy, budget) == {"messages": 2}
    clock.now = 30.0
    assert status_patch(resource, Result(SYNCED, status={"messages": 3}), budget) is None
    clock.now = 61.0
    assert status_patch(resource, Result(SYNCED, status={"messages": 3}), budget) is not None


def test_conditions_and_structure_are_never_held_back() -> None:
    clock = Clock(0.0)
    budget = StatusBudget(interval=60.0, clock=clock)
    resource = tracked(settled_status(messages=1, consumerCount=0))
    assert status_patch(resource, Result(SYNCED, status={"messages": 2}), budget)
    counted = Result(SYNCED, status={"messages": 3, "consumerCount": 1})
    assert status_patch(resource, counted, budget) == {"messages": 3, "consumerCount": 1}
    failing = Result(Outcome(False, "ServerRejected", "no", stalled=True))
    assert "conditions" in (status_patch(resource, failing, budget) or {})


def test_the_global_rate_bounds_counter_writes_across_resources() -> None:
    clock = Clock(0.0)
    budget = StatusBudget(interval=60.0, rate=2.0, burst=5.0, clock=clock)
    busy = Result(SYNCED, status={"messages": 2})
    written = sum(
        status_patch(tracked(settled_status(messages=1), uid=f"u{i}"), busy, budget) is not None
        for i in range(100)
    )
    assert written == 5  # the burst
    clock.now = 10.0
    written = sum(
        status_patch(tracked(settled_status(messages=1), uid=f"v{i}"), busy, budget) is not None
        for i in range(100)
    )
    assert written == 5  # 10 s at 2/s refills 20, but the bucket holds 5


def test_busy_passes_stay_within_the_bound_the_benchmark_reports() -> None:
    """1,000 busy streams checked once a resync: 300 counter writes a minute in steady state,
    and no window holds more than the rate plus one bucket."""
    clock = Clock(0.0)
    budget = StatusBudget.for_intervals(60.0, 5.0, 30.0)
    budget.clock = clock
    written_at: list[float] = []
    for number in range(40):  # twenty minutes of passes, a little late each time
        clock.now = number * 30.0 + number % 3
        for i in range(1000):
            resource = tracked(settled_status(messages=1), uid=f"u{i}")
            if status_patch(resource, Result(SYNCED, status={"messages": 2}), budget):
                written_at.append(clock.now)
    steady = [t for t in written_at if 600.0 <= t < 1200.0]
    assert 2900 <= len(steady) <= 3000
    for seconds in (60.0, 120.0):
        bound = budget.most_in(seconds, 1000)
        assert bound == 5.0 * seconds + 150.0
        busiest = max(
            sum(start <= t < start + seconds for t in written_at)
            for start in sorted(set(written_at))
        )
        assert budget.rate * seconds < busiest <= bound


def test_a_held_back_write_leaves_the_resource_behind_until_status_catches_up() -> None:
    """Whoever looks must know to look again: a figure that stops moving after its write was
    held back would otherwise stay wrong in status until the next idle look."""
    clock = Clock(0.0)
    budget = StatusBudget(interval=60.0, rate=100.0, burst=100.0, clock=clock)
    resource = tracked(settled_status(messages=1))
    assert status_patch(resource, Result(SYNCED, status={"messages": 2}), budget)
    assert not budget.behind(resource.owner.uid)
    clock.now = 30.0
    assert status_patch(resource, Result(SYNCED, status={"messages": 3}), budget) is None
    assert budget.behind(resource.owner.uid)
    clock.now = 61.0  # written at last
    assert status_patch(resource, Result(SYNCED, status={"messages": 3}), budget)
    assert not budget.behind(resource.owner.uid)
    clock.now = 90.0  # held back again, then the figure returns to what status holds
    assert status_patch(resource, Result(SYNCED, status={"messages": 4}), budget) is None
    assert budget.behind(resource.owner.uid)
    assert status_patch(resource, Result(SYNCED, status={"messages": 1}), budget) is None
    assert not budget.behind(resource.owner.uid)
    # Refused by the overall rate, not the interval: behind as well; forgetting clears it.
    empty = StatusBudget(interval=60.0, rate=0.0, burst=0.0, clock=clock)
    assert status_patch(resource, Result(SYNCED, status={"messages": 2}), empty) is None
    assert empty.behind(resource.owner.uid)
    empty.forget(resource.owner.uid)
    assert not empty.behind(resource.owner.uid)
