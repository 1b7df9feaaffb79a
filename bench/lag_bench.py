"""The cost of fresh lag at scale (#59): a NATS system in operator mode, a NatsAccount and a
ClusterNatsConnection into it, and STREAMS streams with CONSUMERS_PER_STREAM consumers each, all
opted in to per-resource metrics. Two ways for the operator to see every consumer on each pass
are compared on the same servers, alternated round by round, the operator restarted for each:

- monitoring: one JSZ request per pass through the account's system connection;
- listing: a CONSUMER.LIST request per stream per pass (JETSTREAM_OPERATOR_CONSUMERS_FROM_MONITORING
  =false).

Per round and way: JetStream API requests per pass (the servers' audit advisories), the
operator's RSS (now and peak), and the age of the lag shown: a sample of consumers is drained by
a client, which no advisory announces, and the time until /metrics shows them at 0 is taken.

    .venv/bin/python bench/lag_bench.py --streams 1000 --consumers-per-stream 10 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import nats
from harness import ApiAudit, save_result
from kubernetes import client
from servers import Bench
from watches import wait_ready, watching

from jetstream_devtools.figures import scrape
from jetstream_devtools.natsauth import OperatorKeys, write_secret
from jetstream_devtools.natsserver import NatsServer
from jetstream_operator.marks import CONNECTION_SECRET_LABEL, METRICS_LABEL
from jetstream_operator.nats import jwt
from jetstream_operator.nats.account_keys import OPERATOR_CREDS_KEY, AccountKeys, keys_secret_name

OWN = "jetstream-operator-system"
NAMESPACE = "lag"
ACCOUNT, SYSTEM, CONNECTION = "bench-account", "bench-system", "bench-account-conn"
RESYNC = 30.0
WAYS = ("monitoring", "listing")


def platform_objects(bench: Bench, keys: OperatorKeys) -> None:
    """The platform team's Secrets, system connection, NatsAccount and account connection."""
    bench.namespace(OWN)
    for name, values in (
        ("nats-operator-signing-key", {"seed": keys.signing_seed}),
        ("nats-system-user", {"user.creds": keys.system_creds()}),
    ):
        labels = {CONNECTION_SECRET_LABEL: "true"}
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, labels=labels), string_data=values
        )
        bench.core.create_namespaced_secret(OWN, secret)
    everyone: dict[str, Any] = {"namespaceSelector": {}}
    for plural, kind, name, spec in (
        (
            "clusternatsconnections",
            "ClusterNatsConnection",
            SYSTEM,
            {
                "servers": [bench.nats.url],
                "creds": {"secretName": "nats-system-user", "key": "user.creds"},
                "allowPlaintext": True,
                "systemAccount": True,
            },
        ),
        (
            "natsaccounts",
            "NatsAccount",
            ACCOUNT,
            {
                "systemConnectionRef": SYSTEM,
                "operatorSigningKey": {"secretName": "nats-operator-signing-key", "key": "seed"},
                "jetstream": {"fileStorage": 8 * 1024**3},
                **everyone,
            },
        ),
        (
            "clusternatsconnections",
            "ClusterNatsConnection",
            CONNECTION,
            {"servers": [bench.nats.url], "account": ACCOUNT, "allowPlaintext": True, **everyone},
        ),
    ):
        body = {"apiVersion": f"{bench.group}/{bench.version}", "kind": kind}
        bench.objects.create_cluster_custom_object(
            bench.group, bench.version, plural, {**body, "metadata": {"name": name}, "spec": spec}
        )


@dataclass(frozen=True)
class Creds:
    account: str
    """A user of the account without restrictions, signed with its signing key from the
    account's keys Secret: publishes, drains, and reads the account's audit."""
    account_key: str
    system: str


def the_account(bench: Bench) -> dict[str, Any]:
    found = bench.objects.get_cluster_custom_object(
        bench.group, bench.version, "natsaccounts", ACCOUNT
    )
    return cast(dict[str, Any], found)


def account_creds(bench: Bench, work: Path, keys: OperatorKeys) -> Creds:
    deadline = time.monotonic() + 120
    while True:
        try:
            secret = bench.core.read_namespaced_secret(keys_secret_name(ACCOUNT), OWN)
            account = the_account(bench)
            if (
                secret.data
                and OPERATOR_CREDS_KEY in secret.data
                and (account.get("status") or {}).get("publicKey")
            ):
                break
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(1)
    values = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    keys_of_account = AccountKeys.of(values)
    seed = jwt.new_seed("user")
    claims = jwt.user_claims(keys_of_account.public_key, {}, {})
    token = jwt.encode(jwt.public_key(seed), "bench", claims, keys_of_account.signing_seed)
    path = write_secret(work / "account.creds", jwt.creds_file(token, seed))
    account = the_account(bench)
    system = write_secret(work / "system.creds", keys.system_creds())
    return Creds(str(path), account["status"]["publicKey"], str(system))


