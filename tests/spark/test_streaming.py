"""Structured Streaming reads: checkpointed offsets, read limits, AvailableNow, data loss."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    available_now_to_parquet,
    create_stream,
    delete_messages,
    publish,
    stream_df,
    unique,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _stream_df(spark: Any, url: str, stream: str, **options: Any) -> Any:
    return stream_df(spark, url, stream, **options)


def _fill(url: str, stream: str, first: int, count: int) -> None:
    publish(url, ((f"{stream}.m", f"m{i}".encode()) for i in range(first, first + count)))


def _input_rows(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_restart_from_checkpoint_reads_every_message_once(
    spark: Any, nats_server: Any, tmp_path: Path
) -> None:
    url, stream = nats_server.url, unique("RESTART")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True)
    _fill(url, stream, 1, 600)
    delete_messages(url, stream, [10, 11, 250])
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(trigger: dict[str, Any]) -> Any:
        return (
            _stream_df(spark, url, stream, maxMessagesPerTrigger=100, minPartitions=2)
            .select("sequence", "data")
            .writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    first = start({"processingTime": "0 seconds"})
    try:
        deadline = time.monotonic() + 60
        while (first.lastProgress or {}).get("batchId", -1) < 1:
            assert first.exception() is None
            assert time.monotonic() < deadline, "no progress in 60s"
            time.sleep(0.1)
    finally:
        first.stop()  # mid-stream: a batch may be planned but not committed
    done_before = sum(_input_rows(first))
    assert 0 < done_before < 597

    _fill(url, stream, 601, 150)
    second = start({"availableNow": True})
    assert second.awaitTermination(120)
    assert second.exception() is None

    sequences = [r.sequence for r in spark.read.parquet(str(output)).select("sequence").collect()]
    expected = [s for s in range(1, 751) if s not in (10, 11, 250)]
    assert sorted(sequences) == expected  # nothing lost, nothing twice


def test_read_limit_sizes_batches_and_available_now_stops(spark: Any, nats_server: Any) -> None:
    url, stream = nats_server.url, unique("LIMITS")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True)
    _fill(url, stream, 1, 1000)
    query = (
        _stream_df(spark, url, stream, maxMessagesPerTrigger=300)
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "AvailableNow did not stop at the end of the stream"
    assert query.exception() is None
    assert _input_rows(query) == [300, 300, 300, 100]
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end[stream]["seq"] == 1001 and end[stream]["created"]


def test_fail_on_data_loss(spark: Any, nats_server: Any, tmp_path: Path) -> None:
    url, stream = nats_server.url, unique("LOSS")
    create_stream(url, stream, [f"{stream}.>"], allow_direct=True, max_msgs=50)
    _fill(url, stream, 1, 50)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run(fail_on_data_loss: bool) -> Any:
        frame = _stream_df(spark, url, stream, failOnDataLoss=str(fail_on_data_loss).lower())
        return available_now_to_parquet(frame.select("sequence"), output, checkpoint)

    first = run(True)
    assert first.exception() is None
    assert sum(_input_rows(first)) == 50
    _fill(url, stream, 51, 100)  # the limit removes 51..100 before the query sees them

    failed = run(True)
    error = str(failed.exception())
    assert f"stream '{stream}' no longer has sequence 51" in error
    assert "first available sequence is 101" in error

    skipped = run(False)
    assert skipped.exception() is None
    sequences = sorted(r.sequence for r in spark.read.parquet(str(output)).collect())
    assert sequences == list(range(1, 51)) + list(range(101, 151))
