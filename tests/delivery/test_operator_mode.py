"""The JWTs of `jetstream_operator.nats.jwt` against the real readers of NATS's decentralized auth:
nats-server in operator mode with a full resolver (`jetstream_devtools.natsauth`), the Go library
github.com/nats-io/jwt/v2 (`jwtcheck`) and the NATS CLI. What the operator will push for a
NatsAccount and issue for a NatsUser must be what these accept, and mean what we meant."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import ServiceUnavailableError

from jetstream_devtools.natsauth import UNLIMITED_ACCOUNT_LIMITS, OperatorKeys, write_secret
from jetstream_devtools.natsserver import NatsCluster, NatsServer
from jetstream_operator.nats import jwt
from tests.conftest import register_logs
from tests.support.natstools import account_info, jwtcheck

pytestmark = pytest.mark.go_tools("jwtcheck", "nats")

MIB = 1024 * 1024
JETSTREAM_LIMITS = {
    "mem_storage": -1,
    "disk_storage": 10 * MIB,
    "streams": 2,
    "consumer": -1,
}
"""Limits the tests read back from the server, so they must differ from the defaults."""
ALLOWED = "orders.>"


@dataclass(frozen=True)
class Account:
    """An account with a signing key (the key a NatsAccount issues its users with)."""

    seed: str
    signing_seed: str
    token: str

    @property
    def public(self) -> str:
        return jwt.public_key(self.seed)

    def user_jwt(self, user_seed: str, *, restricted: bool = True) -> str:
        """Restricted: publish to ALLOWED only (so not to the JetStream API either)."""
        publish = {"allow": [ALLOWED]} if restricted else {}
        subscribe = {"allow": [ALLOWED, "_INBOX.>"]} if restricted else {}
        claims = jwt.user_claims(self.public, publish, subscribe)
        return jwt.encode(jwt.public_key(user_seed), "app", claims, self.signing_seed)

    def user_creds(self, path: Path, *, restricted: bool = True) -> Path:
        seed = jwt.new_seed("user")
        token = self.user_jwt(seed, restricted=restricted)
        return write_secret(path, jwt.creds_file(token, seed))


def new_account(keys: OperatorKeys) -> Account:
    seed, signing_seed = jwt.new_seed("account"), jwt.new_seed("account")
    claims = {
        "limits": {**UNLIMITED_ACCOUNT_LIMITS, **JETSTREAM_LIMITS},
        "signing_keys": [jwt.public_key(signing_seed)],
        "default_permissions": {"pub": {}, "sub": {}},
        "type": "account",
    }
    token = jwt.encode(jwt.public_key(seed), "TEAM-A", claims, keys.signing_seed)
    return Account(seed, signing_seed, token)


async def push(url: str, system_creds: Path, token: str) -> dict[str, Any]:
    """The resolver's answer to an account JWT, sent as the operator will send it."""
    nc = await nats.connect(servers=[url], user_credentials=str(system_creds))
    try:
        reply = await nc.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=5)
    finally:
        await nc.close()
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


@dataclass(frozen=True)
class OperatorSystem:
    keys: OperatorKeys
    server: NatsServer
    system_creds: Path
    account: Account
    user_creds: Path
    admin_creds: Path
    """A user of the account without restrictions."""


@pytest.fixture(scope="module")
def operator_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorSystem]:
    """One operator-mode server for the module, and an account not yet pushed."""
    workdir = tmp_path_factory.mktemp("operator-mode")
    keys = OperatorKeys.generate()
    server = NatsServer(workdir, name="nats-op", operator_keys=keys)
    register_logs("operator_system", server.logs())
    server.start()
    try:
        creds = write_secret(workdir / "system.creds", keys.system_creds())
        account = new_account(keys)
        user = account.user_creds(workdir / "user.creds")
        admin = account.user_creds(workdir / "admin.creds", restricted=False)
        yield OperatorSystem(keys, server, creds, account, user, admin)
    finally:
        server.stop()


@pytest.fixture(scope="module")
async def pushed(operator_system: OperatorSystem) -> OperatorSystem:
    """The system with its account in the resolver, pushed once."""
    system = operator_system
    answer = await push(system.server.url, system.system_creds, system.account.token)
    assert answer.get("data", {}).get("code") == 200, answer
    assert answer["data"]["account"] == system.account.public
    return system


def test_the_config_names_each_nodes_own_resolver_dir(tmp_path: Path) -> None:
    keys = OperatorKeys.generate()
    cluster = NatsCluster(tmp_path, size=2, operator_keys=keys)
    configs = [node.render_config() for node in cluster.nodes]
    for node, config in zip(cluster.nodes, configs, strict=True):
        assert f'dir: "{node.resolver_dir}"' in config
        assert f"system_account: {json.dumps(keys.system_account_public)}" in config
    assert cluster.nodes[0].resolver_dir != cluster.nodes[1].resolver_dir
    assert "operator:" not in NatsServer(tmp_path).render_config()
    assert OperatorKeys.from_json(keys.to_json()) == keys


async def test_the_system_user_pushes_an_account(pushed: OperatorSystem) -> None:
    stored = pushed.server.resolver_dir / f"{pushed.account.public}.jwt"
    assert stored.read_text().strip() == pushed.account.token


