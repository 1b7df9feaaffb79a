"""Read one contiguous sequence range of a stream into Arrow record batches.

Two ways, both bounded by the planned last sequence so a range reads the same messages however
often it is retried:

* batched direct get (`$JS.API.DIRECT.GET.<stream>` with `seq` + `batch`), when the stream has
  `allow_direct`: no server-side state, any replica may answer;
* otherwise a pull over an ephemeral, in-memory, ack-none consumer starting at the range's
  first sequence, recreated from the last message on any delivery gap (what an ordered
  consumer does).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa

from ._nats_fast import FastClient
from .client import JetStreamApi, StreamInfo, connect
from .options import ReadOptions
from .schema import DIRECT_GET_HEADERS, ColumnBuffer, parse_header_block

MAX_BYTES_PER_REQUEST = 8 * 1024 * 1024
"""Caps one reply burst, and so a task's memory, whatever the message size."""

_RETRIES = 5
_LAG_RETRIES = 60
_CONSUMER_INACTIVE_NS = 60 * 1_000_000_000


class DataLossError(RuntimeError):
    """Messages a query still wanted were removed from the stream before it read them."""

    def __init__(self, stream: str, wanted: int, first_available: int) -> None:
        super().__init__(
            f"JetStream stream '{stream}' no longer has sequence {wanted}: the first available "
            f"sequence is {first_available}, so messages {wanted}..{first_available - 1} were "
            "removed (by limits, purge or deletion) before this query read them. "
            "Set failOnDataLoss=false to skip ahead instead."
        )
        self.stream = stream
        self.wanted = wanted
        self.first_available = first_available


class StreamRecreatedError(DataLossError):
    """The stream was deleted and recreated under the query: same name, new sequences."""

    def __init__(self, stream: str, wanted: int, was: str, now: str) -> None:
        RuntimeError.__init__(
            self,
            f"JetStream stream '{stream}' was deleted and recreated (created {was or 'earlier'}, "
            f"now {now}) while the query was at sequence {wanted}; its sequences restarted, so "
            "the offsets no longer name the same messages. Set failOnDataLoss=false to restart "
            "from the new stream's first message, or use a new checkpoint location.",
        )
        self.stream = stream
        self.wanted = wanted
        self.first_available = 1


def check_data_loss(info: StreamInfo, wanted: int) -> None:
    """Raise if sequence `wanted` is below the stream's first sequence (an empty new stream
    reports first_seq 0 and loses nothing)."""
    if wanted < info.first_seq:
        raise DataLossError(info.name, wanted, info.first_seq)


class ReadError(RuntimeError):
    """The server answered a read with an error, or stopped answering."""


async def read_range(
    options: ReadOptions,
    first: int,
    last: int,
    direct: bool,
    schema: pa.Schema,
    stream: str | None = None,
    created: str = "",
) -> AsyncIterator[pa.RecordBatch]:
    """Record batches of the messages of `stream` stored with first <= sequence <= last.

    `created` (the stream's creation time when the range was planned) detects a stream that
    was deleted and recreated since: with failOnDataLoss it fails, otherwise the range is
    skipped (its sequences name other messages now).
    """
    if first > last:
        return
    name = stream or options.stream
    async with connect(options.connection) as nc:
        api = JetStreamApi.of(nc, options.connection)
        guard = _LossGuard(api, options, name, created)
        if not await guard.check(first):
            return
        reader = _read_direct if direct else _read_consumer
        async for batch in reader(nc, api, options, name, first, last, schema, guard):
            yield batch


