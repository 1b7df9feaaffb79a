"""Batch reads against a real nats-server: exact contents in any partitioning, ranges, auth."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jetstream_devtools.natsserver import NatsServer

from .helpers import create_stream, delete_messages, publish, stored_messages, unique

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOTAL = 1200
DELETED = [1, 2, 50, 51, 52, 400, 777, 1000, 1199, 1200]  # head, runs, middle and tail


@pytest.fixture(scope="module")
def gappy_streams(nats_server: Any) -> dict[str, str]:
    """Two copies of a stream with deleted messages: one with direct get, one without."""
    names = {}
    for kind, direct in (("direct", True), ("consumer", False)):
        name = unique(f"GAPS_{kind.upper()}")
        create_stream(nats_server.url, name, [f"{name}.>"], allow_direct=direct)
        publish(
            nats_server.url,
            (
                (f"{name}.{'even' if i % 2 == 0 else 'odd'}", f"m{i}".encode())
                for i in range(1, TOTAL + 1)
            ),
            headers=lambda index: {"X-Index": str(index + 1)} if index % 3 == 0 else None,
        )
        delete_messages(nats_server.url, name, DELETED)
        names[kind] = name
    return names


def _read(spark: Any, url: str, stream: str, **options: Any) -> Any:
    reader = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


@pytest.mark.parametrize("partitions", [1, 3, 7])
@pytest.mark.parametrize("method", ["direct", "consumer"])
def test_gaps_read_exactly_the_stored_messages(
    spark: Any, nats_server: Any, gappy_streams: dict[str, str], partitions: int, method: str
) -> None:
    stream = gappy_streams[method]
    df = _read(spark, nats_server.url, stream, minPartitions=partitions, fetchBatchSize=97)
    assert df.rdd.getNumPartitions() == partitions
    rows = df.select("stream", "subject", "sequence", "data").collect()
    expected = [
        (seq, subject, data) for seq, subject, data, _ in stored_messages(nats_server.url, stream)
    ]
    assert len(expected) == TOTAL - len(DELETED)
    assert sorted((r.sequence, r.subject, bytes(r.data)) for r in rows) == expected
    assert {r.stream for r in rows} == {stream}


def test_partition_cap_splits_contiguous_ranges(
    spark: Any, nats_server: Any, gappy_streams: dict[str, str]
) -> None:
    df = _read(spark, nats_server.url, gappy_streams["direct"], maxMessagesPerPartition=250)
    # sequences 3..1198 stored at the ends: span 1196 -> 5 ranges of at most 250 sequences
    assert df.rdd.getNumPartitions() == 5
    per_partition = (
        df.select("sequence").rdd.glom().map(lambda rows: [r.sequence for r in rows]).collect()
    )
    bounds = [(min(p), max(p)) for p in per_partition if p]
    assert bounds == sorted(bounds)
    assert all(high - low < 250 for low, high in bounds)
    assert sum(len(p) for p in per_partition) == TOTAL - len(DELETED)


def test_ranges_filters_and_headers(
    spark: Any, nats_server: Any, gappy_streams: dict[str, str]
) -> None:
    url, stream = nats_server.url, gappy_streams["direct"]
    rows = _read(
        spark, url, stream, startingOffsets=40, endingOffsets=60, subjectFilter=f"{stream}.odd"
    ).collect()
    assert [r.sequence for r in rows] == [41, 43, 45, 47, 49, 53, 55, 57, 59]
    assert {r.subject for r in rows} == {f"{stream}.odd"}

    with_headers = _read(spark, url, stream, includeHeaders="true", endingOffsets=10)
    assert with_headers.schema["headers"].dataType.simpleString() == (
        "array<struct<key:string,value:binary>>"
    )
    by_seq = {r.sequence: r.headers for r in with_headers.collect()}
    assert sorted(by_seq) == list(range(3, 11))
    assert [(h.key, bytes(h.value)) for h in by_seq[4]] == [("X-Index", b"4")]
    assert by_seq[5] == []

    for method in ("direct", "consumer"):
        latest = _read(spark, url, stream, readMethod=method, startingOffsets="latest").collect()
        assert latest == []


def test_timestamps_bound_the_range(spark: Any, nats_server: Any) -> None:
    url, stream = nats_server.url, unique("TIMES")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True)
    publish(url, ((f"{stream}.a", b"before") for _ in range(5)))
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    publish(url, ((f"{stream}.a", b"after") for _ in range(5)))
    after = _read(spark, url, stream, startingTimestamp=middle.isoformat()).collect()
    assert [r.sequence for r in after] == [6, 7, 8, 9, 10]
    before = _read(
        spark, url, stream, endingTimestamp=str(int(middle.timestamp() * 1000))
    ).collect()
    assert [r.sequence for r in before] == [1, 2, 3, 4, 5]


def test_user_password_auth(spark: Any, tmp_path: Path) -> None:
    server = NatsServer(
        tmp_path,
        name="nats-auth",
        extra_config='authorization { user: "spark", password: "s3cret" }',
    )
    server.start()
    try:
        url = server.url.replace("nats://", "nats://spark:s3cret@")
        stream = unique("AUTH")
        create_stream(url, stream, [f"{stream}.>"], cleanup=False, allow_direct=True)
        publish(url, ((f"{stream}.x", b"hi") for _ in range(3)))
        reader = (
            spark.read.format("jetstream")
            .option("servers", server.url)
            .option("stream", stream)
            .option("user", "spark")
            .option("password", "s3cret")
        )
        assert reader.load().count() == 3
        with pytest.raises(Exception, match=r"cannot connect to NATS.*[Aa]uthorization"):
            reader.option("password", "wrong").load().count()
    finally:
        server.stop()
