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

from jetstream_devtools.pki import create_ca, issue_cert
from jetstream_spark import JetStreamOptionError, ReadOptions, WriteOptions, message_schema
from jetstream_spark._nats_fast import FastClient
from jetstream_spark.client import StreamInfo
from jetstream_spark.data_loss import DataLossError
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
    assert not options.fail_on_data_loss and options.subject_filters == ("orders.eu.>",)
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
    source = JetStreamDataSource({"stream": "S", "servers": "nats://h:1"})
    sink = JetStreamDataSource({"subject": "s.x", "servers": "nats://h:1"})
    schema = message_schema(True)
    write_schema = StructType([StructField("data", BinaryType())])
    for shipped in (
        source,
        source.reader(schema),
        source.streamReader(schema),
        sink.writer(write_schema, False),
        sink.streamWriter(write_schema, True),
    ):
        copy = pickle.loads(pickle.dumps(shipped))
        assert type(copy) is type(shipped)
        assert not any(
            type(value).__module__.startswith(("nats", "asyncio", "ssl"))
            for value in vars(copy).values()
        )


def test_unknown_options_are_refused_with_the_closest_name() -> None:
    with pytest.raises(JetStreamOptionError, match="did you mean 'maxMessagesPerTrigger'"):
        ReadOptions.from_options({"stream": "S", "maxMessagesPerTriger": "5"}, streaming=True)
    with pytest.raises(JetStreamOptionError, match="unknown option 'subject' for a jetstream"):
        ReadOptions.from_options({"stream": "S", "subject": "x"})
    with pytest.raises(JetStreamOptionError, match="did you mean 'messageIdColumn'"):
        WriteOptions.from_options({"subject": "a", "messageIdColum": "id"})
    # Spark's own keys and the earlier 'url' name pass.
    assert ReadOptions.from_options({"stream": "S", "path": "p", "url": "nats://h:1"}).connection
    assert ReadOptions.from_options({"stream": "S", "url": "nats://h:1"}).connection.servers == (
        "nats://h:1",
    )


def test_kafka_names_are_aliases() -> None:
    options = ReadOptions.from_options(
        {
            "subscribe": "A,B",
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "2m",
            "maxRecordsPerPartition": "500",
            "kafka.bootstrap.servers": "nats://h:1",
        },
        streaming=True,
    )
    assert options.streams == ("A", "B")
    assert (options.max_messages_per_trigger, options.min_messages_per_trigger) == (100, 10)
    assert options.max_trigger_delay == 120.0
    assert options.max_messages_per_partition == 500
    assert options.connection.servers == ("nats://h:1",)
    assert WriteOptions.from_options({"topic": "out.x"}).subject == "out.x"
    with pytest.raises(JetStreamOptionError, match="mean the same; set only one"):
        ReadOptions.from_options(
            {"stream": "S", "maxOffsetsPerTrigger": "1", "maxMessagesPerTrigger": "2"}
        )
    with pytest.raises(JetStreamOptionError, match="is above"):
        ReadOptions.from_options(
            {"stream": "S", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "2"}
        )
    with pytest.raises(JetStreamOptionError, match="duration"):
        ReadOptions.from_options({"stream": "S", "maxTriggerDelay": "soon"})


def test_inverted_ranges_are_errors() -> None:
    for start, end in [
        ({"startingOffsets": "500"}, {"endingOffsets": "100"}),
        (
            {"startingTimestamp": "2026-11-22T00:00:00Z"},
            {"endingTimestamp": "2026-11-21T00:00:00Z"},
        ),
        ({"startingOffsets": "latest"}, {"endingOffsets": "100"}),
    ]:
        with pytest.raises(JetStreamOptionError, match="is after its end"):
            ReadOptions.from_options({"stream": "S", **start, **end})
    from jetstream_spark.planning import check_resolved_order

    timed = ReadOptions.from_options(
        {"stream": "S", "startingOffsets": "500", "endingTimestamp": "2026-11-21T00:00:00Z"}
    )
    with pytest.raises(JetStreamOptionError, match=r"'S': the start .* is after the end"):
        check_resolved_order(timed, "S", 500, 99)
    check_resolved_order(timed, "S", 100, 99)  # empty, not inverted
    clamped = ReadOptions.from_options(
        {"stream": "S", "startingOffsets": "50", "endingOffsets": "90"}
    )
    check_resolved_order(clamped, "S", 50, 30)  # the end was clamped to the stream's last