async def test_a_user_of_the_account_has_its_permissions(pushed: OperatorSystem) -> None:
    errors: list[Exception] = []

    async def collect(error: Exception) -> None:
        errors.append(error)

    nc = await nats.connect(
        servers=[pushed.server.url], user_credentials=str(pushed.user_creds), error_cb=collect
    )
    try:
        subscription = await nc.subscribe(ALLOWED)
        await nc.publish("orders.new", b"one")
        message = await subscription.next_msg(timeout=5)
        assert message.data == b"one"
        await nc.publish("payments.new", b"two")
        await nc.flush()
        await wait_for(lambda: bool(errors), "a permissions violation")
    finally:
        await nc.close()
    text = " ".join(str(error) for error in errors).lower()
    assert "permissions violation for publish" in text and "payments.new" in text, errors


async def wait_for(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f}s")
        await asyncio.sleep(0.05)


def test_the_go_library_finds_no_blocking_issue(operator_system: OperatorSystem) -> None:
    keys, account = operator_system.keys, operator_system.account
    user_seed = jwt.new_seed("user")
    code, results = jwtcheck(
        keys.operator_jwt(),
        keys.system_account_jwt(),
        keys.system_user_jwt(),
        account.token,
        account.user_jwt(user_seed),
    )
    assert code == 0, results
    assert [result["type"] for result in results] == [
        "operator",
        "account",
        "user",
        "account",
        "user",
    ]
    assert [(result["subject"], result["issuer"]) for result in results] == [
        (keys.operator_public, keys.operator_public),
        (keys.system_account_public, keys.signing_public),
        (keys.system_user_public, keys.system_account_public),
        (account.public, keys.signing_public),
        (jwt.public_key(user_seed), jwt.public_key(account.signing_seed)),
    ]
    for result in results:
        assert result["error"] == "", result
        assert not [issue for issue in result["issues"] if issue["blocking"]], result


def test_the_go_library_refuses_a_tampered_token(operator_system: OperatorSystem) -> None:
    """A token whose claims were changed after signing (here: more streams) is refused; an
    expired one is reported."""
    system = operator_system
    header, _, signature = system.account.token.split(".")
    changed = jwt.decode(system.account.token)
    changed["nats"]["limits"]["streams"] = 1000
    forged = jwt.encode(changed["sub"], "TEAM-A", changed["nats"], jwt.new_seed("account"))
    swapped = ".".join([header, forged.split(".")[1], signature])
    user = jwt.new_seed("user")
    expired = jwt.encode(
        jwt.public_key(user),
        "old",
        jwt.user_claims(None, {}, {}),
        system.account.seed,
        issued_at=1000,
        expires_at=2000,
    )
    code, results = jwtcheck(system.keys.operator_jwt(), swapped, expired)
    assert code == 1, results
    assert results[0]["error"] == ""
    assert "signature" in results[1]["error"], results[1]
    assert results[2]["error"] == "", results[2]
    # Expiry is a time check, not blocking: the server, not the library, refuses the user.
    issues = [(i["description"], i["blocking"], i["time_check"]) for i in results[2]["issues"]]
    assert issues == [("claim is expired", False, True)], results[2]


def test_the_nats_cli_reads_the_pushed_limits(pushed: OperatorSystem, tmp_path: Path) -> None:
    usage, limits, text = account_info(pushed.server.url, pushed.admin_creds, tmp_path)
    assert ("Account", f"TEAM-A ({pushed.account.public})") in usage, text
    assert ("Storage", "0 B of 10 MiB") in limits, text
    assert ("Streams", "0 of 2") in limits, text


async def test_a_cluster_node_learns_an_account_pushed_to_another(tmp_path: Path) -> None:
    keys = OperatorKeys.generate()
    cluster = NatsCluster(tmp_path, size=3, operator_keys=keys)
    cluster.start()
    try:
        creds = write_secret(tmp_path / "system.creds", keys.system_creds())
        account = new_account(keys)
        answer = await push(cluster.nodes[0].url, creds, account.token)
        assert answer.get("data", {}).get("code") == 200, answer
        last = cluster.nodes[-1]
        stored = last.resolver_dir / f"{account.public}.jwt"
        await wait_for(stored.exists, f"{stored.name} in {last.name}'s resolver dir", 10.0)
        nc = await nats.connect(
            servers=[last.url],
            user_credentials=str(account.user_creds(tmp_path / "admin.creds", restricted=False)),
        )
        try:
            # The JWT reaches the node's resolver dir a moment before the node enables
            # JetStream for the account (10039 "JetStream not enabled" meanwhile).
            deadline = time.monotonic() + 20
            while True:
                try:
                    assert await stream_count(nc) == 0
                    break
                except ServiceUnavailableError:
                    assert time.monotonic() < deadline, "JetStream never enabled for the account"
                    await asyncio.sleep(0.2)
        finally:
            await nc.close()
    finally:
        cluster.stop()


async def stream_count(nc: Client) -> int:
    """Through JetStream, which only an account with JetStream limits has."""
    info = await nc.jetstream().account_info()
    assert info.limits.max_streams == JETSTREAM_LIMITS["streams"], info
    return int(info.streams)
