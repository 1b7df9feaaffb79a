"""Capture the Argo CD health fixtures from real resources: `python -m
tests.delivery.capture_argocd_fixtures` (from the repository root, with the venv's Python).

Starts a kube-apiserver, etcd, nats-server and the operator, drives Streams, Consumers and
NatsConnections into each state the health check must recognise, and writes them to
fixtures/argocd/. Rerun it when the operator's status changes shape; the expectations live in
test_argocd_health.py.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import yaml
from kubernetes import client

from jetstream_devtools.controlplane import ControlPlane
from jetstream_devtools.crds import install_api
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.operator_process import OperatorProcess

from .helpers import GROUP, new_client

FIXTURES = Path(__file__).parent / "fixtures" / "argocd"
VERSION = "v1alpha1"
NAMESPACE = "argocd"
KINDS = {"streams": "Stream", "consumers": "Consumer", "natsconnections": "NatsConnection"}
FAST = {
    "JETSTREAM_OPERATOR_RESYNC_INTERVAL": "2",
    "JETSTREAM_OPERATOR_RETRY_BASE_DELAY": "0.5",
    "JETSTREAM_OPERATOR_RETRY_MAX_DELAY": "2",
}


class Capture:
    def __init__(self, api: client.ApiClient, out: Path) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.out = out

    def create(
        self,
        plural: str,
        name: str,
        spec: dict[str, Any],
        annotations: dict[str, str] | None = None,
    ) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KINDS[plural],
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        }
        self.objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, body)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        found = self.objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, plural, name)
        assert isinstance(found, dict)
        return found

    def wait(
        self, plural: str, name: str, done: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.get(plural, name)
            if done(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"{plural}/{name}: {found.get('status')}")
            time.sleep(0.3)

    def save(self, file_name: str, obj: dict[str, Any]) -> None:
        metadata = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
        obj = {**obj, "metadata": metadata}
        header = f"# Captured from a real {obj['kind']} (operator, kube-apiserver, nats-server)\n"
        (self.out / file_name).write_text(header + yaml.safe_dump(obj, sort_keys=False))
        print(self.out / file_name)


def condition_is(kind: str, status: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c.get("type") == kind and c.get("status") == status for c in conditions)

    return check


def reason_is(kind: str, reason: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c.get("type") == kind and c.get("reason") == reason for c in conditions)

    return check


async def _unowned_stream(url: str) -> None:
    connection = await nats.connect(url)
    try:
        await connection.jetstream().add_stream(name="LEGACY", subjects=["legacy.>"])
    finally:
        await connection.close()


def capture(workdir: Path, out: Path) -> None:
    plane = ControlPlane(workdir / "controlplane")
    server = NatsServer(workdir / "nats", name="nats")
    plane.start()
    server.start()
    try:
        api = new_client(plane.kubeconfig)
        install_api(api)
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": NAMESPACE}))
        asyncio.run(_unowned_stream(server.url))
        take = Capture(api, out)
        operator = OperatorProcess(
            plane.kubeconfig, server.url, workdir / "operator.log", extra_env=FAST
        )
        memory = {"storage": "memory"}

        take.create("streams", "orders-no-status", {"name": "ORDERS_NS", "subjects": ["ns.>"]})
        take.save("stream-no-status.yaml", take.get("streams", "orders-no-status"))
        operator.start()
        take.create("streams", "orders", {"name": "ORDERS", "subjects": ["orders.>"], **memory})
        ready = take.wait("streams", "orders", condition_is("Ready", "True"))
        take.save("stream-ready.yaml", ready)
        take.create(
            "streams",
            "orders-paused",
            {"name": "ORDERS_P", "subjects": ["paused.>"], **memory},
            {f"{GROUP}/paused": "true"},
        )
        paused = take.wait("streams", "orders-paused", reason_is("Ready", "Paused"))
        take.save("stream-paused.yaml", paused)
        take.create("streams", "legacy", {"name": "LEGACY", "subjects": ["legacy.>"]})
        conflict = take.wait("streams", "legacy", condition_is("Stalled", "True"))
        take.save("stream-conflict.yaml", conflict)
        take.create("consumers", "worker", {"durableName": "worker", "streamRef": "orders"})
        worker = take.wait("consumers", "worker", condition_is("Ready", "True"))
        take.save("consumer-ready.yaml", worker)
        take.create("consumers", "early", {"durableName": "early", "streamRef": "not-yet"})
        waiting = take.wait("consumers", "early", condition_is("Reconciling", "True"))
        take.save("consumer-waiting-for-stream.yaml", waiting)
        servers = {"servers": [server.url]}
        take.create("natsconnections", "local", servers)
        connected = take.wait("natsconnections", "local", condition_is("Ready", "True"))
        take.save("natsconnection-ready.yaml", connected)
        # A server on loopback: plain text is allowed for it (admission refuses it otherwise).
        creds = {"secretName": "no-such-secret", "key": "nats.creds"}
        missing = {**servers, "creds": creds, "allowPlaintext": True}
        take.create("natsconnections", "missing-secret", missing)
        stalled = take.wait("natsconnections", "missing-secret", condition_is("Stalled", "True"))
        take.save("natsconnection-secret-missing.yaml", stalled)
        operator.stop()

        # The spec changes while no operator runs: generation ahead of observedGeneration.
        take.objects.patch_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "streams", "orders", {"spec": {"maxMsgs": 1000}}
        )
        take.save("stream-generation-ahead.yaml", take.get("streams", "orders"))

        operator.nats_url = "nats://127.0.0.1:1"  # nothing listens there
        operator.start()
        take.create("streams", "orders-unreachable", {"name": "ORDERS_U", "subjects": ["u.>"]})
        reconciling = condition_is("Reconciling", "True")
        unreachable = take.wait("streams", "orders-unreachable", reconciling)
        take.save("stream-nats-unavailable.yaml", unreachable)
        operator.stop()
    finally:
        server.stop()
        plane.stop()


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="argocd-fixtures-") as workdir:
        capture(Path(workdir), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
