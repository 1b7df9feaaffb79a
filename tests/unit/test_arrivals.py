"""A consumer applied with its stream waits for the stream's creation in this process, and the
stream's handler waits a moment for the consumers on their way, so its first status counts
those they made without a look at the stream."""

import asyncio
import time

import pytest

from jetstream_operator.handlers import arrivals as arrivals_module
from jetstream_operator.handlers.arrivals import StreamArrivals


async def test_a_waiter_wakes_when_the_stream_is_announced() -> None:
    arrivals = StreamArrivals()
    waiting = asyncio.create_task(arrivals.wait("ORDERS", timeout=5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    arrivals.announce("ORDERS")
    assert await asyncio.wait_for(waiting, 1) is True


async def test_a_recent_announcement_counts_and_others_time_out() -> None:
    arrivals = StreamArrivals()
    arrivals.announce("ORDERS")  # created just before the consumer looked
    assert await arrivals.wait("ORDERS", timeout=0.01) is True
    assert await arrivals.wait("OTHER", timeout=0.01) is False
    # A timed-out wait leaves nothing that would wake the next waiter early.
    second = asyncio.create_task(arrivals.wait("OTHER", timeout=5))
    await asyncio.sleep(0.01)
    assert not second.done()
    arrivals.announce("OTHER")
    assert await asyncio.wait_for(second, 1) is True


async def consumer_pass(
    arrivals: StreamArrivals, stream: str, uid: str, made: list[str], start: float = 0.0
) -> bool:
    """A consumer's pass as the operator runs it: (start,) wait for the stream, make the
    consumer, end; the answer says whether the stream's first status counts it."""
    await asyncio.sleep(start)
    under_way = arrivals.begin(stream, uid)
    try:
        assert await arrivals.wait(stream, timeout=5)
        await asyncio.sleep(0.01)  # the consumer's creation in NATS
        made.append(uid)
    finally:
        counted = arrivals.end(under_way, uid in made)
    return counted


async def test_the_new_stream_waits_for_passes_under_way_and_those_on_their_way() -> None:
    arrivals = StreamArrivals()
    made: list[str] = []
    waiting = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "a", made))
    coming = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "b", made, start=0.05))
    await asyncio.sleep(0.01)  # "a" waits for the stream; "b" is known, its pass not begun
    assert await arrivals.created("ORDERS", lambda: {"b"}, timeout=5, start_within=1) == 2
    assert sorted(made) == ["a", "b"]  # both made before the stream's first status
    assert await waiting is True and await coming is True  # neither writes the count itself


async def test_a_pass_ending_after_the_timeout_counts_itself() -> None:
    arrivals = StreamArrivals()
    made: list[str] = []
    late = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "late", made, start=0.1))
    assert await arrivals.created("ORDERS", lambda: {"late"}, timeout=0.01, start_within=5) == 0
    assert made == []
    assert await late is False  # nobody counted it: it writes the stream's count itself


async def test_a_pass_that_ended_before_the_stream_was_made_is_not_waited_for() -> None:
    """Its consumer's status is not yet seen, but its pass is over: a look counts what it
    made, and nothing waits for a pass that will not come."""
    arrivals = StreamArrivals()
    arrivals.end(arrivals.begin("ORDERS", "early"))
    assert (
        await asyncio.wait_for(
            arrivals.created("ORDERS", lambda: {"early"}, timeout=5, start_within=5), 1
        )
        is None
    )


async def test_nothing_to_wait_for_needs_no_second_look() -> None:
    arrivals = StreamArrivals()
    assert await arrivals.created("ORDERS", lambda: set(), timeout=5, start_within=5) == 0
    assert arrivals.end(arrivals.begin("ORDERS", "after")) is False


async def test_passes_on_other_streams_do_not_end_the_wait() -> None:
    arrivals = StreamArrivals()
    made: list[str] = []
    gathering = asyncio.create_task(
        arrivals.created("ORDERS", lambda: {"mine"}, timeout=5, start_within=5)
    )
    await asyncio.sleep(0.01)
    assert arrivals.end(arrivals.begin("OTHER", "mine")) is False
    assert not gathering.done()
    assert await consumer_pass(arrivals, "ORDERS", "mine", made) is True
    assert await gathering == 1


async def test_a_consumer_queued_behind_others_is_not_waited_for_past_its_start() -> None:
    """Under a worker limit its pass may wait for this very handler's worker: the stream stops
    waiting for it once `start_within` passed, but still for a pass that did begin."""
    arrivals = StreamArrivals()
    made: list[str] = []
    begun = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "begun", made))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    gathering = arrivals.created(
        "ORDERS", lambda: {"queued", "begun"}, timeout=5, start_within=0.05
    )
    assert await gathering == 1
    assert loop.time() - started < 1
    assert made == ["begun"] and await begun is True


