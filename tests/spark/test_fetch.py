"""The read path without Spark: direct get and consumer agree, replicas may lag, TLS works."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jetstream_devtools.natsserver import NatsServer
from jetstream_devtools.pki import create_ca, issue_cert, issue_serving_cert
from jetstream_spark import ReadOptions, message_schema
from jetstream_spark._sync import iterate
from jetstream_spark.fetch import read_range
from jetstream_spark.schema import arrow_schema

from .helpers import create_stream, delete_messages, publish, run, unique

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = arrow_schema(message_schema(True))


def _read(url: str, stream: str, first: int, last: int, direct: bool, **options: str) -> pa.Table:
    read = ReadOptions.from_options({"servers": url, "stream": stream, **options})
    batches = list(iterate(lambda: read_range(read, first, last, direct, SCHEMA)))
    return pa.Table.from_batches(batches, SCHEMA)


def test_direct_and_consumer_reads_agree(nats_server: Any) -> None:
    url, stream = nats_server.url, unique("AGREE")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True)
    publish(
        url,
        ((f"{stream}.{i % 3}", bytes([i % 256]) * (i % 7)) for i in range(1, 501)),
        headers=lambda i: {"A": str(i), "B": "x"} if i % 4 == 0 else None,
    )
    delete_messages(url, stream, [1, 100, 101, 499])
    for options in ({}, {"subjectFilter": f"{stream}.1"}, {"fetchBatchSize": "7"}):
        direct = _read(url, stream, 2, 500, True, **options)
        consumer = _read(url, stream, 2, 500, False, **options)
        assert direct.equals(consumer), options
    everything = _read(url, stream, 2, 500, True)
    assert everything.num_rows == 496
    assert everything.column("sequence").to_pylist()[:3] == [2, 3, 4]
    assert everything.slice(3, 1).to_pylist()[0]["headers"] == [
        {"key": "A", "value": b"4"},
        {"key": "B", "value": b"x"},
    ]
    # The planned end is a hard stop, even with more messages after it.
    assert _read(url, stream, 200, 210, True).column("sequence").to_pylist() == list(
        range(200, 211)
    )
    assert _read(url, stream, 200, 210, False).num_rows == 11


class _LaggingReplica:
    """Answers DIRECT.GET for a stream like a replica that first lags, then drops a reply.

    A raw protocol client, because status replies ("NATS/1.0 204 EOB") cannot be sent with
    nats-py's publish.
    """

    def __init__(self, port: int, stream: str, stored: dict[int, dict[str, Any]]) -> None:
        self.port, self.stream, self.stored = port, stream, stored
        self.requests = 0

    async def serve(self, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        await reader.readline()  # INFO
        writer.write(b'CONNECT {"headers":true,"verbose":false,"protocol":1}\r\n')
        writer.write(f"SUB $JS.API.DIRECT.GET.{self.stream} 1\r\nPING\r\n".encode())
        await writer.drain()
        while (await reader.readline()).strip() != b"PONG":
            pass
        ready.set()
        while True:
            line = (await reader.readline()).split()
            if not line or line[0] != b"MSG":
                continue
            reply, size = line[3].decode(), int(line[4])
            request = json.loads((await reader.readexactly(size + 2))[:size])
            writer.write(self.answer(reply, request))
            await writer.drain()

    def answer(self, reply: str, request: dict[str, Any]) -> bytes:
        self.requests += 1
        wanted = [seq for seq in sorted(self.stored) if seq >= request["seq"]]
        batch = wanted[: request["batch"]]
        pending = len(wanted) - len(batch)
        if self.requests == 1:  # lagging: this replica has only seen up to sequence 7
            batch, pending = [seq for seq in batch if seq <= 7], 0
        lost = batch[1] if self.requests == 2 and len(batch) > 2 else None  # lost in transit
        out, previous = b"", 0
        for seq in batch:
            if seq == lost:
                previous = seq
                continue
            message = self.stored[seq]
            headers = (
                f"NATS/1.0\r\nNats-Stream: {self.stream}\r\nNats-Subject: {message['subject']}"
                f"\r\nNats-Sequence: {seq}\r\nNats-Time-Stamp: {message['time']}\r\n"
                f"Nats-Num-Pending: 0\r\nNats-Last-Sequence: {previous}\r\n\r\n"
            ).encode()
            out += f"HPUB {reply} {len(headers)} {len(headers) + 1}\r\n".encode()
            out += headers + b"x\r\n"
            previous = seq
        status = (
            f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\n"
            f"Nats-Last-Sequence: {previous}\r\n\r\n"
        ).encode()
        return out + f"HPUB {reply} {len(status)} {len(status)}\r\n".encode() + status + b"\r\n"


def test_direct_get_waits_for_a_lagging_replica_and_rerequests_lost_replies(
    nats_server: Any,
) -> None:
    url, stream = nats_server.url, unique("LAGGING")
    # No allow_direct: the server leaves DIRECT.GET to our fake replica.
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, ((f"{stream}.s", b"x") for _ in range(30)))
    delete_messages(url, stream, [5, 20])

    async def scenario() -> list[int]:
        import nats

        nc = await nats.connect(url)
        stored = {}
        for seq in range(1, 31):
            response = json.loads(
                (
                    await nc.request(
                        f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode()
                    )
                ).data
            )
            if "message" in response:
                stored[seq] = response["message"]
        await nc.close()
        replica = _LaggingReplica(nats_server.port, stream, stored)
        ready = asyncio.Event()
        task = asyncio.create_task(replica.serve(ready))
        await ready.wait()
        options = ReadOptions.from_options(
            {"servers": url, "stream": stream, "fetchBatchSize": "10"}
        )
        try:
            return [
                seq
                for batch in [b async for b in read_range(options, 1, 30, True, SCHEMA)]
                for seq in batch.column("sequence").to_pylist()
            ]
        finally:
            task.cancel()

    assert run(scenario()) == [s for s in range(1, 31) if s not in (5, 20)]


def test_mutual_tls(tmp_path: Path) -> None:
    ca = create_ca("spark-nats-ca")
    ca_file, _ = ca.write(tmp_path, "ca")
    server_cert, server_key = issue_serving_cert(ca).write(tmp_path, "server")
    client_cert, client_key = issue_cert(ca, "spark", client=True).write(tmp_path, "client")
    server = NatsServer(
        tmp_path,
        name="nats-tls",
        extra_config=(
            f'tls {{ cert_file: "{server_cert}", key_file: "{server_key}", '
            f'ca_file: "{ca_file}", verify: true }}'
        ),
    )
    server.start()
    try:
        tls = {
            "tlsCaFile": str(ca_file),
            "tlsCertFile": str(client_cert),
            "tlsKeyFile": str(client_key),
        }
        stream = unique("TLS")

        async def setup() -> None:
            import nats

            from jetstream_spark.options import ConnectionOptions

            nc = await nats.connect(
                **ConnectionOptions.from_options({"servers": server.url, **tls}).connect_kwargs()
            )
            js = nc.jetstream()
            await js.add_stream(name=stream, subjects=[f"{stream}.>"], allow_direct=True)
            for index in range(5):
                await js.publish(f"{stream}.x", str(index).encode())
            await nc.close()

        run(setup())
        table = _read(server.url.replace("nats://", "tls://"), stream, 1, 5, True, **tls)
        assert table.column("data").to_pylist() == [b"0", b"1", b"2", b"3", b"4"]
    finally:
        server.stop()
