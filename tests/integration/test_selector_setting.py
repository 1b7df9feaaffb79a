"""JETSTREAM_OPERATOR_SELECTOR: two operator processes share one namespace by a label.

Each serves only the resources its selector matches; a resource relabelled to the other shard
is let go without anything happening in NATS and taken up by the other process; deleting the
resources completes, each by the process that serves it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from jetstream_operator import GROUP
from jetstream_operator.devenv.natsserver import NatsServer
from jetstream_operator.devenv.operator_process import OperatorProcess
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.targets import ExistingNats

from .conftest import SESSION_OPERATOR_ENV, operator_variant
from .helpers import Resources, eventually, is_ready, nats_connection

pytestmark = [pytest.mark.integration]

SHARD = f"{GROUP}/shard"


def labelled_stream(name: str, stream: str, shard: str | None) -> dict[str, Any]:
    labels = {SHARD: shard} if shard else {}
    return {
        "kind": "Stream",
        "metadata": {"name": name, "labels": labels},
        "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"]},
    }


ShardProcess = Callable[..., OperatorProcess]


@pytest.fixture
def shard_process(
    kubeconfig: Path,
    nats_server: NatsServer | ExistingNats,
    tmp_path: Path,
    process_logs: dict[str, Path],
) -> Iterator[ShardProcess]:
    """Makes a second operator process with the session's settings and more, stopped after the
    test; not started."""
    made: list[OperatorProcess] = []

    def make(**env: str) -> OperatorProcess:
        log_file = tmp_path / f"operator-{len(made) + 2}.log"
        process_logs[log_file.stem] = log_file
        process = OperatorProcess(
            kubeconfig, nats_server.url, log_file, extra_env={**SESSION_OPERATOR_ENV, **env}
        )
        made.append(process)
        return process

    yield make
    for process in made:
        process.stop()


async def subjects_in_nats(nc: Client, stream: str) -> list[str] | None:
    info = await JetStreamApi(nc).stream_info(stream)
    return None if info is None else list(info["config"].get("subjects") or [])


async def test_two_processes_split_a_namespace_by_label(
    operator_process: OperatorProcess,
    shard_process: ShardProcess,
    resources: Resources,
    nc: Client,
    namespace: str,
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

        shard_b = shard_process(JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=b")
        shard_b.start()
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


async def _ready(resources: Resources, name: str, plural: str = "streams") -> bool:
    return is_ready(resources.get(plural, name))


async def test_a_process_that_only_reads_connections_uses_them_and_writes_none(
    operator_process: OperatorProcess,
    shard_process: ShardProcess,
    nats_server: NatsServer | ExistingNats,
    resources: Resources,
    nc: Client,
    namespace: str,
) -> None:
    """Shard b's process (JETSTREAM_OPERATOR_MANAGE_CONNECTIONS=false) serves its Stream
    through a NatsConnection that no one manages yet, without writing to the connection, and
    repairs the stream's drift through it; shard a's process then manages the connection."""
    stream = namespace.replace("-", "_").upper() + "_ON_CONNECTION"
    shard_b = shard_process(
        JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=b", JETSTREAM_OPERATOR_MANAGE_CONNECTIONS="false"
    )
    # The session's process serves shard a only, so until it manages the connection below,
    # nothing but shard b's process may touch it.
    with operator_variant(operator_process, JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=a"):
        operator_process.stop()
        shard_b.start()
        resources.create("natsconnections", nats_connection("shared", [nats_server.url]))
        on_connection = labelled_stream("on-connection", stream, "b")
        on_connection["spec"]["connectionRef"] = "shared"
        resources.create("streams", on_connection)
        await eventually(lambda: _ready(resources, "on-connection"), timeout=60)
        connection = resources.get("natsconnections", "shared") or {}
        assert "status" not in connection, connection
        assert not connection["metadata"].get("finalizers"), connection

        # Drift repair runs on the connection it only reads.
        await JetStreamApi(nc).delete_stream(stream)

        async def recreated() -> bool:
            return await subjects_in_nats(nc, stream) is not None

        await eventually(recreated, timeout=30)
        # Restarted, with the stream Ready as is: the connection's watch event, not a use of
        # it, starts its drift watcher.
        shard_b.stop()
        shard_b.start()
        await asyncio.sleep(1)
        await JetStreamApi(nc).delete_stream(stream)
        await eventually(recreated, timeout=30)
        connection = resources.get("natsconnections", "shared") or {}
        assert "status" not in connection, connection

        operator_process.start()  # shard a's process, which manages connections
        await eventually(lambda: _ready(resources, "shared", "natsconnections"), timeout=60)
        resources.delete("streams", "on-connection")
        resources.delete("natsconnections", "shared")

        async def gone() -> bool:
            return resources.get("natsconnections", "shared") is None

        await eventually(gone, timeout=60)
        assert await subjects_in_nats(nc, stream) is None
