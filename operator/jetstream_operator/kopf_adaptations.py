"""Every use of kopf's private internals, in one place, pinned to the kopf it was written for.

kopf has no hooks for what these change: its per-resource worker, its patch's remainder, its
decoding of watch streams and listings, its handling of listed namespaces. Each adaptation
replaces or wraps one of its private functions, so a kopf release may move or re-purpose them
while keeping their names; an adaptation whose shape still fits could then drop an event kopf
needed. So each one applies only on the kopf minor it was written for (`KOPF_WRITTEN_FOR`,
also pyproject's pin) and when what it replaces has the shape it expects; otherwise kopf keeps
its own code, one WARNING says what the operator loses, and the gauge
`jetstream_operator_kopf_adaptation_applied` says 0. The operator is correct without any of
them; they save memory and CPU, and `notice_late_namespaces` serves a namespace sooner.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import metadata
from types import SimpleNamespace
from typing import Any

from .memory import compact_body, compact_watch_event
from .metrics import KOPF_ADAPTATION_APPLIED
from .patching import JsonPatchOps, changed_fields_diff
from .queueing import NamespaceFairQueue, observing_processor

KOPF_WRITTEN_FOR = "1.45"
"""The kopf minor (major.minor) whose internals these adaptations were written for and tested
against; pyproject.toml pins kopf to it."""

log = logging.getLogger(__name__)


def running_kopf_version() -> str:
    """The installed kopf's version, as its package metadata says."""
    return metadata.version("kopf")


def minor_of(version: str) -> str:
    """'1.45.2' -> '1.45'."""
    return ".".join(version.split(".")[:2])


def parameters(function: Any) -> set[str]:
    """The names a function takes, or none when it is not a function."""
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


def names_used_by(function: Any) -> set[str]:
    """The global and attribute names a function's code looks up when it runs: a replaced
    module attribute reaches its callers only if they look it up by that name."""
    code = getattr(function, "__code__", None)
    return set(code.co_names) if code is not None else set()


def mark(function: Any, adaptation: str) -> None:
    """Label a replacement with its adaptation, so that applying it again changes nothing."""
    function.kopf_adaptation = adaptation


def is_marked(function: Any, adaptation: str) -> bool:
    return bool(getattr(function, "kopf_adaptation", None) == adaptation)


@dataclass(frozen=True)
class Adaptation:
    """One change to kopf's internals, and what the operator loses without it."""

    name: str
    without_it: str
    misfit: Callable[[], str | None]
    """Why kopf's internals are not what this was written for, or None when they are."""
    in_place: Callable[[], bool]
    """Whether it is applied already (applying twice changes nothing)."""
    install: Callable[[], None]

    def apply(self) -> bool:
        """Apply it where the running kopf is the one it was written for, and report whether
        it is applied: the gauge, and a WARNING when it is not."""
        try:
            applied = self.in_place()
            misfit = None if applied else self.misfit()
        except (ImportError, AttributeError) as error:  # a module or function kopf moved
            applied, misfit = False, f"kopf's internals moved: {error}"
        if not applied:
            version = running_kopf_version()
            reasons = [misfit] if misfit else []
            if minor_of(version) != KOPF_WRITTEN_FOR:
                reasons.insert(0, f"written for kopf {KOPF_WRITTEN_FOR}")
            if reasons:
                log.warning(
                    "kopf adaptation %s not applied on kopf %s (%s): the operator works without "
                    "it, with %s",
                    self.name,
                    version,
                    "; ".join(reasons),
                    self.without_it,
                )
            else:
                self.install()
                applied = True
        KOPF_ADAPTATION_APPLIED.labels(self.name).set(1 if applied else 0)
        return applied


# -- kopf's per-resource worker: queueing.observing_processor around its processor ----------


def _worker_misfit() -> str | None:
    from kopf._core.reactor import queueing

    if not {"processor", "streams", "key"} <= parameters(queueing.worker):
        return "kopf's queueing.worker takes other arguments"
    if getattr(getattr(queueing, "EOS", None), "token", None) is None:
        return "kopf's queueing has no EOS.token to end a worker with"
    if "worker" not in names_used_by(queueing.watcher):
        return "kopf's queueing.watcher does not start workers by the name queueing.worker"
    return None


def _worker_in_place() -> bool:
    from kopf._core.reactor import queueing

    return is_marked(queueing.worker, STREAMLINED_WORKERS.name)


def _install_worker() -> None:
    from kopf._core.reactor import queueing

    original: Any = queueing.worker  # fed the wrapped processor, as kopf passes it on
    end_of_stream = queueing.EOS.token

    async def worker(*, processor: Any, streams: dict[Any, Any], key: Any, **kwargs: Any) -> None:
        resource = key[0] if isinstance(key, tuple) and key else None  # kopf's (resource, uid)

        def end_after_deletion() -> None:
            if key in streams:  # it ends the way kopf ends every worker at shutdown
                streams[key].backlog.put_nowait(end_of_stream)

        process = observing_processor(processor, resource, end_after_deletion)
        await original(processor=process, streams=streams, key=key, **kwargs)

    mark(worker, STREAMLINED_WORKERS.name)
    queueing.worker = worker


