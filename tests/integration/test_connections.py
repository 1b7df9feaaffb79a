"""NatsConnection: every authentication method and TLS against real nats-servers configured for
them, two accounts side by side, failures explained in status, and fixes taking effect without
a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes import client
from nats.aio.client import RawCredentials

from jetstream_devtools import pki
from jetstream_devtools.natsserver import NatsServer
from jetstream_operator.marks import CONNECTION_SECRET_LABEL
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.natsauth import OperatorMode, new_identity, operator_mode
from tests.support.operator import operator_variant

from .figures import ApiAudit
from .helpers import Resources, condition, eventually, is_ready, json_body
from .helpers import nats_connection as connection

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

ALICE_PASSWORD = "alice-Pa55-w0rd-xyz"
BOB_PASSWORD = "bob-Pa55-w0rd-uvw"
TOKEN = "t0ken-9f8e7d6c5b4a"
NKEY_USER = new_identity("user")
SECRET_VALUES = (ALICE_PASSWORD, BOB_PASSWORD, TOKEN, NKEY_USER.seed)


def _server(workdir: Path, extra: str) -> Iterator[NatsServer]:
    server = NatsServer(workdir, extra_config=extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def accounts_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    extra = f"""
accounts {{
  A: {{ jetstream: enabled, users: [
        {{user: alice, password: "{ALICE_PASSWORD}"}},
        {{nkey: "{NKEY_USER.public}"}} ] }}
  B: {{ jetstream: enabled, users: [ {{user: bob, password: "{BOB_PASSWORD}"}} ] }}
}}
"""
    yield from _server(tmp_path_factory.mktemp("nats-accounts"), extra)


@pytest.fixture(scope="module")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("nats-tls")
    ca = pki.create_ca("nats-test-ca")
    server_cert, server_key = pki.issue_serving_cert(ca, "nats").write(directory, "server")
    ca_file = directory / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    client_cred = pki.issue_cert(ca, "operator", client=True)
    return {
        "dir": directory,
        "ca": ca,
        "ca_file": ca_file,
        "server_cert": server_cert,
        "server_key": server_key,
        "client": client_cred,
    }


@pytest.fixture(scope="module")
def tls_token_nats(
    tmp_path_factory: pytest.TempPathFactory, tls_material: dict[str, Any]
) -> Iterator[NatsServer]:
    extra = f"""
tls {{ cert_file: "{tls_material["server_cert"]}", key_file: "{tls_material["server_key"]}",
      ca_file: "{tls_material["ca_file"]}", verify: true }}