def made_ready(bench: Bench, plural: str, kind: str, specs: dict[str, dict[str, Any]]) -> None:
    """Objects of one kind on the account's connection, by name, until all are Ready."""
    with watching([bench.watch(NAMESPACE, plural)]) as watches:
        bench.create_many(
            NAMESPACE,
            plural,
            [
                {
                    "kind": kind,
                    "metadata": {"name": name},
                    "spec": {**spec, "clusterConnectionRef": CONNECTION},
                }
                for name, spec in specs.items()
            ],
        )
        wait_ready(watches, len(specs))


def resources(bench: Bench, streams: int, per_stream: int) -> None:
    bench.namespace(NAMESPACE)
    bench.core.patch_namespace(NAMESPACE, {"metadata": {"labels": {METRICS_LABEL: "true"}}})
    made_ready(
        bench,
        "streams",
        "Stream",
        {f"s{i}": {"name": f"LAG_{i}", "subjects": [f"lag.{i}"]} for i in range(streams)},
    )
    made_ready(
        bench,
        "consumers",
        "Consumer",
        {
            f"s{i}-c{j}": {"streamRef": f"s{i}", "durableName": f"c{j}"}
            for i in range(streams)
            for j in range(per_stream)
        },
    )


async def publish_one_each(url: str, creds: str, streams: int) -> None:
    nc = await nats.connect(url, user_credentials=creds)
    js = nc.jetstream()
    for i in range(streams):
        await js.publish(f"lag.{i}", b"x")
    await nc.close()


async def drain(url: str, creds: str, sample: list[tuple[int, int]]) -> None:
    """Read and ack every message of the sampled consumers: their state moves, the streams'
    does not, and no advisory says so."""
    nc = await nats.connect(url, user_credentials=creds)
    js = nc.jetstream()
    for stream, consumer in sample:
        reader = await js.pull_subscribe_bind(f"c{consumer}", f"LAG_{stream}")
        while True:
            try:
                messages = await reader.fetch(100, timeout=1)
            except nats.errors.TimeoutError:
                break
            for message in messages:
                await message.ack()
        await reader.unsubscribe()
    await nc.close()


