"""Every metric the operator serves is in docs/metrics.md, under the name a scrape shows."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from jetstream_operator.metrics import REGISTRY, RESOURCE_HELP, Series, StateCollector

DOC = Path(__file__).parents[2] / "docs" / "metrics.md"


def served_names() -> set[str]:
    """The sample names of every family, as Prometheus scrapes them (counters get `_total`;
    a histogram is named by its family)."""
    names = set()
    state = CollectorRegistry()
    every_resource_series = [Series(name, ("ns", "a", "b", "c"), 1.0) for name in RESOURCE_HELP]
    state.register(
        StateCollector(
            lambda: [("Stream", "True", 1)],
            lambda: [("default", True)],
            lambda: (every_resource_series, 0),
        )
    )
    for registry in (REGISTRY, state):
        for family in registry.collect():
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def test_every_metric_is_documented() -> None:
    documented = DOC.read_text()
    names = served_names()
    assert len(names) >= 13
    missing = [name for name in sorted(names) if f"`{name}`" not in documented]
    assert not missing, f"not in docs/metrics.md: {missing}"
    stale = set(re.findall(r"`(jetstream_operator_\w+)`", documented)) - names
    assert not stale, f"documented but not served: {sorted(stale)}"
