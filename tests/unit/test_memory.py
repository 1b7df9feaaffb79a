"""Heap trimming: only when the C heap holds enough free memory, never without malloc_trim."""

import asyncio
import ctypes.util
import platform

import pytest

from jetstream_operator.memory import Allocator, HeapTrimmer, glibc, shrink_tls_read_buffers


class FakeHeap:
    def __init__(self, free: int) -> None:
        self.free = free
        self.trims = 0

    def trim(self) -> int:
        self.trims += 1
        self.free = 0
        return 1

    def free_bytes(self) -> int:
        return self.free


def test_trims_only_when_enough_is_free() -> None:
    heap = FakeHeap(free=1000)
    trimmer = HeapTrimmer(Allocator(heap.trim, heap.free_bytes), min_free=4096)
    assert not trimmer.trim_if_worth_it()
    heap.free = 4096
    assert trimmer.trim_if_worth_it()
    assert not trimmer.trim_if_worth_it()  # nothing left to give back
    assert heap.trims == 1 and trimmer.trims == 1


def test_trims_every_time_when_the_free_size_is_unknown() -> None:
    heap = FakeHeap(free=0)
    trimmer = HeapTrimmer(Allocator(heap.trim, None), min_free=4096)
    assert trimmer.trim_if_worth_it() and trimmer.trim_if_worth_it()
    assert heap.trims == 2


def test_without_malloc_trim_it_does_nothing_and_its_task_ends() -> None:
    heap = FakeHeap(free=1 << 30)
    trimmer = HeapTrimmer(Allocator(None, heap.free_bytes), interval=0.0)
    assert not trimmer.available
    assert not trimmer.trim_if_worth_it()
    asyncio.run(asyncio.wait_for(trimmer.run(), timeout=1))


def test_the_task_checks_once_an_interval() -> None:
    heap = FakeHeap(free=1 << 20)
    trimmer = HeapTrimmer(Allocator(heap.trim, heap.free_bytes), interval=0.01, min_free=1)

    async def briefly() -> None:
        task = asyncio.create_task(trimmer.run())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(briefly())
    assert heap.trims == 1  # the first check trimmed; later ones found nothing free


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc only",
)
def test_glibc_gives_both_functions() -> None:
    assert ctypes.util.find_library("c")
    allocator = glibc()
    assert allocator.trim is not None and allocator.free_bytes is not None
    assert allocator.free_bytes() >= 0
    allocator.trim()


def test_tls_connections_get_the_smaller_read_buffer() -> None:
    import ssl
    from asyncio import sslproto

    default = sslproto.SSLProtocol.max_size
    try:
        assert shrink_tls_read_buffers(64 * 1024)

        async def buffer_size() -> int:
            loop = asyncio.get_running_loop()
            context = ssl.create_default_context()
            protocol = sslproto.SSLProtocol(loop, asyncio.Protocol(), context, None)
            return len(protocol.get_buffer(-1))

        assert asyncio.run(buffer_size()) == 64 * 1024 < default
    finally:
        sslproto.SSLProtocol.max_size = default
