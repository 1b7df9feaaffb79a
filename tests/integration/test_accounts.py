"""NatsAccount and NatsUser against a real nats-server in operator mode (full resolver, system
account) and the real API server: the account is pushed and kept, streams are made inside it
through a ClusterNatsConnection naming it, and real clients use the creds files NatsUsers
get: what the user may do works, what it may not is refused by the server, a deleted user is
refused at once, and a rotation leaves no gap."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from jetstream_devtools.figures import scrape
from jetstream_operator.api.kinds import NATS_USER
from jetstream_operator.nats import jwt
from tests.support.natstools import account_info, jwtcheck
from tests.support.spark_jobs import LOCAL_SESSION

from .accounts_env import (
    EXAMPLE_URL,
    EXAMPLES,
    SEED,
    AccountSystem,
    account_spec,
    cluster_object,
    connected,
    create_cluster_object,
    delete_cluster_object,
    nats_user,
    orders_stream,
    ready,
    user_creds,
)
from .figures import difference
from .helpers import (
    Resources,
    condition,
    empty_namespace,
    event_posted,
    eventually,
    patch_spec_past_admission,
    policies_out_of_effect,
    refused_with,
)

pytestmark = [pytest.mark.integration, pytest.mark.go_tools("jwtcheck", "nats")]


async def test_the_account_is_pushed_and_a_user_gets_only_what_it_declared(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    account = await ready(
        lambda: cluster_object(api_client, "natsaccounts", account_system.account)
    )
    assert account["status"]["publicKey"].startswith("A")
    assert "jwt updated" in account["status"]["serverAnswer"]
    assert not SEED.search(json.dumps(account["status"]))
    resources.create("streams", orders_stream(team))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create(
        "natsusers",
        nats_user(
            "shop", streams=[{"name": "orders", "access": "ReadWrite"}], publish=[f"{team}.x"]
        ),
    )
    user = await ready(lambda: resources.get("natsusers", "shop"))
    assert user["status"]["account"] == account["status"]["publicKey"]
    creds = user_creds(api_client, team, user["status"]["secretName"], tmp_path / "shop.creds")

    errors: list[str] = []
    async with connected(account_system.server.url, creds, errors) as nc:
        js = nc.jetstream()
        ack = await js.publish(f"{team}.orders.1", b"one")
        assert ack.stream == f"{team}-orders"
        reader = await js.subscribe(f"{team}.orders.>", ordered_consumer=True)
        message = await reader.next_msg(timeout=5)
        assert message.data == b"one"
        await nc.publish("elsewhere.orders", b"nope")
        await nc.flush()
        await eventually(lambda: _async(any("permissions violation" in e for e in errors)))
    assert any('"elsewhere.orders"' in error for error in errors), errors


async def _async(value: Any) -> Any:
    return value


async def test_tools_no_one_here_wrote_agree(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    """The Go JWT library validates the account's JWT as the resolver holds it and the user's
    from its Secret, and the nats CLI, with the user's creds file, reads the account's limits."""
    resources.create("streams", orders_stream(team))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create(
        "natsusers", nats_user("reader", streams=[{"name": "orders", "access": "Read"}])
    )
    user = await ready(lambda: resources.get("natsusers", "reader"))
    creds = user_creds(api_client, team, user["status"]["secretName"], tmp_path / "reader.creds")
    account_key = user["status"]["account"]
    errors: list[str] = []
    system_creds = tmp_path / "system.creds"
    system_creds.write_text(account_system.keys.system_creds())
    async with connected(account_system.server.url, system_creds, errors) as nc:
        lookup = f"$SYS.REQ.ACCOUNT.{account_key}.CLAIMS.LOOKUP"
        account_token = (await nc.request(lookup, b"", timeout=5)).data.decode()
    user_token = creds.read_text().split("-----\n")[1].split("\n")[0]
    code, results = jwtcheck(account_token, user_token)
    assert code == 0, results
    assert [(result["type"], result["subject"]) for result in results] == [
        ("account", account_key),
        ("user", user["status"]["publicKey"]),
    ]
    assert results[0]["issuer"] == account_system.keys.signing_public
    for result in results:
        assert not [issue for issue in result["issues"] if issue["blocking"]], result
    usage, limits, text = account_info(account_system.server.url, creds, tmp_path)
    limit = dict(limits)
    assert limit["Storage"].startswith("0 B of 10 MiB"), text
    assert limit["Memory"].startswith("0 B of 1.0 MiB"), text
    assert limit["Streams"] == "1 of 2", text
    assert dict(usage)["Stream Requires Max Bytes Set"] == "true", text
    assert dict(usage)["Streams"] == "1", text


SPARK_JOB = (
    LOCAL_SESSION
    + """