STREAMLINED_WORKERS = Adaptation(
    "streamline_workers",
    "more CPU per event (the registries read events through kopf's event handlers, and the "
    "echoes of kopf's own status writes go through kopf) and slower deletions under a worker "
    "limit (a deleted resource holds its worker's place for kopf's 5 s consistency wait)",
    _worker_misfit,
    _worker_in_place,
    _install_worker,
)


# -- kopf's Patch.as_json_patch: patching.changed_fields_diff, and nothing when nothing is left


def _patch_misfit() -> str | None:
    from kopf._cogs.structs import patches

    patch_class: Any = patches.Patch
    if not callable(getattr(patch_class, "_apply_patch", None)):
        return "kopf's Patch has no _apply_patch"
    if not isinstance(getattr(patch_class, "fns", None), property):
        return "kopf's Patch keeps no fns"
    if "_original" not in names_used_by(patch_class.__init__):
        return "kopf's Patch keeps no _original body"
    if list(inspect.signature(patch_class.as_json_patch).parameters) != ["self", "body"]:
        return "kopf's Patch.as_json_patch takes other arguments"
    return None


def _patch_in_place() -> bool:
    from kopf._cogs.structs import patches

    return is_marked(patches.Patch.as_json_patch, LIGHTER_PATCH_REMAINDERS.name)


def _install_patch() -> None:
    from kopf._cogs.structs import patches

    patch_class: Any = patches.Patch
    original = patch_class.as_json_patch

    def as_json_patch(self: Any, body: Any = None) -> JsonPatchOps:
        if not self:
            return []
        base = body if body is not None else self._original
        if base is None:
            return original(self, body)  # type: ignore[no-any-return]  # kopf's own error
        as_is = dict(base)
        to_be = copy.deepcopy(as_is)
        self._apply_patch(to_be, (), dict(self))
        for fn in self.fns:
            fn(to_be)
        return changed_fields_diff(as_is, to_be)

    mark(as_json_patch, LIGHTER_PATCH_REMAINDERS.name)
    patch_class.as_json_patch = as_json_patch


LIGHTER_PATCH_REMAINDERS = Adaptation(
    "lighten_patch_remainders",
    "more CPU per patch (kopf deep-copies every patched body, and diffs all of it)",
    _patch_misfit,
    _patch_in_place,
    _install_patch,
)


# -- kopf's watch-stream decoding and listings: memory.compact_watch_event, compact_body ------


def _bodies_misfit() -> str | None:
    import json

    from kopf._cogs.clients import api, fetching, watching

    decoder = getattr(api, "json", None)
    if decoder is not json and not isinstance(decoder, SimpleNamespace):
        return "kopf's clients.api does not decode with its module's json"
    if not {"json", "loads"} <= names_used_by(api.stream):
        return "kopf's api.stream does not decode with json.loads"
    if not callable(getattr(fetching, "fetch_objs", None)):
        return "kopf's clients.fetching has no fetch_objs"
    if not {"fetching", "fetch_objs"} <= names_used_by(watching.continuous_watch):
        return "kopf's continuous_watch does not list through fetching.fetch_objs"
    return None


def _bodies_in_place() -> bool:
    from kopf._cogs.clients import api, fetching

    decoder = getattr(api, "json", None)
    decoding = getattr(decoder, "loads", None) is compact_watch_event
    return decoding and is_marked(fetching.fetch_objs, COMPACT_BODIES.name)


def _install_bodies() -> None:
    from kopf._cogs.clients import api, fetching

    api.json = SimpleNamespace(loads=compact_watch_event)  # type: ignore[assignment,attr-defined]
    listing = fetching.fetch_objs
    if is_marked(listing, COMPACT_BODIES.name):
        return

    async def fetch_objs(*args: Any, **kwargs: Any) -> AsyncIterator[tuple[list[Any], str]]:
        async for items, version in listing(*args, **kwargs):
            yield [compact_body(item) for item in items], version

    mark(fetch_objs, COMPACT_BODIES.name)
    fetching.fetch_objs = fetch_objs


COMPACT_BODIES = Adaptation(
    "compact_kopf_bodies",
    "more memory per object (kopf holds every body it has not handled yet with its "
    "managedFields and its own copy of every field name)",
    _bodies_misfit,
    _bodies_in_place,
    _install_bodies,
)


# -- kopf's namespace observer: the namespaces of its watcher's own listings -----------------


def _namespaces_misfit() -> str | None:
    from kopf._core.reactor import observation

    processing = observation.process_discovered_namespace_event
    if not {"raw_event", "namespaces", "insights"} <= parameters(processing):
        return "kopf's process_discovered_namespace_event takes other arguments"
    if not {"raw_events", "namespaces", "insights"} <= parameters(observation.revise_namespaces):
        return "kopf's revise_namespaces takes other arguments"
    if processing.__name__ not in names_used_by(observation.namespace_observer):
        return "kopf's namespace_observer does not process events by that name"
    return None


def _namespaces_in_place() -> bool:
    from kopf._core.reactor import observation

    return is_marked(observation.process_discovered_namespace_event, LATE_NAMESPACES.name)


