"""The JetStream management API, spoken as plain JSON requests.

Raw requests (rather than nats-py's typed helpers) let the operator send and read every field the
server knows, including ones newer than the client library.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from nats.aio.client import Client
from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    ConnectionReconnectingError,
    NoRespondersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.errors import TimeoutError as NatsTimeoutError

from ..metrics import NATS_REQUEST_ERRORS, NATS_REQUEST_SECONDS, operation_of

ServerConfig = dict[str, Any]

STREAM_NOT_FOUND = 10059
STREAM_NAME_IN_USE = 10058  # a create of a stream that exists with another config
CONSUMER_NOT_FOUND = 10014
CONSUMER_EXISTS = 10148  # action "create" on a consumer that exists with another config
CONSUMER_INVALID_RESET = 10204  # a reset below the consumer's configured start, or by policy
NO_MESSAGE_FOUND = 10037
STREAM_LIST_PAGE = 256

TRANSIENT_ERR_CODES = frozenset(
    {
        10004,  # incomplete results (a cluster answer with peers missing)
        10008,  # JetStream system temporarily unavailable (meta leader election)
        10009,  # JetStream cluster can not handle request (no meta leader yet)
        10118,  # stream is offline
        10119,  # consumer is offline
    }
)
"""Answers that say the cluster is busy or electing, not that the request is wrong."""

_CONNECTION_TROUBLE = (
    ConnectionClosedError,
    ConnectionDrainingError,
    ConnectionReconnectingError,
    OutboundBufferLimitError,
    StaleConnectionError,
)


@dataclass(frozen=True)
class StreamListing:
    """A paged STREAM.LIST. In a cluster, a stream whose peers are all offline is listed with
    its configuration and an empty state (no messages, no consumers, replicas offline) and
    named in `missing`, as is one whose leader did not answer in time; one that knows why it is
    offline is named in `offline` instead, with the reason. Those are `unseen` (name: reason,
    or ""): their state is unknown, not empty."""

    infos: list[dict[str, Any]]
    unseen: Mapping[str, str]

    def seen(self) -> dict[str, dict[str, Any]]:
        """The listed streams whose state the servers saw, by name."""
        named = ((str((info.get("config") or {}).get("name")), info) for info in self.infos)
        return {name: info for name, info in named if name not in self.unseen}


def pedantic_stream(config: ServerConfig) -> dict[str, Any]:
    """A stream create/update request in pedantic mode (2.11+; older servers ignore the flag):
    the server refuses what it would otherwise silently rewrite, and the refusal is reported.

    Not for a mirror: the server copies mirror_direct from the origin, and pedantic refuses
    any mirror whose origin allows direct get (docs/server-rewrites.md)."""
    return {**config, "pedantic": not config.get("mirror")}


class JetStreamError(Exception):
    """An error answered by the JetStream API, with the server's own code and words."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} (error {err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


class JetStreamUnavailable(Exception):
    """The JetStream API did not answer, or answered that it cannot right now: NATS is down,
    JetStream is not enabled, the connection closed, or the cluster is electing a leader.

    Never the spec's fault, so callers report Reconciling and retry."""


class JetStreamNotEnabled(JetStreamUnavailable):
    """A reachable server answered that no one serves the JetStream API: JetStream is off for
    the account (or the server). Unlike an outage, this one needs a person."""


NO_SUITABLE_PEERS = 10005


def is_transient(code: int, err_code: int, description: str = "") -> bool:
    """Whether an API error is the cluster's momentary state, not a verdict on the request."""
    if err_code == NO_SUITABLE_PEERS:
        # "peer offline": a node is down and the placement fits once it is back. Other reasons
        # (too few peers in the cluster, tags that no server has) are the spec's to change.
        return "offline" in description.lower()
    return code == 503 or err_code in TRANSIENT_ERR_CODES


ACCOUNT_CHANGES = frozenset(
    {"STREAM.CREATE", "STREAM.DELETE", "CONSUMER.CREATE", "CONSUMER.DURABLE", "CONSUMER.DELETE"}
)
"""Operations that change an account's stream or consumer count."""


class WriteNotes(Protocol):
    """Told of the creations and stream updates a JetStreamApi is about to send, so the
    advisories they cause can be told from changes made by anyone else."""

    def expect(self, stream: str, consumer: str | None) -> None: ...

    def cancel(self, stream: str, consumer: str | None) -> None:
        """The request failed: no advisory follows."""