async def test_a_queued_consumer_is_waited_for_while_the_queue_moves() -> None:
    """Its pass starts well after the stall, but other consumers' passes keep starting and
    ending meanwhile (its turn under the worker limit is coming): it is counted."""
    arrivals = StreamArrivals()
    made: list[str] = []
    arrivals.announce("OTHER")
    others = [
        asyncio.create_task(consumer_pass(arrivals, "OTHER", f"o{i}", made, start=0.03 * i))
        for i in range(10)
    ]
    queued = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "queued", made, start=0.3))
    gathering = arrivals.created("ORDERS", lambda: {"queued"}, timeout=5, start_within=2, stall=0.1)
    assert await gathering == 1
    assert "queued" in made and await queued is True  # counted by the stream's first status
    await asyncio.gather(*others)


async def test_a_consumer_announced_while_the_first_is_waited_for_is_counted_too() -> None:
    """A file holding a stream and then two consumers: the second's watch event can come while
    the stream's handler waits for the first's pass. It is waited for as well."""
    arrivals = StreamArrivals()
    made: list[str] = []
    known = {"first"}
    first = asyncio.create_task(consumer_pass(arrivals, "ORDERS", "first", made, start=0.02))

    async def second_arrives() -> bool:
        await asyncio.sleep(0.01)
        known.add("second")  # the registry learns of it; its pass starts a moment later
        return await consumer_pass(arrivals, "ORDERS", "second", made, start=0.05)

    second = asyncio.create_task(second_arrives())
    gathering = arrivals.created("ORDERS", lambda: set(known), timeout=5, start_within=1)
    assert await gathering == 2
    assert sorted(made) == ["first", "second"]  # both made before the stream's first status
    assert await first is True and await second is True  # neither writes the count itself


async def test_a_stuck_queue_is_not_waited_for() -> None:
    """No consumer pass starts or ends anywhere (their workers may all wait for streams queued
    behind this handler): the stream's handler stops waiting after the stall, not start_within."""
    arrivals = StreamArrivals()
    loop = asyncio.get_running_loop()
    started = loop.time()
    gathering = arrivals.created("ORDERS", lambda: {"queued"}, timeout=5, start_within=3, stall=0.1)
    assert await gathering == 0
    assert 0.1 <= loop.time() - started < 1.0


async def test_passes_ending_while_a_burst_is_waited_out_are_counted() -> None:
    """During a burst of creations the stream's handler waits it out before its first status
    (`first`): a consumer made meanwhile is counted there, and writes no count itself."""
    arrivals = StreamArrivals()
    made: list[str] = []
    burst_over = asyncio.Event()
    gathering = asyncio.create_task(
        arrivals.created(
            "ORDERS", lambda: {"during"}, timeout=5, start_within=0.05, first=burst_over.wait
        )
    )
    assert await consumer_pass(arrivals, "ORDERS", "during", made, start=0.01) is True
    await asyncio.sleep(0.05)
    assert not gathering.done()  # the burst goes on
    burst_over.set()
    assert await asyncio.wait_for(gathering, 1) == 1  # "during" made its consumer


async def test_a_pass_counted_during_a_long_burst_is_still_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst can outlast RECENT: the pass that ended early in it is no longer among the
    recent ones, and its consumer's status is already seen, but the stream's handler was told
    to count it, so it does."""
    monkeypatch.setattr(arrivals_module, "RECENT", 0.05)
    arrivals = StreamArrivals()
    made: list[str] = []

    async def long_burst() -> None:
        assert await consumer_pass(arrivals, "ORDERS", "early", made) is True
        await asyncio.sleep(0.2)

    gathering = arrivals.created(
        "ORDERS", lambda: set(), timeout=5, start_within=0.05, first=long_burst
    )
    assert await gathering == 1


def test_a_creation_reply_serves_consumers_of_the_same_connection_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer takes the stream's creation reply for its look at the stream, but only on
    the connection it was made on, and only while it is recent."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    arrivals = StreamArrivals()
    reply = {"config": {"name": "ORDERS", "consumer_limits": {"max_ack_pending": 5}}}
    arrivals.announce("ORDERS", None, reply)  # the default connection
    arrivals.announce("OTHER")  # announced without a reply
    assert arrivals.created_reply(None, "ORDERS") is reply
    assert arrivals.created_reply(("team", "east"), "ORDERS") is None
    assert arrivals.created_reply(None, "OTHER") is None
    now[0] += arrivals_module.RECENT / 2
    arrivals.announce("LATER", ("team", "east"), {"config": {"name": "LATER"}})
    now[0] += arrivals_module.RECENT / 2 + 0.1
    assert arrivals.created_reply(None, "ORDERS") is None
    assert arrivals.created_reply(("team", "east"), "LATER") is not None
    arrivals.announce("NEXT", None, {"config": {"name": "NEXT"}})  # forgets the expired
    assert (None, "ORDERS") not in arrivals._replies
    arrivals.forget_reply(None, "NEXT")  # a later pass on the stream may have changed it
    assert arrivals.created_reply(None, "NEXT") is None


def test_what_is_remembered_of_ended_passes_and_announcements_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of passes end in a burst: each is remembered for RECENT seconds, per stream,
    and then forgotten, so neither memory nor the look-ups grow with the operator's age."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    arrivals = StreamArrivals()
    for index in range(100):
        arrivals.announce(f"S{index}")
        arrivals.end(arrivals.begin(f"S{index}", f"c{index}"))
    arrivals.end(arrivals.begin("S0", "c0"))  # the same consumer's second pass, later
    assert arrivals._ended_on("S0") == {"c0"} and arrivals._ended_on("S1") == {"c1"}
    now[0] += arrivals_module.RECENT + 1
    arrivals.announce("LAST")
    arrivals.end(arrivals.begin("LAST", "last"))
    assert arrivals._ended_on("S1") == set()
    assert set(arrivals._ended_by_stream) == {"LAST"}
    now[0] += arrivals_module.ANNOUNCED_FOR - arrivals_module.RECENT
    arrivals.announce("NEXT")
    assert set(arrivals._announced) == {"LAST", "NEXT"}


async def test_a_pass_that_made_nothing_is_counted_but_adds_nothing() -> None:
    """A consumer the server refused, or one already there: its pass is over and counted (it
    writes no count itself), and the stream's first status shows only what was made."""
    arrivals = StreamArrivals()
    gathering = asyncio.create_task(
        arrivals.created("ORDERS", lambda: {"made", "refused"}, timeout=5, start_within=1)
    )
    await asyncio.sleep(0.01)
    assert arrivals.end(arrivals.begin("ORDERS", "refused"), made=False) is True
    assert arrivals.end(arrivals.begin("ORDERS", "made"), made=True) is True
    assert await asyncio.wait_for(gathering, 1) == 1


