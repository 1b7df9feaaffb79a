"""Reading a live account for export: every stream with its consumers, over one connection.

The connection is the operator's default one (JETSTREAM_OPERATOR_NATS_URL and its mounted
credentials, or --server), or a NatsConnection resolved with its Secrets as the operator does.
"""

from __future__ import annotations

import fnmatch
import logging

import kopf

from .. import GROUP, VERSION
from ..api.connection import NatsConnectionSpec
from ..handlers.connection_check import resolve
from ..k8s.client import KubeApi, Login
from ..k8s.login import credentials
from ..k8s.secrets import SecretReader
from ..nats.jsapi import JetStreamApi
from ..nats.pool import ConnectionPool, ConnectionTarget
from ..settings import OperatorSettings, default_target
from .manifests import StreamWithConsumers


def target_from_settings(server: str | None) -> ConnectionTarget:
    """The operator's default connection; --server replaces only its URLs."""
    settings = OperatorSettings()
    if server:
        settings = settings.model_copy(update={"nats_url": server})
    return default_target(settings)


def client_login() -> kopf.ConnectionInfo:
    """Credentials as the `kubernetes` client finds them (in-cluster, else the kubeconfig with
    its exec and auth-provider plugins), as `kubectl` users expect of a command. The client is
    not a dependency (the `kubeconfig` extra brings it); without it, the operator's own login:
    a pod's service account, else the kubeconfig's tokens and certificates."""
    settings = kopf.OperatorSettings()
    info = kopf.login_via_client(logger=logging.getLogger(__name__), settings=settings)
    return info if info is not None else credentials(settings)


async def target_from_resource(
    namespace: str, name: str, login: Login = client_login
) -> ConnectionTarget:
    """A NatsConnection read through the kubeconfig, with the Secrets it names."""
    async with KubeApi(login) as api:
        body = await api.request(
            "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/natsconnections/{name}"
        )
        spec = NatsConnectionSpec.model_validate(body.get("spec") or {})
        return await resolve(spec, namespace, name, SecretReader(api))


async def read_account(api: JetStreamApi, match: str = "*") -> list[StreamWithConsumers]:
    """Streams whose name matches the glob, each with its consumers."""
    found: list[StreamWithConsumers] = []
    for info in await api.list_streams():
        name = str(info["config"]["name"])
        if fnmatch.fnmatchcase(name, match):
            found.append(StreamWithConsumers(info, await api.list_consumers(name)))
    return found


async def read_target(target: ConnectionTarget, match: str = "*") -> list[StreamWithConsumers]:
    pool = ConnectionPool()
    try:
        return await read_account(await pool.jetstream(target), match)
    finally:
        await pool.close()