class _LossGuard:
    """The data-loss check at each fetch, as Kafka's source does it: when a fetch skips
    sequences (at its start, inside it, or by ending early), the first skipped sequence is
    compared with the stream's first sequence; below it means removed by limits, purge or
    deletion at the head, not deleted from the middle or filtered out."""

    def __init__(self, api: JetStreamApi, options: ReadOptions, stream: str, created: str):
        self.api = api
        self.stream = stream
        self.created = created
        self.enabled = options.fail_on_data_loss
        self.checks = 0

    async def check(self, wanted: int) -> bool:
        """False when the stream was recreated and losses are tolerated (skip the range)."""
        if not self.enabled and not self.created:
            return True
        self.checks += 1
        info = await self.api.stream_info(self.stream)
        if self.created and info.created != self.created:
            if self.enabled:
                raise StreamRecreatedError(self.stream, wanted, self.created, info.created)
            return False
        if self.enabled:
            check_data_loss(info, wanted)
        return True

    async def after_fetch(self, gap: int) -> None:
        if gap and self.enabled:
            await self.check(gap)


class _DirectReply:
    """Collects the replies to one direct-get batch request.

    `consume` (the bulk path, one regex match per reply) takes what it recognises straight
    from the connection's buffer; `on_message` gets the rest one by one: statuses, replies
    with unexpected headers, messages split across reads. Both run once per message, so they
    avoid attribute chains; the server appends its headers in a fixed order after the stored
    ones.
    """

    __slots__ = (
        "_add_data",
        "_add_headers",
        "_add_seq",
        "_add_subject",
        "_add_time",
        "broken",
        "done",
        "error",
        "expected",
        "finished",
        "gap_at",
        "last",
        "last_kept",
        "overrun",
        "pattern",
        "pending",
        "prev",
        "received",
        "reply",
        "status",
        "token",
    )

    def __init__(
        self,
        reply: bytes,
        buffer: ColumnBuffer,
        last: int,
        pattern: re.Pattern[bytes],
        first: int = 0,
    ) -> None:
        self.reply = reply
        self.expected = first  # the next sequence if nothing was skipped
        self.gap_at = 0  # the first sequence this reply skipped, for the data-loss check
        self.token = reply.rsplit(b".", 1)[1]
        self.pattern = pattern
        self.last = last
        self.done = asyncio.Event()
        self.finished = False
        self.received = 0
        self.prev = 0  # sequence of the previous reply, for the Nats-Last-Sequence chain
        self.last_kept = 0
        self.broken = False
        self.overrun = False
        self.status = b""
        self.pending = -1
        self.error = ""
        self._add_subject = buffer.subjects.append
        self._add_seq = buffer.seqs.append
        self._add_time = buffer.iso_times.append
        self._add_data = buffer.datas.append
        self._add_headers = buffer.headers.append if buffer.headers is not None else None

    def on_message(self, headers: bytes | None, data: bytes) -> None:
        if self.finished:
            return
        if headers is None or headers[8] == 32:  # "NATS/1.0 204 EOB", "NATS/1.0 404 ..."
            self._on_status(headers)
            return
        if self.broken:
            return  # wait for the end-of-batch status, then re-request
        parts = headers.rsplit(b"\r\n", 8)
        if (
            len(parts) == 9
            and parts[3][:15] == b"Nats-Sequence: "
            and parts[6][:20] == b"Nats-Last-Sequence: "
        ):
            seq = int(parts[3][15:])
            previous = int(parts[6][20:])
            subject = parts[2][14:]
            stamp = parts[4][17:]
            user = parts[0]
        else:
            fields = dict(parse_header_block(headers))
            try:
                subject, seq = fields["Nats-Subject"], int(fields["Nats-Sequence"])
                stamp, previous = fields["Nats-Time-Stamp"], int(fields["Nats-Last-Sequence"])
            except (KeyError, ValueError):
                self._finish(
                    error="replies lack the batch headers (Nats-Last-Sequence); batched direct "
                    "get needs nats-server 2.11+, use readMethod=consumer with older servers"
                    if "Nats-Sequence" in fields
                    else f"unexpected direct get reply headers: {headers[:200]!r}"
                )
                return
            user = headers
        self.received += 1
        if previous != self.prev:
            self.broken = True  # a reply went missing in transit; re-request from last_kept
            return
        self.prev = seq
        if seq > self.last:
            self.overrun = True
            self._finish()
            return
        if seq != self.expected and not self.gap_at:
            self.gap_at = self.expected
        self.expected = seq + 1
        self._add_subject(subject)
        self._add_seq(seq)
        self._add_time(stamp)
        self._add_data(data)
        if self._add_headers is not None:
            self._add_headers(
                [pair for pair in parse_header_block(user) if pair[0] not in DIRECT_GET_HEADERS]
            )
        self.last_kept = seq
        if seq == self.last:
            self._finish()

    def consume(self, buf: bytearray, view: memoryview, pos: int, size: int) -> int:
        """Bulk path: one regex match per reply instead of split/rsplit/slicing in Python.

        Stops (leaving the rest to `on_message`) at anything unusual: a status, a reply to
        another request, extra headers, an incomplete message, or the end of this request.
        """
        match = self.pattern.match
        token, last = self.token, self.last
        add_subject, add_seq, add_time, add_data = (
            self._add_subject,
            self._add_seq,
            self._add_time,
            self._add_data,
        )
        add_headers = self._add_headers
        while not self.finished:
            found = match(buf, pos)
            if found is None:
                break
            request, header_size, total, user, subject, sequence, stamp, previous = found.groups()
            end = found.end()
            payload = int(total) - int(header_size)
            if (
                request != token
                or end - found.start(4) != int(header_size)
                or end + payload + 2 > size
            ):
                break
            pos = end + payload + 2
            self.received += 1
            if self.broken:
                continue  # consume the rest of the batch; it is requested again
            seq = int(sequence)
            if int(previous) != self.prev:
                self.broken = True
                continue
            self.prev = seq
            if seq > last:
                self.overrun = True
                self._finish()
                break
            if seq != self.expected and not self.gap_at:
                self.gap_at = self.expected
            self.expected = seq + 1
            add_subject(subject)
            add_seq(seq)
            add_time(stamp)
            add_data(bytes(view[end : end + payload]))
            if add_headers is not None:
                add_headers(parse_header_block(user))
            self.last_kept = seq
            if seq == last:
                self._finish()
        return pos

    def _on_status(self, headers: bytes | None) -> None:
        if headers is None:
            self._finish(error="direct get reply without headers")
            return
        self.status = headers[9:12]
        if self.status == b"204":
            for key, value in parse_header_block(headers):
                if key == "Nats-Num-Pending":
                    self.pending = int(value)
        elif self.status not in (b"404", b"408"):
            self.error = headers.decode("utf-8", "replace").strip()
        self._finish()

    def _finish(self, error: str = "") -> None:
        self.error = self.error or error
        self.finished = True
        self.done.set()


