"""Every consumer of an account in one request: the servers' JetStream monitoring (JSZ).

JetStream's own API lists consumers one stream at a time, so keeping the lag of thousands of
consumers fresh costs a request per stream per pass. Through a user of the system account,
`$SYS.REQ.ACCOUNT.<account>.JSZ` makes every server answer with the streams it holds and their
consumers (state and config), one answer per server, whatever the number of consumers.

A server holds the streams it is a peer of, and reports each consumer as it sees it; the
leader's view is the one the JetStream API would give. A stream counts as covered only when
every peer the stream listing names has answered: a consumer missing from a partial answer
may just live on a server that was slow, and must not look deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client

logger = logging.getLogger(__name__)

JSZ_REQUEST = {"streams": True, "consumer": True, "config": True}


def jsz_subject(account: str) -> str:
    return f"$SYS.REQ.ACCOUNT.{account}.JSZ"


def stream_peers(info: Mapping[str, Any]) -> frozenset[str] | None:
    """The servers holding a stream, from its STREAM.LIST/INFO entry (leader and replicas);
    empty when it has no leader now (nothing can stand for the API's answer then); None for a
    server that is not clustered (its listing names no cluster: it holds every stream)."""
    cluster = info.get("cluster")
    if cluster is None:
        return None
    leader = cluster.get("leader")
    if not isinstance(leader, str) or not leader:
        return frozenset()
    replicas = [r.get("name") for r in cluster.get("replicas") or [] if isinstance(r, Mapping)]
    return frozenset([leader, *(name for name in replicas if isinstance(name, str) and name)])


@dataclass
class AccountConsumers:
    """What the servers that answered hold: each stream's consumers, as their leaders see them."""

    answered: frozenset[str]
    consumers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """By stream, by consumer name: a CONSUMER.INFO-shaped entry."""

    def covering(self, stream: str, info: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
        """The stream's consumers, or None unless every peer of the stream answered."""
        peers = stream_peers(info)
        if peers is None:
            covered = len(self.answered) == 1  # more than one: not the lone server it seems
        else:
            covered = bool(peers) and peers <= self.answered
        if not covered:
            return None
        return self.consumers.get(stream, {})


def gathered(answers: Iterable[Mapping[str, Any]]) -> AccountConsumers:
    """The servers' answers folded into one view: per consumer, the entry of the server that
    leads it, else of any server holding it. An answer with an error counts as not given."""
    answered: set[str] = set()
    chosen: dict[str, dict[str, dict[str, Any]]] = {}
    leaders: set[tuple[str, str]] = set()
    for answer in answers:
        server = str((answer.get("server") or {}).get("name") or "")
        data = answer.get("data")
        if not server or answer.get("error") or not isinstance(data, Mapping):
            continue
        answered.add(server)
        for stream in data.get("stream_detail") or []:
            name = str(stream.get("name") or "")
            consumers = chosen.setdefault(name, {})
            for consumer in stream.get("consumer_detail") or []:
                durable = str(consumer.get("name") or "")
                leads = (consumer.get("cluster") or {}).get("leader") == server
                if durable in consumers and ((name, durable) in leaders or not leads):
                    continue
                consumers[durable] = dict(consumer)
                if leads:
                    leaders.add((name, durable))
    return AccountConsumers(frozenset(answered), chosen)


AccountMonitoring = Callable[[frozenset[str]], Awaitable[AccountConsumers | None]]
"""Every consumer of a connection's account as the given servers hold them, or None where the
connection has no way to the servers' monitoring now."""


async def account_consumers(
    client: Client, account: str, servers: frozenset[str], timeout: float
) -> AccountConsumers:
    """Ask every server once; wait until each of `servers` (and at least one server) has
    answered or `timeout` passes (the answers that came are used, the streams of the others
    are not covered)."""
    inbox = client.new_inbox()
    subscription = await client.subscribe(inbox)
    answers: list[dict[str, Any]] = []
    heard: set[str] = set()
    try:
        await client.publish(jsz_subject(account), json.dumps(JSZ_REQUEST).encode(), reply=inbox)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not heard or not servers <= heard:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                message = await subscription.next_msg(timeout=left)
            except TimeoutError:
                break
            try:
                answer = json.loads(message.data)
            except ValueError:
                continue
            if isinstance(answer, dict):
                answers.append(answer)
                heard.add(str((answer.get("server") or {}).get("name") or ""))
    finally:
        await subscription.unsubscribe()
    if not heard or not servers <= heard:
        logger.info(
            "JetStream monitoring of account %s: no answer from %s within %.0f s; their "
            "streams' consumers are listed through the JetStream API",
            account,
            ", ".join(sorted(servers - heard)) or "any server",
            timeout,
        )
    return gathered(answers)
