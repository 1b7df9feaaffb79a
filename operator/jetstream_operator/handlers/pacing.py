"""How a restarted operator paces its first passes of resources that were not Ready.

A fixed random wait per resource spread them in time, but each wait held one of kopf's few
workers: with W workers, R such resources kept new ones queued for about R x (mean wait) / W,
minutes at a small worker limit. A shared pace spaces the passes by a fixed interval instead, so
the burst after a restart is as gentle for NATS, while a pass waits only for the passes ahead of
it (their number / rate) and a restart with few such resources waits for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Pace:
    """Hands out moments at most `rate` a second, in the order they are asked for; the clock
    is injectable."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    _next: float = field(default=float("-inf"))

    def wait(self) -> float:
        """Seconds until the caller's turn, which is taken at once."""
        now = self.clock()
        turn = max(now, self._next)
        self._next = turn + 1.0 / self.rate
        return turn - now