def _direct_pattern(prefix: str, sid: int) -> re.Pattern[bytes]:
    """One direct-get reply on `<prefix>.<request>` for subscription `sid`: the control line,
    stored headers (group 4 starts the header block) and the server's six headers."""
    return re.compile(
        rb"HMSG "
        + re.escape(prefix.encode())
        + rb"\.(\d+) "
        + str(sid).encode()
        + rb" (\d+) (\d+)\r\n"
        + rb"(NATS/1\.0\r\n(?:[^\r\n]*\r\n)*?)"
        + rb"Nats-Stream: [^\r\n]*\r\n"
        + rb"Nats-Subject: ([^\r\n]*)\r\n"
        + rb"Nats-Sequence: (\d+)\r\n"
        + rb"Nats-Time-Stamp: ([^\r\n]*)\r\n"
        + rb"Nats-Num-Pending: \d+\r\n"
        + rb"Nats-Last-Sequence: (\d+)\r\n\r\n"
    )


async def _read_direct(
    nc: FastClient,
    api: JetStreamApi,
    options: ReadOptions,
    stream: str,
    first: int,
    last: int,
    schema: pa.Schema,
    guard: _LossGuard,
) -> AsyncIterator[pa.RecordBatch]:
    current: list[_DirectReply | None] = [None]

    def handler(subject: bytes, reply: bytes, headers: bytes | None, data: bytes) -> None:
        state = current[0]
        if state is not None and subject == state.reply:
            state.on_message(headers, data)

    prefix = nc.new_inbox()
    subscription = await nc.raw_subscribe(f"{prefix}.*", handler)
    pattern = _direct_pattern(prefix, nc.sid(subscription))
    request_subject = f"{api.prefix}.DIRECT.GET.{stream}"
    timeout = options.connection.request_timeout
    cursor, requests, retries, lagging = first, 0, 0, 0
    try:
        while cursor <= last:
            want = min(options.fetch_batch, last - cursor + 1)
            requests += 1
            buffer = ColumnBuffer("headers" in schema.names)
            state = _DirectReply(f"{prefix}.{requests}".encode(), buffer, last, pattern, cursor)
            current[0] = state
            nc.set_bulk(subscription, state.consume)
            body: dict[str, Any] = {
                "seq": cursor,
                "batch": want,
                "max_bytes": MAX_BYTES_PER_REQUEST,
            }
            if options.subject_filters:
                body["next_by_subj"] = options.subject_filters[0]
            await nc.publish(request_subject, json.dumps(body).encode(), reply=state.reply.decode())
            timed_out = False
            try:
                await asyncio.wait_for(state.done.wait(), timeout)
            except TimeoutError:
                timed_out = True
            current[0] = None
            nc.set_bulk(subscription, None)
            if state.error:
                raise ReadError(f"direct get from stream '{stream}' failed: {state.error}")
            await guard.after_fetch(state.gap_at)  # before Spark gets any of it
            if buffer.seqs:
                yield buffer.to_batch(stream, schema)
            if state.overrun or state.last_kept >= last:
                return
            after = state.last_kept + 1 if buffer.seqs else cursor
            if timed_out or state.broken:
                retries += 1
                if retries > _RETRIES:
                    raise ReadError(
                        f"direct get from stream '{stream}' at sequence {after} "
                        f"{'timed out' if timed_out else 'kept losing replies'}"
                    )
                cursor = after
                continue
            short = state.status == b"404" or (state.pending == 0 and state.received < want)
            if short:
                # The responder has nothing more up to `last`. Either the rest was deleted, or
                # it is a follower or mirror that lags: the leader decides which.
                following = await api.next_message(
                    stream, after, options.subject_filters[0] if options.subject_filters else None
                )
                if following is None or following.seq > last:
                    await guard.after_fetch(after)  # nothing more up to `last`: removed?
                    return
                lagging += 1
                if lagging > _LAG_RETRIES:
                    raise ReadError(
                        f"direct get replies for stream '{stream}' stay behind sequence "
                        f"{following.seq}; the answering replica lags"
                    )
                await asyncio.sleep(min(0.05 * lagging, 0.5))
            elif not buffer.seqs:
                raise ReadError(f"direct get from stream '{stream}' made no progress at {cursor}")
            cursor = after
    finally:
        current[0] = None
        await nc.raw_unsubscribe(subscription)