async def test_a_stream_waiting_out_a_long_burst_stays_announced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a worker limit a consumer's pass may begin only when the burst ends, more than
    RECENT seconds after its stream was made. The stream's handler is still waiting for it
    then, so the announcement and the reply hold: the consumer neither waits out its timeout
    (a minute, while no Stream resource has a status yet) nor looks at the stream, even
    when the burst outlasts ANNOUNCED_FOR too."""
    monkeypatch.setattr(arrivals_module, "RECENT", 0.05)
    monkeypatch.setattr(arrivals_module, "ANNOUNCED_FOR", 0.05)
    arrivals = StreamArrivals()
    reply = {"config": {"name": "ORDERS"}}
    burst_over = asyncio.Event()
    gathering = asyncio.create_task(
        arrivals.created(
            "ORDERS",
            lambda: {"queued"},
            timeout=5,
            start_within=1,
            first=burst_over.wait,
            connection=("team", "east"),
            reply=reply,
        )
    )
    await asyncio.sleep(0.1)  # longer than RECENT
    assert arrivals.created_reply(("team", "east"), "ORDERS") is reply
    assert arrivals.created_reply(None, "ORDERS") is None  # another connection's stream
    burst_over.set()
    made: list[str] = []
    started = time.monotonic()
    assert await consumer_pass(arrivals, "ORDERS", "queued", made) is True
    assert time.monotonic() - started < 1.0
    assert await asyncio.wait_for(gathering, 1) == 1
    # The handler is done: the reply is old, so a later consumer looks at the stream.
    assert arrivals.created_reply(("team", "east"), "ORDERS") is None


async def test_a_later_pass_on_a_gathering_stream_drops_its_reply() -> None:
    arrivals = StreamArrivals()
    reply = {"config": {"name": "ORDERS"}}
    gathering = asyncio.create_task(
        arrivals.created("ORDERS", lambda: {"c"}, timeout=5, start_within=1, reply=reply)
    )
    await asyncio.sleep(0.01)
    arrivals._replies.clear()  # as when RECENT has passed
    assert arrivals.created_reply(None, "ORDERS") is reply
    arrivals.forget_reply(None, "ORDERS")
    assert arrivals.created_reply(None, "ORDERS") is None
    arrivals.end(arrivals.begin("ORDERS", "c"))
    await asyncio.wait_for(gathering, 1)


async def test_an_announcement_counts_as_long_as_a_consumer_would_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer whose pass begins late, after its stream's handler stopped waiting for it
    but before the stream reports a status, looks at once instead of waiting a minute for a
    stream already made; once the stream's resource is being deleted, it waits again."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    arrivals = StreamArrivals()
    arrivals.announce("ORDERS")
    now[0] += arrivals_module.ANNOUNCED_FOR - 1
    assert await arrivals.wait("ORDERS", timeout=5) is True
    arrivals.forget("ORDERS")
    monkeypatch.undo()  # asyncio's timeout needs the real clock
    assert await arrivals.wait("ORDERS", timeout=0.01) is False
    arrivals.announce("ORDERS")
    assert await arrivals.wait("ORDERS", timeout=0.01) is True