authorization {{ token: "{TOKEN}" }}
"""
    yield from _server(tmp_path_factory.mktemp("nats-tls-server"), extra)


@pytest.fixture(scope="module")
def operator_mode_nats(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NatsServer, OperatorMode]]:
    mode = operator_mode()
    for server in _server(tmp_path_factory.mktemp("nats-operator-mode"), mode.server_config()):
        yield server, mode


def put_secret(
    api: client.ApiClient,
    namespace: str,
    name: str,
    data: dict[str, str],
    labelled: bool = True,
) -> None:
    """A Secret for connections: labelled for them unless `labelled` is False."""
    core = client.CoreV1Api(api)
    labels = {CONNECTION_SECRET_LABEL: "true"} if labelled else {}
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, labels=labels), string_data=data)
    try:
        core.create_namespaced_secret(namespace, body)
    except client.ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def stream(name: str, stream_name: str, connection_ref: str) -> dict[str, Any]:
    return {
        "kind": "Stream",
        "metadata": {"name": name},
        "spec": {"name": stream_name, "connectionRef": connection_ref},
    }


async def ready(resources: Resources, plural: str, name: str) -> bool:
    return is_ready(resources.get(plural, name))


async def stream_exists(stream_name: str, **connect: Any) -> bool:
    nc = await nats.connect(**connect)
    try:
        return await JetStreamApi(nc).stream_info(stream_name) is not None
    finally:
        await nc.close()


async def test_user_password_connection_with_account_status(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    put_secret(api_client, namespace, "alice", {"username": "alice", "password": ALICE_PASSWORD})
    resources.create(
        "natsconnections",
        connection("account-a", [accounts_nats.url], userPassword={"secretName": "alice"}),
    )
    await eventually(lambda: ready(resources, "natsconnections", "account-a"))
    status = (resources.get("natsconnections", "account-a") or {})["status"]
    assert status["serverVersion"].startswith("2.12")
    assert status["account"]["maxStreams"] == -1
    resources.create("streams", stream("in-a", "SHARED", "account-a"))
    await eventually(lambda: ready(resources, "streams", "in-a"))
    assert await stream_exists(
        "SHARED", servers=[accounts_nats.url], user="alice", password=ALICE_PASSWORD
    )


async def test_two_accounts_keep_same_named_streams_apart(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    put_secret(api_client, namespace, "bob", {"username": "bob", "password": BOB_PASSWORD})
    resources.create(
        "natsconnections",
        connection("account-b", [accounts_nats.url], userPassword={"secretName": "bob"}),
    )
    resources.create("streams", stream("in-b", "SHARED", "account-b"))
    await eventually(lambda: ready(resources, "streams", "in-b"))
    nc = await nats.connect(servers=[accounts_nats.url], user="bob", password=BOB_PASSWORD)
    try:
        info = await JetStreamApi(nc).stream_info("SHARED")
        assert info is not None
        assert info["config"]["metadata"]["jetstream-operator.io/owner"].startswith(
            f"{namespace}/in-b/"
        )
    finally:
        await nc.close()


async def test_streams_applied_with_their_connection_are_repaired(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    """A Stream handled before its new connection's own handler records the connection's target
    first; the connection's drift watcher must start then too. It did not: streams applied
    together with their connections were never repaired (0 of 6 here) until a restart."""
    put_secret(api_client, namespace, "alice", {"username": "alice", "password": ALICE_PASSWORD})
    pairs = range(6)
    for index in pairs:
        resources.create("streams", stream(f"s{index}", f"TOGETHER{index}", f"acc{index}"))
        resources.create(
            "natsconnections",
            connection(f"acc{index}", [accounts_nats.url], userPassword={"secretName": "alice"}),
        )

    async def all_ready() -> bool:
        return all(is_ready(resources.get("streams", f"s{index}")) for index in pairs)

    await eventually(all_ready, timeout=60)
    alice: dict[str, Any] = {
        "servers": [accounts_nats.url],
        "user": "alice",
        "password": ALICE_PASSWORD,
    }
    nc = await nats.connect(**alice)
    try:
        for index in pairs:
            await JetStreamApi(nc).delete_stream(f"TOGETHER{index}")
    finally:
        await nc.close()

    async def all_recreated() -> bool:
        missing = [i for i in pairs if not await stream_exists(f"TOGETHER{i}", **alice)]
        assert not missing, f"streams not recreated: {missing}"
        return True

    await eventually(all_recreated, timeout=30)


async def test_connection_of_another_namespace_cannot_be_used(
    resources: Resources, namespace: str
) -> None:
    resources.create("streams", stream("borrower", "BORROWED", "account-a"))

    async def refused() -> dict[str, Any] | None:
        ready_condition = condition(resources.get("streams", "borrower"))
        return ready_condition if ready_condition.get("reason") == "ConnectionNotFound" else None

    ready_condition = await eventually(refused)
    assert f"namespace {namespace!r}" in ready_condition["message"]


async def test_nkey_connection(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    put_secret(api_client, namespace, "nkey", {"seed": NKEY_USER.seed})
    resources.create(
        "natsconnections",
        connection("by-nkey", [accounts_nats.url], nkey={"secretName": "nkey", "key": "seed"}),
    )
    resources.create("streams", stream("nkeyed", "NKEYED", "by-nkey"))
    await eventually(lambda: ready(resources, "streams", "nkeyed"))
    assert await stream_exists(
        "NKEYED", servers=[accounts_nats.url], user="alice", password=ALICE_PASSWORD
    )


async def test_token_over_tls_with_client_certificate(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    tls_token_nats: NatsServer,
    tls_material: dict[str, Any],
) -> None:
    client_cred = tls_material["client"]
    put_secret(
        api_client,
        namespace,
        "tls",
        {
            "ca.crt": tls_material["ca"].cert_pem.decode(),
            "tls.crt": client_cred.cert_pem.decode(),
            "tls.key": client_cred.key_pem.decode(),
        },
    )
    put_secret(api_client, namespace, "token", {"token": TOKEN})
    url = tls_token_nats.url.replace("nats://", "tls://")
    resources.create(
        "natsconnections",
        connection(
            "secure",
            [url],
            token={"secretName": "token", "key": "token"},
            tls={"secretName": "tls", "certKey": "tls.crt", "keyKey": "tls.key"},
        ),
    )
    resources.create("streams", stream("guarded", "GUARDED", "secure"))
    await eventually(lambda: ready(resources, "streams", "guarded"), timeout=30)


async def test_bad_ca_is_explained(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    tls_token_nats: NatsServer,
    tls_material: dict[str, Any],
) -> None:
    other_ca = pki.create_ca("someone-else")
    client_cred = tls_material["client"]
    put_secret(
        api_client,
        namespace,
        "wrong-ca",
        {
            "ca.crt": other_ca.cert_pem.decode(),
            "tls.crt": client_cred.cert_pem.decode(),
            "tls.key": client_cred.key_pem.decode(),
        },
    )
    put_secret(api_client, namespace, "token", {"token": TOKEN})
    url = tls_token_nats.url.replace("nats://", "tls://")
    resources.create(
        "natsconnections",
        connection(
            "mistrust",
            [url],
            token={"secretName": "token", "key": "token"},
            tls={"secretName": "wrong-ca", "certKey": "tls.crt", "keyKey": "tls.key"},
        ),
    )

    async def explained() -> dict[str, Any] | None:
        found = condition(resources.get("natsconnections", "mistrust"))
        return found if found.get("reason") == "TLSFailed" else None

    found = await eventually(explained, timeout=30)
    assert "CA certificate" in found["message"]


@pytest.mark.parametrize("system_cas", [None, ""])
async def test_ca_key_null_or_empty_verifies_with_the_system_cas(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    tls_token_nats: NatsServer,
    system_cas: str | None,
) -> None:
    """Kept as written by the API server (no ca.crt default put in its place), so the operator
    reads no CA from the Secret: the test CA is not among the system's, hence TLSFailed."""
    put_secret(api_client, namespace, "no-ca", {"unrelated": "x"})
    put_secret(api_client, namespace, "token", {"token": TOKEN})
    url = tls_token_nats.url.replace("nats://", "tls://")
    created = resources.create(
        "natsconnections",
        connection(
            "system-cas",
            [url],
            token={"secretName": "token", "key": "token"},
            tls={"secretName": "no-ca", "caKey": system_cas},
        ),
    )
    assert created["spec"]["tls"] == {"secretName": "no-ca", "caKey": system_cas}
    stored = resources.get("natsconnections", "system-cas") or {}
    assert stored["spec"]["tls"]["caKey"] == system_cas

    async def explained() -> dict[str, Any] | None:
        found = condition(resources.get("natsconnections", "system-cas"))
        return found if found.get("reason") == "TLSFailed" else None

    found = await eventually(explained, timeout=30)
    assert "ca.crt" not in found["message"]


