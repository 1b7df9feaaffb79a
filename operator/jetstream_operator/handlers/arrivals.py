"""Streams this process has just created, for consumers applied at the same moment.

A Consumer applied together with its Stream usually reaches its handler before the stream exists
in NATS. Reporting StreamNotFound there costs a status write and a later pass to fix it; waiting
a moment for the stream's own handler to announce the creation costs neither. The announcement
carries what a consumer plans with from the server's reply to the creation, per connection, for
RECENT seconds, or longer while the stream's handler still waits for its consumers, until another
pass on the stream: a consumer takes it for its look at the stream (a request each in a burst),
and its create's refusal, should the reply be out of date, brings the look after all.

The stream's handler then waits, briefly, for the consumer passes on it: the stream's first
status counts what they made, where each of those consumers would otherwise write the stream's
count again a moment later (a status write and a watch event per stream in a burst). Each pass
says whether it made its consumer, so the count is the creation's plus those, with no look at
the stream (a request per stream in a burst). Under a
worker limit a pass may be queued: the handler waits for it to start while consumer passes keep
starting and ending, since then its turn is coming (a burst's streams and consumers are handled
in step, each kind in the order applied), and no longer once none has for a moment, since then
the consumers' workers may all wait for streams queued behind this very handler.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

RECENT = 10.0
"""A creation's reply this recent serves a consumer's look at the stream; a pass that ended this
recently is one a new stream's first status need not wait for."""

ANNOUNCED_FOR = 60.0
"""How long an announcement counts, for a consumer that looked just before it or whose pass
begins late: as long as a consumer waits for a stream no Stream resource has reported on yet
(passes.consumer.NEW_STREAM_ARRIVAL_TIMEOUT), so none waits that long for a stream made before
its wait.
`forget` ends it early when the stream's resource is deleted."""


class ConsumerPass:
    """One consumer's pass on a named stream, from its start to its `StreamArrivals.end`."""

    __slots__ = ("stream", "uid")

    def __init__(self, stream: str, uid: str) -> None:
        self.stream = stream
        self.uid = uid


class Gathering:
    """A new stream's handler waiting for the consumer passes on it (`StreamArrivals.created`).
    Its announcement and reply hold while it waits, however long a burst lasts: the consumers
    queued behind the burst's workers begin their passes only then."""

    __slots__ = ("connection", "counted", "done", "expected", "made", "moved", "reply")

    def __init__(self, connection: Hashable, reply: Mapping[str, Any] | None) -> None:
        self.connection = connection
        self.reply = reply
        self.expected: set[str] = set()
        """The passes waited for."""
        self.done = asyncio.Event()
        """Set when the last of those ended."""
        self.counted: set[str] = set()
        """The passes that ended meanwhile: the stream's first status counts what they made."""
        self.made: set[str] = set()
        """Those of them that made their consumer."""
        self.moved = asyncio.Event()
        """Set when one of those waited for begins or ends."""


K = TypeVar("K")
V = TypeVar("V")


def _renew(entries: dict[K, V], key: K, value: V) -> None:
    """Set the entry and move it to the end, so the dict stays in time order."""
    entries.pop(key, None)
    entries[key] = value


def _forget_older(entries: dict[K, V], moment: float, when: Callable[[V], float]) -> None:
    """Drop the entries from before `moment`, oldest first (the dict is in time order)."""
    while entries:
        key, value = next(iter(entries.items()))
        if when(value) >= moment:
            return
        del entries[key]


