"""JETSTREAM_OPERATOR_SELECTOR: two operator processes share one namespace by a label.

Each serves only the resources its selector matches; a resource relabelled to the other shard
is let go without anything happening in NATS and taken up by the other process; deleting the
resources completes, each by the process that serves it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_operator import GROUP
from jetstream_operator.devenv.natsserver import NatsServer
from jetstream_operator.devenv.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.targets import ExistingNats

from .conftest import SESSION_OPERATOR_ENV, operator_variant
from .helpers import Resources, eventually, is_ready

pytestmark = [pytest.mark.integration]

SHARD = f"{GROUP}/shard"


def labelled_stream(name: str, stream: str, shard: str | None) -> dict[str, Any]:
    labels = {SHARD: shard} if shard else {}
    return {
        "kind": "Stream",
        "metadata": {"name": name, "labels": labels},
        "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"]},
    }


async def subjects_in_nats(nc: Client, stream: str) -> list[str] | None:
    info = await JetStreamApi(nc).stream_info(stream)
    return None if info is None else list(info["config"].get("subjects") or [])


async def test_two_processes_split_a_namespace_by_label(
    operator_process: OperatorProcess,
    api_client: client.ApiClient,
    kubeconfig: Path,
    nats_server: NatsServer | ExistingNats,
    resources: Resources,
    nc: Client,
    namespace: str,
    tmp_path: Path,
    process_logs: dict[str, Path],
) -> None:
    prefix = namespace.replace("-", "_").upper()
    moved, second, unlabelled = f"{prefix}_M", f"{prefix}_B", f"{prefix}_U"
    with operator_variant(operator_process, JETSTREAM_OPERATOR_SELECTOR=f"{SHARD} in (a)"):
        resources.create("streams", labelled_stream("moved", moved, "a"))
        resources.create("streams", labelled_stream("second", second, "b"))
        resources.create("streams", labelled_stream("unlabelled", unlabelled, None))
        resources.create(
            "consumers",
            {
                "kind": "Consumer",
                "metadata": {"name": "reader", "labels": {SHARD: "b"}},
                "spec": {"durableName": "reader", "streamRef": "second"},
            },
        )
        await eventually(lambda: _ready(resources, "moved"), timeout=60)
        await asyncio.sleep(1)  # time enough for the others to have been served, were they
        for name, stream in (("second", second), ("unlabelled", unlabelled)):
            untouched = resources.get("streams", name) or {}
            assert "status" not in untouched, untouched
            assert not untouched["metadata"].get("finalizers"), untouched
            assert await subjects_in_nats(nc, stream) is None
        assert "status" not in (resources.get("consumers", "reader") or {})

        # Relabelled to the other shard: this process lets it go. A spec change made now must
        # wait for the process of shard b, and the stream stays in NATS meanwhile.
        resources.label("streams", "moved", {SHARD: "b"})
        before = resources.get("streams", "moved") or {}
        resources.patch_spec("streams", "moved", {"subjects": [f"{moved.lower()}.>", "extra.>"]})
        await asyncio.sleep(2)
        assert await subjects_in_nats(nc, moved) == [f"{moved.lower()}.>"]
        after = resources.get("streams", "moved") or {}
        assert after.get("status") == before.get("status")

        log_file = tmp_path / "operator-b.log"
        process_logs["operator-b"] = log_file
        shard_b = OperatorProcess(
            kubeconfig,
            nats_server.url,
            log_file,
            extra_env={**SESSION_OPERATOR_ENV, "JETSTREAM_OPERATOR_SELECTOR": f"{SHARD}=b"},
        )
        shard_b.start()
        try:
            await eventually(lambda: _ready(resources, "second"), timeout=60)
            await eventually(lambda: _ready(resources, "moved"), timeout=60)
            assert await subjects_in_nats(nc, moved) == [f"{moved.lower()}.>", "extra.>"]
            assert await subjects_in_nats(nc, second) is not None
            await eventually(lambda: _ready(resources, "reader", plural="consumers"), timeout=60)
            assert await JetStreamApi(nc).consumer_info(second, "reader") is not None

            # Labelled into shard a later: the first process takes it up.
            resources.label("streams", "unlabelled", {SHARD: "a"})
            await eventually(lambda: _ready(resources, "unlabelled"), timeout=60)

            resources.delete("consumers", "reader")
            for name in ("moved", "second", "unlabelled"):
                resources.delete("streams", name)

            async def all_gone() -> bool:
                names = ("moved", "second", "unlabelled")
                consumer = resources.get("consumers", "reader")
                return consumer is None and all(
                    resources.get("streams", name) is None for name in names
                )

            await eventually(all_gone, timeout=60)
            for stream in (moved, second, unlabelled):
                assert await subjects_in_nats(nc, stream) is None
        finally:
            shard_b.stop()


async def _ready(resources: Resources, name: str, plural: str = "streams") -> bool:
    return is_ready(resources.get(plural, name))
