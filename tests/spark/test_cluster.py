"""The data source on a real standalone Spark cluster: a master and two workers, each its own
process started from the pyspark package, all on loopback, plus a driver process.

Batch and streaming pipelines run across both workers; one worker (with its executor) is
killed with SIGKILL in the middle of the streaming query, and the output stream must hold
every source message exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jetstream_devtools.paths import LOOPBACK, free_port
from jetstream_devtools.processes import http_get
from jetstream_spark import ReadOptions, message_schema
from jetstream_spark._sync import iterate
from jetstream_spark.fetch import read_range
from jetstream_spark.schema import arrow_schema

from .helpers import create_stream, publish, unique, with_js

# Six JVMs (master, two workers, driver, two executors) on a shared machine: a longer limit.
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]

MESSAGES = 6_000
PER_TRIGGER = 1_000
DRIVER = Path(__file__).with_name("cluster_driver.py")


@dataclass
class StandaloneCluster:
    """spark-class Master and Workers; each in its own process group, so killing a worker's
    group also kills the executor JVM it launched."""

    root: Path
    master_port: int = field(default_factory=free_port)
    master_ui: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    def _env(self) -> dict[str, str]:
        import pyspark

        home = str(Path(pyspark.__file__).parent)
        return {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(self.root),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1",
        }

    def _start(self, name: str, *args: str) -> None:
        env = self._env()
        log = (self.root / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(Path(env["SPARK_HOME"]) / "bin" / "spark-class"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self, workers: int = 2) -> None:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            LOOPBACK,
            "--port",
            str(self.master_port),
            "--webui-port",
            str(self.master_ui),
        )
        # The master binds its ports before any worker picks free ones, so a worker cannot
        # take the master's web UI port (the UI would then answer from port+1, and the port
        # polled here with a worker's HTML page).
        self.wait_for_workers(0)
        for index in range(workers):
            port, webui = distinct_free_ports(2)
            work = self.root / f"worker-{index}"
            work.mkdir(exist_ok=True)
            self._start(
                f"worker-{index}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                str(webui),
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work),
                self.url,
            )
        self.wait_for_workers(workers)

    def alive_workers(self) -> int:
        status, body = http_get(f"http://{LOOPBACK}:{self.master_ui}/json/")
        if status != 200:
            return -1
        try:
            return int(json.loads(body).get("aliveworkers", 0))
        except ValueError:
            return -1  # not the master's JSON (yet): ask again

    def wait_for_workers(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() != count:
            for name, process in self.processes.items():
                if process.poll() is not None and name in ("master", "worker-0", "worker-1"):
                    raise RuntimeError(f"{name} exited: {self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register: {self.log_tail('master')}")
            time.sleep(0.5)

    def kill(self, name: str) -> None:
        os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait(30)

    def log_tail(self, name: str, lines: int = 30) -> str:
        text = (self.root / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _payloads(url: str, stream: str) -> list[bytes]:
    schema = arrow_schema(message_schema())

    async def last(nc: Any) -> int:
        return int((await nc.jetstream().stream_info(stream)).state.last_seq)

    end = with_js(url, last)
    options = ReadOptions.from_options({"servers": url, "stream": stream})
    batches = list(iterate(lambda: read_range(options, 1, end, False, schema)))
    return pa.Table.from_batches(batches, schema).column("data").to_pylist() if batches else []


def _count(url: str, stream: str) -> int:
    async def messages(nc: Any) -> int:
        return int((await nc.jetstream().stream_info(stream)).state.messages)

    return with_js(url, messages)


def test_batch_and_streaming_on_a_cluster_survive_a_killed_worker(
    spark_cluster: StandaloneCluster, nats_server: Any, tmp_path: Path
) -> None:
    url = nats_server.url
    source, batch_out, stream_out = unique("CSRC"), unique("CBATCH"), unique("CSTREAM")
    create_stream(url, source, [f"{source}.>"])
    for name in (batch_out, stream_out):
        create_stream(url, name, [f"{name}.>"], duplicate_window=600.0)
    expected = sorted(f"m{i}".encode() for i in range(MESSAGES))
    publish(url, ((f"{source}.{i % 7}", f"m{i}".encode()) for i in range(MESSAGES)))

    log = (tmp_path / "driver.log").open("w+")
    driver = subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            spark_cluster.url,
            url,
            source,
            batch_out,
            stream_out,
            str(tmp_path / "checkpoint"),
            str(PER_TRIGGER),
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": LOOPBACK},
    )
    try:
        assert driver.stdout is not None
        batch = json.loads(driver.stdout.readline() or "{}")
        assert batch.get("phase") == "batch", (tmp_path / "driver.log").read_text()[-3000:]
        assert batch["executors"] == 2 and batch["partitions"] == 2  # the cluster's parallelism

        # Kill a worker (and its executor) once the streaming copy is under way.
        deadline = time.monotonic() + 400
        while _count(url, stream_out) < 2 * PER_TRIGGER:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the streaming query made no progress"
            time.sleep(0.2)
        killed_at = _count(url, stream_out)
        spark_cluster.kill("worker-0")
        assert killed_at < MESSAGES, "the query finished before the worker was killed"

        out, _ = driver.communicate(timeout=500)
        assert driver.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    stream = json.loads(out.strip().splitlines()[-1])
    assert sum(stream["batches"]) == MESSAGES
    assert spark_cluster.alive_workers() == 1

    assert sorted(_payloads(url, batch_out)) == expected  # 0 lost, 0 duplicated
    assert sorted(_payloads(url, stream_out)) == expected


def distinct_free_ports(count: int) -> list[int]:
    """Free ports that differ from each other (two quick picks can return the same one)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
