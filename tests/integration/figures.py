"""The servers' own figures, for tests that count what the operator wrote or requested:
kube-apiserver's /metrics and JetStream's API audit advisories, never the operator's counters."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jetstream_operator import GROUP
from jetstream_operator.devenv.figures import apiserver_writes as served_writes

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
        self._subscription: Subscription | None = None

    async def start(self, connection: Client) -> ApiAudit:
        async def record(message: Msg) -> None:
            advisory = json.loads(message.data)
            self.subjects.append(str(advisory.get("subject", "")))

        self._subscription = await connection.subscribe("$JS.EVENT.ADVISORY.API", cb=record)
        await connection.flush()
        return self

    async def stop(self) -> None:
        if self._subscription is not None:
            await self._subscription.unsubscribe()

    def count(self, operation: str, name: str | None = None) -> int:
        """Requests of one operation (e.g. "STREAM.UPDATE"), optionally for one object."""
        prefix = f"$JS.API.{operation}"
        return sum(
            1
            for subject in self.subjects
            if subject.startswith(prefix) and (name is None or subject.split(".")[-1] == name)
        )

    def writes(self) -> int:
        """Requests that change something: creates, updates, deletes, purges, pauses."""
        verbs = (".CREATE.", ".UPDATE.", ".DELETE.", ".PURGE.", ".PAUSE.", ".DURABLE.CREATE.")
        return sum(1 for subject in self.subjects if any(verb in subject for verb in verbs))
