"""Heap probe for operator_bench.py --heap-size: on PYTHONPATH it is imported by every Python
process at start-up, so the operator runs unchanged while its heap can be inspected.

With JSO_HEAP_PROBE_OUT set, SIGUSR1 starts tracemalloc (JSO_HEAP_PROBE_FRAMES frames a trace)
and each SIGUSR2 writes the traced heap by package and by file as JSON to <path>.<n>. Tracing
from start-up would make imports take minutes; started later, the trace holds what was allocated
since, which is what the benchmark wants (the cost of the resources applied after it).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import tracemalloc
from types import FrameType

PACKAGES = (
    "kopf",
    "jetstream_operator",
    "kubernetes",
    "aiohttp",
    "pydantic",
    "pydantic_core",
    "nats",
    "yaml",
)
"""Third-party and our packages; the standard library is never the owner (json, copy, asyncio
allocate on behalf of whoever called them)."""


def _owner(filename: str) -> str | None:
    """`package/file.py` when the file belongs to one of PACKAGES, else None."""
    parts = filename.replace("\\", "/").split("/")
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] in PACKAGES:
            return f"{parts[index]}/{'/'.join(parts[index + 1 :])}"
    return None


_dumps = 0


def _deep_size(value: object, seen: set[int]) -> int:
    """Bytes of a JSON-like value and everything in it, each object counted once."""
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(_deep_size(item, seen) for item in value)
    return size


def _registry_bodies() -> tuple[int, int]:
    """(bytes, count) of the bodies our registry keeps (TrackedResource.body). Allocation sites
    say who made an object, not who keeps it alive: kopf parses every body it receives
    (kopf/_cogs/clients/api.py), and our registry may be what holds it."""
    registry = sys.modules.get("jetstream_operator.handlers.registry")
    if registry is None:
        return 0, 0
    seen: set[int] = set()
    held = count = 0
    for obj in gc.get_objects():
        if isinstance(obj, registry.TrackedResource):
            count += 1
            held += _deep_size(obj.body, seen)
    return held, count


def _dump(_signum: int, _frame: FrameType | None) -> None:
    """Each allocation is charged to the innermost frame in a known package (so a dict that
    kopf builds through `copy` counts as kopf's), else to `importlib` for module code and data
    loaded at import, else to `other`. Writes `<out>.<n>` for the n-th signal."""
    global _dumps
    _dumps += 1
    path = f"{os.environ['JSO_HEAP_PROBE_OUT']}.{_dumps}"
    snapshot = tracemalloc.take_snapshot()
    # Sorting the snapshot while tracing would trace (and slow) every step of it: stop, and
    # start again afterwards, so a later dump holds what was allocated after this one.
    frames = tracemalloc.get_traceback_limit()
    tracemalloc.stop()
    by_package: dict[str, int] = {}
    by_file: dict[str, int] = {}
    total = 0
    for trace in snapshot.traces:
        total += trace.size
        owner = None
        for frame in reversed(trace.traceback):  # innermost first
            owner = _owner(frame.filename)
            if owner is not None:
                break
        if owner is None:
            files = [frame.filename for frame in trace.traceback]
            owner = "importlib/" if any("importlib" in name for name in files) else "other/"
        package = owner.split("/", 1)[0]
        by_package[package] = by_package.get(package, 0) + trace.size
        by_file[owner] = by_file.get(owner, 0) + trace.size
    held, tracked = _registry_bodies()
    result = {
        "registry_bodies": held,
        "registry_resources": tracked,
        "total": total,
        "by_package": by_package,
        "by_file": by_file,
    }
    with open(path + ".tmp", "w") as out:
        json.dump(result, out)
    os.replace(path + ".tmp", path)
    tracemalloc.start(frames)


def _start(_signum: int, _frame: FrameType | None) -> None:
    tracemalloc.start(int(os.environ.get("JSO_HEAP_PROBE_FRAMES", "16")))


if os.environ.get("JSO_HEAP_PROBE_OUT"):
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _dump)


def _malloc_stats(_signum: int, _frame: FrameType | None) -> None:
    """Append pymalloc's arena statistics (`sys._debugmallocstats`, written by C to stderr) to
    JSO_MALLOC_STATS: how much of the RSS is arenas held by a few live objects."""
    path = os.environ["JSO_MALLOC_STATS"]
    saved = os.dup(2)
    try:
        with open(path, "a") as out:
            out.write(f"--- {os.getpid()}\n")
            out.flush()
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


if os.environ.get("JSO_MALLOC_STATS") and not os.environ.get("JSO_HEAP_PROBE_OUT"):
    signal.signal(signal.SIGUSR1, _malloc_stats)
