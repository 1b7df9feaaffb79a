"""Connections for tasks and planning calls, plus the few JetStream API calls used.

The fast path for bulk replies (`FastClient`) lives in `_nats_fast`, the only module that
touches nats-py internals.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client

from ._nats_fast import FastClient
from .options import ConnectionOptions

log = logging.getLogger(__name__)


class ConnectError(ConnectionError):
    """No server of the list accepted the connection; says why (auth, TLS, refused)."""


@asynccontextmanager
async def connect(options: ConnectionOptions) -> AsyncIterator[FastClient]:
    """One connection for one task or planning call; always closed on the way out."""
    errors: list[str] = []

    async def remember(error: Exception) -> None:
        # nats-py reports the real cause here and then raises a generic NoServersError.
        errors.append(str(error) or type(error).__name__)
        log.debug("nats connection error: %s", error)

    nc = FastClient()
    nc.errors = errors
    try:
        await asyncio.wait_for(
            nc.connect(error_cb=remember, **options.connect_kwargs()),
            options.connect_timeout * (len(options.servers) + 1) + 5,
        )
    except Exception as error:
        causes = "; ".join(dict.fromkeys(errors)) or str(error)
        raise ConnectError(
            f"cannot connect to NATS at {', '.join(options.servers)}: {causes}"
        ) from error
    try:
        yield nc
    finally:
        # Bounded: closing flushes, and a server that stopped reading must not hang the task.
        try:
            await asyncio.wait_for(nc.close(), options.request_timeout)
        except (TimeoutError, OSError) as error:
            log.debug("closing the nats connection: %s", error)


class JetStreamApiError(RuntimeError):
    """An error answer from the JetStream API, with its codes."""

    def __init__(self, subject: str, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{subject}: {description} (code {code}, err_code {err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


@dataclass(frozen=True)
class StreamInfo:
    """The parts of stream info that planning and reading need."""

    name: str
    first_seq: int
    last_seq: int
    messages: int
    allow_direct: bool
    duplicate_window_ns: int
    created: str = ""
    """When the stream was created: a deleted and recreated stream has the same name, new
    sequences and a new creation time."""

    @property
    def first_available(self) -> int:
        """Lowest sequence that may still be stored; an empty new stream reports 0."""
        return max(self.first_seq, 1)


@dataclass(frozen=True)
class StoredMessage:
    subject: str
    seq: int
    time: str


class JetStreamApi:
    """Thin JSON request/response helpers over `$JS.API` (or a domain's prefix)."""

    def __init__(self, nc: Client, prefix: str = "$JS.API", timeout: float = 10.0) -> None:
        self.nc = nc
        self.prefix = prefix
        self.timeout = timeout

    @classmethod
    def of(cls, nc: Client, options: ConnectionOptions) -> JetStreamApi:
        return cls(nc, options.api_prefix, options.request_timeout)

    async def request(self, suffix: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        subject = f"{self.prefix}.{suffix}"
        body = json.dumps(payload).encode() if payload is not None else b""
        message = await self.nc.request(subject, body, timeout=self.timeout)
        response: dict[str, Any] = json.loads(message.data or b"{}")
        error = response.get("error")
        if error:
            raise JetStreamApiError(
                subject,
                int(error.get("code", 0)),
                int(error.get("err_code", 0)),
                str(error.get("description", "unknown error")),
            )
        return response

    async def stream_info(self, stream: str) -> StreamInfo:
        try:
            response = await self.request(f"STREAM.INFO.{stream}")
        except JetStreamApiError as error:
            if error.err_code == 10059:  # stream not found
                raise JetStreamApiError(
                    f"{self.prefix}.STREAM.INFO.{stream}",
                    error.code,
                    error.err_code,
                    f"stream '{stream}' not found",
                ) from None
            raise
        state, config = response["state"], response["config"]
        return StreamInfo(
            name=stream,
            first_seq=int(state.get("first_seq", 0)),
            last_seq=int(state.get("last_seq", 0)),
            messages=int(state.get("messages", 0)),
            allow_direct=bool(config.get("allow_direct", False)),
            duplicate_window_ns=int(config.get("duplicate_window", 0)),
            created=str(response.get("created", "")),
        )

    async def next_message(
        self, stream: str, seq: int, subject_filter: str | None = None
    ) -> StoredMessage | None:
        """The first stored message at or after `seq`, answered by the stream leader."""
        return await self._get(stream, {"seq": seq, "next_by_subj": subject_filter or ">"})

    async def message_at_time(self, stream: str, start_time: str) -> StoredMessage | None:
        """The first message stored at or after an RFC 3339 time."""
        return await self._get(stream, {"start_time": start_time})

    async def _get(self, stream: str, request: dict[str, Any]) -> StoredMessage | None:
        try:
            response = await self.request(f"STREAM.MSG.GET.{stream}", request)
        except JetStreamApiError as error:
            if error.code == 404:
                return None
            raise
        message = response["message"]
        return StoredMessage(str(message["subject"]), int(message["seq"]), str(message["time"]))

    async def create_consumer(self, stream: str, config: dict[str, Any]) -> str:
        response = await self.request(
            f"CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": config}
        )
        return str(response["name"])

    async def delete_consumer(self, stream: str, name: str) -> None:
        await self.request(f"CONSUMER.DELETE.{stream}.{name}")
