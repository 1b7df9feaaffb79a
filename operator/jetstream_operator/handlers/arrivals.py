"""Streams this process has just created, for consumers applied at the same moment.

A Consumer applied together with its Stream usually reaches its handler before the stream exists
in NATS. Reporting StreamNotFound there costs a status write and a later pass to fix it; waiting
a moment for the stream's own handler to announce the creation costs neither.
"""

from __future__ import annotations

import asyncio
import time

RECENT = 10.0
"""An announcement this recent also counts, for a consumer that looked just before it."""


class StreamArrivals:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._announced: dict[str, float] = {}

    def announce(self, stream: str) -> None:
        """The stream now exists in NATS: wake whoever waits for it."""
        now = time.monotonic()
        self._announced[stream] = now
        for name, when in list(self._announced.items()):
            if now - when > RECENT:
                del self._announced[name]
        event = self._events.pop(stream, None)
        if event is not None:
            event.set()

    async def wait(self, stream: str, timeout: float) -> bool:
        """Whether the stream was announced lately or within the timeout. Streams are named
        without their connection, so True only means 'look again', never 'it exists'."""
        announced = self._announced.get(stream)
        if announced is not None and time.monotonic() - announced <= RECENT:
            return True
        # An event left by a timeout is reused by the next waiter and dropped by the next
        # announce, so there is at most one per stream name.
        event = self._events.setdefault(stream, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True
