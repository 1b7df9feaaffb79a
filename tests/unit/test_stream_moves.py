"""A placement change is reported as a move while the stream's Raft group holds more peers than
its replicas. The shapes are nats-server 2.12.8's answers during a move of an R1 stream with
50 MB from node 0 to node 1 on the 3-node test cluster."""

from __future__ import annotations

from typing import Any

from jetstream_operator.reconcile.live_state import move_in_progress


def info(replicas: int, leader: str | None, peers: list[tuple[str, bool]]) -> dict[str, Any]:
    cluster: dict[str, Any] = {"name": "c"}
    if leader:
        cluster["leader"] = leader
    if peers:
        cluster["replicas"] = [{"name": name, "current": current} for name, current in peers]
    return {"config": {"num_replicas": replicas}, "cluster": cluster}


def test_a_move_shows_from_the_update_reply_until_the_old_peer_left() -> None:
    update_reply = info(1, None, [("nats-0", True), ("nats-1", False)])
    assert move_in_progress(update_reply) == (
        "moving between servers: 2 peers for 1 replica (nats-0, nats-1); catching up: nats-1"
    )
    caught_up = info(1, "nats-1", [("nats-0", True)])
    assert move_in_progress(caught_up) == (
        "moving between servers: 2 peers for 1 replica (nats-0, nats-1)"
    )
    assert move_in_progress(info(1, "nats-1", [])) is None


def test_replicated_streams_and_single_servers_are_not_moving() -> None:
    assert move_in_progress(info(3, "nats-0", [("nats-1", True), ("nats-2", False)])) is None
    assert move_in_progress({"config": {"num_replicas": 1}}) is None
    assert move_in_progress({}) is None
    four = info(3, "nats-0", [("nats-1", True), ("nats-2", True), ("nats-3", False)])
    assert move_in_progress(four) is not None
