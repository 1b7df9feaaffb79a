"""A consumer applied with its stream waits for the stream's creation in this process."""

import asyncio

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
