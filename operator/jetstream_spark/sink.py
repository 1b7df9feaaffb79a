"""Publish DataFrame rows to JetStream with acknowledgements and deduplicating message ids.

Every message carries `Nats-Msg-Id: <writeId>:<batchId>:<partitionId>:<row>` (or
`<writeId>:<batchId>:<messageIdColumn value>`). A retried task or a micro-batch replayed after
a restart publishes the same ids, and JetStream drops the copies it has already stored, as
long as they arrive within the stream's duplicate window. After the window a retry is stored
again: delivery is at-least-once, made effectively-once by the window.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from . import _sync
from ._nats_fast import FastClient
from .client import connect
from .options import WriteOptions, subject_problem

log = logging.getLogger(__name__)

_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"
_RESEND_ATTEMPTS = 3
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_RESERVED_HEADERS = {
    "nats-msg-id": "the sink sets it (give messageIdColumn to choose the id)",
    "nats-expected-stream": "the sink sets it from the 'stream' option",
}
_HEADER_LINE = b"NATS/1.0\r\n"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class PublishError(RuntimeError):
    """JetStream refused a message, or did not acknowledge it in time."""


@dataclass
class JetStreamCommitMessage(WriterCommitMessage):
    """What one task stored: new messages, and ones JetStream recognised as duplicates."""

    partition: int
    published: int
    duplicates: int


class _PairHeaders(dict[str, str]):
    """A header dict that may repeat a key: nats-py encodes whatever `items()` yields."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def items(self) -> Any:
        return list(self._pairs)