async def test_creds_file_in_operator_mode(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    operator_mode_nats: tuple[NatsServer, OperatorMode],
) -> None:
    server, mode = operator_mode_nats
    creds = mode.creds("operator-user")
    put_secret(api_client, namespace, "creds", {"user.creds": creds})
    resources.create(
        "natsconnections",
        connection("jwt", [server.url], creds={"secretName": "creds", "key": "user.creds"}),
    )
    resources.create("streams", stream("jwt-stream", "JWTSTREAM", "jwt"))
    await eventually(lambda: ready(resources, "streams", "jwt-stream"), timeout=30)
    nc = await nats.connect(servers=[server.url], user_credentials=RawCredentials(creds))
    try:
        assert await JetStreamApi(nc).stream_info("JWTSTREAM") is not None
    finally:
        await nc.close()


async def test_expired_creds_are_explained(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    operator_mode_nats: tuple[NatsServer, OperatorMode],
) -> None:
    server, mode = operator_mode_nats
    put_secret(api_client, namespace, "old", {"user.creds": mode.creds("old", expires=1000)})
    resources.create(
        "natsconnections",
        connection("stale", [server.url], creds={"secretName": "old", "key": "user.creds"}),
    )

    async def refused() -> dict[str, Any] | None:
        found = condition(resources.get("natsconnections", "stale"))
        return found if found.get("reason") in ("CredentialsExpired", "AuthFailed") else None

    found = await eventually(refused, timeout=30)
    assert "credentials" in found["message"]


