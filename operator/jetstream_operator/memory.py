"""Give the C heap's free memory back to the operating system.

Converging thousands of resources allocates a lot at once: kopf opens a TLS connection per
concurrent API request (about 200 at 2,000 resources), each with asyncio's 256 KiB read buffer.
Once they close, glibc keeps the pages: its free chunks lie between live ones, so it can only
return the top of the heap by itself, and an idle operator with 2,000 resources held 60-100 MiB
of free heap in its RSS (mallinfo2). `malloc_trim(0)` also releases the free pages inside the
heap (madvise): idle RSS at 2,000 resources went from 146-205 to 110-113 MiB.

The rest keeps the Python heap small in the first place: smaller TLS read buffers, and
resource bodies as kopf and the registry hold them, without `managedFields` and with shared
strings (a burst's bodies set the RSS that stays afterwards); kopf_adaptations.compact_kopf_bodies
has kopf decode with `compact_watch_event`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

TRIM_INTERVAL = 10.0
"""Seconds between checks: pages freed by a pass come back within one interval of it."""
TRIM_MIN_FREE = 8 * 1024 * 1024
"""Free heap bytes below which a trim is not worth its walk over the heap."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True)
class Allocator:
    """The C library's trim and free-bytes functions; either may be missing (musl, macOS)."""

    trim: Callable[[], int] | None
    free_bytes: Callable[[], int] | None


def glibc() -> Allocator:
    """glibc's `malloc_trim` and `mallinfo2` (2.33+), or None for each that is absent."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return Allocator(None, None)
    trim_function = getattr(libc, "malloc_trim", None)
    info_function = getattr(libc, "mallinfo2", None)
    trim: Callable[[], int] | None = None
    free_bytes: Callable[[], int] | None = None
    if trim_function is not None:
        trim_function.argtypes = [ctypes.c_size_t]
        trim_function.restype = ctypes.c_int

        def trim() -> int:
            return int(trim_function(0))

    if info_function is not None:
        info_function.argtypes = []
        info_function.restype = _MallInfo2

        def free_bytes() -> int:
            return int(info_function().fordblks)

    return Allocator(trim, free_bytes)


class HeapTrimmer:
    """Trims the C heap every `interval` seconds when it holds at least `min_free` free bytes
    (always, when the C library cannot tell)."""

    def __init__(
        self,
        allocator: Allocator | None = None,
        interval: float = TRIM_INTERVAL,
        min_free: int = TRIM_MIN_FREE,
    ) -> None:
        self.allocator = allocator if allocator is not None else glibc()
        self.interval = interval
        self.min_free = min_free
        self.trims = 0

    @property
    def available(self) -> bool:
        return self.allocator.trim is not None

    def trim_if_worth_it(self) -> bool:
        """One check; True when it trimmed."""
        if self.allocator.trim is None:
            return False
        if self.allocator.free_bytes is not None:
            free = self.allocator.free_bytes()
            if free < self.min_free:
                return False
        else:
            free = -1
        started = time.perf_counter()
        self.allocator.trim()
        self.trims += 1
        logger.debug(
            "Trimmed the C heap (%d bytes free) in %.1f ms",
            free,
            (time.perf_counter() - started) * 1000,
        )
        return True

    async def run(self) -> None:
        """Check forever; cancelled at shutdown."""
        if not self.available:
            return
        while True:
            await asyncio.sleep(self.interval)
            self.trim_if_worth_it()


TLS_READ_BUFFER = 16 * 1024
"""Bytes asyncio reads from a TLS socket at once (its default is 256 KiB), one TLS record's
worth. Each TLS connection holds a buffer of this size for its lifetime, and kopf opens one
connection per concurrent API request (160-350 while 2,000 resources converge): about 98 KiB of
C heap per connection at 64 KiB, 48 KiB at 16 KiB. Smaller reads only cost more system calls on
large responses; convergence took as long."""


def shrink_tls_read_buffers(size: int = TLS_READ_BUFFER) -> bool:
    """Make asyncio's TLS connections read `size` bytes at a time; False when this Python's
    asyncio has no such setting (the buffer size is an implementation detail of 3.11+)."""
    from asyncio import sslproto

    protocol = getattr(sslproto, "SSLProtocol", None)
    if protocol is None or not isinstance(getattr(protocol, "max_size", None), int):
        return False
    protocol.max_size = size
    return True


SHARED_TEXT_LENGTH = 64
"""Strings up to this length are shared between bodies: field names, enum values, condition
types and reasons, timestamps. Longer ones (messages) are mostly unique."""


def shared(value: Any) -> Any:
    """A copy whose dict keys and short strings are interned. JSON decoding makes new string
    objects for every key of every body, so 2,000 kept bodies held 2,000 copies of each field
    name (about 60 per stream, half of a kept body's memory)."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= SHARED_TEXT_LENGTH else value
    if isinstance(value, Mapping):
        return {sys.intern(str(key)): shared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shared(item) for item in value]
    return value


def compact_body(body: Any) -> Any:
    """A resource as kopf's handlers need it: without `managedFields` (nearly half of each
    body; nothing in kopf or the operator reads them) and with shared strings."""
    if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
        body["metadata"].pop("managedFields", None)
        return shared(body)
    return body


def compact_watch_event(text: str | bytes) -> Any:
    """A watch event decoded, its object compacted (`compact_body`)."""
    event = json.loads(text)
    if isinstance(event, dict) and "object" in event:
        event["object"] = compact_body(event["object"])
    return event
