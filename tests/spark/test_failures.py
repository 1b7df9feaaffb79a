"""Issue 15: every way a pipeline could quietly go wrong fails early and names the culprit.

Against real nats-servers: the session's, or one a test starts itself when it needs another
max_payload or must stop the server under a write.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

from jetstream_devtools.natsserver import NatsServer
from jetstream_spark import DataLossError, JetStreamDataSource, PublishError, ReadOptions
from jetstream_spark._sync import iterate
from jetstream_spark.fetch import read_range
from jetstream_spark.schema import HEADER_TYPE, arrow_schema, message_schema

from .helpers import (
    available_now_to_parquet,
    create_stream,
    delete_stream,
    publish,
    stored_messages,
    stream_df,
    unique,
    with_js,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SCHEMA = arrow_schema(message_schema(True))
DATA = StructField("data", BinaryType())


def _writer(url: str, fields: list[StructField], **options: str) -> Any:
    return JetStreamDataSource({"servers": url, **options}).writer(StructType(fields), False)


def test_oversized_row_fails_before_publishing(nats_server: Any) -> None:
    url, stream = nats_server.url, unique("BIG")
    create_stream(url, stream, [f"{stream}.>"])
    writer = _writer(url, [DATA], subject=f"{stream}.x", ackTimeout="2")
    rows = [b"small"] * 3 + [b"x" * (1024 * 1024)] + [b"after"]
    started = time.monotonic()
    with pytest.raises(PublishError, match=r"row 3 on '.*\.x' is \d+ bytes .* max_payload of"):
        writer.write(iter([pa.record_batch([pa.array(rows)], names=["data"])]))
    assert time.monotonic() - started < 10
    assert len(stored_messages(url, stream)) == 3  # the rows before it, acknowledged


def test_write_is_bounded_when_the_server_goes_away(tmp_path: Path) -> None:
    server = NatsServer(tmp_path, name="nats-vanishing")
    server.start()
    try:
        stream = unique("GONE")
        create_stream(server.url, stream, [f"{stream}.>"], cleanup=False)
        writer = _writer(server.url, [DATA], subject=f"{stream}.x", ackTimeout="2")
        batch = pa.record_batch([pa.array([b"m" * 100] * 2000)], names=["data"])

        def batches() -> Iterator[pa.RecordBatch]:
            yield batch
            server.stop()  # mid-write: the next rows have nowhere to go
            for _ in range(50):
                yield batch

        started = time.monotonic()
        with pytest.raises(PublishError, match=r"(connection|PubAck|publishing)"):
            writer.write(batches())
        assert time.monotonic() - started < 40
    finally:
        server.stop()


class _DeafServer:
    """A NATS server that completes the handshake, then never reads again: the client's
    socket buffers fill and nats-py's publish waits for its flusher for ever."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            connection, _ = self.listener.accept()
            self.connections.append(connection)
            info = {
                "server_id": "deaf",
                "version": "2.12.0",
                "proto": 1,
                "headers": True,
                "max_payload": 1048576,
            }
            connection.sendall(f"INFO {json.dumps(info)}\r\n".encode())
            received = b""
            while b"PING" not in received:
                received += connection.recv(4096)
            connection.sendall(b"PONG\r\n")

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
        self.listener.close()


def test_publish_into_a_server_that_stops_reading_is_bounded() -> None:
    server = _DeafServer()
    try:
        writer = _writer(
            f"nats://127.0.0.1:{server.port}",
            [DATA],
            subject="deaf.x",
            ackTimeout="2",
            requestTimeout="2",  # also bounds closing the stuck connection
            maxInFlight="100000",
        )
        batch = pa.record_batch([pa.array([b"m" * 1000] * 20_000)], names=["data"])
        started = time.monotonic()
        with pytest.raises(PublishError, match=r"did not complete within 2\.0s"):
            writer.write(iter([batch] * 5))
        assert time.monotonic() - started < 30
    finally:
        server.close()


def test_null_message_ids_fail_instead_of_merging_rows(nats_server: Any) -> None:
    url, stream = nats_server.url, unique("NULLID")
    create_stream(url, stream, [f"{stream}.>"])
    writer = _writer(
        url, [DATA, StructField("id", StringType())], subject=f"{stream}.x", messageIdColumn="id"
    )
    ids = [f"k{i}" for i in range(20)]
    ids[7] = None  # type: ignore[call-overload]
    batch = pa.record_batch(
        [pa.array([f"v{i}".encode() for i in range(20)]), pa.array(ids)], names=["data", "id"]
    )
    with pytest.raises(PublishError, match=r"partition 0 row 7: messageIdColumn 'id' is null"):
        writer.write(iter([batch]))
    assert len(stored_messages(url, stream)) == 7