class StreamArrivals:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._announced: dict[str, float] = {}
        # (connection, stream): (when, the creation's reply)
        self._replies: dict[tuple[Hashable, str], tuple[float, Mapping[str, Any]]] = {}
        self._passes: dict[str, set[ConsumerPass]] = {}
        self._ended: dict[str, tuple[str, float]] = {}  # consumer uid: (stream, when)
        self._ended_by_stream: dict[str, dict[str, float]] = {}  # stream: {uid: when}
        # stream: (the passes waited for, set when they ended, the passes that ended meanwhile,
        # set when one of those waited for begins or ends)
        self._gatherings: dict[str, Gathering] = {}
        self._last_moved = -math.inf  # when a consumer pass last began or ended, anywhere

    def announce(
        self, stream: str, connection: Hashable = None, reply: Mapping[str, Any] | None = None
    ) -> None:
        """The stream now exists in NATS: wake whoever waits for it. With the connection and the
        creation's reply, consumers on that connection take the reply for their look at it."""
        now = time.monotonic()
        _renew(self._announced, stream, now)
        _forget_older(self._announced, now - ANNOUNCED_FOR, lambda when: when)
        if reply is not None:
            _renew(self._replies, (connection, stream), (now, reply))
        _forget_older(self._replies, now - RECENT, lambda entry: entry[0])
        event = self._events.pop(stream, None)
        if event is not None:
            event.set()

    def forget(self, stream: str) -> None:
        """The stream's resource is being deleted: a consumer applied now waits for its next
        creation rather than look at once."""
        self._announced.pop(stream, None)

    def forget_reply(self, connection: Hashable, stream: str) -> None:
        """A later pass may have changed the stream: consumers look at it again."""
        self._replies.pop((connection, stream), None)
        gathering = self._gatherings.get(stream)
        if gathering is not None and gathering.connection == connection:
            gathering.reply = None

    def created_reply(self, connection: Hashable, stream: str) -> Mapping[str, Any] | None:
        """The reply to this process's creation of the stream on the connection, if recent or
        its handler is still gathering: a new consumer takes its config (the consumer limits)
        for a look at the stream."""
        entry = self._replies.get((connection, stream))
        if entry is not None and time.monotonic() - entry[0] <= RECENT:
            return entry[1]
        gathering = self._gatherings.get(stream)
        if gathering is not None and gathering.connection == connection:
            return gathering.reply
        return None

    async def wait(self, stream: str, timeout: float) -> bool:
        """Whether the stream was announced lately (or its handler is still gathering) or
        within the timeout. Streams are named without their connection, so True only means
        'look again', never 'it exists'."""
        if stream in self._gatherings:
            return True
        announced = self._announced.get(stream)
        if announced is not None and time.monotonic() - announced <= ANNOUNCED_FOR:
            return True
        # An event left by a timeout is reused by the next waiter and dropped by the next
        # announce, so there is at most one per stream name.
        event = self._events.setdefault(stream, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def begin(self, stream: str, uid: str) -> ConsumerPass:
        """A consumer's pass on this stream starts; `end` it whatever happens."""
        consumer_pass = ConsumerPass(stream, uid)
        self._passes.setdefault(stream, set()).add(consumer_pass)
        self._last_moved = time.monotonic()
        gathering = self._gatherings.get(stream)
        if gathering is not None and uid in gathering.expected:
            gathering.moved.set()
        return consumer_pass

    def end(self, consumer_pass: ConsumerPass, made: bool = False) -> bool:
        """The pass is over; `made` says whether it made its consumer. True when the stream's
        handler is gathering: the stream's first status counts it."""
        stream, now = consumer_pass.stream, time.monotonic()
        self._last_moved = now
        passes = self._passes.get(stream)
        if passes is not None:
            passes.discard(consumer_pass)
            if not passes:
                del self._passes[stream]
        earlier = self._ended.pop(consumer_pass.uid, None)
        if earlier is not None:
            self._forget_ended(consumer_pass.uid, earlier[0])
        self._ended[consumer_pass.uid] = (stream, now)
        self._ended_by_stream.setdefault(stream, {})[consumer_pass.uid] = now
        while self._ended:
            uid, (name, when) = next(iter(self._ended.items()))
            if now - when <= RECENT:
                break  # in the order they ended
            del self._ended[uid]
            self._forget_ended(uid, name)
        gathering = self._gatherings.get(stream)
        if gathering is None:
            return False
        gathering.counted.add(consumer_pass.uid)
        if made:
            gathering.made.add(consumer_pass.uid)
        gathering.expected.discard(consumer_pass.uid)
        gathering.moved.set()
        if not gathering.expected:
            gathering.done.set()
        return True

    async def created(
        self,
        stream: str,
        new_consumers: Callable[[], set[str]],
        timeout: float,
        start_within: float,
        first: Callable[[], Awaitable[object]] | None = None,
        stall: float = 0.5,
        connection: Hashable = None,
        reply: Mapping[str, Any] | None = None,
    ) -> int | None:
        """The stream was just made: announce it, let `first` run, then wait until the passes
        of the new consumers (uids, asked for after `first`) on it have ended, or the timeout
        passed; then for those announced meanwhile. Every pass on the stream that ends
        meanwhile, during `first` too, learns from `end` that this handler counts what it
        made. `first` is the wait for a burst of creations to end: the status write waits for
        it anyway, and the consumers applied in the burst are made meanwhile. A consumer whose
        pass has not begun is waited for while other consumer passes begin or end at least
        every `stall` seconds, for `start_within` at most; then no longer (module docstring).
        Answers how many consumers those passes made, to add to the creation's count (a pass
        ending later learns from `end` that it was not counted), or None when only a look at
        the stream can tell: a pass on it ended just before, or a same-named stream of another
        connection is gathering. `connection` and `reply` go to `announce`."""
        self.announce(stream, connection, reply)
        uncounted = bool(self._ended_on(stream))
        if stream in self._gatherings:
            return None if uncounted else 0
        gathering = Gathering(connection, reply)
        self._gatherings[stream] = gathering
        expected, done, counted, moved = (
            gathering.expected,
            gathering.done,
            gathering.counted,
            gathering.moved,
        )
        try:
            if first is not None:
                await first()
            ended = self._ended_on(stream)
            expected |= (new_consumers() | self._under_way(stream)) - ended - counted
            done.clear()  # set by the passes that ended during `first`
            if not expected:
                return None if uncounted else len(gathering.made)
            asked = set(expected)
            deadline = time.monotonic() + timeout
            while expected:
                remaining = deadline - time.monotonic()
                await self._until_begun(
                    stream, expected, moved, min(start_within, remaining), stall
                )
                expected &= self._under_way(stream)  # those not begun yet wait for a worker
                if expected:
                    await asyncio.wait_for(done.wait(), max(0.0, deadline - time.monotonic()))
                # Consumers applied just after those, whose watch events came meanwhile.
                later = new_consumers() - asked - counted - self._ended_on(stream)
                asked |= later
                expected |= later
                done.clear()
        except TimeoutError:
            logger.info("consumers of new stream %s still under way after %.1f s", stream, timeout)
        finally:
            if self._gatherings.get(stream) is gathering:
                del self._gatherings[stream]
        return None if uncounted else len(gathering.made)

    def _ended_on(self, stream: str) -> set[str]:
        """The consumers whose passes on the stream ended within RECENT seconds."""
        now = time.monotonic()
        ended = self._ended_by_stream.get(stream, {})
        return {uid for uid, when in ended.items() if now - when <= RECENT}

    def _forget_ended(self, uid: str, stream: str) -> None:
        ended = self._ended_by_stream.get(stream)
        if ended is not None:
            ended.pop(uid, None)
            if not ended:
                del self._ended_by_stream[stream]

    async def _until_begun(
        self, stream: str, expected: set[str], moved: asyncio.Event, most: float, stall: float
    ) -> None:
        """Until every expected pass has begun or ended, for `most` seconds at most, and no
        longer than `stall` seconds in which no consumer pass anywhere began or ended. Woken by
        its own passes only, and otherwise once per `stall`: a burst has thousands of passes
        and a hundred handlers waiting."""
        deadline = time.monotonic() + most
        while expected - self._under_way(stream):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            moved.clear()
            try:
                await asyncio.wait_for(moved.wait(), min(remaining, stall))
            except TimeoutError:
                if time.monotonic() - self._last_moved >= stall:
                    return

    def _under_way(self, stream: str) -> set[str]:
        return {consumer_pass.uid for consumer_pass in self._passes.get(stream, ())}
