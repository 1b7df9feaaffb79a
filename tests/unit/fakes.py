"""Stand-ins the unit tests share."""


class Clock:
    """A monotonic clock the test moves by hand (`clock.now += 5`), for code that takes one."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
