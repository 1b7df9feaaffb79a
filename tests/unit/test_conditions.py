from datetime import UTC, datetime

from jetstream_operator.reconcile.conditions import Outcome, conditions_for, same_conditions

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 2, tzinfo=UTC)


def by_type(conditions: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(c["type"]): c for c in conditions}


def test_ready_outcome() -> None:
    result = by_type(conditions_for(Outcome(True, "Synced", "ok"), 3, clock=T0))
    assert result["Ready"]["status"] == "True"
    assert result["Reconciling"]["status"] == "False"
    assert result["Stalled"]["status"] == "False"
    assert result["Ready"]["observedGeneration"] == 3


def test_retryable_failure_is_reconciling_not_stalled() -> None:
    result = by_type(conditions_for(Outcome(False, "NatsUnavailable", "down"), 1, clock=T0))
    assert result["Ready"]["status"] == "False"
    assert result["Reconciling"]["status"] == "True"
    assert result["Stalled"]["status"] == "False"


def test_failure_needing_a_person_is_stalled() -> None:
    outcome = Outcome(False, "Conflict", "owned elsewhere", stalled=True)
    result = by_type(conditions_for(outcome, 1, clock=T0))
    assert result["Stalled"]["status"] == "True"
    assert result["Stalled"]["reason"] == "Conflict"
    assert result["Reconciling"]["status"] == "False"


def test_transition_time_moves_only_when_status_changes() -> None:
    first = conditions_for(Outcome(True, "Synced", "ok"), 1, clock=T0)
    again = by_type(conditions_for(Outcome(True, "Synced", "ok"), 2, first, clock=T1))
    assert again["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    failed = by_type(conditions_for(Outcome(False, "X", "y"), 2, first, clock=T1))
    assert failed["Ready"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"


def test_same_conditions_ignores_only_transition_times() -> None:
    first = conditions_for(Outcome(True, "Synced", "ok"), 1, clock=T0)
    assert same_conditions(first, conditions_for(Outcome(True, "Synced", "ok"), 1, clock=T1))
    assert not same_conditions(first, conditions_for(Outcome(True, "Synced", "ok"), 2, clock=T1))


def test_a_stalled_false_reason_repeats_ready_and_says_progressing_only_while_working() -> None:
    healthy = by_type(conditions_for(Outcome(True, "Synced", "ok"), 1, clock=T0))
    assert healthy["Stalled"]["reason"] == "Synced"
    working = by_type(conditions_for(Outcome(False, "NatsUnavailable", "down"), 1, clock=T0))
    assert working["Stalled"]["reason"] == "Progressing"


def test_a_status_written_before_the_new_stalled_reason_is_not_rewritten_for_it() -> None:
    """Written by 0.1 (Stalled=False always "Progressing"): the same outcome now is no change,
    so an upgrade does not rewrite every resource at once. A Stalled=True reason still counts."""
    now = conditions_for(Outcome(True, "Synced", "ok"), 1, clock=T0)
    old = [{**c, "reason": "Progressing"} if c["type"] == "Stalled" else c for c in now]
    assert same_conditions(now, old)
    stalled = conditions_for(Outcome(False, "ServerRejected", "no", stalled=True), 1, clock=T0)
    other = [{**c, "reason": "InvalidSpec"} if c["type"] == "Stalled" else c for c in stalled]
    assert not same_conditions(stalled, other)
