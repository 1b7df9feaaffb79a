"""Drive asyncio code from Spark's synchronous read/write calls, one private loop per call.

Each call creates and closes its own event loop, so nothing asynchronous outlives the task
or leaks into a reused Python worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def iterate(factory: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Yield from an async iterator lazily; closing the generator closes the async side."""
    loop = asyncio.new_event_loop()
    source = factory()
    try:
        while True:
            try:
                item = loop.run_until_complete(source.__anext__())
            except StopAsyncIteration:
                return
            yield item
    finally:
        try:
            aclose = getattr(source, "aclose", None)
            if aclose is not None:
                loop.run_until_complete(aclose())
        finally:
            _close(loop)


def run(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one coroutine to completion on a fresh loop.

    Unlike `asyncio.run`, this leaves the thread's current event loop alone, so it is safe to
    call from code (tests, notebooks) that keeps its own loop for later.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(factory())
    finally:
        _close(loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    try:
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
