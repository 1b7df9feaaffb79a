"""Consumer specs, server answers and ownership marks shared by test_consumer_config.py and
test_consumer_plan.py.

The server answers are shaped as recorded from nats-server 2.12.8, which leaves out false, "", 0,
empty lists and priority_policy "none", and adds `_nats.*` metadata.
"""

from typing import Any

from jetstream_operator.api.consumer import ConsumerSpec
from jetstream_operator.reconcile.consumer_config import (
    desired_consumer_config,
)
from jetstream_operator.reconcile.ownership import Owner

OWNER = Owner("default", "orders-worker", "uid-1")
SERVER_METADATA = {"_nats.level": "3", "_nats.req.level": "0", "_nats.ver": "2.12.8"}


def spec(**fields: Any) -> ConsumerSpec:
    return ConsumerSpec.model_validate({"durableName": "worker", "streamName": "ORDERS", **fields})


def desired(**fields: Any) -> dict[str, Any]:
    return desired_consumer_config(spec(**fields), OWNER, "ORDERS")


def server_view(config: dict[str, Any]) -> dict[str, Any]:
    """What the server answers for a config it accepted: zero values left out, metadata added."""
    shown = {
        key: value
        for key, value in config.items()
        if value not in (None, False, "", [], {}) and (value != 0 or key == "num_replicas")
    }
    if shown.get("priority_policy") == "none":
        del shown["priority_policy"]
    shown["metadata"] = {**config["metadata"], **SERVER_METADATA}
    return shown


def info(config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"stream_name": "ORDERS", "name": config["name"], "config": config, **extra}


# -- drift ---------------------------------------------------------------------------------------

RECORDED_PULL = {
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "deliver_policy": "all",
    "durable_name": "worker",
    "max_ack_pending": 1000,
    "max_deliver": -1,
    "max_waiting": 512,
    "name": "worker",
    "num_replicas": 0,
    "replay_policy": "instant",
}
RECORDED_PUSH = {
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "deliver_policy": "all",
    "deliver_subject": "deliver.orders",
    "durable_name": "worker",
    "flow_control": True,
    "idle_heartbeat": 5_000_000_000,
    "max_ack_pending": 1000,
    "max_deliver": -1,
    "name": "worker",
    "num_replicas": 0,
    "replay_policy": "instant",
}
