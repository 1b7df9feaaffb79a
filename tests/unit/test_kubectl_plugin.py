"""The pure parts of `kubectl jetstream`: sizes for people, streams with their consumers, and
an explanation from the reason list."""

from __future__ import annotations

from typing import Any

from jetstream_operator.kubectl_plugin import Listing, status_lines, why_lines
from jetstream_operator.reconcile.live_state import human_bytes, stream_live_state


def ready(reason: str, status: str = "True", message: str = "m") -> dict[str, Any]:
    return {
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]
    }


def test_sizes_are_for_people() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1536, 5 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "5.0 GiB",
    ]
    assert human_bytes(None) == "-"
    assert human_bytes(3 * 1024**4) == "3.0 TiB"


def test_kubectl_get_shows_the_size_the_status_holds() -> None:
    """status.size is what the SIZE column of `kubectl get` prints (a column cannot format)."""
    live = stream_live_state({"config": {"name": "S"}, "state": {"bytes": 1536, "messages": 2}})
    assert (live["bytes"], live["size"]) == (1536, "1.5 KiB")


def test_consumers_are_listed_under_their_stream() -> None:
    stream = {
        "metadata": {"name": "orders", "namespace": "a"},
        "spec": {"name": "ORDERS"},
        "status": {**ready("Synced"), "streamName": "ORDERS", "messages": 12, "bytes": 2048},
    }
    consumer = {
        "metadata": {"name": "worker", "namespace": "a"},
        "spec": {"durableName": "worker", "streamName": "ORDERS"},
        "status": {**ready("Synced"), "numPending": 7, "numAckPending": 2},
    }
    stray = {
        "metadata": {"name": "lost", "namespace": "a"},
        "spec": {"durableName": "lost", "streamName": "GONE"},
        "status": ready("StreamNotFound", "False"),
    }
    listing = Listing("a", {"streams": [stream], "consumers": [stray, consumer]})
    lines = status_lines(listing, all_namespaces=False)
    assert lines[1] == "stream/orders  ORDERS  True Synced  12  2.0 KiB  -  default"
    assert lines[2] == "  consumer/worker  worker  True Synced  -  -  7 (2 unacked)  default"
    assert lines[3] == "consumer/lost  lost  False StreamNotFound  -  -  -  default"


def test_why_says_what_the_reason_list_says() -> None:
    body = {
        "kind": "Stream",
        "metadata": {"name": "orders", "namespace": "a"},
        "status": ready("Conflict", "False", "stream 'ORDERS' already exists"),
    }
    event = {"type": "Warning", "reason": "Conflict", "message": "taken", "lastTimestamp": "t"}
    lines = why_lines(body, [event])
    assert lines[1] == "Not ready: Conflict: stream 'ORDERS' already exists"
    assert any(line.startswith("What to do: choose another `spec.name`") for line in lines)
    assert lines[-1] == "  t Warning Conflict: taken"


def test_a_paused_resource_as_declared_is_said_to_be_so() -> None:
    body = {
        "kind": "Stream",
        "metadata": {"name": "o", "namespace": "a"},
        "status": ready("Paused"),
    }
    lines = why_lines(body, [])
    assert lines[1] == "Paused, as declared: Paused: m"
    assert any(line.startswith("What to do: remove the annotation") for line in lines)
