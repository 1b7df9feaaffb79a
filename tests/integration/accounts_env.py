"""The operator-mode NATS system that the account tests share: a server with a full resolver,
the platform team's Secrets, a system connection, a NatsAccount and a ClusterNatsConnection into
it, with the session's operator running knowing its own namespace."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client

from jetstream_devtools.natsauth import OperatorKeys
from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.operator_process import OperatorProcess
from jetstream_operator import GROUP, VERSION
from jetstream_operator.marks import CONNECTION_SECRET_LABEL
from tests.support.operator import operator_variant

from .helpers import condition, eventually, json_body

SEED = re.compile(r"S[OAU][A-Z2-7]{56}")
"""An NKey seed, which no status, Event or log may show."""
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "accounts"
EXAMPLE_URL = "nats://127.0.0.1:4222"
EXAMPLE_OWN_NAMESPACE = "jetstream-operator-system"
"""Where `dev up --auth jwt` puts the signing key and system user Secrets, as here."""
TEAM_LABEL = "jetstream-operator.io/test-account"
SIGNING_SECRET = "nats-operator-signing-key"
SYSTEM_SECRET = "nats-system-user"


@dataclass(frozen=True)
class AccountSystem:
    """An operator-mode server, and the platform team's objects for one account on it."""

    server: NatsServer
    keys: OperatorKeys
    own_namespace: str
    account: str
    connection: str


def cluster_api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def create_cluster_object(api_client: client.ApiClient, plural: str, body: dict[str, Any]) -> None:
    cluster_api(api_client).create_cluster_custom_object(
        GROUP, VERSION, plural, {"apiVersion": f"{GROUP}/{VERSION}", **body}
    )


def cluster_object(api_client: client.ApiClient, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return json_body(
            cluster_api(api_client).get_cluster_custom_object(GROUP, VERSION, plural, name)
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def delete_cluster_object(api_client: client.ApiClient, plural: str, name: str) -> None:
    with contextlib.suppress(ApiException):
        cluster_api(api_client).delete_cluster_custom_object(GROUP, VERSION, plural, name)


def labelled_secret(namespace: str, name: str, values: dict[str, str]) -> client.V1Secret:
    return client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, labels={CONNECTION_SECRET_LABEL: "true"}
        ),
        string_data=values,
    )


def account_spec(system: str, **spec: Any) -> dict[str, Any]:
    return {
        "systemConnectionRef": system,
        "operatorSigningKey": {"secretName": SIGNING_SECRET, "key": "seed"},
        "namespaceSelector": {"matchLabels": {TEAM_LABEL: "yes"}},
        "userSubjectPrefixes": ["{namespace}."],
        "jetstream": {
            "fileStorage": 10 * 1024 * 1024,
            "memoryStorage": 1024 * 1024,
            "streams": 2,
            "consumers": 10,
            "maxBytesRequired": True,
        },
        **spec,
    }


@pytest.fixture(scope="module")
def account_system(
    api_client: client.ApiClient,
    operator_process: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
    process_logs: dict[str, Path],
) -> Iterator[AccountSystem]:
    """A server in operator mode, the platform team's Secrets in the operator's namespace, a
    system connection, a NatsAccount and a ClusterNatsConnection into it; the session's
    operator runs knowing its namespace, rechecking every 2 s."""
    keys = OperatorKeys.generate()
    server = NatsServer(tmp_path_factory.mktemp("nats-op"), name="nats-op", operator_keys=keys)
    process_logs["nats-operator-mode"] = server.log_file
    server.start()
    core = client.CoreV1Api(api_client)
    own = EXAMPLE_OWN_NAMESPACE
    with contextlib.suppress(ApiException):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=own)))
    for name, values in (
        (SIGNING_SECRET, {"seed": keys.signing_seed}),
        (SYSTEM_SECRET, {"user.creds": keys.system_creds()}),
    ):
        with contextlib.suppress(ApiException):
            core.delete_namespaced_secret(name, own)
        core.create_namespaced_secret(own, labelled_secret(own, name, values))
    system, account, connection = "acct-system", "team-accounts", "team-accounts-conn"
    create_cluster_object(
        api_client,
        "clusternatsconnections",
        {
            "kind": "ClusterNatsConnection",
            "metadata": {"name": system},
            "spec": {
                "servers": [server.url],
                "creds": {"secretName": SYSTEM_SECRET, "key": "user.creds"},
                "allowPlaintext": True,
                "systemAccount": True,
            },
        },
    )
    create_cluster_object(
        api_client,
        "natsaccounts",
        {"kind": "NatsAccount", "metadata": {"name": account}, "spec": account_spec(system)},
    )
    create_cluster_object(
        api_client,
        "clusternatsconnections",
        {
            "kind": "ClusterNatsConnection",
            "metadata": {"name": connection},
            "spec": {
                "servers": [server.url],
                "account": account,
                "allowPlaintext": True,
                "namespaceSelector": {"matchLabels": {TEAM_LABEL: "yes"}},
            },
        },
    )
    try:
        with operator_variant(
            operator_process,
            JETSTREAM_OPERATOR_OWN_NAMESPACE=own,
            JETSTREAM_OPERATOR_CONNECTION_CHECK_INTERVAL="2",
        ):
            yield AccountSystem(server, keys, own, account, connection)
            for name in (connection, system):
                delete_cluster_object(api_client, "clusternatsconnections", name)
            delete_cluster_object(api_client, "natsaccounts", account)
    finally:
        for plural, name in (
            ("clusternatsconnections", connection),
            ("clusternatsconnections", system),
            ("natsaccounts", account),
        ):
            with contextlib.suppress(ApiException):
                cluster_api(api_client).patch_cluster_custom_object(
                    GROUP, VERSION, plural, name, {"metadata": {"finalizers": None}}
                )
            delete_cluster_object(api_client, plural, name)
        server.stop()


@pytest.fixture
def team(api_client: client.ApiClient, namespace: str, account_system: AccountSystem) -> str:
    """The test's namespace, served by the account."""
    client.CoreV1Api(api_client).patch_namespace(
        namespace, {"metadata": {"labels": {TEAM_LABEL: "yes"}}}
    )
    return namespace


async def ready(fetch: Any, timeout: float = 30.0) -> dict[str, Any]:
    async def ready() -> dict[str, Any] | None:
        resource = fetch()
        return resource if condition(resource).get("status") == "True" else None

    return dict(await eventually(ready, timeout=timeout))


def user_creds(api_client: client.ApiClient, namespace: str, name: str, path: Path) -> Path:
    secret = client.CoreV1Api(api_client).read_namespaced_secret(name, namespace)
    assert secret.data is not None
    path.write_text(base64.b64decode(secret.data["user.creds"]).decode())
    return path


@contextlib.asynccontextmanager
async def connected(url: str, creds: Path, errors: list[str]) -> AsyncIterator[Client]:
    async def record(error: Exception) -> None:
        errors.append(str(error))

    connection = await nats.connect(
        url, user_credentials=str(creds), error_cb=record, allow_reconnect=False
    )
    try:
        yield connection
    finally:
        await connection.close()


def orders_stream(team: str, **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Stream",
        "metadata": {"name": "orders"},
        "spec": {
            "name": f"{team}-orders",
            "subjects": [f"{team}.orders.>"],
            "maxBytes": 1024 * 1024,
            "clusterConnectionRef": "team-accounts-conn",
            **spec,
        },
    }


def nats_user(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "kind": "NatsUser",
        "metadata": {"name": name},
        "spec": {"accountRef": "team-accounts", **spec},
    }
