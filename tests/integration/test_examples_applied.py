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

    shipped = [("streams", "orders"), ("consumers", "orders-worker")]
    shipped += [("keyvalues", "settings"), ("objectstores", "files")]

    async def all_ready() -> bool:
        return all(is_ready(resources.get(plural, name)) for plural, name in shipped)

    await eventually(all_ready, timeout=30)
    jetstream = JetStreamApi(nc)
    assert await jetstream.consumer_info("ORDERS", "orders-worker") is not None
    assert await jetstream.stream_info("KV_settings") is not None
    for plural, name in shipped:
        resources.delete(plural, name)

    async def cleaned() -> bool:
        gone = all(resources.get(plural, name) is None for plural, name in shipped)
        return (
            gone
            and await jetstream.stream_info("ORDERS") is None
            and (await jetstream.stream_info("KV_settings") is None)
        )

    await eventually(cleaned, timeout=30)
    # The example store is retained on deletion, as its manifest says.
    assert await jetstream.stream_info("OBJ_files") is not None
    await jetstream.delete_stream("OBJ_files")
