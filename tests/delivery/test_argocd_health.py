"""The Argo CD health check maps the operator's status to Healthy/Progressing/Degraded/Suspended.

The fixtures were captured from real resources (operator, kube-apiserver, nats-server) by
capture_argocd_fixtures.py. States that are hard to reach live are built from them, or with the
operator's own `conditions_for`, so they have exactly the shape it writes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetstream_devtools.argocd import argocd_binary
from jetstream_devtools.argocd import built as argocd_built
from jetstream_operator.reconcile.conditions import Outcome, conditions_for

from .helpers import CRDS, GROUP, ROOT, crd_paths, run
from .lua import HEALTH_LUA, argocd_health

FIXTURES = Path(__file__).parent / "fixtures" / "argocd"
ARGOCD_CM = ROOT / "docs" / "argocd" / "argocd-cm.yaml"
EXAMPLES = ROOT / "examples" / "argocd"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text())
    return loaded


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("stream-ready.yaml", "Healthy", "Synced: stream ORDERS matches the spec"),
        ("consumer-ready.yaml", "Healthy", "Synced: consumer worker matches the spec"),
        ("stream-no-status.yaml", "Progressing", "Waiting for the operator to report status"),
        ("stream-generation-ahead.yaml", "Progressing", "act on generation 2"),
        ("stream-nats-unavailable.yaml", "Progressing", "cannot reach NATS"),
        ("consumer-waiting-for-stream.yaml", "Progressing", "StreamNotFound: Stream resource"),
        ("stream-conflict.yaml", "Degraded", "Conflict: stream 'LEGACY' already exists"),
        ("stream-paused.yaml", "Suspended", "Paused: reconciliation paused"),
        ("natsconnection-ready.yaml", "Healthy", "Connected: connected to NATS"),
        ("natsconnection-secret-missing.yaml", "Degraded", "SecretProblem: Secret argocd/no-such"),
    ],
)
def test_captured_resources(name: str, status: str, message: str) -> None:
    health = argocd_health(fixture(name))
    assert health["status"] == status
    assert message in health["message"]


def test_a_condition_about_an_older_generation_is_not_trusted() -> None:
    """status.observedGeneration caught up but Ready still describes the previous spec."""
    obj = fixture("stream-ready.yaml")
    obj["metadata"]["generation"] = 2
    obj["status"]["observedGeneration"] = 2
    assert argocd_health(obj)["status"] == "Progressing"


def test_a_newer_observed_generation_is_fine() -> None:
    obj = fixture("stream-ready.yaml")
    obj["status"]["observedGeneration"] = 1
    obj["metadata"]["generation"] = 1
    assert argocd_health(obj)["status"] == "Healthy"
    del obj["metadata"]["generation"]
    assert argocd_health(obj)["status"] == "Healthy"


def _connection(outcome: Outcome | None, generation: int = 3, observed: int = 3) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "NatsConnection",
        "metadata": {"name": "orders-nats", "namespace": "orders", "generation": generation},
        "spec": {"servers": ["nats://nats.nats.svc:4222"]},
    }
    if outcome is not None:
        obj["status"] = {
            "observedGeneration": observed,
            "conditions": conditions_for(outcome, observed),
            "serverVersion": "2.12.1",
        }
    return obj


@pytest.mark.parametrize(
    ("obj", "status"),
    [
        (_connection(Outcome(True, "Connected", "connected to nats-1 (2.12.1)")), "Healthy"),
        (_connection(Outcome(False, "Unreachable", "cannot reach NATS")), "Progressing"),
        (
            _connection(Outcome(False, "SecretNotFound", "secret orders-creds", stalled=True)),
            "Degraded",
        ),
        (_connection(Outcome(False, "Paused", "paused", stalled=True)), "Suspended"),
        (_connection(Outcome(True, "Connected", "ok"), generation=4, observed=3), "Progressing"),
        (_connection(None), "Progressing"),
    ],
    ids=["ready", "reconciling", "stalled", "paused", "generation-ahead", "no-status"],
)
def test_nats_connection(obj: dict[str, Any], status: str) -> None:
    assert argocd_health(obj)["status"] == status


def test_ready_false_without_reconciling_or_stalled_is_degraded() -> None:
    obj = fixture("stream-ready.yaml")
    for condition in obj["status"]["conditions"]:
        condition["status"] = "False"
    assert argocd_health(obj)["status"] == "Degraded"


def test_status_without_conditions_is_progressing() -> None:
    obj = copy.deepcopy(fixture("stream-ready.yaml"))
    obj["status"] = {"observedGeneration": 1}
    assert argocd_health(obj)["status"] == "Progressing"


def _kinds() -> list[str]:
    return sorted(
        yaml.safe_load(path.read_text())["spec"]["names"]["kind"] for path in crd_paths(CRDS)
    )


def test_argocd_cm_has_the_script_for_every_kind() -> None:
    """Each key of the argocd-cm snippet is health.lua unchanged, for every CRD of crds/."""
    config_map = yaml.safe_load(ARGOCD_CM.read_text())
    expected = {f"resource.customizations.health.{GROUP}_{kind}" for kind in _kinds()}
    assert set(config_map["data"]) == expected
    script = HEALTH_LUA.read_text()
    assert all(value == script for value in config_map["data"].values())


def test_sync_wave_example_orders_connection_stream_consumer() -> None:
    waves = {}
    for path in sorted((EXAMPLES / "resources").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        waves[doc["kind"]] = int(doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
    assert waves["NatsConnection"] < waves["Stream"] < waves["Consumer"]
    for path in EXAMPLES.glob("application-*.yaml"):
        app = yaml.safe_load(path.read_text())
        assert app["kind"] == "Application" and app["apiVersion"] == "argoproj.io/v1alpha1"
    source = yaml.safe_load((EXAMPLES / "application-operator.yaml").read_text())["spec"]
    assert (ROOT / source["source"]["path"] / "Chart.yaml").is_file()


def _argocd_health(argocd: Path, resource: Path) -> dict[str, str]:
    """What Argo CD's own Lua engine (gopher-lua, with argocd-cm.yaml) says of a resource."""
    result = run(
        [argocd, "admin", "settings", "resource-overrides", "health", resource,
         "--argocd-cm-path", ARGOCD_CM],
        env={"KUBECONFIG": "/dev/null"},  # it works offline; make sure it never tries a cluster
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    fields = dict(
        line.split(": ", 1)
        for line in result.stdout.splitlines()
        if line.startswith(("STATUS", "MESSAGE"))
    )
    return {"status": fields["STATUS"], "message": fields.get("MESSAGE", "")}


def test_argocd_itself_agrees_with_lupa_on_every_fixture() -> None:
    """The captured resources through `argocd admin settings resource-overrides health`, the
    check Argo CD documents for custom health scripts: gopher-lua, not only lupa's Lua 5.1."""
    if not argocd_built():
        pytest.skip(
            "Argo CD is not built: `python -m jetstream_devtools.argocd build` (the "
            "tests/argocd suite builds it before its tests when it is collected)"
        )
    fixtures = sorted(FIXTURES.glob("*.yaml"))
    assert fixtures
    for path in fixtures:
        assert _argocd_health(argocd_binary(), path) == argocd_health(fixture(path.name)), path.name
