"""The failure memory: backoff, one Warning per distinct failure, and the repeat guard."""

from __future__ import annotations

from jetstream_operator.handlers.failures import NO_BASIS, FailureMemory, failure_basis
from jetstream_operator.handlers.results import Event, Result, needs_a_person, unavailable
from jetstream_operator.nats.jsapi import JetStreamUnavailable, is_transient
from jetstream_operator.reconcile.conditions import Outcome

from .fakes import Clock


def memory(clock: Clock, jitter: float = 1.0) -> FailureMemory:
    return FailureMemory(base_delay=2.0, max_delay=60.0, clock=clock, jitter=lambda: jitter)


def rejected(message: str = "bad config") -> Result:
    return needs_a_person("ServerRejected", message, retry=True)


def test_a_repeated_failure_posts_its_warning_once_and_backs_off_exponentially() -> None:
    clock = Clock()
    failures = memory(clock)
    basis = failure_basis(1, {"name": "S"})
    delays = []
    warnings = 0
    for _ in range(7):
        settled = failures.settle("uid", basis, rejected())
        warnings += sum(1 for event in settled.events if event.type == "Warning")
        delays.append(settled.delay)
    assert warnings == 1
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


def test_jitter_spreads_retries_between_half_and_all_of_the_delay() -> None:
    clock = Clock()
    assert memory(clock, jitter=0.0).delay(3, transient=False) == 4.0
    assert memory(clock, jitter=1.0).delay(3, transient=False) == 8.0
    assert memory(clock, jitter=0.0).delay(30, transient=True) == 15.0  # transient cap 30 s


def test_a_held_failure_sends_nothing_until_its_time_unless_its_basis_changes() -> None:
    clock = Clock()
    failures = memory(clock)
    basis = failure_basis(1, {"name": "S", "max_age": 1})
    failures.settle("uid", basis, rejected())
    held = failures.held("uid", basis)
    assert held is not None and held.outcome.reason == "ServerRejected" and not held.events
    assert failures.held("uid", failure_basis(2, {"name": "S", "max_age": 1})) is None  # spec
    assert failures.held("uid", failure_basis(1, {"name": "S", "max_age": 2})) is None  # server
    clock.now += 2.0
    assert failures.held("uid", basis) is None  # its time has come
    assert failures.due() == ["uid"]
    assert failures.due() == []


def test_a_different_failure_posts_a_new_warning_and_starts_the_backoff_again() -> None:
    clock = Clock()
    failures = memory(clock)
    failures.settle("uid", NO_BASIS, rejected("first"))
    failures.settle("uid", NO_BASIS, rejected("first"))
    second = failures.settle("uid", NO_BASIS, rejected("second"))
    assert [event.message for event in second.events] == ["second"]
    assert second.delay == 2.0


def test_a_warning_already_shown_in_status_is_not_posted_again_after_a_restart() -> None:
    failures = memory(Clock())
    shown = {"type": "Ready", "status": "False", "reason": "ServerRejected", "message": "bad"}
    settled = failures.settle("uid", NO_BASIS, rejected("bad"), shown)
    assert settled.events == []


def test_success_forgets_the_failure_and_normal_events_always_pass() -> None:
    failures = memory(Clock())
    failures.settle("uid", NO_BASIS, rejected())
    done = Result(Outcome(True, "Synced", "ok"), events=[Event("Normal", "Updated", "x")])
    assert failures.settle("uid", NO_BASIS, done).events == done.events
    assert not failures.failing("uid")
    assert failures.next_due() is None


def test_transient_failures_are_never_held_and_forget_what_was_sent() -> None:
    clock = Clock()
    failures = memory(clock)
    assert not failures.repeats("uid", {"a": 1}, {"a": 2})
    failures.settle("uid", NO_BASIS, unavailable(JetStreamUnavailable("down")))
    assert failures.held("uid", NO_BASIS) is None
    # The update may never have reached the server: sending it again is no repeat.
    assert not failures.repeats("uid", {"a": 1}, {"a": 2})


def test_the_same_update_for_the_same_server_state_is_a_repeat() -> None:
    failures = memory(Clock())
    assert not failures.repeats("uid", {"rollup": True}, {"rollup": False})
    assert failures.repeats("uid", {"rollup": True}, {"rollup": False})
    assert not failures.repeats("uid", {"rollup": True, "x": 1}, {"rollup": False})
    assert not failures.repeats("other", {"rollup": True}, {"rollup": False})


def test_due_gives_each_retry_once_in_time_order() -> None:
    clock = Clock()
    failures = FailureMemory(base_delay=2.0, clock=clock, jitter=lambda: 1.0)
    failures.settle("a", NO_BASIS, rejected())
    failures.settle("a", NO_BASIS, rejected())  # 4 s now; the 2 s entry is superseded
    failures.settle("b", NO_BASIS, rejected())
    assert failures.next_due() == 102.0
    clock.now = 103.0
    assert failures.due() == ["b"]
    clock.now = 104.0
    assert failures.due() == ["a"]
    assert failures.next_due() is None


def test_which_jetstream_answers_are_transient() -> None:
    assert is_transient(503, 10008)
    assert is_transient(500, 10009)
    assert is_transient(400, 10005, "no suitable peers for placement, peer offline")
    assert not is_transient(400, 10005, "no suitable peers for placement, insufficient peers")
    assert not is_transient(400, 10058, "stream name already in use with a different config")


def test_a_rechecked_kinds_failure_warns_once_and_backs_off_with_jitter() -> None:
    """NatsAccount and NatsUser passes run in their daemons: a failure gets one Warning, the
    same failure again none, and the next look comes after the jittered backoff."""
    from jetstream_operator.handlers.registry import TrackedResource
    from jetstream_operator.passes.rechecks import next_wait, settled
    from jetstream_operator.reconcile.ownership import Owner

    now = [100.0]
    memory = FailureMemory(base_delay=2.0, clock=lambda: now[0], jitter=lambda: 1.0)
    failed = Result(Outcome(False, "ResolverUnreachable", "no answer"), retry=True)
    first = settled(memory, "uid-1", failed, None)
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "ResolverUnreachable")]
    again = settled(memory, "uid-1", failed, None)
    assert again.events == []
    tracked = TrackedResource(Owner("", "acct", "uid-1"), {"spec": {}})
    assert again.delay is not None and again.delay < 60.0
    assert next_wait(memory, tracked, 60.0) == again.delay
    now[0] += 1000
    assert next_wait(memory, tracked, 60.0) == 0.0  # overdue: look now
    settled(memory, "uid-1", Result(Outcome(True, "Pushed", "ok")), None)
    assert next_wait(memory, tracked, 60.0) == 60.0
