"""The servers' own figures, for tests that count what the operator wrote or requested:
kube-apiserver's /metrics and JetStream's API audit advisories, never the operator's counters."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, defaultdict
from typing import Any

from kubernetes import client, watch
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jetstream_devtools.figures import apiserver_writes as served_writes
from jetstream_operator import GROUP, VERSION

from .helpers import json_body

OUR_RESOURCES = ("streams", "consumers", "natsconnections", "keyvalues", "objectstores")


def apiserver_writes(plane: Any, resources: tuple[str, ...] = OUR_RESOURCES) -> Counter[str]:
    """Writes the API server has served for our kinds, by `verb resource[/subresource]`."""
    return served_writes(plane.url, plane.ssl_context(), group=GROUP, resources=resources)


def difference(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after if after[key] != before[key]}


async def writes_once_quiet(plane: Any, still: float = 2.0, timeout: float = 30.0) -> Counter[str]:
    """The writes so far, once none has come for `still` seconds: what earlier tests' resources
    still write (a last count, a deletion) must not be counted as the next test's."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = apiserver_writes(plane)
    while loop.time() < deadline:
        await asyncio.sleep(still)
        now = apiserver_writes(plane)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the API server took writes for {timeout:.0f} s without a pause")


class ApiAudit:
    """Every JetStream API request the server announces (`$JS.EVENT.ADVISORY.API`), whoever
    sent it: the subjects, in order."""

    def __init__(self) -> None:
        self.subjects: list[str] = []
        self.refused: list[str] = []  # the subjects of requests answered with an error
        self._subscription: Subscription | None = None

    async def start(self, connection: Client) -> ApiAudit:
        async def record(message: Msg) -> None:
            advisory = json.loads(message.data)
            subject = str(advisory.get("subject", ""))
            self.subjects.append(subject)
            if '"error"' in str(advisory.get("response", "")):
                self.refused.append(subject)

        self._subscription = await connection.subscribe("$JS.EVENT.ADVISORY.API", cb=record)
        await connection.flush()
        return self

    async def stop(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    def count(self, operation: str, name: str | None = None, *, refused: bool = False) -> int:
        """Requests of one operation (e.g. "STREAM.UPDATE"), optionally for one object; with
        `refused`, only those the server answered with an error."""
        prefix = f"$JS.API.{operation}"
        return sum(
            1
            for subject in (self.refused if refused else self.subjects)
            if subject.startswith(prefix) and (name is None or subject.split(".")[-1] == name)
        )

    def writes(self) -> int:
        """Requests that change something: creates, updates, deletes, purges, pauses."""
        verbs = (".CREATE.", ".UPDATE.", ".DELETE.", ".PURGE.", ".PAUSE.", ".DURABLE.CREATE.")
        return sum(1 for subject in self.subjects if any(verb in subject for verb in verbs))


class StatusChanges:
    """Each object's status changes of one kind, cluster-wide, as kube-apiserver's watch shows
    them. /metrics counts writes for the whole server; when a test's count is over its bound,
    this says which objects changed their status more than once, and to what."""

    def __init__(self, api: client.CustomObjectsApi, plural: str) -> None:
        self.api = api
        self.plural = plural
        self.changes: dict[str, list[str]] = defaultdict(list)
        self._last: dict[str, Any] = {}
        self._watch = watch.Watch()  # type: ignore[no-untyped-call]  # untyped in kubernetes
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self) -> StatusChanges:
        listing = json_body(self.api.list_cluster_custom_object(GROUP, VERSION, self.plural))
        for item in listing.get("items", []):
            self._last[self._key(item)] = item.get("status")
        version = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._follow, args=(version,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        # At the next event, or the watch's own timeout: the thread is a daemon.
        self._watch.stop()  # type: ignore[no-untyped-call]

    def _follow(self, version: str) -> None:
        events = self._watch.stream(  # type: ignore[no-untyped-call]
            self.api.list_cluster_custom_object,
            GROUP,
            VERSION,
            self.plural,
            resource_version=version,
            timeout_seconds=600,
        )
        try:
            for event in events:
                item = event["object"]
                if event["type"] == "ERROR":
                    self.changes["(watch error)"].append(str(item.get("message")))
                    continue
                key, status = self._key(item), item.get("status")
                if event["type"] != "DELETED" and status != self._last.get(key):
                    self.changes[key].append(_status_summary(status or {}))
                self._last[key] = status
        except Exception as error:  # a diagnosis only: say so rather than fail the test
            if not self._stopped:
                self.changes["(watch ended)"].append(repr(error))

    @staticmethod
    def _key(item: dict[str, Any]) -> str:
        meta = item.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"

    def report(self) -> dict[str, Any]:
        """How many objects' status changed while watched, and those that changed more than
        once, with each change."""
        repeated = {
            key: changes
            for key, changes in self.changes.items()
            if len(changes) > 1 or key.startswith("(")
        }
        return {"changed": len(self.changes), "more than once": repeated}


def _status_summary(status: dict[str, Any]) -> str:
    ready: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    summary = f"{ready.get('status')}:{ready.get('reason')}"
    if "consumerCount" in status:
        summary += f" count={status['consumerCount']}"
    return summary
