"""The specs of issue 13 that never settled, against the real nats-server and operator.

Each is Ready and then quiet: the server's own API audit advisories ($JS.EVENT.ADVISORY.API)
show no create or update for it over several resyncs (the session operator resyncs every 2s).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from nats.aio.client import Client
from nats.aio.msg import Msg

from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator_process")]

AUDIT_SUBJECT = "$JS.EVENT.ADVISORY.API"
_WRITES = ("$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE.", "$JS.API.CONSUMER.CREATE.")
QUIET_SECONDS = 7.0
"""More than three resyncs of the session operator (2s)."""


class ApiAudit:
    """Counts the JetStream writes the server itself reports, per target (stream or
    stream.consumer), from its API audit advisories: independent of the operator's books."""

    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.requests: dict[str, list[str]] = {}

    async def on_advisory(self, message: Msg) -> None:
        advisory = json.loads(message.data)
        subject = str(advisory.get("subject", ""))
        for prefix in _WRITES:
            if subject.startswith(prefix):
                target = subject[len(prefix) :]
                self.writes[target] += 1
                self.requests.setdefault(target, []).append(str(advisory.get("request", "")))

    def reset(self) -> None:
        self.writes.clear()
        self.requests.clear()

    def churn(self, targets: list[str]) -> dict[str, int]:
        """The targets written to since the last reset, with how often."""
        return {target: self.writes[target] for target in targets if self.writes[target]}


@pytest.fixture
async def audit(nc: Client) -> AsyncIterator[ApiAudit]:
    recorder = ApiAudit()
    subscription = await nc.subscribe(AUDIT_SUBJECT, cb=recorder.on_advisory)
    await nc.flush()
    try:
        yield recorder
    finally:
        await subscription.unsubscribe()


async def assert_quiet(audit: ApiAudit, targets: list[str], nc: Client) -> None:
    """No JetStream write for any target over several resyncs."""
    await nc.flush()
    audit.reset()
    await asyncio.sleep(QUIET_SECONDS)
    await nc.flush()
    churn = audit.churn(targets)
    assert not churn, f"updates while in sync: {churn}; last requests: " + str(
        {target: audit.requests[target][-1][:400] for target in churn}
    )


def stream(name: str, stream_name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream_name, **spec}}


async def ready(resources: Resources, plural: str, name: str) -> None:
    async def probe() -> bool:
        resource = resources.get(plural, name)
        assert is_ready(resource), f"{plural}/{name}: {condition(resource)}"
        return True

    await eventually(probe, timeout=30)


async def server_config(nc: Client, stream_name: str) -> dict[str, Any]:
    info = await JetStreamApi(nc).stream_info(stream_name)
    assert info is not None
    return dict(info["config"])


async def test_known_cases_settle_and_stay_quiet(
    resources: Resources, nc: Client, audit: ApiAudit
) -> None:
    jetstream = JetStreamApi(nc)
    # NACK made this one: memory storage, no owner. The spec leaves storage out.
    await jetstream.create_stream({"name": "SETTLE_NACK", "storage": "memory"})
    await jetstream.create_stream({"name": "SETTLE_ORIGIN", "allow_direct": True})
    cases: dict[str, tuple[str, dict[str, Any]]] = {
        "schedules": ("SETTLE_SCHED", {"allowMsgSchedules": True}),
        "sealed-on-create": ("SETTLE_SEALED", {"sealed": True, "maxAge": "1h"}),
        "sealed-schedules": ("SETTLE_SEALED_SCHED", {"sealed": True, "allowMsgSchedules": True}),
        "to-seal": ("SETTLE_TO_SEAL", {"maxAge": "1h", "allowRollup": True}),
        "mirror": ("SETTLE_MIRROR", {"mirror": {"name": "SETTLE_ORIGIN"}}),
        "sources": ("SETTLE_SOURCES", {"sources": [{"name": "SETTLE_ORIGIN"}], "maxAge": "30s"}),
        "nack": ("SETTLE_NACK", {"adoption": "IfUnowned"}),
    }
    for name, (stream_name, spec) in cases.items():
        resources.create("streams", stream(name, stream_name, **spec))
    resources.create(
        "consumers",
        {
            "kind": "Consumer",
            "metadata": {"name": "ackwait0"},
            "spec": {"durableName": "ACKWAIT0", "streamName": "SETTLE_SCHED", "ackWait": "0"},
        },
    )
    for name in cases:
        await ready(resources, "streams", name)
    await ready(resources, "consumers", "ackwait0")

    # Sealing an existing stream: the server rewrites five fields, which is now the desired state.
    resources.patch_spec("streams", "to-seal", {"sealed": True})
    await ready(resources, "streams", "to-seal")

    scheduled = await server_config(nc, "SETTLE_SCHED")
    assert scheduled["allow_msg_schedules"] and scheduled["allow_rollup_hdrs"]
    for sealed_name in ("SETTLE_SEALED", "SETTLE_TO_SEAL", "SETTLE_SEALED_SCHED"):
        sealed = await server_config(nc, sealed_name)
        assert sealed["sealed"] and sealed["deny_delete"] and sealed["deny_purge"]
        assert sealed["discard"] == "new" and not sealed.get("max_age")
    assert (await server_config(nc, "SETTLE_NACK"))["storage"] == "memory"
    assert (await server_config(nc, "SETTLE_MIRROR")).get("mirror_direct") is True
    consumer = await jetstream.consumer_info("SETTLE_SCHED", "ACKWAIT0")
    assert consumer is not None and consumer["config"]["ack_wait"] == 30_000_000_000

    targets = [stream_name for stream_name, _ in cases.values()] + ["SETTLE_SCHED.ACKWAIT0"]
    # The audit sees the operator's writes: the creates and the seal at least.
    assert audit.writes["SETTLE_SCHED"] >= 1 and audit.writes["SETTLE_TO_SEAL"] >= 2
    await assert_quiet(audit, targets, nc)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"denyPurge": True, "allowRollup": True}, "allowRollup needs the purge permission"),
        ({"allowMsgSchedules": True, "denyPurge": True}, "allowMsgSchedules needs rollups"),
        ({"allowMsgSchedules": True, "discard": "new"}, "allowMsgSchedules needs rollups"),
        ({"allowMsgCounter": True, "allowMsgTtl": True}, "allowMsgCounter needs retention"),
        ({"allowMsgCounter": True, "retention": "interest"}, "allowMsgCounter needs retention"),
        ({"mirror": {"name": "X"}, "firstSequence": 5}, "a mirror copies its origin"),
        ({"persistMode": "async", "storage": "memory"}, "persistMode: async needs file"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value),
)
def test_combinations_the_server_refuses_are_refused_at_admission(
    resources: Resources, spec: dict[str, Any], words: str
) -> None:
    with pytest.raises(ApiException) as refused:
        resources.create("streams", stream("refused", "SETTLE_REFUSED", **spec))
    assert refused.value.status == 422
    assert words in str(refused.value.body)
