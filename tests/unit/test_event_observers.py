"""The registries see every watch event of their kinds: from kopf's workers when the worker is
streamlined, otherwise from kopf's own event handlers, which `serve_events` then registers."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from jetstream_operator import GROUP, VERSION, main, wiring
from jetstream_operator.handlers.registry import ResourceRegistry
from jetstream_operator.reconcile.backed import STREAM_BACKED


@pytest.fixture
def registry() -> Iterator[kopf.OperatorRegistry]:
    """A fresh default registry for what `serve_events` registers, the operator's restored."""
    original = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    kopf.set_default_registry(fresh)
    yield fresh
    kopf.set_default_registry(original)


def event_handlers(registry: kopf.OperatorRegistry) -> dict[str, Any]:
    return {handler.id: handler for handler in registry._watching.get_all_handlers()}


def shared_memo() -> Any:
    watchers = SimpleNamespace(observed=lambda tracked: None)
    return SimpleNamespace(
        backed={kind.resource.kind: ResourceRegistry() for kind in STREAM_BACKED},
        consumers=ResourceRegistry(),
        connection_watches=None,
        watchers=watchers,
    )


def test_streamlined_workers_leave_kopf_no_event_handlers(registry: kopf.OperatorRegistry) -> None:
    main.serve_events(by_workers=True)
    assert event_handlers(registry) == {}


async def test_otherwise_kopfs_event_handlers_keep_every_registry_current(
    registry: kopf.OperatorRegistry,
) -> None:
    main.serve_events(by_workers=False)
    handlers = event_handlers(registry)
    plurals = [kind.resource.plural for kind in STREAM_BACKED] + ["consumers"]
    assert sorted(handlers) == sorted(f"remember_{plural}" for plural in plurals)
    memo = shared_memo()
    for plural in plurals:
        body = {"metadata": {"uid": f"uid-{plural}", "name": "a", "namespace": "ns"}, "spec": {}}
        resource = kopf.Resource(GROUP, VERSION, plural)
        await handlers[f"remember_{plural}"].fn(
            event={"type": "ADDED", "object": body}, memo=memo, resource=resource
        )
        assert wiring.observed(memo)[plural].get(f"uid-{plural}") is not None, plural
