"""Objects as the NATS clients make them, and how to compare them before and after adoption,
for the tests holding adoption to its rule: nothing but the owner record changes."""

from __future__ import annotations

from typing import Any

from jetstream_operator.reconcile.ownership import RECORD_KEYS

S = 1_000_000_000


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """A config without the operator's records (owner, retained-by) and the server's
    `_nats.*` bookkeeping."""
    metadata = {
        key: value
        for key, value in (config.get("metadata") or {}).items()
        if key not in RECORD_KEYS and not key.startswith("_nats")
    }
    return {**config, "metadata": metadata}


def nats_go_kv(bucket: str, **changes: Any) -> dict[str, Any]:
    """The create request nats.go's prepareKeyValueConfig sends (NACK's controller uses it), for
    what nats-py cannot say: compression, metadata, mirrors and sources."""
    request: dict[str, Any] = {
        "name": f"KV_{bucket}",
        "subjects": [f"$KV.{bucket}.>"],
        "max_msgs_per_subject": 1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": -1,
        "storage": "file",
        "num_replicas": 1,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "duplicate_window": 120 * S,
        "max_msgs": -1,
        "max_consumers": -1,
        "allow_direct": True,
        "compression": "none",
        "discard": "new",
    }
    request |= changes
    if 0 < request["max_age"] < request["duplicate_window"]:
        request["duplicate_window"] = request["max_age"]  # as nats.go: the ttl when shorter
    return request


def nats_go_obj(bucket: str, **changes: Any) -> dict[str, Any]:
    """The create request of nats.go's prepareObjectStoreConfig."""
    request = {
        "name": f"OBJ_{bucket}",
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "max_age": 0,
        "max_bytes": -1,
        "storage": "file",
        "num_replicas": 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": "none",
    }
    return request | changes
