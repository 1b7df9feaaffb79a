"""JETSTREAM_OPERATOR_NAMESPACES with several entries serves every namespace they name.

A plain name and a glob each add namespaces, a !negation takes one away. The operator used to
hand kopf the entries as one comma-joined pattern, in which a later glob only re-admits what a
negation removed: it served the first entry alone."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes import client

from jetstream_devtools.operator_process import OperatorProcess
from tests.conftest import TARGET
from tests.support.operator import operator_variant

from .helpers import Resources, eventually, is_ready

pytestmark = [pytest.mark.integration]


async def test_every_entry_is_served_and_a_negated_namespace_is_not(
    operator_process: OperatorProcess, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    second, excluded = f"{namespace}-b", f"{namespace}-x"
    # Before the operator starts: kopf misses a namespace made while it starts its watch.
    for name in (second, excluded):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    prefix = namespace.replace("-", "_").upper()
    served = {name: Resources(api_client, name) for name in (namespace, second)}
    ignored = Resources(api_client, excluded)

    def stream(index: int) -> dict[str, object]:
        return {
            "kind": "Stream",
            "metadata": {"name": "orders"},
            "spec": {"name": f"{prefix}_{index}", "subjects": [f"{prefix.lower()}.{index}.>"]},
        }

    try:
        setting = f"{namespace},{namespace}-*,!{excluded}"
        with operator_variant(operator_process, JETSTREAM_OPERATOR_NAMESPACES=setting):
            ignored.create("streams", stream(0))
            for index, resources in enumerate(served.values(), start=1):
                resources.create("streams", stream(index))

            async def both_ready() -> bool:
                return all(is_ready(each.get("streams", "orders")) for each in served.values())

            await eventually(both_ready, timeout=60)
            await asyncio.sleep(1)  # the excluded one was applied first: time enough to be seen
            untouched = ignored.get("streams", "orders") or {}
            assert "status" not in untouched and not untouched["metadata"].get("finalizers")
            ignored.delete("streams", "orders")  # no finalizer: gone before others may serve it
            for resources in served.values():
                resources.delete("streams", "orders")

            async def gone() -> bool:
                return all(each.get("streams", "orders") is None for each in served.values())

            await eventually(gone, timeout=60)
    finally:
        if TARGET is not None:
            for name in (second, excluded):
                with contextlib.suppress(client.ApiException):
                    core.delete_namespace(name)
