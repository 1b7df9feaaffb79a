"""How kstatus (sigs.k8s.io/cli-utils' status.Compute, built from its Go module) and Argo CD's
health check read the conditions the operator writes, for every reason of docs/conditions.md's
table: they agree case by case, a paused resource as declared is Current, and only a failure
that needs a person is Failed."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from typing import Any

import pytest

from jetstream_devtools.gobuild import ensure_tools
from jetstream_operator.reasons import REASONS
from jetstream_operator.reconcile.conditions import Outcome, conditions_for

from .lua import argocd_health

pytestmark = pytest.mark.go_tools("kstatus")

AGREE = {
    "Current": {"Healthy", "Suspended"},
    "InProgress": {"Progressing", "Suspended"},
    "Failed": {"Degraded", "Suspended"},
}
"""kstatus's reading -> what Argo CD may say of the same object. Suspended: paused (Current or
InProgress, as the spec was or was not in effect) or ReadOnly (Failed: a person must act)."""


def table_cases() -> list[tuple[str, Outcome]]:
    """One outcome per reason and Ready value of the reason list (docs/conditions.md's table);
    events are not conditions."""
    cases = []
    for row in REASONS:
        if "event" in row.ready:
            continue
        stalled = row.stalled == "True"
        for ready in re.findall(r"True|False", row.ready):
            for reason in row.names:
                held = reason == "Paused"
                outcome = Outcome(ready == "True", reason, "m", stalled=stalled, held=held)
                cases.append((f"{reason}-ready-{ready}-stalled-{stalled}", outcome))
    return cases


CASES = table_cases()


def resource(outcome: Outcome) -> dict[str, Any]:
    return {
        "apiVersion": "jetstream-operator.io/v1alpha1",
        "kind": "Stream",
        "metadata": {"name": "orders", "namespace": "team-a", "generation": 3},
        "status": {"observedGeneration": 3, "conditions": conditions_for(outcome, 3)},
    }


@cache
def kstatus_readings() -> dict[str, str]:
    """kstatus's status of every case, from one run of the helper."""
    binary = ensure_tools(["kstatus"])["kstatus"]
    objects = [resource(outcome) for _, outcome in CASES]
    answer = subprocess.run(
        [str(binary)], input=json.dumps(objects), capture_output=True, text=True, check=True
    )
    lines = [json.loads(line) for line in answer.stdout.splitlines()]
    return {
        name: line.get("status") or line["error"]
        for (name, _), line in zip(CASES, lines, strict=True)
    }


def test_the_table_covers_the_reasons_that_matter() -> None:
    names = {name for name, _ in CASES}
    assert len(CASES) >= 30, names
    assert {
        "Synced-ready-True-stalled-False",
        "Paused-ready-True-stalled-False",
        "NatsUnavailable-ready-False-stalled-False",
    } <= names


@pytest.mark.parametrize(("name", "outcome"), CASES, ids=[name for name, _ in CASES])
def test_kstatus_and_argocd_agree(name: str, outcome: Outcome) -> None:
    read = kstatus_readings()[name]
    if outcome.ready:
        expected = "Current"
    elif outcome.stalled:
        expected = "Failed"
    else:
        expected = "InProgress"
    assert read == expected, (name, read)
    health = argocd_health(resource(outcome))["status"]
    assert health in AGREE[read], (name, read, health)
    if outcome.reason == "Paused":
        assert health == "Suspended"