class _Publisher:
    """Keeps up to `max_in_flight` messages awaiting their PubAck on one connection."""

    def __init__(self, nc: FastClient, options: WriteOptions) -> None:
        self.nc = nc
        self.options = options
        self.prefix = nc.new_inbox()
        self._skip = len(self.prefix) + 1
        self.pending: dict[bytes, tuple[str, bytes, dict[str, str]]] = {}
        self.published = 0
        self.duplicates = 0
        self.error = ""
        self._count = 0
        self._low_water = 0
        self._window = asyncio.Event()
        self._busy_since = 0.0  # loop time when the publish under way began; 0 when idle
        self.stalled = False
        self._watchdog: asyncio.Task[None] | None = None
        self._clock: Callable[[], float] = time.monotonic

    async def start(self) -> None:
        self.subscription = await self.nc.raw_subscribe(f"{self.prefix}.*", self._on_ack)
        loop = asyncio.get_running_loop()
        self._clock = loop.time
        current = asyncio.current_task()
        if current is not None:
            self._watchdog = loop.create_task(self._watch(current))

    def _on_ack(self, subject: bytes, reply: bytes, headers: bytes | None, data: bytes) -> None:
        entry = self.pending.pop(subject[self._skip :], None)
        if entry is None:
            return  # the ack of a resent copy whose original was acknowledged already
        if headers is not None and headers[8:9] == b" ":
            status = headers[9:12].decode()
            reason = "no stream captures it" if status == "503" else headers.decode().strip()
            self.error = self.error or f"publishing to '{entry[0]}' failed: {reason}"
        elif b'"error"' in data:
            error = json.loads(data).get("error", {})
            self.error = self.error or (
                f"JetStream refused a message on '{entry[0]}': "
                f"{error.get('description', data.decode(errors='replace'))}"
            )
        elif b'"duplicate"' in data and json.loads(data).get("duplicate"):
            self.duplicates += 1  # the server writes `"duplicate": true`; parse, don't match
        else:
            self.published += 1
        if len(self.pending) <= self._low_water:
            self._window.set()

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        if self.error:
            raise PublishError(self.error)
        self._count += 1
        token = str(self._count)
        self.pending[token.encode()] = (subject, payload, headers)
        await self._send(subject, payload, token, headers)
        if len(self.pending) >= self.options.max_in_flight:
            await self.drain(self.options.max_in_flight // 2)

    async def _send(
        self, subject: str, payload: bytes, token: str, headers: dict[str, str]
    ) -> None:
        """nats-py's publish, bounded by the watchdog: it can wait for its flusher, which never
        finishes when the server stopped reading. (Not `wait_for`: a task per message would
        yield to the loop each time and turn every message into its own socket write.)"""
        self._busy_since = self._clock()
        try:
            await self.nc.publish(subject, payload, reply=f"{self.prefix}.{token}", headers=headers)
        except asyncio.CancelledError:
            if not self.stalled:
                raise
            raise self.stall_error(subject) from None
        except Exception as error:  # nats-py's ConnectionClosedError, OutboundBufferLimitError...
            raise PublishError(
                f"publishing to '{subject}' failed: {type(error).__name__} {error}"
                f"{self._server_said()}"
            ) from error
        finally:
            self._busy_since = 0.0
        if self.stalled:  # nats-py's flush swallows the cancellation and returns
            raise self.stall_error(subject)

    def stall_error(self, subject: str = "a subject") -> PublishError:
        return PublishError(
            f"publishing to '{subject}' did not complete within {self.options.ack_timeout}s"
            f"{self._server_said()}"
        )

    async def _watch(self, task: asyncio.Task[Any]) -> None:
        """Cancel the publishing task while one publish has been stuck for `ackTimeout`
        (again each period: nats-py's flush swallows a cancellation)."""
        period = min(1.0, self.options.ack_timeout / 4)
        while True:
            await asyncio.sleep(period)
            since = self._busy_since
            if since and self._clock() - since > self.options.ack_timeout:
                self.stalled = True
                task.cancel()

    def stop(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _server_said(self) -> str:
        errors = getattr(self.nc, "errors", [])
        return f" (the connection reported: {'; '.join(dict.fromkeys(errors))})" if errors else ""

    async def drain(self, target: int = 0) -> None:
        """Wait until at most `target` messages lack an ack, resending on silence."""
        resends = 0
        while len(self.pending) > target and not self.error:
            if self.nc.is_closed:
                raise PublishError(
                    f"the connection to NATS closed with {len(self.pending)} messages awaiting "
                    f"their PubAck{self._server_said()}"
                )
            self._low_water = target
            self._window.clear()
            try:
                await asyncio.wait_for(self._window.wait(), self.options.ack_timeout)
            except TimeoutError:
                resends += 1
                if resends > _RESEND_ATTEMPTS:
                    raise PublishError(
                        f"{len(self.pending)} messages got no PubAck within "
                        f"{self.options.ack_timeout}s after {_RESEND_ATTEMPTS} resends"
                        f"{self._server_said()}"
                    ) from None
                # Same Nats-Msg-Id, so a copy that did arrive is dropped as a duplicate.
                for token, (subject, payload, headers) in list(self.pending.items()):
                    await self._send(subject, payload, token.decode(), headers)
        if self.error:
            raise PublishError(self.error)


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8")
    return str(value)


def _header_pairs(value: Any, where: str = "a row") -> list[tuple[str, str]]:
    """array<struct<key,value>> arrives as dicts, map<k,v> as tuples; checked here, not by
    nats-py (whose checks vary by version: 2.9 let a line break inject headers)."""
    if not value:
        return []
    pairs: list[tuple[str, str]] = []
    for item in value:
        key, val = (item["key"], item["value"]) if isinstance(item, dict) else item
        if key is None:
            continue
        key = str(key)
        try:
            text = "" if val is None else _text(val)
        except UnicodeDecodeError:
            raise PublishError(f"{where}: header '{key}' is not UTF-8 text") from None
        problem = header_problem(key, text)
        if problem is not None:
            raise PublishError(f"{where}: {problem}")
        if key.lower() in _RESERVED_HEADERS:
            raise PublishError(
                f"{where}: header '{key}' may not be given: {_RESERVED_HEADERS[key.lower()]}"
            )
        pairs.append((key, text))
    return pairs


def header_problem(key: str, value: str) -> str | None:
    """Why `key: value` cannot be one header line (None when it can): the key must be a
    token, and the value may hold no line break or other control character, nor spaces at
    its ends (nats-py would strip them, or in 2.9 let a line break inject headers)."""
    if not _HEADER_KEY.fullmatch(key):
        return f"header name {key!r} is not a valid token (letters, digits, !#$%&'*+-.^_`|~)"
    if _CONTROL.search(value):
        return f"header '{key}' has a line break or control character in its value {value[:80]!r}"
    if value != value.strip():
        return f"header '{key}' has leading or trailing whitespace, which NATS drops"
    return None


def header_block_size(pairs: list[tuple[str, str]]) -> int:
    """Bytes of the header block nats-py sends for these pairs (counted in max_payload)."""
    return (
        len(_HEADER_LINE)
        + sum(len(key.encode()) + len(value.encode()) + 4 for key, value in pairs)
        + 2
    )


async def _publish_batches(
    options: WriteOptions,
    columns: tuple[str, ...],
    batches: Iterable[pa.RecordBatch],
    ids: str,
    where_prefix: str = "partition 0",
) -> tuple[int, int]:
    """Publish every row; `ids` is the message id prefix, rows add their index or column value.

    Every row is checked before it is sent (subject, headers, size against the server's
    max_payload): a bad row fails the task with its position instead of making the server
    close the connection."""
    problem = header_problem("Nats-Msg-Id", f"{ids}:0")
    if problem is not None:
        raise PublishError(f"{where_prefix}: {problem}")
    publisher: _Publisher | None = None
    try:
        async with connect(options.connection) as nc:
            publisher = _Publisher(nc, options)
            await publisher.start()
            try:
                return await _publish_rows(options, columns, batches, ids, where_prefix, publisher)
            finally:
                publisher.stop()
    except asyncio.CancelledError:
        # The watchdog's cancellation can surface later than the publish it was meant for.
        if publisher is not None and publisher.stalled:
            raise publisher.stall_error() from None
        raise


async def _publish_rows(
    options: WriteOptions,
    columns: tuple[str, ...],
    batches: Iterable[pa.RecordBatch],
    ids: str,
    where_prefix: str,
    publisher: _Publisher,
) -> tuple[int, int]:
    id_column = options.message_id_column
    max_payload = publisher.nc.max_payload
    checked: dict[str, None] = {}  # subjects already validated (rows usually repeat a few)
    row = 0
    for batch in batches:
        size = batch.num_rows
        if size == 0:
            continue
        datas = batch.column("data").to_pylist()
        subjects = (
            batch.column("subject").to_pylist()
            if "subject" in columns
            else [options.subject] * size
        )
        headers = batch.column("headers").to_pylist() if "headers" in columns else None
        keys = batch.column(id_column).to_pylist() if id_column else None
        for index in range(size):
            where = f"{where_prefix} row {row}"  # cheap next to the publish; for errors
            subject = subjects[index] or options.subject
            if not subject:
                raise PublishError(f"{where} has no subject and no 'subject' option is set")
            if subject not in checked:
                problem = subject_problem(subject, wildcards=False)
                if problem is not None:
                    raise PublishError(f"{where}: cannot publish to {subject!r}: {problem}")
                checked[subject] = None
            data = datas[index]
            payload = data.encode() if isinstance(data, str) else (data or b"")
            if keys is None:
                message_id = f"{ids}:{row}"
            else:
                key = keys[index]
                if key is None:
                    raise PublishError(
                        f"{where}: messageIdColumn '{id_column}' is null; every row needs "
                        "its own message id (rows with the same id are stored once)"
                    )
                message_id = f"{ids}:{_text(key)}"
                problem = header_problem("Nats-Msg-Id", message_id)
                if problem is not None:
                    raise PublishError(f"{where}: messageIdColumn '{id_column}': {problem}")
            pairs = [("Nats-Msg-Id", message_id)]
            if options.stream:
                pairs.append(("Nats-Expected-Stream", options.stream))
            if headers is not None:
                pairs.extend(_header_pairs(headers[index], where))
            total = len(payload) + header_block_size(pairs)
            if total > max_payload:
                raise PublishError(
                    f"{where} on '{subject}' is {total} bytes with headers, over the "
                    f"server's max_payload of {max_payload} bytes; nothing of it was sent"
                )
            names = {key for key, _ in pairs}
            header_map = dict(pairs) if len(names) == len(pairs) else _PairHeaders(pairs)
            await publisher.publish(subject, payload, header_map)
            row += 1
    await publisher.drain(0)
    return publisher.published, publisher.duplicates


def _task() -> tuple[int, TaskContext | None]:
    context = TaskContext.get()
    return (context.partitionId() if context is not None else 0), context


class _WriterBase:
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.columns = tuple(schema.fieldNames())

    def _write(self, batches: Iterator[pa.RecordBatch], write_id: str, batch_id: str) -> Any:
        partition, _ = _task()
        # With a key column the id must not depend on how rows are spread over partitions.
        ids = (
            f"{write_id}:{batch_id}"
            if self.options.message_id_column
            else f"{write_id}:{batch_id}:{partition}"
        )
        published, duplicates = _sync.run(
            lambda: _publish_batches(
                self.options, self.columns, batches, ids, f"batch {batch_id} partition {partition}"
            )
        )
        return JetStreamCommitMessage(partition, published, duplicates)


def _totals(messages: Iterable[WriterCommitMessage | None]) -> tuple[int, int]:
    published = duplicates = 0
    for message in messages:
        if isinstance(message, JetStreamCommitMessage):
            published += message.published
            duplicates += message.duplicates
    return published, duplicates


class JetStreamBatchWriter(_WriterBase, DataSourceArrowWriter):
    """Batch write; the write id is fixed on the driver, so every task attempt shares it."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.write_id = options.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        result: WriterCommitMessage = self._write(iterator, self.write_id, "0")
        return result

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        published, duplicates = _totals(messages)
        log.info(
            "jetstream write %s: %d stored, %d duplicates", self.write_id, published, duplicates
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        published, _ = _totals(messages)
        log.warning(
            "jetstream write %s aborted; %d messages already stored stay in the stream "
            "(rerun with writeId=%s within the duplicate window to complete it without copies)",
            self.write_id,
            published,
            self.write_id,
        )


class JetStreamStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """Streaming write; ids use the query id (stable across restarts) and the batch id."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.fallback_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        _, context = _task()
        query = context.getLocalProperty(_QUERY_ID) if context is not None else None
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        if not (self.options.write_id or query) or batch is None:
            log.warning("no streaming query or batch id in the task; retries may duplicate")
        write_id = self.options.write_id or query or self.fallback_id
        result: WriterCommitMessage = self._write(iterator, write_id, batch or "0")
        return result

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        published, duplicates = _totals(messages)
        log.info("jetstream batch %d: %d stored, %d duplicates", batchId, published, duplicates)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        published, _ = _totals(messages)
        log.warning(
            "jetstream batch %d aborted after storing %d messages; its replay reuses their ids",
            batchId,
            published,
        )
