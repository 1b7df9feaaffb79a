"""What a person sees: kubectl columns and explain, Events, conflicts between resources, and
the read-only mode."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration]


def manifest(name: str, stream: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream, **spec}}


def run_kubectl(binary: Path, kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.usefixtures("operator_process")
async def test_kubectl_shows_ready_columns_and_explains_fields(
    resources: Resources, namespace: str, kubectl: Path, kubeconfig: Path
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("shown", stream, replicas=1))
    await eventually(lambda: _ready(resources, "shown"))
    table = run_kubectl(kubectl, kubeconfig, "get", "jss", "-n", namespace)
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "STREAM", "MESSAGES", "SIZE", "REPLICAS", "AGE"]
    assert row.split()[:7] == ["shown", "True", stream, "0", "0", "B", "1"]  # SIZE: "0 B"
    wide = run_kubectl(kubectl, kubeconfig, "get", "jss", "-n", namespace, "-o", "wide")
    assert "BYTES" in wide.splitlines()[0].split()
    assert "shown" in run_kubectl(kubectl, kubeconfig, "get", "jetstream", "-n", namespace)
    explained = run_kubectl(kubectl, kubeconfig, "explain", "stream.spec.maxAge")
    assert "Oldest message kept" in explained


@pytest.mark.usefixtures("operator_process")
async def test_second_resource_for_the_same_stream_is_a_conflict(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("first", stream, maxMsgs=5))
    await eventually(lambda: _ready(resources, "first"))
    resources.create("streams", manifest("second", stream, maxMsgs=500))

    async def conflict() -> dict[str, Any] | None:
        ready = condition(resources.get("streams", "second"))
        return ready if ready.get("reason") == "Conflict" else None

    ready = await eventually(conflict)
    assert f"{namespace}/first" in ready["message"]
    info = await JetStreamApi(nc).stream_info(stream)
    assert info is not None and info["config"]["max_msgs"] == 5
    assert is_ready(resources.get("streams", "first"))


@pytest.mark.usefixtures("operator_process")
async def test_events_tell_the_story(
    resources: Resources, nc: Client, namespace: str, api_client: client.ApiClient
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("storied", stream, maxMsgs=5))
    await eventually(lambda: _ready(resources, "storied"))
    jetstream = JetStreamApi(nc)
    info = await jetstream.stream_info(stream)
    assert info is not None
    await jetstream.update_stream({**info["config"], "max_msgs": 6})
    core = client.CoreV1Api(api_client)

    async def reasons() -> set[str | None] | None:
        events = core.list_namespaced_event(namespace).items
        found = {event.reason for event in events if event.involved_object.name == "storied"}
        return found if {"Created", "DriftRepaired"} <= found else None

    await eventually(reasons)


async def test_read_only_operator_changes_nothing(
    operator_read_only: Any, resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("watched", stream))

    async def reported() -> dict[str, Any] | None:
        ready = condition(resources.get("streams", "watched"))
        return ready if ready.get("reason") == "ReadOnly" else None

    ready = await eventually(reported)
    assert "read-only" in ready["message"]
    assert await JetStreamApi(nc).stream_info(stream) is None


async def _ready(resources: Resources, name: str) -> bool:
    return is_ready(resources.get("streams", name))
