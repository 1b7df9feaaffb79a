"""Heap trimming: only when the C heap holds enough free memory, never without malloc_trim."""

import asyncio
import ctypes.util
import json
import platform
from collections.abc import AsyncIterator, Callable

import kopf
import pytest

from jetstream_operator.kopf_adaptations import COMPACT_BODIES
from jetstream_operator.memory import (
    Allocator,
    HeapTrimmer,
    compact_watch_event,
    glibc,
    shrink_tls_read_buffers,
)


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
            protocol = sslproto.SSLProtocol(loop, asyncio.Protocol(), context, None)  # type: ignore[arg-type]  # CPython accepts no waiter
            return len(protocol.get_buffer(-1))

        assert asyncio.run(buffer_size()) == 64 * 1024 < default
    finally:
        sslproto.SSLProtocol.max_size = default


async def test_every_resource_shares_the_operators_memo() -> None:
    """kopf copies the memo into each object's memory; ours hands out itself instead."""
    from kopf._cogs.structs.ephemera import AnyMemo
    from kopf._core.reactor.inventory import ResourceMemories

    from jetstream_operator.services import SharedMemo

    memo = SharedMemo()
    memo.registry = {}
    shared = AnyMemo(memo)
    memories = ResourceMemories()
    first = await memories.recall_memo({"metadata": {"uid": "a"}}, memobase=shared)
    second = await memories.recall_memo({"metadata": {"uid": "b"}}, memobase=shared)
    assert first is shared and second is shared
    plain = AnyMemo(kopf.Memo(registry={}))
    assert await memories.recall_memo({"metadata": {"uid": "c"}}, memobase=plain) is not plain


def test_watch_events_reach_kopf_without_managed_fields_and_with_shared_strings() -> None:
    line = json.dumps(
        {
            "type": "MODIFIED",
            "object": {
                "metadata": {
                    "name": "orders",
                    "uid": "u1",
                    "managedFields": [{"manager": "kopf", "fieldsV1": {"f:status": {}}}],
                },
                "spec": {"storage": "file"},
                "status": {"message": "m" * 100},
            },
        }
    ).encode()
    first, second = compact_watch_event(line), compact_watch_event(line)
    assert first == {
        "type": "MODIFIED",
        "object": {
            "metadata": {"name": "orders", "uid": "u1"},
            "spec": {"storage": "file"},
            "status": {"message": "m" * 100},
        },
    }
    assert first["object"]["spec"]["storage"] is second["object"]["spec"]["storage"]
    assert first["object"]["status"]["message"] is not second["object"]["status"]["message"]
    # Events without an object body (bookmarks, errors) pass as decoded.
    assert compact_watch_event(b'{"type": "ERROR", "object": {"code": 410}}') == {
        "type": "ERROR",
        "object": {"code": 410},
    }


async def test_kopf_decodes_its_watch_streams_and_listings_compactly_once_installed() -> None:
    """kopf's watch reader decodes each line with its module's `json.loads`, and its watcher
    lists through `fetching.fetch_objs`; if a kopf upgrade moves either, this fails rather
    than the operator silently keeping full bodies."""
    import inspect

    from kopf._cogs.clients import api, fetching, watching

    assert "json.loads(line" in inspect.getsource(api.stream)
    assert "fetching.fetch_objs(" in inspect.getsource(watching.continuous_watch)
    saved_json, saved_listing = api.json, fetching.fetch_objs  # type: ignore[attr-defined]  # not re-exported by kopf
    full = {"metadata": {"uid": "u1", "managedFields": [{}]}, "spec": {"a": "b"}}

    async def listing(**_: object) -> AsyncIterator[tuple[list[dict[str, object]], str]]:
        yield [json.loads(json.dumps(full))], "7"

    try:
        fetching.fetch_objs = listing  # type: ignore[assignment]
        assert COMPACT_BODIES.apply()
        assert COMPACT_BODIES.apply()  # twice wraps once
        line = '{"type": "ADDED", "object": {"metadata": {"uid": "u1", "managedFields": []}}}'
        assert api.json.loads(line) == {"type": "ADDED", "object": {"metadata": {"uid": "u1"}}}  # type: ignore[attr-defined]  # not re-exported by kopf
        wrapped: Callable[..., AsyncIterator[object]] = fetching.fetch_objs
        chunks = [chunk async for chunk in wrapped(logger=None)]
        assert chunks == [([{"metadata": {"uid": "u1"}, "spec": {"a": "b"}}], "7")]
    finally:
        api.json, fetching.fetch_objs = saved_json, saved_listing  # type: ignore[attr-defined]  # not re-exported by kopf
