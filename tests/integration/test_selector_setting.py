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
import yaml
from kubernetes import client
from nats.aio.client import Client

from jetstream_devtools.gobuild import ensure_tools
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.delivery.helpers import Helm, one
from tests.support.operator import SESSION_OPERATOR_ENV, operator_variant
from tests.support.targets import ExistingNats

from .helpers import Resources, condition, eventually, is_ready, nats_connection

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
    """Makes a second operator process with the session's settings and more (and, given a
    kubeconfig as `identity`, as someone else), stopped after the test; not started."""
    made: list[OperatorProcess] = []

    def make(identity: Path | None = None, **env: str) -> OperatorProcess:
        log_file = tmp_path / f"operator-{len(made) + 2}.log"
        process_logs[log_file.stem] = log_file
        process = OperatorProcess(
            identity or kubeconfig,
            nats_server.url,
            log_file,
            extra_env={**SESSION_OPERATOR_ENV, **env},
        )
        made.append(process)
        return process

    yield make
    for process in made:
        process.stop()


@pytest.fixture
def reader_identity(
    api_client: client.ApiClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[Path]:
    """A ServiceAccount's kubeconfig, allowed exactly what the chart's ClusterRole grants a
    release with operator.manageConnections=false: no writes to NatsConnections or Secrets."""
    helm = Helm(ensure_tools(["helm"])["helm"], tmp_path / "helm-home")
    rendered = helm.render(
        {"operator.manageConnections": "false"}, "--show-only", "templates/rbac.yaml"
    )
    rules = one(rendered, "ClusterRole")["rules"]
    name = f"reader-{namespace}"
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    core.create_namespaced_service_account(namespace, account)
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=name),
            rules=[client.V1PolicyRule(**rule) for rule in rules],
        )
    )
    subject = client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name
            ),
            subjects=[subject],
        )
    )
    request = core.create_namespaced_service_account_token(
        "reader",
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        ),
    )
    assert request.status is not None and request.status.token
    config = yaml.safe_load(kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": request.status.token}
    identity = tmp_path / "reader.kubeconfig"
    identity.write_text(yaml.safe_dump(config))
    yield identity
    rbac.delete_cluster_role_binding(name)
    rbac.delete_cluster_role(name)


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
        # Consumers of shard a naming shard b's Stream, and a Stream that does not exist:
        # this process resolves neither, and says why for the first.
        for name, stream_ref in (("stray", "second"), ("early", "absent")):
            resources.create(
                "consumers",
                {
                    "kind": "Consumer",
                    "metadata": {"name": name, "labels": {SHARD: "a"}},
                    "spec": {"durableName": name, "streamRef": stream_ref},
                },
            )

        async def waiting(name: str, explained: bool) -> bool:
            ready = condition(resources.get("consumers", name))
            message = ready.get("message") or ""
            return ready.get("reason") == "StreamNotFound" and explained == (
                "'second' is served by another operator deployment" in message
                and "Give the Consumer the labels of its Stream" in message
            )

        await eventually(lambda: waiting("stray", explained=True), timeout=30)
        # Drift repair's passes (a resync every 2 s here) keep it: before, the first one wrote
        # the plain message over it.
        await asyncio.sleep(6)
        assert await waiting("stray", explained=True), condition(
            resources.get("consumers", "stray")
        )
        await eventually(lambda: waiting("early", explained=False), timeout=30)
        assert "was not found" in (
            condition(resources.get("consumers", "early")).get("message") or ""
        )
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

        shard_process(JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=b").start()
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
        resources.delete("consumers", "stray")
        resources.delete("consumers", "early")
        for name in ("moved", "second", "unlabelled"):
            resources.delete("streams", name)

        async def all_gone() -> bool:
            names = ("moved", "second", "unlabelled")
            consumers = [resources.get("consumers", name) for name in ("reader", "stray", "early")]
            return consumers == [None, None, None] and all(
                resources.get("streams", name) is None for name in names
            )

        await eventually(all_gone, timeout=60)
        for stream in (moved, second, unlabelled):
            assert await subjects_in_nats(nc, stream) is None


async def _ready(resources: Resources, name: str, plural: str = "streams") -> bool:
    return is_ready(resources.get(plural, name))


async def test_processes_of_two_shards_share_a_connection_and_its_deletion_waits_for_both(
    operator_process: OperatorProcess,
    shard_process: ShardProcess,
    nats_server: NatsServer | ExistingNats,
    resources: Resources,
    nc: Client,
    namespace: str,
) -> None:
    """NatsConnections are not selected: both processes serve the namespace's connection and
    keep its finalizer, and it goes only after the Streams of both shards are gone."""
    prefix = namespace.replace("-", "_").upper()
    streams = {"a": f"{prefix}_A", "b": f"{prefix}_B"}
    with operator_variant(operator_process, JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=a"):
        shard_process(JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=b").start()
        resources.create("natsconnections", nats_connection("shared", [nats_server.url]))
        for shard, stream in streams.items():
            body = labelled_stream(f"on-{shard}", stream, shard)
            body["spec"]["connectionRef"] = "shared"
            resources.create("streams", body)

        async def all_ready() -> bool:
            names = [("natsconnections", "shared"), ("streams", "on-a"), ("streams", "on-b")]
            return all([await _ready(resources, name, plural) for plural, name in names])

        await eventually(all_ready, timeout=60)
        resources.delete("natsconnections", "shared")
        await asyncio.sleep(2)  # both processes' finalizers see it still in use
        assert resources.get("natsconnections", "shared") is not None
        resources.delete("streams", "on-a")
        await asyncio.sleep(2)
        assert resources.get("natsconnections", "shared") is not None
        assert await subjects_in_nats(nc, streams["b"]) is not None
        resources.delete("streams", "on-b")

        async def gone() -> bool:
            return resources.get("natsconnections", "shared") is None

        await eventually(gone, timeout=60)
        for stream in streams.values():
            assert await subjects_in_nats(nc, stream) is None


async def test_a_process_that_only_reads_connections_uses_them_and_writes_none(
    operator_process: OperatorProcess,
    shard_process: ShardProcess,
    reader_identity: Path,
    nats_server: NatsServer | ExistingNats,
    resources: Resources,
    nc: Client,
    namespace: str,
) -> None:
    """Shard b's process (JETSTREAM_OPERATOR_MANAGE_CONNECTIONS=false, with the chart's RBAC
    for it) serves its Stream through a NatsConnection no one manages yet, writes nothing to
    the connection, and repairs the stream's drift through it, also after a restart. Shard a's
    process then manages the connection, and the reading process leaves its finalizer alone:
    the connection goes only after shard b's Stream is deleted in NATS."""
    stream = namespace.replace("-", "_").upper() + "_ON_CONNECTION"
    reader = shard_process(
        reader_identity,
        JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=b",
        JETSTREAM_OPERATOR_MANAGE_CONNECTIONS="false",
    )
    # The session's process serves shard a only; until it is started again below, nothing but
    # the reading process may touch the connection.
    with operator_variant(operator_process, JETSTREAM_OPERATOR_SELECTOR=f"{SHARD}=a"):
        operator_process.stop()
        reader.start()
        resources.create("natsconnections", nats_connection("shared", [nats_server.url]))
        on_connection = labelled_stream("on-connection", stream, "b")
        on_connection["spec"]["connectionRef"] = "shared"
        resources.create("streams", on_connection)
        await eventually(lambda: _ready(resources, "on-connection"), timeout=60)
        connection = resources.get("natsconnections", "shared") or {}
        assert "status" not in connection, connection
        assert not connection["metadata"].get("finalizers"), connection

        async def recreated() -> bool:
            return await subjects_in_nats(nc, stream) is not None

        await JetStreamApi(nc).delete_stream(stream)  # drift, repaired through the connection
        await eventually(recreated, timeout=30)
        # Restarted with the Stream Ready as it is, which never asks for its connection: the
        # Stream's watch event must bring the connection, or its drift goes unrepaired.
        reader.stop()
        reader.start()
        await asyncio.sleep(2)
        await JetStreamApi(nc).delete_stream(stream)
        await eventually(recreated, timeout=30)
        assert "status" not in (resources.get("natsconnections", "shared") or {})

        operator_process.start()  # shard a's process, which manages connections

        async def managed() -> bool:
            body = resources.get("natsconnections", "shared") or {}
            return is_ready(body) and bool(body["metadata"].get("finalizers"))

        await eventually(managed, timeout=60)
        # A change the reading process sees, and its own start: kopf there would strip the
        # finalizer, were it watching connections.
        resources.annotate("natsconnections", "shared", {"example.com/touched": "yes"})
        reader.stop()
        reader.start()
        await asyncio.sleep(3)
        assert await managed()
        resources.delete("natsconnections", "shared")
        await asyncio.sleep(2)  # the manager's finalizer sees it still in use
        assert resources.get("natsconnections", "shared") is not None
        resources.delete("streams", "on-connection")

        async def gone() -> bool:
            return resources.get("natsconnections", "shared") is None

        await eventually(gone, timeout=60)
        assert await subjects_in_nats(nc, stream) is None