def test_subjects_are_checked_by_us() -> None:
    from jetstream_spark.options import subject_problem

    assert subject_problem("orders.eu.1", wildcards=False) is None
    assert subject_problem("orders.*.>", wildcards=True) is None
    assert "wildcard '*'" in str(subject_problem("orders.*", wildcards=False))
    assert "wildcard '>'" in str(subject_problem("orders.>", wildcards=False))
    assert "line break" in str(subject_problem("a\r\nPUB x 1", wildcards=False))
    assert "empty token" in str(subject_problem("a..b", wildcards=False))
    assert "last token" in str(subject_problem("a.>.b", wildcards=True))
    with pytest.raises(JetStreamOptionError, match="cannot be published to"):
        WriteOptions.from_options({"subject": "orders.>"})
    with pytest.raises(JetStreamOptionError, match="invalid filter"):
        ReadOptions.from_options({"stream": "S", "subjectFilter": "a b"})
    with pytest.raises(JetStreamOptionError, match="several need readMethod=consumer"):
        ReadOptions.from_options(
            {"stream": "S", "subjectFilter": "a.1,a.2", "readMethod": "direct"}
        )


def test_headers_are_checked_by_us() -> None:
    from jetstream_spark.sink import PublishError, _header_pairs, header_block_size

    where = "batch 0 partition 1 row 7"
    for pairs, message in [
        ([("X", "ok\r\nNats-Msg-Id: forged")], "line break"),
        ([("X", "a\nb")], "line break"),
        ([("Bad Key", "v")], "not a valid token"),
        ([("X:Y", "v")], "not a valid token"),
        ([("X", " padded")], "whitespace"),
        ([("Nats-Msg-Id", "mine")], "messageIdColumn"),
    ]:
        with pytest.raises(PublishError, match=f"{where}: .*{message}"):
            _header_pairs(pairs, where)
    pairs = [("Nats-Msg-Id", "w:0:1:2"), ("K", "välue")]
    block = b"NATS/1.0\r\nNats-Msg-Id: w:0:1:2\r\nK: v\xc3\xa4lue\r\n\r\n"
    assert header_block_size(pairs) == len(block)


def test_ranges_over_several_streams() -> None:
    from jetstream_spark.planning import split_ranges

    pieces = split_ranges(
        [
            SequenceRange(1, 100, False, "A", "t1"),
            SequenceRange(5, 4, False, "B", "t2"),
            SequenceRange(1, 10, False, "C", "t3"),
        ],
        4,
        1000,
    )
    assert [(p.stream, p.first, p.last) for p in pieces] == [
        ("A", 1, 34),
        ("A", 35, 67),
        ("A", 68, 100),
        ("C", 1, 10),
    ]
    assert {p.created for p in pieces if p.stream == "A"} == {"t1"}
    assert len(split_ranges([SequenceRange(1, 3, stream="A")], 10, 1000)) == 3


def test_share_limit_is_proportional() -> None:
    from jetstream_spark.planning import share_limit

    assert share_limit({"A": 10, "B": 5}, 100) == {"A": 10, "B": 5}
    shares = share_limit({"A": 900, "B": 100, "C": 0}, 100)
    assert shares == {"A": 90, "B": 10, "C": 0}
    uneven = share_limit({"A": 1, "B": 1, "C": 1}, 2)
    assert sum(uneven.values()) == 2


def test_offsets_carry_stream_identity() -> None:
    from jetstream_spark.planning import StreamPosition, check_identity, offset, read_offsets

    value = offset({"A": StreamPosition(42, "2026-11-23T10:00:00Z")})
    assert value == {"A": {"seq": 42, "created": "2026-11-23T10:00:00Z"}}
    assert read_offsets(["A"], value) == {"A": StreamPosition(42, "2026-11-23T10:00:00Z")}
    assert read_offsets(["A"], {"stream": "A", "seq": 7}) == {"A": StreamPosition(7, "")}
    with pytest.raises(JetStreamOptionError, match="new checkpoint location"):
        read_offsets(["B"], value)
    info = StreamInfo("A", 1, 100, 100, True, 0, "2026-11-23T10:00:00Z")
    assert check_identity(info, StreamPosition(42, "2026-11-23T10:00:00Z"))
    assert not check_identity(info, StreamPosition(42, "2026-11-23T09:00:00Z"))
    assert check_identity(info, StreamPosition(101, ""))
    assert not check_identity(info, StreamPosition(500, ""))  # sequences went backwards


def test_nats_py_internals_are_gated_by_the_pinned_range() -> None:
    import tomllib

    from jetstream_spark._nats_fast import (
        SUPPORTED_NATS_PY,
        UnsupportedNatsPy,
        check_version,
        nats_py_version,
    )

    low, high = SUPPORTED_NATS_PY
    assert low <= nats_py_version() < high  # the installed nats-py is one this was tested on
    check_version(low)
    for outside in ((2, 8), high, (3, 0)):
        with pytest.raises(UnsupportedNatsPy, match="Install 'jetstream-operator\\[spark\\]'"):
            check_version(outside)
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pin = f"nats-py>={low[0]}.{low[1]},<{high[0]}.{high[1]}"
    assert pin in project["project"]["optional-dependencies"]["spark"]