class _PullReply:
    """Collects the messages of one pull request on the ephemeral consumer."""

    __slots__ = (
        "broken",
        "buffer",
        "done",
        "error",
        "expected",
        "expected_dseq",
        "finished",
        "gap_at",
        "last",
        "last_kept",
        "pattern",
        "pending",
        "reached_end",
        "received",
        "reply",
        "status",
        "too_big",
        "want",
    )

    def __init__(
        self,
        reply: bytes,
        buffer: ColumnBuffer,
        last: int,
        want: int,
        expected_dseq: int,
        pattern: re.Pattern[bytes],
        first: int = 0,
    ) -> None:
        self.reply = reply
        self.expected = first  # the next sequence if nothing was skipped
        self.gap_at = 0  # the first sequence skipped up to `last`, for the data-loss check
        self.too_big = False  # the next message exceeds the request's max_bytes
        self.buffer = buffer
        self.last = last
        self.want = want
        self.expected_dseq = expected_dseq
        self.pattern = pattern
        self.done = asyncio.Event()
        self.finished = False
        self.received = 0
        self.last_kept = 0
        self.pending = -1
        self.broken = False
        self.reached_end = False
        self.status = b""
        self.error = ""

    def on_message(self, reply: bytes, headers: bytes | None, data: bytes, subject: bytes) -> None:
        if self.finished:
            return
        if headers is not None and headers[8:9] == b" ":
            self.status = headers[9:12]
            if self.status not in (b"404", b"408", b"409", b"100"):
                self.error = headers.decode("utf-8", "replace").strip()
            if self.status == b"409" and b"Consumer Deleted" in headers:
                self.error = "the ephemeral consumer was deleted while reading"
            if self.status == b"409" and b"Exceeds MaxBytes" in headers:
                self.too_big = True
            if self.status != b"100":
                self._finish()
            return
        self._accept(subject, reply[8:], headers, data)  # reply: $JS.ACK.<metadata>

    def consume(self, buf: bytearray, view: memoryview, pos: int, size: int) -> int:
        """Bulk path for messages without headers: one regex match each."""
        match = self.pattern.match
        while not self.finished:
            found = match(buf, pos)
            if found is None:
                break
            subject, metadata, length = found.groups()
            end = found.end()
            payload = int(length)
            if end + payload + 2 > size:
                break
            pos = end + payload + 2
            self._accept(subject, metadata, None, bytes(view[end : end + payload]))
        return pos

    def _accept(self, subject: bytes, metadata: bytes, headers: bytes | None, data: bytes) -> None:
        # <stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or with
        # <domain>.<account hash>. in front and a random token after (the v2 form).
        tokens = metadata.split(b".")
        offset = 0 if len(tokens) == 7 else 2
        try:
            seq = int(tokens[3 + offset])
            dseq = int(tokens[4 + offset])
            nanos = int(tokens[5 + offset])
            pending = int(tokens[6 + offset])
        except (IndexError, ValueError):
            self.error = f"unexpected consumer reply subject {metadata!r}"
            self._finish()
            return
        self.received += 1
        if dseq != self.expected_dseq:
            self.broken = True  # lost delivery: recreate the consumer after last_kept
            self._finish()
            return
        self.expected_dseq += 1
        self.pending = pending
        if seq != self.expected and not self.gap_at and self.expected <= self.last:
            self.gap_at = self.expected
        self.expected = seq + 1
        if seq > self.last:
            self.reached_end = True
            self._finish()
            return
        buffer = self.buffer
        buffer.subjects.append(subject)
        buffer.seqs.append(seq)
        buffer.times_ns.append(nanos)
        buffer.datas.append(data)
        if buffer.headers is not None:
            buffer.headers.append(parse_header_block(headers) if headers else [])
        self.last_kept = seq
        if seq == self.last or pending == 0:
            self.reached_end = True
            self._finish()
        elif self.received >= self.want:
            self._finish()

    def _finish(self) -> None:
        self.finished = True
        self.done.set()


