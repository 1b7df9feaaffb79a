from datetime import UTC, datetime, timedelta

from jetstream_operator.k8s.peering import outranked

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def peer(priority: int, seconds_ago: int = 1, lifetime: int = 60) -> dict[str, object]:
    seen = NOW - timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


def test_alone_is_active() -> None:
    assert not outranked({"me": peer(10)}, "me", 10, NOW)


def test_higher_or_equal_live_peer_outranks() -> None:
    assert outranked({"me": peer(10), "other": peer(20)}, "me", 10, NOW)
    assert outranked({"me": peer(10), "other": peer(10)}, "me", 10, NOW)
    assert not outranked({"me": peer(10), "other": peer(5)}, "me", 10, NOW)


def test_dead_peers_do_not_count() -> None:
    assert not outranked({"other": peer(20, seconds_ago=120, lifetime=60)}, "me", 10, NOW)
