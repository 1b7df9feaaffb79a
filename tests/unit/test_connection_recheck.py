"""When a NatsConnection's recheck asks JetStream again, and the domain its prefix names."""

from __future__ import annotations

import pytest

from jetstream_operator.handlers.connection_check import domain_of, probe_due
from jetstream_operator.nats.pool import AuthMaterial, ConnectionTarget

TARGET = ConnectionTarget(("nats://127.0.0.1:4222",), auth=AuthMaterial("token", "", "a"))
ROTATED = ConnectionTarget(("nats://127.0.0.1:4222",), auth=AuthMaterial("token", "", "b"))


def due(**overrides: object) -> bool:
    arguments: dict[str, object] = {
        "target": TARGET,
        "working": TARGET,
        "connected": True,
        "probed_at": 100.0,
        "now": 110.0,
        "refresh": 60.0,
    }
    arguments.update(overrides)
    return probe_due(**arguments)  # type: ignore[arg-type]


def test_a_steady_connection_is_not_asked_again_before_the_refresh() -> None:
    assert not due()
    assert not due(now=159.9)


def test_account_usage_is_refreshed_when_due() -> None:
    assert due(now=160.0)


@pytest.mark.parametrize(
    "change",
    [
        {"target": ROTATED},  # a Secret changed
        {"working": None},  # never worked, or forgotten
        {"connected": False},  # the pooled connection is down or reconnecting
        {"probed_at": None},  # the last check failed
        {"account_changed": True},  # the operator created or deleted something through it
    ],
)
def test_any_change_is_checked_at_once(change: dict[str, object]) -> None:
    assert due(**change)


def test_the_label_alone_is_no_change() -> None:
    relabelled = ConnectionTarget(TARGET.servers, auth=TARGET.auth, label="ns/other")
    assert not due(target=relabelled)


@pytest.mark.parametrize(
    ("prefix", "domain"),
    [("$JS.API", None), ("$JS.hub.API", "hub"), ("$JS.hub.leaf.API", None), ("JS.x.API", None)],
)
def test_domain_of_prefix(prefix: str, domain: str | None) -> None:
    assert domain_of(prefix) == domain