def _consumer_pattern(sid: int) -> re.Pattern[bytes]:
    """A consumer delivery without headers: subject, ack metadata, payload size."""
    return re.compile(
        rb"MSG ([^ \r\n]+) " + str(sid).encode() + rb" \$JS\.ACK\.([^ \r\n]+) (\d+)\r\n"
    )


async def _read_consumer(
    nc: FastClient,
    api: JetStreamApi,
    options: ReadOptions,
    stream: str,
    first: int,
    last: int,
    schema: pa.Schema,
    guard: _LossGuard,
) -> AsyncIterator[pa.RecordBatch]:
    current: list[_PullReply | None] = [None]
    prefix = nc.new_inbox()

    def handler(subject: bytes, reply: bytes, headers: bytes | None, data: bytes) -> None:
        state = current[0]
        if state is None:
            return
        if reply.startswith(b"$JS.ACK."):
            state.on_message(reply, headers, data, subject)
        elif subject == state.reply:
            state.on_message(b"", headers, data, subject)

    subscription = await nc.raw_subscribe(f"{prefix}.*", handler)
    pattern = _consumer_pattern(nc.sid(subscription))
    timeout = options.connection.request_timeout
    cursor, requests, retries, expected_dseq = first, 0, 0, 1
    consumer: str | None = None
    unbounded = False  # the next message is larger than MAX_BYTES_PER_REQUEST: pull it alone
    try:
        while cursor <= last:
            if consumer is None:
                consumer = await api.create_consumer(stream, _consumer_config(options, cursor))
                expected_dseq = 1
            want = min(options.fetch_batch, last - cursor + 1)
            requests += 1
            buffer = ColumnBuffer("headers" in schema.names)
            reply = f"{prefix}.{requests}"
            if unbounded:
                want = 1
            state = _PullReply(reply.encode(), buffer, last, want, expected_dseq, pattern, cursor)
            current[0] = state
            nc.set_bulk(subscription, state.consume)
            body: dict[str, Any] = {"batch": want, "no_wait": True}
            if not unbounded:
                body["max_bytes"] = MAX_BYTES_PER_REQUEST
            unbounded = False
            await nc.publish(
                f"{api.prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}",
                json.dumps(body).encode(),
                reply=reply,
            )
            timed_out = False
            try:
                await asyncio.wait_for(state.done.wait(), timeout)
            except TimeoutError:
                timed_out = True
            current[0] = None
            nc.set_bulk(subscription, None)
            if state.error:
                raise ReadError(f"reading stream '{stream}' failed: {state.error}")
            after = state.last_kept + 1 if buffer.seqs else cursor
            ended = state.reached_end or (not buffer.seqs and state.status == b"404")
            # Before Spark gets any of it: skipped sequences, or a range that ends early.
            await guard.after_fetch(state.gap_at or (after if ended and after <= last else 0))
            if buffer.seqs:
                yield buffer.to_batch(stream, schema)
            if ended:
                return
            if timed_out or state.broken:
                retries += 1
                if retries > _RETRIES:
                    raise ReadError(
                        f"reading stream '{stream}' at sequence {after} "
                        f"{'timed out' if timed_out else 'kept losing deliveries'}"
                    )
                await _delete_quietly(api, stream, consumer)
                consumer, cursor = None, after
                continue
            if not buffer.seqs:
                if state.too_big:
                    unbounded = True
                    continue
                retries += 1  # e.g. 408/409 before any message: ask again, but not forever
                if retries > _RETRIES:
                    raise ReadError(
                        f"reading stream '{stream}' at sequence {cursor} made no "
                        f"progress (status {state.status.decode() or 'none'})"
                    )
            expected_dseq = state.expected_dseq
            cursor = after
    finally:
        current[0] = None
        await nc.raw_unsubscribe(subscription)
        if consumer is not None:
            await _delete_quietly(api, stream, consumer)


def _consumer_config(options: ReadOptions, start: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": start,
        "ack_policy": "none",
        "replay_policy": "instant",
        "inactive_threshold": _CONSUMER_INACTIVE_NS,
        "mem_storage": True,
        "num_replicas": 1,
    }
    if len(options.subject_filters) == 1:
        config["filter_subject"] = options.subject_filters[0]
    elif options.subject_filters:
        config["filter_subjects"] = list(options.subject_filters)
    return config


async def _delete_quietly(api: JetStreamApi, stream: str, consumer: str) -> None:
    # Best effort: the inactive threshold removes it anyway if this fails or the task dies.
    try:
        await api.delete_consumer(stream, consumer)
    except Exception:
        return
