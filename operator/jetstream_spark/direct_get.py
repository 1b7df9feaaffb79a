"""Read a range by batched direct get (`$JS.API.DIRECT.GET.<stream>` with `seq` + `batch`).

Only with readMethod=direct, on a stream with `allow_direct`: no server-side state and any
replica may answer, so when a responder comes up short the leader says whether the rest was
deleted or that replica lags.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa

from ._nats_fast import FastClient
from .client import JetStreamApi
from .data_loss import LossGuard
from .options import ReadOptions
from .read_limits import MAX_BYTES_PER_REQUEST, RETRIES, ReadError
from .schema import DIRECT_GET_HEADERS, ColumnBuffer, parse_header_block

_LAG_RETRIES = 60


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


async def read_direct(
    nc: FastClient,
    api: JetStreamApi,
    options: ReadOptions,
    stream: str,
    first: int,
    last: int,
    schema: pa.Schema,
    guard: LossGuard,
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
                if retries > RETRIES:
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
