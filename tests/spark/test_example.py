"""The Spark example as shipped: its manifests are valid and its job computes the right totals."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from jetstream_operator import API_VERSION
from jetstream_operator.api.stream import StreamSpec

from .helpers import create_stream, run, stored_messages, unique

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"spark_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_manifests_are_valid_streams() -> None:
    documents = list(yaml.safe_load_all((EXAMPLE / "streams.yaml").read_text()))
    specs = {doc["metadata"]["name"]: StreamSpec.model_validate(doc["spec"]) for doc in documents}
    assert all(doc["apiVersion"] == API_VERSION and doc["kind"] == "Stream" for doc in documents)
    assert specs["orders"].name == "ORDERS" and specs["orders"].subjects == ["orders.>"]
    assert specs["order-totals"].name == "ORDER_TOTALS"
    assert specs["order-totals"].subjects == ["totals.>"]
    assert all(spec.allow_direct and spec.duplicate_window for spec in specs.values())


@pytest.mark.spark
@pytest.mark.integration
def test_job_writes_customer_totals(spark: Any, nats_server: Any, tmp_path: Path) -> None:
    producer, job = _load("producer"), _load("order_totals")
    url, prefix = nats_server.url, unique("ex").lower()
    orders_stream, totals_stream = unique("ORDERS"), unique("ORDER_TOTALS")
    create_stream(url, orders_stream, [f"{prefix}.orders.>"], allow_direct=True)
    create_stream(url, totals_stream, [f"{prefix}.totals.>"], allow_direct=True)
    orders = producer.sample_orders(400, customers=6, seed=7)
    run(producer.produce(url, orders, subject_prefix=f"{prefix}.orders"))

    query = job.start_job(
        spark,
        servers=url,
        checkpoint=str(tmp_path / "checkpoint"),
        orders_stream=orders_stream,
        totals_subject_prefix=f"{prefix}.totals",
        available_now=True,
    )
    assert query.awaitTermination(180)
    assert query.exception() is None

    expected: dict[str, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for order in orders:
        count, total = expected[order.customer]
        expected[order.customer] = (count + 1, total + order.amount_cents)
    latest: dict[str, dict[str, Any]] = {}
    for _, subject, data, headers in stored_messages(url, totals_stream):
        latest[subject] = json.loads(data)
        assert headers["Nats-Msg-Id"].endswith(f":0:{latest[subject]['customer']}")
    assert {
        subject: (total["orders"], total["total_cents"]) for subject, total in latest.items()
    } == {f"{prefix}.totals.{customer}": value for customer, value in expected.items()}
