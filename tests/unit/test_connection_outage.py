"""A connection's check reads an outage as an outage: Reconciling, retried, never Stalled; only
what a person must fix (credentials, TLS, JetStream off where a server answers) stalls it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jetstream_operator.handlers.connection_check import probe
from jetstream_operator.nats.jsapi import JetStreamNotEnabled, JetStreamUnavailable
from jetstream_operator.nats.pool import ConnectFailure, ConnectionTarget

TARGET = ConnectionTarget(("nats://127.0.0.1:4222",))


class FailingPool:
    def __init__(self, connect: Exception | None = None, ask: Exception | None = None) -> None:
        self._connect, self._ask = connect, ask

    async def connection(self, target: ConnectionTarget) -> Any:
        if self._connect is not None:
            raise self._connect
        return object()

    async def jetstream(self, target: ConnectionTarget) -> Any:
        failure = self._ask

        class Api:
            async def request(self, subject: str) -> dict[str, Any]:
                assert failure is not None
                raise failure

        return Api()


@pytest.mark.parametrize(
    ("pool", "reason", "stalled"),
    [
        (
            FailingPool(connect=ConnectFailure("Unreachable", "cannot reach NATS")),
            "Unreachable",
            False,
        ),
        (FailingPool(ask=JetStreamUnavailable("did not answer in time")), "NatsUnavailable", False),
        (FailingPool(connect=ConnectFailure("AuthFailed", "refused")), "AuthFailed", True),
        (FailingPool(connect=ConnectFailure("TLSFailed", "bad CA")), "TLSFailed", True),
        (FailingPool(ask=JetStreamNotEnabled("no JetStream responded")), "NoJetStream", True),
    ],
)
def test_an_outage_is_reconciling_and_a_mistake_is_stalled(
    pool: FailingPool, reason: str, stalled: bool
) -> None:
    result = asyncio.run(probe(TARGET, pool))  # type: ignore[arg-type]  # the two methods used
    assert (result.outcome.reason, result.outcome.stalled) == (reason, stalled)
    assert not result.outcome.ready and result.retry
