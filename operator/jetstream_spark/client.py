"""A nats-py connection with a fast path for bulk replies, plus the few JetStream API calls used.

nats-py turns every incoming message into a `Msg` with parsed headers and queues it for a
task: fine for control traffic, but it caps a reader at under 100k messages/s when every
direct-get reply carries headers. `FastClient` keeps nats-py for everything (connect, auth,
TLS, reconnects, requests) and only routes MSG/HMSG for subscriptions registered with
`raw_subscribe` to a plain callback with the raw subject, reply, header and payload bytes,
or, for a subscription with a bulk handler, lets that handler take consecutive messages
straight from the read buffer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

from .options import ConnectionOptions

log = logging.getLogger(__name__)

RawHandler = Callable[[bytes, bytes, bytes | None, bytes], None]
"""(subject, reply, raw header block or None, payload) -> None; runs on the event loop."""

BulkHandler = Callable[[bytearray, memoryview, int, int], int]
"""(buffer, view of it, position, size) -> new position: consumes as many consecutive,
complete messages of its subscription as it recognises (typically with one regex match
each) and returns where it stopped; returning the position unchanged means "not mine"."""


class _FastParser(Parser):
    """Parses MSG/HMSG for raw subscriptions in one pass over the buffer.

    A subscription's bulk handler, when set, gets the first try at each of its messages; the
    per-message path below handles the rest. Anything else (PING, INFO, -ERR, messages for
    ordinary subscriptions, a payload split across reads that the base parser already
    started) goes to the base parser unchanged.
    """

    def __init__(self, nc: FastClient) -> None:
        super().__init__(nc)
        self._handlers = nc.raw_handlers_by_token
        self._bulk = nc.raw_bulk_by_token

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        buf.extend(data)
        handlers = self._handlers
        if self.state != AWAITING_CONTROL_LINE or not handlers:
            await super().parse()
            return
        pos, size, waiting = 0, len(buf), False
        view = memoryview(buf)
        try:
            while pos < size:
                if buf.startswith(b"HMSG ", pos):
                    skip, has_headers = 5, True
                elif buf.startswith(b"MSG ", pos):
                    skip, has_headers = 4, False
                else:
                    break
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    waiting = True
                    break
                args = bytes(view[pos + skip : eol]).split()
                handler = handlers.get(args[1])
                if handler is None:
                    break
                bulk = self._bulk.get(args[1])
                if bulk is not None:
                    try:
                        after = bulk(buf, view, pos, size)
                    except Exception:  # see below: never let an error stop the read loop
                        log.exception("bulk message handler failed")
                        after = pos
                    if after > pos:
                        pos = after
                        continue
                total = int(args[-1])
                start = eol + 2
                if start + total + 2 > size:
                    waiting = True
                    break
                reply = args[2] if len(args) == (5 if has_headers else 4) else b""
                if has_headers:
                    header_size = int(args[-2])
                    headers: bytes | None = bytes(view[start : start + header_size])
                    payload = bytes(view[start + header_size : start + total])
                else:
                    headers, payload = None, bytes(view[start : start + total])
                pos = start + total + 2
                try:
                    handler(args[0], reply, headers, payload)
                except Exception:  # an exception here would stop nats-py's read loop
                    log.exception("raw message handler failed")
        finally:
            view.release()
        if pos:
            del buf[:pos]
        if buf and not waiting:
            await super().parse()


class FastClient(Client):
    """nats-py's client with `raw_subscribe` for high-volume reply streams."""

    def __init__(self) -> None:
        super().__init__()
        self.raw_handlers: dict[int, RawHandler] = {}
        self.raw_handlers_by_token: dict[bytes, RawHandler] = {}  # sid as it appears on the wire
        self.raw_bulk_by_token: dict[bytes, BulkHandler] = {}
        self._ps = _FastParser(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        # Reached when the base parser handled a message (e.g. after a split read).
        handler = self.raw_handlers.get(sid)
        if handler is not None:
            handler(subject, reply, headers, data)
            return
        await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Subscription:
        subscription = await self.subscribe(subject)
        self.raw_handlers[subscription._id] = handler
        self.raw_handlers_by_token[str(subscription._id).encode()] = handler
        return subscription

    def set_bulk(self, subscription: Subscription, bulk: BulkHandler | None) -> None:
        """Install (or remove) the bulk handler of a raw subscription."""
        token = str(subscription._id).encode()
        if bulk is None:
            self.raw_bulk_by_token.pop(token, None)
        else:
            self.raw_bulk_by_token[token] = bulk

    async def raw_unsubscribe(self, subscription: Subscription) -> None:
        self.raw_handlers.pop(subscription._id, None)
        self.raw_handlers_by_token.pop(str(subscription._id).encode(), None)
        self.raw_bulk_by_token.pop(str(subscription._id).encode(), None)
        if not self.is_closed:
            await subscription.unsubscribe()


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
    try:
        await nc.connect(error_cb=remember, **options.connect_kwargs())
    except Exception as error:
        causes = "; ".join(dict.fromkeys(errors)) or str(error)
        raise ConnectError(
            f"cannot connect to NATS at {', '.join(options.servers)}: {causes}"
        ) from error
    try:
        yield nc
    finally:
        await nc.close()


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
