"""Out-of-band changes made straight to NATS are put back, by advisory within about a second,
and by the periodic resync when no advisory arrives."""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client

from jetstream_operator.nats.jsapi import JetStreamApi

from .helpers import DRIFT_REPAIRED_WITHIN, Resources, condition, eventually, is_ready

pytestmark = [pytest.mark.integration]


def manifest(name: str, stream: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "Stream", "metadata": {"name": name}, "spec": {"name": stream, **spec}}


async def _ready(resources: Resources, name: str) -> bool:
    return is_ready(resources.get("streams", name))


async def _config(jetstream: JetStreamApi, stream: str) -> dict[str, Any] | None:
    info = await jetstream.stream_info(stream)
    return None if info is None else dict(info["config"])


@pytest.mark.usefixtures("operator_process")
async def test_out_of_band_change_is_reverted(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("drift", stream, maxAge="1h", maxMsgs=50))
    await eventually(lambda: _ready(resources, "drift"))
    jetstream = JetStreamApi(nc)
    config = await _config(jetstream, stream)
    assert config is not None
    # Someone "fixes" the stream by hand: drops maxAge, raises maxMsgs, turns noAck on.
    tampered = {**config, "max_age": 0, "max_msgs": 999, "no_ack": True}
    await jetstream.update_stream(tampered)

    async def restored() -> bool:
        current = await _config(jetstream, stream)
        return current is not None and (
            current["max_age"] == 3_600_000_000_000
            and current["max_msgs"] == 50
            and not current.get("no_ack")
        )

    await eventually(restored, timeout=DRIFT_REPAIRED_WITHIN, interval=0.05)


@pytest.mark.usefixtures("operator_process")
async def test_removed_field_and_flag_turned_off_are_reverted_on_the_server(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("shrink", stream, maxAge="1h", allowRollup=True))
    jetstream = JetStreamApi(nc)

    async def has(key: str, value: Any) -> bool:
        current = await _config(jetstream, stream)
        return current is not None and current.get(key, False) == value

    await eventually(lambda: has("allow_rollup_hdrs", True))
    resources.patch_spec("streams", "shrink", {"maxAge": None, "allowRollup": False})
    await eventually(lambda: has("max_age", 0))
    await eventually(lambda: has("allow_rollup_hdrs", False))


@pytest.mark.usefixtures("operator_process")
async def test_stream_deleted_out_of_band_is_recreated(
    resources: Resources, nc: Client, namespace: str
) -> None:
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("phoenix", stream, maxMsgs=5))
    await eventually(lambda: _ready(resources, "phoenix"))
    jetstream = JetStreamApi(nc)
    assert await jetstream.delete_stream(stream)

    async def back() -> bool:
        current = await _config(jetstream, stream)
        return current is not None and current["max_msgs"] == 5

    await eventually(back, timeout=DRIFT_REPAIRED_WITHIN, interval=0.05)


@pytest.mark.usefixtures("operator_without_advisories")
async def test_resync_repairs_when_advisories_are_missed(
    resources: Resources, nc: Client, namespace: str
) -> None:
    """An operator with advisories off still repairs drift, through its paged resync."""
    stream = namespace.replace("-", "_").upper()
    resources.create("streams", manifest("quiet", stream, maxMsgs=7))
    await eventually(lambda: _ready(resources, "quiet"))
    jetstream = JetStreamApi(nc)
    config = await _config(jetstream, stream)
    assert config is not None
    await jetstream.update_stream({**config, "max_msgs": 70})

    async def repaired() -> bool:
        current = await _config(jetstream, stream)
        return current is not None and current["max_msgs"] == 7

    await eventually(repaired, timeout=10)
    assert await jetstream.delete_stream(stream)
    await eventually(repaired, timeout=10)
    assert condition(resources.get("streams", "quiet"))["status"] == "True"
