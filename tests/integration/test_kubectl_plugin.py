"""`kubectl jetstream` against the suite's API server: the status view of streams with their
consumers and lag, `why` for a resource that is not Ready, and one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client

from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]


def plugin(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetstream_operator.kubectl_plugin", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        timeout=60,
    )


async def test_status_shows_each_stream_with_its_consumers_and_lag(
    resources: Resources, namespace: str, kubeconfig: Path, nc: Client
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create(
        "streams",
        {
            "kind": "Stream",
            "metadata": {"name": "orders"},
            "spec": {"name": stream, "subjects": [f"{stream}.>"]},
        },
    )
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "worker"},
            "spec": {"durableName": "worker", "streamName": stream},
        },
    )
    await eventually(lambda: _ready(resources, "streams", "orders"), timeout=30)
    await eventually(lambda: _ready(resources, "consumers", "worker"), timeout=30)
    for index in range(3):
        await nc.jetstream().publish(f"{stream}.in", f"m{index}".encode())

    async def counts_shown() -> str | None:
        shown = plugin(kubeconfig, "status", "-n", namespace)
        assert shown.returncode == 0, shown.stderr
        counted = f"{stream}  True Synced  3  " in shown.stdout
        lagging = "consumer/worker  worker  True Synced  -  -  3" in shown.stdout
        return shown.stdout if counted and lagging else None

    out = await eventually(counts_shown, timeout=60)
    lines = out.splitlines()
    stream_line = next(line for line in lines if line.startswith("stream/orders"))
    assert "B  -  default" in stream_line  # a size for people, no lag, the default connection
    assert lines.index(stream_line) + 1 == next(
        index for index, line in enumerate(lines) if "consumer/worker" in line
    )  # under its stream


async def test_why_explains_a_resource_that_is_not_ready_and_bad_input_fails_in_one_line(
    resources: Resources, namespace: str, kubeconfig: Path
) -> None:
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "early"},
            "spec": {"durableName": "early", "streamName": "NOT_THERE"},
        },
    )

    async def waiting() -> bool:
        return condition(resources.get("consumers", "early")).get("reason") == "StreamNotFound"

    await eventually(waiting, timeout=30)
    why = plugin(kubeconfig, "why", "consumer/early", "-n", namespace)
    assert why.returncode == 0, why.stderr
    assert f"Consumer {namespace}/early" in why.stdout
    assert "Not ready: StreamNotFound" in why.stdout
    assert "What to do: create the Stream" in why.stdout

    for args, said in (
        (("why", "gadget/early", "-n", namespace), "why takes KIND/NAME"),
        (
            ("why", "stream/missing", "-n", namespace),
            f"stream/missing not found in namespace {namespace}",
        ),
    ):
        failed = plugin(kubeconfig, *args)
        assert failed.returncode == 1, failed
        assert failed.stderr.strip().count("\n") == 0 and said in failed.stderr, failed.stderr


async def _ready(resources: Resources, plural: str, name: str) -> bool:
    return is_ready(resources.get(plural, name))
