"""The API audit as a real nats-server sends it: a stream deleted by another client is reported
through the audit itself (the STREAM.DELETED advisory is sometimes lost by the server), and the
operator's own deletions and refused requests are not."""

from __future__ import annotations

import asyncio
import uuid

import nats
import pytest
from nats.aio.client import Client

from jetstream_devtools.natsserver import NatsServer
from jetstream_operator.metrics import REGISTRY
from jetstream_operator.nats.advisories import subscribe_changes
from jetstream_operator.nats.jsapi import JetStreamApi
from tests.support.targets import ExistingNats

from .helpers import eventually

pytestmark = [pytest.mark.integration]


def audited_deletions() -> float:
    """Deletions recognised in the audit alone: the counter only that path increments."""
    value = REGISTRY.get_sample_value(
        "jetstream_operator_advisories_total", {"about": "api audit", "action": "STREAM.DELETE"}
    )
    return value or 0.0


async def test_deletions_are_read_from_the_real_audit_by_who_made_them(
    nats_server: NatsServer | ExistingNats, nc: Client
) -> None:
    ours = nc
    streams_seen: list[str] = []
    consumers_seen: list[tuple[str, str]] = []

    async def on_stream(name: str, action: str) -> None:
        streams_seen.append(name)

    async def on_consumer(stream: str, name: str, action: str) -> None:
        consumers_seen.append((stream, name))

    await subscribe_changes(ours, on_stream, on_consumer)
    await ours.flush()
    suffix = uuid.uuid4().hex[:8].upper()
    theirs_name, ours_name = f"AUDIT_THEIRS_{suffix}", f"AUDIT_OURS_{suffix}"
    theirs = await nats.connect(nats_server.url)
    try:
        their_api, our_api = JetStreamApi(theirs), JetStreamApi(ours)
        await their_api.create_stream({"name": theirs_name, "subjects": [f"{theirs_name}.>"]})
        await our_api.create_stream({"name": ours_name, "subjects": [f"{ours_name}.>"]})
        before = audited_deletions()

        await our_api.delete_stream(ours_name)
        # Refused (no such stream): nothing to repair.
        assert not await their_api.delete_stream(f"AUDIT_NONE_{suffix}")
        await their_api.delete_stream(theirs_name)

        # Their deletion is counted once, from the audit; its advisory may add a second call.
        await eventually(lambda: _at_least(audited_deletions(), before + 1), timeout=10)
        await asyncio.sleep(0.5)  # time for a wrong second count to arrive
        assert audited_deletions() == before + 1
        assert theirs_name in streams_seen
        assert f"AUDIT_NONE_{suffix}" not in streams_seen
    finally:
        await theirs.close()


async def _at_least(value: float, wanted: float) -> bool:
    return value >= wanted