def _install_namespaces() -> None:
    from kopf._core.reactor import observation

    original = observation.process_discovered_namespace_event

    async def process_discovered_namespace_event(
        *, raw_event: Any, namespaces: Any, insights: Any, **kwargs: Any
    ) -> None:
        if raw_event.get("type") is not None:
            await original(raw_event=raw_event, namespaces=namespaces, insights=insights, **kwargs)
            return
        # A namespace of a listing (type None): kopf's own ignores them as known from its first
        # listing, but the watcher lists again before it watches, from the newer listing.
        async with insights.revised:
            before = set(insights.namespaces)
            observation.revise_namespaces(
                raw_events=[raw_event], insights=insights, namespaces=namespaces
            )
            if insights.namespaces != before:
                insights.revised.notify_all()

    mark(process_discovered_namespace_event, LATE_NAMESPACES.name)
    observation.process_discovered_namespace_event = process_discovered_namespace_event


LATE_NAMESPACES = Adaptation(
    "notice_late_namespaces",
    "a namespace created while kopf starts its namespace watch, or while it lists namespaces "
    "again after the watch expired, served only after the operator's restart",
    _namespaces_misfit,
    _namespaces_in_place,
    _install_namespaces,
)
"""kopf lists namespaces once (observation.namespace_observer), then starts a watcher, whose
watch stream lists them again and watches from that second listing's version. The watcher's
processor drops listed namespaces (type None) as known from the first listing, so a namespace
created between the two listings, or while the stream lists again after a 410, is in no event
kopf acts on; the operator never served it until restarted. This adds such namespaces as kopf
adds those of its first listing."""


# -- kopf's scheduler of workers: its waiting workers served a namespace at a time ----------


def _fair_misfit() -> str | None:
    from kopf._cogs.aiokits import aiotasks
    from kopf._core.reactor import queueing

    if not {"aiotasks", "Scheduler"} <= names_used_by(queueing.watcher):
        return "kopf's queueing.watcher does not make its scheduler as aiotasks.Scheduler"
    scheduler: Any = getattr(aiotasks, "Scheduler", None)
    if "_pending_coros" not in names_used_by(getattr(scheduler, "__init__", None)):
        return "kopf's aiotasks.Scheduler keeps no _pending_coros queue"
    if "_pending_coros" not in names_used_by(getattr(scheduler, "_can_spawn", None)):
        return "kopf's aiotasks.Scheduler does not spawn from _pending_coros"
    if not {"coro", "name"} <= set(getattr(aiotasks, "SchedulerJob", SimpleNamespace())._fields):
        return "kopf's aiotasks.SchedulerJob holds no coro"
    if not {"streams", "key"} <= parameters(queueing.worker):
        return "kopf's queueing.worker takes other arguments"
    return None


def _fair_in_place() -> bool:
    from kopf._core.reactor import queueing

    return is_marked(getattr(queueing, "aiotasks", None), FAIR_WORKERS.name)


def job_namespace(job: Any) -> str:
    """The namespace of the resource a waiting worker is for: the first event in its backlog,
    read from the arguments of the worker's coroutine, not started yet (kopf's watcher puts
    the event in before it spawns the worker). "" where it cannot tell."""
    frame = getattr(getattr(job, "coro", None), "cr_frame", None)
    arguments = frame.f_locals if frame is not None else {}
    streams, key = arguments.get("streams"), arguments.get("key")
    stream = streams.get(key) if isinstance(streams, dict) else None
    waiting = getattr(getattr(stream, "backlog", None), "_queue", None)
    event = waiting[0] if waiting else None
    if not isinstance(event, dict):
        return ""
    return str(((event.get("object") or {}).get("metadata") or {}).get("namespace") or "")


def _install_fair() -> None:
    from kopf._core.reactor import queueing

    watchers: Any = queueing  # the module whose watcher makes the scheduler
    original: Any = watchers.aiotasks

    class NamespaceFairScheduler(original.Scheduler):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            # Before its spawner task first runs: it reads the queue by attribute.
            self._pending_coros = NamespaceFairQueue(job_namespace)

    names = {name: getattr(original, name) for name in dir(original) if not name.startswith("__")}
    replacement = SimpleNamespace(**{**names, "Scheduler": NamespaceFairScheduler})
    mark(replacement, FAIR_WORKERS.name)
    watchers.aiotasks = replacement


FAIR_WORKERS = Adaptation(
    "share_workers_by_namespace",
    "fairness between namespaces under the worker limit (kopf starts waiting workers in the "
    "order their first events came, so a burst in one namespace holds back the others)",
    _fair_misfit,
    _fair_in_place,
    _install_fair,
)


ADAPTATIONS = (
    STREAMLINED_WORKERS,
    LIGHTER_PATCH_REMAINDERS,
    COMPACT_BODIES,
    LATE_NAMESPACES,
    FAIR_WORKERS,
)


def adapt_kopf() -> dict[str, bool]:
    """Apply every adaptation that fits the running kopf; whether each is applied, by name."""
    return {adaptation.name: adaptation.apply() for adaptation in ADAPTATIONS}
