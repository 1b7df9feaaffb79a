"""The manifests in examples/ work as shipped: applied with kubectl, they become Ready."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, eventually, is_ready

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.integration
@pytest.mark.usefixtures("operator_process")
async def test_examples_apply_and_become_ready(
    kubectl: Path, kubeconfig: Path, api_client: client.ApiClient, nc: Client
) -> None:
    applied = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "-f", str(EXAMPLES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    resources = Resources(api_client, "default")

    async def all_ready() -> bool:
        return is_ready(resources.get("streams", "orders")) and is_ready(
            resources.get("consumers", "orders-worker")
        )

    await eventually(all_ready, timeout=30)
    jetstream = JetStreamApi(nc)
    assert await jetstream.consumer_info("ORDERS", "orders-worker") is not None
    resources.delete("consumers", "orders-worker")
    resources.delete("streams", "orders")

    async def cleaned() -> bool:
        return await jetstream.stream_info("ORDERS") is None

    await eventually(cleaned, timeout=30)
