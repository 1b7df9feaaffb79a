"""The chart's alerts: the real promtool (built from the Prometheus module) checks the rule
file and runs its unit cases, one per alert; the chart's PrometheusRule carries the file
unchanged; every metric an alert reads is one the operator serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from jetstream_devtools.gobuild import ensure_tools
from tests.unit.test_metrics_documented import served_names

from .helpers import Helm, one

pytestmark = pytest.mark.go_tools("promtool")

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "charts" / "jetstream-operator" / "files" / "alerts.yaml"
UNIT_CASES = Path(__file__).parent / "alerts_test.yaml"


def promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    binary = ensure_tools(["promtool"])["promtool"]
    return subprocess.run(
        [str(binary), *arguments], capture_output=True, text=True, timeout=120, check=False
    )


def alerts() -> list[dict[str, object]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_finds_the_rules_valid() -> None:
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_each_alert_fires_in_its_unit_case_and_only_there() -> None:
    tested = promtool("test", "rules", str(UNIT_CASES))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load(UNIT_CASES.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert fired == {str(rule["alert"]) for rule in alerts()}


def test_the_alerts_read_only_metrics_the_operator_serves() -> None:
    served = served_names()
    for rule in alerts():
        used = set(re.findall(r"\b(jetstream_operator_\w+)", str(rule["expr"])))
        assert used, rule
        assert used <= served, (rule["alert"], used - served)


def test_the_chart_carries_the_rule_file_unchanged(helm: Helm) -> None:
    assert not [o for o in helm.render({}) if o["kind"] == "PrometheusRule"]
    rendered = helm.render({"prometheusRule.enabled": "true", "prometheusRule.labels.team": "x"})
    rule = one(rendered, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    assert rule["metadata"]["labels"]["team"] == "x"
