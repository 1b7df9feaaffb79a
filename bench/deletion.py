"""Deletion as `kubectl delete -f` makes it, timed until neither the API server nor NATS holds
the objects, the same for ours and NACK."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import nats
from kubernetes import client
from watches import ObjectWatch, watching

from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi

NO_PROGRESS = 60.0
"""Seconds without a stream deleted in NATS, once the objects are gone, after which the
deletion is reported as never reaching NATS."""


PLURALS = ("streams", "consumers")


def deletion(
    delete: Callable[[str, str, str], None],
    objects: client.CustomObjectsApi,
    namespace: str,
    nats_url: str,
    prefix: str,
    group: str = GROUP,
    version: str = VERSION,
    timeout: float = 900,
    cpu: Callable[[], Counter[str]] | None = None,
) -> dict[str, Any]:
    """`kubectl delete -f` of what was applied: every Stream, then every Consumer, 8 requests at
    a time, timed until the API server holds none of them and NATS none of their streams (named
    `prefix`_i). `delete(namespace, plural, name)` deletes one, as the user would. `cpu`, if
    given, reads each process's CPU seconds, for what they took while the requests were made."""
    watches = [ObjectWatch(objects, namespace, plural, group, version) for plural in PLURALS]
    with watching(watches):
        for each in watches:
            each.listed.wait(60)
        names = [(each.plural, name) for each in watches for name in each.names()]
        streams_left = asyncio.run(streams_named(nats_url, f"{prefix}_"))
        cpu_before = cpu() if cpu is not None else Counter()
        started = progress = time.monotonic()
        requested = request_deletions(delete, namespace, names)
        cpu_requesting = (cpu() - cpu_before) if cpu is not None else Counter()
        gone_k8s = gone_nats = None
        while time.monotonic() < started + timeout and (gone_k8s is None or gone_nats is None):
            for each in watches:
                each.check()
            if gone_k8s is None and all(each.present == 0 for each in watches):
                gone_k8s = max(each.last_gone for each in watches) - started
            if gone_nats is None:
                count = asyncio.run(streams_named(nats_url, f"{prefix}_"))
                if count < streams_left:
                    streams_left, progress = count, time.monotonic()
                if count == 0:
                    gone_nats = time.monotonic() - started
                elif gone_k8s is not None and time.monotonic() - progress > NO_PROGRESS:
                    break  # the controller deletes no more of them
            time.sleep(0.5)
        left = {each.plural: each.present for each in watches}
    return {
        "objects": len(names),
        "requested_s": requested,
        "gone_k8s_s": gone_k8s,
        "gone_nats_s": gone_nats,
        "left": left,
        "streams_left_in_nats": streams_left,
        "cpu_requesting": dict(cpu_requesting),
    }


def request_deletions(
    delete: Callable[[str, str, str], None], namespace: str, names: list[tuple[str, str]]
) -> float:
    """The seconds `kubectl delete -f` takes to request the deletion of (plural, name) each, 8
    requests at a time."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: delete(namespace, *item), names))
    return time.monotonic() - started


def delete_alone(
    delete: Callable[[str, str, str], None],
    objects: client.CustomObjectsApi,
    namespace: str,
    group: str = GROUP,
    version: str = VERSION,
) -> float:
    """Deleting every Stream, then every Consumer of `namespace` with no controller running:
    the user's requests alone, to compare with the same requests beside the controller. Where
    a finalizer is put on at admission, the objects stay, being deleted."""
    names = [
        (plural, item["metadata"]["name"])
        for plural in PLURALS
        for item in cast(
            dict[str, Any],
            objects.list_namespaced_custom_object(group, version, namespace, plural),
        )["items"]
    ]
    return request_deletions(delete, namespace, names)


async def streams_named(url: str, prefix: str) -> int:
    """How many streams' names start with `prefix`, from the server's own list of names."""
    nc = await nats.connect(url)
    try:
        jetstream, offset, count = JetStreamApi(nc), 0, 0
        while True:
            page = await jetstream.request("STREAM.NAMES", {"offset": offset})
            names = page.get("streams") or []
            count += sum(1 for name in names if str(name).startswith(prefix))
            offset += len(names)
            if not names or offset >= int(page.get("total", 0)):
                return count
    finally:
        await nc.close()


def deletion_lines(label: str, rows: list[dict[str, Any]]) -> list[str]:
    """One line per size with a deletion: when the API server and NATS had none left."""

    def seconds(value: float | None) -> str:
        return "never" if value is None else f"after {value:.1f} s"

    def line(size: int, figures: dict[str, Any], alone: float | None) -> str:
        slowed = f" (alone {alone:.1f} s: {figures['requested_s'] / alone:.2f}x)" if alone else ""
        text = (
            f"- {label} N={size}: {figures['objects']} deletions requested in "
            f"{figures['requested_s']:.1f} s{slowed}; none left in Kubernetes "
            f"{seconds(figures['gone_k8s_s'])}, none of their streams in NATS "
            f"{seconds(figures['gone_nats_s'])}"
        )
        if figures["gone_nats_s"] is None:
            text += f" ({figures.get('streams_left_in_nats', '?')} still there, none deleted"
            text += f" for {NO_PROGRESS:.0f} s)"
        if any(figures["left"].values()):
            text += f"; objects left: {figures['left']}"
        if figures.get("cpu_requesting"):
            text += "; CPU seconds while they were requested: " + ", ".join(
                f"{name} {seconds:.1f}" for name, seconds in figures["cpu_requesting"].items()
            )
        return text

    return [
        line(row["size"], row["deletion"], row.get("delete_alone"))
        for row in rows
        if "deletion" in row
    ]
