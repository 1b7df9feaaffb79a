"""The chart's Grafana dashboard: valid JSON whose every panel queries only metrics the
operator serves (parsed from each PromQL expression, labels included), shipped unchanged in a
ConfigMap the dashboard sidecar picks up."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.unit.test_metrics_documented import served_names

from .helpers import Helm, one

DASHBOARD = Path(__file__).resolve().parents[2] / "charts/jetstream-operator/files/dashboard.json"
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels") or [])
    return found


def queried(expression: str) -> set[str]:
    """The operator's metric names an expression reads (a histogram by its family)."""
    names = set(re.findall(r"\bjetstream_operator_\w+", expression))
    return {
        next((name[: -len(part)] for part in HISTOGRAM_PARTS if name.endswith(part)), name)
        for name in names
    }


def test_every_panel_queries_metrics_the_operator_serves() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    served = served_names()
    graphs = [panel for panel in panels(dashboard) if panel["type"] != "row"]
    assert len(graphs) >= 12
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in graphs:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = queried(target["expr"])
            assert used, (panel["title"], target["expr"])
            assert used <= served, (panel["title"], used - served)
    variables = json.dumps(dashboard["templating"])
    assert queried(variables) <= served


def test_per_stream_and_per_consumer_panels_and_operator_health_are_there() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = " ".join(
        target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])
    )
    for metric in (
        "jetstream_operator_connection_up",
        "jetstream_operator_resources",
        "jetstream_operator_stream_fill_ratio",
        "jetstream_operator_consumer_pending",
        "jetstream_operator_resource_ready",
    ):
        assert metric in expressions, metric


def test_the_chart_ships_it_for_the_sidecar(helm: Helm) -> None:
    assert not [o for o in helm.render({}) if o["kind"] == "ConfigMap"]
    rendered = helm.render({"dashboard.enabled": "true", "dashboard.namespace": "monitoring"})
    config_map = one(rendered, "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads(config_map["data"]["jetstream-operator.json"])
    assert shipped == json.loads(DASHBOARD.read_text())
