"""Two operator replicas with kopf peering: only the active one acts; when it dies, the standby
takes over and resources keep converging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.crds import apply_crds
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator.k8s.peering import CLUSTER_PEERINGS, PEERING_GROUP, peering_crds
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.operator import SESSION_OPERATOR_ENV

from .helpers import Resources, eventually, is_ready

pytestmark = [pytest.mark.integration]

PEERING = "jetstream-operator-ha"


@pytest.fixture
def replicas(
    operator_process: OperatorProcess,
    api_client: client.ApiClient,
    kubeconfig: Path,
    nats_server: object,
    tmp_path: Path,
) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    apply_crds(api_client, peering_crds())
    objects = client.CustomObjectsApi(api_client)
    try:
        objects.create_cluster_custom_object(
            PEERING_GROUP,
            "v1",
            CLUSTER_PEERINGS,
            {
                "apiVersion": f"{PEERING_GROUP}/v1",
                "kind": "ClusterKopfPeering",
                "metadata": {"name": PEERING},
            },
        )
    except client.ApiException as error:
        if error.status != 409:
            raise
    operator_process.stop()  # the session's standalone operator would act alongside them
    made = []
    try:
        for name, priority in (("active", "100"), ("standby", "50")):
            env = {
                **SESSION_OPERATOR_ENV,
                "JETSTREAM_OPERATOR_PEERING": PEERING,
                "JETSTREAM_OPERATOR_PRIORITY": priority,
                "JETSTREAM_OPERATOR_PEERING_LIFETIME": "6",
                "POD_ID": f"replica-{name}",
            }
            replica = OperatorProcess(
                kubeconfig,
                nats_server.url,  # type: ignore[attr-defined]
                tmp_path / f"{name}.log",
                extra_env=env,
            )
            replica.start()
            made.append(replica)
        yield made[0], made[1]
    finally:
        for replica in made:
            replica.stop()
        operator_process.start()


async def test_only_the_active_replica_acts_and_the_standby_takes_over(
    replicas: tuple[OperatorProcess, OperatorProcess],
    nats_server: object,
    resources: Resources,
    nc: Client,
    namespace: str,
) -> None:
    active, standby = replicas
    base = namespace.replace("-", "_").upper()
    resources.create(
        "streams", {"kind": "Stream", "metadata": {"name": "first"}, "spec": {"name": f"{base}_1"}}
    )

    async def ready(name: str) -> bool:
        return is_ready(resources.get("streams", name))

    await eventually(lambda: ready("first"), timeout=30)
    jetstream = JetStreamApi(nc)
    info = await jetstream.stream_info(f"{base}_1")
    assert info is not None
    await jetstream.update_stream({**info["config"], "max_msgs": 5})  # drift for someone to fix

    async def repaired() -> bool:
        current = await jetstream.stream_info(f"{base}_1")
        return current is not None and current["config"]["max_msgs"] == -1

    await eventually(repaired, timeout=10)
    assert "Handler 'reconcile' succeeded" in active.log_file.read_text()
    assert "Handler 'reconcile'" not in standby.log_file.read_text()
    # From the server's side: the active replica talks to NATS, the standby does not at all.
    clients = {
        str(entry.get("name")): entry
        for entry in nats_server.monitor("connz").get("connections") or []  # type: ignore[attr-defined]
    }
    assert clients.get("jetstream-operator/replica-active", {}).get("in_msgs", 0) > 0, clients
    assert "jetstream-operator/replica-standby" not in clients, clients

    active.kill()
    resources.create(
        "streams", {"kind": "Stream", "metadata": {"name": "second"}, "spec": {"name": f"{base}_2"}}
    )
    await eventually(lambda: ready("second"), timeout=40)
    assert "Handler 'reconcile' succeeded" in standby.log_file.read_text()
