"""The settings that make the operator take a burst slowly still let everything settle.

JETSTREAM_OPERATOR_WORKERS=1: consumers created before their streams wait for them inside
their handler, holding the only place of their kind; streams have places of their own, so
everything becomes Ready, every stream counts its consumer, and deletion completes.

JETSTREAM_OPERATOR_KUBE_REQUESTS=1: every request kopf makes (finalizers, its status, peering)
waits for one place, while its watches run beside them; the same must hold."""

from __future__ import annotations

from typing import Any

import pytest

from jetstream_devtools.operator_process import OperatorProcess
from tests.support.operator import operator_variant

from .figures import apiserver_writes, difference, writes_once_quiet
from .helpers import Resources, condition, eventually, is_ready, stream_manifest

pytestmark = [pytest.mark.integration]

PAIRS = 4


@pytest.mark.parametrize(
    "setting", [{"JETSTREAM_OPERATOR_WORKERS": "1"}, {"JETSTREAM_OPERATOR_KUBE_REQUESTS": "1"}]
)
async def test_one_place_settles_and_deletes(
    operator_process: OperatorProcess, resources: Resources, namespace: str, setting: dict[str, str]
) -> None:
    prefix = namespace.replace("-", "_").upper()
    names = [f"pair-{index}" for index in range(PAIRS)]
    # Only this namespace: earlier tests' resources (some of them deletions blocked for good
    # on purpose) would otherwise queue for the same single place.
    with operator_variant(operator_process, JETSTREAM_OPERATOR_NAMESPACES=namespace, **setting):
        for index, name in enumerate(names):
            resources.create(
                "consumers",
                {
                    "kind": "Consumer",
                    "metadata": {"name": name},
                    "spec": {"durableName": f"C{index}", "streamRef": name},
                },
            )
        for index, name in enumerate(names):
            resources.create("streams", stream_manifest(name, f"{prefix}_{index}"))

        async def settled() -> bool:
            for name in names:
                stream = resources.get("streams", name)
                if not (is_ready(stream) and is_ready(resources.get("consumers", name))):
                    return False
                if ((stream or {}).get("status") or {}).get("consumerCount") != 1:
                    return False
            return True

        await eventually(settled, timeout=90)
        for name in names:
            resources.delete("streams", name)
            resources.delete("consumers", name)

        async def gone() -> bool:
            return all(
                resources.get(plural, name) is None
                for plural in ("streams", "consumers")
                for name in names
            )

        await eventually(gone, timeout=90)


async def test_a_restart_among_many_resources_not_ready_leaves_room_for_new_ones(
    operator_process: OperatorProcess, resources: Resources, namespace: str
) -> None:
    """A restarted operator paces its first passes of the resources it finds not Ready. Those
    passes hold kopf's workers while they wait, so a new resource queues behind them: with a
    random wait of up to 10 s each, 40 of them kept a new stream waiting for about
    40 x 5 s / 2 workers (not Ready within 30 s); paced, they are through in a fraction of a
    second."""
    prefix = namespace.replace("-", "_").upper()
    stuck = [f"stuck-{index}" for index in range(40)]
    with operator_variant(
        operator_process, JETSTREAM_OPERATOR_NAMESPACES=namespace, JETSTREAM_OPERATOR_WORKERS="2"
    ):
        for index, name in enumerate(stuck):
            resources.create(
                "streams",
                stream_manifest(name, f"{prefix}_STUCK_{index}", connectionRef="absent"),
            )

        async def reported() -> bool:
            return all(
                condition(resources.get("streams", name)).get("reason") == "ConnectionNotFound"
                for name in stuck
            )

        await eventually(reported, timeout=60)
        operator_process.stop()
        operator_process.start()
        resources.create("streams", stream_manifest("fresh", f"{prefix}_FRESH"))

        async def fresh_ready() -> bool:
            return is_ready(resources.get("streams", "fresh"))

        await eventually(fresh_ready, timeout=30)  # not within 30 s with random waits
    for name in stuck:  # their deletion would wait for the connection
        resources.annotate("streams", name, {"jetstream-operator.io/release-finalizer": "true"})
    for name in [*stuck, "fresh"]:
        resources.delete("streams", name)

    async def gone() -> bool:
        return all(resources.get("streams", name) is None for name in [*stuck, "fresh"])

    await eventually(gone, timeout=60)


async def test_deletions_at_few_workers_free_their_places_at_once(
    operator_process: OperatorProcess, resources: Resources, namespace: str, control_plane: Any
) -> None:
    """kopf kept a deleted resource's worker for 5 s after its DELETED event, waiting for a
    version it had marked as never arriving: at 2 workers, 2 deletions per 5 s. Each deletion
    writes only the finalizer's removal (and its Event): a status on an object about to go
    would be read by no one."""
    prefix = namespace.replace("-", "_").upper()
    names = [f"gone-{index}" for index in range(40)]
    with operator_variant(
        operator_process, JETSTREAM_OPERATOR_NAMESPACES=namespace, JETSTREAM_OPERATOR_WORKERS="2"
    ):
        for index, name in enumerate(names):
            resources.create("streams", stream_manifest(name, f"{prefix}_{index}"))

        async def ready() -> bool:
            return all(is_ready(resources.get("streams", name)) for name in names)

        await eventually(ready, timeout=60)
        before = await writes_once_quiet(control_plane)
        for name in names:
            resources.delete("streams", name)

        async def gone() -> bool:
            return all(resources.get("streams", name) is None for name in names)

        await eventually(gone, timeout=40)
        written = difference(apiserver_writes(control_plane), before)
    assert written.get("PATCH streams/status", 0) == 0, written
    # One finalizer removal each; a removal refused for a newer version (422) is tried again.
    assert len(names) <= written.get("PATCH streams", 0) <= len(names) + 2, written
