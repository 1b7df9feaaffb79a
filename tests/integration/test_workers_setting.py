"""The settings that make the operator take a burst slowly still let everything settle.

JETSTREAM_OPERATOR_WORKERS=1: consumers created before their streams wait for them inside
their handler, holding the only place of their kind; streams have places of their own, so
everything becomes Ready, every stream counts its consumer, and deletion completes.

JETSTREAM_OPERATOR_KUBE_REQUESTS=1: every request kopf makes (finalizers, its status, peering)
waits for one place, while its watches run beside them; the same must hold."""

from __future__ import annotations

import pytest

from jetstream_operator.devenv.operator_process import OperatorProcess

from .conftest import operator_variant
from .helpers import Resources, eventually, is_ready

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
            stream = f"{prefix}_{index}"
            resources.create(
                "streams",
                {
                    "kind": "Stream",
                    "metadata": {"name": name},
                    "spec": {"name": stream, "subjects": [f"{stream.lower()}.>"]},
                },
            )

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
