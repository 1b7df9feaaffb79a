"""Writes: PubAcks, Nats-Msg-Id from write/batch/partition/row, deduplicated retries."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jetstream_spark import JetStreamDataSource, JetStreamOptionError, PublishError
from jetstream_spark.sink import JetStreamBatchWriter

from .helpers import create_stream, stored_messages, unique

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _writer(spark: Any, url: str, **options: str) -> Any:
    def save(df: Any) -> None:
        writer = df.write.format("jetstream").mode("append").option("servers", url)
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()

    return save


def test_batch_write_publishes_rows_with_ids_and_headers(spark: Any, nats_server: Any) -> None:
    url, stream = nats_server.url, unique("WRITE")
    create_stream(url, stream, [f"{stream}.>"])
    df = spark.createDataFrame(
        [(f"{stream}.{i % 2}", f"payload {i}", [("X-Row", str(i))]) for i in range(20)],
        "subject string, data string, headers array<struct<key:string,value:string>>",
    ).repartition(2)
    _writer(spark, url, writeId="job-1", stream=stream)(df)

    stored = stored_messages(url, stream)
    assert sorted(data for _, _, data, _ in stored) == sorted(
        f"payload {i}".encode() for i in range(20)
    )
    for _, subject, data, headers in stored:
        row = int(data.decode().split()[1])
        assert subject == f"{stream}.{row % 2}"
        assert headers["X-Row"] == str(row)
        assert headers["Nats-Msg-Id"].startswith("job-1:0:")  # writeId:batch:partition:row


def test_retried_write_stores_each_message_once(spark: Any, nats_server: Any) -> None:
    url, stream = nats_server.url, unique("RETRY")
    create_stream(url, stream, [f"{stream}.>"], duplicate_window=120.0)
    df = spark.createDataFrame(
        [(f"payload {i}".encode(),) for i in range(300)], "data binary"
    ).coalesce(2)
    save = _writer(spark, url, writeId="nightly-2026-11-21", subject=f"{stream}.in")
    save(df)
    save(df)  # the whole job again, e.g. after a driver failure: same ids, all duplicates
    assert len(stored_messages(url, stream)) == 300

    # Without a writeId every job is a new write, so the same rows are stored again.
    _writer(spark, url, subject=f"{stream}.in")(df)
    assert len(stored_messages(url, stream)) == 600


def test_retried_task_is_deduplicated(nats_server: Any) -> None:
    """A task attempt that published some rows and died is rerun with the same pickled writer."""
    url, stream = nats_server.url, unique("TASK")
    create_stream(url, stream, [f"{stream}.>"])
    source = JetStreamDataSource({"servers": url, "subject": f"{stream}.x"})
    schema_df = pa.schema([("data", pa.binary())])
    batch = pa.record_batch([pa.array([f"m{i}".encode() for i in range(50)])], schema=schema_df)
    from pyspark.sql.types import BinaryType, StructField, StructType

    writer = source.writer(StructType([StructField("data", BinaryType())]), False)
    assert isinstance(writer, JetStreamBatchWriter)
    first_attempt = writer.write(iter([batch.slice(0, 20)]))  # died after 20 rows
    retry = writer.write(iter([batch]))
    assert (first_attempt.published, first_attempt.duplicates) == (20, 0)  # type: ignore[attr-defined]
    assert (retry.published, retry.duplicates) == (30, 20)  # type: ignore[attr-defined]
    assert len(stored_messages(url, stream)) == 50


def test_message_id_column_makes_ids_independent_of_partitioning(
    spark: Any, nats_server: Any
) -> None:
    url, stream = nats_server.url, unique("KEYED")
    create_stream(url, stream, [f"{stream}.>"])
    rows = [(f"order-{i}", f"payload {i}") for i in range(40)]
    save = _writer(spark, url, writeId="keyed", subject=f"{stream}.o", messageIdColumn="order_id")
    save(spark.createDataFrame(rows, "order_id string, data string").repartition(3))
    save(spark.createDataFrame(list(reversed(rows)), "order_id string, data string").coalesce(1))
    stored = stored_messages(url, stream)
    assert len(stored) == 40
    assert {h["Nats-Msg-Id"] for *_, h in stored} == {f"keyed:0:order-{i}" for i in range(40)}


def test_write_errors_are_clear(nats_server: Any) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    source = JetStreamDataSource({"servers": nats_server.url, "subject": "nobody.listens"})
    with pytest.raises(JetStreamOptionError, match="needs a 'data' column"):
        source.writer(StructType([StructField("value", StringType())]), False)
    with pytest.raises(ValueError, match="only appends"):
        source.writer(StructType([StructField("data", StringType())]), True)
    writer = source.writer(StructType([StructField("data", StringType())]), False)
    batch = pa.record_batch([pa.array(["x"])], names=["data"])
    with pytest.raises(PublishError, match=r"'nobody\.listens' failed: no stream captures it"):
        writer.write(iter([batch]))