def pending_of(url: str, sample: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    wanted = {(f"LAG_{s}", f"c{c}"): (s, c) for s, c in sample}
    shown: dict[tuple[int, int], float] = {}
    for item in scrape(url, timeout=30):
        if item.name == "jetstream_operator_consumer_pending":
            key = (item.labels.get("stream", ""), item.labels.get("consumer", ""))
            if key in wanted:
                shown[wanted[key]] = item.value
    return shown


class JszRequests:
    """JSZ requests for the account, counted by a system-account subscriber to their subject
    (the JetStream audit does not see them: they are not JetStream API requests)."""

    def __init__(self, url: str, creds: str, account: str) -> None:
        self.count = 0
        self._stop = threading.Event()
        ready = threading.Event()

        async def run() -> None:
            nc = await nats.connect(url, user_credentials=creds)

            async def seen(_: Any) -> None:
                self.count += 1

            await nc.subscribe(f"$SYS.REQ.ACCOUNT.{account}.JSZ", cb=seen)
            await nc.flush()
            ready.set()
            while not self._stop.is_set():
                await asyncio.sleep(0.2)
            await nc.close()

        self._thread = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise TimeoutError("could not subscribe to the account's JSZ subject")

    def close(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.count


def peak_rss_mib(pid: int | None) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_way(
    bench: Bench, way: str, creds: Creds, streams: int, per_stream: int, passes: int
) -> dict[str, Any]:
    operator = bench.operator
    operator.stop()
    operator.extra_env["JETSTREAM_OPERATOR_CONSUMERS_FROM_MONITORING"] = str(
        way == "monitoring"
    ).lower()
    operator.start(timeout=600)
    metrics = f"http://127.0.0.1:{bench.metrics_port}/metrics"
    asyncio.run(publish_one_each(bench.nats.url, creds.account, streams))
    time.sleep(RESYNC * 2 + 5)  # the restart's first pass, then one that sees the messages
    sample = random.sample([(s, c) for s in range(streams) for c in range(per_stream)], 50)
    audit = ApiAudit([bench.nats.url], creds.account)
    jsz = JszRequests(bench.nats.url, creds.system, creds.account_key)
    try:
        started = time.monotonic()
        asyncio.run(drain(bench.nats.url, creds.account, sample))
        drained = time.monotonic()
        while True:
            shown = pending_of(metrics, sample)
            if len(shown) == len(sample) and not any(shown.values()):
                break
            if time.monotonic() - drained > 10 * RESYNC:
                raise TimeoutError(f"{way}: drained consumers not shown at 0: {shown}")
            time.sleep(1)
        age = time.monotonic() - drained
        time.sleep(max(0.0, started + passes * RESYNC - time.monotonic()))
        window = time.monotonic() - started
        counts = audit.snapshot()
    finally:
        audit.close()
        counts["JSZ (system account)"] = jsz.close()
    # A pass lists the streams in pages of 256, and the next starts RESYNC after it ended.
    per_pass = max(1.0, counts["STREAM.LIST"] / math.ceil(streams / 256))
    return {
        "way": way,
        "shown_after_s": round(age, 1),
        "window_s": round(window, 1),
        "passes": per_pass,
        "requests_per_pass": {op: round(n / per_pass, 1) for op, n in sorted(counts.items())},
        "requests_per_pass_total": round(sum(counts.values()) / per_pass, 1),
        "rss_mib": round(bench.operator_rss_mib(), 1),
        "peak_rss_mib": round(peak_rss_mib(operator.pid), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--consumers-per-stream", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3, help="passes counted per way")
    args = parser.parse_args()
    keys = OperatorKeys.generate()
    rows: list[dict[str, Any]] = []
    setup: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="jso-lag-") as directory:
        work = Path(directory)
        bench = Bench(work)
        bench.nats = NatsServer(work / "nats", operator_keys=keys)
        default_creds = write_secret(work / "default.creds", keys.default_creds())
        try:
            bench.start(
                extra_env={
                    "JETSTREAM_OPERATOR_OWN_NAMESPACE": OWN,
                    "JETSTREAM_OPERATOR_NATS_CREDS_FILE": str(default_creds),
                    "JETSTREAM_OPERATOR_RESYNC_INTERVAL": str(RESYNC),
                    # Every resource has series of its own (the default cap is 10,000).
                    "JETSTREAM_OPERATOR_RESOURCE_METRICS_LIMIT": str(
                        2 * args.streams * (args.consumers_per_stream + 1)
                    ),
                }
            )
            began = time.monotonic()
            platform_objects(bench, keys)
            creds = account_creds(bench, work, keys)
            resources(bench, args.streams, args.consumers_per_stream)
            setup["all Ready (s)"] = round(time.monotonic() - began, 1)
            for round_index in range(args.rounds):
                ways = WAYS if round_index % 2 == 0 else WAYS[::-1]
                for way in ways:
                    row = one_way(
                        bench, way, creds, args.streams, args.consumers_per_stream, args.passes
                    )
                    row["round"] = round_index + 1
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            bench.stop()
    report = render(args, setup, rows)
    print(report)
    path = save_result("lag", report)
    print(f"saved {path}", file=sys.stderr)


def render(args: argparse.Namespace, setup: dict[str, float], rows: list[dict[str, Any]]) -> str:
    consumers = args.streams * args.consumers_per_stream
    lines = [
        f"# Lag at {consumers} opted-in consumers on {args.streams} streams "
        f"({args.rounds} rounds, {args.passes} passes of {RESYNC:.0f} s per way)",
        "",
        f"Setup: {setup}",
        "",
        "| way | drained shown after (s), median [min-max] | JetStream API requests per pass "
        "| RSS MiB (median) | peak RSS MiB (max) |",
        "|---|---|---|---|---|",
    ]
    for way in WAYS:
        mine = [row for row in rows if row["way"] == way]
        if not mine:
            continue
        ages = [row["shown_after_s"] for row in mine]
        totals = [row["requests_per_pass_total"] for row in mine]
        lines.append(
            f"| {way} | {statistics.median(ages):.1f} [{min(ages):.1f}-{max(ages):.1f}] "
            f"| {statistics.median(totals):.1f} ({mine[-1]['requests_per_pass']}) "
            f"| {statistics.median(row['rss_mib'] for row in mine):.0f} "
            f"| {max(row['peak_rss_mib'] for row in mine):.0f} |"
        )
    lines += ["", "Raw rows:", "", *(f"    {json.dumps(row)}" for row in rows)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
