"""The one module that uses nats-py internals: a fast path for bulk reply streams.

nats-py turns every incoming message into a `Msg` with parsed headers and queues it for a
task: fine for control traffic, but it caps a reader at under 100k messages/s when every
direct-get reply carries headers. `FastClient` keeps nats-py for everything (connect, auth,
TLS, reconnects, requests) and only routes MSG/HMSG for subscriptions registered with
`raw_subscribe` to a plain callback with the raw subject, reply, header and payload bytes,
or, for a subscription with a bulk handler, lets that handler take consecutive messages
straight from the read buffer.

Internals used: `Client._ps` (replaced by a `Parser` subclass), `Parser.buf/state/parse`,
`AWAITING_CONTROL_LINE`, `Client._process_msg(sid, subject, reply, data, headers)` and
`Subscription._id`. They are the same in nats-py 2.9 to 2.16, the range the `spark` extra
pins and `SUPPORTED_NATS_PY` states; `check_version` refuses anything else with a clear
error rather than misreading messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

log = logging.getLogger(__name__)

SUPPORTED_NATS_PY = ((2, 9), (2, 17))
"""[lowest, highest) nats-py minor versions whose internals this module was tested with."""

RawHandler = Callable[[bytes, bytes, bytes | None, bytes], None]
"""(subject, reply, raw header block or None, payload) -> None; runs on the event loop."""

BulkHandler = Callable[[bytearray, memoryview, int, int], int]
"""(buffer, view of it, position, size) -> new position: consumes as many consecutive,
complete messages of its subscription as it recognises (typically with one regex match
each) and returns where it stopped; returning the position unchanged means "not mine"."""


class UnsupportedNatsPy(RuntimeError):
    """The installed nats-py is outside the range whose internals this package knows."""


def nats_py_version() -> tuple[int, int]:
    try:
        text = version("nats-py")
    except PackageNotFoundError:  # e.g. a source checkout on PYTHONPATH
        import nats.aio.client as module

        text = str(getattr(module, "__version__", "0.0"))
    major, minor = (int(part) for part in text.split(".")[:2])
    return major, minor


def check_version(found: tuple[int, int] | None = None) -> None:
    found = found or nats_py_version()
    low, high = SUPPORTED_NATS_PY
    if not low <= found < high:
        raise UnsupportedNatsPy(
            f"jetstream_spark reads with nats-py internals known for nats-py "
            f"{low[0]}.{low[1]} up to (not including) {high[0]}.{high[1]}; found "
            f"{found[0]}.{found[1]}. Install 'jetstream-operator[spark]', which pins that range."
        )


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
        self.errors: list[str] = []  # what the server or transport reported, newest last

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        # Reached when the base parser handled a message (e.g. after a split read).
        handler = self.raw_handlers.get(sid)
        if handler is not None:
            handler(subject, reply, headers, data)
            return
        await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]

    @staticmethod
    def sid(subscription: Subscription) -> int:
        """The subscription id as it appears in MSG/HMSG control lines."""
        return int(subscription._id)

    async def raw_subscribe(self, subject: str, handler: RawHandler) -> Subscription:
        check_version()
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
