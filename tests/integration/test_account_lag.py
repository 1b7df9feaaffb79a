"""Lag from the servers' JetStream monitoring: for a ClusterNatsConnection into a NatsAccount,
the operator reads every consumer of the account with one JSZ request per pass through the
account's system connection, instead of a CONSUMER.LIST request per stream. Measured with the
server's own JetStream API audit: the consumer's lag follows a client's publishing and reading
on every 2 s pass while the operator lists no consumer."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from kubernetes import client
from nats.aio.client import Client
from nats.aio.msg import Msg

from jetstream_devtools import figures
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.marks import METRICS_LABEL
from jetstream_operator.nats.account_keys import OPERATOR_CREDS_KEY, keys_secret_name

from .accounts_env import AccountSystem, connected, nats_user, orders_stream, ready, user_creds
from .figures import ApiAudit
from .helpers import Resources, eventually
from .test_metrics import metrics_on

pytestmark = [pytest.mark.integration]


@contextlib.asynccontextmanager
async def as_the_operator(
    api_client: client.ApiClient, system: AccountSystem, path: Path
) -> AsyncIterator[Client]:
    """Connected as the operator's own user of the account, which may read its advisories."""
    secret = client.CoreV1Api(api_client).read_namespaced_secret(
        keys_secret_name(system.account), system.own_namespace
    )
    assert secret.data is not None
    path.write_text(base64.b64decode(secret.data[OPERATOR_CREDS_KEY]).decode())
    connection = await nats.connect(system.server.url, user_credentials=str(path))
    try:
        yield connection
    finally:
        await connection.close()


async def test_lag_comes_from_one_monitoring_request_not_a_listing_per_stream(
    api_client: client.ApiClient,
    operator_process: OperatorProcess,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    client.CoreV1Api(api_client).patch_namespace(
        team, {"metadata": {"labels": {METRICS_LABEL: "true"}}}
    )
    stream = f"{team}-orders"
    resources.create("streams", orders_stream(team))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "worker"},
            "spec": {
                "streamRef": "orders",
                "durableName": "worker",
                "clusterConnectionRef": "team-accounts-conn",
            },
        },
    )
    await ready(lambda: resources.get("consumers", "worker"))
    resources.create(
        "natsusers",
        nats_user(
            "worker",
            streams=[{"name": "orders", "access": "Publish"}],
            consumers=[{"name": "worker"}],
        ),
    )
    user = await ready(lambda: resources.get("natsusers", "worker"))
    creds = user_creds(api_client, team, user["status"]["secretName"], tmp_path / "worker.creds")
    labels = {"namespace": team, "name": "worker", "stream": stream, "consumer": "worker"}

    # Consumers listed at production pace, except measured ones: every 2 s pass.
    with metrics_on(
        operator_process,
        JETSTREAM_OPERATOR_CONSUMER_RESYNC_INTERVAL="300",
        JETSTREAM_OPERATOR_CONSUMER_IDLE_RESYNC_INTERVAL="14400",
    ) as url:

        async def pending_is(wanted: float) -> bool:
            return any(
                sample.name == "jetstream_operator_consumer_pending"
                and sample.labels == labels
                and sample.value == wanted
                for sample in figures.scrape(url, timeout=5)
            )

        system_creds = tmp_path / "system.creds"
        system_creds.write_text(account_system.keys.system_creds())
        jsz_requests: list[str] = []
        async with (
            as_the_operator(api_client, account_system, tmp_path / "op.creds") as watcher,
            connected(account_system.server.url, system_creds, []) as system,
        ):
            audit = await ApiAudit().start(watcher)

            async def seen(message: Msg) -> None:
                jsz_requests.append(message.subject)

            await system.subscribe("$SYS.REQ.ACCOUNT.*.JSZ", cb=seen)
            await system.flush()
            errors: list[str] = []
            async with connected(account_system.server.url, creds, errors) as nc:
                js = nc.jetstream()
                for index in range(5):
                    await js.publish(f"{team}.orders.{index}", b"x")
                await eventually(lambda: pending_is(5), timeout=30)
                reader = await js.pull_subscribe_bind("worker", stream)
                for message in await reader.fetch(5, timeout=5):
                    await message.ack()
                # Drained without a new message, so no advisory announced it: only a pass's
                # look at the consumer can show it.
                await eventually(lambda: pending_is(0), timeout=30)
            await audit.stop()
    assert errors == []
    assert audit.count("CONSUMER.LIST") == 0, audit.subjects
    passes = audit.count("STREAM.LIST")  # each pass lists the streams (one page here)
    assert passes >= 2
    assert 1 <= len(jsz_requests) <= passes + 1, jsz_requests  # one JSZ per pass
    account = user["status"]["account"]
    assert set(jsz_requests) == {f"$SYS.REQ.ACCOUNT.{account}.JSZ"}