servers, stream, creds = sys.argv[1:4]
for method in ("consumer", "direct"):
    rows = (
        spark.read.format("jetstream")
        .option("servers", servers)
        .option("stream", stream)
        .option("credsFile", creds)
        .option("readMethod", method)
        .load()
        .select("subject", "data")
        .collect()
    )
    print(method, "ROWS", sorted((row.subject, bytes(row.data).decode()) for row in rows))
spark.stop()
"""
)


async def test_a_spark_job_reads_a_teams_stream_with_a_users_creds(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    """The jetstream data source, in a Spark job of its own, reads with the creds file of a
    NatsUser allowed to read the stream, by pull consumer and by direct get."""
    resources.create("streams", orders_stream(team, allowDirect=True))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create(
        "natsusers", nats_user("analytics", streams=[{"name": "orders", "access": "ReadWrite"}])
    )
    user = await ready(lambda: resources.get("natsusers", "analytics"))
    creds = user_creds(api_client, team, user["status"]["secretName"], tmp_path / "analytics.creds")
    errors: list[str] = []
    async with connected(account_system.server.url, creds, errors) as nc:
        for index in range(3):
            await nc.jetstream().publish(f"{team}.orders.{index}", f"order-{index}".encode())
    job = tmp_path / "read_orders.py"
    job.write_text(SPARK_JOB)
    expected = [(f"{team}.orders.{index}", f"order-{index}") for index in range(3)]
    ran = await asyncio.create_subprocess_exec(
        sys.executable,
        str(job),
        account_system.server.url,
        f"{team}-orders",
        str(creds),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(ran.communicate(), timeout=240)
    assert ran.returncode == 0, err.decode()[-3000:]
    for method in ("consumer", "direct"):
        assert f"{method} ROWS {expected!r}" in out.decode(), out.decode()[-2000:]


async def test_the_account_limits_are_the_servers(
    account_system: AccountSystem, team: str, resources: Resources
) -> None:
    """The account allows two streams and 10 MiB on disk: a third stream, or one asking for
    more, is refused by the server with its reason, and the others stay as they were."""
    resources.create("streams", orders_stream(team))
    resources.create(
        "streams",
        orders_stream(team, name=f"{team}-audit", subjects=[f"{team}.audit"])
        | {"metadata": {"name": "audit"}},
    )
    await ready(lambda: resources.get("streams", "orders"))
    await ready(lambda: resources.get("streams", "audit"))
    resources.create(
        "streams",
        orders_stream(team, name=f"{team}-third", subjects=[f"{team}.third"])
        | {"metadata": {"name": "third"}},
    )
    third = condition(
        await eventually(
            lambda: _async(
                (found := resources.get("streams", "third"))
                and condition(found).get("status") == "False"
                and found
            )
        )
    )
    assert "maximum number of streams" in third["message"].lower(), third
    assert condition(resources.get("streams", "orders"))["status"] == "True"


async def test_a_deleted_user_is_refused_at_once(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    resources.create("streams", orders_stream(team))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create("natsusers", nats_user("leaver", streams=[{"name": "orders"}]))
    user = await ready(lambda: resources.get("natsusers", "leaver"))
    creds = user_creds(api_client, team, user["status"]["secretName"], tmp_path / "leaver.creds")
    errors: list[str] = []
    async with connected(account_system.server.url, creds, errors) as nc:
        await nc.flush()
    resources.delete("natsusers", "leaver")

    async def refused() -> bool:
        try:
            async with connected(account_system.server.url, creds, errors):
                return False
        except Exception as error:
            return "Authorization Violation" in str(error)

    await eventually(refused, timeout=10)


async def test_rotation_leaves_no_gap(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    tmp_path: Path,
) -> None:
    """New credentials after the rotation period, the old ones valid until they expire: a
    client publishing all along, reconnecting with the new Secret, is never refused."""
    resources.create("streams", orders_stream(team))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create(
        "natsusers",
        nats_user(
            "rotating",
            streams=[{"name": "orders", "access": "Publish"}],
            validFor="60s",
            rotationPeriod="4s",
        ),
    )
    first = await ready(lambda: resources.get("natsusers", "rotating"))
    secret = first["status"]["secretName"]
    old_creds = user_creds(api_client, team, secret, tmp_path / "old.creds")
    errors: list[str] = []
    acknowledged = 0
    async with connected(account_system.server.url, old_creds, errors) as nc:
        js = nc.jetstream()

        async def rotated() -> dict[str, Any] | None:
            nonlocal acknowledged
            await js.publish(f"{team}.orders.during", b"x")
            acknowledged += 1
            found = resources.get("natsusers", "rotating")
            status = (found or {}).get("status") or {}
            return found if status.get("publicKey") != first["status"]["publicKey"] else None

        second = await eventually(rotated, timeout=30, interval=0.2)
    assert second["status"]["previous"]["publicKey"] == first["status"]["publicKey"]
    await event_posted(api_client, team, "rotating", "Rotated")
    new_creds = user_creds(api_client, team, secret, tmp_path / "new.creds")
    assert new_creds.read_text() != old_creds.read_text()
    for creds in (old_creds, new_creds):  # both valid within the window
        async with connected(account_system.server.url, creds, errors) as nc:
            await nc.jetstream().publish(f"{team}.orders.after", b"y")
    assert not errors, errors
    assert acknowledged > 5


async def test_an_account_changed_or_removed_out_of_band_is_pushed_again(
    api_client: client.ApiClient, account_system: AccountSystem
) -> None:
    """Someone pushes other claims for the account (with the signing key), then deletes it
    from the resolver (with the operator key, as nsc would): each time the declared account is
    back within a few connection checks."""
    account = await ready(
        lambda: cluster_object(api_client, "natsaccounts", account_system.account)
    )
    public_key = account["status"]["publicKey"]
    keys = account_system.keys
    system_creds = Path(account_system.server.workdir) / "system-test.creds"
    system_creds.write_text(keys.system_creds())
    changed = jwt.encode(
        public_key,
        account_system.account,
        {"type": "account", "limits": {"conn": 1}, "signing_keys": []},
        keys.signing_seed,
    )
    removal = jwt.encode(
        keys.operator_public,
        "delete",
        {"accounts": [public_key], "type": "generic"},
        keys.operator_seed,
    )
    lookup = f"$SYS.REQ.ACCOUNT.{public_key}.CLAIMS.LOOKUP"
    errors: list[str] = []
    async with connected(account_system.server.url, system_creds, errors) as nc:

        async def restored() -> bool:
            held = (await nc.request(lookup, b"", timeout=5)).data.decode()
            return bool(held) and bool(jwt.decode(held)["nats"].get("signing_keys"))

        for subject, request in (
            ("$SYS.REQ.CLAIMS.UPDATE", changed),
            ("$SYS.REQ.CLAIMS.DELETE", removal),
        ):
            answer = json.loads((await nc.request(subject, request.encode(), timeout=5)).data)
            assert answer["data"]["code"] == 200, answer
            assert not await restored()
            await eventually(restored, timeout=20)
    await event_posted(api_client, "default", account_system.account, "Repushed", timeout=20)


async def test_a_user_asking_beyond_its_account_is_refused_naming_the_subject(
    account_system: AccountSystem, team: str, resources: Resources
) -> None:
    resources.create("natsusers", nats_user("greedy", subscribe=["other-team.secrets.>"]))
    message = await refused_with(resources, "natsusers", "greedy", "SubjectNotAllowed")
    assert "'other-team.secrets.>'" in message


async def test_an_account_whose_resolver_cannot_be_reached_waits(
    api_client: client.ApiClient, account_system: AccountSystem
) -> None:
    name = "unreachable-account"
    create_cluster_object(
        api_client,
        "natsaccounts",
        {"kind": "NatsAccount", "metadata": {"name": name}, "spec": account_spec("no-such")},
    )
    try:

        async def waiting() -> dict[str, Any] | None:
            ready = condition(cluster_object(api_client, "natsaccounts", name))
            return ready if ready.get("reason") == "ResolverUnreachable" else None

        ready = await eventually(waiting)
        assert ready["status"] == "False"
        reconciling = condition(cluster_object(api_client, "natsaccounts", name), "Reconciling")
        assert reconciling.get("status") == "True"
        # One Warning, however many jittered retries follow (2 s apart at first, then longer).
        warning = await event_posted(api_client, "default", name, "ResolverUnreachable")
        assert warning.type == "Warning"
        await asyncio.sleep(10)
        warnings = [
            event
            for event in client.CoreV1Api(api_client).list_namespaced_event("default").items
            if event.involved_object.name == name and event.type == "Warning"
        ]
        assert [(e.reason, e.count or 1) for e in warnings] == [("ResolverUnreachable", 1)]
        secret = client.CoreV1Api(api_client).read_namespaced_secret(
            f"natsaccount-{name}", account_system.own_namespace
        )
        assert secret.data is not None
        assert secret.data["account.seed"]  # kept: the account will be this one when pushed
    finally:
        delete_cluster_object(api_client, "natsaccounts", name)
        await asyncio.sleep(0)


async def test_no_seed_reaches_the_log_status_or_events(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    process_logs: dict[str, Path],
) -> None:
    """After a user is issued, rotated and revoked (this module's tests ran before), the
    operator's log, the users' status and every Event hold public keys at most."""
    resources.create("natsusers", nats_user("quiet", validFor="30s", rotationPeriod="2s"))
    first = await ready(lambda: resources.get("natsusers", "quiet"))
    await event_posted(api_client, team, "quiet", "Rotated", timeout=20)
    resources.delete("natsusers", "quiet")
    await event_posted(api_client, team, "quiet", "Revoked", timeout=20)
    assert first["status"]["publicKey"].startswith("U")
    assert not SEED.search(json.dumps(first))
    events = client.CoreV1Api(api_client).list_event_for_all_namespaces().items
    assert not [event.message for event in events if SEED.search(event.message or "")]
    assert not SEED.search(process_logs["operator"].read_text())


async def test_a_revocation_records_when_the_revoked_credentials_expire(
    api_client: client.ApiClient, account_system: AccountSystem, resources: Resources, team: str
) -> None:
    """Credentials with validFor are revoked until they expire; the keys Secret says when, so a
    later pass drops the revocation (AccountKeys.without_expired) instead of keeping it for
    ever. Credentials without validFor are revoked for good."""
    resources.create("natsusers", nats_user("brief", validFor="1h"))
    resources.create("natsusers", nats_user("lasting"))
    brief = await ready(lambda: resources.get("natsusers", "brief"))
    lasting = await ready(lambda: resources.get("natsusers", "lasting"))
    resources.delete("natsusers", "brief")
    resources.delete("natsusers", "lasting")
    await event_posted(api_client, team, "brief", "Revoked", timeout=20)
    await event_posted(api_client, team, "lasting", "Revoked", timeout=20)
    secret = client.CoreV1Api(api_client).read_namespaced_secret(
        f"natsaccount-{account_system.account}", account_system.own_namespace
    )
    data = secret.data or {}
    revoked = json.loads(base64.b64decode(data["revocations.json"]))
    expiries = json.loads(base64.b64decode(data["revocation-expiries.json"]))
    brief_key, lasting_key = brief["status"]["publicKey"], lasting["status"]["publicKey"]
    assert brief_key in revoked and lasting_key in revoked
    expires_at = datetime.fromisoformat(brief["status"]["expiresAt"].replace("Z", "+00:00"))
    assert expiries[brief_key] == int(expires_at.timestamp())
    assert lasting_key not in expiries


async def test_the_shipped_example_works(
    api_client: client.ApiClient,
    account_system: AccountSystem,
    kubectl: Path,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """examples/accounts, applied as `make run AUTH=jwt` applies it (the server's URL put in):
    the account, the team's stream and consumer and its user all become Ready, and the
    application's creds publish and pull."""
    manifests = "\n---\n".join(
        path.read_text().replace(EXAMPLE_URL, account_system.server.url)
        for path in sorted(EXAMPLES.glob("*.yaml"))
    )
    command = [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"]
    applied = subprocess.run(
        command, input=manifests, capture_output=True, text=True, timeout=60, check=False
    )
    assert applied.returncode == 0, applied.stderr
    team = Resources(api_client, "team-a")
    try:
        await ready(lambda: cluster_object(api_client, "natsaccounts", "team-a"))
        for plural, name in (("streams", "orders"), ("consumers", "orders-worker")):
            await ready(lambda plural=plural, name=name: team.get(plural, name))
        user = await ready(lambda: team.get("natsusers", "orders-app"))
        creds = user_creds(
            api_client, "team-a", user["status"]["secretName"], tmp_path / "app.creds"
        )
        errors: list[str] = []
        async with connected(account_system.server.url, creds, errors) as nc:
            js = nc.jetstream()
            await js.publish("team-a.orders.1", b"first")
            worker = await js.pull_subscribe_bind("orders-worker", "team-a-orders")
            [message] = await worker.fetch(1, timeout=5)
            await message.ack()
            assert message.data == b"first"
        assert not errors, errors
    finally:
        empty_namespace(api_client, "team-a")
        for plural, name in (
            ("clusternatsconnections", "team-a"),
            ("natsaccounts", "team-a"),
            ("clusternatsconnections", "nats-system"),
        ):
            delete_cluster_object(api_client, plural, name)


def _requests(plane: Any) -> Counter[str]:
    """Requests the API server served so far for Secrets and the two kinds, by verb and
    resource (its own apiserver_request_total)."""
    counted: Counter[str] = Counter()
    for sample in scrape(f"{plane.url}/metrics", plane.ssl_context()):
        resource = sample.labels.get("resource")
        if sample.name == "apiserver_request_total" and resource in QUIET_RESOURCES:
            where = (
                f"{resource}/{sample.labels['subresource']}"
                if sample.labels.get("subresource")
                else str(resource)
            )
            counted[f"{sample.labels.get('verb')} {where}"] += int(sample.value)
    return counted


QUIET_RESOURCES = ("secrets", "natsusers", "natsaccounts", "events")


async def test_settled_accounts_and_users_cost_no_kubernetes_request(
    account_system: AccountSystem,
    team: str,
    resources: Resources,
    control_plane: Any,
) -> None:
    """Over three recheck intervals (2 s here) of a Ready NatsAccount and NatsUser, the API
    server serves nothing for them: no status written, no Event, no Secret read but the two
    ClusterNatsConnections' own rechecks (one read each per interval: rotated credentials are
    noticed so, docs/connections.md)."""
    resources.create("streams", orders_stream(team))
    await ready(lambda: resources.get("streams", "orders"))
    resources.create("natsusers", nats_user("settled", streams=[{"name": "orders"}]))
    await ready(lambda: resources.get("natsusers", "settled"))
    await asyncio.sleep(2.5)  # the Ready write and its Event are behind us
    before = _requests(control_plane)
    await asyncio.sleep(6.5)
    after = _requests(control_plane)
    changed = difference(after, before)
    reads = changed.pop("GET secrets", 0)
    # kube-controller-manager's garbage collector looks up the owner of the user's Secret;
    # the operator never GETs these kinds (its watch streams them).
    changed.pop("GET natsusers", None)
    assert changed == {}
    assert reads <= 2 * 4, reads  # two connections, at most four rechecks each in 6.5 s


async def test_a_users_account_cannot_change(
    api_client: client.ApiClient, account_system: AccountSystem, team: str, resources: Resources
) -> None:
    """Admission refuses moving a NatsUser to another account; where the policy is missing,
    the operator refuses it too (ImmutableFieldChanged) and issues nothing anew."""
    resources.create("natsusers", nats_user("mover"))
    issued = await ready(lambda: resources.get("natsusers", "mover"))
    with pytest.raises(ApiException) as refused:
        resources.patch_spec("natsusers", "mover", {"accountRef": "other-team"})
    assert "spec.accountRef is immutable" in str(refused.value.body)
    with policies_out_of_effect(api_client, [NATS_USER]):
        patch_spec_past_admission(resources, "natsusers", "mover", {"accountRef": "other-team"})
        message = await refused_with(resources, "natsusers", "mover", "ImmutableFieldChanged")
    assert "'team-accounts'" in message
    after = resources.get("natsusers", "mover")
    assert after is not None
    assert after["status"]["publicKey"] == issued["status"]["publicKey"]
