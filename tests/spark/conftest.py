"""A local[2] SparkSession for the jetstream data source tests, shared by the whole session.

Python workers must run this interpreter (it has pyarrow and jetstream_spark), and everything
binds to loopback: the test machines have no other network.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spark: runs a local[2] SparkSession (a JVM) with the jetstream data source"
    )


@pytest.fixture(scope="module", autouse=True)
def _delete_test_streams() -> Iterator[None]:
    """Leave the session's shared nats-server as the other tests expect to find it (per
    module, so the server is still up)."""
    from .helpers import delete_created_streams

    yield
    delete_created_streams()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # every Spark socket on loopback
    from pyspark.sql import SparkSession

    from jetstream_spark import register

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("jetstream-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.pyspark.python", sys.executable)
        # A loaded test machine can take over the default 15 s to start a Python worker.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
