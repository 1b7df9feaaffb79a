"""Pure parts of jetstream_spark: options, planning arithmetic, schemas, the wire parser."""

from __future__ import annotations

import asyncio
import itertools
import ssl
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from jetstream_operator.devenv.pki import create_ca, issue_cert
from jetstream_spark import JetStreamOptionError, ReadOptions, WriteOptions, message_schema
from jetstream_spark.client import FastClient, StreamInfo
from jetstream_spark.fetch import DataLossError
from jetstream_spark.options import ConnectionOptions, Position, ReadMethod, parse_time
from jetstream_spark.planning import SequenceRange, next_end, split_range
from jetstream_spark.schema import (
    ColumnBuffer,
    arrow_schema,
    check_read_schema,
    check_write_schema,
    parse_header_block,
)
from jetstream_spark.source import JetStreamStreamReader

pytestmark = pytest.mark.spark


def test_connection_options_map_onto_nats_connect(tmp_path: Path) -> None:
    plain = ConnectionOptions.from_options({"servers": "nats://a:4222, nats://b:4222"})
    assert plain.connect_kwargs()["servers"] == ["nats://a:4222", "nats://b:4222"]
    assert "tls" not in plain.connect_kwargs()

    assert (
        ConnectionOptions.from_options({"USER": "u", "Password": "p"}).connect_kwargs()["password"]
        == "p"
    )
    assert ConnectionOptions.from_options({"token": "t"}).connect_kwargs()["token"] == "t"
    seed = ConnectionOptions.from_options({"nkeySeed": "SUAXXX"}).connect_kwargs()
    assert seed["nkeys_seed_str"] == "SUAXXX"
    seed_file = ConnectionOptions.from_options({"nkeySeedFile": "/s.nk"}).connect_kwargs()
    assert seed_file["nkeys_seed"] == "/s.nk"
    creds = ConnectionOptions.from_options({"credsFile": "/u.creds"}).connect_kwargs()
    assert creds["user_credentials"] == "/u.creds"

    ca = create_ca("spark-test-ca")
    ca_file, _ = ca.write(tmp_path, "ca")
    cert_file, key_file = issue_cert(ca, "spark", client=True).write(tmp_path, "client")
    tls = ConnectionOptions.from_options(
        {
            "servers": "tls://127.0.0.1:4222",
            "tlsCaFile": str(ca_file),
            "tlsCertFile": str(cert_file),
            "tlsKeyFile": str(key_file),
            "tlsHostname": "nats.internal",
        }
    ).connect_kwargs()
    assert isinstance(tls["tls"], ssl.SSLContext)
    assert tls["tls_hostname"] == "nats.internal"

    for bad, message in [
        ({"user": "u"}, "go together"),
        ({"user": "u", "password": "p", "token": "t"}, "one authentication method"),
        ({"tlsCertFile": "c"}, "go together"),
        ({"connectTimeout": "-1"}, "positive"),
    ]:
        with pytest.raises(JetStreamOptionError, match=message):
            ConnectionOptions.from_options(bad)


def test_read_options() -> None:
    defaults = ReadOptions.from_options({"stream": "ORDERS"})
    assert defaults.start.position is Position.EARLIEST
    assert defaults.end.position is Position.LATEST
    assert defaults.fail_on_data_loss and not defaults.include_headers
    assert defaults.read_method is ReadMethod.AUTO
    streaming = ReadOptions.from_options({"stream": "ORDERS"}, streaming=True)
    assert streaming.start.position is Position.LATEST  # as Kafka: new queries start at the end

    options = ReadOptions.from_options(
        {
            "stream": "ORDERS",
            "startingOffsets": "42",
            "endingTimestamp": "2026-11-21T10:00:00Z",
            "minPartitions": "3",
            "maxMessagesPerPartition": "1000",
            "failOnDataLoss": "false",
            "subjectFilter": "orders.eu.>",
            "readMethod": "consumer",
        }
    )
    assert (options.start.position, options.start.sequence) == (Position.SEQUENCE, 42)
    assert options.end.time == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert (options.min_partitions, options.max_messages_per_partition) == (3, 1000)
    assert not options.fail_on_data_loss and options.subject_filter == "orders.eu.>"
    assert parse_time("1700000000000") == datetime.fromtimestamp(1_700_000_000, UTC)

    for bad, message in [
        ({}, "'stream'"),
        ({"stream": "A.B"}, "not a valid stream name"),
        ({"stream": "S", "startingOffsets": "soon"}, "earliest, latest or a stream sequence"),
        ({"stream": "S", "startingOffsets": "1", "startingTimestamp": "1"}, "only one"),
        ({"stream": "S", "endingOffsets": "earliest"}, "latest or a sequence"),
        ({"stream": "S", "minPartitions": "0"}, ">= 1"),
        ({"stream": "S", "readMethod": "fast"}, "auto, direct or consumer"),
        ({"stream": "S", "includeHeaders": "maybe"}, "true or false"),
    ]:
        with pytest.raises(JetStreamOptionError, match=message):
            ReadOptions.from_options(bad)
    with pytest.raises(JetStreamOptionError, match="batch reads only"):
        ReadOptions.from_options({"stream": "S", "endingOffsets": "5"}, streaming=True)


