from jetstream_operator.handlers.pacing import Pace

from .fakes import Clock


def test_a_lone_pass_waits_for_nothing() -> None:
    assert Pace(200.0, clock=Clock()).wait() == 0.0


def test_passes_asked_together_are_spaced_by_the_rate_in_their_order() -> None:
    pace = Pace(4.0, clock=Clock())
    assert [pace.wait() for _ in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_time_that_passed_is_not_owed() -> None:
    """A quiet spell does not save up turns for a later burst, nor does a later pass wait
    for turns that have gone by."""
    clock = Clock()
    pace = Pace(4.0, clock=clock)
    assert [pace.wait() for _ in range(3)] == [0.0, 0.25, 0.5]
    clock.now += 0.6
    assert abs(pace.wait() - 0.15) < 1e-9
    clock.now += 10.0
    assert [pace.wait() for _ in range(2)] == [0.0, 0.25]