def test_headers_and_subjects_are_validated_before_sending(nats_server: Any) -> None:
    url, stream = nats_server.url, unique("INJECT")
    create_stream(url, stream, [f"{stream}.>"])
    headers = StructField("headers", ArrayType(HEADER_TYPE))
    writer = _writer(url, [DATA, headers], subject=f"{stream}.x")
    forged = [{"key": "X-Note", "value": b"hi\r\nNats-Msg-Id: forged"}]
    batch = pa.record_batch(
        [
            pa.array([b"a"]),
            pa.array([forged], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ],
        names=["data", "headers"],
    )
    with pytest.raises(PublishError, match="row 0: header 'X-Note' has a line break"):
        writer.write(iter([batch]))

    by_subject = _writer(url, [StructField("subject", StringType()), DATA])
    for subject, problem in [(f"{stream}.*", "wildcard"), (f"{stream}.a b", "whitespace")]:
        rows = pa.record_batch([pa.array([subject]), pa.array([b"a"])], names=["subject", "data"])
        with pytest.raises(PublishError, match=f"row 0: cannot publish to .*{problem}"):
            by_subject.write(iter([rows]))
    assert stored_messages(url, stream) == []


def _read(url: str, stream: str, first: int, last: int, direct: bool, **options: str) -> Any:
    read = ReadOptions.from_options({"servers": url, "stream": stream, **options})
    return iterate(lambda: read_range(read, first, last, direct, SCHEMA))


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "consumer"])
def test_messages_removed_during_a_read_are_data_loss(nats_server: Any, direct: bool) -> None:
    url, stream = nats_server.url, unique("MIDLOSS")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True)
    publish(url, ((f"{stream}.m", b"x") for _ in range(20_000)))
    batches = _read(url, stream, 1, 20_000, direct, fetchBatchSize="1000")
    first = next(batches)
    assert first.num_rows == 1000

    async def purge(nc: Any) -> None:
        await nc.jetstream().purge_stream(stream, seq=11_001)  # keeps 11001 and later

    with_js(url, purge)
    with pytest.raises(DataLossError, match=r"no longer has sequence \d+: the first available"):
        for _ in batches:
            pass
    # Without failOnDataLoss the same read skips to what is left.
    rest = list(_read(url, stream, 1, 20_000, direct, failOnDataLoss="false"))
    assert sum(batch.num_rows for batch in rest) == 9_000


def test_messages_over_8_mib_on_both_read_paths(tmp_path: Path) -> None:
    server = NatsServer(tmp_path, name="nats-large", extra_config="max_payload: 16MB")
    server.start()
    try:
        stream = unique("LARGE")
        create_stream(server.url, stream, [f"{stream}.>"], allow_direct=True, cleanup=False)
        big = bytes(range(256)) * (9 * 4096 + 1)  # just over 9 MiB
        publish(server.url, [(f"{stream}.s", b"a"), (f"{stream}.b", big), (f"{stream}.s", b"z")])
        for direct in (True, False):
            table = pa.Table.from_batches(list(_read(server.url, stream, 1, 3, direct)), SCHEMA)
            assert table.column("data").to_pylist() == [b"a", big, b"z"], direct
    finally:
        server.stop()


def _stream_query(
    spark: Any, url: str, stream: str, output: Path, checkpoint: Path, **options: str
) -> Any:
    frame = stream_df(spark, url, stream, **options).select("stream", "sequence", "data")
    return available_now_to_parquet(frame, output, checkpoint)


def test_recreated_stream_fails_like_kafka(spark: Any, nats_server: Any, tmp_path: Path) -> None:
    url, stream = nats_server.url, unique("RECREATE")
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, ((f"{stream}.m", f"old{i}".encode()) for i in range(50)))
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert _stream_query(spark, url, stream, output, checkpoint).exception() is None

    delete_stream(url, stream)
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, ((f"{stream}.m", f"new{i}".encode()) for i in range(30)))
    failed = _stream_query(spark, url, stream, output, checkpoint)
    assert f"stream '{stream}' was deleted and recreated" in str(failed.exception())

    tolerant = _stream_query(spark, url, stream, output, checkpoint, failOnDataLoss="false")
    assert tolerant.exception() is None
    data = sorted(r.data.decode() for r in spark.read.parquet(str(output)).collect())
    assert data == sorted([f"old{i}" for i in range(50)] + [f"new{i}" for i in range(30)])


def test_option_mistakes_surface_in_spark(spark: Any, nats_server: Any) -> None:
    url, stream = nats_server.url, unique("OPTS")
    create_stream(url, stream, [f"{stream}.>"])
    publish(url, ((f"{stream}.m", b"x") for _ in range(10)))

    def base() -> Any:
        return spark.read.format("jetstream").option("servers", url).option("stream", stream)

    with pytest.raises(Exception, match="did you mean 'startingOffsets'"):
        base().option("startingOffset", "3").load().collect()
    with pytest.raises(Exception, match="is after its end"):
        base().option("startingOffsets", "8").option("endingOffsets", "3").load().collect()
    kafka_style = base().option("maxRecordsPerPartition", "4").load()
    assert kafka_style.rdd.getNumPartitions() >= 3
    assert kafka_style.count() == 10
