"""The decisions and the accounting every pass shares, whatever triggered it (kopf's events in
`envelope`, the drift watchers' in `repair`): the pause, metrics and Events."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import metrics
from ..handlers.results import Result, paused
from ..k8s.status import EventSink
from ..marks import PAUSE_ANNOTATION


def paused_by(
    annotation_of: Callable[[str], str], annotation: str = PAUSE_ANNOTATION
) -> Result | None:
    """A resource a person paused, whatever triggered its pass: nothing is asked of NATS."""
    if annotation and annotation_of(annotation).lower() == "true":
        return paused(annotation)
    return None


def account(kind: str, result: Result, started: float) -> None:
    """The pass's metrics, whatever triggered it."""
    metrics.observe(
        kind,
        result.outcome.reason,
        (event.reason for event in result.events),
        time.perf_counter() - started,
    )


def post_events(events: EventSink, reference: Mapping[str, Any], result: Result) -> None:
    for event in result.events:
        events.post(reference, event.type, event.reason, event.message)