class JetStreamApi:
    """Stream operations on one NATS connection; `on_account_change` hears of every answered
    request that changed the account's stream or consumer count (ACCOUNT_CHANGES)."""

    def __init__(
        self,
        connection: Client,
        prefix: str = "$JS.API",
        timeout: float = 5.0,
        on_account_change: Callable[[], None] | None = None,
    ) -> None:
        self._connection = connection
        self._prefix = prefix
        self._timeout = timeout
        self._on_account_change = on_account_change
        self._notes: WriteNotes | None = None

    @property
    def connection(self) -> Client:
        """The NATS connection, for the exchanges beyond one request (snapshot chunks)."""
        return self._connection

    def subject(self, operation: str) -> str:
        """The full subject of an API operation, under this API's prefix (a JS domain's)."""
        return f"{self._prefix}.{operation}"

    def noting_writes(self, notes: WriteNotes) -> JetStreamApi:
        """This API on the same connection, telling `notes` of each stream creation or update
        and each consumer creation before sending it."""
        noting = copy.copy(self)
        noting._notes = notes
        return noting

    async def _write(
        self, stream: str, consumer: str | None, subject: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        if self._notes is None:
            return await self.request(subject, payload)
        self._notes.expect(stream, consumer)
        try:
            return await self.request(subject, payload)
        except BaseException:
            self._notes.cancel(stream, consumer)
            raise

    async def request(self, subject: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps(payload).encode() if payload is not None else b""
        operation = operation_of(subject)
        started = time.perf_counter()
        try:
            reply = await self._connection.request(
                f"{self._prefix}.{subject}", body, timeout=self._timeout
            )
        except NoRespondersError as error:
            NATS_REQUEST_ERRORS.labels(operation, "no_responders").inc()
            raise JetStreamNotEnabled("no JetStream responded; is JetStream enabled?") from error
        except NatsTimeoutError as error:
            NATS_REQUEST_ERRORS.labels(operation, "timeout").inc()
            raise JetStreamUnavailable("the JetStream API did not answer in time") from error
        except _CONNECTION_TROUBLE as error:
            NATS_REQUEST_ERRORS.labels(operation, "connection").inc()
            raise JetStreamUnavailable(f"the NATS connection is not usable: {error}") from error
        finally:
            NATS_REQUEST_SECONDS.labels(operation).observe(time.perf_counter() - started)
        answer: dict[str, Any] = json.loads(reply.data)
        failure = answer.get("error")
        if failure:
            code, err_code = int(failure.get("code", 0)), int(failure.get("err_code", 0))
            description = str(failure.get("description", "unknown error"))
            if is_transient(code, err_code, description):
                NATS_REQUEST_ERRORS.labels(operation, "unavailable").inc()
                raise JetStreamUnavailable(f"{description} (error {err_code})")
            # A create that finds its object there is how a first pass learns of it (the
            # handlers create without looking first), not a failure worth an alert.
            found = err_code in (STREAM_NAME_IN_USE, CONSUMER_EXISTS)
            NATS_REQUEST_ERRORS.labels(operation, "exists" if found else "api_error").inc()
            raise JetStreamError(code, err_code, description)
        if self._on_account_change is not None and operation in ACCOUNT_CHANGES:
            self._on_account_change()
        return answer

    async def stream_info(
        self, name: str, details: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The stream's info (config, state, cluster), or None when it does not exist.
        `details` asks for more (subjects_filter, deleted_details)."""
        try:
            return await self.request(f"STREAM.INFO.{name}", details)
        except JetStreamError as error:
            if error.err_code == STREAM_NOT_FOUND:
                return None
            raise

    async def create_stream(self, config: ServerConfig) -> dict[str, Any]:
        name = config["name"]
        return await self._write(name, None, f"STREAM.CREATE.{name}", pedantic_stream(config))

    async def update_stream(self, config: ServerConfig) -> dict[str, Any]:
        name = config["name"]
        return await self._write(name, None, f"STREAM.UPDATE.{name}", pedantic_stream(config))

    async def delete_stream(self, name: str) -> bool:
        """Delete a stream; False when it was already gone."""
        try:
            await self.request(f"STREAM.DELETE.{name}")
        except JetStreamError as error:
            if error.err_code == STREAM_NOT_FOUND:
                return False
            raise
        return True

    async def purge_stream(self, name: str, body: dict[str, Any]) -> int:
        """Purge messages (all, one subject, or all but the last N); returns how many went."""
        answer = await self.request(f"STREAM.PURGE.{name}", body)
        return int(answer.get("purged", 0))

    async def step_down_stream(self, name: str) -> None:
        """Ask the stream's leader to step down, so that another replica is elected."""
        await self.request(f"STREAM.LEADER.STEPDOWN.{name}", {})

    async def list_streams(self) -> list[dict[str, Any]]:
        """Every stream's info, a page of up to 256 per request."""
        return (await self.stream_listing()).infos

    async def stream_listing(self) -> StreamListing:
        """Every stream's info, and the names of those whose state the servers did not see."""
        infos: list[dict[str, Any]] = []
        unseen: dict[str, str] = {}
        offset = 0
        while True:
            page = await self.request("STREAM.LIST", {"offset": offset})
            streams = page.get("streams") or []
            infos.extend(streams)
            unseen.update((str(name), "") for name in page.get("missing") or ())
            unseen.update((str(k), str(v)) for k, v in (page.get("offline") or {}).items())
            offset += len(streams)
            if not streams or offset >= int(page.get("total", 0)):
                return StreamListing(infos, unseen)

    async def consumer_info(self, stream: str, consumer: str) -> dict[str, Any] | None:
        """The consumer's info, or None when it (or its stream) does not exist."""
        try:
            return await self.request(f"CONSUMER.INFO.{stream}.{consumer}")
        except JetStreamError as error:
            if error.err_code in (CONSUMER_NOT_FOUND, STREAM_NOT_FOUND):
                return None
            raise

    async def create_consumer(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create or update (by the body's `action`) a named consumer."""
        name = body["config"]["name"]
        subject, payload = f"CONSUMER.CREATE.{stream}.{name}", {**body, "pedantic": True}
        if body.get("action") != "create":
            return await self.request(subject, payload)  # an update is announced by no advisory
        return await self._write(stream, name, subject, payload)

    async def pause_consumer(self, stream: str, consumer: str, body: dict[str, Any]) -> None:
        await self.request(f"CONSUMER.PAUSE.{stream}.{consumer}", body)

    async def delete_consumer(self, stream: str, consumer: str) -> bool:
        """Delete a consumer; False when it (or its stream) was already gone."""
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{consumer}")
        except JetStreamError as error:
            if error.err_code in (CONSUMER_NOT_FOUND, STREAM_NOT_FOUND):
                return False
            raise
        return True

    async def step_down_consumer(self, stream: str, consumer: str) -> None:
        """Ask the consumer's leader to step down, so that another replica is elected."""
        await self.request(f"CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}", {})

    async def api_level(self) -> int:
        """The JetStream API level of the server answering (3 for 2.12, 4 for 2.14)."""
        answer = await self.request("INFO")
        return int((answer.get("api") or {}).get("level") or 0)

    async def reset_consumer(self, stream: str, consumer: str, sequence: int) -> dict[str, Any]:
        """Move a consumer to `sequence` in place (API level 4); 0 for just after its ack
        floor. Returns the consumer's info after the reset."""
        body = {"seq": sequence} if sequence else {}
        return await self.request(f"CONSUMER.RESET.{stream}.{consumer}", body)

    async def first_sequence_at(self, stream: str, moment: datetime) -> int:
        """The sequence of the stream's first message at or after `moment`; past the last one
        when there is none yet."""
        start = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
        try:
            answer = await self.request(f"STREAM.MSG.GET.{stream}", {"start_time": start})
        except JetStreamError as error:
            if error.err_code != NO_MESSAGE_FOUND:
                raise
            info = await self.stream_info(stream)
            return int(((info or {}).get("state") or {}).get("last_seq") or 0) + 1
        return int((answer.get("message") or {}).get("seq") or 0)

    async def list_consumers(self, stream: str) -> list[dict[str, Any]]:
        """Every consumer's info of one stream, a page at a time."""
        infos: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await self.request(f"CONSUMER.LIST.{stream}", {"offset": offset})
            consumers = page.get("consumers") or []
            infos.extend(consumers)
            offset += len(consumers)
            if not consumers or offset >= int(page.get("total", 0)):
                return infos
