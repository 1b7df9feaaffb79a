"""Kafka parity: several streams and subject filters in one query, minOffsetsPerTrigger with
maxTriggerDelay, source lag in the query progress, partitions from the parallelism."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from .helpers import create_stream, publish, stream_df, unique

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_several_streams_and_filters_in_one_batch_read(spark: Any, nats_server: Any) -> None:
    url, first, second = nats_server.url, unique("MULTIA"), unique("MULTIB")
    for name in (first, second):
        create_stream(url, name, [f"{name}.>"])
        publish(
            url,
            (
                (f"{name}.{kind}", f"{name}-{i}".encode())
                for i in range(30)
                for kind in ("eu", "us", "ap")
            ),
        )
    rows = (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("subscribe", f"{first},{second}")  # Kafka's name for the stream list
        .option("subjectFilter", f"{first}.eu,{first}.ap,{second}.us")
        .option("minPartitions", "3")
        .load()
        .collect()
    )
    seen = sorted((r.stream, r.subject) for r in rows)
    assert len(rows) == 90
    assert {s for s in seen} == {
        (first, f"{first}.eu"),
        (first, f"{first}.ap"),
        (second, f"{second}.us"),
    }
    # The session registered the source with register(spark): partitions default to its
    # parallelism (local[2]) even for a few messages.
    df = spark.read.format("jetstream").option("servers", url).option("stream", first).load()
    assert df.rdd.getNumPartitions() == 2


def test_min_offsets_wait_for_max_trigger_delay_and_lag_is_reported(
    spark: Any, nats_server: Any
) -> None:
    url, first, second = nats_server.url, unique("LAGA"), unique("LAGB")
    for name in (first, second):
        create_stream(url, name, [f"{name}.>"])
    publish(url, ((f"{first}.x", b"a") for _ in range(300)))
    publish(url, ((f"{second}.x", b"b") for _ in range(100)))
    query = (
        stream_df(
            spark,
            url,
            f"{first},{second}",
            maxOffsetsPerTrigger=200,
            minOffsetsPerTrigger=50,
            maxTriggerDelay="4s",
        )
        .writeStream.format("memory")
        .queryName(unique("lag").lower())
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while sum(p["numInputRows"] for p in query.recentProgress) < 400:
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(0.2)
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes[:2] == [200, 200]  # split over both streams in proportion
        progress = next(p for p in query.recentProgress if p["numInputRows"])
        latest = json.loads(progress["sources"][0]["latestOffset"])
        assert latest["messagesBehindLatest"] == {first: 150, second: 50}
        assert latest["maxMessagesBehindLatest"] == 150

        # 20 new messages are fewer than minOffsetsPerTrigger: they wait for maxTriggerDelay.
        published = time.monotonic()
        publish(url, ((f"{second}.x", b"c") for _ in range(20)))
        while sum(p["numInputRows"] for p in query.recentProgress) < 420:
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(0.1)
        assert time.monotonic() - published >= 2.0  # not at the next 200 ms trigger
    finally:
        query.stop()