async def test_wrong_password_is_explained_and_fixing_the_secret_heals(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    put_secret(api_client, namespace, "typo", {"username": "alice", "password": "nope"})
    resources.create(
        "natsconnections",
        connection("typo", [accounts_nats.url], userPassword={"secretName": "typo"}),
    )
    resources.create("streams", stream("waiting", "WAITING", "typo"))

    async def auth_failed() -> dict[str, Any] | None:
        found = condition(resources.get("natsconnections", "typo"))
        return found if found.get("reason") == "AuthFailed" else None

    found = await eventually(auth_failed, timeout=30)
    assert "refused the credentials" in found["message"]

    async def stream_says_why() -> bool:
        return condition(resources.get("streams", "waiting")).get("reason") == (
            "ConnectionNotReady"
        )

    await eventually(stream_says_why, timeout=30)
    put_secret(api_client, namespace, "typo", {"username": "alice", "password": ALICE_PASSWORD})
    await eventually(lambda: ready(resources, "natsconnections", "typo"), timeout=40)
    await eventually(lambda: ready(resources, "streams", "waiting"), timeout=60)


async def test_a_secret_not_labelled_for_connections_is_not_used(
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    """Only a Secret its owner labelled for connections is used: a NatsConnection cannot send
    the contents of any other Secret of the namespace to a server."""
    secret = {"username": "alice", "password": ALICE_PASSWORD}
    put_secret(api_client, namespace, "unmarked", secret, labelled=False)
    resources.create(
        "natsconnections",
        connection("unmarked", [accounts_nats.url], userPassword={"secretName": "unmarked"}),
    )

    async def refused() -> dict[str, Any] | None:
        found = condition(resources.get("natsconnections", "unmarked"))
        return found if found.get("reason") == "SecretProblem" else None

    message = (await eventually(refused, timeout=30))["message"]
    assert f"Secret {namespace}/unmarked is not labelled for connections" in message
    assert f"{CONNECTION_SECRET_LABEL}=true" in message and ALICE_PASSWORD not in message
    client.CoreV1Api(api_client).patch_namespaced_secret(
        "unmarked", namespace, {"metadata": {"labels": {CONNECTION_SECRET_LABEL: "true"}}}
    )
    await eventually(lambda: ready(resources, "natsconnections", "unmarked"), timeout=40)


async def test_recheck_asks_jetstream_only_when_something_changed(
    operator_process: Any,
    resources: Resources,
    api_client: client.ApiClient,
    namespace: str,
    accounts_nats: NatsServer,
) -> None:
    """Secrets re-read every second, account usage due once a minute: a steady connection
    costs no JetStream request, a stream made through it is counted at once, and a rotated
    password still takes effect within seconds."""
    put_secret(api_client, namespace, "steady", {"username": "alice", "password": ALICE_PASSWORD})
    watcher = await nats.connect(accounts_nats.url, user="alice", password=ALICE_PASSWORD)
    # Only this namespace, so no other test's connection asks account A anything.
    with operator_variant(
        operator_process,
        JETSTREAM_OPERATOR_NAMESPACES=namespace,
        JETSTREAM_OPERATOR_CONNECTION_CHECK_INTERVAL="1",
        JETSTREAM_OPERATOR_STATUS_INTERVAL="60",
    ):
        try:
            resources.create(
                "natsconnections",
                connection("steady", [accounts_nats.url], userPassword={"secretName": "steady"}),
            )
            await eventually(lambda: ready(resources, "natsconnections", "steady"), timeout=30)
            audit = await ApiAudit().start(watcher)
            await asyncio.sleep(6)  # six rechecks
            await watcher.flush()
            await audit.stop()
            assert audit.count("INFO") == 0, audit.subjects

            # A stream made through it is counted in its status within a recheck, not at the
            # next account refresh a minute later.
            def account_streams() -> int:
                resource = resources.get("natsconnections", "steady")
                assert resource is not None
                status = resource.get("status") or {}
                return int((status.get("account") or {}).get("streams", -1))

            streams_before = account_streams()
            resources.create("streams", stream("counted", "COUNTED", "steady"))
            await eventually(lambda: ready(resources, "streams", "counted"), timeout=30)

            async def counted() -> bool:
                return account_streams() == streams_before + 1

            await eventually(counted, timeout=5)

            put_secret(api_client, namespace, "steady", {"username": "alice", "password": "no"})

            async def auth_failed() -> bool:
                found = condition(resources.get("natsconnections", "steady"))
                return found.get("reason") == "AuthFailed"

            await eventually(auth_failed, timeout=10)
            put_secret(
                api_client, namespace, "steady", {"username": "alice", "password": ALICE_PASSWORD}
            )
            await eventually(lambda: ready(resources, "natsconnections", "steady"), timeout=10)
        finally:
            await watcher.close()


def test_no_secret_value_reaches_logs_events_or_status(
    operator_process: Any, api_client: client.ApiClient
) -> None:
    """Runs after the tests above in this module: scan everything the operator said."""
    log = Path(operator_process.log_file).read_text(errors="replace")
    events = client.CoreV1Api(api_client).list_event_for_all_namespaces().items
    said = [log, *(f"{event.reason} {event.message}" for event in events)]
    objects = client.CustomObjectsApi(api_client)
    for plural in ("natsconnections", "streams"):
        listed = json_body(
            objects.list_cluster_custom_object("jetstream-operator.io", "v1alpha1", plural)
        )
        said += [str(item.get("status")) for item in listed["items"]]
    for value in SECRET_VALUES:
        assert all(value not in text for text in said), "a secret value leaked"