def test_write_options() -> None:
    options = WriteOptions.from_options(
        {"subject": "out.x", "writeId": "w", "maxInFlight": "10", "stream": "OUT"}
    )
    assert (options.subject, options.write_id, options.max_in_flight) == ("out.x", "w", 10)
    with pytest.raises(JetStreamOptionError, match="spaces"):
        WriteOptions.from_options({"writeId": "a b"})


@pytest.mark.parametrize("span", [1, 2, 7, 100, 1001])
@pytest.mark.parametrize("minimum", [1, 3, 7])
@pytest.mark.parametrize("cap", [1, 10, 1_000_000])
def test_split_range_covers_contiguously(span: int, minimum: int, cap: int) -> None:
    ranges = split_range(50, 50 + span - 1, minimum, cap)
    assert ranges[0].first == 50 and ranges[-1].last == 50 + span - 1
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(ranges))
    assert len(ranges) == min(span, max(minimum, -(-span // cap)))
    assert all(0 < r.span <= cap for r in ranges)
    assert max(r.span for r in ranges) - min(r.span for r in ranges) <= 1
    assert split_range(5, 4, minimum, cap) == []


def _info(first: int, last: int) -> StreamInfo:
    return StreamInfo("S", first, last, max(0, last - first + 1), True, 0)


def test_next_end_honours_limits_targets_and_loss() -> None:
    info = _info(1, 1000)
    assert next_end(1, info, max_rows=None, target=None, fail_on_data_loss=True) == 1001
    assert next_end(1, info, max_rows=300, target=None, fail_on_data_loss=True) == 301
    assert next_end(901, info, max_rows=300, target=None, fail_on_data_loss=True) == 1001
    assert next_end(1, info, max_rows=None, target=500, fail_on_data_loss=True) == 500
    assert next_end(600, info, max_rows=None, target=500, fail_on_data_loss=True) == 600
    assert next_end(1, _info(0, 0), max_rows=10, target=None, fail_on_data_loss=True) == 1
    rolled = _info(101, 150)
    with pytest.raises(DataLossError, match=r"'S' no longer has sequence 51.*first available"):
        next_end(51, rolled, max_rows=None, target=None, fail_on_data_loss=True)
    # Skipping ahead: the limit counts from the first available message, not the lost ones.
    assert next_end(51, rolled, max_rows=10, target=None, fail_on_data_loss=False) == 111


def test_stream_reader_read_limits() -> None:
    schema = message_schema()
    limited = ReadOptions.from_options({"stream": "S", "maxMessagesPerTrigger": "5"})
    assert JetStreamStreamReader(limited, schema).getDefaultReadLimit() == ReadMaxRows(5)
    unlimited = ReadOptions.from_options({"stream": "S"})
    assert isinstance(
        JetStreamStreamReader(unlimited, schema).getDefaultReadLimit(), ReadAllAvailable
    )


def test_schemas() -> None:
    assert message_schema().fieldNames() == ["stream", "subject", "sequence", "timestamp", "data"]
    assert message_schema(True).fieldNames()[-1] == "headers"
    assert check_read_schema(StructType([StructField("sequence", LongType())])) == ("sequence",)
    with pytest.raises(JetStreamOptionError, match="must be bigint"):
        check_read_schema(StructType([StructField("sequence", StringType())]))
    with pytest.raises(JetStreamOptionError, match="unknown column 'key'"):
        check_read_schema(StructType([StructField("key", StringType())]))

    data = StructField("data", BinaryType())
    check_write_schema(StructType([data]), "s", None)
    check_write_schema(
        StructType([data, StructField("headers", MapType(StringType(), StringType()))]),
        "s",
        None,
    )
    with pytest.raises(JetStreamOptionError, match="'subject' column or the 'subject' option"):
        check_write_schema(StructType([data]), None, None)
    with pytest.raises(JetStreamOptionError, match="'headers' must be"):
        check_write_schema(
            StructType([data, StructField("headers", ArrayType(StringType()))]), "s", None
        )
    with pytest.raises(JetStreamOptionError, match="not a column"):
        check_write_schema(StructType([data]), "s", "id")


def test_column_buffer_matches_sparks_arrow_schema() -> None:
    schema = arrow_schema(message_schema(True))
    buffer = ColumnBuffer(with_headers=True)
    buffer.subjects += [b"a.b", b"a.c"]
    buffer.seqs += [7, 9]
    buffer.iso_times += [b"2026-11-21T19:54:35.013949364Z", b"2026-11-21T19:54:36Z"]
    buffer.datas += [b"x", b""]
    assert buffer.headers is not None
    buffer.headers += [[("K", b"v"), ("K", b"w")], []]
    batch = buffer.to_batch("S", schema)
    assert batch.schema.equals(schema)
    row = batch.to_pylist()[0]
    assert row["stream"] == "S" and row["sequence"] == 7
    assert row["timestamp"] == datetime(2026, 11, 21, 19, 54, 35, 13949, tzinfo=UTC)
    assert row["headers"] == [{"key": "K", "value": b"v"}, {"key": "K", "value": b"w"}]

    consumer = ColumnBuffer(with_headers=False)
    consumer.subjects.append(b"a")
    consumer.seqs.append(1)
    consumer.times_ns.append(1_700_000_000_123_456_789)
    consumer.datas.append(b"x")
    stamp = consumer.to_batch("S", arrow_schema(message_schema())).column("timestamp")[0]
    assert stamp.as_py() == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert pa.types.is_timestamp(stamp.type)


def test_parse_header_block_keeps_order_and_repeats() -> None:
    block = b"NATS/1.0\r\nA: 1\r\nB:2\r\nA:  3 \r\n\r\n"
    assert parse_header_block(block) == [("A", b"1"), ("B", b"2"), ("A", b"3")]
    assert parse_header_block(b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\n\r\n") == [
        ("Nats-Num-Pending", b"0")
    ]


def _wire() -> tuple[bytes, list[tuple[bytes, bytes, bytes | None, bytes]]]:
    expected: list[tuple[bytes, bytes, bytes | None, bytes]] = []
    wire = b""
    for index in range(40):
        subject, payload = f"s.{index}".encode(), f"payload-{index}".encode() * (index % 5)
        reply = f"_INBOX.r.{index}".encode() if index % 3 else b""
        tail = (b" " + reply) if reply else b""
        if index % 2:
            headers = f"NATS/1.0\r\nK: {index}\r\n\r\n".encode()
            size = len(headers) + len(payload)
            wire += b"HMSG " + subject + b" 7" + tail + f" {len(headers)} {size}\r\n".encode()
            wire += headers + payload + b"\r\n"
            expected.append((subject, reply, headers, payload))
        else:
            wire += b"MSG " + subject + b" 7" + tail + f" {len(payload)}\r\n".encode()
            wire += payload + b"\r\n"
            expected.append((subject, reply, None, payload))
        if index % 7 == 0:
            wire += b"+OK\r\nMSG other 99 3\r\nabc\r\n"  # protocol noise and another sid
    return wire, expected


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, 64, 100_000])
def test_fast_parser_handles_any_split(chunk: int) -> None:
    wire, expected = _wire()
    nc = FastClient()
    seen: list[tuple[bytes, bytes, bytes | None, bytes]] = []
    nc.raw_handlers[7] = nc.raw_handlers_by_token[b"7"] = lambda *message: seen.append(message)

    async def feed() -> None:
        for start in range(0, len(wire), chunk):
            await nc._ps.parse(wire[start : start + chunk])

    asyncio.new_event_loop().run_until_complete(feed())
    assert seen == expected
    assert not nc._ps.buf


def test_header_pairs_from_either_column_type() -> None:
    from jetstream_spark.sink import PublishError, _header_pairs, _PairHeaders

    as_structs = [
        {"key": "A", "value": b"1"},
        {"key": "A", "value": "2"},
        {"key": None, "value": 1},
    ]
    assert _header_pairs(as_structs) == [("A", "1"), ("A", "2")]
    assert _header_pairs([("B", "x")]) == [("B", "x")]  # map<string,string> rows
    assert _header_pairs(None) == []
    with pytest.raises(PublishError, match="not UTF-8"):
        _header_pairs([{"key": "C", "value": b"\xff"}])
    repeated = _PairHeaders([("A", "1"), ("A", "2")])
    assert list(repeated.items()) == [("A", "1"), ("A", "2")]  # what nats-py encodes


def test_everything_spark_ships_pickles_without_connections() -> None:
    """Spark pickles readers, writers and partitions into other processes."""
    import pickle

    from jetstream_spark import JetStreamDataSource

    piece = SequenceRange(3, 9, direct=False)
    assert pickle.loads(pickle.dumps(piece)) == piece
    source = JetStreamDataSource({"stream": "S", "subject": "s.x", "servers": "nats://h:1"})
    schema = message_schema(True)
    write_schema = StructType([StructField("data", BinaryType())])
    for shipped in (
        source,
        source.reader(schema),
        source.streamReader(schema),
        source.writer(write_schema, False),
        source.streamWriter(write_schema, True),
    ):
        copy = pickle.loads(pickle.dumps(shipped))
        assert type(copy) is type(shipped)
        assert not any(
            type(value).__module__.startswith(("nats", "asyncio", "ssl"))
            for value in vars(copy).values()
        )
