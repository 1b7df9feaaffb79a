"""The least any controller must do for the benchmark's Streams and Consumers, as they arrive.

The floor (operator_bench.py) times the operator's unavoidable requests on a quiet machine,
after the user's applies. A controller cannot wait for the applies to end: it must make the
same requests while they run, on the same cores. This program does only that. It watches both
kinds and, for each new object, makes the floor's request in NATS (nats-py, 32 at a time), then
patches a Ready condition into its status (the Kubernetes client, 8 at a time), and nothing
else: no reads, no comparisons, no Events, no retries. The bench times it as it times the
operator. It is a reference, not a bound: doing everything at once takes CPU from the user's
applies, and a controller that holds back while they run slows them less and can finish as
soon (the bench's CPU bound is the figure no controller gets under).

    python bench/ideal_controller.py --kubeconfig K --namespace NS --nats URL

Prints "watching" once both kinds are listed, then runs until it is terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import nats
from kubernetes import client, config, watch

from jetstream_operator import GROUP, VERSION
from jetstream_operator.nats.jsapi import JetStreamApi

NATS_AT_ONCE = 32
PATCHES_AT_ONCE = 8


class IdealController:
    def __init__(self, objects: client.CustomObjectsApi, namespace: str, nc: Any) -> None:
        self.objects = objects
        self.namespace = namespace
        self.jetstream = JetStreamApi(nc)
        self.loop = asyncio.get_running_loop()
        self.nats_limit = asyncio.Semaphore(NATS_AT_ONCE)
        self.patches = ThreadPoolExecutor(max_workers=PATCHES_AT_ONCE)
        self.streams_made: dict[str, asyncio.Future[str]] = {}
        """Stream resource name -> its stream's name in NATS, once created there."""
        self.handled: set[tuple[str, str]] = set()
        self.tasks: set[asyncio.Task[None]] = set()

    def made(self, resource: str) -> asyncio.Future[str]:
        return self.streams_made.setdefault(resource, self.loop.create_future())

    def arrived(self, plural: str, item: dict[str, Any]) -> None:
        """In the loop: a watch saw `item`; handle it once."""
        key = (plural, item["metadata"]["name"])
        if key in self.handled:
            return
        self.handled.add(key)
        work = self.stream(item) if plural == "streams" else self.consumer(item)
        task = self.loop.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.done)

    def done(self, task: asyncio.Task[None]) -> None:
        """A failure leaves its object un-Ready, so the bench's wait names it; say why here."""
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            print(f"failed: {task.exception()!r}", file=sys.stderr, flush=True)

    async def stream(self, item: dict[str, Any]) -> None:
        spec = item["spec"]
        async with self.nats_limit:
            await self.jetstream.create_stream({"name": spec["name"], "subjects": spec["subjects"]})
        self.made(item["metadata"]["name"]).set_result(spec["name"])
        await self.ready("streams", item)

    async def consumer(self, item: dict[str, Any]) -> None:
        spec = item["spec"]
        stream = await self.made(spec["streamRef"])
        config = {"name": spec["durableName"], "durable_name": spec["durableName"]}
        async with self.nats_limit:
            await self.jetstream.create_consumer(
                stream,
                {
                    "stream_name": stream,
                    "action": "create",
                    "config": {**config, "ack_policy": "explicit"},
                },
            )
        await self.ready("consumers", item)

    async def ready(self, plural: str, item: dict[str, Any]) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "Ready",
            "status": "True",
            "reason": "Created",
            "message": "",
            "lastTransitionTime": now,
        }
        body = {
            "status": {
                "observedGeneration": item["metadata"].get("generation", 1),
                "conditions": [condition],
            }
        }
        await self.loop.run_in_executor(
            self.patches,
            lambda: self.objects.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, plural, item["metadata"]["name"], body
            ),
        )

    def follow(self, plural: str, listed: threading.Event) -> None:
        """In a thread: list, then watch, handing each object to the loop; again on failure."""

        def listing(**options: Any) -> Any:
            return self.objects.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, plural, **options
            )

        while True:
            try:
                found = cast(dict[str, Any], listing())
                for item in found["items"]:
                    self.loop.call_soon_threadsafe(self.arrived, plural, item)
                listed.set()
                version = found["metadata"]["resourceVersion"]
                while True:
                    for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
                        listing, resource_version=version, timeout_seconds=30
                    ):
                        if event["type"] == "ERROR":
                            raise RuntimeError(str(event["raw_object"]))
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] == "ADDED":
                            self.loop.call_soon_threadsafe(self.arrived, plural, event["object"])
            except Exception as error:  # a watch the server ended: list again
                print(f"{plural} watch: {error}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> None:
    api = config.new_client_from_config(args.kubeconfig)  # type: ignore[no-untyped-call]
    nc = await nats.connect(args.nats)
    controller = IdealController(client.CustomObjectsApi(api), args.namespace, nc)
    stop = asyncio.Event()
    controller.loop.add_signal_handler(signal.SIGTERM, stop.set)
    listed = [threading.Event(), threading.Event()]
    for plural, event in zip(("streams", "consumers"), listed, strict=True):
        threading.Thread(target=controller.follow, args=(plural, event), daemon=True).start()
    await asyncio.to_thread(lambda: [event.wait() for event in listed])
    print("watching", flush=True)
    await stop.wait()
    await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--nats", required=True)
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
